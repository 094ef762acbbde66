#include "engine/distributed/hot_switch_trainer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

#include "core/parallel/schedule.h"
#include "core/trace/annotations.h"
#include "engine/instrument/annotations.h"

namespace fulcrum::engine {
namespace {

// The two parts of a layer that switch by different plans (hot_switch_trainer.h).
enum class Part { split, replicated };

// The layout whose holders are those of the TP-replicated tensors: TP folded into CP keeps
// every rank's number (TP varies fastest, then CP) and makes every TP rank a holder.
parallel::GridShape folded(const parallel::GridShape& shape) {
    return {.dp = shape.dp, .tp = 1, .pp = shape.pp, .cp = shape.cp * shape.tp};
}

// Whether a tensor belongs to `unit`'s `part`: a layer's own tensors, wpe with layer 0 and
// lnf with the last (on the stages that hold those layers); −1 and `layers` are the tied wte
// (the embedding and the head's copy).
bool in_unit(const ParameterTensor& tensor, int unit, Part part, int layers) {
    if (part == Part::split) {
        return tensor.layer == unit && unit >= 0 && unit < layers && !tensor.tp_replicated();
    }
    if (unit < 0 || unit >= layers) {
        return tensor.kind == ParameterKind::token_embedding;
    }
    if (tensor.layer == unit) {
        return tensor.tp_replicated();
    }
    return (unit == 0 && tensor.kind == ParameterKind::position_embedding) ||
           (unit == layers - 1 &&
            (tensor.kind == ParameterKind::lnf_weight || tensor.kind == ParameterKind::lnf_bias));
}

// The elements of a TP-split tensor in the local buffer of TP rank `tp_rank` (of the layout's
// T) that are piece `piece` of `pieces` (the piece TP rank `piece` of `pieces` would hold:
// output rows, each of Q, K and V's head rows, or input columns), in row-major order.
void append_piece(const ParameterTensor& tensor, int tp_size, int tp_rank, int piece, int pieces,
                  std::vector<ElementRange>& out) {
    const int per_rank = pieces / tp_size;
    const std::int64_t local_piece = piece - std::int64_t(tp_rank) * per_rank;
    FULCRUM_CHECK(local_piece >= 0 && local_piece < per_rank, "a piece this TP rank lacks");
    const std::int64_t width = tensor.cols == 0 ? 1 : tensor.cols;
    switch (tensor.tp_split) {
        case TpSplit::replicated:
            out.push_back({tensor.offset, tensor.numel()});
            break;
        case TpSplit::output_rows: {
            const std::int64_t rows = tensor.rows / per_rank;
            out.push_back({tensor.offset + local_piece * rows * width, rows * width});
            break;
        }
        case TpSplit::head_rows: {
            const std::int64_t block = tensor.rows / 3, rows = block / per_rank;
            for (int b = 0; b < 3; ++b) {
                out.push_back(
                    {tensor.offset + (b * block + local_piece * rows) * width, rows * width});
            }
            break;
        }
        case TpSplit::input_columns: {
            const std::int64_t columns = tensor.cols / per_rank;
            for (std::int64_t row = 0; row < tensor.rows; ++row) {
                out.push_back({tensor.offset + row * tensor.cols + local_piece * columns, columns});
            }
            break;
        }
    }
}

// Piece `piece` of `pieces` of a unit's part, in the local layout of TP rank `tp_rank`.
std::vector<ElementRange> unit_elements(const ParameterLayout& layout, int tp_rank, int unit,
                                        Part part, int piece, int pieces) {
    std::vector<ElementRange> ranges;
    const int layers = layout.config().layers;
    for (const ParameterTensor& tensor : layout.tensors()) {
        if (!in_unit(tensor, unit, part, layers)) {
            continue;
        }
        if (part == Part::replicated) {
            ranges.push_back({tensor.offset, tensor.numel()});
        } else {
            append_piece(tensor, layout.tp_size(), tp_rank, piece, pieces, ranges);
        }
    }
    return ranges;
}

std::int64_t element_count(const std::vector<ElementRange>& ranges) {
    std::int64_t n = 0;
    for (const ElementRange& range : ranges) {
        n += range.count;
    }
    return n;
}

// Whether `rank` holds piece `piece` of `pieces` of a unit's part under `shape` (plan_switch's
// holders: the stage's layers, the TP slice of the split tensors, wte on the first stage and,
// with more than one, the last).
bool holds(const parallel::GridShape& shape, int rank, int layers, int unit, Part part, int piece,
           int pieces) {
    const GridCoordinates at = parallel::coordinates_of(shape, rank);
    if (unit < 0 || unit >= layers) {
        return at.pp == 0 || at.pp == shape.pp - 1;
    }
    const parallel::LayerRange stage = parallel::stage_layers(at.pp, shape.pp, layers);
    if (unit < stage.first || unit >= stage.last) {
        return false;
    }
    return part == Part::replicated || at.tp == piece / (pieces / shape.tp);
}

void append_values(const std::vector<float>& buffer, const std::vector<ElementRange>& ranges,
                   std::vector<float>& out) {
    for (const ElementRange& range : ranges) {
        out.insert(out.end(), buffer.begin() + range.offset,
                   buffer.begin() + range.offset + range.count);
    }
}

void copy_values(const float* in, const std::vector<ElementRange>& ranges,
                 std::vector<float>& buffer) {
    for (const ElementRange& range : ranges) {
        std::copy_n(in, range.count, buffer.begin() + range.offset);
        in += range.count;
    }
}

std::string number_text(double value) {
    return std::to_string(std::llround(value));
}

}  // namespace

Status HotSwitchTrainer::check(const parallel::HotSwitchSpec& spec, const ModelShape& model) {
    for (const parallel::HotSwitchBucket& a : spec.buckets) {
        for (const parallel::HotSwitchBucket& b : spec.buckets) {
            const int pieces = std::lcm(a.layout.tp, b.layout.tp);
            if (model.heads % pieces != 0) {
                return Error{ErrorCode::invalid_input,
                             "--hot-switch: switching between tp" + std::to_string(a.layout.tp) +
                                 " and tp" + std::to_string(b.layout.tp) +
                                 " cuts each layer's tensors into " + std::to_string(pieces) +
                                 " pieces of whole heads, but --heads is " +
                                 std::to_string(model.heads) + "; use TP degrees whose " +
                                 "least common multiple divides the heads"};
            }
        }
    }
    return {};
}

HotSwitchTrainer::HotSwitchTrainer(Backend& backend, Communicator& world,
                                   Communicator& device_world, const TrainingDocuments& documents,
                                   HotSwitchConfig config)
    : world_(world), documents_(documents), config_(std::move(config)) {
    traffic_.sent_to.assign(static_cast<std::size_t>(world.size()), 0.0);
    for (const parallel::HotSwitchBucket& bucket : config_.spec.buckets) {
        const auto same = std::find_if(layouts_.begin(), layouts_.end(), [&](const auto& layout) {
            return layout->shape == bucket.layout;
        });
        bucket_layout_.push_back(static_cast<int>(same - layouts_.begin()));
        if (same != layouts_.end()) {
            continue;
        }
        auto layout = std::make_unique<LayoutEngine>();
        layout->shape = bucket.layout;
        auto topology = Topology::create(bucket.layout, world.size(), world.rank());
        FULCRUM_CHECK(topology.ok(), "a hot-switch layout over another world (checked first)");
        layout->topology = std::make_unique<Topology>(std::move(*topology));
        layout->groups = ParallelGroups::create(device_world, *layout->topology);
        layout->model = std::make_unique<GptModel>(
            backend, config_.model,
            ModelParallel{layout->groups.tp.get(), layout->groups.cp.get()});
        // Every layout starts from the serial initial values: all of them are current.
        layout->model->initialize(config_.seed);
        layout->model->set_attention_chunking(config_.attention);
        layout->trainer = std::make_unique<ParallelTrainer>(
            *layout->model, *layout->topology, layout->groups, documents, config_.train);
        layouts_.push_back(std::move(layout));
    }
}

HotSwitchTrainer::SwitchWork HotSwitchTrainer::prepare(const LayoutEngine& from,
                                                       const LayoutEngine& to, bool parameters,
                                                       bool gradients) const {
    const int me = world_.rank(), world = world_.size(), layers = config_.model.layers;
    const ParameterLayout& from_layout = from.model->layout();
    const ParameterLayout& to_layout = to.model->layout();
    const int from_tp = from.topology->coordinates().tp, to_tp = to.topology->coordinates().tp;
    // Algorithm 1 balances by bytes: a layer's split and replicated floats, wte's.
    const ParameterLayout serial(config_.model);
    const double wte = double(serial.find(ParameterKind::token_embedding).numel()) * 4;
    double split_layer = 0, replicated_layer = 0;
    for (const ParameterTensor& tensor : serial.tensors()) {
        if (tensor.layer == 0) {
            (tensor.tp_replicated() ? replicated_layer : split_layer) += double(tensor.numel()) * 4;
        }
    }
    struct Planned {
        Part part;
        int pieces;
        parallel::SwitchPlan plan;
        parallel::GridShape from, to;
    };
    const std::vector<Planned> plans = {
        {Part::split, std::lcm(from.shape.tp, to.shape.tp),
         parallel::plan_switch({.layers = layers, .layer_bytes = split_layer, .embedding_bytes = 0},
                               from.shape, to.shape, config_.gpus_per_node),
         from.shape, to.shape},
        {Part::replicated, 1,
         parallel::plan_switch(
             {.layers = layers, .layer_bytes = replicated_layer, .embedding_bytes = wte},
             folded(from.shape), folded(to.shape), config_.gpus_per_node),
         folded(from.shape), folded(to.shape)},
    };
    SwitchWork work;
    work.parameters = parameters;
    work.gradients = gradients;
    work.outgoing.resize(std::size_t(world));
    work.incoming.resize(std::size_t(world));
    work.sent_to.assign(std::size_t(world), 0.0);
    const double buffers = double(parameters) + double(gradients);
    const int per_node = std::max(config_.gpus_per_node, 1);
    std::vector<double> sent(std::size_t(world), 0.0);
    for (const Planned& planned : plans) {
        // What this rank holds under both layouts it copies itself.
        for (int unit = -1; unit <= layers; ++unit) {
            for (int piece = 0; piece < planned.pieces; ++piece) {
                if (holds(planned.to, me, layers, unit, planned.part, piece, planned.pieces) &&
                    holds(planned.from, me, layers, unit, planned.part, piece, planned.pieces)) {
                    work.local.push_back({unit_elements(from_layout, from_tp, unit, planned.part,
                                                        piece, planned.pieces),
                                          unit_elements(to_layout, to_tp, unit, planned.part, piece,
                                                        planned.pieces)});
                }
            }
        }
        for (const parallel::SwitchTransfer& transfer : planned.plan.transfers) {
            const int piece = static_cast<int>(std::lround(transfer.begin * planned.pieces));
            // The same on every rank: a piece's size does not depend on who holds it.
            const double bytes =
                double(element_count(unit_elements(serial, 0, transfer.unit, planned.part, 0, 1))) *
                4 * buffers / planned.pieces;
            sent[std::size_t(transfer.source)] += bytes;
            work.total_bytes += bytes;
            if (transfer.source / per_node != transfer.destination / per_node) {
                work.inter_node_bytes += bytes;
            }
            if (transfer.source == me) {
                work.outgoing[std::size_t(transfer.destination)].push_back(unit_elements(
                    from_layout, from_tp, transfer.unit, planned.part, piece, planned.pieces));
                work.sent_to[std::size_t(transfer.destination)] += bytes;
            }
            if (transfer.destination == me) {
                work.incoming[std::size_t(transfer.source)].push_back(unit_elements(
                    to_layout, to_tp, transfer.unit, planned.part, piece, planned.pieces));
                work.received += bytes;
            }
        }
    }
    work.largest_send_bytes = *std::max_element(sent.begin(), sent.end());
    return work;
}

void HotSwitchTrainer::execute(const SwitchWork& work, LayoutEngine& from, LayoutEngine& to) {
    const int world = world_.size();
    const std::vector<float> from_params =
        work.parameters ? from.model->parameters_to_host() : std::vector<float>{};
    const std::vector<float> from_grads =
        work.gradients ? from.model->gradients_to_host() : std::vector<float>{};
    std::vector<float> to_params =
        work.parameters ? to.model->parameters_to_host() : std::vector<float>{};
    std::vector<float> to_grads(work.gradients ? std::size_t(to.model->layout().total()) : 0, 0.0f);
    // One message per peer, parameters then gradients of each slice: every send posted
    // (copied) first, then every receive, so no two ranks wait on each other.
    const auto pack = [&](const std::vector<ElementRange>& ranges, std::vector<float>& out) {
        if (work.parameters) {
            append_values(from_params, ranges, out);
        }
        if (work.gradients) {
            append_values(from_grads, ranges, out);
        }
    };
    const auto unpack = [&](const float* at, const std::vector<ElementRange>& ranges) {
        const std::int64_t n = element_count(ranges);
        if (work.parameters) {
            copy_values(at, ranges, to_params);
            at += n;
        }
        if (work.gradients) {
            copy_values(at, ranges, to_grads);
            at += n;
        }
        return at;
    };
    for (int peer = 0; peer < world; ++peer) {
        std::vector<float> message;
        for (const auto& ranges : work.outgoing[std::size_t(peer)]) {
            pack(ranges, message);
        }
        if (!message.empty()) {
            world_.post_send(message, peer);
        }
    }
    for (const auto& [source, target] : work.local) {
        std::vector<float> values;
        pack(source, values);
        unpack(values.data(), target);
    }
    for (int peer = 0; peer < world; ++peer) {
        std::int64_t count = 0;
        for (const auto& ranges : work.incoming[std::size_t(peer)]) {
            count += element_count(ranges);
        }
        if (count == 0) {
            continue;
        }
        std::vector<float> message(std::size_t(count) *
                                   std::size_t(int(work.parameters) + int(work.gradients)));
        world_.recv(message, peer);
        const float* at = message.data();
        for (const auto& ranges : work.incoming[std::size_t(peer)]) {
            at = unpack(at, ranges);
        }
    }
    world_.wait_sends();
    if (work.parameters) {
        to.model->set_parameters(to_params);
        to.parameters_current = true;
    }
    if (work.gradients) {
        to.carried_gradients = std::move(to_grads);
    }
}

void HotSwitchTrainer::switch_layout(int from_bucket, int to_bucket, LayoutEngine& from,
                                     LayoutEngine& to, bool parameters, bool gradients) {
    const SwitchWork work = prepare(from, to, parameters, gradients);
    const double sent = std::accumulate(work.sent_to.begin(), work.sent_to.end(), 0.0);
    std::optional<instrument::Range> range;
    // Nothing moves between layouts that hold the same slices (DP and CP hold every layer):
    // then no range, as the simulator plays it; what the rank holds is only copied.
    const bool moves = work.total_bytes > 0;
    if (moves && annotate_ && instrument::active()) {
        // docs/annotations.md, "Hot switching": key=value args, read back as strings.
        std::string name(range_name::kHotSwitch);
        name += " from_bucket=" + std::to_string(from_bucket) +
                " to_bucket=" + std::to_string(to_bucket) +
                " from=" + parallel::layout_string(from.shape) +
                " to=" + parallel::layout_string(to.shape) +
                " gradients=" + (gradients ? "true" : "false") +
                " parameters=" + (parameters ? "true" : "false") + " sent=" + number_text(sent) +
                " received=" + number_text(work.received) +
                " total_bytes=" + number_text(work.total_bytes) +
                " largest_send_bytes=" + number_text(work.largest_send_bytes) +
                " inter_node_bytes=" + number_text(work.inter_node_bytes) + " sent_to={";
        bool first = true;
        for (std::size_t peer = 0; peer < work.sent_to.size(); ++peer) {
            if (work.sent_to[peer] > 0) {
                name += std::string(first ? "" : ",") + "\"" + std::to_string(peer) +
                        "\":" + number_text(work.sent_to[peer]);
                first = false;
            }
        }
        name += "}";
        range.emplace(name, Category::communication,
                      instrument::with_bytes(std::llround(sent + work.received)));
    }
    execute(work, from, to);
    for (std::size_t peer = 0; peer < work.sent_to.size(); ++peer) {
        traffic_.sent_to[peer] += work.sent_to[peer];
    }
    traffic_.received += work.received;
    traffic_.switches += moves ? 1 : 0;
}

Status HotSwitchTrainer::run_bucket(int b, const std::vector<balance::Document>& documents,
                                    int step, float loss_scale, StepReport& report,
                                    double& loss_sum) {
    const parallel::HotSwitchBucket& bucket = config_.spec.buckets[std::size_t(b)];
    LayoutEngine& layout = layout_of(b);
    // The bucket's packing, as core/sim/hot_switch_play.h (bucket_config) plays it: capacity
    // its upper bound (the context for the open one), max(1, ⌈tokens / (capacity · dp)⌉)
    // micro-batches per replica, one epoch of its documents (another round of passes when
    // packing leaves some over).
    const std::int64_t context = config_.model.context;
    const std::int64_t capacity =
        bucket.max_length > 0 && bucket.max_length < context ? bucket.max_length : context;
    std::vector<std::int64_t> lengths(documents_.texts.size(), 0);
    std::int64_t tokens = 0;
    for (const balance::Document& document : documents) {
        lengths[std::size_t(document.id)] = document.length;
        tokens += document.length;
    }
    PlannerOptions options = config_.packing;
    options.dp = layout.shape.dp;
    options.cp = layout.shape.cp;
    options.epochs = 1;
    options.ilp_window = 1;
    options.packing.capacity = capacity;
    options.packing.microbatches = static_cast<int>(std::max<std::int64_t>(
        1, (tokens + capacity * layout.shape.dp - 1) / (capacity * layout.shape.dp)));
    // wlb's queues and S_max are for the run's context; a bucket takes the defaults for its
    // capacity and delays nothing past its own epoch.
    options.packing.wlb_max_tokens = 0;
    options.packing.wlb_thresholds.reset();
    options.tune_wlb_thresholds = false;
    auto planner = StepPlanner::create(std::move(lengths), options);
    if (!planner) {
        return planner.error();
    }
    std::vector<StepPlan> rounds;
    std::int64_t microbatches = 0;
    // Only the planning rank's planner advances (plan_step): its `last` ends the bucket.
    for (bool last = false; !last;) {
        auto plan = plan_step(*planner, world_);
        if (!plan) {
            return plan.error();
        }
        plan->step = step;
        last = plan->last;
        for (const auto& replica : plan->replicas) {
            microbatches += static_cast<std::int64_t>(replica.size());
        }
        rounds.push_back(std::move(*plan));
    }
    std::optional<instrument::Range> range;
    if (annotate_ && instrument::active()) {
        range.emplace(std::string(range_name::kHotSwitchBucket) + " bucket=" + std::to_string(b) +
                          " layout=" + parallel::layout_string(bucket.layout) +
                          " bounds=" + parallel::bucket_bounds_string(bucket) +
                          " min_length=" + std::to_string(bucket.min_length) +
                          " max_length=" + std::to_string(bucket.max_length) + " documents=" +
                          std::to_string(documents.size()) + " tokens=" + std::to_string(tokens) +
                          " microbatches=" + std::to_string(microbatches),
                      Category::schedule);
    }
    layout.model->zero_gradients();
    for (const StepPlan& round : rounds) {
        auto passes = layout.trainer->run_passes(round, loss_scale, numbered_microbatches_);
        if (!passes) {
            return passes.error();
        }
        // Numbered on by the round's largest replica, the same on every rank, so that a
        // micro-batch keeps one number on all the stages it passes through.
        std::size_t largest = 0;
        for (const auto& replica : round.replicas) {
            largest = std::max(largest, replica.size());
        }
        numbered_microbatches_ += static_cast<int>(largest);
        loss_sum += passes->loss_sum;
        report.tokens += passes->tokens;
        report.micro_batches += passes->micro_batches;
    }
    // Whole sums on every holder, so that they move as the parameters do.
    layout.trainer->reduce_gradients(step);
    if (!layout.carried_gradients.empty()) {
        std::vector<float> gradients = layout.model->gradients_to_host();
        for (std::size_t i = 0; i < gradients.size(); ++i) {
            gradients[i] += layout.carried_gradients[i];
        }
        layout.model->set_gradients(gradients);
        layout.carried_gradients.clear();
    }
    return {};
}

Result<StepReport> HotSwitchTrainer::step(const StepPlan& global) {
    if (global.target_tokens <= 0) {
        return Error{ErrorCode::invalid_input,
                     "step " + std::to_string(global.step) + " has no target tokens"};
    }
    const int buckets = static_cast<int>(config_.spec.buckets.size());
    std::vector<std::vector<balance::Document>> by_bucket(static_cast<std::size_t>(buckets));
    for (const auto& replica : global.replicas) {
        for (const PlannedMicroBatch& planned : replica) {
            for (const balance::Document& document : planned.packed.documents) {
                const int b = parallel::bucket_of(config_.spec, document.length);
                FULCRUM_CHECK(b >= 0, "a spec covers every length from 0 (checked first)");
                by_bucket[std::size_t(b)].push_back(document);
            }
        }
    }
    LayoutEngine& home = *layouts_.front();
    instrument::KeyScope keys({global.step, -1, home.topology->coordinates().pp, Phase::none});
    instrument::Range step_range(range_name::kStep, Category::schedule);
    const float loss_scale = float(1.0 / double(global.target_tokens));
    StepReport report;
    report.target_tokens = global.target_tokens;
    double loss_sum = 0;
    numbered_microbatches_ = 0;
    int current = 0;  // the bucket whose layout holds the step's state (home: bucket 0's)
    bool accumulated = false;
    for (int b = 0; b < buckets; ++b) {
        if (by_bucket[std::size_t(b)].empty()) {
            continue;
        }
        LayoutEngine& from = layout_of(current);
        LayoutEngine& to = layout_of(b);
        if (&from != &to) {
            switch_layout(current, b, from, to, !to.parameters_current, accumulated);
        } else if (accumulated) {
            to.carried_gradients = to.model->gradients_to_host();
        }
        if (auto status =
                run_bucket(b, by_bucket[std::size_t(b)], global.step, loss_scale, report, loss_sum);
            !status) {
            return status.error();
        }
        current = b;
        accumulated = true;
    }
    if (&layout_of(current) != &home) {
        // Home's parameters did not change during the step: only the gradients go back.
        switch_layout(current, 0, layout_of(current), home, false, true);
        home.model->set_gradients(home.carried_gradients);
        home.carried_gradients.clear();
    }
    home.trainer->update(report);
    for (auto& layout : layouts_) {
        layout->parameters_current = layout.get() == &home;
    }
    double loss[1] = {loss_sum};
    world_.all_reduce_sum(std::span<double>(loss));
    report.loss = loss[0] / double(global.target_tokens);
    return report;
}

bool HotSwitchTrainer::parameters_survive_round_trips() {
    annotate_ = false;
    LayoutEngine& home = *layouts_.front();
    const std::vector<float> before = home.trainer->gather_parameters();
    const std::vector<float> saved = home.model->parameters_to_host();
    bool equal = true;
    for (std::size_t i = 1; i < layouts_.size(); ++i) {
        LayoutEngine& other = *layouts_[i];
        switch_layout(0, 0, home, other, true, false);
        // Home's copy wiped, so that what comes back is what the other layout sent.
        home.model->set_parameters(
            std::vector<float>(saved.size(), std::numeric_limits<float>::quiet_NaN()));
        switch_layout(0, 0, other, home, true, false);
        const std::vector<float> after = home.trainer->gather_parameters();
        double differs[1] = {
            after.size() == before.size() &&
                    std::memcmp(after.data(), before.data(), before.size() * sizeof(float)) == 0
                ? 0.0
                : 1.0};
        world_.all_reduce_sum(std::span<double>(differs));
        equal = equal && differs[0] == 0;
    }
    home.model->set_parameters(saved);
    for (auto& layout : layouts_) {
        layout->parameters_current = layout.get() == &home;
    }
    traffic_ = SwitchTraffic{};
    traffic_.sent_to.assign(std::size_t(world_.size()), 0.0);
    annotate_ = true;
    return equal;
}

}  // namespace fulcrum::engine
