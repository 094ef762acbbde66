// The run configuration: how a run trained, as the `fulcrum.run` mark carries it into
// run.config (docs/annotations.md). fulcrum-train and the simulator write it with
// run_config_json; every reader (the analyses, the report, calibration, the GUI's re-run)
// reads it with parse_run_config. One struct, one writer, one reader: a key added here is
// written and read everywhere.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/parallel/layout.h"
#include "core/trace/model.h"

namespace fulcrum {

// Fields a foreign run does not give stay at their defaults, and the grid falls back to the
// ranks' coordinates. Strings are "" when not said.
struct RunConfig {
    // The model's shape; 0 where unknown (has_model() says whether any is known).
    parallel::ModelShape model{.layers = 0, .hidden = 0, .heads = 0, .context = 0, .vocab = 0};
    // The layout: grid, micro-batches per DP replica and step (0 when unknown), schedule,
    // model chunks per stage, layers per model chunk (fulcrum-train --stage-layers: one per
    // stage, p·v interleaved, model chunk k·pp + s being stage s's chunk k; empty: as equal as
    // they go), recomputation and sequence parallelism. A schedule or recomputation the run
    // does not say (or names in words no Fulcrum tool reads) keeps its default and is unsaid.
    parallel::Layout layout{.microbatches = 0};
    // False for a foreign run that says neither its degrees nor its ranks' coordinates (an
    // imported trace): the grid's degrees are then placeholders, not a 1×1×1×1 grid.
    bool grid_known = true;
    // The run.config keys the record does not say: those parse_run_config found missing or
    // unreadable, and those a writer leaves out (run_config_json writes none of them).
    std::vector<std::string> unsaid;
    bool overlap_grad_reduce = false;
    bool overlap_param_gather = false;  // the distributed optimizer's, at the next step's start
    bool packed_attention = false;      // one causal mask across each micro-batch's documents
    std::string dtype;  // "fp32", "bf16", "fp16"; "" in runs older than the key (fp32)
    // The type gradients were reduced in over DP × CP; "": the dtype's rule (fp16 under fp16,
    // else fp32: sim::SimulationConfig::grad_reduce_dtype).
    std::string grad_reduce_dtype;
    std::string balancer;  // "fixed", "ilp", "wlb"
    std::string cp_shard;  // "contiguous", "zigzag", "per-doc", "adaptive"
    int steps = 0;         // 0 when unknown, or with epochs
    int epochs = 0;        // > 0: the run trained this many whole epochs
    std::uint64_t seed = 1;
    int ilp_window = 1;
    // How wlb packed; 0 and −1 when not said.
    std::int64_t wlb_max_tokens = 0;  // S_max
    int wlb_max_delay = -1;           // the delay bound in steps; −1: unbounded
    std::string wlb_thresholds;       // "L1,L2,..." or "none"
    std::string packing_cost;         // what ilp and wlb balanced: "model", "fitted", a file
    std::string attention_kernel;     // the kernel model adaptive CP sharding weighed
    int attention_chunk = 0;          // FPDT chunk in tokens; 0: whole sequences
    bool offload = false;             // chunks' Q, K, V offloaded to pinned host memory
    // Megatron-LM's settings a simulated run played (sim::SimulationConfig): SP's collectives
    // chunked under the GEMMs, and the attention kernel ("flash", "unfused"; "" unsaid).
    bool tp_comm_overlap = false;
    std::string attention_backend;
    // The documents: what they were (fulcrum-train's description), the length spec of
    // synthetic ones ("" for text) and how many.
    std::string data;
    std::string lengths;
    std::int64_t documents = 0;
    std::string backend;  // "cpu", "cuda", "simulated"
    // The backend's rate on the weight-gradient GEMMs of one layer, GFLOP/s, measured by
    // fulcrum-train before training (engine/tools/train.cpp); 0 when not measured. A 1F1B
    // calibration run's backward cannot say which share of it is W; this says (core/sim/
    // stage_costs.cpp, weight_gradient_per_token).
    double gemm_gflops = 0;
    // The same GEMMs with their operands out of the caches first, as ZB-H1's W finds them: it
    // runs long after B read the layer's activations (other passes in between). 0: not
    // measured (older runs), then W is taken at gemm_gflops.
    double gemm_gflops_cold = 0;
    // CPU backend: the cores the ranks of one host could run on together (the union of their
    // affinity masks). Where a host's ranks outnumber them, ranks time-share cores and every
    // pass is stretched by the others computing beside it (docs/simulate.md, "Ranks that share
    // cores"). 0: unknown, or each rank had a device of its own.
    int host_cores = 0;
    std::string comm;  // how ranks exchanged data: "mpi", "nccl", "staged"
    // A simulated run, and where its costs came from ("analytic", a fitted run, ...).
    bool simulated = false;
    std::string cost_model;
    // The hot-switch spec (docs/plan.md, "The hot-switch spec") when each length bucket of a
    // step ran under its own layout; "" for a static layout.
    std::string hot_switch;

    bool has_model() const {
        return model.layers > 0 || model.hidden > 0 || model.heads > 0 || model.context > 0 ||
               model.vocab > 0;
    }
    // Whether the record says `key` (a run.config key: "schedule", "recompute", ...).
    bool says(std::string_view key) const;
};

// Reads run.config; a field missing or of the wrong type keeps its default. Without degrees,
// the grid is what `ranks`' coordinates span (grid_known false when they say nothing).
RunConfig parse_run_config(std::string_view config_json, const std::vector<RankInfo>& ranks);

// The JSON of `config` (docs/simulate.md lists the keys): every field, strings and lists only
// when not empty, the model as an object {layers, hidden, heads, context, vocab}.
std::string run_config_json(const RunConfig& config);

// The schedule's name ("1f1b", ...), "" when the run does not say it.
std::string schedule_text(const RunConfig& config);

// "dp 2 × tp 1 × pp 2 × cp 2", or what is known when the grid is not.
std::string describe_grid(const RunConfig& config);

}  // namespace fulcrum
