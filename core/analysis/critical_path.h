// The critical path of a step across ranks: the chain of passes, pipeline hand-overs and
// collectives that set the step's length, and how much shorter the step would be if one pass
// on it had taken its stage's usual time (docs/analyses.md, "Critical path").
//
// Walking back from the end of the step (the rank whose optimizer finished last):
//   the optimizer and, before it, the DP all-reduce — the rank that arrived last at it is
//   the one everybody waited for, so the path moves to it;
//   a pass waited either for the pass before it on its rank or for its pipeline input (the
//   same micro-batch's forward on the previous stage, or its backward on the next): the one
//   that ended later is its predecessor; the time between the predecessor's end and the
//   pass's own end is the pass's share, the rest of the hand-over is a pipeline transfer;
//   within a CP (or TP) group the passes of one micro-batch run in lockstep, meeting in their
//   collectives: the member that waited least in them held the others up, so the path runs
//   through it.
// Every part of the path is one segment in time order; they tile [step start, step end]
// except where the path starts after the step's own start (a rank's set-up before its first
// pass), which is `before first pass`.
//
// What-if: the step's pipelines replayed (core/parallel/replay.h) with the measured busy time
// of every pass, and again with one critical pass at its stage and phase's mean: the step
// shrinks by the difference in the pipeline's makespan. The passes that shrink it most are
// the ones to look at.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/analysis/host_ranges.h"
#include "core/analysis/matched_collectives.h"
#include "core/analysis/pass_table.h"
#include "core/analysis/run_trace.h"

namespace fulcrum::analysis {

struct CriticalSegment {
    std::int32_t rank = 0;
    std::string what;  // "forward", "backward", "pipeline transfer", "dp all-reduce gradients",
                       // "optimizer", ...
    std::int32_t microbatch = -1;
    std::int16_t stage = -1;
    std::int64_t start_ns = 0;
    std::int64_t end_ns = 0;
    // A pass's segment: its step and phase, so that a view can find the pass
    // (rank, step, micro-batch, phase); none for the rest.
    std::int32_t step = -1;
    Phase phase = Phase::none;
    std::int64_t duration_ns() const { return end_ns - start_ns; }
    bool is_pass() const { return phase != Phase::none; }
};

struct WhatIf {
    std::int32_t rank = 0;
    std::int32_t microbatch = 0;
    std::int16_t stage = 0;
    Phase phase = Phase::forward;
    std::int64_t busy_ns = 0;         // the pass as measured (less its pipeline wait)
    std::int64_t typical_ns = 0;      // its stage and phase's mean in the step
    std::int64_t step_saving_ns = 0;  // the pipeline's makespan, replayed, less with the mean
};

struct CriticalPath {
    std::int32_t step = 0;
    std::int64_t start_ns = 0;
    std::int64_t end_ns = 0;
    std::vector<CriticalSegment> segments;  // in time order
    // Shares of the path (ns), by rank, pipeline stage, micro-batch and what.
    std::map<std::int32_t, std::int64_t> by_rank;
    std::map<int, std::int64_t> by_stage;
    std::map<std::int32_t, std::int64_t> by_microbatch;
    std::map<std::string, std::int64_t> by_what;
    std::vector<WhatIf> what_if;  // the critical passes, the largest saving first
};

// One path per step that has passes (forward/backward ranges); empty without them.
// `collectives` is matched_collectives(trace) and `ranges` rank_ranges(trace) when the caller
// has them (matching is the costly part; a run read a rank at a time has no events to read
// them from); null: read from the trace here.
std::vector<CriticalPath> critical_paths(const RunTrace& trace, const PassTable& passes,
                                         const MatchedCollectives* collectives = nullptr,
                                         const std::vector<RankRanges>* ranges = nullptr);

}  // namespace fulcrum::analysis
