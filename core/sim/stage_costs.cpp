#include "core/sim/stage_costs.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/parallel/schedule.h"

namespace fulcrum::sim {
namespace {

using analysis::CollectiveCost;
using analysis::CostModel;
using analysis::PassCost;
using analysis::Role;

int layers_of(int stage, int stages, int layers) {
    const parallel::LayerRange range = parallel::stage_layers(stage, stages, layers);
    return range.last - range.first;
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

const char* phase_word(PassPhase phase) {
    return phase == PassPhase::forward ? "forward" : "backward";
}

}  // namespace

std::int64_t stage_parameters(const ModelShape& model, const Grid& grid, int stage) {
    const std::int64_t h = model.hidden;
    const std::int64_t per_layer = (12 * h * h + 13 * h) / std::max(grid.tp, 1);
    std::int64_t parameters = per_layer * layers_of(stage, grid.pp, model.layers);
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
    return "analytic: " + format_number(hardware.tflops) + " TFLOP/s per GPU, NVLink " +
           format_number(hardware.nvlink_gbs) + " GB/s, network " +
           format_number(hardware.network_gbs) + " GB/s, collective latency " +
           format_number(hardware.collective_latency_us) + " us, " +
           std::to_string(hardware.gpus_per_node) + " GPUs per node";
}

CostModel analytic_cost_model(const ModelShape& model, const Grid& grid,
                              const HardwareAssumptions& hardware) {
    CostModel cost;
    cost.source = describe(hardware);
    const double flops_per_ns = hardware.tflops * 1e3;
    const double h = model.hidden;
    const double tp = std::max(grid.tp, 1);
    for (int stage = 0; stage < grid.pp; ++stage) {
        const double layers = layers_of(stage, grid.pp, model.layers);
        const double head = stage == grid.pp - 1 ? 2.0 * h * model.vocab : 0.0;
        PassCost forward;
        forward.stage = static_cast<std::int16_t>(stage);
        forward.phase = Phase::forward;
        forward.fixed_ns = layers * hardware.layer_overhead_us * 1e3;
        forward.per_token_ns = (24.0 * h * h * layers / tp + head) / flops_per_ns;
        forward.per_pair_ns = 4.0 * h * layers / tp / flops_per_ns;
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
        largest_stage = std::max(largest_stage, stage_parameters(model, grid, stage));
    }
    cost.optimizer_ns = static_cast<double>(largest_stage) * 28.0 / hardware.hbm_gbs;
    return cost;
}

StageCosts resolve_costs(const CostModel* model, const CostOrigin& origin, const ModelShape& shape,
                         const Grid& grid, const HardwareAssumptions& hardware) {
    const CostModel analytic = analytic_cost_model(shape, grid, hardware);
    StageCosts costs;
    costs.source = model != nullptr ? model->source : analytic.source;
    if (costs.source.empty()) {
        costs.source = "given";
    }
    const int source_pp = origin.pp > 0 ? origin.pp : grid.pp;
    const int source_layers = origin.layers > 0 ? origin.layers : shape.layers;
    const int source_hidden = origin.hidden > 0 ? origin.hidden : shape.hidden;
    const int source_tp = origin.tp > 0 ? origin.tp : grid.tp;

    costs.passes.resize(static_cast<std::size_t>(grid.pp));
    for (int stage = 0; stage < grid.pp; ++stage) {
        for (PassPhase phase : {PassPhase::forward, PassPhase::backward}) {
            const Phase trace_phase =
                phase == PassPhase::forward ? Phase::forward : Phase::backward;
            PassCost& resolved =
                costs.passes[static_cast<std::size_t>(stage)][static_cast<std::size_t>(phase)];
            const PassCost* fitted = nullptr;
            int fitted_stage = source_stage(stage, grid.pp, source_pp);
            if (model != nullptr) {
                fitted = find_pass(*model, fitted_stage, trace_phase);
                // The nearest fitted stage of the same phase, when that one is missing.
                for (int distance = 1; fitted == nullptr && distance < source_pp; ++distance) {
                    for (int candidate : {fitted_stage - distance, fitted_stage + distance}) {
                        if (fitted == nullptr && candidate >= 0 && candidate < source_pp) {
                            fitted = find_pass(*model, candidate, trace_phase);
                            if (fitted != nullptr) {
                                fitted_stage = candidate;
                            }
                        }
                    }
                }
            }
            if (fitted == nullptr) {
                resolved = *find_pass(analytic, stage, trace_phase);
                if (model != nullptr) {
                    costs.notes.push_back("stage " + std::to_string(stage) + " " +
                                          phase_word(phase) + ": no fitted pass of that phase; " +
                                          analytic.source);
                }
                continue;
            }
            const int layers_here = layers_of(stage, grid.pp, shape.layers);
            const int layers_there = layers_of(fitted_stage, source_pp, source_layers);
            const double layer_scale =
                layers_there > 0 ? static_cast<double>(layers_here) / layers_there : 1.0;
            const double tp_scale = static_cast<double>(source_tp) / grid.tp;
            const double hidden_scale = static_cast<double>(shape.hidden) / source_hidden;
            resolved = *fitted;
            resolved.stage = static_cast<std::int16_t>(stage);
            resolved.per_token_ns *= layer_scale * tp_scale * hidden_scale * hidden_scale;
            resolved.per_pair_ns *= layer_scale * tp_scale * hidden_scale;
            const bool same_stage = fitted_stage == stage && source_pp == grid.pp;
            if (!same_stage || layer_scale != 1.0 || tp_scale != 1.0 || hidden_scale != 1.0) {
                std::string note = "stage " + std::to_string(stage) + " " + phase_word(phase) +
                                   ": from the fit of stage " + std::to_string(fitted_stage) +
                                   " (" + std::to_string(layers_there) + " -> " +
                                   std::to_string(layers_here) + " layers";
                if (hidden_scale != 1.0) {
                    note += ", hidden " + std::to_string(source_hidden) + " -> " +
                            std::to_string(shape.hidden);
                }
                if (tp_scale != 1.0) {
                    note += ", tp " + std::to_string(source_tp) + " -> " + std::to_string(grid.tp);
                }
                costs.notes.push_back(note + ")");
            }
        }
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
                        costs.notes.push_back(std::string(name) + ": per-byte cost not fitted (every sample moved " +
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
    costs.tp_all_reduce = take(kTpAllReduce, grid.tp > 1, kTpAllReduce);
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
