// fulcrum diff A [B]: what ran more, less, or only on one side, by name, between two runs or
// two steps of one run (docs/analyses.md, "Diff of two runs").
#include <atomic>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>

#include "app/cli/cli_common.h"
#include "app/cli/commands.h"
#include "app/cli/hta_tables.h"
#include "core/analysis/run_analysis.h"
#include "core/store/trace_reader.h"

namespace fulcrum::cli {
namespace {

struct DiffArgs {
    std::vector<std::string> runs;
    std::optional<std::int32_t> step_a, step_b;
    bool json = false;
    std::string output;
    bool force = false;
    int top = 30;
};

// A run's metadata and its events tallied by name, one tally per step asked for (every step,
// or one), all in one read a rank at a time (never the whole run in memory).
struct Tallied {
    analysis::RunTrace names;
    std::vector<analysis::NameTally> tallies;
};

Result<Tallied> tally(const std::string& path,
                      const std::vector<std::optional<std::int32_t>>& steps) {
    auto reader = store::TraceReader::open(path);
    if (!reader) {
        return reader.error();
    }
    analysis::LoadOptions metadata;
    metadata.read_events = false;
    auto names = analysis::load_run_trace(*reader, metadata);
    if (!names) {
        return names.error();
    }
    auto line = progress_line("reading " + path);
    std::atomic<bool> cancel{false};  // Ctrl-C, through the progress line
    auto counted = analysis::tally_run_file(
        *reader, *names, steps, [&](double f) { cancel.store(cancel.load() || !line(f)); },
        &cancel);
    finish_progress_line();
    if (!counted) {
        return counted.error();
    }
    // A step the run does not have would diff against nothing: refused, naming its steps.
    for (std::size_t i = 0; i < steps.size(); ++i) {
        const std::set<std::int32_t>& present = (*counted)[i].steps_present();
        if (steps[i] && present.count(*steps[i]) == 0) {
            const std::string have = present.empty()
                                         ? "it has no step numbers"
                                         : "its steps are " + std::to_string(*present.begin()) +
                                               " to " + std::to_string(*present.rbegin());
            return Error{ErrorCode::invalid_input,
                         "'" + path + "' has no step " + std::to_string(*steps[i]) + "; " + have};
        }
    }
    return Tallied{std::move(*names), std::move(*counted)};
}

std::string side_name(const std::string& path, std::optional<std::int32_t> step) {
    return step ? path + " step " + std::to_string(*step) : path;
}

int run_diff(const DiffArgs& args) {
    if (args.runs.size() == 1 && (!args.step_a || !args.step_b)) {
        return report_error(
            Error{ErrorCode::invalid_input,
                  "a diff of one run compares two of its steps: give --step-a and --step-b "
                  "(or a second run)"});
    }
    install_interrupt_handler();
    // Two steps of one run: both tallied in one read of it.
    const bool one_run = args.runs.size() == 1;
    auto a = one_run ? tally(args.runs.front(), {args.step_a, args.step_b})
                     : tally(args.runs.front(), {args.step_a});
    if (!a) {
        return report_error(a.error());
    }
    std::optional<Tallied> other;
    if (!one_run) {
        auto b = tally(args.runs.back(), {args.step_b});
        if (!b) {
            return report_error(b.error());
        }
        other = std::move(*b);
    }
    const Tallied& b = one_run ? *a : *other;
    const std::string& b_path = args.runs.back();
    const analysis::RunDiff diff =
        analysis::diff_tallies({&a->tallies.front(), &a->names}, {&b.tallies.back(), &b.names});
    const std::string a_name = side_name(args.runs.front(), args.step_a);
    const std::string b_name = side_name(b_path, args.step_b);
    const std::string out = args.json ? analysis::diff_json(diff, a_name, b_name)
                                      : render_diff(diff, a_name, b_name, args.top);
    if (auto status = write_output(args.output, args.force, out); !status) {
        return report_error(status.error());
    }
    return kExitOk;
}

}  // namespace

Command add_diff_command(CLI::App& app) {
    auto args = std::make_shared<DiffArgs>();
    auto* sub = app.add_subcommand(
        "diff",
        "Compare two runs, or two steps of one run, by name: what was added, removed, "
        "or changed in count and time per step (docs/analyses.md, \"Diff of two runs\")");
    sub->add_option("runs", args->runs,
                    "Run A, and run B (default: A again, with --step-a and --step-b)")
        ->required()
        ->expected(1, 2);
    sub->add_option("--step-a", args->step_a,
                    "Only this step of A (default: every step, per step)");
    sub->add_option("--step-b", args->step_b, "Only this step of B");
    sub->add_flag("--json", args->json, "Write the diff as JSON (docs/analyses.md)");
    sub->add_option("-o,--output", args->output, "Write to this file instead of standard output");
    sub->add_flag("--force", args->force, "Replace the output file if it exists");
    sub->add_option("--top", args->top, "Names shown, the largest changes in time first")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 20));
    return [args] { return run_diff(*args); };
}

}  // namespace fulcrum::cli
