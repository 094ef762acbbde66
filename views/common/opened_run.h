// A run opened in the GUI: its trace and every analysis of it, loaded once off the GUI thread
// and then shared read-only by every view (views draw these structs, never query the file).
#pragma once

#include <QString>
#include <atomic>
#include <functional>
#include <memory>

#include "core/analysis/run_analysis.h"
#include "core/analysis/run_trace.h"
#include "core/store/lane_summary.h"
#include "core/util/result.h"

namespace fulcrum::views {

struct OpenedRun {
    QString path;   // the run database that was read
    QString title;  // for tabs and legends: the capture folder's or the file's name
    std::shared_ptr<const analysis::RunTrace> trace;
    // Null when the analyses failed; `analysis_error` then says why and the timeline still works.
    std::shared_ptr<const analysis::RunAnalysis> analysis;
    QString analysis_error;
    // A run of at least paged_event_threshold() events whose file has lane summaries: `trace`
    // holds its ranks, lanes and names but no events, the timeline pages them in from the
    // file (views/timeline/paged_timeline.h), and the analyses come after it opens
    // (analyse_paged_run, read from the file a rank at a time: `analysis` null and
    // `analysis_error` saying so until then). Null for a run held whole.
    std::shared_ptr<const std::vector<store::LaneSummary>> summaries;
    std::int64_t events = 0;
    // Something the user should know about how the run was opened (summaries that were
    // damaged, so the run was loaded whole); empty when nothing.
    QString notice;

    bool paged() const { return summaries != nullptr; }

    bool rerunnable_here() const;  // captured (not imported or simulated) by fulcrum-train
};
using RunPtr = std::shared_ptr<const OpenedRun>;

struct OpenOptions {
    // Called from the loading thread: a stage ("reading events", "analysing") and its fraction.
    std::function<void(const QString& stage, double fraction)> progress;
    const std::atomic<bool>* cancel = nullptr;
};

// What to read for a path the user gave: a capture folder opens its merged `run.fulcrum`.
// Errors name the path and say what to do (a folder without a run, a missing file).
Result<QString> resolve_run_path(const QString& path);

// Loads and analyses a run; blocking, so call it off the GUI thread. A trace in a format an
// importer reads (Nsight Systems SQLite, PyTorch/Kineto JSON) is imported first, into
// `PATH.fulcrum` beside it (reused while newer than the trace). Returns ErrorCode::cancelled
// when `cancel` turns true.
Result<RunPtr> open_run(const QString& path, const OpenOptions& options = {});

// The analyses of a paged run, read from its file a rank at a time (analysis::analyze_run_file,
// in bounded memory): the run again with `analysis` (or `analysis_error`) set and its trace's
// workload table read. Blocking; ErrorCode::cancelled when `cancel` turns true.
Result<RunPtr> analyse_paged_run(const RunPtr& run, const OpenOptions& options = {});

// Runs of at least this many events open paged (OpenedRun::summaries): 20 M events held whole
// is ~1.7 GB with the analyses. FULCRUM_PAGED_EVENTS overrides it (0: page every run that has
// summaries; tests and the bench use it).
std::int64_t paged_event_threshold();

}  // namespace fulcrum::views
