// The device work each launch started, by correlation id: how a host range on a GPU rank is
// timed by the work it launched (as Nsight Systems projects NVTX ranges onto the GPU). Passes
// (passes.cpp) take every kind of device work; collectives (collectives.cpp) their kernels.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/analysis/correlation_map.h"
#include "core/analysis/intervals.h"
#include "core/analysis/run_trace.h"

namespace fulcrum::analysis {

// The span, from first start to last end, of the events on `rank`'s device lanes that
// `counted(event)` accepts, by the correlation id of the launch that started them. Empty for
// a rank without device lanes.
template <typename Counted>
CorrelationMap<Interval> device_work_by_launch(const RankTrace& rank, Counted counted) {
    std::vector<std::pair<std::int64_t, Interval>> spans;
    for (const LaneTrace& lane : rank.lanes) {
        if (lane.info.kind != LaneKind::gpu_stream) {
            continue;
        }
        for (const Event& event : lane.events) {
            if (event.correlation >= 0 && counted(event)) {
                spans.emplace_back(event.correlation, Interval{event.start_ns, event.end_ns});
            }
        }
    }
    return CorrelationMap<Interval>(std::move(spans), [](Interval& span, const Interval& more) {
        span.start = std::min(span.start, more.start);
        span.end = std::max(span.end, more.end);
    });
}

}  // namespace fulcrum::analysis
