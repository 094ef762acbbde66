// Named system descriptions for the analytic model (`fulcrum simulate --hardware NAME`): a
// device's peak, how much of it GEMMs of each size reach, and its links. docs/simulate.md,
// "Hardware presets", states every number and where it comes from.
#pragma once

#include <string_view>

#include "core/sim/stage_costs.h"
#include "core/util/result.h"

namespace fulcrum::sim {

inline constexpr std::string_view kHardwarePresets = "h100, a100";

// "h100": the flat defaults of HardwareAssumptions for compute (400 TFLOP/s sustained, no
// table) on DGX H100's network. "a100": an A100 80 GB SXM in 8-GPU DGX nodes, described (see
// the .cpp). Both price collectives as NCCL does (HardwareAssumptions::network). A name ending
// in ".json" or holding a '/' is a file describing a system of the user's own (docs/simulate.md,
// "A system of your own"): every key checked, errors naming the file and the key.
Result<HardwareAssumptions> hardware_preset(std::string_view name);

}  // namespace fulcrum::sim
