#include "engine/parallel/parallel_trainer.h"

#include <cmath>
#include <numeric>
#include <string>

#include "engine/instrument/annotations.h"
#include "engine/parallel/context_parallel.h"
#include "engine/parallel/tensor_parallel.h"

namespace fulcrum::engine {
namespace {

std::span<float> span_of(Tensor tensor) {
    return {tensor.f32(), static_cast<std::size_t>(tensor.numel())};
}

std::int64_t bytes_of(Tensor tensor) { return tensor.numel() * std::int64_t(sizeof(float)); }

// A color that no grid rank uses, for ranks that take part in a split only to stay in step.
int lone_color(const Topology& topology) { return topology.shape().world() + topology.rank(); }

}  // namespace

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
    groups.dp_cp = world.split(color_without(&GridCoordinates::dp, &GridCoordinates::cp),
                               me.dp * topology.shape().cp + me.cp, "dp×cp");
    const bool holds_embedding = topology.first_stage() || topology.last_stage();
    groups.embedding = world.split(
        holds_embedding ? color_without(&GridCoordinates::pp) : lone_color(topology), me.pp,
        "embedding");
    return groups;
}

ParallelTrainer::ParallelTrainer(GptModel& model, const Topology& topology,
                                 ParallelGroups& groups, const TrainingDocuments& documents,
                                 ParallelTrainConfig config)
    : model_(model), topology_(topology), groups_(groups), documents_(documents),
      config_(config), optimizer_(model.backend(), model.layout(), config.train.adamw),
      layers_(stage_layers(topology.coordinates().pp, topology.shape().pp,
                           model.config().n_layer)) {}

Result<ParallelTrainer::LocalBatch> ParallelTrainer::local_micro_batch(
    const PlannedMicroBatch& planned) const {
    const auto bytes = document_bytes(documents_, planned.packed);
    if (topology_.shape().cp == 1) {
        return LocalBatch(micro_batch_of(bytes));
    }
    auto shard = make_context_shard(bytes, planned.packed.documents, planned.cp,
                                    topology_.coordinates().cp);
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

void ParallelTrainer::run_forward(int step, int microbatch, const LocalBatch& batch,
                                  Activations& acts, double& loss_sum) {
    const int stage = topology_.coordinates().pp;
    instrument::KeyScope keys({step, microbatch, stage, Phase::forward});
    instrument::Range range("forward", Category::compute);
    std::visit([&](const auto& local) { model_.load_micro_batch(local, acts); }, batch);
    if (topology_.first_stage()) {
        model_.forward_embedding(acts);
    } else {
        Tensor input = acts.block_input(layers_.first);
        instrument::Range recv("recv activations", Category::communication,
                               instrument::with_bytes(bytes_of(input)));
        groups_.pp->recv(span_of(input), topology_.coordinates().pp - 1);
    }
    model_.forward_blocks(layers_.first, layers_.last, acts);
    if (topology_.last_stage()) {
        loss_sum += model_.forward_head(acts);
    } else {
        Tensor output = acts.block_input(layers_.last);
        instrument::Range send("send activations", Category::communication,
                               instrument::with_bytes(bytes_of(output)));
        groups_.pp->post_send(span_of(output), topology_.coordinates().pp + 1);
    }
}

bool ParallelTrainer::overlaps_reduction() const {
    return config_.overlap_reduction && groups_.dp_cp->size() > 1;
}

void ParallelTrainer::run_backward(int step, int microbatch, Activations& acts, float loss_scale,
                                   bool last_of_step) {
    const int stage = topology_.coordinates().pp;
    instrument::KeyScope keys({step, microbatch, stage, Phase::backward});
    instrument::Range range("backward", Category::compute);
    if (topology_.last_stage()) {
        model_.backward_head(acts, loss_scale);
    } else {
        model_.begin_backward(acts);
        Tensor gradient = model_.residual_gradient();
        instrument::Range recv("recv gradients", Category::communication,
                               instrument::with_bytes(bytes_of(gradient)));
        groups_.pp->recv(span_of(gradient), stage + 1);
    }
    if (last_of_step && overlaps_reduction()) {
        const Tensor grads = model_.gradients();
        for (int layer = layers_.last - 1; layer >= layers_.first; --layer) {
            model_.backward_blocks(layer, layer + 1, acts);
            // This layer's gradients are final: reduce them while the layers below compute.
            const ElementRange range = model_.layout().block_range(layer, layer + 1);
            instrument::Range start("dp all-reduce start", Category::communication,
                                    instrument::with_bytes(range.count * std::int64_t(sizeof(float))));
            groups_.dp_cp->start_all_reduce_sum(span_of(grads.slice(range.offset, range.count)));
        }
    } else {
        model_.backward_blocks(layers_.first, layers_.last, acts);
    }
    if (topology_.first_stage()) {
        model_.backward_embedding(acts);
    } else {
        Tensor gradient = model_.residual_gradient();
        instrument::Range send("send gradients", Category::communication,
                               instrument::with_bytes(bytes_of(gradient)));
        groups_.pp->post_send(span_of(gradient), stage - 1);
    }
}

void ParallelTrainer::reduce_gradients(int step) {
    instrument::KeyScope keys({step, -1, topology_.coordinates().pp, Phase::none});
    const auto tensors = model_.layout().tensors();
    const Tensor grads = model_.gradients();
    // The tied embedding: the first stage's embedding and the last stage's LM head each hold
    // part of wte's gradient (Megatron's embedding group).
    if (topology_.shape().pp > 1 && (topology_.first_stage() || topology_.last_stage())) {
        for (const auto& tensor : tensors) {
            if (tensor.name == "wte") {
                std::span<float> wte(grads.f32() + tensor.offset,
                                     static_cast<std::size_t>(tensor.numel()));
                instrument::Range range("pp all-reduce embedding", Category::communication,
                                        instrument::with_bytes(wte.size_bytes()));
                groups_.embedding->all_reduce_sum(wte);
            }
        }
    }
    if (groups_.dp_cp->size() <= 1) {
        return;
    }
    instrument::Range range("dp all-reduce gradients", Category::communication,
                            instrument::with_bytes(bytes_of(grads)));
    if (!overlaps_reduction()) {
        groups_.dp_cp->all_reduce_sum(span_of(grads));
        return;
    }
    // The stage's layers were started during the last backward pass; the rest (embedding,
    // lnf, and the other stages' all-zero blocks, kept so both modes sum the same buffer)
    // now, then the wait: this range is the reduction time the overlap did not hide.
    const ElementRange blocks = model_.layout().block_range(layers_.first, layers_.last);
    const std::int64_t after = blocks.offset + blocks.count;
    if (blocks.offset > 0) {
        groups_.dp_cp->all_reduce_sum(span_of(grads.slice(0, blocks.offset)));
    }
    if (after < grads.numel()) {
        groups_.dp_cp->all_reduce_sum(span_of(grads.slice(after, grads.numel() - after)));
    }
    groups_.dp_cp->wait_all_reduces();
}

// ‖g‖ over the model, every parameter once: a stage counts the tensors it owns (wte on the
// first stage only, though the last holds a copy); DP/CP replicas hold the same summed
// gradients, so only dp = cp = 0 contributes; a TP-split tensor's parts are summed over the
// TP ranks, a TP-replicated one counted on TP rank 0 only. Σg² runs on the backend, so the
// gradients never leave the device.
double ParallelTrainer::gradient_norm() {
    const GridCoordinates me = topology_.coordinates();
    double sum = 0;
    if (me.dp == 0 && me.cp == 0) {
        const Tensor grads = model_.gradients();
        for (const auto& tensor : model_.layout().tensors()) {
            const bool owned =
                tensor.layer >= 0
                    ? tensor.layer >= layers_.first && tensor.layer < layers_.last
                    : (tensor.name.starts_with("lnf") ? topology_.last_stage()
                                                      : topology_.first_stage());
            if (!owned || (tensor.tp_replicated() && me.tp != 0)) {
                continue;
            }
            sum += model_.backend().sum_of_squares(grads.slice(tensor.offset, tensor.numel()));
        }
    }
    double total[1] = {sum};
    groups_.world->all_reduce_sum(std::span<double>(total));
    return std::sqrt(total[0]);
}

Result<StepReport> ParallelTrainer::step(const StepPlan& plan) {
    const GridCoordinates me = topology_.coordinates();
    const auto& replica = plan.replicas.at(static_cast<std::size_t>(me.dp));
    const int microbatches = static_cast<int>(replica.size());
    if (plan.target_tokens <= 0) {
        return Error{ErrorCode::invalid_input,
                     "step " + std::to_string(plan.step) + " has no target tokens"};
    }
    emit_workload(plan);
    instrument::KeyScope keys({plan.step, -1, me.pp, Phase::none});
    instrument::Range step_range("step", Category::schedule);

    std::vector<LocalBatch> batches;
    batches.reserve(replica.size());
    StepReport report;
    report.step = ++steps_taken_;
    report.target_tokens = plan.target_tokens;
    for (const auto& planned : replica) {
        auto local = local_micro_batch(planned);
        if (!local) {
            return local.error();
        }
        batches.push_back(std::move(*local));
        report.tokens += std::visit([](const auto& b) { return b.size(); }, batches.back());
    }
    report.micro_batches = microbatches;
    while (activations_.size() < batches.size()) {
        activations_.push_back(std::make_unique<Activations>(model_));
    }

    model_.zero_gradients();
    const float loss_scale = float(1.0 / double(plan.target_tokens));
    double loss_sum = 0;
    const std::vector<PipelineOp> ops =
        stage_ops(config_.schedule, me.pp, {topology_.shape().pp, microbatches, 1});
    std::size_t last_backward = 0;
    for (std::size_t i = 0; i < ops.size(); ++i) {
        if (ops[i].kind == parallel::PassKind::backward) {
            last_backward = i;
        }
    }
    for (std::size_t i = 0; i < ops.size(); ++i) {
        const PipelineOp& op = ops[i];
        auto& acts = *activations_[static_cast<std::size_t>(op.microbatch)];
        if (op.kind == parallel::PassKind::forward) {
            run_forward(plan.step, op.microbatch, batches[static_cast<std::size_t>(op.microbatch)],
                        acts, loss_sum);
        } else {
            run_backward(plan.step, op.microbatch, acts, loss_scale, i == last_backward);
        }
    }
    groups_.pp->wait_sends();
    reduce_gradients(plan.step);

    {
        instrument::Range range("optimizer", Category::optimizer);
        report.grad_norm = gradient_norm();
        report.clip_coefficient = clip_coefficient(report.grad_norm, config_.train.max_grad_norm);
        report.learning_rate = learning_rate_at(config_.train, report.step);
        optimizer_.update(model_.parameters(), model_.gradients(), report.clip_coefficient,
                          report.learning_rate);
    }
    // Loss: summed on the last stage's ranks (once per TP group) over their local tokens.
    double loss[1] = {topology_.last_stage() && me.tp == 0 ? loss_sum : 0.0};
    groups_.world->all_reduce_sum(std::span<double>(loss));
    report.loss = loss[0] / double(plan.target_tokens);
    return report;
}

std::vector<float> ParallelTrainer::gather_parameters() {
    const std::vector<float> local = model_.parameters_to_host();
    // First the TP shards of this stage into the serial layout (every TP rank gets it)...
    std::vector<float> full = topology_.shape().tp > 1
                                  ? engine::gather_parameters(local, model_.config(), *groups_.tp)
                                  : local;
    // ...then stage s's blocks from its (dp 0, cp 0, tp 0) rank, lnf from the last stage.
    const ParameterLayout layout(model_.config());
    for (int stage = 1; stage < topology_.shape().pp; ++stage) {
        const LayerRange layers = stage_layers(stage, topology_.shape().pp, model_.config().n_layer);
        ElementRange range = layout.block_range(layers.first, layers.last);
        const bool last = stage == topology_.shape().pp - 1;
        if (last) {
            range.count = layout.total() - range.offset;  // blocks and lnf, which follow them
        }
        const int owner = topology_.rank_of({0, stage, 0, 0});
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
