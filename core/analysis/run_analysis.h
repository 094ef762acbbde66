// Every analysis of a run at once, as `fulcrum analyze`, the GUI and the HTML report show it,
// and its JSON form (docs/analyses.md, "JSON"; version 1, stable: members are only added).
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/analysis/bubbles.h"
#include "core/analysis/collectives.h"
#include "core/analysis/cost_model.h"
#include "core/analysis/cp_load.h"
#include "core/analysis/imbalance.h"
#include "core/analysis/offload.h"
#include "core/analysis/passes.h"
#include "core/analysis/run_trace.h"
#include "core/analysis/step_breakdown.h"
#include "core/util/result.h"

namespace fulcrum::analysis {

inline constexpr int kAnalysisJsonVersion = 1;

struct RunAnalysis {
    RunInfo run;
    RunConfig config;
    std::int64_t events = 0;
    std::int64_t passes = 0;
    std::vector<StepBreakdown> breakdown;
    BubbleAnalysis bubbles;
    CpLoadAnalysis cp_load;
    OffloadAnalysis offload;
    ImbalanceAnalysis imbalance;
    std::optional<CostModel> cost_model;
    // What could not be analysed and why (e.g. "no workload table: no predicted work").
    std::vector<std::string> notes;
};

struct AnalyzeOptions {
    std::function<void(std::string_view stage, double fraction)> progress;
    const std::atomic<bool>* cancel = nullptr;
};

Result<RunAnalysis> analyze_run(const RunTrace& trace, const AnalyzeOptions& options = {});

std::string analysis_json(const RunAnalysis& analysis);

}  // namespace fulcrum::analysis
