// fulcrum diff A [B]: what ran more, less, or only on one side, by name, between two runs or
// two steps of one run (docs/analyses.md, "Diff of two runs").
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

Result<analysis::RunTrace> load(const std::string& path) {
    auto reader = store::TraceReader::open(path);
    if (!reader) {
        return reader.error();
    }
    auto line = progress_line("loading " + path);
    analysis::LoadOptions options;
    options.progress = [&](double fraction) { line(fraction); };
    auto trace = analysis::load_run_trace(*reader, options);
    finish_progress_line();
    return trace;
}

std::set<std::int32_t> steps_of(const analysis::RunTrace& trace) {
    std::set<std::int32_t> steps;
    for (const auto& rank : trace.ranks) {
        for (const auto& lane : rank.lanes) {
            for (const Event& event : lane.events) {
                if (event.step >= 0) {
                    steps.insert(event.step);
                }
            }
        }
    }
    return steps;
}

// A step the run does not have would diff against nothing: refused, naming the steps it has.
Status check_step(const analysis::RunTrace& trace, const std::string& path,
                  std::optional<std::int32_t> step) {
    if (!step) {
        return {};
    }
    const auto steps = steps_of(trace);
    if (steps.count(*step) > 0) {
        return {};
    }
    const std::string have = steps.empty() ? "it has no step numbers"
                                           : "its steps are " + std::to_string(*steps.begin()) +
                                                 " to " + std::to_string(*steps.rbegin());
    return Error{ErrorCode::invalid_input,
                 "'" + path + "' has no step " + std::to_string(*step) + "; " + have};
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
    auto first = load(args.runs.front());
    if (!first) {
        return report_error(first.error());
    }
    std::optional<analysis::RunTrace> second;
    if (args.runs.size() > 1) {
        auto loaded = load(args.runs.back());
        if (!loaded) {
            return report_error(loaded.error());
        }
        second = std::move(*loaded);
    }
    const analysis::RunTrace& b_trace = second ? *second : *first;
    const std::string& b_path = args.runs.back();
    if (auto status = check_step(*first, args.runs.front(), args.step_a); !status) {
        return report_error(status.error());
    }
    if (auto status = check_step(b_trace, b_path, args.step_b); !status) {
        return report_error(status.error());
    }
    const analysis::RunDiff diff =
        analysis::diff_runs({&*first, args.step_a}, {&b_trace, args.step_b});
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
