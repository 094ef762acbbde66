// Diff tests of the Nsight Systems SQLite importer: small exports written by SQL in the test
// (the schema of `nsys export --type sqlite`, docs/sources.md, "Trace formats"), imported, then
// checked by query.
#include <sqlite3.h>

#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <filesystem>
#include <fstream>
#include <map>

#include "core/analysis/run_analysis.h"
#include "core/import/importer.h"
#include "core/store/merge.h"
#include "core/store/trace_reader.h"
#include "core/store/trace_writer.h"
#include "tests/import/same_run.h"

using namespace fulcrum;

namespace {

struct Fixture {
    std::vector<std::int64_t> pids = {100};
    std::int64_t utc_start = 1'700'000'000'000'000'000;
    bool kernels = true;
    bool short_name = true;
    bool memcpy = true;
    bool memset = true;
    bool runtime = true;
    bool nvtx = true;
    bool negative_kernel = false;
    bool fulcrum_domain = false;
};

std::int64_t global_tid(std::int64_t pid, std::int64_t tid) {
    return pid * 0x1000000 + tid;
}

std::string n(std::int64_t value) {
    return std::to_string(value);
}

std::string fixture_sql(const Fixture& f) {
    std::string sql = R"(
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO StringIds VALUES
  (1, 'cudaLaunchKernel_v7000'), (2, 'cudaMemcpyAsync_v3020'),
  (3, 'gemm_kernel(float*, int)'), (4, 'gemm_kernel'),
  (5, 'ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)'),
  (6, 'ncclDevKernel_AllReduce_Sum_f32_RING_LL'), (7, 'python'), (8, 'dataloader'),
  (9, 'registered forward'), (10, 'cudaMemsetAsync_v3020'), (11, 'cudaStreamSynchronize_v3020');
CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER);
CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
CREATE TABLE TARGET_INFO_GPU (id INTEGER NOT NULL, name TEXT, busLocation TEXT);
INSERT INTO TARGET_INFO_GPU VALUES (0, 'NVIDIA H100 80GB HBM3', '0000:18:00.0');
CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER PRIMARY KEY, name TEXT, label TEXT);
INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (1, 'CUDA_MEMCPY_OPER_HTOD', 'Host-to-Device');
)";
    sql +=
        "INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (" + n(f.utc_start) + ", 'x', 'y');\n";
    if (f.kernels) {
        sql += std::string(
                   "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, "
                   "end INTEGER NOT NULL, deviceId INTEGER, contextId INTEGER, streamId "
                   "INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName "
                   "INTEGER, ") +
               (f.short_name ? "shortName INTEGER, " : "") +
               "mangledName INTEGER, gridX INTEGER, blockX INTEGER);\n";
    }
    if (f.memcpy) {
        sql +=
            "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT "
            "NULL, deviceId INTEGER, contextId INTEGER, streamId INTEGER, correlationId "
            "INTEGER, globalPid INTEGER, bytes INTEGER, copyKind INTEGER, srcKind INTEGER, "
            "dstKind INTEGER);\n";
    }
    if (f.memset) {
        sql +=
            "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT "
            "NULL, deviceId INTEGER, contextId INTEGER, streamId INTEGER, correlationId "
            "INTEGER, globalPid INTEGER, value INTEGER, bytes INTEGER);\n";
    }
    if (f.runtime) {
        sql +=
            "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT "
            "NULL, eventClass INTEGER, globalTid INTEGER, correlationId INTEGER, nameId "
            "INTEGER, returnValue INTEGER);\n";
    }
    if (f.nvtx) {
        sql +=
            "CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER "
            "NOT NULL, rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid "
            "INTEGER, endGlobalTid INTEGER, textId INTEGER, domainId INTEGER, uint64Value "
            "INTEGER, int64Value INTEGER, doubleValue REAL, jsonText TEXT);\n";
    }
    for (std::int64_t pid : f.pids) {
        const std::string gpid = n(global_tid(pid, 0)), main = n(global_tid(pid, pid)),
                          loader = n(global_tid(pid, pid + 1));
        // Correlation ids differ per process, as CUPTI's do not repeat within one.
        const std::int64_t c = pid * 100;
        sql += "INSERT INTO PROCESSES VALUES (" + gpid + ", " + n(pid) + ", 'train.py');\n";
        sql += "INSERT INTO ThreadNames VALUES (7, 0, " + main + "), (8, 0, " + loader + ");\n";
        if (f.kernels) {
            const std::string name = f.short_name ? "3, 4" : "3";
            sql += "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1000, 3000, 0, 1, 7, " +
                   n(c + 11) + ", " + gpid + ", " + name + ", 0, 1, 1), (3500, 8000, 0, 1, 13, " +
                   n(c + 12) + ", " + gpid + ", " + (f.short_name ? "5, 6" : "5") + ", 0, 1, 1);\n";
            if (f.negative_kernel) {
                sql += "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (5000, 4000, 0, 1, 7, " +
                       n(c + 99) + ", " + gpid + ", " + name + ", 0, 1, 1);\n";
            }
        }
        if (f.memcpy) {
            sql += "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (500, 900, 0, 1, 7, " +
                   n(c + 13) + ", " + gpid + ", 4096, 1, 0, 2);\n";
        }
        if (f.memset) {
            sql += "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (9000, 9100, 0, 1, 7, " +
                   n(c + 14) + ", " + gpid + ", 0, 256);\n";
        }
        if (f.runtime) {
            sql += "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (400, 450, 0, " + main + ", " +
                   n(c + 13) + ", 2, 0), (950, 980, 0, " + main + ", " + n(c + 11) +
                   ", 1, 0), (990, 1000, 0, " + main + ", " + n(c + 12) +
                   ", 1, 0), (8900, 8950, 0, " + main + ", " + n(c + 14) +
                   ", 10, 0), (9000, 9200, 0, " + main + ", " + n(c + 15) + ", 11, 0);\n";
        }
        if (f.nvtx) {
            // A domain, a push/pop range with its child (a registered string in that domain),
            // a start/end range on another thread and a mark.
            sql +=
                "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId, "
                "domainId) VALUES (10, NULL, 75, 'myapp', " +
                main +
                ", NULL, 1), "
                "(300, 9500, 59, 'step 0', " +
                main +
                ", NULL, 0), "
                "(500, 5000, 59, NULL, " +
                main +
                ", 9, 1), "
                "(100, 200, 60, 'data loading', " +
                loader +
                ", NULL, 0), "
                "(9600, NULL, 34, 'checkpoint', " +
                main + ", NULL, 0);\n";
            if (f.fulcrum_domain) {
                sql +=
                    "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, "
                    "domainId, category, uint64Value) VALUES (11, NULL, 75, 'fulcrum', " +
                    main +
                    ", 2, NULL, NULL), "
                    "(20, NULL, 34, 'fulcrum.rank {\"rank\":3,\"world\":4,\"dp\":1,\"pp\":1,"
                    "\"cp\":0,\"tp\":0,\"device\":0}', " +
                    main +
                    ", 2, NULL, NULL), "
                    "(1000, 4000, 59, 'forward step=2 mb=1 stage=1 phase=fwd', " +
                    main +
                    ", 2, 1, NULL), "
                    "(4000, 4500, 59, 'send activations step=2 mb=1 stage=1', " +
                    main + ", 2, 3, 65536);\n";
            }
        }
    }
    return sql;
}

bool write_fixture(const std::string& path, const Fixture& f) {
    std::filesystem::remove(path);
    sqlite3* db = nullptr;
    if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
        sqlite3_close(db);
        return false;
    }
    char* message = nullptr;
    const int rc = sqlite3_exec(db, fixture_sql(f).c_str(), nullptr, nullptr, &message);
    if (rc != SQLITE_OK) {
        qWarning("fixture SQL failed: %s", message != nullptr ? message : "?");
    }
    sqlite3_free(message);
    sqlite3_close(db);
    return rc == SQLITE_OK;
}

struct Imported {
    LaneInfo lane;
    Event event;
    std::string name;
    std::string args;
};

std::vector<Imported> all_events(const store::TraceReader& reader) {
    std::vector<Imported> out;
    for (const LaneInfo& lane : reader.lanes()) {
        auto status = reader.for_each_event(lane.id, [&](const Event& event) {
            out.push_back({lane, event, std::string(reader.string(event.name)),
                           std::string(reader.string(event.args))});
            return true;
        });
        if (!status) {
            qWarning("%s", status.error().message.c_str());
        }
    }
    return out;
}

const Imported* find(const std::vector<Imported>& events, std::int32_t rank,
                     std::string_view name) {
    for (const auto& e : events) {
        if (e.lane.rank == rank && e.name == name)
            return &e;
    }
    return nullptr;
}

std::map<EventKind, int> kinds_of_rank(const std::vector<Imported>& events, std::int32_t rank) {
    std::map<EventKind, int> kinds;
    for (const auto& e : events) {
        if (e.lane.rank == rank)
            ++kinds[e.event.kind];
    }
    return kinds;
}

}  // namespace

class TestNsysImport : public QObject {
    Q_OBJECT

    QTemporaryDir dir_;
    std::string path(const char* name) const { return dir_.filePath(name).toStdString(); }

private slots:
    void sniffing() {
        const importer::Importer* nsys = nullptr;
        for (const auto* candidate : importer::importers()) {
            if (candidate->name() == "nsys-sqlite")
                nsys = candidate;
        }
        QVERIFY(nsys != nullptr);
        std::string head("SQLite format 3\0", 16);
        head.resize(100, '\0');
        QVERIFY(nsys->sniff(head));
        QVERIFY(!nsys->sniff("{\"traceEvents\": []}"));
        QVERIFY(!nsys->sniff(std::string_view("SQLite format 3", 15)));
        // A Fulcrum run: application_id 0x46554C43 at offset 68, big-endian.
        std::string fulcrum_head = head;
        fulcrum_head[68] = 0x46, fulcrum_head[69] = 0x55, fulcrum_head[70] = 0x4C,
        fulcrum_head[71] = 0x43;
        QVERIFY(!nsys->sniff(fulcrum_head));

        // A real Fulcrum file is not sniffed; an export is.
        const std::string run = path("sniff.fulcrum");
        {
            RunInfo info;
            auto writer = store::TraceWriter::create(run, info);
            QVERIFY(writer);
            QVERIFY((*writer)->close());
        }
        auto found = importer::find_importer(run);
        QVERIFY(found);
        QVERIFY(*found == nullptr);
        const std::string file = path("sniff.sqlite");
        QVERIFY(write_fixture(file, {}));
        found = importer::find_importer(file);
        QVERIFY(found && *found == nsys);
    }

    void two_files_two_ranks() {
        const std::string f0 = path("rank0.sqlite"), f1 = path("rank1.sqlite");
        Fixture a;
        QVERIFY(write_fixture(f0, a));
        Fixture b;
        b.pids = {200};
        b.utc_start = a.utc_start + 1000;
        QVERIFY(write_fixture(f1, b));
        const std::string out = path("two.fulcrum");
        auto report = importer::import_files({f0, f1}, out);
        QVERIFY2(report, report ? "" : report.error().message.c_str());
        QCOMPARE(report->format, std::string("nsys-sqlite"));
        QCOMPARE(report->ranks, 2);
        QCOMPARE(report->events, std::int64_t(26));
        QCOMPARE(report->skipped, std::int64_t(0));

        auto reader = store::TraceReader::open(out);
        QVERIFY(reader);
        QCOMPARE(reader->run().origin, RunOrigin::imported);
        QCOMPARE(reader->ranks().size(), std::size_t(2));
        QCOMPARE(reader->ranks()[0].rank, 0);
        QCOMPARE(reader->ranks()[0].pid, std::int64_t(100));
        QCOMPARE(reader->ranks()[0].device, 0);
        QCOMPARE(reader->ranks()[1].rank, 1);
        QCOMPARE(reader->ranks()[1].pid, std::int64_t(200));
        QCOMPARE(reader->ranks()[0].dp, -1);

        // Lanes: two streams and two named threads per rank.
        std::map<std::pair<int, std::string>, LaneKind> lanes;
        for (const auto& lane : reader->lanes())
            lanes[{lane.rank, lane.name}] = lane.kind;
        QCOMPARE(lanes.size(), std::size_t(8));
        for (int rank : {0, 1}) {
            QCOMPARE(lanes.at({rank, "stream 7 (device 0)"}), LaneKind::gpu_stream);
            QCOMPARE(lanes.at({rank, "stream 13 (device 0)"}), LaneKind::gpu_stream);
            QCOMPARE(lanes.at({rank, "python"}), LaneKind::host_thread);
            QCOMPARE(lanes.at({rank, "dataloader"}), LaneKind::host_thread);
        }

        const auto events = all_events(*reader);
        QCOMPARE(events.size(), std::size_t(26));
        for (int rank : {0, 1}) {
            auto kinds = kinds_of_rank(events, rank);
            QCOMPARE(kinds[EventKind::kernel], 1);
            QCOMPARE(kinds[EventKind::collective], 1);
            QCOMPARE(kinds[EventKind::memcpy], 1);
            QCOMPARE(kinds[EventKind::memset], 1);
            QCOMPARE(kinds[EventKind::api], 4);
            QCOMPARE(kinds[EventKind::sync], 1);
            QCOMPARE(kinds[EventKind::range], 3);
            QCOMPARE(kinds[EventKind::mark], 1);
        }

        // Kernels: short names, categories, and the launch that correlates with each.
        const auto* gemm = find(events, 0, "gemm_kernel");
        QVERIFY(gemm);
        QCOMPARE(gemm->event.kind, EventKind::kernel);
        QCOMPARE(gemm->event.category, Category::compute);
        QCOMPARE(gemm->lane.name, std::string("stream 7 (device 0)"));
        QCOMPARE(gemm->event.duration_ns(), std::int64_t(2000));
        const auto* nccl = find(events, 0, "ncclDevKernel_AllReduce_Sum_f32_RING_LL");
        QVERIFY(nccl);
        QCOMPARE(nccl->event.kind, EventKind::collective);
        QCOMPARE(nccl->event.category, Category::communication);
        QCOMPARE(nccl->lane.name, std::string("stream 13 (device 0)"));
        int launches = 0;
        for (const auto& e : events) {
            if (e.lane.rank == 0 && e.name == "cudaLaunchKernel") {
                ++launches;
                QCOMPARE(e.event.kind, EventKind::api);
                QCOMPARE(e.event.category, Category::runtime);
                QCOMPARE(e.lane.name, std::string("python"));
                QVERIFY(e.event.correlation == gemm->event.correlation ||
                        e.event.correlation == nccl->event.correlation);
                if (e.event.correlation == gemm->event.correlation) {
                    QCOMPARE(gemm->event.start_ns - e.event.start_ns, std::int64_t(50));
                }
            }
        }
        QCOMPARE(launches, 2);
        QCOMPARE(gemm->event.correlation, std::int64_t(10011));

        // Copies and memsets.
        const auto* copy = find(events, 1, "Memcpy HtoD");
        QVERIFY(copy);
        QCOMPARE(copy->event.kind, EventKind::memcpy);
        QCOMPARE(copy->event.bytes, std::int64_t(4096));
        QCOMPARE(copy->event.copy_kind, CopyKind::host_to_device);
        QCOMPARE(copy->event.category, Category::offload);
        QCOMPARE(copy->event.correlation, find(events, 1, "cudaMemcpyAsync")->event.correlation);
        const auto* memset = find(events, 1, "Memset");
        QVERIFY(memset);
        QCOMPARE(memset->event.bytes, std::int64_t(256));
        QCOMPARE(memset->event.category, Category::memory);
        QCOMPARE(find(events, 1, "cudaStreamSynchronize")->event.kind, EventKind::sync);

        // NVTX: the registered-string range of domain myapp nests in "step 0"; the start/end
        // range is on the dataloader thread; the mark is an instant.
        const auto* step = find(events, 0, "step 0");
        const auto* forward = find(events, 0, "registered forward");
        QVERIFY(step && forward);
        QCOMPARE(forward->lane.id, step->lane.id);
        QVERIFY(forward->event.start_ns >= step->event.start_ns);
        QVERIFY(forward->event.end_ns <= step->event.end_ns);
        QCOMPARE(forward->args, std::string("{\"domain\":\"myapp\"}"));
        QCOMPARE(step->args, std::string());
        QCOMPARE(forward->event.category, Category::other);
        QCOMPARE(find(events, 0, "data loading")->lane.name, std::string("dataloader"));
        const auto* mark = find(events, 0, "checkpoint");
        QVERIFY(mark);
        QCOMPARE(mark->event.kind, EventKind::mark);
        QCOMPARE(mark->event.end_ns, mark->event.start_ns);
        // Ranks are aligned by the sessions' UTC starts: rank 1 started 1 µs later.
        QCOMPARE(find(events, 1, "gemm_kernel")->event.start_ns - gemm->event.start_ns,
                 std::int64_t(1000));

        // Every analysis runs; what a foreign trace cannot give is said, not zeroed.
        auto trace = analysis::load_run_trace(*reader);
        QVERIFY(trace);
        auto analysis = analysis::analyze_run(*trace);
        QVERIFY2(analysis, analysis ? "" : analysis.error().message.c_str());
        bool said = false;
        for (const auto& note : analysis->notes) {
            said = said || note.find("no workload table") != std::string::npos;
        }
        QVERIFY(said);
    }

    void several_processes_in_one_file() {
        const std::string file = path("both.sqlite"), out = path("both.fulcrum");
        Fixture f;
        f.pids = {100, 200};
        QVERIFY(write_fixture(file, f));
        auto report = importer::import_files({file}, out);
        QVERIFY2(report, report ? "" : report.error().message.c_str());
        QCOMPARE(report->ranks, 2);
        QCOMPARE(report->events, std::int64_t(26));
        auto reader = store::TraceReader::open(out);
        QVERIFY(reader);
        QCOMPARE(reader->ranks()[0].pid, std::int64_t(100));
        QCOMPARE(reader->ranks()[1].pid, std::int64_t(200));
        QCOMPARE(reader->ranks()[1].rank, 1);
        // Said as a warning and logged as a note, not as a skipped record: nothing was dropped.
        auto log = reader->import_log();
        QVERIFY(log);
        QCOMPARE(log->size(), std::size_t(1));
        QCOMPARE(log->front().skipped, std::int64_t(0));
        QVERIFY(log->front().reason.rfind("note: ", 0) == 0);
        QCOMPARE(report->skipped, std::int64_t(0));
        QCOMPARE(report->notes, std::int64_t(1));
        QCOMPARE(report->warnings.size(), std::size_t(1));
        QVERIFY(report->warnings.front().find("holds 2 processes") != std::string::npos);
        QVERIFY(report->warnings.front().find("pid 200 (train.py) -> rank 1") != std::string::npos);
    }

    // An imported run keeps its events in blocks; its copy as rows for SQL is the same run,
    // row for row; here with two processes (two ranks), the fulcrum domain's marks and a
    // negative duration logged.
    void rows_copy_is_the_imported_run() {
        const std::string file = path("copy.sqlite");
        const std::string run = path("copy.fulcrum"), rows = path("copy-rows.fulcrum");
        Fixture f;
        f.pids = {100, 200};
        f.fulcrum_domain = true;
        f.negative_kernel = true;
        QVERIFY(write_fixture(file, f));
        auto report = importer::import_files({file}, run);
        QVERIFY2(report, report ? "" : report.error().message.c_str());
        QVERIFY(report->skipped > 0);
        QCOMPARE(report->ranks, 2);
        auto copied = store::write_rows_copy(run, rows);
        QVERIFY2(copied, copied ? "" : copied.error().message.c_str());
        QCOMPARE(*copied, report->events);
        const std::string difference = test::run_difference(run, rows);
        QVERIFY2(difference.empty(), difference.c_str());
    }

    void missing_optional_tables() {
        const std::string file = path("lean.sqlite"), out = path("lean.fulcrum");
        Fixture f;
        f.memset = false;
        f.nvtx = false;
        QVERIFY(write_fixture(file, f));
        auto report = importer::import_files({file}, out);
        QVERIFY2(report, report ? "" : report.error().message.c_str());
        QCOMPARE(report->events, std::int64_t(8));  // 2 kernels, 1 copy, 5 API calls
        QCOMPARE(report->skipped, std::int64_t(0));
    }

    void kernel_table_without_short_name() {
        const std::string file = path("old.sqlite"), out = path("old.fulcrum");
        Fixture f;
        f.short_name = false;
        QVERIFY(write_fixture(file, f));
        auto report = importer::import_files({file}, out);
        QVERIFY2(report, report ? "" : report.error().message.c_str());
        auto reader = store::TraceReader::open(out);
        QVERIFY(reader);
        const auto events = all_events(*reader);
        QVERIFY(find(events, 0, "gemm_kernel(float*, int)"));
        const auto* nccl = find(
            events, 0, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
        QVERIFY(nccl);
        QCOMPARE(nccl->event.kind, EventKind::collective);
    }

    void nvtx_only() {
        const std::string file = path("nvtx.sqlite"), out = path("nvtx.fulcrum");
        Fixture f;
        f.kernels = f.memcpy = f.memset = f.runtime = false;
        QVERIFY(write_fixture(file, f));
        auto report = importer::import_files({file}, out);
        QVERIFY2(report, report ? "" : report.error().message.c_str());
        QCOMPARE(report->events, std::int64_t(4));
        auto reader = store::TraceReader::open(out);
        QVERIFY(reader);
        const auto kinds = kinds_of_rank(all_events(*reader), 0);
        QCOMPARE(kinds.at(EventKind::range), 3);
        QCOMPARE(kinds.at(EventKind::mark), 1);
        auto trace = analysis::load_run_trace(*reader);
        QVERIFY(trace);
        QVERIFY(analysis::analyze_run(*trace));
    }

    void negative_duration_is_logged() {
        const std::string file = path("neg.sqlite"), out = path("neg.fulcrum");
        Fixture f;
        f.negative_kernel = true;
        QVERIFY(write_fixture(file, f));
        auto report = importer::import_files({file}, out);
        QVERIFY2(report, report ? "" : report.error().message.c_str());
        QCOMPARE(report->events, std::int64_t(13));
        QCOMPARE(report->skipped, std::int64_t(1));
        auto reader = store::TraceReader::open(out);
        QVERIFY(reader);
        auto log = reader->import_log();
        QVERIFY(log);
        QCOMPARE(log->size(), std::size_t(1));
        QCOMPARE(log->front().source, std::string("neg.sqlite"));
        QCOMPARE(log->front().record_index, std::int64_t(3));
        QCOMPARE(log->front().skipped, std::int64_t(1));
        QVERIFY(log->front().reason.rfind("CUPTI_ACTIVITY_KIND_KERNEL: negative duration", 0) == 0);
        QVERIFY(log->front().record.find("start=5000 end=4000") != std::string::npos);
    }

    void sqlite_but_not_nsys() {
        const std::string file = path("other.sqlite"), out = path("other.fulcrum");
        sqlite3* db = nullptr;
        QCOMPARE(sqlite3_open(file.c_str(), &db), SQLITE_OK);
        QCOMPARE(sqlite3_exec(db, "CREATE TABLE t (x); INSERT INTO t VALUES (1);", nullptr, nullptr,
                              nullptr),
                 SQLITE_OK);
        sqlite3_close(db);
        auto report = importer::import_files({file}, out);
        QVERIFY(!report);
        QVERIFY2(report.error().message.find(
                     "is an SQLite database but not an Nsight Systems export") != std::string::npos,
                 report.error().message.c_str());
        QVERIFY(!std::filesystem::exists(out));
    }

    void truncated_file() {
        const std::string file = path("full.sqlite");
        QVERIFY(write_fixture(file, {}));
        const auto size = std::filesystem::file_size(file);
        QVERIFY(size > 8192);
        std::string bytes(size, '\0');
        std::ifstream(file, std::ios::binary)
            .read(bytes.data(), static_cast<std::streamsize>(size));
        for (std::size_t keep : {std::size_t(4096), std::size_t(size / 2), std::size_t(100)}) {
            const std::string cut = path("cut.sqlite"), out = path("cut.fulcrum");
            std::ofstream(cut, std::ios::binary | std::ios::trunc)
                .write(bytes.data(), static_cast<std::streamsize>(keep));
            auto report = importer::import_files({cut}, out);
            QVERIFY2(!report, qPrintable(QString("kept %1 bytes").arg(keep)));
            QVERIFY(!report.error().message.empty());
            QVERIFY(!std::filesystem::exists(out));
        }
    }

    void fulcrum_domain() {
        const std::string file = path("fulcrum.sqlite"), out = path("fulcrum-domain.fulcrum");
        Fixture f;
        f.fulcrum_domain = true;
        QVERIFY(write_fixture(file, f));
        auto report = importer::import_files({file}, out);
        QVERIFY2(report, report ? "" : report.error().message.c_str());
        auto reader = store::TraceReader::open(out);
        QVERIFY(reader);
        QCOMPARE(reader->ranks().size(), std::size_t(1));
        QCOMPARE(reader->ranks()[0].rank, 3);
        QCOMPARE(reader->ranks()[0].pp, 1);
        QCOMPARE(reader->ranks()[0].tp, 0);
        const auto events = all_events(*reader);
        QCOMPARE(events.size(), std::size_t(15));  // the rank mark is metadata, not an event
        const auto* forward = find(events, 3, "forward");
        QVERIFY(forward);
        QCOMPARE(forward->event.step, 2);
        QCOMPARE(forward->event.microbatch, 1);
        QCOMPARE(forward->event.stage, std::int16_t(1));
        QCOMPARE(forward->event.phase, Phase::forward);
        QCOMPARE(forward->event.category, Category::compute);
        const auto* send = find(events, 3, "send activations");
        QVERIFY(send);
        QCOMPARE(send->event.kind, EventKind::collective);
        QCOMPARE(send->event.category, Category::communication);
        QCOMPARE(send->event.bytes, std::int64_t(65536));
    }

    void cli_import() {
        const std::string f0 = path("cli0.sqlite"), f1 = path("cli1.sqlite");
        QVERIFY(write_fixture(f0, {}));
        Fixture b;
        b.pids = {200};
        QVERIFY(write_fixture(f1, b));
        QProcess process;
        process.setWorkingDirectory(dir_.path());
        process.start(QStringLiteral(FULCRUM_BINARY_DIR) + "/app/fulcrum",
                      {"import", "cli0.sqlite", "cli1.sqlite", "-o", "cli.fulcrum"});
        QVERIFY(process.waitForFinished(120'000));
        const QString output = QString::fromUtf8(process.readAllStandardOutput()) +
                               QString::fromUtf8(process.readAllStandardError());
        QVERIFY2(process.exitStatus() == QProcess::NormalExit && process.exitCode() == 0,
                 qPrintable(output));
        QVERIFY2(
            output.contains("imported 2 nsys-sqlite files (2 ranks, 26 events) into cli.fulcrum"),
            qPrintable(output));
    }
};

QTEST_GUILESS_MAIN(TestNsysImport)
#include "test_nsys_import.moc"
