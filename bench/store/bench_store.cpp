// bench_store: the trace store's figures (issue 2), each against a baseline measured in the
// same run, because these machines are shared and noisy.
//
//  writer  events/s of TraceWriter (producer thread -> background writer, committed) against
//          a plain prepared-statement insert loop in one transaction into the same schema;
//          then the writer with block storage (rank files, issue 18: >= 5 M events/s and
//          <= 16 bytes an event on disk after close) against the writer with rows.
//  merge   merge_rank_files of the reader's 10M-event rank file into a run of blocks (the
//          default: issue 18, >= 5 M events/s) against into a run of rows (`merge --rows`, what
//          every merge wrote before), from a rank file of blocks and of rows.
//  reader  a lane/time-window query returning ~10K events from a 10M-event file, against
//          the same query without the max-duration bound (an index range scan to the window's
//          end instead of just the window).
#include <sys/resource.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <vector>

#include "bench/common/bench_support.h"
#include "core/store/merge.h"
#include "core/store/schema.h"
#include "core/store/trace_reader.h"
#include "core/store/trace_writer.h"
#include "core/util/ordered_pool.h"
#include "core/util/text_table.h"

using namespace fulcrum;
using namespace fulcrum::store;
using bench::Clock;
using bench::seconds_since;

namespace {

// Events shaped like a real host+stream trace: per lane, back-to-back ranges of 2-40 us,
// every 16th a long parent range, with step / micro-batch set.
std::vector<Event> make_events(std::size_t count, int lanes, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<Event> events(count);
    std::vector<std::int64_t> clock(lanes, 0);
    for (std::size_t i = 0; i < count; ++i) {
        Event& e = events[i];
        const int lane = static_cast<int>(i % lanes);
        const std::int64_t length = 2'000 + static_cast<std::int64_t>(rng() % 38'000);
        e.lane = LaneId{static_cast<std::uint32_t>(lane + 1)};
        e.name = StringId{static_cast<std::uint32_t>(1 + rng() % 64)};
        e.kind = i % 5 == 0 ? EventKind::kernel : EventKind::range;
        e.category = static_cast<Category>(rng() % kCategoryCount);
        e.start_ns = clock[lane];
        e.end_ns = e.start_ns + (i % 16 == 0 ? 16 * length : length);
        clock[lane] += length + 500;
        e.step = static_cast<std::int32_t>(e.start_ns / 100'000'000);
        e.microbatch = static_cast<std::int32_t>(e.start_ns / 10'000'000 % 10);
        e.stage = static_cast<std::int16_t>(lane % 4);
    }
    return events;
}

double baseline_insert_loop(const std::string& path, const std::vector<Event>& events) {
    bench::remove_run_file(path);
    auto db = Database::open(path, Database::Mode::create);
    (void)configure_for_recording(*db);
    (void)create_schema(*db);
    const auto start = Clock::now();
    (void)db->exec("BEGIN");
    auto stmt = db->prepare(
        "INSERT INTO event (lane, start_ns, end_ns, kind, name, category, step, microbatch, "
        "stage, phase, bytes, copy_kind, correlation, args) VALUES "
        "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)");
    for (const auto& e : events) {
        stmt->bind(1, std::int64_t{e.lane.value});
        stmt->bind(2, e.start_ns);
        stmt->bind(3, e.end_ns);
        stmt->bind(4, static_cast<std::int64_t>(e.kind));
        stmt->bind(5, std::int64_t{e.name.value});
        stmt->bind(6, static_cast<std::int64_t>(e.category));
        stmt->bind_optional(7, e.step);
        stmt->bind_optional(8, e.microbatch);
        stmt->bind_optional(9, e.stage);
        stmt->bind_optional(10, static_cast<std::int64_t>(e.phase));
        stmt->bind_optional(11, e.bytes);
        stmt->bind_optional(12, static_cast<std::int64_t>(e.copy_kind));
        stmt->bind_optional(13, e.correlation);
        stmt->bind_null(14);
        stmt->run();
    }
    (void)db->exec("COMMIT");
    return seconds_since(start);
}

struct WriterTiming {
    double ingest_seconds;  // add_event of every event until all are committed
    double close_seconds;   // index build and checkpoint
    double file_bytes;      // after close
};

WriterTiming trace_writer(const std::string& path, const std::vector<Event>& events, int lanes,
                          WriterOptions::EventStorage storage = WriterOptions::EventStorage::rows) {
    bench::remove_run_file(path);
    RunInfo run;
    run.name = "bench";
    WriterOptions options;
    options.events = storage;
    auto writer = TraceWriter::create(path, run, options);
    if (!writer) {
        std::fprintf(stderr, "%s\n", writer.error().message.c_str());
        std::exit(2);
    }
    (*writer)->add_rank(RankInfo{});
    for (int lane = 0; lane < lanes; ++lane) {
        (*writer)->add_lane(0, LaneKind::host_thread, "lane " + std::to_string(lane));
    }
    for (int i = 0; i < 64; ++i) {
        (*writer)->intern("name " + std::to_string(i));
    }
    const auto start = Clock::now();
    for (const auto& e : events) {
        (*writer)->add_event(e);
    }
    (*writer)->flush();
    const double ingest = seconds_since(start);
    const auto close_start = Clock::now();
    (void)(*writer)->close();
    return {ingest, seconds_since(close_start),
            static_cast<double>(std::filesystem::file_size(path))};
}

// User and system seconds of the whole process (the producer and the writer thread).
double cpu_seconds() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
           static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

struct MergeTime {
    double seconds = 0;
    double file_bytes = 0;
};

MergeTime merge_seconds(const std::string& rank_file, const std::string& run_path,
                        WriterOptions::EventStorage storage, int threads = 0) {
    bench::remove_run_file(run_path);
    MergeOptions options;
    options.events = storage;
    options.threads = threads;
    const auto start = Clock::now();
    if (auto merged = merge_rank_files({rank_file}, run_path, options); !merged) {
        std::fprintf(stderr, "%s\n", merged.error().message.c_str());
        std::exit(2);
    }
    return {seconds_since(start), static_cast<double>(std::filesystem::file_size(run_path))};
}

}  // namespace

int main(int argc, char** argv) {
    std::size_t writer_events = 4'000'000;
    std::size_t reader_events = 10'000'000;
    std::string directory = std::filesystem::temp_directory_path().string();
    int repeats = 3;
    CLI::App app{"Trace store benchmarks (issue 2): writer throughput, window query latency"};
    app.add_option("--writer-events", writer_events)->capture_default_str();
    app.add_option("--reader-events", reader_events)->capture_default_str();
    app.add_option("--repeats", repeats, "Writer runs; the best of each is reported")
        ->capture_default_str();
    app.add_option("--dir", directory, "Where the benchmark files go")->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    const std::string path = directory + "/fulcrum-bench-store.sqlite";

    constexpr int kLanes = 16;
    std::printf("generating %zu events...\n", writer_events);
    const auto events = make_events(writer_events, kLanes, 1);
    double best_baseline = 1e9, best_ingest = 1e9, close_seconds = 0;
    for (int r = 0; r < repeats; ++r) {
        best_baseline = std::min(best_baseline, baseline_insert_loop(path, events));
        const WriterTiming timing = trace_writer(path, events, kLanes);
        if (timing.ingest_seconds < best_ingest) {
            best_ingest = timing.ingest_seconds;
            close_seconds = timing.close_seconds;
        }
    }
    const double n = static_cast<double>(writer_events);
    using Align = TextTable::Align;
    TextTable writer_table(
        {"writer", "events", "seconds", "events/s", "vs baseline", "target"},
        {Align::left, Align::right, Align::right, Align::right, Align::right, Align::left});
    char buffer[6][32];
    std::snprintf(buffer[0], 32, "%.3f", best_baseline);
    std::snprintf(buffer[1], 32, "%.2f M", n / best_baseline / 1e6);
    std::snprintf(buffer[2], 32, "%.3f", best_ingest);
    std::snprintf(buffer[3], 32, "%.2f M", n / best_ingest / 1e6);
    std::snprintf(buffer[4], 32, "%.2fx", best_baseline / best_ingest);
    std::snprintf(buffer[5], 32, "%.3f", close_seconds);
    writer_table.add_row({"baseline: prepared insert loop, 1 txn", std::to_string(writer_events),
                          buffer[0], buffer[1], "1.00x", ""});
    writer_table.add_row({"TraceWriter (background thread, committed)",
                          std::to_string(writer_events), buffer[2], buffer[3], buffer[4],
                          ">= 1 M/s and >= 0.70x"});
    writer_table.add_row({"TraceWriter close (indexes, checkpoint)", "", buffer[5], "", "", ""});
    std::printf("\n%s\n", writer_table.render().c_str());

    // Rank files (issue 18): the same events through the writer as rows and as blocks,
    // alternating so that both see the same machine.
    WriterTiming best_rows{1e9, 0, 0}, best_blocks{1e9, 0, 0};
    std::vector<std::string> cpu;
    for (int r = 0; r < repeats; ++r) {
        const WriterTiming rows = trace_writer(path, events, kLanes);
        const double cpu_before = cpu_seconds();
        const WriterTiming blocks =
            trace_writer(path, events, kLanes, WriterOptions::EventStorage::blocks);
        cpu.push_back(bench::cell(cpu_seconds() - cpu_before, "%.2f"));
        best_rows = rows.ingest_seconds < best_rows.ingest_seconds ? rows : best_rows;
        best_blocks = blocks.ingest_seconds < best_blocks.ingest_seconds ? blocks : best_blocks;
    }
    TextTable blocks_table({"rank file writer", "events", "seconds", "events/s", "vs rows",
                            "bytes/event", "close s", "target"},
                           {Align::left, Align::right, Align::right, Align::right, Align::right,
                            Align::right, Align::right, Align::left});
    blocks_table.add_row({"TraceWriter, rows (baseline)", std::to_string(writer_events),
                          bench::cell(best_rows.ingest_seconds, "%.3f"),
                          bench::cell(n / best_rows.ingest_seconds / 1e6, "%.2f M"), "1.00x",
                          bench::cell(best_rows.file_bytes / n, "%.1f"),
                          bench::cell(best_rows.close_seconds, "%.3f"), ""});
    blocks_table.add_row(
        {"TraceWriter, blocks (zstd)", std::to_string(writer_events),
         bench::cell(best_blocks.ingest_seconds, "%.3f"),
         bench::cell(n / best_blocks.ingest_seconds / 1e6, "%.2f M"),
         bench::cell(best_rows.ingest_seconds / best_blocks.ingest_seconds, "%.2fx"),
         bench::cell(best_blocks.file_bytes / n, "%.1f"),
         bench::cell(best_blocks.close_seconds, "%.3f"), ">= 5 M/s, <= 16 B"});
    std::printf("%s", blocks_table.render().c_str());
    std::printf("CPU seconds of each block writer run (both threads): ");
    for (const auto& seconds : cpu) {
        std::printf("%s ", seconds.c_str());
    }
    std::printf("\n\n");

    // The GUI reads merged runs: record a rank file, then merge it as a capture would.
    std::printf("writing and merging a %zu-event run for the reader...\n", reader_events);
    const std::string run_path = directory + "/fulcrum-bench-store.fulcrum";
    const std::string blocks_path = directory + "/fulcrum-bench-store-blocks.sqlite";
    {
        const auto big = make_events(reader_events, kLanes, 2);
        (void)trace_writer(path, big, kLanes);
        (void)trace_writer(blocks_path, big, kLanes, WriterOptions::EventStorage::blocks);
    }
    using Storage = WriterOptions::EventStorage;
    const MergeTime one_thread = merge_seconds(blocks_path, run_path, Storage::blocks, 1);
    const MergeTime blocks_to_blocks = merge_seconds(blocks_path, run_path, Storage::blocks);
    const MergeTime rows_to_blocks = merge_seconds(path, run_path, Storage::blocks);
    // Last, so that the reader below queries a run of rows, as before.
    const MergeTime blocks_to_rows = merge_seconds(blocks_path, run_path, Storage::rows);
    const double big_n = static_cast<double>(reader_events);
    TextTable merge_table({"merge of one rank file", "events", "seconds", "events/s", "vs rows",
                           "run B/event", "target"},
                          {Align::left, Align::right, Align::right, Align::right, Align::right,
                           Align::right, Align::left});
    const auto add = [&](const char* name, const MergeTime& time, const char* target) {
        merge_table.add_row({name, std::to_string(reader_events), bench::cell(time.seconds, "%.2f"),
                             bench::cell(big_n / time.seconds / 1e6, "%.2f M"),
                             bench::cell(blocks_to_rows.seconds / time.seconds, "%.2fx"),
                             bench::cell(time.file_bytes / big_n, "%.1f"), target});
    };
    add("blocks -> run of rows (--rows, baseline)", blocks_to_rows, "");
    add("blocks -> run of blocks, one thread", one_thread, "");
    add("blocks -> run of blocks (default: lanes on every core)", blocks_to_blocks, ">= 5 M/s");
    add("rows (schema 2 rank file) -> run of blocks", rows_to_blocks, "");
    std::printf("\n%s", merge_table.render().c_str());
    std::printf("lanes side by side (issue 37): %.2fx one thread's rate on %d cores\n\n",
                one_thread.seconds / blocks_to_blocks.seconds, worker_threads());
    bench::remove_run_file(blocks_path);
    auto trace = TraceReader::open(run_path);
    if (!trace) {
        std::fprintf(stderr, "%s\n", trace.error().message.c_str());
        return 2;
    }
    const LaneInfo lane = trace->lanes()[3];
    auto summary = trace->summary();
    const double per_lane = static_cast<double>(reader_events) / kLanes;
    const std::int64_t span = summary->end_ns - summary->start_ns;
    const auto window = static_cast<std::int64_t>(static_cast<double>(span) * 10'000 / per_lane);
    std::mt19937_64 rng(3);
    std::vector<double> bounded_ms, naive_ms;
    std::size_t returned = 0;
    auto naive = Database::open(run_path, Database::Mode::read_only);
    auto naive_stmt = naive->prepare(
        "SELECT lane, start_ns, end_ns, kind, name, category, step, microbatch, stage, phase, "
        "bytes, copy_kind, correlation, args FROM event WHERE lane = ?1 AND start_ns < ?2 AND "
        "end_ns > ?3 ORDER BY start_ns");
    for (int q = 0; q < 30; ++q) {
        const std::int64_t t0 =
            static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(span - window));
        auto start = Clock::now();
        auto got = trace->events_in_window(lane.id, t0, t0 + window);
        bounded_ms.push_back(seconds_since(start) * 1e3);
        returned += got->size();
        start = Clock::now();
        naive_stmt->reset();
        naive_stmt->bind(1, std::int64_t{lane.id.value});
        naive_stmt->bind(2, t0 + window);
        naive_stmt->bind(3, t0);
        std::size_t rows = 0;
        while (naive_stmt->step()) {
            ++rows;
        }
        naive_ms.push_back(seconds_since(start) * 1e3);
    }
    std::sort(bounded_ms.begin(), bounded_ms.end());
    std::sort(naive_ms.begin(), naive_ms.end());
    const double bounded = bounded_ms[bounded_ms.size() / 2];
    const double plain = naive_ms[naive_ms.size() / 2];
    TextTable reader_table(
        {"reader (10M events, 30 windows)", "events/window", "median ms", "p90 ms", "vs baseline",
         "target"},
        {Align::left, Align::right, Align::right, Align::right, Align::right, Align::left});
    char r[5][32];
    std::snprintf(r[0], 32, "%.2f", plain);
    std::snprintf(r[1], 32, "%.2f", naive_ms[naive_ms.size() * 9 / 10]);
    std::snprintf(r[2], 32, "%.2f", bounded);
    std::snprintf(r[3], 32, "%.2f", bounded_ms[bounded_ms.size() * 9 / 10]);
    std::snprintf(r[4], 32, "%.1fx faster", plain / bounded);
    const std::string per_window = std::to_string(returned / bounded_ms.size());
    reader_table.add_row({"baseline: start < t1 AND end > t0", per_window, r[0], r[1], "1.0x", ""});
    reader_table.add_row(
        {"events_in_window (max-duration bound)", per_window, r[2], r[3], r[4], "< 10 ms"});
    std::printf("\n%s", reader_table.render().c_str());
    bench::remove_run_file(path);
    bench::remove_run_file(run_path);
    return 0;
}
