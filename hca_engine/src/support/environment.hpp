// Switches in the engine's environment (SOFTHCA_*): each turns a fast path off, for
// measuring it or for a host where it misbehaves.
#pragma once

namespace softhca::engine {

// A fast path the engine's environment may turn off: on unless `name` is set to "0"
// (SOFTHCA_SHARED_MAPPING, SOFTHCA_STAGE_RECEIVES, SOFTHCA_CROSS_MEMORY,
// SOFTHCA_ENGINE_YIELD, SOFTHCA_UDP_GSO, SOFTHCA_UDP_GRO). Read once per name by its caller.
bool environment_switch_on(const char* name);

} // namespace softhca::engine
