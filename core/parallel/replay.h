// Replaying a pipeline schedule: given how long every pass takes on every stage, when does
// each start and end? Stages run their ops in schedule order (stage_ops); a forward of
// micro-batch j on stage s waits for stage s−1's forward of j, a backward for stage s+1's
// backward of j (or, on the last stage, its own forward), plus the point-to-point latency.
//
// The bubble analysis replays measured durations to split a measured bubble into what the
// schedule costs anyway and what unequal micro-batches add; the simulator replays predicted
// durations to play a whole step.
#pragma once

#include <cstdint>
#include <vector>

#include "core/parallel/schedule.h"

namespace fulcrum::parallel {

struct ReplayInput {
    PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
    int stages = 1;
    int microbatches = 1;
    // [stage][microbatch] durations in ns.
    std::vector<std::vector<std::int64_t>> forward_ns;
    std::vector<std::vector<std::int64_t>> backward_ns;
    std::int64_t p2p_latency_ns = 0;  // from a send's end to the receiver's start
    // When each stage can begin (e.g. after its step's set-up); empty: all at 0.
    std::vector<std::int64_t> stage_ready_ns;
};

struct ReplayedOp {
    int microbatch = 0;
    bool forward = true;
    std::int64_t start_ns = 0;
    std::int64_t end_ns = 0;
    std::int64_t wait_ns = 0;  // idle right before it, waiting for its input
};

struct ReplayResult {
    std::vector<std::vector<ReplayedOp>> stages;  // [stage], in the stage's run order
    std::int64_t makespan_ns = 0;                 // last op's end
    std::vector<std::int64_t> stage_end_ns;       // each stage's last op's end

    // makespan − Σ durations on the stage: the stage's bubble inside [0, makespan].
    std::int64_t bubble_ns(int stage) const;
};

ReplayResult replay_pipeline(const ReplayInput& input);

}  // namespace fulcrum::parallel
