// bench_report: `fulcrum report` of a 10M-event run (issue 7: < 10 s, file < 5 MB).
//
// The run is bench_analyze's synthetic 4D run (dp 4 × pp 4 × cp 2 × tp 2, GPU kernels per
// layer, workload table), cached at the same path and made by bench_analyze when missing.
// Baseline, in the same run: `fulcrum analyze --json` of the same analysis (analysis_json),
// the other way to hand the results on; the ratios say what rendering HTML costs beyond it.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "bench/common/bench_support.h"
#include "core/report/html_report.h"
#include "core/store/trace_reader.h"
#include "core/util/output_file.h"
#include "core/util/text_table.h"

using namespace fulcrum;
using bench::cell;
using bench::Clock;
using bench::seconds_since;

namespace {}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"bench_report: fulcrum report of a 10M-event run"};
    std::string run_path =
        (std::filesystem::temp_directory_path() / "fulcrum-bench-analyze.fulcrum").string();
    std::string output =
        (std::filesystem::temp_directory_path() / "fulcrum-bench-report.html").string();
    int repeats = 3;
    app.add_option("--run", run_path, "The run (bench_analyze's, made by it when missing)")
        ->capture_default_str();
    app.add_option("-o,--output", output, "Where the report is written")->capture_default_str();
    app.add_option("--repeats", repeats, "Best of this many")->capture_default_str();
    CLI11_PARSE(app, argc, argv);

    if (!std::filesystem::exists(run_path)) {
#ifdef FULCRUM_BENCH_ANALYZE
        std::printf("making %s with bench_analyze...\n", run_path.c_str());
        const std::string command =
            std::string(FULCRUM_BENCH_ANALYZE) + " --repeats 1 --run '" + run_path + "'";
        if (std::system(command.c_str()) != 0) {
            std::fprintf(stderr, "bench_report: bench_analyze failed\n");
            return 2;
        }
#else
        std::fprintf(stderr, "bench_report: %s is missing; run bench_analyze first\n",
                     run_path.c_str());
        return 2;
#endif
    }
    double best_load = 1e30, best_analyze = 1e30, best_render = 1e30, best_write = 1e30,
           best_json = 1e30, best_total = 1e30;
    std::size_t html_bytes = 0, json_bytes = 0;
    std::int64_t events = 0;
    for (int i = 0; i < repeats; ++i) {
        const auto start = Clock::now();
        auto reader = store::TraceReader::open(run_path);
        if (!reader) {
            std::fprintf(stderr, "bench_report: %s\n", reader.error().message.c_str());
            return 2;
        }
        auto trace = analysis::load_run_trace(*reader);
        auto log = reader->import_log();
        if (!trace || !log) {
            std::fprintf(stderr, "bench_report: cannot load %s\n", run_path.c_str());
            return 2;
        }
        const double load = seconds_since(start);
        const auto analyze_start = Clock::now();
        auto result = analysis::analyze_run(*trace);
        if (!result) {
            std::fprintf(stderr, "bench_report: %s\n", result.error().message.c_str());
            return 2;
        }
        const double analyzed = seconds_since(analyze_start);
        auto run = report::make_report_run(run_path, *trace, std::move(*result), std::move(*log));
        run.ranks = reader->ranks();
        const auto render_start = Clock::now();
        const std::string html = report::html_report({run});
        const double rendered = seconds_since(render_start);
        const auto write_start = Clock::now();
        auto file = OutputFile::create(output, true);
        if (!file || !file->write(html) || !file->commit()) {
            std::fprintf(stderr, "bench_report: cannot write %s\n", output.c_str());
            return 2;
        }
        const double written = seconds_since(write_start);
        const double total = seconds_since(start);
        const auto json_start = Clock::now();
        const std::string json = analysis::analysis_json(run.analysis);
        best_json = std::min(best_json, seconds_since(json_start));
        best_load = std::min(best_load, load);
        best_analyze = std::min(best_analyze, analyzed);
        best_render = std::min(best_render, rendered);
        best_write = std::min(best_write, written);
        best_total = std::min(best_total, total);
        html_bytes = html.size();
        json_bytes = json.size();
        events = run.analysis.events;
    }
    using Align = TextTable::Align;
    TextTable table(
        {"step (best of " + std::to_string(repeats) + ")", "seconds", "vs baseline", "target"},
        {Align::left, Align::right, Align::right, Align::left});
    table.add_row(
        {"baseline: analysis_json (fulcrum analyze --json)", cell(best_json, "%.3f"), "1.00x", ""});
    table.add_row({"open and load (load_run_trace, import log)", cell(best_load, "%.2f"),
                   cell(best_load / best_json, "%.1fx"), ""});
    table.add_row({"analyse (analyze_run)", cell(best_analyze, "%.2f"),
                   cell(best_analyze / best_json, "%.1fx"), ""});
    table.add_row({"render HTML (html_report)", cell(best_render, "%.3f"),
                   cell(best_render / best_json, "%.2fx"), ""});
    table.add_row(
        {"write the file", cell(best_write, "%.3f"), cell(best_write / best_json, "%.2fx"), ""});
    table.add_row({"fulcrum report, all of it", cell(best_total, "%.2f"),
                   cell(best_total / best_json, "%.1fx"), "< 10 s"});
    TextTable sizes({"output", "bytes", "vs JSON", "target"},
                    {Align::left, Align::right, Align::right, Align::left});
    sizes.add_row({"analysis JSON", std::to_string(json_bytes), "1.00x", ""});
    sizes.add_row({"HTML report", std::to_string(html_bytes),
                   cell(double(html_bytes) / double(std::max<std::size_t>(json_bytes, 1)), "%.2fx"),
                   "< 5 MB"});
    std::printf("\n%lld events; report written to %s\n%s\n%s", static_cast<long long>(events),
                output.c_str(), table.render().c_str(), sizes.render().c_str());
    return best_total < 10.0 && html_bytes < 5'000'000 ? 0 : 1;
}
