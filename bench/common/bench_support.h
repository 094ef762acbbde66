// What several benchmarks share: wall-clock timing, table cells, removing a run database, the
// 10M-event synthetic run that bench_analyze and bench_timeline both measure (one cached file),
// and the plain SQLite scan of its events that they compare loading against.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "bench/common/scale_run.h"  // make_scale_run: the 1024-rank run of issue 18
#include "core/util/result.h"

namespace fulcrum::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// printf's rendering of one value, for a table cell ("%.2f").
std::string cell(double value, const char* format);

// A run database and every file SQLite or a partial write may leave beside it.
void remove_run_file(const std::string& path);

// Events in a run database; 0 when it cannot be read (absent: to be made).
std::int64_t count_events(const std::string& path);

// The synthetic run of dp 4 × pp 4 × cp 2 × tp 2, 16 micro-batches, 8 layers of 12 kernels,
// with as many steps as `target_events` needs, merged into `run_path` as rows (with the pack).
Status make_synthetic_run(const std::string& run_path, std::int64_t target_events);

// The baseline of loading: every event row, every column the analyses read, in one statement.
// `rows` (when not null) gets the count.
double plain_scan_seconds(const std::string& path, std::int64_t* rows = nullptr);

}  // namespace fulcrum::bench
