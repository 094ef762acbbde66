#include "engine/distributed/parallel_trainer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "core/trace/annotations.h"
#include "engine/distributed/zero_parameters.h"
#include "engine/instrument/annotations.h"
#include "engine/model/context_parallel.h"
#include "engine/model/tensor_parallel.h"

namespace fulcrum::engine {
namespace {

std::span<float> span_of(Tensor tensor) {
    return {tensor.f32(), static_cast<std::size_t>(tensor.numel())};
}

std::int64_t bytes_of(Tensor tensor) {
    return tensor.numel() * std::int64_t(sizeof(float));
}

// A color that no grid rank uses, for ranks that take part in a split only to stay in step.
int lone_color(const Topology& topology) {
    return topology.shape().world() + topology.rank();
}

// ZeRO's shards of the stage's flat buffer over the DP × CP ranks (zero_parameters.h); none
// without ZeRO or with one rank.
std::vector<int> zero_counts(std::int64_t total, const ParallelGroups& groups, int zero_stage) {
    const int ranks = groups.dp_cp ? groups.dp_cp->size() : 1;
    if (zero_stage < 1 || ranks <= 1) {
        return {};
    }
    return zero_shard_counts(total, ranks);
}

// The range of the flat buffer this rank's optimizer updates: its shard of `counts`, or all.
ElementRange optimizer_range(const std::vector<int>& counts, const ParallelGroups& groups,
                             std::int64_t total) {
    if (counts.empty()) {
        return {0, total};
    }
    return zero_shard(counts, groups.dp_cp->rank());
}

// The most micro-batches any DP replica has in the step.
int longest_replica(const StepPlan& plan) {
    std::size_t longest = 0;
    for (const auto& replica : plan.replicas) {
        longest = std::max(longest, replica.size());
    }
    return static_cast<int>(longest);
}

}  // namespace

LayerRange chunk_layers(int stage, int chunk, int stages, int virtual_stages, int layers,
                        std::span<const int> stage_layers) {
    return parallel::model_chunk_layers(chunk * stages + stage, stages * virtual_stages, layers,
                                        stage_layers);
}

StageParameters stage_parameters(int stage, int stages, const parallel::Layout& layout,
                                 int layers) {
    StageParameters held;
    held.blocks.assign(std::size_t(layers), false);
    const int v = std::max(layout.virtual_stages, 1);
    for (int k = 0; k < v; ++k) {
        const LayerRange range = chunk_layers(stage, k, stages, v, layers, layout.stage_layers);
        for (int l = range.first; l < range.last; ++l) {
            held.blocks[std::size_t(l)] = true;
        }
    }
    held.token_embedding = stage == 0 || stage == stages - 1;
    held.position_embedding = stage == 0;
    held.final_norm = stage == stages - 1;
    return held;
}

ParallelGroups ParallelGroups::create(Communicator& world, const Topology& topology) {
    ParallelGroups groups;
    groups.world = &world;
    const GridCoordinates me = topology.coordinates();
    auto color_without = [&](auto... axes) {
        GridCoordinates c = me;
        ((c.*axes = 0), ...);
        return topology.rank_of(c);
    };
    groups.tp = world.split(color_without(&GridCoordinates::tp), me.tp, "tp");
    groups.cp = world.split(color_without(&GridCoordinates::cp), me.cp, "cp");
    groups.pp = world.split(color_without(&GridCoordinates::pp), me.pp, "pp");
    groups.pp_gradients = world.split(color_without(&GridCoordinates::pp), me.pp, "pp gradients");
    groups.dp_cp = world.split(color_without(&GridCoordinates::dp, &GridCoordinates::cp),
                               me.dp * topology.shape().cp + me.cp, "dp×cp");
    const bool holds_embedding = topology.first_stage() || topology.last_stage();
    groups.embedding =
        world.split(holds_embedding ? color_without(&GridCoordinates::pp) : lone_color(topology),
                    me.pp, "embedding");
    return groups;
}

ParallelTrainer::ParallelTrainer(GptModel& model, const Topology& topology, ParallelGroups& groups,
                                 const TrainingDocuments& documents, ParallelTrainConfig config)
    : model_(model),
      topology_(topology),
      groups_(groups),
      documents_(documents),
      config_(config),
      zero_counts_(zero_counts(model.layout().total(), groups, config.layout.zero_stage)),
      optimizer_(model.backend(), model.layout(), config.train.adamw,
                 optimizer_range(zero_counts_, groups, model.layout().total())) {
    config_.layout.grid = topology.shape();
    FULCRUM_CHECK(config_.layout.zero_stage >= 0 && config_.layout.zero_stage <= 3,
                  "ZeRO stages are 0 to 3");
    FULCRUM_CHECK(config_.layout.zero_stage < 2 || !config.overlap_grad_reduce,
                  "ZeRO-2 and -3 reduce-scatter the gradients after the passes");
    FULCRUM_CHECK((config_.layout.zero_stage == 3 && shards_optimizer()) ==
                      (model.sharded_parameters() != nullptr),
                  "ZeRO-3 over more than one DP x CP rank needs the model's parameters sharded");
    FULCRUM_CHECK((config_.layout.zero_stage >= 2 && shards_optimizer() &&
                   !parallel::splits_backward(config_.layout.schedule)) ==
                      (model.sharded_gradients() != nullptr),
                  "ZeRO-2 and -3 over more than one DP x CP rank need the model's gradients "
                  "sharded, unless the backward is split");
    if (const ShardedParameters* sharded = model.sharded_parameters()) {
        FULCRUM_CHECK(sharded->shard_range() == optimizer_.owned(),
                      "the parameters' shard is not the optimizer's");
    }
    if (const ShardedGradients* sharded = model.sharded_gradients()) {
        FULCRUM_CHECK(sharded->shard_range() == optimizer_.owned(),
                      "the gradients' shard is not the optimizer's");
    }
    // The shard's copy the all-gather of the updated parameters sends from (ZeRO-1, -2) and
    // the reduce-scatter of whole gradients receives into (ZeRO-2 and -3 under a split
    // backward): the largest shard, rank 0's. ZeRO-3 with sharded gradients needs neither.
    if (shards_optimizer() &&
        (model.sharded_parameters() == nullptr || model.sharded_gradients() == nullptr)) {
        zero_staging_ = model.backend().allocate(std::size_t(zero_counts_.front()) * sizeof(float));
    }
    const parallel::Layout& layout = config_.layout;
    const int p = topology.shape().pp, v = layout.virtual_stages;
    FULCRUM_CHECK(v == 1 || layout.schedule == PipelineSchedule::interleaved,
                  "virtual stages are for the interleaved schedule");
    FULCRUM_CHECK(p * v <= model.config().layers, "every model chunk needs a layer");
    FULCRUM_CHECK(
        layout.stage_layers.empty() ||
            parallel::check_stage_layers(layout.stage_layers, p * v, model.config().layers).ok(),
        "stage_layers: one count of at least 1 per model chunk, summing to the layers");
    FULCRUM_CHECK(layout.schedule != PipelineSchedule::interleaved || p >= 2,
                  "the interleaved schedule needs at least 2 pipeline stages");
    for (int k = 0; k < v; ++k) {
        chunk_layers_.push_back(engine::chunk_layers(topology.coordinates().pp, k, p, v,
                                                     model.config().layers, layout.stage_layers));
    }
    {
        const StageParameters expected =
            stage_parameters(topology.coordinates().pp, p, config_.layout, model.config().layers);
        const StageParameters& held = model.layout().held();
        for (int l = 0; l < model.config().layers; ++l) {
            FULCRUM_CHECK(!expected.holds_block(l) || held.holds_block(l),
                          "the model does not hold a block of this stage");
        }
        FULCRUM_CHECK((!expected.token_embedding || held.token_embedding) &&
                          (!expected.position_embedding || held.position_embedding) &&
                          (!expected.final_norm || held.final_norm),
                      "the model does not hold this stage's embedding or head");
    }
    // The Activations made in step() keep what W passes need when the schedule splits them off.
    model_.set_split_backward(parallel::splits_backward(layout.schedule));
    model_.set_recompute(layout.recompute);
    model_.set_offload_checkpoints(layout.offload_checkpoints);
    model_.set_sequence_parallel(layout.sequence_parallel);
}

std::vector<bool> ParallelTrainer::blocks_held() const {
    std::vector<bool> held(std::size_t(model_.config().layers), false);
    for (const LayerRange& layers : chunk_layers_) {
        for (int l = layers.first; l < layers.last; ++l) {
            held[std::size_t(l)] = true;
        }
    }
    return held;
}

int ParallelTrainer::model_chunk(int chunk) const {
    return chunk * topology_.shape().pp + topology_.coordinates().pp;
}

bool ParallelTrainer::holds_head(int chunk) const {
    return model_chunk(chunk) == topology_.shape().pp * config_.layout.virtual_stages - 1;
}

Result<ParallelTrainer::LocalBatch> ParallelTrainer::local_micro_batch(
    const PlannedMicroBatch& planned) const {
    const auto bytes = document_bytes(documents_, planned.packed);
    if (topology_.shape().cp == 1) {
        return LocalBatch(micro_batch_of(bytes));
    }
    auto shard =
        make_context_shard(bytes, planned.packed.documents, planned.cp, topology_.coordinates().cp);
    if (!shard) {
        return shard.error();
    }
    return LocalBatch(std::move(*shard));
}

void ParallelTrainer::emit_workload(const StepPlan& plan) const {
    if (!instrument::active()) {
        return;
    }
    const GridCoordinates me = topology_.coordinates();
    std::string json = "{\"step\":" + std::to_string(plan.step) + ",\"balancer\":\"" +
                       balance::balancer_name(config_.balancer) + "\",\"microbatches\":[";
    const auto& replica = plan.replicas[static_cast<std::size_t>(me.dp)];
    for (std::size_t j = 0; j < replica.size(); ++j) {
        json += j > 0 ? ",[" : "[";
        const auto& planned = replica[j];
        bool first = true;
        for (const auto& range : planned.cp.ranks[static_cast<std::size_t>(me.cp)].ranges) {
            std::int64_t length = 0;
            for (const auto& document : planned.packed.documents) {
                if (document.id == range.document_id) {
                    length = document.length;
                }
            }
            json += (first ? "[" : ",[") + std::to_string(range.document_id) + "," +
                    std::to_string(length) + "," + std::to_string(range.begin) + "," +
                    std::to_string(range.end) + "]";
            first = false;
        }
        json += "]";
    }
    json += "]}";
    instrument::mark("fulcrum.workload", json);
}

void ParallelTrainer::run_forward(int step, const PipelineOp& op, const LocalBatch& batch,
                                  Activations& acts, double& loss_sum) {
    const int stage = topology_.coordinates().pp, p = topology_.shape().pp;
    const LayerRange layers = chunk_layers_[static_cast<std::size_t>(op.chunk)];
    instrument::KeyScope keys(
        {step, first_microbatch_ + op.microbatch, stage, Phase::forward, -1, op.chunk});
    instrument::CpuTimedRange range(range_name::kForward, Category::compute);
    if (op.chunk == 0) {
        // A micro-batch's first pass on this stage; its other chunks reuse what it loaded.
        std::visit([&](const auto& local) { model_.load_micro_batch(local, acts); }, batch);
    }
    // Held from this forward until the chunk's backward is done (Activations, by the schedule).
    acts.allocate_blocks(layers.first, layers.last);
    if (holds_embedding(op.chunk)) {
        model_.forward_embedding(acts);
    } else {
        Tensor input = acts.block_input(layers.first);
        instrument::Range recv(range_name::kRecvActivations, Category::communication,
                               instrument::with_bytes(bytes_of(input)));
        groups_.pp->recv(span_of(input), (stage + p - 1) % p);
    }
    model_.forward_blocks(layers.first, layers.last, acts);
    if (holds_head(op.chunk)) {
        loss_sum += model_.forward_head(acts);
    } else {
        Tensor output = acts.block_input(layers.last);
        instrument::Range send(range_name::kSendActivations, Category::communication,
                               instrument::with_bytes(bytes_of(output)));
        groups_.pp->post_send(span_of(output), (stage + 1) % p);
    }
}

bool ParallelTrainer::overlaps_reduction() const {
    return config_.overlap_grad_reduce && groups_.dp_cp->size() > 1;
}

template <typename Pass>
void ParallelTrainer::layer_by_layer_with_reduction(int chunk, Pass pass) {
    const LayerRange layers = chunk_layers_[static_cast<std::size_t>(chunk)];
    const Tensor grads = model_.gradients();
    for (int layer = layers.last - 1; layer >= layers.first; --layer) {
        pass(layer);
        // This layer's gradients are final: reduce them while the layers below compute.
        const ElementRange range = model_.layout().block_range(layer, layer + 1);
        instrument::Range start(range_name::kDpAllReduceStart, Category::runtime,
                                instrument::with_bytes(range.count * std::int64_t(sizeof(float))));
        groups_.dp_cp->start_all_reduce_sum(span_of(grads.slice(range.offset, range.count)));
    }
}

std::vector<std::size_t> ParallelTrainer::last_writers(const std::vector<PipelineOp>& ops) const {
    const Phase writes_weights =
        parallel::splits_backward(config_.layout.schedule) ? Phase::weight_grad : Phase::backward;
    std::vector<std::size_t> last_writer(chunk_layers_.size(), ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i) {
        if (ops[i].kind == writes_weights) {
            last_writer[static_cast<std::size_t>(ops[i].chunk)] = i;
        }
    }
    return last_writer;
}

void ParallelTrainer::start_reductions_without_passes(const StepPlan& plan) {
    if (!overlaps_reduction()) {
        return;
    }
    // The other replicas start each chunk's layer reductions after the pass that last writes
    // the chunk's gradients, in schedule order; this one has no pass, so it starts the same
    // reductions (of its zeros) in the same order, or every replica would wait for it.
    const int reference = longest_replica(plan);
    if (reference == 0) {
        return;
    }
    const std::vector<PipelineOp> ops = step_ops(reference);
    const std::vector<std::size_t> last_writer = last_writers(ops);
    std::vector<int> chunks(chunk_layers_.size());
    std::iota(chunks.begin(), chunks.end(), 0);
    std::sort(chunks.begin(), chunks.end(), [&](int a, int b) {
        return last_writer[static_cast<std::size_t>(a)] < last_writer[static_cast<std::size_t>(b)];
    });
    for (int chunk : chunks) {
        layer_by_layer_with_reduction(chunk, [](int) {});
    }
}

void ParallelTrainer::gather_as_pass(int step, const PipelineOp& op) {
    instrument::KeyScope keys({step, first_microbatch_ + op.microbatch, topology_.coordinates().pp,
                               op.kind, -1, op.chunk});
    const LayerRange layers = chunk_layers_[static_cast<std::size_t>(op.chunk)];
    model_.gather_as_pass(op.kind != Phase::forward, layers.first, layers.last,
                          holds_embedding(op.chunk), holds_head(op.chunk));
}

void ParallelTrainer::run_backward(int step, const PipelineOp& op, Activations& acts,
                                   float loss_scale, bool reduce_layers) {
    const int stage = topology_.coordinates().pp, p = topology_.shape().pp;
    const LayerRange layers = chunk_layers_[static_cast<std::size_t>(op.chunk)];
    // Split off W (ZB-H1): this is B, which computes only what the previous stage waits for.
    const BackwardPart part = parallel::splits_backward(config_.layout.schedule)
                                  ? BackwardPart::input_gradients
                                  : BackwardPart::whole;
    instrument::KeyScope keys(
        {step, first_microbatch_ + op.microbatch, stage, Phase::backward, -1, op.chunk});
    instrument::CpuTimedRange range(range_name::kBackward, Category::compute);
    if (part == BackwardPart::input_gradients) {
        acts.allocate_output_gradients(layers.first, layers.last);
    }
    if (holds_head(op.chunk)) {
        model_.backward_head(acts, loss_scale, part);
    } else {
        model_.begin_backward(acts);
        Tensor gradient = model_.residual_gradient();
        instrument::Range recv(range_name::kRecvGradients, Category::communication,
                               instrument::with_bytes(bytes_of(gradient)));
        groups_.pp_gradients->recv(span_of(gradient), (stage + 1) % p);
    }
    if (reduce_layers && overlaps_reduction()) {
        layer_by_layer_with_reduction(
            op.chunk, [&](int layer) { model_.backward_blocks(layer, layer + 1, acts, part); });
    } else {
        model_.backward_blocks(layers.first, layers.last, acts, part);
    }
    if (holds_embedding(op.chunk)) {
        model_.backward_embedding(acts);
    } else {
        Tensor gradient = model_.residual_gradient();
        instrument::Range send(range_name::kSendGradients, Category::communication,
                               instrument::with_bytes(bytes_of(gradient)));
        groups_.pp_gradients->post_send(span_of(gradient), (stage + p - 1) % p);
    }
    // What W does not read goes now; the rest after W (run_weight_gradients).
    if (part == BackwardPart::input_gradients) {
        acts.release_input_gradient_inputs(layers.first, layers.last);
    } else {
        acts.release_blocks(layers.first, layers.last);
    }
}

void ParallelTrainer::run_weight_gradients(int step, const PipelineOp& op, Activations& acts,
                                           bool reduce_layers) {
    const int stage = topology_.coordinates().pp;
    const LayerRange layers = chunk_layers_[static_cast<std::size_t>(op.chunk)];
    instrument::KeyScope keys(
        {step, first_microbatch_ + op.microbatch, stage, Phase::weight_grad, -1, op.chunk});
    instrument::CpuTimedRange range(range_name::kWeightGradients, Category::compute);
    if (holds_head(op.chunk)) {
        model_.backward_weights_head(acts);
    }
    if (reduce_layers && overlaps_reduction()) {
        layer_by_layer_with_reduction(
            op.chunk, [&](int layer) { model_.backward_weights_blocks(layer, layer + 1, acts); });
    } else {
        model_.backward_weights_blocks(layers.first, layers.last, acts);
    }
    acts.release_blocks(layers.first, layers.last);
}

void ParallelTrainer::reduce_gradients(int step) {
    instrument::KeyScope keys({step, -1, topology_.coordinates().pp, Phase::none});
    // The tied embedding: the first stage's embedding and the last stage's LM head each hold
    // part of wte's gradient (Megatron's embedding group).
    const Tensor wte = model_.weight_gradients().wte;
    if (topology_.shape().pp > 1 && (topology_.first_stage() || topology_.last_stage()) &&
        !wte.empty()) {
        instrument::Range range("pp all-reduce embedding", Category::communication,
                                instrument::with_bytes(bytes_of(wte)));
        groups_.embedding->all_reduce_sum(span_of(wte));
    }
    reduce_over_data_parallel();
    // Sequence parallelism left each TP rank its rows' share of the LayerNorm and embedding
    // gradients (tensor_parallel.h). Sums commute, so after DP × CP is as good as before, and
    // after is required: the overlapped reductions own their buffers until they are waited for.
    model_.reduce_sequence_parallel_gradients();
}

void ParallelTrainer::reduce_over_data_parallel() {
    const Tensor grads = model_.gradients();
    if (groups_.dp_cp->size() <= 1) {
        return;
    }
    if (ShardedGradients* sharded = model_.sharded_gradients()) {
        // ZeRO-2: the blocks' gradients were reduce-scattered by the passes; the embedding's
        // and the head's now.
        sharded->reduce_outer();
        return;
    }
    if (config_.layout.zero_stage >= 2) {
        // ZeRO-2: each rank keeps the sums of its shard only; the rest of the buffer is left
        // unreduced and read by nothing (gradient_norm and the update take the shard).
        const ElementRange shard = optimizer_.owned();
        const Tensor staging = zero_staging_.f32(0, {std::max<std::int64_t>(shard.count, 1)});
        instrument::Range range(range_name::kZeroReduceScatter, Category::communication,
                                instrument::with_bytes(bytes_of(grads)));
        groups_.dp_cp->reduce_scatter_sum(span_of(grads), span_of(staging.slice(0, shard.count)),
                                          zero_counts_);
        model_.backend().copy(grads.slice(shard.offset, shard.count),
                              staging.slice(0, shard.count));
        return;
    }
    if (!overlaps_reduction()) {
        instrument::Range range(range_name::kDpAllReduce, Category::communication,
                                instrument::with_bytes(bytes_of(grads)));
        groups_.dp_cp->all_reduce_sum(span_of(grads));
        return;
    }
    // The stage's layers were started during the passes that last wrote them; the rest
    // (embedding, lnf, and the other stages' all-zero blocks, kept so both modes sum the same
    // buffer) now, in a range of the rest's bytes, then the wait: the reduction time the
    // overlap did not hide, in a range of its own, so that the range of bytes times only
    // calls that moved them.
    std::vector<ElementRange> started;
    for (const LayerRange& layers : chunk_layers_) {
        started.push_back(model_.layout().block_range(layers.first, layers.last));
    }
    std::sort(started.begin(), started.end(),
              [](const ElementRange& a, const ElementRange& b) { return a.offset < b.offset; });
    std::vector<ElementRange> rest;
    std::int64_t next = 0;
    for (const ElementRange& range : started) {
        if (range.offset > next) {
            rest.push_back({next, range.offset - next});
        }
        next = range.offset + range.count;
    }
    if (next < grads.numel()) {
        rest.push_back({next, grads.numel() - next});
    }
    if (!rest.empty()) {
        std::int64_t rest_bytes = 0;
        for (const ElementRange& range : rest) {
            rest_bytes += range.count * std::int64_t(sizeof(float));
        }
        instrument::Range range(range_name::kDpAllReduce, Category::communication,
                                instrument::with_bytes(rest_bytes));
        for (const ElementRange& range : rest) {
            groups_.dp_cp->all_reduce_sum(span_of(grads.slice(range.offset, range.count)));
        }
    }
    instrument::Range wait(range_name::kDpAllReduceWait, Category::communication);
    groups_.dp_cp->wait_all_reduces();
}

// ‖g‖ over the model, every parameter once: a stage counts the tensors it owns (wte on the
// first stage only, though the last holds a copy); DP/CP replicas hold the same summed
// gradients, so only dp = cp = 0 contributes; a TP-split tensor's parts are summed over the
// TP ranks, a TP-replicated one counted on TP rank 0 only. Σg² runs on the backend, so the
// gradients never leave the device.
// Under ZeRO-2 each DP × CP rank holds the sums of its shard only, so every one of them counts
// the owned tensors' elements in its shard.
double ParallelTrainer::gradient_norm() {
    const GridCoordinates me = topology_.coordinates();
    const bool sharded = config_.layout.zero_stage >= 2 && shards_optimizer();
    const ElementRange counted =
        sharded ? optimizer_.owned() : ElementRange{0, model_.layout().total()};
    double sum = 0;
    if (sharded || (me.dp == 0 && me.cp == 0)) {
        for (const auto& tensor : model_.layout().tensors()) {
            bool owned =
                tensor.name.starts_with("lnf") ? topology_.last_stage() : topology_.first_stage();
            if (tensor.layer >= 0) {
                owned = std::any_of(
                    chunk_layers_.begin(), chunk_layers_.end(), [&](const LayerRange& layers) {
                        return tensor.layer >= layers.first && tensor.layer < layers.last;
                    });
            }
            if (!owned || (tensor.tp_replicated() && me.tp != 0)) {
                continue;
            }
            const ElementRange part = overlap({tensor.offset, tensor.numel()}, counted);
            if (part.count > 0) {
                sum += model_.backend().sum_of_squares(model_.gradients_in(part));
            }
        }
    }
    double total[1] = {sum};
    groups_.world->all_reduce_sum(std::span<double>(total));
    return std::sqrt(total[0]);
}

// parallel::step_ops: interleaved 1F1B, or depth-first over the model chunks for a step whose
// micro-batch count is not a multiple of p.
std::vector<PipelineOp> ParallelTrainer::step_ops(int microbatches) const {
    const parallel::PipelineShape shape{topology_.shape().pp, microbatches,
                                        config_.layout.virtual_stages};
    FULCRUM_CHECK(microbatches >= 1, "a step needs a micro-batch");
    return parallel::step_ops(config_.layout.schedule, topology_.coordinates().pp, shape);
}

Result<StepReport> ParallelTrainer::step(const StepPlan& plan) {
    const GridCoordinates me = topology_.coordinates();
    if (plan.target_tokens <= 0) {
        return Error{ErrorCode::invalid_input,
                     "step " + std::to_string(plan.step) + " has no target tokens"};
    }
    emit_workload(plan);
    instrument::KeyScope keys({plan.step, -1, me.pp, Phase::none});
    instrument::Range step_range("step", Category::schedule);
    model_.zero_gradients();
    auto passes = run_passes(plan, float(1.0 / double(plan.target_tokens)));
    if (!passes) {
        return passes.error();
    }
    reduce_gradients(plan.step);
    StepReport report;
    report.target_tokens = plan.target_tokens;
    report.tokens = passes->tokens;
    report.micro_batches = passes->micro_batches;
    update(report);
    double loss[1] = {passes->loss_sum};
    groups_.world->all_reduce_sum(std::span<double>(loss));
    report.loss = loss[0] / double(plan.target_tokens);
    return report;
}

Result<ParallelTrainer::Passes> ParallelTrainer::run_passes(const StepPlan& plan, float loss_scale,
                                                            int first_microbatch) {
    first_microbatch_ = first_microbatch;
    const GridCoordinates me = topology_.coordinates();
    const auto& replica = plan.replicas.at(static_cast<std::size_t>(me.dp));
    const int microbatches = static_cast<int>(replica.size());
    std::vector<LocalBatch> batches;
    batches.reserve(replica.size());
    Passes passes;
    for (const auto& planned : replica) {
        auto local = local_micro_batch(planned);
        if (!local) {
            return local.error();
        }
        batches.push_back(std::move(*local));
        passes.tokens += std::visit([](const auto& b) { return b.size(); }, batches.back());
    }
    passes.micro_batches = microbatches;
    while (activations_.size() < batches.size()) {
        activations_.push_back(std::make_unique<Activations>(model_, blocks_held()));
        activations_.back()->allocate_by_schedule();
    }
    double loss_sum = 0;
    // A replica may have fewer micro-batches than another, or none (the last global batch of
    // an epoch with fewer documents than replicas): it runs the passes it has and takes part
    // in the reductions with zeros. Under ZeRO-3 the passes gather parameters from every
    // replica's shards, and under ZeRO-2 they reduce-scatter gradients into them, so each
    // replica runs the longest replica's schedule, and the passes of micro-batches it lacks
    // make their collectives alone (with zero gradients); the passes it has keep their order,
    // so the pipeline's transfers still meet.
    const bool sharded =
        model_.sharded_parameters() != nullptr || model_.sharded_gradients() != nullptr;
    const int scheduled = sharded ? longest_replica(plan) : microbatches;
    const std::vector<PipelineOp> ops =
        scheduled > 0 ? step_ops(scheduled) : std::vector<PipelineOp>{};
    // Per chunk, the last pass that writes its weight gradients: after it they are final.
    const std::vector<std::size_t> last_writer = last_writers(ops);
    if (ops.empty()) {
        start_reductions_without_passes(plan);
    }
    for (std::size_t i = 0; i < ops.size(); ++i) {
        const PipelineOp& op = ops[i];
        if (op.microbatch >= microbatches) {
            if (op.kind != Phase::none) {
                gather_as_pass(plan.step, op);
            }
            continue;
        }
        auto& acts = *activations_[static_cast<std::size_t>(op.microbatch)];
        const bool reduce_layers = i == last_writer[static_cast<std::size_t>(op.chunk)];
        switch (op.kind) {
            case Phase::none:  // not a pass
                break;
            case Phase::forward:
                run_forward(plan.step, op, batches[static_cast<std::size_t>(op.microbatch)], acts,
                            loss_sum);
                break;
            case Phase::backward:
                run_backward(plan.step, op, acts, loss_scale, reduce_layers);
                break;
            case Phase::weight_grad:
                run_weight_gradients(plan.step, op, acts, reduce_layers);
                break;
        }
    }
    groups_.pp->wait_sends();
    groups_.pp_gradients->wait_sends();
    // Loss: summed on the last stage's ranks (once per TP group; over every TP rank's rows
    // under sequence parallelism) over their local tokens.
    const bool counts_loss = topology_.last_stage() && (me.tp == 0 || model_.sequence_parallel());
    passes.loss_sum = counts_loss ? loss_sum : 0.0;
    return passes;
}

void ParallelTrainer::update(StepReport& report) {
    instrument::CpuTimedRange range("optimizer", Category::optimizer);
    report.step = ++steps_taken_;
    report.grad_norm = gradient_norm();
    report.clip_coefficient = clip_coefficient(report.grad_norm, config_.train.max_grad_norm);
    report.learning_rate = learning_rate_at(config_.train, report.step);
    // The owned range's gradients: ZeRO-2's shard, or that part of the whole buffer.
    const Tensor gradients = model_.gradients_in(optimizer_.owned());
    if (const ShardedParameters* sharded = model_.sharded_parameters()) {
        // ZeRO-3: the shard is the parameters; passes gather what they read from it.
        optimizer_.update(sharded->shard(), gradients, report.clip_coefficient,
                          report.learning_rate);
        return;
    }
    optimizer_.update(model_.parameters(), gradients, report.clip_coefficient,
                      report.learning_rate);
    if (shards_optimizer()) {
        // Every rank updated its shard: gather the others' (ZeRO-1 and -2).
        const Tensor params = model_.parameters();
        const ElementRange shard = optimizer_.owned();
        const Tensor staging = zero_staging_.f32(0, {std::max<std::int64_t>(shard.count, 1)});
        model_.backend().copy(staging.slice(0, shard.count),
                              params.slice(shard.offset, shard.count));
        instrument::Range range(range_name::kZeroAllGather, Category::communication,
                                instrument::with_bytes(bytes_of(params)));
        groups_.dp_cp->all_gather(span_of(staging.slice(0, shard.count)), span_of(params),
                                  zero_counts_);
    }
}

bool ParallelTrainer::shards_optimizer() const {
    return !zero_counts_.empty();
}

std::vector<float> ParallelTrainer::gather_parameters() {
    // The stage's tensors in the whole TP-local layout (zeros for the other stages')...
    const std::vector<float> local = expand_held(model_.layout(), model_.parameters_to_host());
    // ...the TP shards of this stage into the serial layout (every TP rank gets it)...
    std::vector<float> full = topology_.shape().tp > 1
                                  ? engine::gather_parameters(local, model_.config(), *groups_.tp)
                                  : local;
    // ...then each model chunk's blocks from its stage's (dp 0, cp 0, tp 0) rank, lnf with
    // the last chunk's.
    const ParameterLayout layout(model_.config());
    const int p = topology_.shape().pp, v = config_.layout.virtual_stages;
    for (int c = 0; c < p * v; ++c) {
        const int stage = c % p;
        if (stage == 0) {
            continue;  // world rank 0's own
        }
        const LayerRange layers = engine::chunk_layers(stage, c / p, p, v, model_.config().layers,
                                                       config_.layout.stage_layers);
        ElementRange range = layout.block_range(layers.first, layers.last);
        if (c == p * v - 1) {
            range.count = layout.total() - range.offset;  // blocks and lnf, which follow them
        }
        const int owner = topology_.rank_of({.pp = stage});
        std::span<float> part(full.data() + range.offset, static_cast<std::size_t>(range.count));
        if (topology_.rank() == owner) {
            groups_.world->send(part, 0);
        } else if (topology_.rank() == 0) {
            groups_.world->recv(part, owner);
        }
    }
    if (topology_.rank() != 0) {
        full.clear();
    }
    return full;
}

}  // namespace fulcrum::engine
