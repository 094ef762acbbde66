#include "bench/common/bench_support.h"

#include <sqlite3.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/store/merge.h"
#include "core/store/trace_reader.h"
#include "tests/support/synthetic_run.h"

namespace fulcrum::bench {

std::int64_t count_events(const std::string& path) {
    auto reader = store::TraceReader::open(path);
    if (!reader) {
        return 0;
    }
    auto summary = reader->summary();
    return summary ? summary->event_count : 0;
}

std::string cell(double value, const char* format) {
    char text[64];
    std::snprintf(text, sizeof text, format, value);
    return text;
}

void remove_run_file(const std::string& path) {
    std::error_code ec;
    for (const char* suffix :
         {"", "-wal", "-shm", "-journal", ".partial", ".partial-wal", ".partial-journal"}) {
        std::filesystem::remove(path + suffix, ec);
    }
}

Status make_synthetic_run(const std::string& run_path, std::int64_t target_events) {
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
    options.steps =
        static_cast<int>((target_events + per_step - 1) / std::max<std::int64_t>(per_step, 1));
    std::printf("writing %d steps of %lld events on %d ranks...\n", options.steps,
                static_cast<long long>(per_step),
                options.dp * options.pp * options.cp * options.tp);
    std::filesystem::remove_all(scratch);
    std::filesystem::create_directories(scratch);
    auto files = testing::write_synthetic_rank_files(scratch, options);
    if (!files) {
        return files.error();
    }
    std::printf("merging...\n");
    // As rows with the event pack: the benches that read this run compare loading it against
    // a plain SQL scan of its rows (plain_scan_seconds), which a run of blocks does not have.
    store::MergeOptions rows;
    rows.events = store::WriterOptions::EventStorage::rows;
    auto merged = store::merge_rank_files(*files, run_path, rows);
    std::filesystem::remove_all(scratch);
    if (!merged) {
        return merged.error();
    }
    return {};
}

double plain_scan_seconds(const std::string& path, std::int64_t* rows) {
    const auto start = Clock::now();
    sqlite3* db = nullptr;
    sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
    sqlite3_stmt* stmt = nullptr;
    sqlite3_prepare_v2(db,
                       "SELECT lane, start_ns, end_ns, name, kind, category, step, microbatch, "
                       "stage, phase, bytes FROM event ORDER BY lane, start_ns",
                       -1, &stmt, nullptr);
    std::int64_t checksum = 0, count = 0;
    while (sqlite3_step(stmt) == SQLITE_ROW) {
        for (int c = 0; c < 11; ++c) {
            checksum += sqlite3_column_int64(stmt, c);
        }
        ++count;
    }
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    if (checksum == 42) {
        std::printf(" ");  // keeps the sum, so the scan cannot be optimised away
    }
    if (rows != nullptr) {
        *rows = count;
    }
    return seconds_since(start);
}

}  // namespace fulcrum::bench
