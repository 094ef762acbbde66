#include "core/sim/pass_pricing.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <utility>

#include "core/sim/layer_costs.h"

namespace fulcrum::sim {

using analysis::CollectiveCost;
using analysis::PassCost;

std::size_t group_index(int stage, int microbatch, int microbatches, Phase phase) {
    return (static_cast<std::size_t>(stage) * static_cast<std::size_t>(microbatches) +
            static_cast<std::size_t>(microbatch)) *
               kPassPhases +
           static_cast<std::size_t>(phase);
}

int layers_of(int stage, const SimulationConfig& config) {
    return parallel::stage_layer_total(stage, config.layout.grid.pp, config.layout.virtual_stages,
                                       config.model.layers, config.layout.stage_layers);
}

// Bytes of one pipeline send of a rank holding `tokens`: the [T, h] boundary activation, its
// rows' share under sequence parallelism or with Megatron-LM's scatter/gather.
std::int64_t p2p_bytes(const SimulationConfig& config, std::int64_t tokens) {
    const bool split = config.layout.sequence_parallel || config.pipeline_scatter_gather;
    return tokens * config.model.hidden * element_bytes(config.dtype) /
           (split ? config.layout.grid.tp : 1);
}

// Sends of a stage's passes in one phase over its v chunks: a forward sends unless its model
// chunk is the last, a backward unless it is the first; W sends nothing.
int sends_of(int stage, Phase phase, const SimulationConfig& config) {
    const int p = config.layout.grid.pp, v = std::max(config.layout.virtual_stages, 1);
    if (phase == Phase::weight_grad || p == 1) {
        return 0;
    }
    const bool forward = phase == Phase::forward;
    return v - ((forward ? stage == p - 1 : stage == 0) ? 1 : 0);
}

// Receives of a stage's passes in one phase: a forward receives unless its model chunk is the
// first, a backward unless it is the last; W receives nothing.
int receives_of(int stage, Phase phase, const SimulationConfig& config) {
    const int p = config.layout.grid.pp, v = std::max(config.layout.virtual_stages, 1);
    if (phase == Phase::weight_grad || p == 1) {
        return 0;
    }
    const bool forward = phase == Phase::forward;
    return v - ((forward ? stage == 0 : stage == p - 1) ? 1 : 0);
}

// Whether a receiver all-gathers what it received over TP: Megatron-LM's scatter/gather of
// pipeline sends, when the next stage needs the whole activation (not under sequence
// parallelism, whose layers start from a rank's rows).
bool gathers_received(const SimulationConfig& config) {
    return config.pipeline_scatter_gather && !config.layout.sequence_parallel &&
           config.layout.grid.tp > 1;
}

// Megatron-LM's --tp-comm-overlap (Transformer Engine's userbuffers; Wang et al., ASPLOS'23,
// "Overlap Communication with Dependent Computation via Decomposition"): each all-gather or
// reduce-scatter of sequence parallelism is cut into tp chunks that pass around the ring
// while the GEMM beside it computes on the chunks already there. Of T ns of collectives beside
// G ns of linear work, the first chunk (T/tp) waits, and the other (tp − 1)/tp of T runs under
// the GEMMs' (tp − 1)/tp of G; what does not fit stays exposed. Each kind keeps its share.
void hide_behind_gemms(RankPass& rank, std::int64_t gemm_ns, int tp) {
    const double total = static_cast<double>(rank.tp_total());
    if (total <= 0 || tp < 2) {
        return;
    }
    const double hidden_share = (tp - 1.0) / tp;
    const double exposed =
        total / tp + std::max(0.0, hidden_share * (total - static_cast<double>(gemm_ns)));
    const double keep = std::min(1.0, exposed / total);
    for (auto* kinds : {&rank.tp_ns, &rank.recompute_tp_ns}) {
        for (std::int64_t& ns : *kinds) {
            ns = std::llround(static_cast<double>(ns) * keep);
        }
    }
}

namespace {

// The attention block's share of a layer's linear work: QKV (6h²) and the output projection
// (2h²) of 24h² FLOPs per token (the MLP's two 4h GEMMs are the other 16h²).
constexpr std::pair<std::int64_t, std::int64_t> kAttentionBlockLinearShare = {8, 24};

// Megatron-LM's asynchronous TP communication in the backward (SimulationConfig::
// tp_backward_overlap) on one rank's backward pass of `layers` layers, `linear_ns` of it
// outside the attention core. Each column-parallel linear's collective runs beside a GEMM of
// its own, the QKV projection's and the MLP's first: without sequence parallelism the input
// gradient's all-reduce beside the weight-gradient GEMM; with it the reduce-scatter likewise,
// and the all-gather of the linear's input beside the input-gradient GEMM (the same FLOPs).
// The row-parallel linears' collectives stay exposed. A layer's backward linear work is twice
// its forward's, 2·(qkv + h + fc1 + f)·h a token, so each such GEMM is its linear's share of
// half of it. A call hides up to its GEMM's time; NCCL's kernels hold their SMs while it runs
// beside the GEMM (nccl_sm_share), which takes that share of the hidden time longer.
void overlap_backward_collectives(RankPass& rank, const SimulationConfig& config,
                                  const std::array<const CollectiveCost*, 3>& kind_costs,
                                  std::int64_t linear_ns, std::int64_t layers) {
    const parallel::ModelShape& model = config.model;
    const double h = model.hidden;
    const double qkv = h + 2.0 * parallel::kv_hidden_of(model);
    const double ffn = parallel::ffn_hidden_of(model);
    const double fc1 = model.architecture == parallel::Architecture::llama ? 2 * ffn : ffn;
    const double per_layer =
        static_cast<double>(linear_ns) / static_cast<double>(std::max<std::int64_t>(layers, 1));
    const double backward_columns = 2 * (qkv + h + fc1 + ffn);
    // [0]: beside QKV's GEMM, in the attention block; [1]: beside the MLP's.
    const std::array<double, 2> gemm_ns = {per_layer * qkv / backward_columns,
                                           per_layer * fc1 / backward_columns};
    std::array<double, 2> delay{};
    const auto hide = [&](std::size_t kind) {
        if (rank.tp_calls[kind] < 2 * layers) {
            return;
        }
        const double call =
            static_cast<double>(rank.tp_ns[kind]) / static_cast<double>(rank.tp_calls[kind]);
        const double share = nccl_sm_share(config.hardware, *kind_costs[kind]);
        double hidden = 0;
        for (std::size_t linear = 0; linear < gemm_ns.size(); ++linear) {
            const double covered = std::min(call, gemm_ns[linear]) * static_cast<double>(layers);
            hidden += covered;
            delay[linear] += share * covered;
        }
        rank.tp_ns[kind] -= std::llround(hidden);
    };
    const bool sp = config.layout.sequence_parallel;
    hide(sp ? 2 : 0);  // the input gradient's reduce-scatter or all-reduce
    if (sp) {
        hide(1);  // the re-gather of the linear's input
    }
    rank.attention_ns += std::llround(delay[0]);
    rank.mlp_ns += std::llround(delay[1]);
}

// One CP rank's compute and TP collectives of one pass (docs/simulate.md, "One pass").
RankPass rank_pass(const analysis::PassCost& cost, const analysis::PassCost& recompute,
                   const StageCosts& costs, const SimulationConfig& config, Phase phase,
                   std::int64_t layers, std::int64_t tokens, std::int64_t pairs) {
    RankPass rank;
    rank.tokens = tokens;
    const std::int64_t own = predict_pass_ns(cost, tokens, pairs);
    const bool recomputing = recomputes(phase, config.layout.recompute);
    rank.recompute_ns = recomputing ? std::min(own, predict_pass_ns(recompute, tokens, pairs)) : 0;
    const double per_pair = cost.per_pair_ns - (recomputing ? recompute.per_pair_ns : 0.0);
    const std::int64_t rest = own - rank.recompute_ns;
    // The `attention` range is the engine's: a layer's whole attention block (docs/analyses.md,
    // "Attention time"), so besides the core (per_pair · pairs) it holds the block's GEMMs, QKV
    // and the output projection: 8h² of a layer's 24h² linear FLOPs per token.
    const std::int64_t core = std::clamp<std::int64_t>(
        std::llround(std::max(per_pair * static_cast<double>(pairs), 0.0)), 0, rest);
    rank.attention_ns =
        core + (rest - core) * kAttentionBlockLinearShare.first / kAttentionBlockLinearShare.second;
    rank.mlp_ns = rest - rank.attention_ns;
    if (config.layout.grid.tp > 1) {
        const bool sp = config.layout.sequence_parallel;
        const std::int64_t bytes = tokens * config.model.hidden * element_bytes(config.dtype);
        const std::array<const CollectiveCost*, 3> kind_costs = {
            &costs.tp_all_reduce, &costs.tp_all_gather, &costs.tp_reduce_scatter};
        const auto fill = [&](const TpCollectives& per_layer, TpByKind& ns, TpByKind& calls,
                              TpByKind& whole) {
            const std::array<int, 3> counts = {per_layer.all_reduce, per_layer.all_gather,
                                               per_layer.reduce_scatter};
            for (std::size_t k = 0; k < 3; ++k) {
                calls[k] = counts[k] * layers;
                ns[k] = whole[k] = calls[k] * predict_collective_ns(*kind_costs[k], bytes);
            }
        };
        fill(tp_collectives_per_layer(phase, parallel::splits_backward(config.layout.schedule), sp),
             rank.tp_ns, rank.tp_calls, rank.tp_whole_ns);
        if (recomputing) {
            fill(tp_recompute_collectives_per_layer(config.layout.recompute, sp),
                 rank.recompute_tp_ns, rank.recompute_tp_calls, rank.recompute_tp_whole_ns);
        }
        if (config.tp_comm_overlap) {
            hide_behind_gemms(rank, rest - core, config.layout.grid.tp);
        } else if (config.tp_backward_overlap && phase == Phase::backward &&
                   !parallel::splits_backward(config.layout.schedule)) {
            overlap_backward_collectives(rank, config, kind_costs, rest - core, layers);
        }
    }
    return rank;
}

}  // namespace

namespace {

// Bytes one rank copies between device and pinned host memory in one pass of `layers` layers
// holding `tokens` (attending over `attended` tokens: its own under all-gather CP's K and V
// stream, the whole micro-batch's under Ulysses), by direction: offloaded checkpoints go out
// after each layer's forward and come back before its backward ([T, h], /tp under sequence
// parallelism); FPDT's chunks (Yao et al. 2024, §4) send Q, K and V of each chunk out in the
// forward and fetch every earlier chunk's K and V for each chunk's attention, u(u − 1)/2
// chunks of u, and in the backward fetch Q, K, V and again the earlier K and V and return
// their gradients as much. Under Ulysses, FPDT's offloading passes as fulcrum-train runs
// them (engine/model/chunked_attention.h): the forward also sends each chunk's output and lse
// out; the backward fetches each K/V chunk once, sends ∂L/∂o out once, and for each of the
// u(u + 1)/2 pairs fetches its query chunk's Q, ∂L/∂o, output and lse, and dQ's partial sum
// in and out but for a chunk's first and last pair and the one pair that hands it straight
// to the next (the last chunk's, between the last two K/V chunks). Not W: it reuses what B
// fetched.
HostCopies offload_bytes(const SimulationConfig& config, Phase phase, std::int64_t layers,
                         std::int64_t tokens, std::int64_t attended) {
    HostCopies copies;
    if (phase == Phase::weight_grad) {
        return copies;
    }
    const bool forward = phase == Phase::forward;
    const parallel::GridShape& grid = config.layout.grid;
    const std::int64_t h = config.model.hidden;
    const std::int64_t element = element_bytes(config.dtype);
    if (config.layout.offload_checkpoints) {
        const std::int64_t checkpoint =
            tokens * h / (config.layout.sequence_parallel ? grid.tp : 1) * element;
        (forward ? copies.to_host : copies.to_device) += checkpoint;
    }
    if (config.offload && config.attention_chunk > 0) {
        const std::int64_t h_kv = parallel::kv_hidden_of(config.model);
        const bool ulysses =
            config.layout.context_parallelism == parallel::ContextParallelism::ulysses;
        const std::int64_t heads_share = grid.tp * (ulysses ? grid.cp : 1);
        const std::int64_t chunks =
            (attended + config.attention_chunk - 1) / config.attention_chunk;
        const std::int64_t chunk_kv = std::min<std::int64_t>(config.attention_chunk, attended) * 2 *
                                      h_kv / heads_share * element;
        const std::int64_t qkv = attended * (h + 2 * h_kv) / heads_share * element;
        const std::int64_t earlier = chunks * (chunks - 1) / 2 * chunk_kv;
        if (!ulysses) {
            copies.to_host += forward ? qkv : qkv + earlier;
            copies.to_device += forward ? earlier : qkv + earlier;
        } else {
            const std::int64_t heads = config.model.heads / heads_share;
            const std::int64_t rows = std::min<std::int64_t>(config.attention_chunk, attended);
            const std::int64_t pairs = chunks * (chunks + 1) / 2;
            const std::int64_t dq_moves = pairs - chunks - (chunks > 1 ? 1 : 0);
            const std::int64_t row = h / heads_share * element;  // one row of Q, ∂L/∂o, out
            if (forward) {
                copies.to_host += qkv + attended * (row + heads * element);
                copies.to_device += earlier;
            } else {
                copies.to_host += attended * row + dq_moves * rows * row;
                copies.to_device += attended * 2 * h_kv / heads_share * element +
                                    pairs * rows * (3 * row + heads * element) +
                                    dq_moves * rows * row;
            }
        }
    }
    copies.to_host *= layers;
    copies.to_device *= layers;
    return copies;
}

// What a layer's Ulysses all-to-alls leave exposed, forward and backward (docs/simulate.md,
// "One pass"): `qkv` and `out` bytes a rank sends, beside `attention` ns of one layer's
// attention. Whole attention trades each at once, before and after it. FPDT's chunks
// (fulcrum-train's fpdt_attention_forward/_backward) trade n = ⌈tokens/chunk⌉ of each, a call
// a chunk: forward, chunk 0's Q|K|V waits, chunk i + 1's and chunk i − 1's output (with the
// output offload; without, the output goes back whole after the pairs) run beside chunk i's
// pairs, and the last output waits; backward, ∂L/∂o is traded before the pairs (a chunk at a
// time with offload) and each K/V chunk's dQ|dK|dV beside the next one's pairs, the last
// waiting. The pairs are taken as an even 1/n of the attention a chunk.
struct ExchangeTimes {
    std::int64_t forward = 0, backward = 0;              // exposed
    std::int64_t whole_forward = 0, whole_backward = 0;  // the calls' whole time
};
ExchangeTimes ulysses_exchange_ns(const SimulationConfig& config, const CollectiveCost& cost,
                                  std::int64_t tokens, std::int64_t qkv, std::int64_t out,
                                  std::int64_t attention) {
    const std::int64_t whole = predict_collective_ns(cost, qkv) + predict_collective_ns(cost, out);
    if (config.attention_chunk <= 0) {
        return {whole, whole, whole, whole};
    }
    const std::int64_t n =
        std::max<std::int64_t>(1, (tokens + config.attention_chunk - 1) / config.attention_chunk);
    const std::int64_t q = predict_collective_ns(cost, qkv / n);
    const std::int64_t o = predict_collective_ns(cost, out / n);
    const std::int64_t share = attention / n;
    const bool host_output = config.offload;
    const auto beyond = [&](std::int64_t t) { return std::max<std::int64_t>(0, t - share); };
    ExchangeTimes exposed;
    exposed.forward = q + (host_output ? o : predict_collective_ns(cost, out));
    for (std::int64_t i = 0; i < n; ++i) {
        exposed.forward += beyond((i + 1 < n ? q : 0) + (host_output && i >= 1 ? o : 0));
    }
    exposed.backward =
        (host_output ? n * o : predict_collective_ns(cost, out)) + q + (n - 1) * beyond(q);
    exposed.whole_forward = exposed.whole_backward =
        n * q + (host_output ? n * o : predict_collective_ns(cost, out));
    return exposed;
}

}  // namespace

// One pass of one micro-batch on one stage for the whole CP group (docs/simulate.md, "One
// pass"); fills the group's cp RankPasses.
GroupPass play_group(const balance::PlannedMicroBatch& planned, int stage, Phase phase,
                     const SimulationConfig& config, const StageCosts& costs, RankPass* ranks) {
    const parallel::GridShape& grid = config.layout.grid;
    const std::int64_t hidden = config.model.hidden;
    const std::int64_t element = element_bytes(config.dtype);
    const std::int64_t layers = layers_of(stage, config);
    const auto& stage_passes = costs.passes[static_cast<std::size_t>(stage)];
    const PassCost& recompute = costs.recompute[static_cast<std::size_t>(stage)];
    const bool forward = phase == Phase::forward;
    const CollectiveCost& p2p = forward ? costs.recv_activations : costs.recv_gradients;
    GroupPass group;
    std::int64_t slowest = 0;
    std::int64_t largest_send = 0;
    std::int64_t largest_gather = 0;
    std::int64_t largest_shard = 0;
    // Ulysses: every rank attends over the whole micro-batch with its cp-th of the heads, so
    // each computes an equal share of the causal pairs (DeepSpeed-Ulysses, Jacobs et al. 2023,
    // §3); all-gather CP: its own queries' pairs.
    const bool ulysses =
        config.layout.context_parallelism == parallel::ContextParallelism::ulysses && grid.cp > 1;
    std::int64_t ulysses_pairs = 0;
    for (int c = 0; ulysses && c < grid.cp; ++c) {
        ulysses_pairs += planned.cp.ranks[static_cast<std::size_t>(c)].attention_work / 2;
    }
    ulysses_pairs = (ulysses_pairs + grid.cp - 1) / std::max(grid.cp, 1);
    for (int c = 0; c < grid.cp; ++c) {
        const balance::CpShard& shard = planned.cp.ranks[static_cast<std::size_t>(c)];
        largest_shard = std::max(largest_shard, shard.tokens);
        // attention_work is Σ causal_pair_work, twice the pairs; always even.
        ranks[c] = rank_pass(stage_passes[static_cast<std::size_t>(phase)], recompute, costs,
                             config, phase, layers, shard.tokens,
                             ulysses ? ulysses_pairs : shard.attention_work / 2);
        slowest = std::max(slowest, ranks[c].own_total());
        const double send =
            std::max(p2p.per_byte_ns, 0.0) * static_cast<double>(p2p_bytes(config, shard.tokens));
        largest_send = std::max<std::int64_t>(largest_send, std::llround(send));
        if (gathers_received(config)) {
            largest_gather = std::max(
                largest_gather,
                predict_collective_ns(costs.tp_all_gather, shard.tokens * hidden * element));
        }
    }
    for (int c = 0; c < grid.cp; ++c) {
        ranks[c].wait_ns = slowest - ranks[c].own_total();
    }
    const bool full_recompute = config.layout.recompute == parallel::Recompute::full;
    const std::int64_t h_kv = parallel::kv_hidden_of(config.model);
    if (ulysses && phase != Phase::weight_grad) {
        // Per layer, Q, K and V of the rank's tokens to head shards and the attention's output
        // back (the backward: the output's gradient, then Q's, K's and V's); each rank's
        // buffer its tokens' (the largest shard's, which the others wait for), its TP heads.
        // Full recomputation's forward runs both again.
        const std::int64_t qkv = largest_shard * (hidden + 2 * h_kv) / grid.tp * element;
        const std::int64_t out = largest_shard * hidden / grid.tp * element;
        std::int64_t attention = 0;
        for (int c = 0; c < grid.cp; ++c) {
            attention = std::max(attention, ranks[c].attention_ns);
        }
        const ExchangeTimes per_layer = ulysses_exchange_ns(
            config, costs.cp_all_to_all, planned.packed.tokens, qkv, out, attention / layers);
        group.exchange_ns = layers * (forward ? per_layer.forward : per_layer.backward);
        group.exchange_bytes =
            exposed_bytes((qkv + out) * layers, group.exchange_ns,
                          layers * (forward ? per_layer.whole_forward : per_layer.whole_backward));
        if (phase == Phase::backward && full_recompute) {
            group.regather_ns = layers * per_layer.forward;
            group.regather_bytes = exposed_bytes((qkv + out) * layers, group.regather_ns,
                                                 layers * per_layer.whole_forward);
        }
    } else if (grid.cp > 1 && phase != Phase::weight_grad) {
        // K and V of every token of the micro-batch, this rank's heads (h/tp); full
        // recomputation gathers them again in the backward pass.
        const std::int64_t bytes_per_layer = planned.packed.tokens * 2 * (h_kv / grid.tp) * element;
        group.exchange_bytes = bytes_per_layer * layers;
        group.exchange_ns =
            layers * predict_collective_ns(forward ? costs.cp_all_gather : costs.cp_reduce_scatter,
                                           bytes_per_layer);
        if (phase == Phase::backward && full_recompute) {
            group.regather_bytes = bytes_per_layer * layers;
            group.regather_ns =
                layers * predict_collective_ns(costs.cp_all_gather, bytes_per_layer);
        }
    }
    if (gathers_parameters_per_pass(config) && phase != Phase::weight_grad) {
        // ZeRO-3 gathers each layer's parameters before its forward and before its backward,
        // the next layer's while this one computes (DeepSpeed's prefetch): the first layer's
        // gather waits, the rest hide behind the pass's compute where it is long enough.
        const std::int64_t layer_bytes = layer_parameter_bytes(config);
        const std::int64_t one = predict_collective_ns(costs.zero_all_gather, layer_bytes);
        group.param_gather_ns = one + std::max<std::int64_t>(0, (layers - 1) * one - slowest);
        group.param_gather_bytes =
            exposed_bytes(layer_bytes * layers, group.param_gather_ns, layers * one);
    }
    if (phase == Phase::backward && scatters_gradients_per_pass(config)) {
        // Each layer's gradients reduce-scattered once its backward is done: one after the
        // other on the pass's end (fulcrum-train), or with --overlap-grad-reduce each behind
        // the next layer's compute (DeepSpeed's overlap_comm), the last one exposed.
        const std::int64_t layer_bytes = layer_gradient_bytes(config);
        const std::int64_t one = predict_collective_ns(costs.zero_reduce_scatter, layer_bytes);
        group.grad_scatter_ns = config.overlap_grad_reduce
                                    ? one + std::max<std::int64_t>(0, (layers - 1) * one - slowest)
                                    : layers * one;
        group.grad_scatter_bytes =
            exposed_bytes(layer_bytes * layers, group.grad_scatter_ns, layers * one);
    }
    group.offload = offload_bytes(config, phase, layers, largest_shard,
                                  ulysses ? planned.packed.tokens : largest_shard);
    if (group.offload.any()) {
        group.offload_wait_ns = std::max<std::int64_t>(
            0, copy_ns(group.offload, config.hardware) - slowest - group.exchange_ns);
    }
    group.send_ns = largest_send;
    group.gather_ns = largest_gather;
    group.duration_ns = slowest + group.exchange_ns + group.regather_ns + group.param_gather_ns +
                        group.grad_scatter_ns + group.offload_wait_ns +
                        sends_of(stage, phase, config) * group.send_ns +
                        receives_of(stage, phase, config) * group.gather_ns;
    return group;
}

std::vector<Phase> phases_of(const SimulationConfig& config) {
    std::vector<Phase> phases = {Phase::forward, Phase::backward};
    if (parallel::splits_backward(config.layout.schedule)) {
        phases.push_back(Phase::weight_grad);
    }
    return phases;
}

// One latency for both pipeline directions (replay_pipeline takes one): their mean.
std::int64_t p2p_latency_ns(const SimulationConfig& config, const StageCosts& costs) {
    return config.layout.grid.pp > 1
               ? std::llround((std::max(costs.recv_activations.latency_ns, 0.0) +
                               std::max(costs.recv_gradients.latency_ns, 0.0)) /
                              2)
               : 0;
}

// The reduction of `stage`'s gradients (grad_reduction.h): one layer's gradients,
// (12h² + 13h)/tp elements, as a bucket.
GradientReductionInput gradient_reduction(const SimulationConfig& config, int stage,
                                          std::int64_t step_start) {
    GradientReductionInput input;
    input.stage = stage;
    input.stages = config.layout.grid.pp;
    input.virtual_stages = std::max(config.layout.virtual_stages, 1);
    input.layers = config.model.layers;
    input.stage_layers = config.layout.stage_layers;
    input.overlap = config.overlap_grad_reduce;
    input.writes_weights =
        parallel::splits_backward(config.layout.schedule) ? Phase::weight_grad : Phase::backward;
    input.layer_bytes = layer_reduction_bytes(config);
    input.step_start_ns = step_start;
    return input;
}

bool scatters_gradients_per_pass(const SimulationConfig& config) {
    return config.layout.zero_stage >= 2 && config.layout.grid.dp * config.layout.grid.cp > 1 &&
           !parallel::splits_backward(config.layout.schedule) && !config.accumulate_gradients;
}

bool gathers_parameters_per_pass(const SimulationConfig& config) {
    return config.layout.zero_stage >= 3 && config.layout.grid.dp * config.layout.grid.cp > 1;
}

std::vector<parallel::ParameterArrival> parameter_arrivals(const SimulationConfig& config,
                                                           const StageCosts& costs, int stage) {
    std::vector<parallel::ParameterArrival> arrivals;
    if (!gathers_parameters_at_step_start(config)) {
        return arrivals;
    }
    const parallel::GridShape& grid = config.layout.grid;
    const int v = std::max(config.layout.virtual_stages, 1);
    const std::int64_t layer_bytes = layer_parameter_bytes(config);
    const std::int64_t layer_ns = predict_collective_ns(costs.zero_all_gather, layer_bytes);
    const std::int64_t layers = layers_of(stage, config);
    const std::int64_t rest_bytes =
        stage_parameters(config.model, grid, stage, config.layout.stage_layers, v) *
            element_bytes(config.dtype) -
        layers * layer_bytes;
    std::int64_t gathered =
        stage == 0 && rest_bytes > 0 ? predict_collective_ns(costs.zero_all_gather, rest_bytes) : 0;
    for (int chunk = 0; chunk < v; ++chunk) {
        const parallel::LayerRange range = parallel::model_chunk_layers(
            chunk * grid.pp + stage, grid.pp * v, config.model.layers,
            config.layout.stage_layers.size() == static_cast<std::size_t>(grid.pp * v)
                ? std::span<const int>(config.layout.stage_layers)
                : std::span<const int>{});
        const int n = range.last - range.first;  // 0: a chunk of no layers waits for nothing new
        arrivals.push_back({.first_ns = gathered + (n > 0 ? layer_ns : 0),
                            .layer_ns = layer_ns,
                            .layers = std::max(n, 1),
                            .bytes = n * layer_bytes});
        gathered += n * layer_ns;
    }
    return arrivals;
}

StepEndReduction step_end_reduction(const SimulationConfig& config, int stage,
                                    std::int64_t stage_bytes) {
    StepEndReduction rest;
    rest.reduced_bytes = stage_bytes;
    if (!scatters_gradients_per_pass(config)) {
        return rest;
    }
    const std::int64_t layers = layers_of(stage, config);
    const std::int64_t scattered = std::min(stage_bytes, layers * layer_gradient_bytes(config));
    rest.per_pass = true;
    rest.reduced_bytes = stage_bytes - scattered;
    rest.gathered_bytes =
        config.layout.zero_stage == 2 ? layers * layer_parameter_bytes(config) : 0;
    return rest;
}

std::int64_t gradient_element_bytes(const SimulationConfig& config) {
    return element_bytes(
        config.grad_reduce_dtype.value_or(config.dtype == DType::fp16 ? DType::fp16 : DType::fp32));
}

std::int64_t reduction_element_bytes(const SimulationConfig& config) {
    const std::int64_t gradient = gradient_element_bytes(config);
    if (config.layout.zero_stage >= 1 && !scatters_gradients_per_pass(config) &&
        !gathers_parameters_at_step_start(config)) {
        return (gradient + element_bytes(config.dtype)) / 2;
    }
    return gradient;
}

namespace {

// One layer's parameters on one rank of a stage: (12h² + 13h)/tp for GPT.
std::int64_t layer_elements(const SimulationConfig& config) {
    return static_cast<std::int64_t>(parallel::layer_parameters(config.model)) /
           config.layout.grid.tp;
}

}  // namespace

std::int64_t layer_gradient_bytes(const SimulationConfig& config) {
    return layer_elements(config) * gradient_element_bytes(config);
}

std::int64_t layer_parameter_bytes(const SimulationConfig& config) {
    return layer_elements(config) * element_bytes(config.dtype);
}

std::int64_t layer_reduction_bytes(const SimulationConfig& config) {
    return layer_elements(config) * reduction_element_bytes(config);
}

}  // namespace fulcrum::sim
