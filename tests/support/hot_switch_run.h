// A small simulated workload for the hot-switch view's and the report's tests: a 4-layer GPT on
// 4 ranks (tp4 when static) and a three-bucket spec over the same ranks.
#pragma once

#include <string>

#include "core/sim/simulator.h"

namespace fulcrum::test {

inline constexpr const char* kHotSwitchSpec = "0-1024:dp4;1024-2048:dp2,tp2;2048-:tp4";

inline sim::SimulationConfig hot_switch_workload() {
    sim::SimulationConfig config;
    config.model = {.layers = 4, .hidden = 256, .heads = 8, .context = 4096, .vocab = 256};
    config.layout.grid = parallel::GridShape{.tp = 4};
    config.layout.microbatches = 4;
    config.lengths = "long-tail:context=4096,median=512";
    config.documents = 256;
    config.steps = 3;
    config.dtype = sim::DType::bf16;
    return config;
}

// `config` simulated into a run at `path`.
inline Result<sim::SimulationResult> simulate_run(const sim::SimulationConfig& config,
                                                  const std::string& path) {
    sim::SimulationOutput output;
    output.path = path;
    return sim::simulate_to_file(config, output);
}

}  // namespace fulcrum::test
