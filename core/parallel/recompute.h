// Activation recomputation modes (Korthikanti et al. 2022, §4): one enum and one parser for
// the engine (engine/model/recompute.h says what each re-runs), the simulator and the planner.
#pragma once

#include <string_view>

#include "core/util/result.h"

namespace fulcrum::parallel {

enum class Recompute { none, selective, full };
Result<Recompute> parse_recompute(std::string_view name);  // "none", "selective", "full"
const char* recompute_name(Recompute recompute);

}  // namespace fulcrum::parallel
