// bench_nsys: the Nsight Systems SQLite importer's throughput, measured as bench_kineto
// measures the Kineto importer: MB/s of the .sqlite export and events/s, wall and CPU seconds,
// against a baseline in the same run: one SQLite scan of every row of the activity tables the
// importer reads (kernels, copies, runtime calls, NVTX), decoding their columns and nothing
// else.
//
//   bench_nsys [--events 750000] [--file export.sqlite]
//
// The synthetic export (cached in /tmp) has the tables and columns of `nsys export --type
// sqlite` that the importer reads: per step an NVTX range, kernels on two streams with their
// cudaLaunchKernel calls, an NCCL kernel every 50 and a copy every 97.
#include <sqlite3.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <string>

#include "core/import/importer.h"
#include "core/trace/memory_sink.h"
#include "import_timing.h"

using namespace fulcrum;
using namespace fulcrum::bench;
namespace fs = std::filesystem;

namespace {

constexpr const char* kSchema = R"(
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO StringIds VALUES
  (1, 'cudaLaunchKernel_v7000'), (2, 'cudaMemcpyAsync_v3020'),
  (3, 'sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas'),
  (4, 'sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n'),
  (5, 'ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)'),
  (6, 'ncclDevKernel_AllReduce_Sum_bf16_RING_LL'), (7, 'python'), (8, 'dataloader');
CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER);
CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
CREATE TABLE TARGET_INFO_GPU (id INTEGER NOT NULL, name TEXT, busLocation TEXT);
INSERT INTO TARGET_INFO_GPU VALUES (0, 'NVIDIA H100 80GB HBM3', '0000:18:00.0');
CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1700000000000000000, 'x', 'y');
CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER PRIMARY KEY, name TEXT, label TEXT);
INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (1, 'CUDA_MEMCPY_OPER_HTOD', 'Host-to-Device');
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
  deviceId INTEGER, contextId INTEGER, streamId INTEGER, correlationId INTEGER,
  globalPid INTEGER, demangledName INTEGER, shortName INTEGER, mangledName INTEGER,
  gridX INTEGER, blockX INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL,
  deviceId INTEGER, contextId INTEGER, streamId INTEGER, correlationId INTEGER,
  globalPid INTEGER, bytes INTEGER, copyKind INTEGER, srcKind INTEGER, dstKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
  eventClass INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER,
  returnValue INTEGER);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
  rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER,
  endGlobalTid INTEGER, textId INTEGER, domainId INTEGER, uint64Value INTEGER,
  int64Value INTEGER, doubleValue REAL, jsonText TEXT);
)";

constexpr long long kPid = 4242;
constexpr long long kGlobalPid = kPid * 0x1000000;
constexpr long long kMainThread = kGlobalPid + kPid;

bool exec(sqlite3* db, const char* sql) {
    char* message = nullptr;
    if (sqlite3_exec(db, sql, nullptr, nullptr, &message) != SQLITE_OK) {
        std::fprintf(stderr, "generating the export failed: %s\n", message ? message : "?");
        sqlite3_free(message);
        return false;
    }
    return true;
}

// About `events` activity rows: a kernel and its launch per operation.
bool generate(const std::string& path, long long events) {
    fs::remove(path);
    sqlite3* db = nullptr;
    if (sqlite3_open(path.c_str(), &db) != SQLITE_OK)
        return false;
    bool ok = exec(db, "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; BEGIN;") &&
              exec(db, kSchema);
    char sql[512];
    std::snprintf(sql, sizeof sql,
                  "INSERT INTO PROCESSES VALUES (%lld, %lld, 'train.py'); INSERT INTO "
                  "ThreadNames VALUES (7, 0, %lld);",
                  kGlobalPid, kPid, kMainThread);
    ok = ok && exec(db, sql);
    sqlite3_stmt *kernel = nullptr, *runtime = nullptr, *memcpy = nullptr, *nvtx = nullptr;
    sqlite3_prepare_v2(db,
                       "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?1, ?2, 0, 1, ?3, ?4, ?5, "
                       "?6, ?7, 0, 132, 384)",
                       -1, &kernel, nullptr);
    sqlite3_prepare_v2(db,
                       "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?1, ?2, 0, ?3, ?4, ?5, 0)",
                       -1, &runtime, nullptr);
    sqlite3_prepare_v2(db,
                       "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?1, ?2, 0, 1, 21, ?3, ?4, "
                       "4194304, 1, 0, 2)",
                       -1, &memcpy, nullptr);
    sqlite3_prepare_v2(db,
                       "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, "
                       "domainId) VALUES (?1, ?2, 59, ?3, ?4, 0)",
                       -1, &nvtx, nullptr);
    auto run = [&](sqlite3_stmt* stmt) {
        ok = ok && sqlite3_step(stmt) == SQLITE_DONE;
        sqlite3_reset(stmt);
    };
    long long t = 1'000'000, written = 0;
    for (int step = 0; ok && written < events; ++step) {
        const long long step_start = t;
        for (int op = 0; op < 5000; ++op, ++written) {
            const long long correlation = written + 1;
            sqlite3_bind_int64(runtime, 1, t);
            sqlite3_bind_int64(runtime, 2, t + 4250);
            sqlite3_bind_int64(runtime, 3, kMainThread);
            sqlite3_bind_int64(runtime, 4, correlation);
            sqlite3_bind_int64(runtime, 5, 1);
            run(runtime);
            const bool nccl = op % 50 == 0;
            if (op % 97 == 0) {
                sqlite3_bind_int64(memcpy, 1, t + 5000);
                sqlite3_bind_int64(memcpy, 2, t + 17000);
                sqlite3_bind_int64(memcpy, 3, correlation);
                sqlite3_bind_int64(memcpy, 4, kGlobalPid);
                run(memcpy);
            } else {
                sqlite3_bind_int64(kernel, 1, t + 5000);
                sqlite3_bind_int64(kernel, 2, t + (nccl ? 125000 : 40750));
                sqlite3_bind_int64(kernel, 3, nccl ? 20 : 7);
                sqlite3_bind_int64(kernel, 4, correlation);
                sqlite3_bind_int64(kernel, 5, kGlobalPid);
                sqlite3_bind_int64(kernel, 6, nccl ? 5 : 3);
                sqlite3_bind_int64(kernel, 7, nccl ? 6 : 4);
                run(kernel);
            }
            t += 40000;
        }
        const std::string name = "step " + std::to_string(step);
        sqlite3_bind_int64(nvtx, 1, step_start);
        sqlite3_bind_int64(nvtx, 2, t);
        sqlite3_bind_text(nvtx, 3, name.c_str(), -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(nvtx, 4, kMainThread);
        run(nvtx);
        t += 10000;
    }
    for (sqlite3_stmt* stmt : {kernel, runtime, memcpy, nvtx})
        sqlite3_finalize(stmt);
    ok = ok && exec(db, "COMMIT;");
    sqlite3_close(db);
    return ok;
}

// The baseline: every row of the tables the importer reads, each column decoded once.
long long scan_rows(const std::string& path) {
    sqlite3* db = nullptr;
    sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
    long long rows = 0, sum = 0;
    for (const char* table : {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                              "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"}) {
        sqlite3_stmt* stmt = nullptr;
        const std::string sql = std::string("SELECT * FROM ") + table;
        sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr);
        while (sqlite3_step(stmt) == SQLITE_ROW) {
            for (int c = 0; c < sqlite3_column_count(stmt); ++c)
                sum += sqlite3_column_int64(stmt, c);
            ++rows;
        }
        sqlite3_finalize(stmt);
    }
    sqlite3_close(db);
    return sum == 0 ? 0 : rows;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{
        "bench_nsys: Nsight Systems SQLite import MB/s and events/s against a plain "
        "SQLite scan of the same rows"};
    long long events = 750'000;
    std::string file;
    app.add_option("--events", events, "kernels and copies in the synthetic export");
    app.add_option("--file", file, "an nsys SQLite export to import instead");
    CLI11_PARSE(app, argc, argv);
    if (file.empty()) {
        file = "/tmp/fulcrum-bench-nsys-" + std::to_string(events) + ".sqlite";
        std::error_code ec;
        if (!fs::exists(file, ec)) {
            std::printf("generating %s ...\n", file.c_str());
            if (!generate(file + ".partial", events))
                return 1;
            fs::rename(file + ".partial", file);
        }
    }
    const double size_mb = double(fs::file_size(file)) / 1e6;
    long long rows = 0;
    const Timing scan = timed([&] { rows = scan_rows(file); });
    if (rows == 0) {
        std::fprintf(stderr, "'%s' has no activity rows\n", file.c_str());
        return 1;
    }
    auto importer = importer::make_nsys_importer();
    MemorySink counting(0);
    Status parsed;
    const Timing parse =
        timed([&] { parsed = importer->read(importer::ImportInput{file}, counting, {}); });
    if (!parsed) {
        std::fprintf(stderr, "read failed: %s\n", parsed.error().message.c_str());
        return 1;
    }
    const fs::path dir = fs::temp_directory_path() / "fulcrum-bench-nsys";
    fs::remove_all(dir);
    fs::create_directories(dir);
    importer::ImportOptions options;
    options.overwrite = true;
    Result<importer::ImportReport> run = importer::ImportReport{};
    const Timing whole = timed(
        [&] { run = importer::import_files({file}, (dir / "run.fulcrum").string(), options); });
    if (!run) {
        std::fprintf(stderr, "import_files failed: %s\n", run.error().message.c_str());
        return 1;
    }
    print_header();
    print_row("baseline: SQLite scan of the rows", scan, size_mb, scan);
    print_row("read (no store)", parse, size_mb, scan);
    print_row("fulcrum import (rank file + merge)", whole, size_mb, scan);
    const double events_imported = double(run->events);
    std::printf(
        "file %.1f MB, %lld rows, %lld events: %.2f M events/s read, %.2f M events/s "
        "imported (%.2f M per CPU-second); peak RSS %.1f MB\n",
        size_mb, rows, static_cast<long long>(run->events), events_imported / parse.wall / 1e6,
        events_imported / whole.wall / 1e6, events_imported / whole.cpu / 1e6, peak_rss_mb());
    fs::remove_all(dir);
    return 0;
}
