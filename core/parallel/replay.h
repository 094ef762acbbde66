// Replaying a pipeline schedule: given how long every pass takes on every stage, when does
// each start and end? Stages run their passes in schedule order (stage_ops). With model chunk
// c = chunk·p + stage (one chunk per stage unless interleaved):
//   a forward of micro-batch j through chunk c waits for the forward of j through c − 1,
//   a backward (or input-gradient pass) waits for the one through c + 1, or on the last
//   chunk for its own forward, and a weight-gradient pass for its own input-gradient pass,
// plus the point-to-point latency when the two run on different stages.
//
// The bubble analysis replays measured durations to split a measured bubble into what the
// schedule costs anyway and what unequal micro-batches add; the simulator replays predicted
// durations to play a whole step.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/parallel/schedule.h"
#include "core/util/result.h"

namespace fulcrum::parallel {

// Parameters that arrive while a model chunk's first forward of the step runs: Megatron-LM's
// --overlap-param-gather all-gathers what the distributed optimizer updated at the next step's
// start, a layer at a time in forward order, and each layer's forward waits for its own. The
// chunk's first layer is there `first_ns` after the step's start, each next one `layer_ns`
// later; `bytes` is what all of them move.
struct ParameterArrival {
    std::int64_t first_ns = 0;
    std::int64_t layer_ns = 0;
    int layers = 1;
    std::int64_t bytes = 0;
    std::int64_t last_ns() const { return first_ns + (layers - 1) * layer_ns; }
    // When a pass of `length` through the chunk, started at `start`, ends: its layers run in
    // turn, each once its parameters are there and the one before it is done, so (arrivals
    // evenly spaced) at max(start, first) + its length, or one layer's share of it after the
    // last arrival if later.
    std::int64_t pass_end(std::int64_t start, std::int64_t length) const {
        return std::max(
            {start + length, first_ns + length, last_ns() + length / std::max(layers, 1)});
    }
};

struct ReplayInput {
    PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
    int stages = 1;
    int microbatches = 1;
    int virtual_stages = 1;
    // [stage][microbatch] durations in ns of the stage's whole share of the model; with v
    // model chunks each chunk's pass takes 1/v of it. `backward_ns` is the whole backward, or
    // its input-gradient half when the schedule splits off `weight_ns` (ZB-H1).
    std::vector<std::vector<std::int64_t>> forward_ns;
    std::vector<std::vector<std::int64_t>> backward_ns;
    std::vector<std::vector<std::int64_t>> weight_ns;
    std::int64_t p2p_latency_ns = 0;  // from a send's end to the receiver's start
    // When each stage can begin (e.g. after its step's set-up); empty: all at 0.
    std::vector<std::int64_t> stage_ready_ns;
    // [stage][chunk]: parameters arriving during micro-batch 0's forward through the chunk,
    // which ends at ParameterArrival::pass_end. Empty: nothing arrives.
    // replay_pipeline only (replay_on_shared_cores does not read it).
    std::vector<std::vector<ParameterArrival>> parameters;
    // Replay the order fulcrum-train runs (step_ops) where the shape does not suit the
    // schedule (an interleaved step of a micro-batch count that is not a multiple of p)
    // instead of refusing it.
    bool as_engine_runs = false;
    // For replay_on_shared_cores only: what each rank of a pass computes at a whole core,
    // [stage][microbatch] → one entry per member of the stage's group (a CP rank), each
    // computed by `work_copies` ranks alike (its TP ranks); the rest of the pass's duration
    // is transfers, which take no core. Empty: one rank computing the whole duration.
    std::vector<std::vector<std::vector<std::int64_t>>> forward_work;
    std::vector<std::vector<std::vector<std::int64_t>>> backward_work;
    std::vector<std::vector<std::vector<std::int64_t>>> weight_work;
    int work_copies = 1;
};

struct ReplayedOp {
    int microbatch = 0;
    Phase kind = Phase::forward;
    int chunk = 0;
    std::int64_t start_ns = 0;
    std::int64_t end_ns = 0;
    std::int64_t wait_ns = 0;  // idle right before it, waiting for its input
    // Inside it, waiting for parameters still arriving (ReplayInput::parameters), and what
    // they moved meanwhile.
    std::int64_t parameter_wait_ns = 0;
    std::int64_t parameter_bytes = 0;
};

struct ReplayResult {
    std::vector<std::vector<ReplayedOp>> stages;  // [stage], in the stage's run order
    std::int64_t makespan_ns = 0;                 // last op's end
    std::vector<std::int64_t> stage_end_ns;       // each stage's last op's end

    // makespan − Σ durations on the stage: the stage's bubble inside [0, makespan].
    std::int64_t bubble_ns(int stage) const;
    // bubble_fraction (schedule.h) of the replayed pipeline, every stage inside [0, makespan].
    std::optional<double> bubble_fraction() const;
};

// Errors when the shape does not suit the schedule (check_pipeline) or the durations do not
// match the shape.
Result<ReplayResult> replay_pipeline(const ReplayInput& input);

// Pipelines that run side by side (a step's DP replicas) on ranks that time-share `cores`
// cores (the CPU backend with more ranks than cores; docs/simulate.md, "Ranks that share
// cores"): processor sharing, as the kernel's fair scheduler shares a core among runnable
// processes. While n ranks compute, each runs at min(1, cores / n) of a core; a rank waiting
// for its input, or for its group's slowest member, takes none. A pass ends once every rank
// in it has computed its work (the `*_work` tables) and then its transfers. With at least a
// core a rank this is replay_pipeline of each input.
Result<std::vector<ReplayResult>> replay_on_shared_cores(const std::vector<ReplayInput>& inputs,
                                                         double cores);

}  // namespace fulcrum::parallel
