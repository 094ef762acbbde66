// When a pipeline stage's gradient reduction over its DP × CP group ends (docs/simulate.md,
// "The end of the step").
//
// Without overlap: one all-reduce of all the stage's gradients once its slowest replica's last
// pass has ended (none when there are no bytes: ZeRO-2 and -3 scattered them in the passes).
// With --overlap-grad-reduce, as fulcrum-train and Megatron-LM do it: a layer's gradients are
// final once the last pass of the step that writes them (its chunk's last backward, or last W
// under a split backward) has computed that layer; each layer is then all-reduced as one
// bucket on one communication stream, in the order they become ready, while the passes after
// go on. Layers run last to first inside a pass, each taking an even share of it. What no
// layer holds (embeddings, the final LayerNorm) is reduced after the stage's last pass, and
// the stage waits for the stream to drain: the reduction time the overlap did not hide. The
// buckets' kernels hold `sm_share` of the SMs while they overlap the passes, so the passes end
// later by that share of the time they overlapped (the compute they could not do then).
#pragma once

#include <cstdint>
#include <vector>

#include "core/analysis/cost_model.h"
#include "core/parallel/replay.h"
#include "core/sim/stage_costs.h"

namespace fulcrum::sim {

struct GradientReductionInput {
    int stage = 0;
    int stages = 1;
    int virtual_stages = 1;
    int layers = 1;                 // of the whole model
    std::vector<int> stage_layers;  // layers per model chunk (p·v); empty: the even split
    bool overlap = false;
    Phase writes_weights = Phase::backward;  // weight under ZB-H1
    std::int64_t layer_bytes = 0;            // one layer's gradients on one rank of the stage
    std::int64_t stage_bytes = 0;            // all the stage's gradients on one rank
    std::int64_t step_start_ns = 0;
    // The share of a GPU's SMs the reduction's kernels hold (NCCL's channels of the all-reduce
    // over the SMs, a CTA each); with overlap, the passes it runs beside compute on the rest.
    double sm_share = 0;
};

// The share of a GPU's SMs an all-reduce's kernels hold while they run: NCCL's runtime
// channels of its call (a CTA each) over the device's SMs; 0 where either is not described
// (a fitted cost, a system without its SMs).
double nccl_sm_share(const HardwareAssumptions& hardware, const analysis::CollectiveCost& call);

// The end of the reduction, and the bytes still to move when the stage's last pass ended (all
// of them without overlap): what the range after the pipeline moves (exposed_bytes,
// stage_costs.h).
struct GradientReductionEnd {
    std::int64_t end_ns = 0;
    std::int64_t exposed_bytes = 0;
};
// `replays` are the step's replicas (times from step_start_ns).
GradientReductionEnd gradient_reduction_end(
    const GradientReductionInput& input, const std::vector<const parallel::ReplayResult*>& replays,
    const analysis::CollectiveCost& all_reduce);

}  // namespace fulcrum::sim
