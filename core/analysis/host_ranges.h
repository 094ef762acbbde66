// The few host ranges of one rank that the analyses across ranks read — its steps, optimizer
// steps and pipeline transfers — gathered in one visit of its lanes, so that those analyses
// need not hold the rank's events (run_analysis.h reads a run a rank at a time).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/analysis/run_trace.h"
#include "core/analysis/scratch_table.h"
#include "core/util/result.h"

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
    // Each in lane order, then in the lane's order: `step` ranges of host threads, `optimizer`
    // ranges (not marks), pipeline sends and receives.
    std::vector<Range> steps;
    std::vector<Range> optimizers;
    // `dp all-reduce wait` ranges of a CPU rank's threads: an overlapped reduction's exposed
    // tail (on a GPU rank the host's wait is no measure of it).
    std::vector<Range> reduction_waits;
    std::vector<Transfer> transfers;

    static RankRanges of(const RunTrace& trace, const RankTrace& rank);
};

// Every rank's, in rank order.
std::vector<RankRanges> rank_ranges(const RunTrace& trace);

// A pipeline receive and the send it was matched with: "recv X" on stage s with "send X" on
// the neighbour that sends it (s − 1 for activations, s + 1 for gradients), on the rank with
// the same dp, cp and tp, by (step, micro-batch, k), k counting a rank's transfers of one
// (name, step, micro-batch). What the cost model prices a pipeline transfer from
// (cost_model.cpp).
struct PipelinePair {
    StringId name;            // the receive's
    std::int64_t bytes = -1;  // the receive's, else the send's; -1 when neither says
    std::int64_t recv_start_ns = 0, recv_end_ns = 0;
    std::int64_t send_start_ns = 0;
};

// Pairs the ranks' pipeline transfers as the ranks come in (issue 37: an analysis that needs two
// ranks at once keeps only what it matches on): a send waits for its receive and a receive
// for its send, and each pair is kept once made, so the run's transfers are never all held —
// only those whose partner is still to come (under Megatron-LM's rank order, about a stage's
// worth). Where two ranks share their coordinates (a trace without them), a receive takes the
// last of the sends with its key, so every receive waits until every rank is in.
class PipelineMatcher {
public:
    // `memory_bytes`: what the matched pairs may hold in memory before they spill.
    explicit PipelineMatcher(
        const RunTrace& trace,
        std::int64_t memory_bytes = ScratchTable<PipelinePair>::kDefaultMemoryBytes);
    ~PipelineMatcher();
    PipelineMatcher(const PipelineMatcher&) = delete;
    PipelineMatcher& operator=(const PipelineMatcher&) = delete;

    // One rank's transfers (RankRanges::transfers); the ranks in the run's order. The pairs
    // that are final go to a table that spills to a temporary file past 64 MiB (a run of many
    // steps has millions): the error says where it could not be written.
    Status add(std::int32_t rank, const std::vector<RankRanges::Transfer>& transfers);
    // Every matched receive, in the order the ranks and each rank's transfers came in.
    Result<ScratchTable<PipelinePair>> finish();

private:
    struct State;
    std::unique_ptr<State> state_;
};

// The pairs of ranges in memory, rank by rank.
std::vector<PipelinePair> pipeline_pairs(const RunTrace& trace,
                                         const std::vector<RankRanges>& ranges);

}  // namespace fulcrum::analysis
