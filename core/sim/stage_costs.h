// What every pass and collective costs in the grid being simulated.
//
// A cost model (core/analysis/cost_model.h) is fitted on one run: its passes are per
// (stage, phase) of that run's pipeline, with that run's layers per stage, hidden size and TP
// degree. The simulator plays other grids and shapes too, so each simulated (stage, phase)
// takes its cost from the fitted pass of the same role (docs/simulate.md, "Costs"):
//
//   source stage   same index when the pipeline depth is unchanged; otherwise first ↔ first,
//                  last ↔ last, a middle stage ↔ the middle stage at the same relative depth
//                  (or the first stage when the fitted run had no middle stage, since the
//                  embedding costs little and the LM head a lot); a stage the fit lacks is
//                  replaced by the nearest fitted one.
//   scaling        per-token and per-pair terms × (layers here / layers there) × (tp there /
//                  tp here); per-token also × (h here / h there)², per-pair × (h here / h there),
//                  following the FLOPs of docs/sources.md, "FLOPs" (24·T·h² + 4h·pairs a layer).
//                  The fixed term is per-pass overhead and is kept as fitted.
//
// Anything the model does not give (no cost model at all, a collective the fitted run never
// ran, such as CP exchanges when it had cp = 1) comes from analytic_cost_model, and a note
// says so.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/analysis/cost_model.h"
#include "core/parallel/grid.h"
#include "core/parallel/layout.h"
#include "core/parallel/schedule.h"
#include "core/sim/layer_costs.h"
#include "core/trace/annotations.h"

namespace fulcrum::sim {

// The model's shape (core/parallel/layout.h), as the costs are priced for it.
using parallel::ModelShape;

// What the analytic cost model assumes about the hardware. The defaults stand for H100 SXM
// nodes of 8 GPUs: 400 TFLOP/s sustained is ~40% of the 989 TFLOP/s dense bf16 peak
// (well-tuned large runs reach 40–55% MFU: docs/sources.md, "FLOPs"); NVLink 4 moves ~450 GB/s per
// direction, of which collectives reach ~300; a 400 Gb/s InfiniBand NIC per GPU is 50 GB/s,
// ~40 achieved; HBM3 3.35 TB/s, ~3 achieved. GB/s is bytes per ns.
struct GemmEfficiencyPoint {
    double gflops = 0;      // FLOPs of one GEMM, in 10⁹
    double efficiency = 1;  // achieved / peak
};

struct HardwareAssumptions {
    std::string preset;  // the --hardware preset these came from, or "" (hardware.h)
    double tflops = 400;
    double nvlink_gbs = 300;
    double network_gbs = 40;
    double hbm_gbs = 3000;
    double collective_latency_us = 10;  // per collective call
    double p2p_latency_us = 5;          // pipeline send → receive
    double layer_overhead_us = 10;      // launches and syncs per layer and forward; 2× backward
    int gpus_per_node = 8;
    // A GPU's link to pinned host memory (PCIe Gen4 x16 ~24 GB/s a direction, Gen5 ~48), for
    // offloaded activations.
    double host_link_gbs = 24;
    // Streaming multiprocessors a GPU (A100 108, H100 SXM 132). An NCCL kernel holds one a
    // channel while it runs, so the passes it overlaps run on the rest (docs/simulate.md,
    // "The end of the step"). 0: not described, and overlapped communication takes nothing.
    int sms = 0;

    // A described system (hardware.h's presets): with a table, `tflops` is the dense 16-bit
    // peak and every GEMM runs at peak × efficiency(its FLOPs), interpolated in log FLOPs and
    // clamped at the ends; the attention core at peak × the efficiency of the run's attention
    // kernel (below); the elementwise work (LayerNorm, GeLU, dropout, softmax, residuals)
    // streams its activations through HBM at hbm_gbs. Empty: every FLOP at the flat sustained
    // `tflops`, as above.
    std::vector<GemmEfficiencyPoint> gemm_efficiency;
    // The device's attention kernels: a fused one (FlashAttention: the causal pairs only, no
    // scores in HBM) at peak × attention_efficiency; Megatron-LM's unfused kernels of 2022
    // (every score of the s × s square with the upper half masked, scores, softmax and dropout
    // mask through HBM) at peak × unfused_attention_efficiency.
    double attention_efficiency = 1;
    double unfused_attention_efficiency = 1;
    // The fused kernel measured by size (a preset's own measurement, hardware.cpp): its
    // forward's and its backward's share of peak by the forward's FLOPs of one call (a
    // micro-batch's attention on one rank), interpolated as the GEMM table. Empty:
    // attention_efficiency for both. The fused backward is 2.5 forwards of FLOPs (it recomputes
    // the scores: five matrix products against two, FlashAttention-2, Dao 2023, §3.1); the
    // unfused one twice the forward (it kept them).
    std::vector<GemmEfficiencyPoint> attention_forward_efficiency;
    std::vector<GemmEfficiencyPoint> attention_backward_efficiency;
    // Which one the run uses: its software's choice (`--attention-backend flash|unfused`,
    // Megatron-LM's flag), not the device's.
    bool unfused_attention = false;
    double fp32_tflops = 0;  // peak of fp32 GEMMs; 0: `tflops`
    // A described network (hardware.h's presets): its collectives priced as NCCL prices them
    // (core/parallel/nccl_model.h) for each group placed on the nodes by the layout's rank
    // order (core/parallel/placement.h), pipeline sends at NVLink's or their NIC share's
    // bandwidth; `gpus_per_node` above is its node. None: rings at nvlink_gbs and network_gbs
    // a call's latency apart.
    std::optional<parallel::ClusterNetwork> network;
};

// The efficiency at `flops` FLOPs in a table of points, interpolated in log FLOPs and clamped
// at its ends; `otherwise` when the table is empty.
double table_efficiency(const std::vector<GemmEfficiencyPoint>& table, double flops,
                        double otherwise);
// The efficiency of a GEMM of `flops` FLOPs in the table; 1 when it is empty.
double gemm_efficiency(const HardwareAssumptions& hardware, double flops);

// The shape of the run a cost model was fitted on. 0: the same as the simulated one (a
// model given as a file, whose origin is not recorded).
struct CostOrigin {
    int layers = 0, pp = 0, hidden = 0, tp = 0;
    // How the fitted run trained (its run.config): its backward passes include its
    // recomputation, and a split-backward run's W passes are fitted apart.
    parallel::Recompute recompute = parallel::Recompute::none;
    int virtual_stages = 1;
    // The run's measured rate on weight-gradient GEMMs (RunConfig::gemm_gflops); 0: unknown.
    double gemm_gflops = 0;
    // Its rate on them with cold caches (RunConfig::gemm_gflops_cold): a deferred W's; 0:
    // unknown, W at gemm_gflops.
    double gemm_gflops_cold = 0;
    // The cores its host's ranks shared (RunConfig::host_cores; the fit took the sharing out
    // of its passes, cost_model.h); 0: a core or device a rank, or unknown.
    int host_cores = 0;
};

// Names of the collectives the simulator plays: the engine's (core/trace/annotations.h), so a
// model fitted on a captured run is looked up by them.
inline constexpr std::string_view kCpAllGather = range_name::kCpAllGather;
inline constexpr std::string_view kCpReduceScatter = range_name::kCpReduceScatter;
inline constexpr std::string_view kTpAllReduce = range_name::kTpAllReduce;
inline constexpr std::string_view kTpAllGather = range_name::kTpAllGather;
inline constexpr std::string_view kTpReduceScatter = range_name::kTpReduceScatter;
inline constexpr std::string_view kRecvActivations = range_name::kRecvActivations;
inline constexpr std::string_view kRecvGradients = range_name::kRecvGradients;
inline constexpr std::string_view kDpAllReduce = range_name::kDpAllReduce;
inline constexpr std::string_view kEmbeddingAllReduce = range_name::kEmbeddingAllReduce;
inline constexpr std::string_view kCpAllToAll = range_name::kCpAllToAll;
inline constexpr std::string_view kZeroAllGather = range_name::kZeroAllGather;
inline constexpr std::string_view kZeroReduceScatter = range_name::kZeroReduceScatter;

// Parameters one rank of `stage` holds (so the bytes / 4 its DP all-reduce moves): per layer
// 12h² + 13h split over TP (QKV, projection and the 4h MLP with their biases, two LayerNorms);
// the first stage adds the token and position embeddings V·h + context·h, the last the final
// LayerNorm, 2h. The stage's layers: its model chunks' `stage_layers` (one count per model
// chunk, fulcrum-train --stage-layers), else the even split (parallel::stage_layer_total).
std::int64_t stage_parameters(const ModelShape& model, const parallel::GridShape& grid, int stage,
                              const std::vector<int>& stage_layers = {}, int virtual_stages = 1);

// Costs from FLOPs and bandwidths (docs/simulate.md, "The analytic model"): per layer and
// forward 24·T·h²/tp + 4h·pairs/tp FLOPs, the last stage adds the LM head 2·T·h·V (and, on a
// described system, the vocabulary-parallel cross-entropy's HBM traffic), backward twice the
// forward (the cross-entropy's own backward); ring collectives move 2(n−1)/n (all-reduce) or
// (n−1)/n (all-gather, reduce-scatter) of their bytes over NVLink when the group fits in one
// node, else over the network, the tied embedding's all-reduce between the first and last
// stage included; the optimizer is the gradient norm's all-reduce and 36–50 bytes a
// parameter through HBM by the dtype (docs/simulate.md). `gemm_chunks`: a layer's GEMMs
// computed in that many pieces, each at its own size's efficiency (--tp-comm-overlap's tp).
analysis::CostModel analytic_cost_model(const ModelShape& model, const parallel::Layout& layout,
                                        const HardwareAssumptions& hardware,
                                        DType dtype = DType::fp32, int gemm_chunks = 1);

// A short description of the analytic model's assumptions, for notes and run.config.
std::string describe(const HardwareAssumptions& hardware);

// Every cost the simulation of one grid needs, resolved once.
struct StageCosts {
    // [stage][Phase], for the stage's whole share of the model (all its chunks); backward
    // includes recomputation, and is only B when the schedule splits off W (weight).
    std::vector<std::array<analysis::PassCost, kPassPhases>> passes;
    // [stage]: what recomputation adds to each backward (and W) pass, included above; the
    // simulator shows it as the `recompute` range.
    std::vector<analysis::PassCost> recompute;
    analysis::CollectiveCost cp_all_gather;
    analysis::CollectiveCost cp_reduce_scatter;
    analysis::CollectiveCost tp_all_reduce;
    analysis::CollectiveCost tp_all_gather;
    analysis::CollectiveCost tp_reduce_scatter;
    analysis::CollectiveCost recv_activations;
    analysis::CollectiveCost recv_gradients;
    analysis::CollectiveCost dp_all_reduce;
    // The tied embedding's gradient, summed between the first and the last stage (pp > 1).
    analysis::CollectiveCost embedding_all_reduce;
    // Ulysses' all-to-alls over CP; ZeRO-3's layer gathers and gradient reduce-scatter over
    // DP × CP (bytes: the gathered or reduced buffer, as nccl-tests' size).
    analysis::CollectiveCost cp_all_to_all;
    analysis::CollectiveCost zero_all_gather;
    analysis::CollectiveCost zero_reduce_scatter;
    // The update, from the gradient norm's all-reduce over every stage (Megatron-LM and
    // fulcrum-train clip by the global norm; fulcrum-train's `optimizer` range holds it) to the
    // last parameter written.
    double optimizer_ns = 0;
    std::string source;              // "fitted on RUN", "given", "analytic (...)"
    std::vector<std::string> notes;  // every cost that was derived rather than taken as is
};

// When the step's update starts (docs/simulate.md, "The step's end"), from each stage's end of
// its DP reduction (`reduce_end`, by stage): the tied embedding's gradient is all-reduced
// between the first and the last stage once both are reduced (`embedding_bytes`; nothing on
// one stage); the update, whose gradient norm is all-reduced over every stage, starts when all
// are ready.
struct UpdateStart {
    std::int64_t embedding_start = 0, embedding_end = 0;  // equal: none
    std::int64_t start = 0;                               // the optimizer's
};
UpdateStart update_start(const std::vector<std::int64_t>& reduce_end, const StageCosts& costs,
                         std::int64_t embedding_bytes);

// The bytes of the tied embedding's gradient one rank all-reduces: V·h/tp elements.
std::int64_t embedding_gradient_bytes(const ModelShape& model, const parallel::GridShape& grid,
                                      std::int64_t element_bytes);

// `model` null: everything analytic.
StageCosts resolve_costs(const analysis::CostModel* model, const CostOrigin& origin,
                         const ModelShape& shape, const parallel::Layout& layout,
                         const HardwareAssumptions& hardware, DType dtype = DType::fp32,
                         int gemm_chunks = 1);

// t = fixed + per_token·T + per_pair·P, never negative, in whole ns.
std::int64_t predict_pass_ns(const analysis::PassCost& cost, std::int64_t tokens,
                             std::int64_t pairs);
// t = latency + per_byte·B, never negative, in whole ns.
std::int64_t predict_collective_ns(const analysis::CollectiveCost& cost, std::int64_t bytes);
// The same, and 0 where nothing is moved (no collective is called, so no latency either).
std::int64_t predict_moved_ns(const analysis::CollectiveCost& cost, std::int64_t bytes);
// What a written range of calls that moved `bytes` in `whole_ns` carries when only
// `exposed_ns` of that time shows (the rest ran beside compute): the bytes that time moved, so
// that bytes over time is the calls' bandwidth (docs/simulate.md, "Output").
std::int64_t exposed_bytes(std::int64_t bytes, std::int64_t exposed_ns, std::int64_t whole_ns);

}  // namespace fulcrum::sim
