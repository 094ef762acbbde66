// Every analysis of a run at once, as `fulcrum analyze`, the GUI and the HTML report show it,
// and its JSON form (docs/analyses.md, "JSON"; version 1, stable: members are only added).
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/analysis/bubbles.h"
#include "core/analysis/collectives.h"
#include "core/analysis/communication.h"
#include "core/analysis/cost_model.h"
#include "core/analysis/cp_load.h"
#include "core/analysis/critical_path.h"
#include "core/analysis/hot_switch.h"
#include "core/analysis/imbalance.h"
#include "core/analysis/kernels.h"
#include "core/analysis/memory.h"
#include "core/analysis/offload.h"
#include "core/analysis/passes.h"
#include "core/analysis/run_diff.h"
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
    // Why there is no cost model, where the run had passes and a workload table to fit it on
    // (the fit's own message); empty otherwise.
    std::string cost_model_error;
    // HTA's answers (docs/analyses.md §7–10). `kernels` is empty and `has_device_activity`
    // false on a run without device lanes (a CPU run): nothing there was a kernel.
    bool has_device_activity = false;
    KernelAnalysis kernels;
    std::vector<CollectiveSummary> communication;
    std::vector<CriticalPath> critical_paths;
    // HotSPa's buckets and switches (docs/analyses.md, "Hot switching"); empty on a run
    // without hot switching.
    HotSwitchAnalysis hot_switch;
    // Each rank's measured peak memory beside the memory model's prediction (memory.h).
    MemoryAnalysis memory;
    // What could not be analysed and why (e.g. "no workload table: no predicted work").
    std::vector<std::string> notes;
    // Every name's count and time (run_diff.h), for a diff against another run without reading
    // the run again; only when AnalyzeOptions::tally_names asked for it.
    std::optional<NameTally> names;
};

struct AnalyzeOptions {
    std::function<void(std::string_view stage, double fraction)> progress;
    const std::atomic<bool>* cancel = nullptr;
    // Also tally the events by name as each rank is read (RunAnalysis::names): what a
    // comparison diffs by name, at the cost of a hash lookup an event.
    bool tally_names = false;
    // analyze_run_file: also read the workload's rows into the metadata once the analyses are
    // done (what a calibration and the GUI show beside them), in the table's order, not
    // TraceReader::workload's sorted one: each of those tallies them. The
    // analyses themselves read them a step at a time; false for a caller that needs only the
    // analysis (`fulcrum analyze`).
    bool read_workload = true;
    // Handed each workload row as the analysis reads the table (analyze_run_file: its one scan
    // of the file's table; analyze_run: trace.workload), for a caller that only tallies the
    // rows and so need not read them again, nor hold them (a report's throughput).
    std::function<void(const WorkloadEntry&)> visit_workload;
    // What each table that grows with the run's steps — its passes (PassTable), its pipeline
    // pairs (PipelineMatcher), its collectives' transfer times (MatchedCollectives) — may hold in
    // memory before it goes to a temporary file (scratch_table.h): a run of many steps has millions
    // of each. 0 spills from the first row and reads the passes back a step at a time (tests).
    std::int64_t scratch_memory_bytes = ScratchTable<Pass>::kDefaultMemoryBytes;
};

// Every analysis of a run in memory. Ranks are read side by side on every core, each once;
// what the analyses across ranks need of each is kept, as analyze_run_file does.
Result<RunAnalysis> analyze_run(const RunTrace& trace, const AnalyzeOptions& options = {});

// The same of a run file read a rank at a time (issue 37, docs/analyses.md, "Runs larger than
// memory"): its events are never all in memory, only each rank's while it is read, on every
// core, nor its workload's rows, read a step at a time. `metadata` receives the run without its
// events (ranks, lanes, names, config, and the workload's rows unless
// AnalyzeOptions::read_workload is false), for what else the caller shows of it.
Result<RunAnalysis> analyze_run_file(const store::TraceReader& reader, RunTrace& metadata,
                                     const AnalyzeOptions& options = {});

// The analysis as `fulcrum analyze --json` writes it (docs/analyses.md), handed to `write` a
// piece at a time: its largest arrays (CP groups, per-step matrices, stage bubbles) are never
// built whole. analysis_json collects the pieces.
using JsonWriter = std::function<void(std::string_view)>;
void write_analysis_json(const RunAnalysis& analysis, const JsonWriter& write);
std::string analysis_json(const RunAnalysis& analysis);

// The diff of two runs or steps as `fulcrum diff --json` writes it (docs/analyses.md, "Diff of
// two runs"); `a` and `b` name the sides.
std::string diff_json(const RunDiff& diff, std::string_view a, std::string_view b);

}  // namespace fulcrum::analysis
