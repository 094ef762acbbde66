// bench_analyze: every analysis of `fulcrum analyze` on a 10M-event run (issue 5: < 5 s).
//
// The run is a synthetic 4D run (tests/support/synthetic_run.h: 1F1B, CP and TP collectives,
// GPU kernels per layer, workload table) merged as a capture would be. Baseline, in the same
// run: one plain SQL scan of every event row, the least any analysis has to read; the ratio
// says what loading into memory and analysing cost on top of reading.
#include <sqlite3.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "bench/common/bench_support.h"
#include "core/analysis/communication.h"
#include "core/analysis/critical_path.h"
#include "core/analysis/kernels.h"
#include "core/analysis/run_analysis.h"
#include "core/store/event_pack.h"
#include "core/store/merge.h"
#include "core/store/sqlite_handle.h"
#include "core/store/trace_reader.h"
#include "core/util/text_table.h"

using namespace fulcrum;
using bench::Clock;
using bench::seconds_since;

namespace {

// A run cached by an older bench has no event pack: add it as merge now does.
Status ensure_event_pack(const std::string& path) {
    {
        auto reader = store::TraceReader::open(path);
        if (!reader) {
            return reader.error();
        }
        auto pack = reader->event_pack();
        if (!pack) {
            return pack.error();
        }
        if (pack->has_value()) {
            return {};
        }
    }
    std::printf("adding the event pack to %s...\n", path.c_str());
    auto db = store::Database::open(path, store::Database::Mode::read_write);
    if (!db) {
        return db.error();
    }
    return store::write_event_pack(*db);
}

// Loading by rows, as files without an event pack load.
double row_load_seconds(const std::string& path) {
    const auto start = Clock::now();
    auto reader = store::TraceReader::open(path);
    analysis::LoadOptions options;
    options.read_event_pack = false;
    auto trace = reader ? analysis::load_run_trace(*reader, options)
                        : Result<analysis::RunTrace>(reader.error());
    return trace ? seconds_since(start) : 0.0;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"bench_analyze: fulcrum analyze's analyses on a 10M-event run"};
    std::string run_path =
        (std::filesystem::temp_directory_path() / "fulcrum-bench-analyze.fulcrum").string();
    std::int64_t target = 10'000'000;
    int repeats = 3;
    app.add_option("--run", run_path, "The run to analyse; made (and kept) when it does not exist")
        ->capture_default_str();
    app.add_option("--events", target, "Events of the run to make")->capture_default_str();
    app.add_option("--repeats", repeats, "Best of this many")->capture_default_str();
    CLI11_PARSE(app, argc, argv);

    if (bench::count_events(run_path) < target) {
        std::filesystem::remove(run_path);
        if (auto status = bench::make_synthetic_run(run_path, target); !status) {
            std::fprintf(stderr, "bench_analyze: %s\n", status.error().message.c_str());
            return 2;
        }
    }
    if (auto status = ensure_event_pack(run_path); !status) {
        std::fprintf(stderr, "bench_analyze: %s\n", status.error().message.c_str());
        return 2;
    }
    double best_scan = 1e30, best_row_load = 1e30, best_load = 1e30, best_analyze = 1e30,
           best_json = 1e30, best_tables = 1e30, best_total = 1e30, best_hta = 1e30;
    std::int64_t rows = 0, events = 0, passes = 0;
    for (int i = 0; i < repeats; ++i) {
        best_scan = std::min(best_scan, bench::plain_scan_seconds(run_path, &rows));
        best_row_load = std::min(best_row_load, row_load_seconds(run_path));
        const auto start = Clock::now();
        auto reader = store::TraceReader::open(run_path);
        if (!reader) {
            std::fprintf(stderr, "bench_analyze: %s\n", reader.error().message.c_str());
            return 2;
        }
        auto trace = analysis::load_run_trace(*reader);
        if (!trace) {
            std::fprintf(stderr, "bench_analyze: %s\n", trace.error().message.c_str());
            return 2;
        }
        const double load = seconds_since(start);
        const auto analyze_start = Clock::now();
        auto result = analysis::analyze_run(*trace);
        if (!result) {
            std::fprintf(stderr, "bench_analyze: %s\n", result.error().message.c_str());
            return 2;
        }
        const double analyzed = seconds_since(analyze_start);
        best_analyze = std::min(best_analyze, analyzed);
        best_tables = std::min(best_tables, load + analyzed);
        const auto json_start = Clock::now();
        const std::string json = analysis::analysis_json(*result);
        best_json = std::min(best_json, seconds_since(json_start));
        best_load = std::min(best_load, load);
        best_total = std::min(best_total, seconds_since(start));
        // HTA's answers and the critical path (issue 20: < 2 s together on this run).
        const auto hta_start = Clock::now();
        const auto kernels = analysis::analyze_kernels(*trace);
        const auto matched = analysis::matched_collectives(*trace);
        const auto collectives = analysis::summarize_collectives(*trace, matched);
        const auto paths =
            analysis::critical_paths(*trace, analysis::find_passes(*trace), &matched);
        best_hta = std::min(best_hta, seconds_since(hta_start));
        if (i == 0) {
            std::printf(
                "kernel rows %zu, idle streams %zu, collective groups %zu, critical paths %zu\n",
                kernels.time_by_type.size(), kernels.idle.size(), collectives.size(), paths.size());
        }
        events = result->events;
        passes = result->passes;
    }
    using Align = TextTable::Align;
    TextTable table(
        {"step (best of " + std::to_string(repeats) + ")", "seconds", "vs baseline", "target"},
        {Align::left, Align::right, Align::right, Align::left});
    auto cell = [](double value, const char* format) {
        char text[32];
        std::snprintf(text, sizeof text, format, value);
        return std::string(text);
    };
    table.add_row(
        {"baseline: one SQL scan of every event row", cell(best_scan, "%.2f"), "1.00x", ""});
    table.add_row({"load by rows (a file without an event pack)", cell(best_row_load, "%.2f"),
                   cell(best_row_load / best_scan, "%.2fx"), ""});
    table.add_row({"load into memory (load_run_trace, event pack)", cell(best_load, "%.2f"),
                   cell(best_load / best_scan, "%.2fx"), ""});
    table.add_row({"all analyses (analyze_run)", cell(best_analyze, "%.2f"),
                   cell(best_analyze / best_scan, "%.2fx"), ""});
    table.add_row({"kernels, communication, critical path (issue 20)", cell(best_hta, "%.2f"),
                   cell(best_hta / best_scan, "%.2fx"), "< 2 s"});
    table.add_row({"JSON of the results (analysis_json)", cell(best_json, "%.2f"),
                   cell(best_json / best_scan, "%.2fx"), ""});
    table.add_row({"open, load, analyse (what the tables need)", cell(best_tables, "%.2f"),
                   cell(best_tables / best_scan, "%.2fx"), "< 5 s"});
    table.add_row({"open, load, analyse, JSON", cell(best_total, "%.2f"),
                   cell(best_total / best_scan, "%.2fx"), "< 5 s"});
    std::printf("\n%lld events (%lld rows scanned), %lld passes\n%s",
                static_cast<long long>(events), static_cast<long long>(rows),
                static_cast<long long>(passes), table.render().c_str());
    return 0;
}
