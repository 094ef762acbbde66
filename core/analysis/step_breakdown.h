// Step breakdown: where each rank's step time went.
//
// For rank r and step k, the window is the rank's `step` range. A rank without any `step`
// range (a trace recorded without ProfilerStep or the fulcrum annotations) gets one window
// over its whole trace, from its first event to the end of its last, as HTA's temporal
// breakdown does for a trace without iterations; that row has no step number. Within the
// window (activity.h):
//     compute        = |C|
//     overlapped     = |M ∩ C|      communication hidden behind compute (other streams)
//     exposed        = |M − C|      communication the rank waited on
//     other          = |O − C − M|  copies and runtime work not hidden by either
//     idle           = wall − |C ∪ M ∪ O|
// so compute + exposed + other + idle = wall. On a CPU rank nothing overlaps (one thread),
// and a pipeline receive or a collective's wait for a slower rank is exposed communication.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "core/analysis/activity.h"
#include "core/analysis/run_trace.h"

namespace fulcrum::analysis {

struct StepBreakdown {
    std::int32_t rank = 0;
    // The step's number; absent for the whole-trace window and for a `step` range that
    // carries no number.
    std::optional<std::int32_t> step;
    // The window is the rank's whole trace: it recorded no `step` range.
    bool whole_trace = false;
    std::int64_t start_ns = 0;
    std::int64_t end_ns = 0;
    std::int64_t compute_ns = 0;
    std::int64_t overlapped_communication_ns = 0;
    std::int64_t exposed_communication_ns = 0;
    std::int64_t other_ns = 0;
    std::int64_t idle_ns = 0;

    std::int64_t wall_ns() const { return end_ns - start_ns; }
};

// One row per (rank, step range), or one whole-trace row for a rank without step ranges;
// ordered by rank then step.
std::vector<StepBreakdown> step_breakdown(const RunTrace& trace);
// One rank's rows, appended in step order (step_breakdown rank by rank), with the rank's
// activity (rank_activity) computed once for every analysis that needs it.
void rank_step_breakdown(const RunTrace& trace, const RankTrace& rank, const RankActivity& activity,
                         std::vector<StepBreakdown>& rows);

// Rows added up over ranks (or steps): what `fulcrum analyze`, the report and the GUI show
// per step, from this one place.
struct BreakdownTotal {
    std::int64_t ranks = 0;  // rows added
    std::int64_t wall_ns = 0, max_wall_ns = 0, compute_ns = 0, overlapped_ns = 0, exposed_ns = 0,
                 other_ns = 0, idle_ns = 0;
    void add(const StepBreakdown& row);
    void add(const BreakdownTotal& total);
    double mean(std::int64_t sum) const { return ranks > 0 ? double(sum) / double(ranks) : 0.0; }
};

// A step of the breakdown: its number, none for a step range without one, or the window over
// a rank's whole trace.
struct StepKey {
    bool whole_trace = false;
    std::optional<std::int32_t> step;
    friend auto operator<=>(const StepKey&, const StepKey&) = default;
};

std::map<StepKey, BreakdownTotal> breakdown_by_step(const std::vector<StepBreakdown>& rows);

}  // namespace fulcrum::analysis
