// `softhca sample`: the engine's counters and queue depths sampled over time to a CSV, for
// plots (tools/bench-congestion.sh) and for looking back at a run.
#pragma once

#include "instance.hpp"

#include <string>
#include <vector>

namespace softhca::tools {

//   softhca sample [--interval SECONDS] [--count N] [--output FILE]
// Writes "time_s,object,field,value" rows (a header first): every interval, for each
// device ("device:NAME") its counters and its shaped link's queue ("queue_bytes",
// "dropped", "marked", ...), and for each QP ("qp:DEVICE/QPN") its counters and its
// DCQCN state ("rate_mbps", "cnps_received", ...). Values are as the engine counts them
// (totals, not rates); time_s counts from the first sample. Returns the exit status.
int cmd_sample(const Instance& instance, const std::vector<std::string>& args);

} // namespace softhca::tools
