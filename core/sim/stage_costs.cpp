#include "core/sim/stage_costs.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
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
    const std::int64_t per_layer =
        static_cast<std::int64_t>(parallel::layer_parameters(model)) / std::max(grid.tp, 1);
    std::int64_t parameters =
        per_layer * layers_of(stage, grid.pp, model.layers, stage_layers, virtual_stages);
    if (stage == 0) {
        parameters += static_cast<std::int64_t>(parallel::embedding_parameters(model));
    }
    if (stage == grid.pp - 1) {
        parameters += static_cast<std::int64_t>(parallel::head_parameters(model));
    }
    return parameters;
}

std::string describe(const HardwareAssumptions& hardware) {
    const bool described = !hardware.gemm_efficiency.empty() || hardware.network;
    const std::string name = !described                ? ""
                             : hardware.preset.empty() ? "described system, "
                                                       : hardware.preset + ", ";
    // A table's lowest and highest share of peak, "0.15-0.85".
    const auto span = [](const std::vector<GemmEfficiencyPoint>& table) {
        const auto [low, high] = std::minmax_element(
            table.begin(), table.end(),
            [](const auto& a, const auto& b) { return a.efficiency < b.efficiency; });
        return format_number(low->efficiency) + "-" + format_number(high->efficiency);
    };
    const std::string attention =
        hardware.unfused_attention
            ? "unfused attention at " + format_number(hardware.unfused_attention_efficiency)
        : hardware.attention_forward_efficiency.empty() ||
                hardware.attention_backward_efficiency.empty()
            ? "flash attention at " + format_number(hardware.attention_efficiency)
            : "flash attention at " + span(hardware.attention_forward_efficiency) + " forward, " +
                  span(hardware.attention_backward_efficiency) + " backward by size";
    const std::string compute = hardware.gemm_efficiency.empty()
                                    ? format_number(hardware.tflops) + " TFLOP/s per GPU"
                                    : format_number(hardware.tflops) + " TFLOP/s peak, GEMMs at " +
                                          span(hardware.gemm_efficiency) + " of it by size, " +
                                          attention + ", HBM " + format_number(hardware.hbm_gbs) +
                                          " GB/s";
    const std::string nodes = std::to_string(hardware.gpus_per_node);
    if (const auto& network = hardware.network) {
        return "analytic: " + name + compute + "; NCCL's collectives on " + nodes +
               "-GPU nodes of " + std::to_string(network->nvlink_links) + " NVLinks x " +
               format_number(network->nvlink_link_gbs) + " GB/s" +
               (network->nvls ? " (NVLS)" : "") + ", " + std::to_string(network->nics_per_node) +
               " NICs x " + format_number(network->nic_channel_gbs()) + " GB/s";
    }
    const std::string latency =
        hardware.gemm_efficiency.empty()
            ? "collective latency " + format_number(hardware.collective_latency_us) + " us, "
            : "";
    return "analytic: " + name + compute + ", NVLink " + format_number(hardware.nvlink_gbs) +
           " GB/s, network " + format_number(hardware.network_gbs) + " GB/s, " + latency + nodes +
           " GPUs per node";
}

double gemm_efficiency(const HardwareAssumptions& hardware, double flops) {
    return table_efficiency(hardware.gemm_efficiency, flops, 1.0);
}

double table_efficiency(const std::vector<GemmEfficiencyPoint>& table, double flops,
                        double otherwise) {
    if (table.empty()) {
        return otherwise;
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

// What a stage's analytic costs scale with: the hidden size, TP, and the layers it holds.
struct StageShape {
    double h, tp, layers;
};
StageShape stage_shape(const ModelShape& model, const parallel::Layout& layout, int stage) {
    const parallel::GridShape& grid = layout.grid;
    return {static_cast<double>(model.hidden), static_cast<double>(std::max(grid.tp, 1)),
            static_cast<double>(layers_of(stage, grid.pp, model.layers, layout.stage_layers,
                                          layout.virtual_stages))};
}

// The device's dense peak for `dtype`, in FLOPs a nanosecond (fp32 GEMMs at its fp32 peak).
double peak_flops_per_ns(const HardwareAssumptions& hardware, DType dtype) {
    return (dtype == DType::fp32 && hardware.fp32_tflops > 0 ? hardware.fp32_tflops
                                                             : hardware.tflops) *
           1e3;
}

// The GEMMs of one token's forward pass on `stage` for one rank: QKV (h → (h + 2·h_kv)/tp),
// projection (h/tp → h), MLP (h → f/tp → h, Llama's gate and up both h → f/tp), twice
// parallel::layer_gemm_weights over tp a layer (24·h²/tp for GPT), and the LM head on the last
// stage; with
// a described system each GEMM at its size's efficiency, for a micro-batch of `context` tokens
// split over CP, the head vocabulary-parallel over TP (Megatron-LM). The dW GEMMs of the
// backward are the same FLOPs at the same sizes, so this is also W's per-token time.
double analytic_gemm_per_token_ns(const ModelShape& model, const parallel::Layout& layout,
                                  const HardwareAssumptions& hardware, DType dtype, int stage,
                                  int gemm_chunks = 1) {
    const parallel::GridShape& grid = layout.grid;
    const auto [h, tp, layers] = stage_shape(model, layout, stage);
    const bool last = stage == grid.pp - 1;
    if (hardware.gemm_efficiency.empty()) {
        const double head = last ? 2.0 * h * model.vocab : 0.0;  // vocabulary-parallel
        return (2.0 * parallel::layer_gemm_weights(model) * layers + head) / tp /
               (hardware.tflops * 1e3);
    }
    const double peak = peak_flops_per_ns(hardware, dtype);
    const double tokens = std::max(1.0, static_cast<double>(model.context) / grid.cp);
    const auto gemm_ns = [&](double flops_per_token, double chunks = 1) {
        return flops_per_token /
               (peak * gemm_efficiency(hardware, flops_per_token * tokens / chunks));
    };
    // A layer's GEMMs computed in `gemm_chunks` pieces each (--tp-comm-overlap's), each piece
    // at its own size's efficiency.
    const double chunks = std::max(gemm_chunks, 1);
    const double h_kv = parallel::kv_hidden_of(model);
    const double f = parallel::ffn_hidden_of(model);
    const double mlp_matrices = model.architecture == parallel::Architecture::llama ? 3 : 2;
    double per_token =
        layers * (gemm_ns(2 * h * (h + 2 * h_kv) / tp, chunks) + gemm_ns(2 * h * h / tp, chunks) +
                  mlp_matrices * gemm_ns(2 * h * f / tp, chunks));
    if (last) {
        per_token += gemm_ns(2 * h * model.vocab / tp);
    }
    return per_token;
}

// Megatron-LM's vocabulary-parallel cross-entropy on the last stage, HBM bytes a logit
// (megatron/core/tensor_parallel/cross_entropy.py, _VocabParallelCrossEntropy, on the logits
// the GPT model upcasts to fp32 for its loss): forward, the 16-bit logits read and the fp32
// copy written (2 + 4), their max read (4), the max subtracted and the exponential taken in
// place (2 · (4 + 4)), the sum read (4), the softmax normalised in place (4 + 4): 38 bytes;
// backward, the kept softmax scaled by the output gradient in place (4 + 4) and cast back to
// 16 bits (4 + 2): 14. Three all-reduces of one float a token over TP in the forward (the max,
// the target's logit, the sum): their latency. Only with a described system, which streams
// elementwise work through HBM; the flat model counts FLOPs only.
struct CrossEntropy {
    double forward_per_token_ns = 0, backward_per_token_ns = 0, forward_fixed_ns = 0;
};
CrossEntropy cross_entropy(const ModelShape& model, const parallel::GridShape& grid,
                           const HardwareAssumptions& hardware, int stage) {
    if (stage != grid.pp - 1 || hardware.gemm_efficiency.empty()) {
        return {};
    }
    const double logits = static_cast<double>(model.vocab) / std::max(grid.tp, 1);
    return {38.0 * logits / hardware.hbm_gbs, 14.0 * logits / hardware.hbm_gbs,
            3.0 * hardware.collective_latency_us * 1e3};
}

// The part of `stage`'s analytic forward that recomputation does not re-run: the LM head's
// GEMM and the cross-entropy on the last stage (Megatron-LM checkpoints the layers only).
PassCost analytic_head_forward(const ModelShape& model, const parallel::Layout& layout,
                               const HardwareAssumptions& hardware, DType dtype, int stage) {
    const parallel::GridShape& grid = layout.grid;
    PassCost head;
    head.stage = static_cast<std::int16_t>(stage);
    head.phase = Phase::forward;
    if (stage != grid.pp - 1) {
        return head;
    }
    ModelShape head_only = model;  // the GEMMs of no layer: the LM head's alone
    head_only.layers = 0;
    parallel::Layout whole = layout;
    whole.stage_layers.clear();
    whole.virtual_stages = 1;
    const CrossEntropy loss = cross_entropy(model, grid, hardware, stage);
    head.per_token_ns = analytic_gemm_per_token_ns(head_only, whole, hardware, dtype, stage) +
                        loss.forward_per_token_ns;
    head.fixed_ns = loss.forward_fixed_ns;
    return head;
}

// The attention core's time a causal query·key pair on `stage` for one rank, in `phase`
// (forward or backward), on a described system: 4h/tp FLOPs a pair forward; a fused kernel
// computes the causal pairs only, its backward 2.5 times the forward's FLOPs, each at its
// efficiency for a call of this layout's size (a micro-batch of `context` tokens over CP, its
// heads over TP; HardwareAssumptions::attention_forward_efficiency); an unfused kernel
// computes the whole square, twice the causal pairs, and streams 5a/t bytes of scores,
// softmax and dropout mask a pair, twice, its backward twice the forward.
double analytic_attention_per_pair_ns(const ModelShape& model, const parallel::Layout& layout,
                                      const HardwareAssumptions& hardware, DType dtype, int stage,
                                      Phase phase) {
    const parallel::GridShape& grid = layout.grid;
    const auto [h, tp, layers] = stage_shape(model, layout, stage);
    const double peak = peak_flops_per_ns(hardware, dtype);
    const bool backward = phase != Phase::forward;
    if (hardware.unfused_attention) {
        const double scale = static_cast<double>(element_bytes(dtype)) / 2.0;
        const double per_pair =
            2.0 * 4.0 * h / tp / (peak * hardware.unfused_attention_efficiency) +
            2.0 * 2.0 * 5.0 * model.heads / tp * scale / hardware.hbm_gbs;
        return layers * per_pair * (backward ? 2.0 : 1.0);
    }
    const double context = model.context;
    const double call_flops = 4.0 * h / tp * context * context / 2.0 / std::max(grid.cp, 1);
    const double efficiency = backward
                                  ? table_efficiency(hardware.attention_backward_efficiency,
                                                     call_flops, hardware.attention_efficiency)
                                  : table_efficiency(hardware.attention_forward_efficiency,
                                                     call_flops, hardware.attention_efficiency);
    return layers * (backward ? 2.5 : 1.0) * 4.0 * h / tp / (peak * efficiency);
}

// The forward pass of `stage` for one rank (docs/simulate.md, "The analytic model").
PassCost analytic_forward(const ModelShape& model, const parallel::Layout& layout,
                          const HardwareAssumptions& hardware, DType dtype, int stage,
                          int gemm_chunks) {
    const parallel::GridShape& grid = layout.grid;
    const auto [h, tp, layers] = stage_shape(model, layout, stage);
    PassCost forward;
    forward.stage = static_cast<std::int16_t>(stage);
    forward.phase = Phase::forward;
    forward.fixed_ns = layers * hardware.layer_overhead_us * 1e3;
    forward.per_token_ns =
        analytic_gemm_per_token_ns(model, layout, hardware, dtype, stage, gemm_chunks);
    if (hardware.gemm_efficiency.empty()) {
        const double flops_per_ns = hardware.tflops * 1e3;
        forward.per_pair_ns = 4.0 * h * layers / tp / flops_per_ns;
        return forward;
    }
    // Elementwise work reads and writes what a layer keeps for its backward pass (Korthikanti
    // et al. 2022, Table 2, in 16-bit bytes: (10 + 24/t)·h a token for GPT, 34·h/t with
    // sequence parallelism; parallel::kept_bytes_per_token), at the activations' element size.
    const double kept = parallel::kept_bytes_per_token(model, grid.tp, layout.sequence_parallel);
    const double scale = static_cast<double>(element_bytes(dtype)) / 2.0;
    forward.per_token_ns += layers * 2.0 * kept * scale / hardware.hbm_gbs;
    const CrossEntropy loss = cross_entropy(model, grid, hardware, stage);
    forward.per_token_ns += loss.forward_per_token_ns;
    forward.fixed_ns += loss.forward_fixed_ns;
    forward.per_pair_ns =
        analytic_attention_per_pair_ns(model, layout, hardware, dtype, stage, Phase::forward);
    return forward;
}

// The collectives of `grid` as rings on a flat system (no described network): an all-reduce
// moves 2(n−1)/n of its bytes, an all-gather or reduce-scatter (n−1)/n of the gathered bytes,
// at NVLink's bandwidth when the group lies within one node (ranks numbered TP fastest, then
// CP, PP, DP, as fulcrum-train numbers them), else at the network's per GPU, a call's latency
// apart.
void add_ring_collectives(CostModel& cost, const parallel::GridShape& grid,
                          const HardwareAssumptions& hardware) {
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
    // An all-to-all: each rank sends (n − 1)/n of its buffer.
    cost.collectives.push_back(collective(Role::cp_collective, kCpAllToAll, latency_ns, gather));
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
    cost.collectives.push_back(collective(Role::dp_collective, kZeroAllGather, latency_ns,
                                          (dp_n - 1) / dp_n / bandwidth(dp_span)));
    cost.collectives.push_back(collective(Role::dp_collective, kZeroReduceScatter, latency_ns,
                                          (dp_n - 1) / dp_n / bandwidth(dp_span)));
    // The tied embedding between stage 0 and stage p − 1 (each TP rank its V/t rows): an
    // all-reduce of two ranks moves the bytes once, 2·(2 − 1)/2.
    const std::int64_t embedding_span =
        static_cast<std::int64_t>(grid.pp - 1) * grid.tp * grid.cp + 1;
    cost.collectives.push_back(collective(Role::embedding_collective, kEmbeddingAllReduce,
                                          latency_ns, 1.0 / bandwidth(embedding_span)));
}

// The collectives of `layout` as NCCL prices them on the described network
// (core/parallel/nccl_model.h), each kind of group placed on the nodes by the layout's rank
// order; pipeline sends at a GPU's NVLinks within a node, or at their share of the node's NICs
// across, after the hand-over's latency. Each cost also keeps its large-message ring (Simple)
// as latency and per-byte terms, for display.
void add_nccl_collectives(CostModel& cost, const parallel::Layout& layout,
                          const HardwareAssumptions& hardware) {
    using parallel::Collective;
    parallel::ClusterNetwork network = *hardware.network;
    network.gpus_per_node = hardware.gpus_per_node;
    const parallel::LayoutPlacement placed =
        parallel::place_layout(layout.grid, layout.rank_order, network.gpus_per_node);
    const auto priced = [&](Role role, std::string_view name, Collective kind,
                            const parallel::GroupPlacement& placement) {
        const parallel::NcclPrice ring =
            parallel::nccl_price(kind, placement, network, parallel::NcclAlgorithm::ring,
                                 parallel::NcclProtocol::simple);
        CollectiveCost priced_cost = collective(
            role, name, ring.latency_us * 1e3,
            ring.algorithm_gbs > 0 && placement.ranks > 1 ? 1.0 / ring.algorithm_gbs : 0.0);
        priced_cost.nccl = parallel::nccl_call(kind, placement, network);
        return priced_cost;
    };
    const parallel::GroupPlacement &cp = placed.cp, &tp = placed.tp;
    cost.collectives.push_back(
        priced(Role::cp_collective, kCpAllGather, Collective::all_gather, cp));
    cost.collectives.push_back(
        priced(Role::cp_collective, kCpReduceScatter, Collective::reduce_scatter, cp));
    cost.collectives.push_back(
        priced(Role::tp_collective, kTpAllReduce, Collective::all_reduce, tp));
    // Sequence parallelism's halves of an all-reduce; bytes are the gathered tensor's.
    cost.collectives.push_back(
        priced(Role::tp_collective, kTpAllGather, Collective::all_gather, tp));
    cost.collectives.push_back(
        priced(Role::tp_collective, kTpReduceScatter, Collective::reduce_scatter, tp));
    const double p2p_latency_ns = hardware.p2p_latency_us * 1e3;
    const double send_ns_per_byte = 1.0 / parallel::send_gbs(placed.pipeline_pair, network);
    cost.collectives.push_back(
        collective(Role::pipeline_recv, kRecvActivations, p2p_latency_ns, send_ns_per_byte));
    cost.collectives.push_back(
        collective(Role::pipeline_recv, kRecvGradients, p2p_latency_ns, send_ns_per_byte));
    cost.collectives.push_back(
        priced(Role::dp_collective, kDpAllReduce, Collective::all_reduce, placed.dp_cp));
    cost.collectives.push_back(
        priced(Role::dp_collective, kZeroAllGather, Collective::all_gather, placed.dp_cp));
    cost.collectives.push_back(
        priced(Role::dp_collective, kZeroReduceScatter, Collective::reduce_scatter, placed.dp_cp));
    // Ulysses' all-to-all as grouped sends (nccl_model.h), a call's latency apart.
    cost.collectives.push_back(collective(Role::cp_collective, kCpAllToAll,
                                          hardware.collective_latency_us * 1e3,
                                          parallel::all_to_all_ns_per_byte(cp, network)));
    // The tied embedding between stage 0 and stage p − 1 (each TP rank its V/t rows).
    cost.collectives.push_back(priced(Role::embedding_collective, kEmbeddingAllReduce,
                                      Collective::all_reduce, placed.embedding_pair));
}

}  // namespace

CostModel analytic_cost_model(const ModelShape& model, const parallel::Layout& layout,
                              const HardwareAssumptions& hardware, DType dtype, int gemm_chunks) {
    const parallel::GridShape& grid = layout.grid;
    CostModel cost;
    cost.source = describe(hardware);
    for (int stage = 0; stage < grid.pp; ++stage) {
        const PassCost forward =
            analytic_forward(model, layout, hardware, dtype, stage, gemm_chunks);
        // Twice the forward's work (dX and dW), but the cross-entropy's own backward.
        const CrossEntropy loss = cross_entropy(model, grid, hardware, stage);
        PassCost backward = forward;
        backward.phase = Phase::backward;
        backward.fixed_ns = 2 * (forward.fixed_ns - loss.forward_fixed_ns);
        backward.per_token_ns =
            2 * (forward.per_token_ns - loss.forward_per_token_ns) + loss.backward_per_token_ns;
        backward.per_pair_ns = hardware.gemm_efficiency.empty()
                                   ? 2 * forward.per_pair_ns
                                   : analytic_attention_per_pair_ns(model, layout, hardware, dtype,
                                                                    stage, Phase::backward);
        cost.passes.push_back(forward);
        cost.passes.push_back(backward);
    }

    if (hardware.network) {
        add_nccl_collectives(cost, layout, hardware);
    } else {
        add_ring_collectives(cost, grid, hardware);
    }
    const double latency_ns = hardware.collective_latency_us * 1e3;

    // The update streams, per parameter of the largest stage (Megatron-LM's mixed-precision
    // optimizer, megatron/optimizer/optimizer.py; fulcrum-train's AdamW at fp32): AdamW reads
    // parameter, gradient and both moments and writes back three (28 bytes); the gradient
    // norm reads the gradient (4); the gradients are zeroed for the next step (4); with 16-bit
    // weights the fp32 master is copied into them (4 + 2), and fp16's loss scale is taken off
    // the gradients with a check for inf and NaN (4 + 4).
    double bytes_per_parameter = 28 + 4 + 4;
    if (dtype != DType::fp32) {
        bytes_per_parameter += 6;
    }
    if (dtype == DType::fp16) {
        bytes_per_parameter += 8;
    }
    std::int64_t largest_stage = 0;
    for (int stage = 0; stage < grid.pp; ++stage) {
        largest_stage = std::max(
            largest_stage,
            stage_parameters(model, grid, stage, layout.stage_layers, layout.virtual_stages));
    }
    // And the gradient norm's all-reduce of one float over every stage first: its latency.
    cost.optimizer_ns =
        latency_ns + static_cast<double>(largest_stage) * bytes_per_parameter / hardware.hbm_gbs;
    return cost;
}

namespace {

// What resolve_costs derived rather than took as given, in order. A note about one stage
// ("stage 3 forward: from the fit of stage 0 (…)") joins the same note about other stages, so
// that it is said once for them all ("stages 1-31 forward: …"): a 32-stage plan printed 32
// lines for one fact.
class DerivedNotes {
public:
    void add(std::string note) { entries_.push_back({std::move(note), {}}); }
    void add(int stage, std::string what) {
        for (Entry& entry : entries_) {
            if (!entry.stages.empty() && entry.what == what) {
                entry.stages.push_back(stage);
                return;
            }
        }
        entries_.push_back({std::move(what), {stage}});
    }

    std::vector<std::string> lines() const {
        std::vector<std::string> lines;
        for (const Entry& entry : entries_) {
            lines.push_back(entry.stages.empty() ? entry.what
                                                 : stages_text(entry.stages) + " " + entry.what);
        }
        return lines;
    }

private:
    struct Entry {
        std::string what;
        std::vector<int> stages;  // empty: a note about no one stage
    };

    // "stage 3", "stages 0-2" or "stages 0, 2, 5"; stages come in the order they were played.
    static std::string stages_text(std::vector<int> stages) {
        std::sort(stages.begin(), stages.end());
        if (stages.size() == 1) {
            return "stage " + std::to_string(stages[0]);
        }
        if (stages.back() - stages.front() + 1 == static_cast<int>(stages.size())) {
            return "stages " + std::to_string(stages.front()) + "-" + std::to_string(stages.back());
        }
        std::string text = "stages ";
        for (std::size_t k = 0; k < stages.size(); ++k) {
            text += (k > 0 ? ", " : "") + std::to_string(stages[k]);
        }
        return text;
    }

    std::vector<Entry> entries_;
};

PassCost combine(PassCost a, const PassCost& b, double factor) {
    a.fixed_ns += factor * b.fixed_ns;
    a.per_token_ns += factor * b.per_token_ns;
    a.per_pair_ns += factor * b.per_pair_ns;
    return a;
}

// What recomputation re-runs of a forward pass: full, the layers' forward, all but `head` (the
// LM head and loss on the last stage, which Megatron-LM does not checkpoint); selective, the
// attention core (the per-pair term).
PassCost recompute_part(const PassCost& forward, parallel::Recompute recompute,
                        const PassCost& head) {
    PassCost part;
    part.stage = forward.stage;
    part.phase = Phase::backward;
    if (recompute == parallel::Recompute::full) {
        part.fixed_ns = forward.fixed_ns - head.fixed_ns;
        part.per_token_ns = forward.per_token_ns - head.per_token_ns;
    }
    if (recompute != parallel::Recompute::none) {
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
                                    const ModelShape& shape, const parallel::Layout& layout,
                                    int stage, Phase phase, DerivedNotes& notes) {
    const parallel::GridShape& grid = layout.grid;
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
        layers_of(stage, grid.pp, shape.layers, layout.stage_layers, layout.virtual_stages);
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
    resolved.fixed_ns *= static_cast<double>(std::max(layout.virtual_stages, 1));
    const bool same_stage = fitted_stage == stage && source_pp == grid.pp;
    if (!same_stage || layer_scale != 1.0 || tp_scale != 1.0 || hidden_scale != 1.0) {
        std::string note = std::string(to_string(phase)) + ": from the fit of stage " +
                           std::to_string(fitted_stage) + " (" + format_number(layers_there) +
                           " -> " + std::to_string(layers_here) + " layers";
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
        notes.add(stage, note + ")");
    }
    return resolved;
}

// The FLOPs of one token's weight-gradient GEMMs on `stage`, per rank: dW of QKV, the
// projection and the MLP's two, 24·h²/tp a layer, and of the LM head, 2·h·V/tp, on the last
// stage (fulcrum-train's W computes the tied embedding's head gradient, engine/model/gpt.cpp).
double weight_gradient_flops_per_token(const ModelShape& shape, const parallel::Layout& layout,
                                       int stage) {
    const parallel::GridShape& grid = layout.grid;
    const double h = shape.hidden, tp = std::max(grid.tp, 1);
    const double layers =
        layers_of(stage, grid.pp, shape.layers, layout.stage_layers, layout.virtual_stages);
    const double head = stage == grid.pp - 1 ? 2.0 * h * shape.vocab / tp : 0.0;
    return 2.0 * parallel::layer_gemm_weights(shape) * layers / tp + head;
}

// W of `stage` (Zero Bubble, Qi et al., ICLR'24, §2: the weight gradients, dW of every GEMM;
// B keeps the input gradients, dX of every GEMM, the attention core's backward and every
// elementwise backward) out of the backward `base` (without recomputation). The one place that
// splits a backward the fit did not split:
//   - a fitted run that measured its GEMM rate (fulcrum-train's gemm_gflops, run.config):
//     W's per-token term is the dW FLOPs at that rate. On the CPU backend the dW GEMMs run at
//     BLAS speed while the rest of the backward (LayerNorm, GeLU, the attention loops) runs
//     several times slower per FLOP, so W is ~25% of the backward's time, not its FLOPs' half;
//   - the analytic model: the dW GEMMs are the forward's GEMMs transposed, the same FLOPs at
//     the same size and so the same efficiency: W's per-token term is the forward's GEMM time;
//   - a fitted run that did not: the FLOPs' share, half the per-token term (dX and dW of a GEMM
//     cost the same; the elementwise backward is a few FLOPs an element against 2·h of a GEMM).
// No per-pair term (attention has no weights); half the fixed term (dW are half the GEMM
// launches). W is never more than the backward's per-token term.
// That is what the dW GEMMs took inside the whole backward, which B no longer does. The W pass
// itself runs long after B read the layer's activations, from cold caches: where the run
// measured that rate too (gemm_gflops_cold), W is the same FLOPs at it (set_stage_passes), so
// B + W is more than the whole backward, as the CPU engine measures it.
PassCost weight_gradient_part(const PassCost& base, double gemm_per_token_ns, std::string_view how,
                              int stage, DerivedNotes& notes) {
    PassCost w = base;
    w.fixed_ns *= 0.5;
    w.per_pair_ns = 0;
    w.per_token_ns = gemm_per_token_ns >= 0 ? std::min(gemm_per_token_ns, base.per_token_ns)
                                            : 0.5 * base.per_token_ns;
    w.phase = Phase::weight_grad;
    notes.add(stage, "wgrad: " + std::string(how));
    return w;
}

// One stage's passes under the knobs (docs/simulate.md, "Knobs"), from its forward, its
// backward and, when the fitted run split them, its W. `gemm_per_token_ns`: W's per-token
// time when known (weight_gradient_part), else < 0; `deferred_scale`: how much longer the W
// pass takes its per-token part than the whole backward spent on it (cold caches; 1: alike).
// `head`: the part of `forward` recomputation does not re-run (recompute_part).
void set_stage_passes(StageCosts& costs, int stage, const PassCost& forward, const PassCost& head,
                      const PassCost& backward, bool backward_fitted,
                      const std::optional<PassCost>& weight, double gemm_per_token_ns,
                      double deferred_scale, std::string_view how, const CostOrigin& origin,
                      const parallel::Layout& layout, DerivedNotes& notes) {
    const bool split = parallel::splits_backward(layout.schedule);
    // The backward without recomputation: a fitted one holds its run's (in B and in W
    // when that run split them), the analytic one none.
    const PassCost fitted_recompute = recompute_part(
        forward, backward_fitted ? origin.recompute : parallel::Recompute::none, head);
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
        PassCost taken = w;  // what W's work took inside the whole backward
        if (!weight) {
            taken = weight_gradient_part(base, gemm_per_token_ns, how, stage, notes);
            w = taken;
            w.per_token_ns *= deferred_scale;
        }
        w.phase = Phase::weight_grad;
        passes[1] = combine(base, taken, -1);
        passes[2] = w;
    }
    const PassCost recompute = recompute_part(forward, layout.recompute, head);
    costs.recompute[static_cast<std::size_t>(stage)] = recompute;
    passes[1] = combine(passes[1], recompute, 1);
    if (split) {
        passes[2] = combine(passes[2], recompute, 1);
    }
    passes[1].phase = Phase::backward;
}

}  // namespace

StageCosts resolve_costs(const CostModel* model, const CostOrigin& origin, const ModelShape& shape,
                         const parallel::Layout& layout, const HardwareAssumptions& hardware,
                         DType dtype, int gemm_chunks) {
    const parallel::GridShape& grid = layout.grid;
    const CostModel analytic = analytic_cost_model(shape, layout, hardware, dtype, gemm_chunks);
    StageCosts costs;
    DerivedNotes notes;
    costs.source = model != nullptr ? model->source : analytic.source;
    if (costs.source.empty()) {
        costs.source = "given";
    }
    costs.passes.resize(static_cast<std::size_t>(grid.pp));
    costs.recompute.resize(static_cast<std::size_t>(grid.pp));
    for (int stage = 0; stage < grid.pp; ++stage) {
        const auto resolve = [&](Phase phase) -> std::pair<PassCost, bool> {
            if (model != nullptr) {
                if (auto fitted = fitted_pass(*model, origin, shape, layout, stage, phase, notes)) {
                    return {*fitted, true};
                }
                notes.add(stage, std::string(to_string(phase)) +
                                     ": no fitted pass of that phase; " + analytic.source);
            }
            return {*find_pass(analytic, stage, phase), false};
        };
        const auto [forward, forward_fitted] = resolve(Phase::forward);
        const auto [backward, backward_fitted] = resolve(Phase::backward);
        std::optional<PassCost> weight;
        if (model != nullptr && backward_fitted) {
            weight = fitted_pass(*model, origin, shape, layout, stage, Phase::weight_grad, notes);
        }
        // W's per-token time where something measured or modelled it (weight_gradient_part).
        double gemm_per_token_ns = -1;
        double deferred_scale = 1;
        std::string how = "half the backward's per-token and fixed terms (dX and dW FLOPs alike)";
        if (backward_fitted && origin.gemm_gflops > 0) {
            gemm_per_token_ns =
                weight_gradient_flops_per_token(shape, layout, stage) / origin.gemm_gflops;
            how = "the dW GEMMs' " +
                  format_number(weight_gradient_flops_per_token(shape, layout, stage)) +
                  " FLOPs a token at the run's measured " + format_number(origin.gemm_gflops) +
                  " GFLOP/s, half the fixed term";
            if (origin.gemm_gflops_cold > 0) {
                deferred_scale = origin.gemm_gflops / origin.gemm_gflops_cold;
                how += "; the W pass at its cold-cache " + format_number(origin.gemm_gflops_cold) +
                       " GFLOP/s";
            }
        } else if (!backward_fitted) {
            gemm_per_token_ns =
                analytic_gemm_per_token_ns(shape, layout, hardware, dtype, stage, gemm_chunks);
            how = "the forward's GEMM time (the dW GEMMs' FLOPs and sizes)";
        }
        // What recomputation does not re-run: the analytic head and loss, or a fitted
        // forward's FLOPs share of the LM head, 2hV against 24h² a layer.
        PassCost head = analytic_head_forward(shape, layout, hardware, dtype, stage);
        if (forward_fitted) {
            const double h = shape.hidden;
            const double layers =
                layers_of(stage, grid.pp, shape.layers, layout.stage_layers, layout.virtual_stages);
            const double head_flops = stage == grid.pp - 1 ? 2.0 * h * shape.vocab : 0.0;
            head = PassCost{};
            head.per_token_ns = forward.per_token_ns * head_flops /
                                (2.0 * parallel::layer_gemm_weights(shape) * layers + head_flops);
        }
        set_stage_passes(costs, stage, forward, head, backward, backward_fitted, weight,
                         gemm_per_token_ns, deferred_scale, how, origin, layout, notes);
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
                        notes.add(std::string(name) +
                                  ": per-byte cost not fitted (every sample moved " +
                                  std::to_string(cost.fitted_bytes) +
                                  " bytes); other sizes scale by the analytic bandwidth");
                    }
                }
                return cost;
            }
            if (const CollectiveCost* other = find_collective(*model, stand_in)) {
                if (needed) {
                    notes.add(std::string(name) + ": not in the cost model; using " +
                              std::string(stand_in) + "'s");
                }
                CollectiveCost cost = *other;
                cost.name = std::string(name);
                return cost;
            }
            if (needed) {
                notes.add(std::string(name) + ": not in the cost model; " + analytic.source);
            }
        }
        return *find_collective(analytic, name);
    };
    const bool pipelined = grid.pp > 1;
    costs.cp_all_gather = take(kCpAllGather, grid.cp > 1, kCpReduceScatter);
    costs.cp_reduce_scatter = take(kCpReduceScatter, grid.cp > 1, kCpAllGather);
    const bool sequence_parallel = layout.sequence_parallel && grid.tp > 1;
    costs.tp_all_reduce = take(kTpAllReduce, grid.tp > 1 && !sequence_parallel, kTpAllReduce);
    costs.tp_all_gather = take(kTpAllGather, sequence_parallel, kTpReduceScatter);
    costs.tp_reduce_scatter = take(kTpReduceScatter, sequence_parallel, kTpAllGather);
    costs.recv_activations = take(kRecvActivations, pipelined, kRecvGradients);
    costs.recv_gradients = take(kRecvGradients, pipelined, kRecvActivations);
    costs.dp_all_reduce = take(kDpAllReduce, grid.dp * grid.cp > 1, kDpAllReduce);
    costs.embedding_all_reduce = take(kEmbeddingAllReduce, pipelined, kDpAllReduce);
    const bool ulysses = layout.context_parallelism == parallel::ContextParallelism::ulysses;
    costs.cp_all_to_all = take(kCpAllToAll, ulysses && grid.cp > 1, kCpAllToAll);
    // ZeRO-2 reduce-scatters the gradients after each backward and gathers the updated
    // parameters at the step's end; ZeRO-3 gathers them before every layer too.
    const bool zero2 = layout.zero_stage >= 2 && grid.dp * grid.cp > 1;
    costs.zero_all_gather = take(kZeroAllGather, zero2, kZeroAllGather);
    costs.zero_reduce_scatter = take(kZeroReduceScatter, zero2, kZeroReduceScatter);
    if (model != nullptr && model->optimizer_ns > 0) {
        costs.optimizer_ns = model->optimizer_ns;
    } else {
        costs.optimizer_ns = analytic.optimizer_ns;
        if (model != nullptr) {
            notes.add("optimizer: not in the cost model; " + analytic.source);
        }
    }
    costs.notes = notes.lines();
    return costs;
}

UpdateStart update_start(const std::vector<std::int64_t>& reduce_end, const StageCosts& costs,
                         std::int64_t embedding_bytes) {
    UpdateStart update;
    if (reduce_end.empty()) {
        return update;
    }
    std::int64_t ready = *std::max_element(reduce_end.begin(), reduce_end.end());
    update.embedding_start = update.embedding_end = std::max(reduce_end.front(), reduce_end.back());
    if (reduce_end.size() > 1) {
        update.embedding_end += predict_collective_ns(costs.embedding_all_reduce, embedding_bytes);
        ready = std::max(ready, update.embedding_end);
    }
    update.start = ready;
    return update;
}

std::int64_t embedding_gradient_bytes(const ModelShape& model, const parallel::GridShape& grid,
                                      std::int64_t element_bytes) {
    return static_cast<std::int64_t>(model.vocab) * model.hidden / std::max(grid.tp, 1) *
           element_bytes;
}

std::int64_t predict_pass_ns(const PassCost& cost, std::int64_t tokens, std::int64_t pairs) {
    const double ns = cost.fixed_ns + cost.per_token_ns * static_cast<double>(tokens) +
                      cost.per_pair_ns * static_cast<double>(pairs);
    return ns > 0 ? std::llround(ns) : 0;
}

std::int64_t predict_moved_ns(const CollectiveCost& cost, std::int64_t bytes) {
    return bytes > 0 ? predict_collective_ns(cost, bytes) : 0;
}

std::int64_t exposed_bytes(std::int64_t bytes, std::int64_t exposed_ns, std::int64_t whole_ns) {
    if (whole_ns <= 0 || exposed_ns >= whole_ns) {
        return bytes;
    }
    return std::llround(static_cast<double>(bytes) *
                        static_cast<double>(std::max<std::int64_t>(exposed_ns, 0)) /
                        static_cast<double>(whole_ns));
}

std::int64_t predict_collective_ns(const CollectiveCost& cost, std::int64_t bytes) {
    const double ns = cost.nccl ? cost.predict(bytes)
                                : cost.latency_ns + cost.per_byte_ns * static_cast<double>(bytes);
    return ns > 0 ? std::llround(ns) : 0;
}

}  // namespace fulcrum::sim
