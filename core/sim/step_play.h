// One step played (docs/simulate.md): every replica's passes priced (pass_pricing.h) and its
// pipeline replayed (core/parallel/replay.h), alone or on shared cores, then each stage's DP
// reduction, the embedding's all-reduce and the optimizer.
#pragma once

#include <cstdint>
#include <vector>

#include "core/balance/step_planner.h"
#include "core/parallel/replay.h"
#include "core/sim/pass_pricing.h"
#include "core/sim/sim_config.h"

namespace fulcrum::sim {

struct ReplicaPlay {
    int microbatches = 0;
    std::vector<GroupPass> groups;  // [(stage · m + j) · kPassPhases + phase]
    std::vector<RankPass> ranks;    // [group index · cp + cp rank]
    parallel::ReplayResult replay;  // times from 0, the step's start
};

// One step played: every replica's pipeline, then each stage's DP reduction and optimizer.
struct PlayedStep {
    SimulatedStep step;
    std::vector<ReplicaPlay> plays;        // by DP replica
    std::vector<std::int64_t> reduce_end;  // by stage: its DP reduction's end
    // By stage: the bytes its reduction moved after the stage's last pass (exposed_bytes).
    std::vector<std::int64_t> reduce_bytes;
    UpdateStart update;  // the embedding's all-reduce and the optimizer's start
    std::int64_t end_ns = 0;
};

Result<PlayedStep> play_step(const balance::StepPlan& plan, const SimulationConfig& config,
                             const StageCosts& costs, const std::vector<std::int64_t>& dp_bytes,
                             std::int64_t optimizer_ns, std::int64_t step_start,
                             const SimulationProgress& progress);

}  // namespace fulcrum::sim
