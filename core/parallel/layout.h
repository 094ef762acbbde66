// A model and the 4D layout that runs it, and the one check of the two together that
// fulcrum-train, the simulator and the planner all make (check_layout), so that a layout one
// of them accepts the others accept too, with the same words.
#pragma once

#include <vector>

#include "core/parallel/grid.h"
#include "core/parallel/placement.h"
#include "core/parallel/recompute.h"
#include "core/parallel/schedule.h"
#include "core/util/result.h"

namespace fulcrum::parallel {

// The model's shape, with fulcrum-train's defaults.
struct ModelShape {
    int layers = 2;
    int hidden = 64;
    int heads = 4;
    int context = 256;  // tokens of one fixed-length micro-batch; no document is longer
    int vocab = 256;    // fulcrum-train models bytes
};

// A layout: the grid, the pipeline's schedule over its micro-batches and model chunks, the
// layers of each chunk, and the memory knobs that change what a rank holds.
struct Layout {
    GridShape grid{};
    int microbatches = 4;  // per DP replica and step
    PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
    int virtual_stages = 1;
    std::vector<int> stage_layers{};  // one count per model chunk; empty: L/p each
    Recompute recompute = Recompute::none;
    bool sequence_parallel = false;
    // How the framework numbers the ranks, which places the groups on nodes (placement.h):
    // Megatron-LM's by default; fulcrum-train's runs say theirs.
    RankOrder rank_order = kMegatronOrder;
};

// Whether `layout` can run `model`, naming the options as the command lines spell them: every
// degree at least 1, every stage and model chunk a layer, whole heads for each TP rank, a
// schedule that suits the stages, micro-batches and chunks (check_pipeline), stage layers that
// add up (check_stage_layers), and TP for sequence parallelism.
Status check_layout(const Layout& layout, const ModelShape& model);

}  // namespace fulcrum::parallel
