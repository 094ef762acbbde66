// Step breakdown: where each rank's step time went.
//
// For rank r and step k, the window is the rank's `step` range. Within it (activity.h):
//     compute        = |C|
//     overlapped     = |M ∩ C|      communication hidden behind compute (other streams)
//     exposed        = |M − C|      communication the rank waited on
//     other          = |O − C − M|  copies and runtime work not hidden by either
//     idle           = wall − |C ∪ M ∪ O|
// so compute + exposed + other + idle = wall. On a CPU rank nothing overlaps (one thread),
// and a pipeline receive or a collective's wait for a slower rank is exposed communication.
#pragma once

#include <cstdint>
#include <vector>

#include "core/analysis/run_trace.h"

namespace fulcrum::analysis {

struct StepBreakdown {
    std::int32_t rank = 0;
    std::int32_t step = 0;
    std::int64_t start_ns = 0;
    std::int64_t end_ns = 0;
    std::int64_t compute_ns = 0;
    std::int64_t overlapped_communication_ns = 0;
    std::int64_t exposed_communication_ns = 0;
    std::int64_t other_ns = 0;
    std::int64_t idle_ns = 0;

    std::int64_t wall_ns() const { return end_ns - start_ns; }
};

// One row per (rank, step range), ordered by rank then step.
std::vector<StepBreakdown> step_breakdown(const RunTrace& trace);

}  // namespace fulcrum::analysis
