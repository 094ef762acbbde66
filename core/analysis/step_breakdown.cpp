#include "core/analysis/step_breakdown.h"

#include <algorithm>
#include <tuple>

#include "core/analysis/activity.h"

namespace fulcrum::analysis {

std::vector<StepBreakdown> step_breakdown(const RunTrace& trace) {
    std::vector<StepBreakdown> rows;
    for (const RankTrace& rank : trace.ranks) {
        std::vector<StepBreakdown> steps;
        for (const LaneTrace& lane : rank.lanes) {
            if (lane.info.kind != LaneKind::host_thread) {
                continue;
            }
            for (const Event& event : lane.events) {
                if (trace.role(event) == Role::step && event.kind == EventKind::range) {
                    StepBreakdown row;
                    row.rank = rank.info.rank;
                    row.step = event.step;
                    row.start_ns = event.start_ns;
                    row.end_ns = event.end_ns;
                    steps.push_back(row);
                }
            }
        }
        if (steps.empty()) {
            continue;
        }
        const RankActivity activity = rank_activity(rank);
        for (StepBreakdown& row : steps) {
            const IntervalSet compute = activity.compute.clipped(row.start_ns, row.end_ns);
            const IntervalSet communication =
                activity.communication.clipped(row.start_ns, row.end_ns);
            const IntervalSet other = activity.other.united(activity.copy).clipped(row.start_ns, row.end_ns);
            row.compute_ns = compute.total();
            row.overlapped_communication_ns = communication.overlap(compute);
            row.exposed_communication_ns = communication.total() - row.overlapped_communication_ns;
            const IntervalSet busy = compute.united(communication);
            row.other_ns = other.total() - other.overlap(busy);
            row.idle_ns = row.wall_ns() - busy.total() - row.other_ns;
        }
        rows.insert(rows.end(), steps.begin(), steps.end());
    }
    std::stable_sort(rows.begin(), rows.end(), [](const StepBreakdown& a, const StepBreakdown& b) {
        return std::tie(a.rank, a.step, a.start_ns) < std::tie(b.rank, b.step, b.start_ns);
    });
    return rows;
}

}  // namespace fulcrum::analysis
