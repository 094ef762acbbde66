// A run opened in the GUI: its trace and every analysis of it, loaded once off the GUI thread
// and then shared read-only by every view (views draw these structs, never query the file).
#pragma once

#include <QString>
#include <atomic>
#include <functional>
#include <memory>

#include "core/analysis/run_analysis.h"
#include "core/analysis/run_trace.h"
#include "core/util/result.h"

namespace fulcrum::views {

struct OpenedRun {
    QString path;   // the run database that was read
    QString title;  // for tabs and legends: the capture folder's or the file's name
    std::shared_ptr<const analysis::RunTrace> trace;
    // Null when the analyses failed; `analysis_error` then says why and the timeline still works.
    std::shared_ptr<const analysis::RunAnalysis> analysis;
    QString analysis_error;

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

}  // namespace fulcrum::views
