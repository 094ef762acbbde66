// fulcrum merge -o RUN FILES...: per-rank files into one run database.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "app/cli/cli_common.h"
#include "app/cli/commands.h"
#include "core/store/merge.h"
#include "core/util/text_table.h"

namespace fulcrum::cli {
namespace {

struct MergeArgs {
    std::vector<std::string> inputs;
    std::string output;
    std::string name;
    bool force = false;
    bool rows = false;
    int threads = 0;
};

// A directory stands for the rank files a capture left in it (rank-N.sqlite).
Result<std::vector<std::string>> expand_inputs(const std::vector<std::string>& inputs) {
    std::vector<std::string> files;
    for (const auto& input : inputs) {
        std::error_code ec;
        if (!std::filesystem::is_directory(input, ec)) {
            files.push_back(input);
            continue;
        }
        std::vector<std::string> found;
        for (const auto& entry : std::filesystem::directory_iterator(input, ec)) {
            const auto name = entry.path().filename().string();
            if (name.starts_with("rank-") && name.ends_with(".sqlite")) {
                found.push_back(entry.path().string());
            }
        }
        if (found.empty()) {
            return Error{ErrorCode::invalid_input,
                         "'" + input + "' holds no rank-N.sqlite files to merge"};
        }
        std::sort(found.begin(), found.end());
        files.insert(files.end(), found.begin(), found.end());
    }
    return files;
}

int run_merge(const MergeArgs& args) {
    auto inputs = expand_inputs(args.inputs);
    if (!inputs) {
        return report_error(inputs.error());
    }
    store::MergeOptions options;
    options.overwrite = args.force;
    options.run_name = args.name;
    options.threads = args.threads;
    options.progress = progress_line("merging");
    if (args.rows) {
        options.events = store::WriterOptions::EventStorage::rows;
    }
    auto report = store::merge_rank_files(*inputs, args.output, options);
    finish_progress_line();
    if (!report) {
        return report_error(report.error());
    }
    using Align = TextTable::Align;
    // The correction is what the barrier marks changed against the rank's own UTC offset:
    // how far off that host's clock sync was.
    TextTable table({"rank", "host", "clock aligned by", "correction"},
                    {Align::right, Align::left, Align::left, Align::right});
    for (const auto& rank : report->ranks) {
        const std::int64_t correction =
            rank.clock_shift_ns + report->start_utc_ns - rank.utc_offset_ns;
        table.add_row({std::to_string(rank.rank), rank.host, std::string(to_string(rank.alignment)),
                       format_duration(correction)});
    }
    std::printf("merged %zu files (%zu ranks, %lld events) into %s\n", inputs->size(),
                report->ranks.size(), static_cast<long long>(report->events), args.output.c_str());
    std::fputs(table.render("  ").c_str(), stdout);
    for (const auto& warning : report->warnings) {
        warn(warning);
    }
    return kExitOk;
}

}  // namespace

Command add_merge_command(CLI::App& app) {
    auto* sub = app.add_subcommand(
        "merge",
        "Merge per-rank trace files into one run database, aligning their clocks on "
        "the engine's barrier marks when present, else on each file's UTC offset");
    auto args = std::make_shared<MergeArgs>();
    sub->add_option("files", args->inputs, "Per-rank files, or a capture directory")->required();
    sub->add_option("-o,--output", args->output, "The run database to write")->required();
    sub->add_option("--name", args->name, "Name of the merged run (default: the first file's)");
    sub->add_flag("--force", args->force, "Replace the output if it exists");
    sub->add_flag("--rows", args->rows,
                  "Keep the events as rows of the event table, for SQL (sqlite3), instead of "
                  "compressed blocks: about 10x the file and several times slower to write");
    sub->add_option("--threads", args->threads,
                    "Lanes decoded and compressed side by side (default 0: one per core); the "
                    "run is the same whatever the number")
        ->check(CLI::NonNegativeNumber);
    return [args] { return run_merge(*args); };
}

}  // namespace fulcrum::cli
