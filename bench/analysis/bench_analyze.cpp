// bench_analyze: every analysis of `fulcrum analyze` on a 10M-event run (issue 5: < 5 s).
//
// The run is a synthetic 4D run (tests/support/synthetic_run.h: 1F1B, CP and TP collectives,
// GPU kernels per layer, workload table) merged as a capture would be. Baseline, in the same
// run: one plain SQL scan of every event row, the least any analysis has to read; the ratio
// says what loading into memory and analysing cost on top of reading.
#include <CLI/CLI.hpp>
#include <sqlite3.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "core/analysis/communication.h"
#include "core/analysis/critical_path.h"
#include "core/analysis/kernels.h"
#include "core/analysis/run_analysis.h"
#include "core/store/event_pack.h"
#include "core/store/merge.h"
#include "core/store/sqlite_handle.h"
#include "core/store/trace_reader.h"
#include "core/util/text_table.h"
#include "tests/support/synthetic_run.h"

using namespace fulcrum;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

std::int64_t count_events(const std::string& path) {
    auto reader = store::TraceReader::open(path);
    if (!reader) {
        return 0;
    }
    auto summary = reader->summary();
    return summary ? summary->event_count : 0;
}

Status make_run(const std::string& run_path, std::int64_t target_events) {
    const std::string scratch = run_path + ".ranks";
    std::filesystem::remove_all(scratch);
    std::filesystem::create_directories(scratch);
    testing::SyntheticRunOptions options;
    options.name = "bench-analyze";
    options.dp = 4;
    options.pp = 4;
    options.cp = 2;
    options.tp = 2;
    options.microbatches = 16;
    options.layers = 8;
    options.kernels_per_layer = 12;
    options.steps = 1;
    // A one-step pilot gives the events per step; then as many steps as the target needs.
    auto pilot = testing::write_synthetic_rank_files(scratch, options);
    if (!pilot) {
        return pilot.error();
    }
    std::int64_t per_step = 0;
    for (const auto& file : *pilot) {
        per_step += count_events(file);
    }
    options.steps = static_cast<int>((target_events + per_step - 1) / std::max<std::int64_t>(per_step, 1));
    std::printf("writing %d steps of %lld events on %d ranks...\n", options.steps,
                static_cast<long long>(per_step), options.dp * options.pp * options.cp * options.tp);
    std::filesystem::remove_all(scratch);
    std::filesystem::create_directories(scratch);
    auto files = testing::write_synthetic_rank_files(scratch, options);
    if (!files) {
        return files.error();
    }
    std::printf("merging...\n");
    auto merged = store::merge_rank_files(*files, run_path);
    std::filesystem::remove_all(scratch);
    if (!merged) {
        return merged.error();
    }
    return {};
}

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
    auto trace = reader ? analysis::load_run_trace(*reader, options) : Result<analysis::RunTrace>(reader.error());
    return trace ? seconds_since(start) : 0.0;
}

// The baseline: every event row, every column the analyses read, in one statement.
double plain_scan_seconds(const std::string& path, std::int64_t& rows) {
    const auto start = Clock::now();
    sqlite3* db = nullptr;
    sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
    sqlite3_stmt* stmt = nullptr;
    sqlite3_prepare_v2(db,
                       "SELECT lane, start_ns, end_ns, name, kind, category, step, microbatch, "
                       "stage, phase, bytes FROM event ORDER BY lane, start_ns",
                       -1, &stmt, nullptr);
    std::int64_t checksum = 0;
    rows = 0;
    while (sqlite3_step(stmt) == SQLITE_ROW) {
        for (int c = 0; c < 11; ++c) {
            checksum += sqlite3_column_int64(stmt, c);
        }
        ++rows;
    }
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    if (checksum == 42) {
        std::printf(" ");
    }
    return seconds_since(start);
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"bench_analyze: fulcrum analyze's analyses on a 10M-event run"};
    std::string run_path = (std::filesystem::temp_directory_path() / "fulcrum-bench-analyze.fulcrum").string();
    std::int64_t target = 10'000'000;
    int repeats = 3;
    app.add_option("--run", run_path, "The run to analyse; made (and kept) when it does not exist")
        ->capture_default_str();
    app.add_option("--events", target, "Events of the run to make")->capture_default_str();
    app.add_option("--repeats", repeats, "Best of this many")->capture_default_str();
    CLI11_PARSE(app, argc, argv);

    if (count_events(run_path) < target) {
        std::filesystem::remove(run_path);
        if (auto status = make_run(run_path, target); !status) {
            std::fprintf(stderr, "bench_analyze: %s\n", status.error().message.c_str());
            return 2;
        }
    }
    if (auto status = ensure_event_pack(run_path); !status) {
        std::fprintf(stderr, "bench_analyze: %s\n", status.error().message.c_str());
        return 2;
    }
    double best_scan = 1e30, best_row_load = 1e30, best_load = 1e30, best_analyze = 1e30, best_json = 1e30,
           best_tables = 1e30, best_total = 1e30, best_hta = 1e30;
    std::int64_t rows = 0, events = 0, passes = 0;
    for (int i = 0; i < repeats; ++i) {
        best_scan = std::min(best_scan, plain_scan_seconds(run_path, rows));
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
        const auto matched = analysis::match_collectives(*trace);
        const auto collectives = analysis::summarize_collectives(*trace, matched);
        const auto paths = analysis::critical_paths(*trace, analysis::find_passes(*trace), &matched);
        best_hta = std::min(best_hta, seconds_since(hta_start));
        if (i == 0) {
            std::printf("kernel rows %zu, idle streams %zu, collective groups %zu, critical paths %zu\n",
                        kernels.time_by_type.size(), kernels.idle.size(), collectives.size(), paths.size());
        }
        events = result->events;
        passes = result->passes;
    }
    using Align = TextTable::Align;
    TextTable table({"step (best of " + std::to_string(repeats) + ")", "seconds", "vs baseline", "target"},
                    {Align::left, Align::right, Align::right, Align::left});
    auto cell = [](double value, const char* format) {
        char text[32];
        std::snprintf(text, sizeof text, format, value);
        return std::string(text);
    };
    table.add_row({"baseline: one SQL scan of every event row", cell(best_scan, "%.2f"), "1.00x", ""});
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
    std::printf("\n%lld events (%lld rows scanned), %lld passes\n%s", static_cast<long long>(events),
                static_cast<long long>(rows), static_cast<long long>(passes), table.render().c_str());
    return 0;
}
