// fulcrum report RUN [RUN...] -o report.html: one self-contained HTML file of every analysis
// of the runs, and a comparison of them (docs/report.md).
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "app/cli/cli_common.h"
#include "app/cli/commands.h"
#include "core/plan/planner.h"
#include "core/report/html_report.h"

namespace fulcrum::cli {
namespace {

struct ReportArgs {
    std::vector<std::string> runs;
    std::string output;
    bool force = false;
    std::string title;
    std::string plan;
};

// One run: its name with .html beside it (runs/wlb/run.fulcrum → runs/wlb/run.html); several
// runs: report.html in the working directory.
std::string default_output(const std::vector<std::string>& runs) {
    if (runs.size() != 1) {
        return "report.html";
    }
    return std::filesystem::path(runs.front()).replace_extension(".html").string();
}

int run_report(const ReportArgs& args) {
    install_interrupt_handler();
    std::atomic<bool> cancel{false};
    std::vector<report::ReportRun> runs;
    // The first run's tally by name, kept while the others load: each is diffed against it.
    std::optional<report::DiffBase> first;
    bool incomplete = false;
    for (std::size_t i = 0; i < args.runs.size(); ++i) {
        const std::string& path = args.runs[i];
        const std::string which = args.runs.size() > 1 ? " " + std::to_string(i + 1) + "/" +
                                                             std::to_string(args.runs.size())
                                                       : "";
        auto line = staged_progress_line(which);
        report::LoadReportOptions options;
        options.cancel = &cancel;
        if (args.runs.size() > 1) {
            options.keep_tally = i == 0 ? &first : nullptr;
            options.diff_against = i > 0 && first ? &*first : nullptr;
        }
        options.progress = [&](std::string_view stage, double fraction) {
            if (!line(stage, fraction)) {
                cancel.store(true);
            }
        };
        auto run = report::load_report_run(path, options);
        finish_progress_line();
        if (!run) {
            return report_error(run.error());
        }
        bool run_incomplete = false;
        for (const auto& rank : run->ranks) {
            run_incomplete = run_incomplete || !rank.complete;
        }
        if (run_incomplete) {
            incomplete = true;
            warn("'" + path +
                 "' is incomplete: a rank's recording stopped early; the report covers what was "
                 "committed");
        }
        runs.push_back(std::move(*run));
    }
    report::ReportOptions options;
    options.title = args.title;
    std::optional<plan::PlanFile> plan;
    if (!args.plan.empty()) {
        std::ifstream file(args.plan);
        if (!file) {
            return report_error({ErrorCode::io, "cannot read the plan '" + args.plan +
                                                    "': no such file or not readable"});
        }
        std::stringstream text;
        text << file.rdbuf();
        auto parsed = plan::parse_plan_json(text.str());
        if (!parsed) {
            return report_error(
                {parsed.error().code, "--plan '" + args.plan + "': " + parsed.error().message});
        }
        plan = std::move(*parsed);
        options.plan = &*plan;
    }
    const std::string html = report::html_report(runs, options);
    const std::string output = args.output.empty() ? default_output(args.runs) : args.output;
    if (auto status = write_output(output, args.force, html); !status) {
        return report_error(status.error());
    }
    std::printf("wrote %s (%zu KB)\n", output.c_str(), (html.size() + 1023) / 1024);
    return incomplete ? kExitIncomplete : kExitOk;
}

}  // namespace

Command add_report_command(CLI::App& app) {
    auto args = std::make_shared<ReportArgs>();
    auto* sub = app.add_subcommand(
        "report",
        "Write one self-contained HTML report of runs: configuration and grid, step breakdown, "
        "bubbles, CP load, offload, imbalance heatmaps, stragglers, predicted against measured "
        "(docs/report.md)");
    sub->add_option("runs", args->runs, "Run databases (.fulcrum); several are compared")
        ->required();
    sub->add_option(
        "-o,--output", args->output,
        "The HTML file (default: RUN.html beside a single run, report.html for several)");
    sub->add_flag("--force", args->force, "Replace the output file if it exists");
    sub->add_option("--title", args->title, "The report's title (default: the run names)");
    sub->add_option("--plan", args->plan,
                    "Add a plan's chart and table: the JSON of fulcrum plan --json (e.g. the plan "
                    "that chose this run's layout)");
    return [args] { return run_report(*args); };
}

}  // namespace fulcrum::cli
