// fulcrum import FILE... -o RUN: Nsight Systems SQLite exports or PyTorch/Kineto traces (one
// file per rank, plain or .gz) into one Fulcrum run (docs/import.md).
#include <atomic>
#include <cstdio>
#include <memory>

#include "app/cli/cli_common.h"
#include "app/cli/commands.h"
#include "core/import/importer.h"
#include "core/parallel/run_config.h"

namespace fulcrum::cli {
namespace {

struct ImportArgs {
    std::vector<std::string> inputs;
    std::string output;
    std::string name;
    bool force = false;
    int threads = 0;
};

int run_import(const ImportArgs& args) {
    install_interrupt_handler();
    std::atomic<bool> cancel{false};
    auto line = progress_line("importing");
    importer::ImportOptions options;
    options.overwrite = args.force;
    options.run_name = args.name;
    options.cancel = &cancel;
    options.threads = args.threads;
    options.progress = [&](std::string_view, double fraction) {
        if (!line(fraction)) {
            cancel.store(true);
        }
    };
    auto report = importer::import_files(args.inputs, args.output, options);
    finish_progress_line();
    if (!report) {
        return report_error(report.error());
    }
    std::printf("imported %zu %s file%s (%d rank%s, %lld events) into %s\n", args.inputs.size(),
                report->format.c_str(), args.inputs.size() == 1 ? "" : "s", report->ranks,
                report->ranks == 1 ? "" : "s", static_cast<long long>(report->events),
                args.output.c_str());
    // The grid and schedule recovered (docs/import.md), or that none was: what the 4D analyses
    // will have to work with.
    {
        const RunConfig config = parse_run_config(report->config_json, report->rank_rows);
        std::string line = "grid " + describe_grid(config);
        if (const std::string schedule = schedule_text(config); !schedule.empty()) {
            line += ", schedule " + schedule;
            if (config.layout.virtual_stages > 1) {
                line += " (" + std::to_string(config.layout.virtual_stages) + " chunks a stage)";
            }
        }
        if (config.says("microbatches") && config.layout.microbatches > 0) {
            line += ", " + std::to_string(config.layout.microbatches) + " micro-batches";
        }
        if (!config.grid_known) {
            line +=
                ": stages, bubbles and CP load are not derived (docs/import.md says what is "
                "recognised)";
        }
        std::printf("%s\n", line.c_str());
    }
    if (report->skipped > 0) {
        std::printf(
            "%lld records could not be mapped and were skipped; see them with: "
            "sqlite3 '%s' 'SELECT * FROM import_log WHERE skipped > 0'\n",
            static_cast<long long>(report->skipped), args.output.c_str());
    }
    if (report->notes > 0) {
        std::printf("%lld notes on the input (nothing skipped): fulcrum info '%s' lists them\n",
                    static_cast<long long>(report->notes), args.output.c_str());
    }
    for (const auto& warning : report->warnings) {
        warn(warning);
    }
    for (const auto& input : report->truncated) {
        warn("'" + input +
             "' ends early (cut short while it was written or copied?): the events before the "
             "cut were imported, so the run is incomplete; `fulcrum info '" +
             args.output + "'` says where it stops");
    }
    return report->truncated.empty() ? kExitOk : kExitIncomplete;
}

}  // namespace

Command add_import_command(CLI::App& app) {
    auto* sub = app.add_subcommand(
        "import",
        "Import Nsight Systems SQLite exports (nsys export --type sqlite) or PyTorch "
        "profiler (Kineto) traces, plain or .gz, one file per rank, into one run. Exit status: "
        "0; 3 when an input ends early (what it held before the cut is imported); 2 when "
        "nothing could be imported");
    auto args = std::make_shared<ImportArgs>();
    sub->add_option("files", args->inputs, "Trace files, one per rank (or one nsys report)")
        ->required()
        ->check(CLI::ExistingFile);
    sub->add_option("-o,--output", args->output, "The run database to write")->required();
    sub->add_option("--name", args->name, "Name of the run (default: the first file's name)");
    sub->add_flag("--force", args->force, "Replace the output if it exists");
    sub->add_option("--threads", args->threads,
                    "Files read side by side, each into its own rank file (default 0: one per "
                    "core)")
        ->check(CLI::NonNegativeNumber);
    return [args] { return run_import(*args); };
}

}  // namespace fulcrum::cli
