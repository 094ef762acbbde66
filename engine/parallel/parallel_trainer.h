// One training step on one rank of the 4D grid.
//
//   data:  the step's plan (engine/data/step_plan.h) gives this DP replica its micro-batches
//          and this CP rank its token ranges of each.
//   PP:    the stage runs its layers over the micro-batches in the schedule's order
//          (schedule.h); activations go forward and gradients backward by point-to-point
//          transfers with the neighbouring stages.
//   TP/CP: inside the model (engine/model, engine/parallel/{tensor,context}_parallel).
//   after: the tied embedding's gradient is summed between the first and last stage, every
//          gradient over the DP×CP group (same parameters, different tokens), the global
//          gradient norm is formed counting every parameter once, then AdamW.
//
// The step's loss is the mean over all its target tokens, so every backward pass scales by
// 1/N_step with N_step counted over the whole step (all replicas and CP ranks); the summed
// gradients are then exactly those of the serial model on the same data.
#pragma once

#include <memory>
#include <variant>
#include <vector>

#include "core/util/result.h"
#include "engine/comm/communicator.h"
#include "engine/data/step_plan.h"
#include "engine/model/gpt.h"
#include "engine/model/parallel_context.h"
#include "core/parallel/schedule.h"
#include "engine/parallel/topology.h"
#include "engine/train/adamw.h"
#include "engine/train/trainer.h"

namespace fulcrum::engine {

using parallel::LayerRange;
using parallel::parse_schedule;
using parallel::PipelineOp;
using parallel::PipelineSchedule;
using parallel::stage_layers;
using parallel::stage_ops;

// The communicators of this rank's groups, split once from the world.
struct ParallelGroups {
    Communicator* world = nullptr;
    std::unique_ptr<Communicator> tp, cp, pp, dp_cp;
    // The first and last stage of one pipeline, which both hold the tied embedding.
    std::unique_ptr<Communicator> embedding;

    static ParallelGroups create(Communicator& world, const Topology& topology);
};

struct ParallelTrainConfig {
    TrainConfig train;
    PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
    balance::Balancer balancer = balance::Balancer::fixed;  // named in the workload manifest
    // Reduce each layer's gradients over DP × CP as soon as the step's last backward pass is
    // done with the layer (Communicator::start_all_reduce_sum), overlapping the layers below;
    // the rest of the model and the wait follow the pipeline. Off: one all-reduce after it.
    bool overlap_reduction = false;
};

class ParallelTrainer {
public:
    ParallelTrainer(GptModel& model, const Topology& topology, ParallelGroups& groups,
                    const TrainingDocuments& documents, ParallelTrainConfig config);

    Result<StepReport> step(const StepPlan& plan);

    const LayerRange& layers() const { return layers_; }
    // The whole model in the serial layout, assembled on world rank 0 from the ranks that
    // own each part (empty on other ranks). Every rank must call it.
    std::vector<float> gather_parameters();

private:
    // The whole micro-batch, or this CP rank's shard of it.
    using LocalBatch = std::variant<MicroBatch, ContextShard>;
    Result<LocalBatch> local_micro_batch(const PlannedMicroBatch& planned) const;
    void emit_workload(const StepPlan& plan) const;
    void run_forward(int step, int microbatch, const LocalBatch& batch, Activations& acts,
                     double& loss_sum);
    // `last_of_step`: this stage's final backward pass of the step, after which each layer's
    // gradients are final.
    void run_backward(int step, int microbatch, Activations& acts, float loss_scale,
                      bool last_of_step);
    bool overlaps_reduction() const;
    void reduce_gradients(int step);
    double gradient_norm();

    GptModel& model_;
    const Topology& topology_;
    ParallelGroups& groups_;
    const TrainingDocuments& documents_;
    ParallelTrainConfig config_;
    AdamW optimizer_;
    LayerRange layers_;
    std::vector<std::unique_ptr<Activations>> activations_;  // one per micro-batch in flight
    std::int64_t steps_taken_ = 0;
};

}  // namespace fulcrum::engine
