#include "core/analysis/host_ranges.h"

#include <optional>

#include "core/analysis/passes.h"

namespace fulcrum::analysis {

RankRanges RankRanges::of(const RunTrace& trace, const RankTrace& rank) {
    RankRanges out;
    out.rank = rank.info.rank;
    for (const LaneTrace& lane : rank.lanes) {
        const bool host = lane.info.kind == LaneKind::host_thread;
        std::optional<CpuMarks> marks;
        for (const Event& event : lane.events) {
            const Role role = trace.role(event);
            if (role == Role::pipeline_send || role == Role::pipeline_recv) {
                out.transfers.push_back({event.name, event.step, event.microbatch, event.stage,
                                         role, event.start_ns, event.end_ns, event.bytes});
                continue;
            }
            if (event.kind == EventKind::mark) {
                continue;
            }
            if (role == Role::step) {
                out.steps.push_back({step_of_range(event, trace.name(event.name)), event.start_ns,
                                     event.end_ns, -1, host});
            } else if (role == Role::optimizer) {
                if (!marks) {
                    marks.emplace(trace, lane);
                }
                out.optimizers.push_back(
                    {event.step, event.start_ns, event.end_ns, marks->after(event.end_ns), host});
            }
        }
    }
    // Kept until every rank is read: no slack from growing by doubling.
    out.transfers.shrink_to_fit();
    out.steps.shrink_to_fit();
    out.optimizers.shrink_to_fit();
    return out;
}

std::vector<RankRanges> rank_ranges(const RunTrace& trace) {
    std::vector<RankRanges> ranges;
    ranges.reserve(trace.ranks.size());
    for (const RankTrace& rank : trace.ranks) {
        ranges.push_back(RankRanges::of(trace, rank));
    }
    return ranges;
}

}  // namespace fulcrum::analysis
