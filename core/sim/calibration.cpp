// Taking a simulation's settings and costs from a captured run. Kept apart from the
// simulator itself, which needs neither the pass finder nor the fit.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>

#include "core/analysis/passes.h"
#include "core/analysis/run_trace.h"
#include "core/sim/simulator.h"

namespace fulcrum::sim {
namespace {

// fulcrum-train's knobs in run.config (engine/tools/train.cpp writes virtual_stages,
// recompute, sequence_parallel, overlap_grad_reduce); a run that does not say them ran
// without them. `dtype` is written by the simulator only: the CPU engine computes in fp32.
struct RunKnobs {
    int virtual_stages = 1;
    plan::Recompute recompute = plan::Recompute::none;
    bool sequence_parallel = false;
    bool overlap_grad_reduce = false;
    DType dtype = DType::fp32;
};

RunKnobs run_knobs(const std::string& config_json) {
    RunKnobs knobs;
    const auto json = nlohmann::json::parse(config_json, nullptr, false);
    if (!json.is_object()) {
        return knobs;
    }
    if (auto it = json.find("virtual_stages"); it != json.end() && it->is_number_integer()) {
        knobs.virtual_stages = std::max(1, it->get<int>());
    }
    if (auto it = json.find("recompute"); it != json.end() && it->is_string()) {
        if (auto recompute = plan::parse_recompute(it->get<std::string>())) {
            knobs.recompute = *recompute;
        }
    }
    if (auto it = json.find("sequence_parallel"); it != json.end() && it->is_boolean()) {
        knobs.sequence_parallel = it->get<bool>();
    }
    if (auto it = json.find("overlap_grad_reduce"); it != json.end() && it->is_boolean()) {
        knobs.overlap_grad_reduce = it->get<bool>();
    }
    if (auto it = json.find("dtype"); it != json.end() && it->is_string()) {
        if (auto dtype = parse_dtype(it->get<std::string>())) {
            knobs.dtype = *dtype;
        }
    }
    return knobs;
}

}  // namespace

Result<RunSettings> config_from_run(const analysis::RunTrace& trace) {
    const analysis::RunConfig& run = trace.config;
    const std::string name = trace.run.name.empty() ? "the run" : "'" + trace.run.name + "'";
    RunSettings settings;
    SimulationConfig& config = settings.config;
    config.grid = {run.dp, run.tp, run.pp, run.cp};

    if (run.schedule.empty()) {
        settings.unknown.push_back("--schedule");
    } else if (auto schedule = parallel::parse_schedule(run.schedule)) {
        config.schedule = *schedule;
    } else {
        return Error{ErrorCode::invalid_input,
                     name + " ran the pipeline schedule '" + run.schedule +
                         "', which the simulator does not play (" +
                         std::string(parallel::kScheduleNames) + "); give --schedule"};
    }
    if (run.balancer.empty()) {
        settings.unknown.push_back("--balancer");
    } else if (auto balancer = balance::parse_balancer(run.balancer)) {
        config.balancer = *balancer;
    } else {
        return Error{ErrorCode::invalid_input, name + " used the balancer '" + run.balancer +
                                                   "', which the simulator does not know "
                                                   "(fixed, ilp, wlb); give --balancer"};
    }
    if (run.cp_shard.empty()) {
        settings.unknown.push_back("--cp-shard");
    } else if (auto sharding = balance::parse_cp_sharding(run.cp_shard)) {
        config.sharding = *sharding;
    } else {
        return Error{ErrorCode::invalid_input,
                     name + " used the CP sharding '" + run.cp_shard +
                         "', which the simulator does not know; give --cp-shard"};
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
    take(run.layers, config.model.layers, "--layers", true);
    take(run.hidden, config.model.hidden, "--hidden", true);
    take(run.context, config.model.context, "--context", true);
    take(run.microbatches, config.microbatches, "--micro-batches", true);
    take(run.vocab, config.model.vocab, "--vocab", false);
    take(run.steps, config.steps, "--steps", false);
    if (run.heads > 0) {
        config.model.heads = run.heads;
    } else {
        // Heads only constrain TP; one head per TP rank is always a valid split.
        config.model.heads = config.grid.tp;
        settings.unknown.push_back("--heads");
    }
    config.lengths = run.lengths;
    if (run.lengths.empty()) {
        settings.unknown.push_back("--lengths");
    }
    if (run.documents > 0) {
        config.documents = run.documents;
    } else {
        settings.unknown.push_back("--documents");
    }
    config.seed = run.seed;
    config.ilp_window = run.ilp_window > 0 ? run.ilp_window : config.ilp_window;
    const RunKnobs knobs = run_knobs(trace.run.config_json);
    config.virtual_stages = knobs.virtual_stages;
    config.recompute = knobs.recompute;
    config.sequence_parallel = knobs.sequence_parallel;
    config.overlap_grad_reduce = knobs.overlap_grad_reduce;
    config.dtype = knobs.dtype;
    return settings;
}

Result<Calibration> calibrate(const analysis::RunTrace& trace) {
    const std::string name = trace.run.name.empty() ? "the run" : "'" + trace.run.name + "'";
    if (trace.workload.empty()) {
        return Error{ErrorCode::invalid_input,
                     name +
                         " has no workload table (which tokens each rank held in each "
                         "micro-batch), so its pass times cannot be related to tokens and "
                         "pairs; calibrate on a run of fulcrum-train captured with fulcrum "
                         "capture (or a job that emits fulcrum.workload marks, "
                         "docs/annotations.md), or give --cost-model FILE"};
    }
    const std::vector<analysis::Pass> passes = analysis::find_passes(trace);
    if (passes.empty()) {
        return Error{ErrorCode::invalid_input,
                     name +
                         " has no forward or backward passes (ranges named forward and "
                         "backward with step, mb and stage keys, docs/annotations.md), so "
                         "there is nothing to fit; give --cost-model FILE instead"};
    }
    auto model = analysis::fit_cost_model(trace, passes);
    if (!model) {
        return Error{model.error().code,
                     "cannot fit a cost model on " + name + ": " + model.error().message};
    }
    Calibration calibration;
    calibration.model = std::move(*model);
    // fit_cost_model names the run; say what was done with it.
    calibration.model.source = "fitted on " + name;
    const analysis::RunConfig& run = trace.config;
    const RunKnobs knobs = run_knobs(trace.run.config_json);
    calibration.origin = {run.layers, run.pp,          run.hidden,
                          run.tp,     knobs.recompute, knobs.virtual_stages};
    return calibration;
}

}  // namespace fulcrum::sim
