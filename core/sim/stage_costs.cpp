#include "core/sim/stage_costs.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>

#include "core/parallel/schedule.h"

namespace fulcrum::sim {
namespace {

using analysis::CollectiveCost;
using analysis::CostModel;
using analysis::PassCost;
using analysis::Role;

int layers_of(int stage, int stages, int layers, const std::vector<int>& stage_layers = {},
              int virtual_stages = 1) {
    return parallel::stage_layer_total(stage, stages, virtual_stages, layers, stage_layers);
}

// A group whose ranks lie within `span` consecutive rank numbers shares a node when the span
// fits one: ranks are numbered TP fastest, then CP, PP, DP (the engine's Topology), and nodes
// hold gpus_per_node consecutive ranks. Exact for power-of-two degrees.
bool within_one_node(std::int64_t span, const HardwareAssumptions& hardware) {
    return span <= hardware.gpus_per_node;
}

CollectiveCost collective(Role role, std::string_view name, double latency_ns, double per_byte_ns) {
    CollectiveCost cost;
    cost.role = role;
    cost.name = std::string(name);
    cost.latency_ns = latency_ns;
    cost.per_byte_ns = per_byte_ns;
    return cost;
}

std::string format_number(double value) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%g", value);
    return buffer;
}

const PassCost* find_pass(const CostModel& model, int stage, Phase phase) {
    for (const PassCost& pass : model.passes) {
        if (pass.stage == stage && pass.phase == phase) {
            return &pass;
        }
    }
    return nullptr;
}

const CollectiveCost* find_collective(const CostModel& model, std::string_view name) {
    for (const CollectiveCost& cost : model.collectives) {
        if (cost.name == name) {
            return &cost;
        }
    }
    return nullptr;
}

// The stage of the fitted run whose pass stands for `stage` of the simulated one (the rule
// in stage_costs.h).
int source_stage(int stage, int stages, int source_stages) {
    if (source_stages == stages) {
        return stage;
    }
    if (stage == 0) {
        return 0;
    }
    if (stage == stages - 1) {
        return source_stages - 1;
    }
    if (source_stages > 2) {
        const double relative = static_cast<double>(stage) / (stages - 1);
        const int mapped = static_cast<int>(std::lround(relative * (source_stages - 1)));
        return std::clamp(mapped, 1, source_stages - 2);
    }
    return 0;
}

}  // namespace

std::int64_t stage_parameters(const ModelShape& model, const parallel::GridShape& grid, int stage,
                              const std::vector<int>& stage_layers, int virtual_stages) {
    const std::int64_t h = model.hidden;
    const std::int64_t per_layer = (12 * h * h + 13 * h) / std::max(grid.tp, 1);
    std::int64_t parameters =
        per_layer * layers_of(stage, grid.pp, model.layers, stage_layers, virtual_stages);
    if (stage == 0) {
        parameters += static_cast<std::int64_t>(model.vocab) * h +
                      static_cast<std::int64_t>(model.context) * h;
    }
    if (stage == grid.pp - 1) {
        parameters += 2 * h;
    }
    return parameters;
}

std::string describe(const HardwareAssumptions& hardware) {
    if (!hardware.gemm_efficiency.empty()) {
        return "analytic: " +
               (hardware.preset.empty() ? std::string("described system") : hardware.preset) +
               ", " + format_number(hardware.tflops) + " TFLOP/s peak, GEMMs at " +
               format_number(gemm_efficiency(hardware, 0)) + "-" +
               format_number(hardware.gemm_efficiency.back().efficiency) +
               " of it by size, attention at " + format_number(hardware.attention_efficiency) +
               ", HBM " + format_number(hardware.hbm_gbs) + " GB/s, NVLink " +
               format_number(hardware.nvlink_gbs) + " GB/s, network " +
               format_number(hardware.network_gbs) + " GB/s, " +
               std::to_string(hardware.gpus_per_node) + " GPUs per node";
    }
    return "analytic: " + format_number(hardware.tflops) + " TFLOP/s per GPU, NVLink " +
           format_number(hardware.nvlink_gbs) + " GB/s, network " +
           format_number(hardware.network_gbs) + " GB/s, collective latency " +
           format_number(hardware.collective_latency_us) + " us, " +
           std::to_string(hardware.gpus_per_node) + " GPUs per node";
}

double gemm_efficiency(const HardwareAssumptions& hardware, double flops) {
    const auto& table = hardware.gemm_efficiency;
    if (table.empty()) {
        return 1.0;
    }
    const double gflops = flops * 1e-9;
    if (gflops <= table.front().gflops) {
        return table.front().efficiency;
    }
    for (std::size_t i = 1; i < table.size(); ++i) {
        if (gflops <= table[i].gflops) {
            const double x0 = std::log(table[i - 1].gflops), x1 = std::log(table[i].gflops);
            const double f = x1 > x0 ? (std::log(gflops) - x0) / (x1 - x0) : 1.0;
            return table[i - 1].efficiency + f * (table[i].efficiency - table[i - 1].efficiency);
        }
    }
    return table.back().efficiency;
}

namespace {

// The forward pass of `stage` for one rank (docs/simulate.md, "The analytic model").
PassCost analytic_forward(const ModelShape& model, const parallel::GridShape& grid,
                          const HardwareAssumptions& hardware, const TrainingKnobs& knobs,
                          int stage) {
    const double h = model.hidden;
    const double tp = std::max(grid.tp, 1);
    const double layers =
        layers_of(stage, grid.pp, model.layers, knobs.stage_layers, knobs.virtual_stages);
    const bool last = stage == grid.pp - 1;
    PassCost forward;
    forward.stage = static_cast<std::int16_t>(stage);
    forward.phase = Phase::forward;
    forward.fixed_ns = layers * hardware.layer_overhead_us * 1e3;
    if (hardware.gemm_efficiency.empty()) {
        const double flops_per_ns = hardware.tflops * 1e3;
        const double head = last ? 2.0 * h * model.vocab : 0.0;
        forward.per_token_ns = (24.0 * h * h * layers / tp + head) / flops_per_ns;
        forward.per_pair_ns = 4.0 * h * layers / tp / flops_per_ns;
        return forward;
    }
    // A described system: each GEMM at its size's efficiency, for a micro-batch of `context`
    // tokens split over CP; the LM head is vocabulary-parallel over TP (Megatron-LM).
    const double peak =
        (knobs.dtype == DType::fp32 && hardware.fp32_tflops > 0 ? hardware.fp32_tflops
                                                                : hardware.tflops) *
        1e3;
    const double tokens = std::max(1.0, static_cast<double>(model.context) / grid.cp);
    const auto gemm_ns = [&](double flops_per_token) {
        return flops_per_token / (peak * gemm_efficiency(hardware, flops_per_token * tokens));
    };
    // QKV (h → 3h/tp), projection (h/tp → h), MLP (h → 4h/tp → h): 24·h²/tp a token.
    double per_token =
        layers * (gemm_ns(6 * h * h / tp) + gemm_ns(2 * h * h / tp) + 2 * gemm_ns(8 * h * h / tp));
    if (last) {
        per_token += gemm_ns(2 * h * model.vocab / tp);
    }
    // Elementwise work reads and writes what a layer keeps for its backward pass (Korthikanti
    // et al. 2022, Table 2, in 16-bit bytes: (10 + 24/t)·h a token, 34·h/t with sequence
    // parallelism), at the activations' element size.
    const double kept = knobs.sequence_parallel ? 34.0 * h / tp : (10.0 + 24.0 / tp) * h;
    const double scale = static_cast<double>(element_bytes(knobs.dtype)) / 2.0;
    per_token += layers * 2.0 * kept * scale / hardware.hbm_gbs;
    forward.per_token_ns = per_token;
    // The attention core: 4h/tp FLOPs a query·key pair; a full-square kernel computes twice the
    // causal pairs and streams 5a/t bytes of scores, softmax and dropout mask a pair, twice.
    const double square = hardware.attention_full_square ? 2.0 : 1.0;
    double per_pair = square * 4.0 * h / tp / (peak * hardware.attention_efficiency);
    if (hardware.attention_full_square) {
        per_pair += square * 2.0 * 5.0 * model.heads / tp * scale / hardware.hbm_gbs;
    }
    forward.per_pair_ns = layers * per_pair;
    return forward;
}

}  // namespace

CostModel analytic_cost_model(const ModelShape& model, const parallel::GridShape& grid,
                              const HardwareAssumptions& hardware, const TrainingKnobs& knobs) {
    CostModel cost;
    cost.source = describe(hardware);
    for (int stage = 0; stage < grid.pp; ++stage) {
        const PassCost forward = analytic_forward(model, grid, hardware, knobs, stage);
        PassCost backward = forward;
        backward.phase = Phase::backward;
        backward.fixed_ns *= 2;
        backward.per_token_ns *= 2;
        backward.per_pair_ns *= 2;
        cost.passes.push_back(forward);
        cost.passes.push_back(backward);
    }

    const double latency_ns = hardware.collective_latency_us * 1e3;
    const auto bandwidth = [&](std::int64_t span) {
        return within_one_node(span, hardware) ? hardware.nvlink_gbs : hardware.network_gbs;
    };
    const std::int64_t tp_span = grid.tp;
    const std::int64_t cp_span = static_cast<std::int64_t>(grid.cp - 1) * grid.tp + 1;
    const std::int64_t pp_span = static_cast<std::int64_t>(grid.tp) * grid.cp + 1;
    const std::int64_t dp_span =
        static_cast<std::int64_t>(grid.dp - 1) * grid.tp * grid.cp * grid.pp + cp_span;
    const double cp_n = grid.cp;
    const double tp_n = grid.tp;
    const double dp_n = static_cast<double>(grid.dp) * grid.cp;
    const double gather = (cp_n - 1) / cp_n / bandwidth(cp_span);
    cost.collectives.push_back(collective(Role::cp_collective, kCpAllGather, latency_ns, gather));
    cost.collectives.push_back(
        collective(Role::cp_collective, kCpReduceScatter, latency_ns, gather));
    cost.collectives.push_back(collective(Role::tp_collective, kTpAllReduce, latency_ns,
                                          2 * (tp_n - 1) / tp_n / bandwidth(tp_span)));
    // Sequence parallelism's halves of an all-reduce; bytes are the gathered tensor's.
    cost.collectives.push_back(collective(Role::tp_collective, kTpAllGather, latency_ns,
                                          (tp_n - 1) / tp_n / bandwidth(tp_span)));
    cost.collectives.push_back(collective(Role::tp_collective, kTpReduceScatter, latency_ns,
                                          (tp_n - 1) / tp_n / bandwidth(tp_span)));
    const double p2p_latency_ns = hardware.p2p_latency_us * 1e3;
    cost.collectives.push_back(collective(Role::pipeline_recv, kRecvActivations, p2p_latency_ns,
                                          1.0 / bandwidth(pp_span)));
    cost.collectives.push_back(
        collective(Role::pipeline_recv, kRecvGradients, p2p_latency_ns, 1.0 / bandwidth(pp_span)));
    cost.collectives.push_back(collective(Role::dp_collective, kDpAllReduce, latency_ns,
                                          2 * (dp_n - 1) / dp_n / bandwidth(dp_span)));

    // AdamW reads parameter, gradient and both moments and writes back three: 7 floats.
    std::int64_t largest_stage = 0;
    for (int stage = 0; stage < grid.pp; ++stage) {
        largest_stage = std::max(
            largest_stage,
            stage_parameters(model, grid, stage, knobs.stage_layers, knobs.virtual_stages));
    }
    cost.optimizer_ns = static_cast<double>(largest_stage) * 28.0 / hardware.hbm_gbs;
    return cost;
}

namespace {

PassCost combine(PassCost a, const PassCost& b, double factor) {
    a.fixed_ns += factor * b.fixed_ns;
    a.per_token_ns += factor * b.per_token_ns;
    a.per_pair_ns += factor * b.per_pair_ns;
    return a;
}

// What recomputation re-runs of a forward pass: full, the layers' forward (not the LM head,
// whose share of the last stage's forward is taken from the FLOPs, 2hV against 24h² a layer);
// selective, the attention core (the per-pair term).
PassCost recompute_part(const PassCost& forward, plan::Recompute recompute, double head_share) {
    PassCost part;
    part.stage = forward.stage;
    part.phase = Phase::backward;
    if (recompute == plan::Recompute::full) {
        part.fixed_ns = forward.fixed_ns;
        part.per_token_ns = forward.per_token_ns * (1 - head_share);
    }
    if (recompute != plan::Recompute::none) {
        part.per_pair_ns = forward.per_pair_ns;
    }
    return part;
}

// The LM head's per-token cost in the pass `fitted` (of its run's shape) of the same phase:
// the run's last stage less its layers at the first stage's rate when the run had both (a
// measured difference, the embedding lookup's share aside), else by FLOPs, 2hV against 24h²
// a layer (docs/sources.md, "FLOPs"), of the fitted pass's per-layer rate.
double head_per_token(const CostModel& model, const PassCost& fitted, int source_pp,
                      int source_layers, int source_hidden, const ModelShape& shape) {
    const double flops_ratio = static_cast<double>(shape.vocab) / (12.0 * source_hidden);
    const PassCost* last = find_pass(model, source_pp - 1, fitted.phase);
    const PassCost* first = find_pass(model, 0, fitted.phase);
    if (source_pp > 1 && last != nullptr && first != nullptr) {
        const double last_layers = layers_of(source_pp - 1, source_pp, source_layers);
        const double first_layers = layers_of(0, source_pp, source_layers);
        const double measured =
            last->per_token_ns - first->per_token_ns * last_layers / first_layers;
        if (measured > 0 && measured < last->per_token_ns) {
            return measured;
        }
        return last->per_token_ns * flops_ratio / (last_layers + flops_ratio);
    }
    // One stage: the pass holds every layer and the head.
    const double layers = source_layers;
    return fitted.per_token_ns * flops_ratio / (layers + flops_ratio);
}

// The fitted pass standing for (stage, phase) of the simulated grid, scaled to its layers,
// hidden size and TP degree (the rule in stage_costs.h); nullopt when the model has none.
std::optional<PassCost> fitted_pass(const CostModel& model, const CostOrigin& origin,
                                    const ModelShape& shape, const parallel::GridShape& grid,
                                    const TrainingKnobs& knobs, int stage, Phase phase,
                                    std::vector<std::string>& notes) {
    const int source_pp = origin.pp > 0 ? origin.pp : grid.pp;
    const int source_layers = origin.layers > 0 ? origin.layers : shape.layers;
    const int source_hidden = origin.hidden > 0 ? origin.hidden : shape.hidden;
    const int source_tp = origin.tp > 0 ? origin.tp : grid.tp;
    const int source_v = std::max(origin.virtual_stages, 1);
    int fitted_stage = source_stage(stage, grid.pp, source_pp);
    const PassCost* fitted = find_pass(model, fitted_stage, phase);
    // The nearest fitted stage of the same phase, when that one is missing.
    for (int distance = 1; fitted == nullptr && distance < source_pp; ++distance) {
        for (int candidate : {fitted_stage - distance, fitted_stage + distance}) {
            if (fitted == nullptr && candidate >= 0 && candidate < source_pp) {
                fitted = find_pass(model, candidate, phase);
                if (fitted != nullptr) {
                    fitted_stage = candidate;
                }
            }
        }
    }
    if (fitted == nullptr) {
        return std::nullopt;
    }
    const int layers_here =
        layers_of(stage, grid.pp, shape.layers, knobs.stage_layers, knobs.virtual_stages);
    // A pass of a run with v model chunks a stage holds a chunk: 1/v of the stage's layers.
    const double layers_there =
        static_cast<double>(layers_of(fitted_stage, source_pp, source_layers)) / source_v;
    const double layer_scale = layers_there > 0 ? layers_here / layers_there : 1.0;
    const double tp_scale = static_cast<double>(source_tp) / grid.tp;
    const double hidden_scale = static_cast<double>(shape.hidden) / source_hidden;
    // The LM head is the last stage's, not its layers': only the layers' share scales with
    // them, and the head is added where this stage is last and its source was not (a pp1
    // stage from a pp2 run's first) or taken off in the reverse (an interleaved run's chunks
    // average it in, so there it stays as fitted).
    const bool last_here = stage == grid.pp - 1;
    const bool last_there = fitted_stage == source_pp - 1;
    const double head_there = source_v == 1 ? head_per_token(model, *fitted, source_pp,
                                                             source_layers, source_hidden, shape)
                                            : 0.0;
    PassCost resolved = *fitted;
    resolved.stage = static_cast<std::int16_t>(stage);
    resolved.per_token_ns = (fitted->per_token_ns - (last_there ? head_there : 0.0)) * layer_scale *
                                tp_scale * hidden_scale * hidden_scale +
                            (last_here ? head_there * tp_scale * hidden_scale : 0.0);
    resolved.per_pair_ns *= layer_scale * tp_scale * hidden_scale;
    // The fixed term is per pass (per chunk's pass on an interleaved run): a stage of v chunks
    // runs v passes a micro-batch.
    resolved.fixed_ns *= static_cast<double>(std::max(knobs.virtual_stages, 1));
    const bool same_stage = fitted_stage == stage && source_pp == grid.pp;
    if (!same_stage || layer_scale != 1.0 || tp_scale != 1.0 || hidden_scale != 1.0) {
        std::string note = "stage " + std::to_string(stage) + " " + std::string(to_string(phase)) +
                           ": from the fit of stage " + std::to_string(fitted_stage) + " (" +
                           format_number(layers_there) + " -> " + std::to_string(layers_here) +
                           " layers";
        if (head_there > 0 && last_here != last_there) {
            note += last_here ? ", + the LM head" : ", - the LM head";
        }
        if (hidden_scale != 1.0) {
            note +=
                ", hidden " + std::to_string(source_hidden) + " -> " + std::to_string(shape.hidden);
        }
        if (tp_scale != 1.0) {
            note += ", tp " + std::to_string(source_tp) + " -> " + std::to_string(grid.tp);
        }
        notes.push_back(note + ")");
    }
    return resolved;
}

// One stage's passes under the knobs (docs/simulate.md, "Knobs"), from its forward, its
// backward and, when the fitted run split them, its W.
void set_stage_passes(StageCosts& costs, int stage, const PassCost& forward,
                      const PassCost& backward, bool backward_fitted,
                      const std::optional<PassCost>& weight, const CostOrigin& origin,
                      const ModelShape& shape, const parallel::GridShape& grid,
                      const TrainingKnobs& knobs) {
    const bool split = parallel::splits_backward(knobs.schedule);
    const double h = shape.hidden;
    const double layers =
        layers_of(stage, grid.pp, shape.layers, knobs.stage_layers, knobs.virtual_stages);
    const double head = stage == grid.pp - 1 ? 2.0 * h * shape.vocab : 0.0;
    const double head_share = head / (24.0 * h * h * layers + head);
    // The backward without recomputation: a fitted one holds its run's (in B and in W
    // when that run split them), the analytic one none.
    const PassCost fitted_recompute = recompute_part(
        forward, backward_fitted ? origin.recompute : plan::Recompute::none, head_share);
    PassCost base = combine(backward, fitted_recompute, -1);
    PassCost w;
    if (weight) {
        w = combine(*weight, fitted_recompute, -1);
        base = combine(base, w, 1);
    }
    auto& passes = costs.passes[static_cast<std::size_t>(stage)];
    passes[0] = forward;
    passes[1] = base;
    if (split) {
        if (!weight) {
            // The weight-gradient GEMMs are half of the backward's (dX and dW of every
            // GEMM cost the same); attention has no weights (Zero Bubble, §2).
            w = base;
            w.fixed_ns *= 0.5;
            w.per_token_ns *= 0.5;
            w.per_pair_ns = 0;
            costs.notes.push_back("stage " + std::to_string(stage) +
                                  " wgrad: half the backward's per-token and fixed terms");
        }
        w.phase = Phase::weight_grad;
        passes[1] = combine(base, w, -1);
        passes[2] = w;
    }
    const PassCost recompute = recompute_part(forward, knobs.recompute, head_share);
    costs.recompute[static_cast<std::size_t>(stage)] = recompute;
    passes[1] = combine(passes[1], recompute, 1);
    if (split) {
        passes[2] = combine(passes[2], recompute, 1);
    }
    passes[1].phase = Phase::backward;
}

}  // namespace

StageCosts resolve_costs(const CostModel* model, const CostOrigin& origin, const ModelShape& shape,
                         const parallel::GridShape& grid, const HardwareAssumptions& hardware,
                         const TrainingKnobs& knobs) {
    const CostModel analytic = analytic_cost_model(shape, grid, hardware, knobs);
    StageCosts costs;
    costs.source = model != nullptr ? model->source : analytic.source;
    if (costs.source.empty()) {
        costs.source = "given";
    }
    costs.passes.resize(static_cast<std::size_t>(grid.pp));
    costs.recompute.resize(static_cast<std::size_t>(grid.pp));
    for (int stage = 0; stage < grid.pp; ++stage) {
        const auto resolve = [&](Phase phase) -> std::pair<PassCost, bool> {
            if (model != nullptr) {
                if (auto fitted = fitted_pass(*model, origin, shape, grid, knobs, stage, phase,
                                              costs.notes)) {
                    return {*fitted, true};
                }
                costs.notes.push_back("stage " + std::to_string(stage) + " " +
                                      std::string(to_string(phase)) +
                                      ": no fitted pass of that phase; " + analytic.source);
            }
            return {*find_pass(analytic, stage, phase), false};
        };
        const auto [forward, forward_fitted] = resolve(Phase::forward);
        const auto [backward, backward_fitted] = resolve(Phase::backward);
        std::optional<PassCost> weight;
        if (model != nullptr && backward_fitted) {
            weight = fitted_pass(*model, origin, shape, grid, knobs, stage, Phase::weight_grad,
                                 costs.notes);
        }
        set_stage_passes(costs, stage, forward, backward, backward_fitted, weight, origin, shape,
                         grid, knobs);
    }

    // Only the collectives this grid runs need a cost, so only those earn a note.
    const auto take = [&](std::string_view name, bool needed, std::string_view stand_in) {
        if (model != nullptr) {
            if (const CollectiveCost* fitted = find_collective(*model, name)) {
                CollectiveCost cost = *fitted;
                if (!cost.per_byte_fitted()) {
                    // Measured at one size only: other sizes scale with the analytic bandwidth.
                    cost.per_byte_ns = find_collective(analytic, name)->per_byte_ns;
                    if (needed) {
                        costs.notes.push_back(
                            std::string(name) + ": per-byte cost not fitted (every sample moved " +
                            std::to_string(cost.fitted_bytes) +
                            " bytes); other sizes scale by the analytic bandwidth");
                    }
                }
                return cost;
            }
            if (const CollectiveCost* other = find_collective(*model, stand_in)) {
                if (needed) {
                    costs.notes.push_back(std::string(name) + ": not in the cost model; using " +
                                          std::string(stand_in) + "'s");
                }
                CollectiveCost cost = *other;
                cost.name = std::string(name);
                return cost;
            }
            if (needed) {
                costs.notes.push_back(std::string(name) + ": not in the cost model; " +
                                      analytic.source);
            }
        }
        return *find_collective(analytic, name);
    };
    const bool pipelined = grid.pp > 1;
    costs.cp_all_gather = take(kCpAllGather, grid.cp > 1, kCpReduceScatter);
    costs.cp_reduce_scatter = take(kCpReduceScatter, grid.cp > 1, kCpAllGather);
    const bool sequence_parallel = knobs.sequence_parallel && grid.tp > 1;
    costs.tp_all_reduce = take(kTpAllReduce, grid.tp > 1 && !sequence_parallel, kTpAllReduce);
    costs.tp_all_gather = take(kTpAllGather, sequence_parallel, kTpReduceScatter);
    costs.tp_reduce_scatter = take(kTpReduceScatter, sequence_parallel, kTpAllGather);
    costs.recv_activations = take(kRecvActivations, pipelined, kRecvGradients);
    costs.recv_gradients = take(kRecvGradients, pipelined, kRecvActivations);
    costs.dp_all_reduce = take(kDpAllReduce, grid.dp * grid.cp > 1, kDpAllReduce);
    if (model != nullptr && model->optimizer_ns > 0) {
        costs.optimizer_ns = model->optimizer_ns;
    } else {
        costs.optimizer_ns = analytic.optimizer_ns;
        if (model != nullptr) {
            costs.notes.push_back("optimizer: not in the cost model; " + analytic.source);
        }
    }
    return costs;
}

std::int64_t predict_pass_ns(const PassCost& cost, std::int64_t tokens, std::int64_t pairs) {
    const double ns = cost.fixed_ns + cost.per_token_ns * static_cast<double>(tokens) +
                      cost.per_pair_ns * static_cast<double>(pairs);
    return ns > 0 ? std::llround(ns) : 0;
}

std::int64_t predict_collective_ns(const CollectiveCost& cost, std::int64_t bytes) {
    const double ns = cost.latency_ns + cost.per_byte_ns * static_cast<double>(bytes);
    return ns > 0 ? std::llround(ns) : 0;
}

}  // namespace fulcrum::sim
