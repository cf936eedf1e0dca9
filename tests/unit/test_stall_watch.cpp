// Engine support room: the stall watch's slots and cut-off list (its aborts:
// tests/security/test_fuse_memory.sh).
#include "stall_watch.hpp"

#include <catch2/catch.hpp>

using softhca::engine::StallWatch;

TEST_CASE("stall watch: nobody is cut off until the watch aborts a FUSE connection") {
    CHECK_FALSE(StallWatch::cut_off(0));
    CHECK_FALSE(StallWatch::cut_off(65534));
    CHECK(StallWatch::aborted() == 0);
    CHECK(StallWatch::penalty_epoch() == 0);
}

TEST_CASE("stall watch: a slot reads under way exactly while a touch, nested or not, lasts") {
    const StallWatch::Owner owner{-1, 65534, 65534};
    CHECK((StallWatch::sequence_of_this_thread() & 1) == 0);
    {
        const StallWatch::Touch outer(owner, 0x1000);
        CHECK((StallWatch::sequence_of_this_thread() & 1) == 1);
        {
            const StallWatch::Touch inner(owner, 0x2000);
            CHECK((StallWatch::sequence_of_this_thread() & 1) == 1);
        }
        // The inner touch ended, the outer has not: still under way.
        CHECK((StallWatch::sequence_of_this_thread() & 1) == 1);
    }
    const uint64_t after = StallWatch::sequence_of_this_thread();
    CHECK((after & 1) == 0);
    // One more touch moves the sequence on by two: each touch is seen as a new one.
    { const StallWatch::Touch again(owner); }
    CHECK(StallWatch::sequence_of_this_thread() == after + 2);
}
