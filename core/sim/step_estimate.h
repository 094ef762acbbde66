#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/sim/layer_costs.h"
#include "core/sim/sim_config.h"

namespace fulcrum::sim {

// A closed-form step of `config` with every micro-batch alike: `tokens` tokens and `pairs`
// causal pairs each, spread evenly over the CP ranks. Each pass is priced as simulate() prices
// it (the same GroupPass code); the pipeline is the slowest stage's m passes plus the other
// stages' warm-up and cool-down (1/v of a pass under interleaving, ZB-H1's (F + B − W) share),
// then the DP reduction (with overlap, the last layer's bucket and what no layer holds) and
// the optimizer. It ignores imbalance between micro-batches, replicas and CP ranks, which only
// slows a step down: the planner ranks layouts by it before playing the best in full
// (docs/plan.md).
struct StepEstimate {
    double step_ns = 0;
    double pipeline_ns = 0;
    double bubble_fraction = 0;    // Σ_s (pipeline − busy_s) / Σ_s busy_s
    std::vector<double> stage_ns;  // [stage]: one micro-batch's passes, every phase
    // [stage][phase]: one micro-batch's pass of each phase (forward, backward or B, W)
    std::vector<std::array<double, kPassPhases>> phase_ns;
};
StepEstimate estimate_step(const SimulationConfig& config, const StageCosts& costs,
                           std::int64_t tokens, std::int64_t pairs);

}  // namespace fulcrum::sim
