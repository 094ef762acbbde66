// The static player: config.steps steps (or config.epochs epochs) of one layout, each planned
// by the engine's StepPlanner and played (step_play.h), written as it goes (sim_trace.h).
// simulate() (simulator.h) calls it, or the hot-switched player (hot_switch_play.h), which
// plays each length bucket with it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/balance/step_planner.h"
#include "core/sim/sim_config.h"
#include "core/sim/sim_trace.h"
#include "core/trace/model.h"

namespace fulcrum::store {
class TraceWriter;
}

namespace fulcrum::sim {

// simulate() of a validated config without hot switching.
Result<SimulationResult> play_run(const SimulationConfig& config, store::TraceWriter* out,
                                  const SimulationProgress& progress);

// Where a hot-switched step's bucket (core/sim/hot_switch_play.h) writes its passes: into the
// run's ranks already added (`lanes` by rank), from `start_ns`, as parts of step `step` (no
// step range of their own), micro-batches numbered from `first_microbatch`, which it leaves at
// the next bucket's first. No writer: figures only.
struct BucketOutput {
    store::TraceWriter* writer = nullptr;
    SimulatedLanes lanes;
    std::int64_t start_ns = 0;
    std::int32_t step = 0;
    int first_microbatch = 0;
};
// simulate() of a bucket's config (hot_switch_play.h: bucket_config), placed so.
Result<SimulationResult> simulate_bucket(const SimulationConfig& config, BucketOutput& out,
                                         const SimulationProgress& progress = {});

// With packed attention (SimulationConfig::packed_attention) every micro-batch of `plan`
// attends as one sequence of its tokens: each CP rank's tokens and attention work become its
// shard of one document that long, under the sharding the plan applied; the documents and
// their token ranges (the workload rows) stay. Unchanged otherwise.
Status attend_across_documents(balance::StepPlan& plan, const SimulationConfig& config);

// simulate()'s means and totals over `result.steps`, played until `end_ns`, having trained
// `trained` (the hot-switched play's too).
void summarize(SimulationResult& result, const balance::TrainedTotals& trained, std::int64_t end_ns,
               int epochs);

}  // namespace fulcrum::sim
