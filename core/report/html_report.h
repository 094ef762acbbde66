// HTML reports: one self-contained file, for one run or a comparison of runs, that a user can
// mail or attach to a ticket (docs/report.md).
//
// The report draws the RunAnalysis structs (STYLE §5): every number is a field of the
// analyses, or a sum, mean or maximum of such fields over ranks, steps or stages, the same
// aggregation `fulcrum analyze` prints. Charts are inline SVG with a few KB of inline
// script for tooltips, zoom and sortable tables; a Content-Security-Policy forbids every
// network request. Every string that comes from a trace (run, host, command, config, import
// log, event names) is escaped by html_escape.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/analysis/run_analysis.h"
#include "core/report/run_throughput.h"
#include "core/trace/model.h"
#include "core/util/result.h"

namespace fulcrum::plan {
struct PlanFile;  // core/plan/planner.h
}

namespace fulcrum::report {

// One run as the report shows it: its analyses and what the recording could not keep.
struct ReportRun {
    std::string path;  // the file it was read from, as the user named it; "" when built in memory
    analysis::RunAnalysis analysis;
    std::vector<RankInfo> ranks;             // with complete and dropped_records
    std::vector<ImportLogEntry> import_log;  // what an importer skipped, and why
    RunThroughput throughput;                // tokens trained and tokens/s (run_throughput.h)
    // In a comparison, what ran more, less or only here by name, against the first run
    // (docs/analyses.md, "Diff of two runs"); empty for the first run and a single run.
    std::optional<analysis::RunDiff> diff;
};

struct ReportOptions {
    std::string title;  // empty: "Fulcrum report: " and the run names
    // Rows of the import log shown per run; the rest are counted.
    std::size_t max_import_log_rows = 500;
    // Heatmap cells are at most this many columns and rows; beyond, neighbours are averaged
    // into one cell (and the tooltip says which ranks or steps it covers).
    int max_heatmap_columns = 128;
    int max_heatmap_rows = 64;
    // `fulcrum report RUN --plan PLAN.json`: the plan's chart and table (plan_section.h) after
    // the comparison; null: none.
    const plan::PlanFile* plan = nullptr;
};

// A ReportRun from a trace already loaded and analysed (the GUI has both); its tokens from
// trace.workload, or from `tokens` where the rows were tallied as they were read.
ReportRun make_report_run(std::string path, const analysis::RunTrace& trace,
                          analysis::RunAnalysis analysis, std::vector<ImportLogEntry> import_log,
                          const TrainedTokens* tokens = nullptr);

// What a comparison keeps of its first run to diff the others against: the tally of its events
// by name and the names it counted (the run's metadata, no events).
struct DiffBase {
    analysis::RunTrace names;
    analysis::NameTally tally;
};

struct LoadReportOptions {
    // Called with a stage ("loading", "analysing: ranks", "analysing: CP load", ...) and the
    // fraction done; may be empty.
    std::function<void(std::string_view stage, double fraction)> progress;
    const std::atomic<bool>* cancel = nullptr;
    // The first run of a comparison: the loaded run is diffed against it (ReportRun::diff).
    const DiffBase* diff_against = nullptr;
    // Where to keep the loaded run's tally (the first run of a comparison, to diff the others
    // with).
    std::optional<DiffBase>* keep_tally = nullptr;
};

// Opens, loads and analyses a run database; errors name the file.
Result<ReportRun> load_report_run(const std::string& path, const LoadReportOptions& options = {});

// The whole report; `runs` must not be empty. Deterministic: the same runs give the same bytes.
std::string html_report(const std::vector<ReportRun>& runs, const ReportOptions& options = {});

}  // namespace fulcrum::report
