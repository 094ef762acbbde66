#include "views/common/opened_run.h"

#include <QDir>
#include <QFileInfo>
#include <cstdlib>
#include <set>

#include "core/import/importer.h"
#include "core/store/lane_summary_file.h"
#include "core/store/trace_reader.h"

namespace fulcrum::views {

bool OpenedRun::rerunnable_here() const {
    return trace != nullptr && trace->run.origin == RunOrigin::captured &&
           trace->run.command.find("fulcrum-train") != std::string::npos;
}

Result<QString> resolve_run_path(const QString& path) {
    const QFileInfo info(path);
    if (!info.exists()) {
        return Error{ErrorCode::io, "'" + path.toStdString() + "' does not exist"};
    }
    if (!info.isDir()) {
        return info.absoluteFilePath();
    }
    const QString merged = QDir(info.absoluteFilePath()).filePath("run.fulcrum");
    if (QFileInfo::exists(merged)) {
        return merged;
    }
    return Error{ErrorCode::io,
                 "'" + path.toStdString() +
                     "' is a folder without a run.fulcrum; if it holds rank-N.sqlite files, "
                     "merge them first: fulcrum merge -o run.fulcrum '" +
                     path.toStdString() + "'"};
}

namespace {

Result<QString> import_if_foreign(const QString& path, const OpenOptions& options) {
    auto importer = importer::find_importer(path.toStdString());
    if (!importer) {
        return importer.error();
    }
    if (*importer == nullptr) {
        return path;  // a Fulcrum run, or something load_run_trace will name the problem of
    }
    // The imported run goes beside the trace (reused while newer than it), else to the temp
    // folder when that folder is read-only.
    const QFileInfo source(path);
    QString target = path + ".fulcrum";
    const QFileInfo existing(target);
    if (existing.exists() && existing.lastModified() >= source.lastModified()) {
        return target;
    }
    if (!QFileInfo(source.absolutePath()).isWritable()) {
        target = QDir(QDir::tempPath()).filePath(source.fileName() + ".fulcrum");
    }
    importer::ImportOptions import;
    import.overwrite = true;
    import.cancel = options.cancel;
    import.progress = [&](std::string_view stage, double fraction) {
        if (options.progress) {
            options.progress(QStringLiteral("importing: %1")
                                 .arg(QString::fromUtf8(stage.data(), qsizetype(stage.size()))),
                             fraction);
}
};  // namespace
auto imported = importer::import_files({path.toStdString()}, target.toStdString(), import);
if (!imported) {
    return imported.error();
}
return target;
}  // namespace fulcrum::views

}  // namespace

std::int64_t paged_event_threshold() {
    if (const char* text = std::getenv("FULCRUM_PAGED_EVENTS"); text != nullptr && *text) {
        char* end = nullptr;
        const long long value = std::strtoll(text, &end, 10);
        if (end != text && *end == '\0' && value >= 0) {
            return value;
        }
    }
    return 20'000'000;
}

Result<RunPtr> open_run(const QString& path, const OpenOptions& options) {
    auto given = resolve_run_path(path);
    if (!given) {
        return given.error();
    }
    // Nsight Systems exports and PyTorch traces open through their importer (docs/import.md).
    auto resolved = import_if_foreign(*given, options);
    if (!resolved) {
        return resolved.error();
    }
    auto report = [&](const QString& stage, double fraction) {
        if (options.progress) {
            options.progress(stage, fraction);
        }
    };
    report(QStringLiteral("opening"), 0.0);
    auto reader = store::TraceReader::open(resolved->toStdString());
    if (!reader) {
        return reader.error();
    }
    auto run = std::make_shared<OpenedRun>();
    run->path = *resolved;
    const QFileInfo file(*resolved);
    run->title = file.fileName() == QLatin1String("run.fulcrum") ? file.dir().dirName()
                                                                 : file.completeBaseName();
    // A large run opens from its summaries (docs/gui-timeline.md, "Paged runs"). A file
    // without them gets them once, when it can be written; damaged ones, or a file that
    // cannot be written, load the run whole as before, and the window says why.
    const std::int64_t threshold = paged_event_threshold();
    auto summaries = reader->lane_summaries();
    if (summaries && !*summaries && reader->events_in_blocks()) {
        auto pack = reader->event_pack();
        if (pack && *pack && (*pack)->events >= threshold) {
            report(QStringLiteral("summarizing the timeline (once)"), 0.0);
            auto built = store::build_lane_summaries(resolved->toStdString(), [&](double fraction) {
                report(QStringLiteral("summarizing the timeline (once)"), fraction);
            });
            if (built) {
                summaries = reader->lane_summaries();
            } else {
                run->notice = QStringLiteral("could not add timeline summaries (%1); loaded whole")
                                  .arg(QString::fromStdString(built.error().message));
            }
        }
    }
    if (summaries && *summaries) {
        // Every lane needs its summary: a lane without one would look empty.
        std::set<std::uint32_t> summarized;
        for (const store::LaneSummary& summary : **summaries) {
            summarized.insert(summary.lane.value);
        }
        for (const LaneInfo& lane : reader->lanes()) {
            if (summarized.count(lane.id.value) == 0) {
                summaries = Error{ErrorCode::corrupt,
                                  "the timeline summaries of '" + reader->path() + "' miss lane " +
                                      std::to_string(lane.id.value) + " (damaged)"};
                break;
            }
        }
    }
    if (!summaries) {
        run->notice = QStringLiteral("%1; loaded the run whole")
                          .arg(QString::fromStdString(summaries.error().message));
    } else if (*summaries) {
        std::int64_t events = 0;
        for (const store::LaneSummary& summary : **summaries) {
            events += summary.events;
        }
        if (events >= threshold) {
            analysis::LoadOptions metadata;
            metadata.read_events = false;
            auto skeleton = analysis::load_run_trace(*reader, metadata);
            if (!skeleton) {
                return skeleton.error();
            }
            run->trace = std::make_shared<const analysis::RunTrace>(std::move(*skeleton));
            run->summaries =
                std::make_shared<const std::vector<store::LaneSummary>>(std::move(**summaries));
            run->events = events;
            run->analysis_error =
                QStringLiteral(
                    "still being read from the file, a rank at a time (a run of %1 M "
                    "events: the timeline pages its events in)")
                    .arg(static_cast<double>(events) / 1e6, 0, 'f', 1);
            report(QStringLiteral("done"), 1.0);
            return RunPtr(std::move(run));
        }
    }

    analysis::LoadOptions load_progress;
    load_progress.cancel = options.cancel;
    load_progress.progress = [&](double fraction) {
        report(QStringLiteral("reading events"), fraction);
    };
    auto trace = analysis::load_run_trace(*reader, load_progress);
    if (!trace) {
        return trace.error();
    }

    run->trace = std::make_shared<const analysis::RunTrace>(std::move(*trace));
    run->events = run->trace->event_count();

    analysis::AnalyzeOptions analyze_options;
    analyze_options.cancel = options.cancel;
    analyze_options.tally_names = true;  // for Compare's diff by name
    analyze_options.progress = [&](std::string_view stage, double fraction) {
        report(QStringLiteral("analysing: %1")
                   .arg(QString::fromUtf8(stage.data(), qsizetype(stage.size()))),
               fraction);
    };
    auto analysed = analysis::analyze_run(*run->trace, analyze_options);
    if (analysed) {
        run->analysis = std::make_shared<const analysis::RunAnalysis>(std::move(*analysed));
    } else if (analysed.error().code == ErrorCode::cancelled) {
        return analysed.error();
    } else {
        run->analysis_error = QString::fromStdString(analysed.error().message);
    }
    report(QStringLiteral("done"), 1.0);
    return RunPtr(std::move(run));
}

Result<RunPtr> analyse_paged_run(const RunPtr& run, const OpenOptions& options) {
    auto reader = store::TraceReader::open(run->path.toStdString());
    if (!reader) {
        return reader.error();
    }
    analysis::AnalyzeOptions analyze;
    analyze.cancel = options.cancel;
    analyze.tally_names = true;  // for Compare's diff by name: the events are not held
    analyze.progress = [&](std::string_view, double fraction) {
        if (options.progress) {
            options.progress(QStringLiteral("analysing, a rank at a time"), fraction);
        }
    };
    analysis::RunTrace metadata;
    auto analysed = analysis::analyze_run_file(*reader, metadata, analyze);
    if (!analysed && analysed.error().code == ErrorCode::cancelled) {
        return analysed.error();
    }
    auto copy = std::make_shared<OpenedRun>(*run);
    if (analysed) {
        copy->analysis = std::make_shared<const analysis::RunAnalysis>(std::move(*analysed));
        copy->analysis_error.clear();
        // With the workload table, which the paged open leaves out (throughput in Compare).
        copy->trace = std::make_shared<const analysis::RunTrace>(std::move(metadata));
    } else {
        copy->analysis_error = QString::fromStdString(analysed.error().message);
    }
    return RunPtr(std::move(copy));
}

}  // namespace fulcrum::views
