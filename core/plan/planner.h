// `fulcrum plan`: which layout to run. Searches every DP × TP × PP × CP factorisation of the
// world size (TP within a node), with the pipeline schedule, activation recomputation,
// sequence parallelism, balancer, CP sharding and the layer split across stages, drops what
// does not fit in GPU memory (core/parallel/memory_model.h) with the reason, and ranks the rest by
// tokens/s as the simulator (core/sim/simulator.h) plays them. docs/plan.md, "Searching
// layouts", says what is exhaustive, what is pruned and why the pruning is safe.
//
// The search, in short:
//   1. enumerate the space; the memory model (closed form) drops every candidate that does not
//      fit, and among recomputation levels that fit only the least is kept (more
//      recomputation only adds work to the same passes);
//   2. estimate every remaining layout's step from the simulator's own pass costs for one
//      mean micro-batch and the schedule's bubble (sim::estimate_step), data-independent;
//   3. play the best layouts' steps in full with the simulator, for every balancer and CP
//      sharding, and rank by simulated tokens/s.
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
#include "core/parallel/grid.h"
#include "core/parallel/layout.h"
#include "core/parallel/memory_model.h"
#include "core/parallel/schedule.h"
#include "core/sim/simulator.h"
#include "core/sim/stage_costs.h"
#include "core/util/result.h"

namespace fulcrum::plan {

// What may be searched; each list in the order it is tried. Empty lists are refused.
struct PlanSpace {
    std::vector<parallel::PipelineSchedule> schedules = {
        parallel::PipelineSchedule::one_f_one_b, parallel::PipelineSchedule::interleaved,
        parallel::PipelineSchedule::zero_bubble_h1, parallel::PipelineSchedule::gpipe};
    std::vector<int> virtual_stages = {2, 4};  // tried under the interleaved schedule
    std::vector<balance::Balancer> balancers = {balance::Balancer::fixed, balance::Balancer::wlb};
    // Tried when cp > 1; with cp = 1 the sharding changes nothing and per-doc is used.
    std::vector<balance::CpSharding> shardings = {balance::CpSharding::per_document,
                                                  balance::CpSharding::zigzag,
                                                  balance::CpSharding::adaptive};
    std::vector<parallel::Recompute> recomputes = {
        parallel::Recompute::none, parallel::Recompute::selective, parallel::Recompute::full};
    bool sequence_parallel = true;  // try it (when tp > 1) besides plain TP
    // Where activations do not fit without recomputation: try chunked attention with Q, K and
    // V offloaded to host memory (fulcrum-train --attention-chunk --offload on) before
    // recomputing. `attention_chunk` the chunk it is tried with; 0: min(65536, context / cp).
    // Where even full recomputation does not fit, the same switch tries its checkpoints
    // offloaded to host memory, then FPDT's whole design: those, the chunks' Q, K and V
    // offloaded and the loss a chunk at a time (Yao et al. 2024).
    bool offload = true;
    int attention_chunk = 0;
    // ZeRO stages over DP × CP (parallel::Layout::zero_stage), the least that fits kept: 1 is
    // Megatron-LM's distributed optimizer, the default.
    std::vector<int> zero_stages = {1};
    // How CP splits attention, each tried where cp > 1 (Ulysses where TP × CP divides the
    // heads).
    std::vector<parallel::ContextParallelism> cp_impls = {parallel::ContextParallelism::all_gather};
    bool exact_layer_split = true;  // false: L/p layers a stage, as fulcrum-train splits by default
    int max_tp = 0;                 // 0: GPUs per node
    int max_pp = 0;                 // 0: layers
    int max_cp = 0;                 // 0: no limit beyond the context
    // How the framework may number the ranks (core/parallel/placement.h), its default first:
    // each layout is played under every order that places its groups differently from the
    // first's. Megatron-LM runs either of these two: tp-cp-dp-pp by default, tp-cp-pp-dp with
    // --use-tp-pp-dp-mapping (megatron/training/initialize.py), fulcrum-train's own.
    std::vector<parallel::RankOrder> rank_orders = {parallel::kMegatronOrder,
                                                    parallel::kFulcrumOrder};
};

struct PlanRequest {
    sim::ModelShape model;
    std::vector<int> world_sizes;  // GPUs; each is searched
    int gpus_per_node = 8;
    double gpu_memory_gib = 80;
    // Cores a node's ranks (gpus_per_node of them) share, the CPU backend's way
    // (sim::SimulationConfig::host_cores); nullopt: the calibration runs'; 0: a device a rank.
    std::optional<int> host_cores;
    // The memory model leaves out the logits, communication buffers and the allocator's
    // fragmentation (docs/plan.md): a layout must fit in this share of the GPU.
    double usable_memory_fraction = 0.9;
    // A node's host memory, which offloaded activations fill (every GPU of the node at its
    // stage's peak): 2 TB, DGX A100 80 GB's and DGX H100's.
    double host_memory_gib = 2048;
    // Sequences of `model.context` tokens per step over every DP replica: micro-batches per
    // replica = global_batch / dp. The batch is a training choice, not a layout's: tokens/s is
    // only comparable at the same batch.
    int global_batch = 1024;

    // Documents, as `fulcrum simulate` takes them: a length spec sampled with `seed`
    // (`documents` of them; 0: enough for two steps), or exactly `document_lengths`.
    std::string lengths;
    std::int64_t documents = 0;
    std::vector<std::int64_t> document_lengths;
    std::uint64_t seed = 1;

    // Costs: the analytic model of `hardware`, the fits of calibration runs (`--calibrate RUN`,
    // several: each candidate's costs merged from them by sim::merge_calibrations), or a
    // given model (`--cost-model FILE`, which overrides the fits as in fulcrum simulate).
    // What none of them has comes from the analytic model, and the candidate's cost_notes
    // say so.
    sim::HardwareAssumptions hardware;
    std::vector<sim::Calibration> calibrations;
    std::vector<std::string> calibration_runs;  // one RUN per calibration, as given
    std::optional<analysis::CostModel> cost_model;
    std::string cost_model_file;  // FILE of --cost-model, repeated in the printed commands
    // What adaptive CP sharding weighs (sim::SimulationConfig::attention_kernel): "cuda" for
    // the analytic model; with --calibrate, the run's own kernel (its backend's).
    std::string attention_kernel = "cuda";
    sim::DType dtype = sim::DType::bf16;
    std::optional<sim::DType> grad_reduce_dtype;  // nullopt: the dtype's rule (sim_config.h)
    // The attention kernel is `hardware.unfused_attention` (the run's choice, flash by
    // default): the memory model keeps no score matrix under flash, and the simulator prices it.
    parallel::Precision precision = parallel::Precision::megatron_mixed();
    bool overlap_grad_reduce = true;
    // Megatron-LM's asynchronous backward TP communication (sim::SimulationConfig::
    // tp_backward_overlap) for every candidate.
    bool tp_backward_overlap = false;
    // Megatron-LM's --overlap-param-gather for the candidates with the distributed optimizer
    // (sim::SimulationConfig::overlap_param_gather; fulcrum-train gathers before the update).
    bool overlap_param_gather = false;
    // One causal mask across each micro-batch's documents (sim::SimulationConfig::
    // packed_attention; fulcrum-train masks each document).
    bool packed_attention = false;
    // Peak dense TFLOP/s of one GPU for MFU; 0: the hardware preset's (989 for h100).
    double peak_tflops = 0;

    PlanSpace space;
    int top_k = 10;
    // Layouts (by estimate) of each world size whose steps are played in full for every
    // balancer and sharding; 0: max(4 · top_k, 32).
    int refine_layouts = 0;
    int steps = 1;  // steps played per simulated candidate
};

// Memory of the fullest rank (GiB, 2³⁰ bytes).
struct MemoryBreakdown {
    int stage = 0;  // the pipeline stage of that rank
    double weights_gib = 0;
    double gradients_gib = 0;
    double optimizer_gib = 0;
    double activations_gib = 0;
    double total_gib = 0;
};

// Where a candidate ended.
enum class CandidateStatus {
    ranked,      // simulated in full; in PlanResult::ranked
    estimated,   // fits, estimated, not among the layouts played in full
    dominated,   // fits, but the same layout with less recomputation fits too
    infeasible,  // does not fit in memory, or is not a valid layout; `reason` says why
};
const char* candidate_status_name(CandidateStatus status);

// Documents to sample when the request leaves it to the planner (documents 0): enough for the
// steps played and one more global batch, at least 4096 (fulcrum-train's default).
std::int64_t resolved_documents(const PlanRequest& request);

struct Candidate {
    // The grid, micro-batches (per DP replica and step), schedule, virtual stages, layers per
    // pipeline stage (empty: L/p each), recomputation and sequence parallelism.
    parallel::Layout layout = [] {
        parallel::Layout one_microbatch;
        one_microbatch.microbatches = 1;
        return one_microbatch;
    }();
    balance::Balancer balancer = balance::Balancer::fixed;
    balance::CpSharding sharding = balance::CpSharding::per_document;
    // FPDT-style attention chunks with Q/K/V offload (fulcrum-train --attention-chunk,
    // --offload on): tried where activations do not fit without recomputation, and with full
    // recomputation's checkpoints offloaded as FPDT's own design. The memory model prices
    // them, the simulator plays the copies over the host link (docs/plan.md).
    int attention_chunk = 0;
    bool offload = false;
    // wlb's queue thresholds: tuned once on the first wlb candidate played and given to the
    // others, so that every wlb candidate (and its command line) packs alike.
    std::optional<std::vector<std::int64_t>> wlb_thresholds;

    CandidateStatus status = CandidateStatus::infeasible;
    std::string reason;  // why infeasible or dominated; empty otherwise
    // A short key for counting infeasible candidates by cause ("activations", "model state",
    // "tp > heads", ...).
    std::string reason_kind;

    double estimated_step_ns = 0;  // the closed-form estimate (0 when not estimated)
    // Simulated (status ranked), else the estimate's figures where it has them.
    double step_ns = 0;
    double tokens_per_second = 0;
    double mfu = 0;  // model FLOPs (6·N·T + attention) / (GPUs · peak · step time)
    double bubble_fraction = 0;
    double imbalance = 1;
    MemoryBreakdown memory;

    // Other CP shardings of this same layout that played to exactly its step time: folded
    // into this candidate so that the top list shows the layout once (`ranked` holds it alone).
    std::vector<balance::CpSharding> equal_shardings;

    // mpirun -np W fulcrum-train ... and fulcrum simulate ... of the same candidate, written
    // outside core by app/launch/command_line.h (write_commands); empty from plan() alone.
    std::string train_command;
    std::string simulate_command;
    // Costs the simulator derived rather than took from the cost model (sim::SimulationResult
    // notes): with --calibrate, what no calibration run ran.
    std::vector<std::string> cost_notes;
    // Where its costs came from: with several calibration runs, which run gave what.
    std::string cost_source;
};

struct PlanCounts {
    std::int64_t enumerated = 0;
    std::int64_t infeasible = 0;
    std::int64_t dominated = 0;
    std::int64_t estimated = 0;  // fits and not dominated
    std::int64_t simulated = 0;  // played in full
    // Infeasible candidates by reason_kind, most frequent first.
    std::vector<std::pair<std::string, std::int64_t>> infeasible_by_reason;
};

struct PlanResult {
    // Every candidate evaluated, per balancer and sharding only where those were played.
    std::vector<Candidate> candidates;
    // Indices into `candidates` of the simulated ones, best tokens/s first; the first top_k
    // are the answer.
    std::vector<std::size_t> ranked;
    PlanCounts counts;
    double elapsed_s = 0;
    std::string cost_source;
    // The top candidates' cost_notes, once each: what the ranking took from the analytic
    // model next to a fitted one.
    std::vector<std::string> notes;
};

struct PlanProgress {
    std::function<void(double)> progress;       // fraction done, now and then; may be empty
    const std::atomic<bool>* cancel = nullptr;  // checked often; returns ErrorCode::cancelled
};

// Says what is wrong with a request, naming the option (--world, --gpus-per-node, ...).
Status validate(const PlanRequest& request);

Result<PlanResult> plan(const PlanRequest& request, const PlanProgress& progress = {});

// FPDT's question (Yao et al. 2024, its table of strategies): how long a context fits, and how
// fast. Plans the request at contexts of `request.model.context` · 2^k up to `max_context`,
// each step's documents whole sequences of the context (`global_batch` of them), and stops
// after the first context no layout fits. A context's `best` is its plan's first choice.
struct ContextPlan {
    int context = 0;
    std::optional<Candidate> best;
    PlanCounts counts;
};
Result<std::vector<ContextPlan>> plan_contexts(const PlanRequest& request, int max_context,
                                               const PlanProgress& progress = {});

// The memory model's shape of `candidate` (its sequence the request's context), and the bytes
// a layout may fill: what the search checks candidates against (the hot-switch search too).
parallel::MemoryShape memory_shape(const PlanRequest& request, const Candidate& candidate);
double usable_bytes(const PlanRequest& request);

// The simulation settings that play `candidate` (for `fulcrum simulate -o` of the top k).
sim::SimulationConfig simulation_config(const PlanRequest& request, const Candidate& candidate);

// Places `candidate`'s layers (the exact split when the request asks for it, else L/p) so
// that every stage fits, and fills its memory figures; false, with the reason, when no
// placement fits. `equal` is the layout's estimate with L/p layers a stage, whose stage times
// price a layer and the LM head (layer_placement.cpp).
bool place_layers(const PlanRequest& request, Candidate& candidate, const sim::StepEstimate& equal);

// Layers per stage minimising the slowest stage's time, each stage within its memory budget:
// dynamic programming over prefixes of the layers (exact). `layer_ns` the time of one layer,
// `first_ns` and `last_ns` what stage 0 (embedding) and the last stage (LM head) add;
// `fits(stage, layers)` whether `layers` layers fit on that stage. Empty when no split fits.
std::vector<int> split_layers(int layers, int stages, double layer_ns, double first_ns,
                              double last_ns, const std::function<bool(int, int)>& fits);

// {"format": "fulcrum plan", "version": 1, "request", "counts", "ranked": [...], "infeasible"}:
// docs/plan.md gives the keys. `top` ranked candidates (all when 0).
std::string plan_json(const PlanRequest& request, const PlanResult& result, int top);

// A plan read back from plan_json (`fulcrum report RUN --plan PLAN.json`): the request's model,
// cluster, data and cost source, the counts, the ranked candidates it holds (request.top_k of
// them) and, per infeasible reason, one example (status infeasible, no memory figure: what the
// JSON does not keep, the other candidates, is not drawn).
struct PlanFile {
    PlanRequest request;
    PlanResult result;
};
Result<PlanFile> parse_plan_json(std::string_view json);

}  // namespace fulcrum::plan
