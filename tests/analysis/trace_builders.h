// Small helpers for hand-built RunTraces in the analysis diff tests.
#pragma once

#include "core/analysis/run_trace.h"

namespace fulcrum::analysis::builders {

// A rank of the 4D grid at (dp, tp, pp, cp).
inline void add_rank(RunTrace& trace, int rank, int dp, int tp, int pp, int cp) {
    RankInfo info;
    info.rank = rank;
    info.dp = dp;
    info.tp = tp;
    info.pp = pp;
    info.cp = cp;
    trace.add_rank(info);
}

// The rank's host lane "main", made on first use.
inline LaneTrace& host(RunTrace& trace, int rank) {
    RankTrace& r = *trace.find_rank(rank);
    if (r.lanes.empty()) {
        return trace.add_lane(rank, LaneKind::host_thread, "main");
    }
    return r.lanes.front();
}

}  // namespace fulcrum::analysis::builders
