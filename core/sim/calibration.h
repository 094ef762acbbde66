// Calibration: a captured run's settings (run.config) and the cost model fitted on its
// passes and collectives, and the merge of several runs' costs for one simulated grid
// (calibration.cpp; docs/simulate.md, "Calibration").
#pragma once

#include <string>
#include <vector>

#include "core/sim/sim_config.h"

namespace fulcrum::analysis {
class RunTrace;
struct RunAnalysis;
}  // namespace fulcrum::analysis

namespace fulcrum::sim {

// Settings taken from a captured run's configuration (run.config, RunConfig).
struct RunSettings {
    SimulationConfig config;
    // Settings the run does not say, by their run.config key ("schedule", "cp_shard",
    // core/parallel/run_config.h);
    // they keep SimulationConfig's defaults, except the model shape, micro-batches and
    // lengths, which are left 0 / empty so validate() asks for them.
    std::vector<std::string> unknown;
};
Result<RunSettings> config_from_run(const analysis::RunTrace& trace);

// The run's settings and the cost model its analysis fitted (analyze_run or, for a run read a
// rank at a time, analyze_run_file: `run` need not hold its events, only its config and
// workload table). Errors say what the run lacks (passes, the workload table) and what to do
// instead.
Result<Calibration> calibrate(const analysis::RunTrace& run, const analysis::RunAnalysis& analysis);

// The costs of several calibration runs (`--calibrate A --calibrate B ...`) for one simulated
// grid, as one Calibration for resolve_costs: the passes and the optimizer from the run whose
// layout is nearest the grid (the same pp first, since stage positions and the LM head follow
// it; then tp, sequence parallelism, cp, dp; the earlier run on a tie), each collective from
// the nearest run that ran it (the same degree of its own dimension first). What no run ran
// stays out, so resolve_costs takes it from the analytic model and notes it. `names` (one per
// run, as the user gave them) make the merged model's source: "passes of A (pp2); tp
// all-reduce of B; ...". Needs at least one run.
Calibration merge_calibrations(const std::vector<Calibration>& runs,
                               const std::vector<std::string>& names,
                               const parallel::GridShape& grid, bool sequence_parallel);

}  // namespace fulcrum::sim
