// The simulator: plays whole training steps of a DP × TP × PP × CP grid from a cost model and
// writes them as a run database in the store's schema, marked simulated, so every view,
// analysis and report works on a prediction as on a capture (ARCHITECTURE, "Cost model and
// simulator"). docs/simulate.md describes what is played, with the formulas.
//
// One step, in short:
//   1. plan it with the engine's StepPlanner (same document lengths, options and seed: the
//      same packing, dealing to DP replicas and CP sharding as fulcrum-train would make);
//   2. for every replica, stage, micro-batch and phase, each CP rank's own compute is the
//      cost model's pass time for the tokens and causal pairs it holds; the CP group runs
//      every layer in lockstep (one K/V exchange per layer), so the group's pass takes its
//      slowest member's compute plus the exchange, plus the send to the next stage;
//   3. replay the pipeline schedule per replica with those durations (replay_pipeline);
//   4. every stage all-reduces its gradients over its DP × CP group once the slowest replica
//      is done, then runs the optimizer; the step ends when the last stage does, and the
//      next starts there (fulcrum-train synchronises all ranks between steps).
// TP ranks of a group do the same work at the same time: computed once, their events are
// copies on each rank's lane.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/sim/calibration.h"
#include "core/sim/sim_config.h"
#include "core/sim/step_estimate.h"

namespace fulcrum::store {
class TraceWriter;
}

namespace fulcrum::sim {

// Plays config.steps steps, or config.epochs whole epochs. With a writer, writes every rank
// (coordinates, one "main" lane), its events and its workload rows into it; the caller creates the
// writer (with RunOrigin::simulated) and closes it.
Result<SimulationResult> simulate(const SimulationConfig& config, store::TraceWriter* out,
                                  const SimulationProgress& progress = {});

struct SimulationOutput {
    std::string path;
    bool overwrite = false;
    std::string run_name;  // empty: the file's name without its extension
    std::string command;   // the command line, for run.command
    std::string producer = "fulcrum";
    std::optional<std::int64_t> start_utc_ns;  // nullopt: now
};

// simulate() into a new run database. The file is written as PATH.partial and renamed when
// complete, so a failed or cancelled simulation leaves nothing under PATH; an existing PATH
// is refused unless output.overwrite.
Result<SimulationResult> simulate_to_file(const SimulationConfig& config,
                                          const SimulationOutput& output,
                                          const SimulationProgress& progress = {});

}  // namespace fulcrum::sim
