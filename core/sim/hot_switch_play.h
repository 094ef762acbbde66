// Hot-switched steps (HotSPa, SOSP'24, §4): a step's documents split into length buckets,
// each bucket packed and played under its own layout on the same ranks, one after another,
// its gradients then summed over its layout's DP × CP groups, gradients accumulating across
// buckets; between layouts the parameters (once a step into each) and the gradients so far
// move point to point as core/parallel/switch_plan.h plans it; after the last bucket only the
// gradients go home (the first bucket's layout) and the optimizer steps there, as
// fulcrum-train --hot-switch runs it. docs/simulate.md, "Hot switching", says what is modelled.
#pragma once

#include <cstdint>

#include "core/parallel/switch_plan.h"
#include "core/sim/sim_config.h"

namespace fulcrum::store {
class TraceWriter;
}

namespace fulcrum::sim {

// A switch from one layout to another: the plan and its time. Links are full duplex and a
// rank's NVLink and network links run at once, so a rank takes
//   max(max(NVLink sent, NVLink received) / nvlink_gbs, max(network sent, received) / network_gbs)
// and the switch the slowest rank's time plus one point-to-point latency (none when nothing
// moves). The switch moves every layer's 12h² + 13h parameters and the embeddings'
// (V + context)·h (stage_parameters' counts) at `dtype`'s size, twice that with the
// gradient accumulators; the gradients alone (`parameters` false: the switch home at the end
// of a step) once.
struct SwitchCost {
    parallel::SwitchPlan plan;
    std::int64_t ns = 0;
};
SwitchCost switch_cost(const SimulationConfig& config, const parallel::GridShape& from,
                       const parallel::GridShape& to, bool with_gradients, bool parameters = true);

// The time of a bucket's gradient reduction under `grid`, as the play adds it after the
// bucket's passes: the slowest stage's all-reduce of what it holds over its DP × CP group
// (none without DP or CP), at the costs under_layout gives that grid. For estimates (a
// search's closed form) that should count what the play counts.
std::int64_t bucket_reduction_ns(const SimulationConfig& config, const parallel::GridShape& grid);

// simulate() of a config with `hot_switch` set (validated): the global batch of each step is
// planned as without it, on `grid`; then its documents are played bucket by bucket.
Result<SimulationResult> simulate_hot_switched(const SimulationConfig& config,
                                               store::TraceWriter* out,
                                               const SimulationProgress& progress);

// `config` under another layout: its grid, no --stage-layers, sequence parallelism only where
// it has TP, and the costs of its calibration runs merged again for that grid
// (SimulationConfig::calibrations).
SimulationConfig under_layout(const SimulationConfig& config, const parallel::GridShape& grid);

// The config a bucket is played with (under_layout): its layout, its documents, the bucket's upper
// bound (or the context) as the micro-batch capacity, micro-batches per replica max(1, ⌈tokens /
// (capacity · dp)⌉), one epoch of them, gradients only accumulated.
SimulationConfig bucket_config(const SimulationConfig& config,
                               const parallel::HotSwitchBucket& bucket,
                               std::vector<std::int64_t> lengths);

}  // namespace fulcrum::sim
