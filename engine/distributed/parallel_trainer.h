// One training step on one rank of the 4D grid.
//
//   data:  the step's plan (engine/data/step_plan.h) gives this DP replica its micro-batches
//          and this CP rank its token ranges of each.
//   PP:    the stage runs its layers over the micro-batches in the schedule's order
//          (schedule.h); activations go forward and gradients backward by point-to-point
//          transfers with the neighbouring stages. Interleaved, the stage holds v model
//          chunks: the layers are cut into v·p chunks and model chunk c = k·p + stage is the
//          stage's chunk k (Megatron-LM's assignment, Narayanan et al. SC'21 §2.2.2), so a
//          transfer goes between consecutive model chunks: stage p−1's chunk k sends to stage
//          0's chunk k+1. ZB-H1 runs each backward as an input-gradient pass (B, which the
//          previous stage waits for) and a weight-gradient pass (W) where stage_ops puts it.
//          Activations and gradients travel on two communicators of the same ranks, so that
//          transfers of the two kinds between one pair of ranks (both directions carry both
//          when p = 2 and interleaved) can never be matched with each other.
//   TP/CP: inside the model (engine/model, engine/distributed/{tensor,context}_parallel).
//   after: the tied embedding's gradient is summed between the first and last stage, every
//          gradient over the DP×CP group (same parameters, different tokens), under sequence
//          parallelism the LayerNorm and embedding gradients over TP, the global gradient norm
//          is formed counting every parameter once, then AdamW.
//   ZeRO:  (layout.zero_stage, Rajbhandari et al. 2020, §5) stage 1 gives each DP×CP rank the
//          optimizer state of one shard of the flat buffer: it updates that shard and the
//          updated parameters are all-gathered; stage 2 also keeps only the shard of the
//          gradients: each block's backward writes a buffer that is then reduce-scattered
//          into the shards, and the embedding's and head's gradients are reduce-scattered
//          after the passes (zero_gradients.h; under a split backward the whole buffer is,
//          after the passes); stage 3 also keeps only the shard of the parameters, which the
//          optimizer updates in place, and each pass all-gathers the ranges it reads (a block,
//          the embedding's and head's tensors) and frees them after (zero_parameters.h). A
//          replica short of micro-batches in a step runs the longest replica's schedule,
//          making only the collectives of the passes it lacks.
//
// The step's loss is the mean over all its target tokens, so every backward pass scales by
// 1/N_step with N_step counted over the whole step (all replicas and CP ranks); the summed
// gradients are then exactly those of the serial model on the same data.
#pragma once

#include <memory>
#include <variant>
#include <vector>

#include "core/parallel/layout.h"
#include "core/parallel/schedule.h"
#include "core/util/result.h"
#include "engine/comm/communicator.h"
#include "engine/data/step_plan.h"
#include "engine/distributed/topology.h"
#include "engine/model/gpt.h"
#include "engine/model/parallel_context.h"
#include "engine/train/adamw.h"
#include "engine/train/trainer.h"

namespace fulcrum::engine {

using parallel::LayerRange;
using parallel::parse_schedule;
using parallel::PipelineOp;
using parallel::PipelineSchedule;
using parallel::stage_layers;
using parallel::stage_ops;

// The layers of model chunk `chunk` of stage `stage` (model chunk chunk·p + stage of v·p):
// `stage_layers` one count per model chunk (parallel::check_stage_layers), or empty for the
// even split.
LayerRange chunk_layers(int stage, int chunk, int stages, int virtual_stages, int layers,
                        std::span<const int> stage_layers = {});

// The parameters stage `stage` of `stages` holds under `layout` (its virtual stages and layer
// split): its model chunks' blocks, wte where it embeds (the first) or runs the tied LM head
// (the last), wpe on the first, lnf on the last. ParallelTrainer's model must hold exactly
// these.
StageParameters stage_parameters(int stage, int stages, const parallel::Layout& layout, int layers);

// The communicators of this rank's groups, split once from the world.
struct ParallelGroups {
    Communicator* world = nullptr;
    // pp carries activations, pp_gradients gradients (the same ranks; see above).
    std::unique_ptr<Communicator> tp, cp, pp, pp_gradients, dp_cp;
    // The first and last stage of one pipeline, which both hold the tied embedding.
    std::unique_ptr<Communicator> embedding;

    static ParallelGroups create(Communicator& world, const Topology& topology);
};

struct ParallelTrainConfig {
    TrainConfig train;
    // The schedule, virtual stages, stage layers (p·v counts, model chunk k·p + s being stage
    // s's chunk k; empty: the even split), recomputation and sequence parallelism, as
    // fulcrum-train checked them (parallel::check_layout). Its grid is the topology's: the
    // trainer sets it.
    parallel::Layout layout;
    balance::Balancer balancer = balance::Balancer::fixed;  // named in the workload manifest
    // Reduce each layer's gradients over DP × CP as soon as the step's last backward pass is
    // done with the layer (Communicator::start_all_reduce_sum), overlapping the layers below;
    // the rest of the model and the wait follow the pipeline. Off: one all-reduce after it.
    bool overlap_grad_reduce = false;
};

class ParallelTrainer {
public:
    // Sets the model's split backward, recomputation and sequence parallelism from the
    // config's layout, whose grid becomes the topology's.
    ParallelTrainer(GptModel& model, const Topology& topology, ParallelGroups& groups,
                    const TrainingDocuments& documents, ParallelTrainConfig config);

    Result<StepReport> step(const StepPlan& plan);

    // step() in pieces, for a step that runs several plans under several layouts and updates
    // once (hot_switch_trainer.h). run_passes: the plan's passes, adding loss_scale · ∂(Σ ℓ)/∂θ
    // to the gradients (which it does not zero); `loss_sum` is what this rank adds to the
    // step's loss (its local Σ ℓ where the loss is counted, else 0: see step()).
    struct Passes {
        double loss_sum = 0;
        std::int64_t tokens = 0;  // this rank's, as StepReport::tokens
        int micro_batches = 0;
    };
    // `first_microbatch`: the number its first micro-batch has in the trace (the passes of
    // one step under several plans are numbered on, so that (step, mb) names one).
    Result<Passes> run_passes(const StepPlan& plan, float loss_scale, int first_microbatch = 0);
    // The summed gradients: the tied embedding's over its stages, DP × CP, sequence parallel.
    void reduce_gradients(int step);
    // The global gradient norm, clipping and AdamW over reduced gradients; fills the report's
    // step, grad_norm, clip_coefficient and learning_rate.
    void update(StepReport& report);

    // The layers of this stage's model chunks, by chunk (one unless interleaved).
    const std::vector<LayerRange>& chunk_layers() const { return chunk_layers_; }
    // The whole model in the serial layout, assembled on world rank 0 from the ranks that
    // own each part (empty on other ranks). Every rank must call it.
    std::vector<float> gather_parameters();

private:
    // The whole micro-batch, or this CP rank's shard of it.
    using LocalBatch = std::variant<TokenBatch, ContextShard>;
    Result<LocalBatch> local_micro_batch(const PlannedMicroBatch& planned) const;
    void emit_workload(const StepPlan& plan) const;
    // The passes of one op of the schedule (stage_ops). `reduce_layers`: the op is the last
    // one of the step to write its chunk's weight gradients (the last backward, or W when the
    // backward is split), after which each of its layers' gradients is final.
    void run_forward(int step, const PipelineOp& op, const LocalBatch& batch, Activations& acts,
                     double& loss_sum);
    // Per model chunk, the index in `ops` of the last pass that writes its weight gradients
    // (after it they are final); ops.size() for a chunk no pass writes.
    std::vector<std::size_t> last_writers(const std::vector<PipelineOp>& ops) const;
    // A replica without a micro-batch this step (an epoch's last global batch with fewer
    // documents than replicas): with overlapped reduction, starts what the others start.
    void start_reductions_without_passes(const StepPlan& plan);
    // Under ZeRO-2 and -3, for a micro-batch this replica lacks: the parameter gathers and
    // gradient reduce-scatters of the pass `op`, which the replicas that have it make, without
    // the pass.
    void gather_as_pass(int step, const PipelineOp& op);
    void run_backward(int step, const PipelineOp& op, Activations& acts, float loss_scale,
                      bool reduce_layers);
    void run_weight_gradients(int step, const PipelineOp& op, Activations& acts,
                              bool reduce_layers);
    // The passes of chunk k's layers from the last to the first, each layer's DP × CP
    // reduction started after it (Communicator::start_all_reduce_sum).
    template <typename Pass>
    void layer_by_layer_with_reduction(int chunk, Pass pass);
    // This step's order of passes on this stage.
    std::vector<PipelineOp> step_ops(int microbatches) const;
    int model_chunk(int chunk) const;
    // Which blocks this stage runs: the only ones its Activations hold.
    std::vector<bool> blocks_held() const;
    bool holds_embedding(int chunk) const { return model_chunk(chunk) == 0; }
    bool holds_head(int chunk) const;
    bool overlaps_reduction() const;
    bool shards_optimizer() const;     // ZeRO-1, -2 or -3 over more than one DP × CP rank
    void reduce_over_data_parallel();  // the DP × CP part of reduce_gradients
    double gradient_norm();

    GptModel& model_;
    const Topology& topology_;
    ParallelGroups& groups_;
    const TrainingDocuments& documents_;
    ParallelTrainConfig config_;
    // ZeRO: every DP × CP rank's shard length (empty: no sharding), before the optimizer that
    // owns this rank's shard, and the staging of that shard.
    std::vector<int> zero_counts_;
    DeviceBuffer zero_staging_;
    AdamW optimizer_;
    std::vector<LayerRange> chunk_layers_;
    // One per micro-batch of the step, holding device memory only while in flight.
    std::vector<std::unique_ptr<Activations>> activations_;
    std::int64_t steps_taken_ = 0;
    int first_microbatch_ = 0;  // run_passes'
};

}  // namespace fulcrum::engine
