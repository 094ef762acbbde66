// The plan in the report (docs/report.md, "Plan"): `fulcrum plan`'s candidates as a scatter of
// predicted tokens/s against the peak memory of the fullest rank, infeasible ones grey at their
// memory with the reason, the GPU's memory budget as a line, the top k as a sortable table and
// the infeasible ones counted by reason. It draws PlanResult only (core/plan/planner.h).
#pragma once

#include <string>

#include "core/plan/planner.h"

namespace fulcrum::report {

// Points beyond this many are thinned (every n-th infeasible or estimated candidate), so the
// page stays light at thousands of GPUs; ranked candidates are always drawn.
inline constexpr std::size_t kMaxPlanPoints = 4000;

// dp×tp×pp×cp: "8×4×2×1"
std::string layout_text(const plan::Candidate& candidate);
// "interleaved x2"
std::string schedule_text(const plan::Candidate& candidate);
// Recomputation, ", sp" with sequence parallelism, and offload: "selective, sp",
// "none, offload (chunks of 4096)"
std::string knobs_text(const plan::Candidate& candidate);

// Appends the section (id "plan"): caption, chart (data-chart="plan"), top-k table
// (data-table name "plan_top"), infeasible by reason ("plan_infeasible").
void plan_section(const plan::PlanRequest& request, const plan::PlanResult& result,
                  std::string& out);

// A whole self-contained page holding the plan section (`fulcrum plan --report FILE`).
std::string plan_report(const plan::PlanRequest& request, const plan::PlanResult& result);

}  // namespace fulcrum::report
