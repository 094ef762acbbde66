#include "core/analysis/step_breakdown.h"

#include <algorithm>
#include <cstdint>
#include <tuple>

#include "core/analysis/activity.h"

namespace fulcrum::analysis {

namespace {

// The rank's whole trace as one window: its first event's start to its last event's end.
// None for a rank whose events span no time (none, or only marks at one instant).
std::optional<StepBreakdown> whole_trace_window(const RankTrace& rank) {
    std::int64_t start = INT64_MAX, end = INT64_MIN;
    for (const LaneTrace& lane : rank.lanes) {
        for (const Event& event : lane.events) {
            start = std::min(start, event.start_ns);
            end = std::max(end, event.end_ns);
        }
    }
    if (start >= end) {
        return std::nullopt;
    }
    StepBreakdown row;
    row.rank = rank.info.rank;
    row.whole_trace = true;
    row.start_ns = start;
    row.end_ns = end;
    return row;
}

}  // namespace

void rank_step_breakdown(const RunTrace& trace, const RankTrace& rank, const RankActivity& activity,
                         std::vector<StepBreakdown>& rows) {
    std::vector<StepBreakdown> steps;
    for (const LaneTrace& lane : rank.lanes) {
        if (lane.info.kind != LaneKind::host_thread) {
            continue;
        }
        for (const Event& event : lane.events) {
            if (trace.role(event) == Role::step && event.kind == EventKind::range) {
                StepBreakdown row;
                row.rank = rank.info.rank;
                if (const std::int32_t step = step_of_range(event, trace.name(event.name));
                    step >= 0) {
                    row.step = step;
                }
                row.start_ns = event.start_ns;
                row.end_ns = event.end_ns;
                steps.push_back(row);
            }
        }
    }
    if (steps.empty()) {
        const auto whole = whole_trace_window(rank);
        if (!whole) {
            return;
        }
        steps.push_back(*whole);
    }
    for (StepBreakdown& row : steps) {
        const IntervalSet compute = activity.compute.clipped(row.start_ns, row.end_ns);
        const IntervalSet communication = activity.communication.clipped(row.start_ns, row.end_ns);
        const IntervalSet other =
            activity.other.united(activity.copy).clipped(row.start_ns, row.end_ns);
        row.compute_ns = compute.total();
        row.overlapped_communication_ns = communication.overlap(compute);
        row.exposed_communication_ns = communication.total() - row.overlapped_communication_ns;
        const IntervalSet busy = compute.united(communication);
        row.other_ns = other.total() - other.overlap(busy);
        row.idle_ns = row.wall_ns() - busy.total() - row.other_ns;
    }
    std::stable_sort(steps.begin(), steps.end(),
                     [](const StepBreakdown& a, const StepBreakdown& b) {
                         return std::tie(a.step, a.start_ns) < std::tie(b.step, b.start_ns);
                     });
    rows.insert(rows.end(), steps.begin(), steps.end());
}

std::vector<StepBreakdown> step_breakdown(const RunTrace& trace) {
    std::vector<StepBreakdown> rows;
    for (const RankTrace& rank : trace.ranks) {
        rank_step_breakdown(trace, rank, rank_activity(rank), rows);
    }
    return rows;
}

void BreakdownTotal::add(const StepBreakdown& row) {
    ++ranks;
    wall_ns += row.wall_ns();
    max_wall_ns = std::max(max_wall_ns, row.wall_ns());
    compute_ns += row.compute_ns;
    overlapped_ns += row.overlapped_communication_ns;
    exposed_ns += row.exposed_communication_ns;
    other_ns += row.other_ns;
    idle_ns += row.idle_ns;
}

void BreakdownTotal::add(const BreakdownTotal& total) {
    ranks += total.ranks;
    wall_ns += total.wall_ns;
    max_wall_ns = std::max(max_wall_ns, total.max_wall_ns);
    compute_ns += total.compute_ns;
    overlapped_ns += total.overlapped_ns;
    exposed_ns += total.exposed_ns;
    other_ns += total.other_ns;
    idle_ns += total.idle_ns;
}

std::map<StepKey, BreakdownTotal> breakdown_by_step(const std::vector<StepBreakdown>& rows) {
    std::map<StepKey, BreakdownTotal> by_step;
    for (const StepBreakdown& row : rows) {
        by_step[{row.whole_trace, row.step}].add(row);
    }
    return by_step;
}

}  // namespace fulcrum::analysis
