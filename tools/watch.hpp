// `softhca watch`: the engine's counters as rates per second, every interval, the analogue
// of `rdma statistic` and `ethtool -S` watched over time.
#pragma once

#include "instance.hpp"

#include <string>
#include <vector>

namespace softhca::tools {

//   softhca watch [--interval SECONDS] [--count N]   (args: what follows the command)
// Prints one block per interval: per device the packet and byte rates and every other
// counter that moved, per QP the counters that moved. Returns the exit status.
int cmd_watch(const Instance& instance, const std::vector<std::string>& args);

} // namespace softhca::tools
