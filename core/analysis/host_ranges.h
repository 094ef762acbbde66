// The few host ranges of one rank that the analyses across ranks read — its steps, optimizer
// steps and pipeline transfers — gathered in one visit of its lanes, so that those analyses
// need not hold the rank's events (run_analysis.h reads a run a rank at a time).
#pragma once

#include <cstdint>
#include <vector>

#include "core/analysis/run_trace.h"

namespace fulcrum::analysis {

struct RankRanges {
    struct Range {
        std::int32_t step = -1;
        std::int64_t start_ns = 0;
        std::int64_t end_ns = 0;
        // The CPU time its lane's `fulcrum.cpu` mark gives it (CpuMarks::after), or -1.
        std::int64_t cpu_ns = -1;
        bool host_lane = false;  // on a host thread (not a device stream)
    };
    struct Transfer {  // 40 bytes: a 1 B-event run has ~9 M
        StringId name;
        std::int32_t step = -1;
        std::int32_t microbatch = -1;
        std::int16_t stage = -1;
        Role role = Role::pipeline_send;  // or pipeline_recv
        std::int64_t start_ns = 0;
        std::int64_t end_ns = 0;
        std::int64_t bytes = -1;
    };

    std::int32_t rank = 0;
    // Each in lane order, then in the lane's order: `step` and `optimizer` ranges (not marks),
    // pipeline sends and receives.
    std::vector<Range> steps;
    std::vector<Range> optimizers;
    std::vector<Transfer> transfers;

    static RankRanges of(const RunTrace& trace, const RankTrace& rank);
};

// Every rank's, in rank order.
std::vector<RankRanges> rank_ranges(const RunTrace& trace);

}  // namespace fulcrum::analysis
