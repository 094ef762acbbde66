// Taking a simulation's settings and costs from a captured run. Kept apart from the
// simulator itself, which needs neither the pass finder nor the fit.

#include "core/sim/calibration.h"

#include <algorithm>
#include <array>
#include <compare>
#include <string>

#include "core/analysis/run_analysis.h"
#include "core/analysis/run_trace.h"
#include "core/parallel/memory_model.h"

namespace fulcrum::sim {

Result<RunSettings> config_from_run(const analysis::RunTrace& trace) {
    const RunConfig& run = trace.config;
    const std::string name = trace.run.name.empty() ? "the run" : "'" + trace.run.name + "'";
    RunSettings settings;
    SimulationConfig& config = settings.config;
    if (!run.grid_known) {
        // An imported trace without coordinates: its placeholder 1×1×1×1 is no grid to play.
        return Error{ErrorCode::invalid_input,
                     name +
                         " does not say its grid (no dp, tp, pp, cp degrees or rank coordinates, "
                         "as in a trace imported without them); a cost model fitted on it would "
                         "not know which stage each pass ran on. Calibrate on a Fulcrum capture, "
                         "or simulate without --calibrate"};
    }
    config.layout.grid = run.layout.grid;
    // How its ranks were numbered: as it says, else fulcrum-train's when it ran on the engine
    // (runs older than the key), else the default (Megatron-LM's).
    if (run.says("rank_order")) {
        config.layout.rank_order = run.layout.rank_order;
    } else if (run.backend == "cpu" || run.backend == "cuda") {
        config.layout.rank_order = parallel::kFulcrumOrder;
    }

    // A schedule the run does not say, or names in words no Fulcrum tool reads (run_config.h).
    if (run.says("schedule")) {
        config.layout.schedule = run.layout.schedule;
    } else {
        settings.unknown.push_back("schedule");
    }
    if (run.balancer.empty()) {
        settings.unknown.push_back("balancer");
    } else if (auto balancer = balance::parse_balancer(run.balancer)) {
        config.balancer = *balancer;
    } else {
        return Error{ErrorCode::invalid_input, name + " used the balancer '" + run.balancer +
                                                   "', which the simulator does not know "
                                                   "(fixed, ilp, wlb); choose one"};
    }
    if (run.cp_shard.empty()) {
        settings.unknown.push_back("cp_shard");
    } else if (auto sharding = balance::parse_cp_sharding(run.cp_shard)) {
        config.sharding = *sharding;
    } else {
        return Error{ErrorCode::invalid_input,
                     name + " used the CP sharding '" + run.cp_shard +
                         "', which the simulator does not know; choose one"};
    }

    // The shape, micro-batches and lengths have no sensible default: left unset, so that
    // validate() asks for them unless the command line gives them.
    const auto take = [&](int value, int& field, const char* option, bool required) {
        if (value > 0) {
            field = value;
        } else {
            settings.unknown.push_back(option);
            if (required) {
                field = 0;
            }
        }
    };
    take(run.model.layers, config.model.layers, "layers", true);
    take(run.model.hidden, config.model.hidden, "hidden", true);
    take(run.model.context, config.model.context, "context", true);
    take(run.layout.microbatches, config.layout.microbatches, "microbatches", true);
    take(run.model.vocab, config.model.vocab, "vocab", false);
    if (run.epochs > 0) {
        config.epochs = run.epochs;
    } else {
        take(run.steps, config.steps, "steps", false);
    }
    if (run.model.heads > 0) {
        config.model.heads = run.model.heads;
    } else {
        // Heads only constrain TP; one head per TP rank is always a valid split.
        config.model.heads = config.layout.grid.tp;
        settings.unknown.push_back("heads");
    }
    config.lengths = run.lengths;
    if (run.lengths.empty()) {
        settings.unknown.push_back("lengths");
    }
    if (run.documents > 0) {
        config.documents = run.documents;
    } else {
        settings.unknown.push_back("documents");
    }
    config.seed = run.seed;
    // wlb as the run packed: its S_max, delay bound and thresholds (fulcrum-train's config
    // keys; a run that does not record them keeps the simulator's defaults).
    if (run.wlb_max_tokens > 0) {
        config.wlb_max_tokens = run.wlb_max_tokens;
    }
    if (run.wlb_max_delay >= 0) {
        config.wlb_max_delay = run.wlb_max_delay;
    }
    if (!run.attention_kernel.empty() &&
        balance::attention_kernel_model(run.attention_kernel).ok()) {
        config.attention_kernel = run.attention_kernel;  // a simulated run's
    }
    if (!run.wlb_thresholds.empty()) {
        if (auto thresholds = balance::parse_wlb_thresholds(run.wlb_thresholds)) {
            config.wlb_thresholds = *thresholds;
        }
    }
    // Adaptive CP sharding weighs the kernel the run had.
    if (run.backend == "cpu" || run.backend == "cuda") {
        config.attention_kernel = run.backend;
    }
    config.ilp_window = run.ilp_window > 0 ? run.ilp_window : config.ilp_window;
    // fulcrum-train's knobs (RunConfig); a run that does not say them ran without
    // them, and in fp32 (the CPU engine's; only the simulator writes a dtype).
    config.layout.virtual_stages = std::max(1, run.layout.virtual_stages);
    config.layout.recompute = run.layout.recompute;  // none when not said
    config.layout.sequence_parallel = run.layout.sequence_parallel;
    config.layout.zero_stage = run.layout.zero_stage;
    config.layout.context_parallelism = run.layout.context_parallelism;
    config.layout.offload_checkpoints = run.layout.offload_checkpoints;
    // FPDT's chunks as the run had them (a run that does not say ran whole attention).
    config.attention_chunk = run.attention_chunk;
    config.offload = run.attention_chunk > 0 && run.offload;
    config.model.architecture = run.model.architecture;
    config.model.kv_heads = run.model.kv_heads;
    config.model.ffn_hidden = run.model.ffn_hidden;
    config.tp_comm_overlap = run.tp_comm_overlap;
    config.overlap_grad_reduce = run.overlap_grad_reduce;
    if (auto dtype = parse_dtype(run.dtype.empty() ? "fp32" : run.dtype)) {
        config.dtype = *dtype;
    }
    config.grad_reduce_dtype.reset();
    if (!run.grad_reduce_dtype.empty()) {
        if (auto dtype = parse_dtype(run.grad_reduce_dtype)) {
            config.grad_reduce_dtype = *dtype;
        }
    }
    return settings;
}

Result<Calibration> calibrate(const analysis::RunTrace& trace,
                              const analysis::RunAnalysis& analysis) {
    const std::string name = trace.run.name.empty() ? "the run" : "'" + trace.run.name + "'";
    if (trace.workload.empty()) {
        return Error{ErrorCode::invalid_input,
                     name +
                         " has no workload table (which tokens each rank held in each "
                         "micro-batch), so its pass times cannot be related to tokens and "
                         "pairs; calibrate on a run of fulcrum-train captured with fulcrum "
                         "capture (or a job that emits fulcrum.workload marks, "
                         "docs/annotations.md), or give a cost model file"};
    }
    if (analysis.passes == 0) {
        return Error{ErrorCode::invalid_input,
                     name +
                         " has no forward or backward passes (ranges named forward and "
                         "backward with step, mb and stage keys, docs/annotations.md), so "
                         "there is nothing to fit; give a cost model file instead"};
    }
    if (!analysis.cost_model) {
        return Error{ErrorCode::invalid_input,
                     "cannot fit a cost model on " + name + ": " + analysis.cost_model_error};
    }
    Calibration calibration;
    calibration.model = *analysis.cost_model;
    // fit_cost_model names the run; say what was done with it.
    calibration.model.source = "fitted on " + name;
    auto settings = config_from_run(trace);
    if (!settings) {
        return settings.error();
    }
    const RunConfig& run = trace.config;
    calibration.origin = {run.model.layers,
                          run.layout.grid.pp,
                          run.model.hidden,
                          run.layout.grid.tp,
                          settings->config.layout.recompute,
                          settings->config.layout.virtual_stages,
                          run.gemm_gflops,
                          run.gemm_gflops_cold,
                          run.host_cores};
    calibration.grid = settings->config.layout.grid;
    calibration.sequence_parallel =
        settings->config.layout.sequence_parallel && run.layout.grid.tp > 1;
    return calibration;
}

namespace {

// How far a run's layout is from the simulated one, compared lexicographically: 0 where a
// dimension matches. `run_first` and `grid_first` are compared before the others (the degree
// of a collective's own dimension in each; 0 and 0 for passes).
struct LayoutDistance {
    std::array<int, 6> mismatches{};
    auto operator<=>(const LayoutDistance&) const = default;
};

LayoutDistance distance(const Calibration& run, const parallel::GridShape& grid,
                        bool sequence_parallel, int run_first, int grid_first) {
    const parallel::GridShape& g = run.grid;
    const bool sp_here = sequence_parallel && grid.tp > 1;
    return {{run_first != grid_first, g.pp != grid.pp, g.tp != grid.tp,
             run.sequence_parallel != sp_here, g.cp != grid.cp, g.dp != grid.dp}};
}

// The degree of the dimension a collective runs over (DP's all-reduce spans dp × cp ranks).
int collective_degree(analysis::Role role, const parallel::GridShape& grid) {
    switch (role) {
        case analysis::Role::tp_collective:
            return grid.tp;
        case analysis::Role::cp_collective:
            return grid.cp;
        case analysis::Role::dp_collective:
            return grid.dp * grid.cp;
        case analysis::Role::pipeline_recv:
        case analysis::Role::pipeline_send:
        case analysis::Role::embedding_collective:
            return grid.pp;
        default:
            return 0;
    }
}

std::string layout_label(const Calibration& run) {
    const parallel::GridShape& g = run.grid;
    std::string label;
    const auto add = [&](const char* name, int degree) {
        if (degree > 1) {
            label += (label.empty() ? "" : " ") + std::string(name) + std::to_string(degree);
        }
    };
    add("dp", g.dp);
    add("tp", g.tp);
    add("pp", g.pp);
    add("cp", g.cp);
    return label.empty() ? "1 rank" : label + (run.sequence_parallel ? " sp" : "");
}

}  // namespace

Calibration merge_calibrations(const std::vector<Calibration>& runs,
                               const std::vector<std::string>& names,
                               const parallel::GridShape& grid, bool sequence_parallel) {
    if (runs.size() == 1) {
        return runs.front();
    }
    const auto name_of = [&](std::size_t i) {
        return "'" + (i < names.size() ? names[i] : runs[i].model.source) + "'";
    };
    std::size_t nearest = 0;
    for (std::size_t i = 1; i < runs.size(); ++i) {
        if (distance(runs[i], grid, sequence_parallel, 0, 0) <
            distance(runs[nearest], grid, sequence_parallel, 0, 0)) {
            nearest = i;
        }
    }
    Calibration merged;
    merged.origin = runs[nearest].origin;
    merged.grid = runs[nearest].grid;
    merged.sequence_parallel = runs[nearest].sequence_parallel;
    merged.model.passes = runs[nearest].model.passes;
    merged.model.optimizer_ns = runs[nearest].model.optimizer_ns;
    // Every collective any run fitted, each from the nearest run that has it; the source
    // lists, per run, what was taken from it.
    std::vector<std::vector<std::string>> taken(runs.size());
    taken[nearest].push_back("passes (" + layout_label(runs[nearest]) + ")");
    for (const Calibration& run : runs) {
        for (const analysis::CollectiveCost& cost : run.model.collectives) {
            // Only what this grid runs: a degree of 1 runs none of its dimension's.
            const int degree = collective_degree(cost.role, grid);
            if (merged.model.collective(cost.name) != nullptr || degree == 1) {
                continue;
            }
            const auto from = [&](std::size_t i) {
                return distance(runs[i], grid, sequence_parallel,
                                collective_degree(cost.role, runs[i].grid), degree);
            };
            std::size_t best = runs.size();
            for (std::size_t i = 0; i < runs.size(); ++i) {
                if (runs[i].model.collective(cost.name) != nullptr &&
                    (best == runs.size() || from(i) < from(best))) {
                    best = i;
                }
            }
            merged.model.collectives.push_back(*runs[best].model.collective(cost.name));
            taken[best].push_back(cost.name);
        }
    }
    for (std::size_t i = 0; i < runs.size(); ++i) {
        if (taken[i].empty()) {
            continue;
        }
        std::string part;
        for (const std::string& what : taken[i]) {
            part += (part.empty() ? "" : ", ") + what;
        }
        merged.model.source +=
            (merged.model.source.empty() ? "" : "; ") + part + " fitted on " + name_of(i);
    }
    return merged;
}

}  // namespace fulcrum::sim
