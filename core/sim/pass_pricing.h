// Pricing one pass of one micro-batch on one stage (docs/simulate.md, "One pass"): each CP
// rank's compute and TP collectives from the cost model, and the group's time with its K/V
// exchange and pipeline send. The step player (step_play.h) and the closed-form estimate
// (step_estimate.h) both price passes here, so they agree by construction.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/balance/step_planner.h"
#include "core/parallel/replay.h"
#include "core/parallel/schedule.h"
#include "core/sim/grad_reduction.h"
#include "core/sim/sim_config.h"

namespace fulcrum::sim {

// Bytes one rank copies between the device and pinned host memory in one pass, by direction.
// The directions run on their own streams (fulcrum-train's offload and prefetch streams,
// FPDT's, Yao et al. 2024 §4) and a host link carries both at once, each at its full rate.
struct HostCopies {
    std::int64_t to_host = 0;
    std::int64_t to_device = 0;
    bool any() const { return to_host + to_device > 0; }
};

// How long `bytes` take one way over the host link.
inline std::int64_t host_link_ns(std::int64_t bytes, const HardwareAssumptions& hardware) {
    return std::llround(static_cast<double>(bytes) / hardware.host_link_gbs);
}

// How long `copies` keep the host link busy: the slower direction.
inline std::int64_t copy_ns(const HostCopies& copies, const HardwareAssumptions& hardware) {
    return host_link_ns(std::max(copies.to_host, copies.to_device), hardware);
}

// One pass (one micro-batch, one phase) of one replica's stage, for the whole CP group:
// what the pipeline replay sees. For a stage of v model chunks, the whole stage's share of
// the model (the replay gives each chunk's pass 1/v of it).
struct GroupPass {
    std::int64_t duration_ns = 0;  // slowest member's compute + CP exchange + sends
    // The CP collective's transfer, every layer together, what the attention does not hide
    // (FPDT's chunks trade beside it); the bytes of a collective here are always those its
    // exposed time moved (exposed_bytes, stage_costs.h), as the written ranges carry them.
    std::int64_t exchange_ns = 0;
    std::int64_t exchange_bytes = 0;
    std::int64_t send_ns = 0;  // one send of one chunk's boundary activation
    // Full recomputation's second K/V all-gather in the backward pass, every layer together.
    std::int64_t regather_ns = 0;
    std::int64_t regather_bytes = 0;
    // With Megatron-LM's scatter/gather sends, the receiver's all-gather of the activation
    // over TP, one receive.
    std::int64_t gather_ns = 0;
    // ZeRO-3's gathers of the stage's layers over DP × CP, what prefetching behind the pass's
    // compute leaves exposed (the first layer's, and any excess), and their bytes.
    std::int64_t param_gather_ns = 0;
    std::int64_t param_gather_bytes = 0;
    // ZeRO-2's and -3's reduce-scatter of the stage's layers' gradients after each backward
    // pass (scatters_gradients_per_pass), what is exposed of it, and its bytes.
    std::int64_t grad_scatter_ns = 0;
    std::int64_t grad_scatter_bytes = 0;
    // Under ZeRO-2 and -3, the wait in the pass's DP collective for the slowest replica's same
    // pass (step_play.cpp, meet_in_pass_collectives); in duration_ns.
    std::int64_t dp_wait_ns = 0;
    // Copies to and from host memory (offloaded checkpoints, FPDT's chunks): their bytes, and
    // the wait for what the pass's compute (and CP exchange) does not hide.
    HostCopies offload;
    std::int64_t offload_wait_ns = 0;
};

// TP collectives by kind: all-reduce, all-gather, reduce-scatter (layer_costs.h).
using TpByKind = std::array<std::int64_t, 3>;

// The same pass as one CP rank spends it.
struct RankPass {
    std::int64_t attention_ns = 0;  // its attention blocks: per_pair · pairs + a third of the rest
    std::int64_t mlp_ns = 0;        // its other compute: the rest of fixed + per_token · tokens
    std::int64_t recompute_ns = 0;  // recomputation before it (not in the two above)
    TpByKind tp_ns{};               // its TP collectives, every layer, by kind: what is exposed
    TpByKind tp_calls{};            // how many, every layer
    TpByKind recompute_tp_ns{};     // those recomputation re-runs
    TpByKind recompute_tp_calls{};
    // The same calls' whole time, before the GEMMs they run beside hid any of it
    // (--tp-comm-overlap, --tp-backward-overlap): the written ranges carry the share of the
    // calls' bytes that their exposed time moved.
    TpByKind tp_whole_ns{};
    TpByKind recompute_tp_whole_ns{};
    std::int64_t wait_ns = 0;  // for the CP group's slowest rank
    std::int64_t tokens = 0;

    std::int64_t tp_total() const {
        return tp_ns[0] + tp_ns[1] + tp_ns[2] + recompute_tp_ns[0] + recompute_tp_ns[1] +
               recompute_tp_ns[2];
    }
    std::int64_t own_total() const { return attention_ns + mlp_ns + recompute_ns + tp_total(); }
};

// Megatron-LM's --tp-comm-overlap on one rank's pass: its TP collectives cut to what stays
// exposed beside `gemm_ns` of linear work (pass_pricing.cpp).
void hide_behind_gemms(RankPass& rank, std::int64_t gemm_ns, int tp);

// Index of a pass in a replica's [(stage · m + j) · kPassPhases + phase] tables.
std::size_t group_index(int stage, int microbatch, int microbatches, Phase phase);

// Layers stage `stage` holds under `config` (every model chunk of it).
int layers_of(int stage, const SimulationConfig& config);

// Whether the layers' gradients are reduce-scattered over DP × CP after every backward pass
// rather than reduced once a step: ZeRO-2 and -3 keep only a shard of them, as fulcrum-train
// and DeepSpeed do (docs/engine.md, "ZeRO"); not under a split backward (ZB-H1), whose weight
// gradients fulcrum-train reduces at the step's end.
bool scatters_gradients_per_pass(const SimulationConfig& config);

// Whether each forward and backward pass gathers its layers' parameters over DP × CP (ZeRO-3).
bool gathers_parameters_per_pass(const SimulationConfig& config);

// Bytes of a gradient element as reduced over DP × CP (SimulationConfig::grad_reduce_dtype).
std::int64_t gradient_element_bytes(const SimulationConfig& config);

// Bytes an element of the parameters costs the step's DP × CP reduction, priced as an
// all-reduce: a gradient's, or under ZeRO-1 (and ZeRO-2 or -3 where the gradients are reduced
// once a step) the mean of a gradient's and a parameter's — the reduce-scatter of the
// gradients and the all-gather of the updated parameters each move half an all-reduce's
// bytes, as Megatron-LM's distributed optimizer does.
// With --overlap-param-gather the gather moves to the next step's start (parameter_arrivals),
// and the step's end reduce-scatters the gradients only: a gradient an element, priced as
// the reduce-scatter it is (config_costs prices the step's reduction so, as under ZeRO-3).
std::int64_t reduction_element_bytes(const SimulationConfig& config);

// When stage `stage`'s parameters arrive, [chunk] (parallel::ParameterArrival), where the step
// starts with their gather: Megatron-LM's --overlap-param-gather dispatches each bucket's
// all-gather in forward order on one stream from the step's start (a layer a bucket here,
// each at costs.zero_all_gather's price); on the first stage the embeddings come first, on the
// last the final LayerNorm comes after its layers and waits for nothing. Empty otherwise.
std::vector<parallel::ParameterArrival> parameter_arrivals(const SimulationConfig& config,
                                                           const StageCosts& costs, int stage);

// One layer's gradients on one rank of a stage: (12h² + 13h)/tp elements of
// gradient_element_bytes; layer_parameter_bytes: the same of the compute type (what ZeRO
// gathers).
std::int64_t layer_gradient_bytes(const SimulationConfig& config);
std::int64_t layer_parameter_bytes(const SimulationConfig& config);
// The same of reduction_element_bytes: one layer's bucket of the step's DP × CP reduction.
std::int64_t layer_reduction_bytes(const SimulationConfig& config);

// What stage `stage`'s reduction at the step's end moves, of its `stage_bytes`
// (its parameters × reduction_element_bytes): all of them reduced, unless its backward passes
// reduce-scattered the layers' gradients (`per_pass`): then the rest (embeddings, the final
// LayerNorm) reduced, and under ZeRO-2 the layers' updated parameters gathered (ZeRO-3 gathers
// them before each layer instead).
struct StepEndReduction {
    bool per_pass = false;
    std::int64_t reduced_bytes = 0;
    std::int64_t gathered_bytes = 0;
};
StepEndReduction step_end_reduction(const SimulationConfig& config, int stage,
                                    std::int64_t stage_bytes);

// Bytes of one pipeline send of a rank holding `tokens`.
std::int64_t p2p_bytes(const SimulationConfig& config, std::int64_t tokens);

// Sends and receives of a stage's passes in one phase, over its v chunks.
int sends_of(int stage, Phase phase, const SimulationConfig& config);
int receives_of(int stage, Phase phase, const SimulationConfig& config);

// One pass of `planned` on `stage` for the whole CP group; fills the group's cp `ranks`.
GroupPass play_group(const balance::PlannedMicroBatch& planned, int stage, Phase phase,
                     const SimulationConfig& config, const StageCosts& costs, RankPass* ranks);

// The phases a step runs: F and B, and W when the schedule splits the backward pass.
std::vector<Phase> phases_of(const SimulationConfig& config);

// The pipeline's point-to-point latency, one for both directions.
std::int64_t p2p_latency_ns(const SimulationConfig& config, const StageCosts& costs);

// The reduction of `stage`'s gradients (grad_reduction.h), one layer's gradients a bucket.
GradientReductionInput gradient_reduction(const SimulationConfig& config, int stage,
                                          std::int64_t step_start);

}  // namespace fulcrum::sim
