// Pipeline schedules: the order in which one pipeline stage runs the passes of its
// micro-batches. p stages, m micro-batches, v model chunks per stage (virtual stages).
//
// GPipe: every forward (F), then every backward (B). Stage 0 holds all m micro-batches'
//   activations at once; bubble (p−1)/m of the busy time.
// 1F1B: warm-up of min(p−s−1, m) forwards on stage s, then steady state alternating one F
//   and one B, then cool-down of the remaining Bs. The same (p−1)/m bubble as GPipe, but at
//   most p micro-batches in flight on stage 0 (Narayanan et al., SC'21, §2.2).
// Interleaved 1F1B (Megatron-LM; Narayanan et al., SC'21, §2.2.2): each stage holds v chunks
//   of layers, chunk c of the model on stage c mod p. Micro-batches go through in groups of
//   p; stage s warms up with (p−s−1)·2 + (v−1)·p forwards, then alternates. The bubble
//   falls to (p−1)/(v·m), at v times the point-to-point traffic. Needs m a multiple of p.
// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR'24, §2.1, the hand-made
//   schedules): the backward split into B (the input gradient, which the previous stage waits
//   for) and W (the weight gradient, which nobody waits for). F and B keep 1F1B's order; a W
//   runs where the stage would otherwise wait for its next F or B, or before a forward that
//   would put more than p micro-batches in flight (forward run, W not yet: 1F1B's count on
//   stage 0, so no stage holds more than 1F1B's first), and the rest at the end. Bubble
//   (p−1)(F + B − W) against 1F1B's (p−1)(F + B + W), for W no longer than F.
// Backward passes run in micro-batch order, so a stage receives gradients in the order its
// successor sends them.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/trace/model.h"
#include "core/util/result.h"

namespace fulcrum::parallel {

enum class PipelineSchedule { gpipe, one_f_one_b, interleaved, zero_bubble_h1 };

// "gpipe", "1f1b", "interleaved", "zb-h1"
Result<PipelineSchedule> parse_schedule(std::string_view name);
const char* schedule_name(PipelineSchedule schedule);
// Every schedule's name, for help texts and messages.
inline constexpr std::string_view kScheduleNames = "gpipe, 1f1b, interleaved, zb-h1";

// Whether the schedule runs the weight gradient (W) as a pass of its own.
constexpr bool splits_backward(PipelineSchedule schedule) {
    return schedule == PipelineSchedule::zero_bubble_h1;
}

// A pass of one micro-batch through one model chunk of a stage is a Phase (core/trace/model.h,
// the phase its events carry): forward, backward (the whole backward pass, or only its
// input-gradient half B when the schedule splits it off) or weight_grad (W).

struct PipelineShape {
    int stages = 1;          // p
    int microbatches = 1;    // m
    int virtual_stages = 1;  // v: model chunks per stage (interleaved only)
};

// Whether a schedule can run on a shape: every count ≥ 1; interleaved needs v ≥ 2 and m a
// multiple of p (its micro-batches go in groups of p), the others v = 1.
Status check_pipeline(PipelineSchedule schedule, const PipelineShape& shape);

struct PipelineOp {
    int microbatch = 0;
    Phase kind = Phase::forward;
    int chunk = 0;  // which of the stage's v model chunks: model chunk chunk·p + stage
    friend bool operator==(const PipelineOp&, const PipelineOp&) = default;
};

// The passes stage `stage` runs, in order. The shape must pass check_pipeline.
std::vector<PipelineOp> stage_ops(PipelineSchedule schedule, int stage, const PipelineShape& shape);

// The passes fulcrum-train runs in a step: stage_ops, except for an interleaved step whose
// micro-batch count is not a multiple of p (a balancer may make one: fixed and ilp add
// micro-batches when the documents do not fit, the last batch of an epoch may have fewer),
// which runs depth-first over the model chunks instead: GPipe on the virtual pipeline of v·p
// chunks (every forward of chunk 0, of chunk 1, …, then the backwards in reverse), valid for
// any count. Every count must be at least 1.
std::vector<PipelineOp> step_ops(PipelineSchedule schedule, int stage, const PipelineShape& shape);

// The schedule's bubble with every micro-batch alike, as a fraction of the busy time:
// (p−1)/m for GPipe and 1F1B, (p−1)/(v·m) interleaved, (p−1)(F + B − W)/(m(F + B + W)) for
// ZB-H1, with F, B, W the forward, input-gradient and weight-gradient pass times (only ZB-H1's
// depends on them; the paper's hand-made schedule assumes them equal).
struct PassTimes {
    double forward = 1, backward = 1, weight = 1;
};
double theory_bubble_fraction(PipelineSchedule schedule, const PipelineShape& shape,
                              const PassTimes& times = {});

// The one bubble fraction, measured, replayed or estimated (docs/analyses.md §2): a pipeline's
// idle time against its busy time, Σ bubble / Σ busy over its stages, the convention of
// theory_bubble_fraction's (p−1)/m. nullopt when nothing was busy.
std::optional<double> bubble_fraction(double bubble, double busy);

// Layers [first, last) of a stage: L/p each, the first L mod p stages one more.
struct LayerRange {
    int first = 0;
    int last = 0;
};
LayerRange stage_layers(int stage, int stages, int layers);

// A split chosen by the user (fulcrum-train --stage-layers): `counts` holds the layers of
// each of the `chunks` model chunks in order (p, or p·v interleaved: model chunk k·p + s is
// stage s's chunk k). The embedding sits with the first and the head with the last, so equal
// counts are not equal work. Each count is at least 1 and they sum to `layers`; the error
// says which rule a split breaks.
Status check_stage_layers(std::span<const int> counts, int chunks, int layers);
// "3,5,4" → {3, 5, 4}; an error names the piece that is not a positive integer.
Result<std::vector<int>> parse_stage_layers(std::string_view text);
// Layers [first, last) of model chunk `chunk` of `chunks`: the prefix sums of `counts`, or
// the even split above when `counts` is empty.
LayerRange model_chunk_layers(int chunk, int chunks, int layers, std::span<const int> counts);
// The layers pipeline stage `stage` of `stages` holds over its `virtual_stages` model chunks
// (chunk k·stages + stage of each round): the sum of their `counts`, or of the even split when
// `counts` does not give one count per model chunk.
int stage_layer_total(int stage, int stages, int virtual_stages, int layers,
                      std::span<const int> counts);

}  // namespace fulcrum::parallel
