// fulcrum export RUN --format chrome|csv|sqlite [--per-rank] [-o FILE|FOLDER]
#include <cstdio>
#include <map>
#include <memory>

#include "app/cli/cli_common.h"
#include "app/cli/commands.h"
#include "core/export/chrome_trace.h"
#include "core/export/csv.h"
#include "core/store/merge.h"
#include "core/store/trace_reader.h"

namespace fulcrum::cli {
namespace {

struct ExportArgs {
    std::string run;
    std::string format = "chrome";
    std::string output;
    bool per_rank = false;
    bool force = false;
};

std::string default_output(const std::string& run, const std::string& format, bool per_rank) {
    std::string base = run;
    while (base.size() > 1 && base.back() == '/') {
        base.pop_back();
    }
    if (const auto dot = base.find_last_of('.');
        dot != std::string::npos && base.find('/', dot) == std::string::npos) {
        base.resize(dot);
    }
    if (per_rank) {
        return base + "-ranks";
    }
    if (format == "sqlite") {
        return base + "-rows.fulcrum";
    }
    return base + (format == "csv" ? ".csv" : ".json");
}

// The run as a Fulcrum file whose events are rows of the event table, for sqlite3 and SQL.
int export_rows(const ExportArgs& args, const std::string& output) {
    store::MergeOptions options;
    options.overwrite = args.force;
    options.progress = progress_line("exporting");
    auto events = store::write_rows_copy(args.run, output, options);
    finish_progress_line();
    if (!events) {
        return report_error(events.error());
    }
    std::printf("wrote %lld events as rows of the event table to %s\n",
                static_cast<long long>(*events), output.c_str());
    std::printf(
        "query it with sqlite3 (docs/schema.md), e.g. sqlite3 %s \"SELECT COUNT(*) FROM "
        "event\"\n",
        output.c_str());
    return kExitOk;
}

int run_export(const ExportArgs& args) {
    auto trace = store::TraceReader::open(args.run);
    if (!trace) {
        return report_error(trace.error());
    }
    if (args.per_rank && args.format != "chrome") {
        return report_error(Error{ErrorCode::invalid_input,
                                  "--per-rank writes Chrome trace JSON, one file per rank; it does "
                                  "not go with --format " +
                                      args.format});
    }
    const std::string output =
        args.output.empty() ? default_output(args.run, args.format, args.per_rank) : args.output;
    if (args.format == "sqlite") {
        return export_rows(args, output);
    }
    ExportOptions options;
    options.overwrite = args.force;
    options.per_rank = args.per_rank;
    options.progress = progress_line("exporting");
    auto report = args.format == "csv" ? export_csv(*trace, output, options)
                                       : export_chrome_trace(*trace, output, options);
    finish_progress_line();
    if (!report) {
        return report_error(report.error());
    }
    if (args.per_rank) {
        std::printf("wrote %lld events to %zu files in %s/", static_cast<long long>(report->events),
                    report->files.size(), output.c_str());
    } else {
        std::printf("wrote %lld events to %s", static_cast<long long>(report->events),
                    output.c_str());
    }
    if (report->async_events > 0) {
        std::printf(" (%lld overlapping ranges as async events)",
                    static_cast<long long>(report->async_events));
    }
    std::printf("\n");
    if (args.per_rank) {
        std::printf(
            "one Kineto-style trace per rank: Holistic Trace Analysis reads the folder "
            "(TraceAnalysis(trace_dir=...)), Perfetto each file\n");
    } else if (args.format == "chrome") {
        std::printf("open it at https://ui.perfetto.dev or chrome://tracing\n");
    }
    if (trace->incomplete()) {
        warn("'" + args.run + "' is incomplete: a rank's recording stopped early");
        return kExitIncomplete;
    }
    return kExitOk;
}

}  // namespace

Command add_export_command(CLI::App& app) {
    auto* sub = app.add_subcommand(
        "export",
        "Export a run as Chrome trace JSON (Perfetto, chrome://tracing), CSV, or a Fulcrum file "
        "whose events are SQL rows (sqlite)");
    auto args = std::make_shared<ExportArgs>();
    sub->add_option("run", args->run, "A run database or per-rank file")->required();
    sub->add_option("--format", args->format,
                    "chrome, csv, or sqlite (the run with its events as rows of the event table, "
                    "for sqlite3: runs keep them in compressed blocks)")
        ->check(CLI::IsMember({"chrome", "csv", "sqlite"}))
        ->capture_default_str();
    sub->add_option("-o,--output", args->output,
                    "Where to write (default: the run's name with .json, .csv or -rows.fulcrum; "
                    "with --per-rank, the folder NAME-ranks)");
    sub->add_flag(
        "--per-rank", args->per_rank,
        "One Kineto-style trace per rank (rank-N.json, as the PyTorch profiler writes "
        "them), for Holistic Trace Analysis; `fulcrum import` reads them back as one run");
    sub->add_flag("--force", args->force, "Replace the output if it exists");
    return [args] { return run_export(*args); };
}

}  // namespace fulcrum::cli
