// The simulation's settings and what it returns: the config (a layout, a model, the documents,
// the packer, the cost model it plays by), its checks and run.config, the results of a played
// run, and the costs and planner options a config resolves to (sim_config.cpp). The players
// (run_play.h, hot_switch_play.h), the closed-form estimate (step_estimate.h) and the planner
// all take a SimulationConfig.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/analysis/cost_model.h"
#include "core/balance/cp_shard.h"
#include "core/balance/packing.h"
#include "core/balance/step_planner.h"
#include "core/balance/wlb_tuning.h"
#include "core/parallel/hot_switch_spec.h"
#include "core/parallel/schedule.h"
#include "core/sim/stage_costs.h"
#include "core/util/result.h"

namespace fulcrum::sim {

// The cost model fitted on a captured run, with the shape it was fitted on.
struct Calibration {
    analysis::CostModel model;
    CostOrigin origin;
    // The grid and TP flavour the run trained with: which collectives it can have fitted, and
    // how near its passes are to a simulated grid's (merge_calibrations).
    parallel::GridShape grid;
    bool sequence_parallel = false;
};

// Everything a simulation depends on. The defaults are fulcrum-train's, so a setting left
// alone means what it means to the engine.
struct SimulationConfig {
    ModelShape model;
    // The grid, micro-batches per DP replica and step, the schedule, model chunks per stage
    // under the interleaved schedule, layers per model chunk (fulcrum-train --stage-layers: p
    // counts, or p·v interleaved, stage s's chunk k being model chunk k·p + s; empty: L/p a
    // stage, the first L mod p one more), activation recomputation and sequence parallelism.
    parallel::Layout layout;
    balance::Balancer balancer = balance::Balancer::fixed;
    balance::CpSharding sharding = balance::CpSharding::per_document;
    int steps = 10;
    // > 0: play this many whole epochs instead of `steps` (every document once per epoch,
    // the balancer's delayed documents drained at the end), as fulcrum-train --epochs does.
    int epochs = 0;

    // The element type of activations and gradients (fp32: the CPU engine's); with the
    // layout's knobs, what changes what a pass computes and moves (layer_costs.h,
    // docs/simulate.md "Knobs").
    DType dtype = DType::fp32;
    // The element type gradients are reduced in over DP × CP (and ZeRO scatters them in).
    // nullopt: fp16 under fp16, else fp32 — Megatron-LM accumulates and reduces bf16
    // training's gradients in fp32 unless told --grad-reduce-in-bf16 (megatron/training/
    // arguments.py, since 2021), fp16 training's in fp16; fulcrum-train keeps every gradient
    // in fp32 (engine/backend/cuda/cuda_backend.h).
    std::optional<DType> grad_reduce_dtype;
    // Reduce each layer's gradients over DP × CP once its last backward (or W) pass of the
    // step has written them, while the passes after it run (fulcrum-train and Megatron-LM
    // --overlap-grad-reduce); otherwise all at once after the stage's last pass.
    bool overlap_grad_reduce = false;
    // Megatron-LM's --overlap-param-gather (with the distributed optimizer, ZeRO-1): the
    // all-gather of the parameters the update changed moves to the next step's start, a
    // layer at a time in forward order, each layer's first forward waiting for its own
    // (parameter_arrivals, pass_pricing.h); the step's end then only reduce-scatters the
    // gradients. Otherwise the gather follows the reduce-scatter before the update.
    bool overlap_param_gather = false;
    // Attention over each micro-batch's whole packed sequence, one causal mask across its
    // documents (packed_attention), as Megatron-LM runs packed samples without
    // --reset-attention-mask and HotSPa's Hetu runs its packed sequences (causal flash
    // attention over each); otherwise each document attends to itself alone (fulcrum-train's
    // varlen kernels). The documents, tokens and balancers are the same either way; only what
    // attention computes changes (attend_across_documents, run_play.h).
    bool packed_attention = false;
    // Megatron-LM's scatter/gather of pipeline sends (Narayanan et al., SC'21, §4.1): each TP
    // rank sends 1/tp of the boundary activation and the next stage all-gathers it over
    // NVLink. fulcrum-train sends the whole activation (its rows under sequence parallelism).
    bool pipeline_scatter_gather = false;
    // Megatron-LM's --tp-comm-overlap (Transformer Engine's userbuffers): sequence
    // parallelism's all-gathers and reduce-scatters split into tp chunks, each sent while the
    // GEMM beside it computes another; only the first chunk and what the GEMMs cannot cover
    // stay on the critical path (pass_pricing.cpp). Needs sequence parallelism.
    bool tp_comm_overlap = false;
    // Megatron-LM's asynchronous TP communication in the backward (its
    // async_tensor_model_parallel_allreduce, on by default from 2022; Korthikanti et al. 2022,
    // §6.2): each column-parallel linear (QKV, the MLP's first) starts its input gradient's
    // all-reduce — under sequence parallelism its reduce-scatter, after the all-gather of its
    // input ran beside the input-gradient GEMM — and computes its weight gradient meanwhile.
    // What the GEMM cannot cover stays exposed, and NCCL's kernels hold their SMs while they
    // overlap it (pass_pricing.cpp). --tp-comm-overlap supersedes it.
    bool tp_backward_overlap = false;
    // FPDT's chunked attention (fulcrum-train --attention-chunk): a layer's sequence in chunks
    // of this many tokens; `offload`: each chunk's Q, K and V go to pinned host memory after
    // its projection and every earlier chunk's K and V come back for each later chunk's
    // attention (Yao et al. 2024, §4), over HardwareAssumptions::host_link_gbs, hidden behind
    // the pass's compute where it can be (pass_pricing.cpp).
    int attention_chunk = 0;
    bool offload = false;

    // HotSPa's hot switching (SOSP'24, §4): each step's documents (the global batch `grid`,
    // `microbatches` and the balancer make) are split into the spec's length buckets, each
    // played under its own layout on the same ranks, one after another, with the parameters
    // and gradient accumulators switched between the layouts (core/sim/hot_switch_play.h).
    std::optional<parallel::HotSwitchSpec> hot_switch;
    // The steps played only accumulate gradients: no DP reduction and no optimizer (a
    // hot-switched step's buckets; hot_switch_play.cpp plays each bucket's reduction after it).
    bool accumulate_gradients = false;

    // Documents: a length spec (core/balance/lengths.h) sampled as fulcrum-train samples it
    // (`documents` of them, or every line of a file: spec, clamped to the context), or, when
    // `document_lengths` is not empty, exactly those lengths (document id = index).
    std::string lengths;
    std::int64_t documents = 4096;
    std::vector<std::int64_t> document_lengths;
    std::uint64_t seed = 1;

    int ilp_window = 4;
    double ilp_time_limit_s = 1.0;  // fulcrum-train's --ilp-time-limit default

    // wlb (WLB-LLM §4). S_max: 0 takes wlb_max_tokens_from_memory below.
    std::int64_t wlb_max_tokens = 0;
    double gpu_memory_gib = 80;        // for S_max from the memory model
    std::optional<int> wlb_max_delay;  // nullopt: unbounded
    // nullopt: tuned on the first epoch (balance::tune_wlb_thresholds); empty: no queues.
    std::optional<std::vector<std::int64_t>> wlb_thresholds;
    // What ilp and wlb balance; nullopt: the model's training FLOPs
    // (balance::PackingCost::from_model), fulcrum-train's default.
    std::optional<balance::PackingCost> packing_cost;
    std::string packing_cost_source = "model";
    // What adaptive CP sharding weighs: "ideal", "cpu" or "cuda" (balance::AttentionKernelModel).
    std::string attention_kernel = "cuda";

    // nullopt: the analytic model of `hardware`. Otherwise a fitted or given model, shaped
    // like `cost_origin`; what it lacks is derived (stage_costs.h).
    std::optional<analysis::CostModel> cost_model;
    CostOrigin cost_origin;
    // The calibration runs `cost_model` was merged from for `grid` (merge_calibrations), with
    // their names: a hot-switched run merges them again for each bucket's layout, so that a
    // cp2 run's costs reach a cp2 bucket. Empty: `cost_model` serves every layout.
    std::vector<Calibration> calibrations;
    std::vector<std::string> calibration_names;
    HardwareAssumptions hardware;

    // Ranks that time-share a host's cores (the CPU backend with more ranks than cores;
    // docs/simulate.md, "Ranks that share cores"): the cores of each host, whose
    // `ranks_per_host` ranks (0: the whole world) share them. nullopt: the calibration run's
    // (CostOrigin::host_cores); 0: every rank has a core or device of its own.
    std::optional<int> host_cores;
    int ranks_per_host = 0;
};

// How ranks share cores in `config`: the cores the world's ranks share (the hosts' together)
// and how many times a host's ranks outnumber its cores; {0, 1} when every rank has its own.
struct CoreSharing {
    double cores = 0;
    double oversubscription = 1;
    bool shared() const { return cores > 0; }
};
CoreSharing core_sharing(const SimulationConfig& config);

// S_max for wlb: the most tokens a micro-batch may hold so that the layout's fullest rank
// fits in config.gpu_memory_gib by the memory model (core/parallel/memory_model.h: mixed
// precision, a distributed optimizer, flash attention), in steps of context/8, at least the
// context and at most 8 times it. The context itself when even that does not fit.
std::int64_t wlb_max_tokens_from_memory(const SimulationConfig& config);

// Says what is wrong with the options that name it (--pp, --lengths, ...), as fulcrum-train
// would refuse them, plus what only the simulator needs.
Status validate(const SimulationConfig& config);

// run.config of a simulated run: fulcrum-train's keys (model, dp, tp, pp, cp, schedule,
// balancer, cp_shard, microbatches, steps, seed, ilp_window, lengths, documents, backend,
// data) plus "simulated": true and "cost_model": where the costs came from.
std::string run_config_json(const SimulationConfig& config, const std::string& cost_source);

struct SimulatedStep {
    int step = 0;
    int epoch = 0;
    std::int64_t start_ns = 0;
    std::int64_t duration_ns = 0;  // latest rank's end − the step's start
    // max / mean Σd² over the step's micro-batches (WLB-LLM §3.3), as the planner computes it.
    double imbalance = 1.0;
    // Pipeline idle time against busy time, as `fulcrum analyze` defines it (docs/analyses.md
    // §2): Σ over a replica's stages of (span − busy) / Σ busy, the mean over the step's
    // replicas. (p−1)/m for m equal micro-batches and free hand-overs.
    double bubble_fraction = 0;
    std::int64_t tokens = 0;  // Σd over every micro-batch of every replica
    int microbatches = 0;     // over every replica
};

// A hot-switched run's bucket, over every step played.
struct SimulatedBucket {
    parallel::HotSwitchBucket bucket;
    std::int64_t documents = 0;
    std::int64_t tokens = 0;
    std::int64_t microbatches = 0;  // over every replica
    double ns = 0;                  // the bucket's passes and reduction, under its layout
    double reduction_ns = 0;        // of which its gradients' DP × CP reduction after them
};

// The switches of a hot-switched run from one layout to another, over every step played.
struct SimulatedSwitch {
    parallel::GridShape from, to;
    int count = 0;
    double bytes = 0;               // every rank's sends, summed
    double largest_send_bytes = 0;  // of one rank in one switch
    double ns = 0;
};

struct SimulationResult {
    std::vector<SimulatedStep> steps;
    // Hot switching (empty otherwise): per bucket, per pair of layouts switched between, and
    // the time of the optimizer steps (at home, after the gradients went back).
    std::vector<SimulatedBucket> buckets;
    std::vector<SimulatedSwitch> switches;
    double update_ns = 0;
    double mean_step_ns = 0;
    double mean_imbalance = 1.0;
    double mean_bubble_fraction = 0;
    double tokens_per_second = 0;
    // What was trained (balance::TrainedTotals): with `epochs`, the same for every balancer.
    std::int64_t tokens = 0;
    std::int64_t documents = 0;
    int epochs = 0;               // whole epochs played; 0 for a run by steps
    double mean_delay_steps = 0;  // token-weighted global batches a document waited
    int max_delay_steps = 0;
    // The packing in force: S_max, delay bound and wlb thresholds resolved.
    balance::PackingOptions packing;
    std::optional<balance::WlbTuning> wlb_tuning;
    // Micro-batches sharded per document and per sequence (adaptive's choices).
    std::int64_t per_document_microbatches = 0;
    std::int64_t zigzag_microbatches = 0;
    int ranks = 0;
    std::int64_t events = 0;         // events handed to the writer (0 without one)
    std::int64_t workload_rows = 0;  // workload rows handed to the writer
    std::string cost_source;
    std::vector<std::string> notes;  // costs that were derived rather than taken as given
};

struct SimulationProgress {
    // Called now and then with the fraction done; may be empty.
    std::function<void(double)> progress;
    // Checked between replicas; the simulation returns ErrorCode::cancelled when it is true.
    const std::atomic<bool>* cancel = nullptr;
};

// The documents fulcrum-train would train on with the same options
// (engine/data/step_plan.cpp, load_training_documents): config.documents samples of the spec
// clamped to the context, every line of a length file (which must fit the context), or
// config.document_lengths.
Result<std::vector<std::int64_t>> training_lengths(const SimulationConfig& config);

// The options fulcrum-train's StepPlanner plans `config` with (engine/tools/train.cpp).
balance::PlannerOptions planner_options(const SimulationConfig& config);

// The costs simulate() plays `config` with (resolve_costs with the config's model or the
// analytic one).
StageCosts config_costs(const SimulationConfig& config);

// Whether the step starts with the distributed optimizer's gather of the parameters the last
// update changed (overlap_param_gather, over DP × CP, an updating step).
bool gathers_parameters_at_step_start(const SimulationConfig& config);

// Pieces a layer's GEMMs are computed in: tp under --tp-comm-overlap (Transformer Engine's
// ring exchange cuts each GEMM beside a collective into tp chunks, one a step), else 1.
int gemm_chunks(const SimulationConfig& config);

}  // namespace fulcrum::sim
