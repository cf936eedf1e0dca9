// The card's free-running clock: CLOCK_MONOTONIC in nanoseconds, the clock the engine
// stamps completions with (CompletionEntry::completion_ns), so hca_core_clock is 1 GHz.
// Both run on one host, so the provider reads the very clock the card keeps.
#include "provider.hpp"

#include <time.h>

namespace softhca::provider {

namespace {
uint64_t ns(const timespec& ts) {
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}
} // namespace

uint64_t realtime_offset_ns() {
    timespec mono{}, real{};
    clock_gettime(CLOCK_MONOTONIC, &mono);
    clock_gettime(CLOCK_REALTIME, &real);
    return ns(real) - ns(mono);
}

int query_rt_values(ibv_context* context, ibv_values_ex* values) {
    if (state_of(context).control.dead())
        return EIO;
    // IBV_VALUES_MASK_RAW_CLOCK is the only value there is; what else is asked for is
    // left out of the returned mask, as ibv_query_rt_values_ex(3) says.
    const uint32_t asked = values->comp_mask;
    values->comp_mask = 0;
    if (asked & IBV_VALUES_MASK_RAW_CLOCK) {
        clock_gettime(CLOCK_MONOTONIC, &values->raw_clock);
        values->comp_mask |= IBV_VALUES_MASK_RAW_CLOCK;
    }
    return 0;
}

} // namespace softhca::provider
