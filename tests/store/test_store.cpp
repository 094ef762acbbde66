// The trace store: what goes in comes out, the indexed queries answer like a full scan, a
// killed writer's file keeps its last commit, and every kind of bad file gets its own message.
#include <QTemporaryDir>
#include <QtTest>

#include <sqlite3.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "core/store/schema.h"
#include "core/store/trace_reader.h"
#include "core/store/trace_writer.h"

using namespace fulcrum;
using namespace fulcrum::store;

namespace {

RunInfo test_run() {
    RunInfo run;
    run.name = "store-test";
    run.command = "test_store";
    run.start_utc_ns = 1'795'000'000'000'000'000;
    run.config_json = R"({"dp":1})";
    run.producer = "test";
    return run;
}

Event make_event(LaneId lane, StringId name, std::int64_t start, std::int64_t end,
                 EventKind kind = EventKind::range) {
    Event e;
    e.lane = lane;
    e.name = name;
    e.start_ns = start;
    e.end_ns = end;
    e.kind = kind;
    return e;
}

void write_file(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
}

void exec_sql(const std::string& path, const char* sql) {
    sqlite3* db = nullptr;
    QCOMPARE(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    QCOMPARE(sqlite3_exec(db, sql, nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
}

// A closed trace with one lane of `count` events, for the bad-input tests to damage.
std::string small_trace(const QTemporaryDir& dir, const char* name, int count = 1000) {
    const std::string path = dir.filePath(name).toStdString();
    auto writer = TraceWriter::create(path, test_run());
    if (!writer) {
        qFatal("%s", writer.error().message.c_str());
    }
    (*writer)->add_rank(RankInfo{});
    const LaneId lane = (*writer)->add_lane(0, LaneKind::host_thread, "main");
    const StringId name_id = (*writer)->intern("work");
    for (int i = 0; i < count; ++i) {
        (*writer)->add_event(make_event(lane, name_id, i * 100, i * 100 + 50));
    }
    if (!(*writer)->close()) {
        qFatal("close failed");
    }
    return path;
}

}  // namespace

class StoreTest : public QObject {
    Q_OBJECT

private slots:
    void roundTripKeepsEveryField() {
        QTemporaryDir dir;
        const std::string path = dir.filePath("t.sqlite").toStdString();
        auto writer = TraceWriter::create(path, test_run());
        QVERIFY2(writer.ok(), writer.ok() ? "" : writer.error().message.c_str());
        RankInfo rank{.rank = 3,
                      .host = "node7",
                      .pid = 4242,
                      .device = 1,
                      .dp = 1,
                      .tp = 0,
                      .pp = 0,
                      .cp = 1,
                      .utc_offset_ns = 17};
        (*writer)->add_rank(rank);
        (*writer)->add_dropped_records(3, 5);
        const LaneId host = (*writer)->add_lane(3, LaneKind::host_thread, "main", 99);
        const LaneId stream = (*writer)->add_lane(3, LaneKind::gpu_stream, "stream 7", 7);
        Event full =
            make_event(stream, (*writer)->intern("memcpy HtoD"), 100, 250, EventKind::memcpy);
        full.category = Category::offload;
        full.step = 2;
        full.microbatch = 3;
        full.stage = 1;
        full.phase = Phase::backward;
        full.bytes = 1 << 20;
        full.copy_kind = CopyKind::host_to_device;
        full.correlation = 77;
        full.args = (*writer)->intern(R"({"chunk":4})");
        (*writer)->add_event(full);
        (*writer)->add_event(make_event(host, (*writer)->intern("step"), 0, 1000));
        (*writer)->add_workload({3, 2, 3, 11, 4096, 1024, 2048, "wlb"});
        (*writer)->add_counter({3, "memory", 500, 1.5e9});
        (*writer)->add_import_log({"x.json", 12, "negative duration", "{\"dur\":-1}"});
        QVERIFY((*writer)->close().ok());
        QCOMPARE((*writer)->stats().events_written, 2);

        auto trace = TraceReader::open(path);
        QVERIFY2(trace.ok(), trace.ok() ? "" : trace.error().message.c_str());
        QCOMPARE(trace->run().name, std::string("store-test"));
        QCOMPARE(trace->run().config_json, std::string(R"({"dp":1})"));
        QCOMPARE(trace->ranks().size(), 1u);
        const RankInfo& read_rank = trace->ranks()[0];
        QCOMPARE(read_rank.rank, 3);
        QCOMPARE(read_rank.host, std::string("node7"));
        QCOMPARE(read_rank.device, 1);
        QCOMPARE(read_rank.cp, 1);
        QCOMPARE(read_rank.utc_offset_ns, 17);
        QCOMPARE(read_rank.dropped_records, 5);
        QVERIFY(read_rank.complete);
        QVERIFY(trace->has_indexes());
        QCOMPARE(trace->lanes_of_rank(3).size(), 2u);
        QCOMPARE(trace->lanes_of_rank(0).size(), 0u);

        auto events = trace->events_in_window(stream, 0, 1000);
        QVERIFY(events.ok());
        QCOMPARE(events->size(), 1u);
        const Event& e = events->front();
        QCOMPARE(trace->string(e.name), std::string_view("memcpy HtoD"));
        QCOMPARE(e.kind, EventKind::memcpy);
        QCOMPARE(e.category, Category::offload);
        QCOMPARE(e.step, 2);
        QCOMPARE(e.microbatch, 3);
        QCOMPARE(e.stage, std::int16_t{1});
        QCOMPARE(e.phase, Phase::backward);
        QCOMPARE(e.bytes, std::int64_t{1} << 20);
        QCOMPARE(e.copy_kind, CopyKind::host_to_device);
        QCOMPARE(e.correlation, 77);
        QCOMPARE(trace->string(e.args), std::string_view(R"({"chunk":4})"));
        // Absent optional fields read back as absent, not as 0.
        auto host_events = trace->events_in_window(host, 0, 1000);
        QCOMPARE(host_events->front().step, -1);
        QCOMPARE(host_events->front().bytes, -1);
        QCOMPARE(host_events->front().phase, Phase::none);

        auto workload = trace->workload();
        QCOMPARE(workload->size(), 1u);
        QCOMPARE(workload->front().token_end, 2048);
        QCOMPARE(workload->front().balancer, std::string("wlb"));
        QCOMPARE(trace->counters()->front().value, 1.5e9);
        QCOMPARE(trace->import_log()->front().reason, std::string("negative duration"));
        // A closed file stands alone: no -wal beside it.
        QVERIFY(!std::filesystem::exists(path + "-wal"));
    }

    void windowQueryMatchesFullScan_data() {
        QTest::addColumn<qint64>("t0");
        QTest::addColumn<qint64>("t1");
        QTest::newRow("start") << qint64(0) << qint64(1000);
        QTest::newRow("middle") << qint64(400'000) << qint64(410'000);
        QTest::newRow("inside one long range") << qint64(700'123) << qint64(700'124);
        QTest::newRow("end") << qint64(990'000) << qint64(2'000'000);
        QTest::newRow("before everything") << qint64(-50) << qint64(0);
    }
    void windowQueryMatchesFullScan() {
        QFETCH(qint64, t0);
        QFETCH(qint64, t1);
        QTemporaryDir dir;
        const std::string path = dir.filePath("w.sqlite").toStdString();
        auto writer = TraceWriter::create(path, test_run());
        QVERIFY(writer.ok());
        (*writer)->add_rank(RankInfo{});
        const LaneId lane = (*writer)->add_lane(0, LaneKind::host_thread, "main");
        const LaneId other = (*writer)->add_lane(0, LaneKind::host_thread, "other");
        const StringId name = (*writer)->intern("x");
        std::mt19937_64 rng(7);
        std::vector<Event> all;
        for (int i = 0; i < 20000; ++i) {
            const std::int64_t start = static_cast<std::int64_t>(rng() % 1'000'000);
            // Mostly short events, a few long ones that span many windows, some marks.
            const std::int64_t length = i % 500 == 0 ? 300'000 : i % 7 == 0 ? 0 : rng() % 2000;
            Event e = make_event(i % 3 == 0 ? other : lane, name, start, start + length,
                                 length == 0 ? EventKind::mark : EventKind::range);
            all.push_back(e);
            (*writer)->add_event(e);
        }
        QVERIFY((*writer)->close().ok());
        auto trace = TraceReader::open(path);
        QVERIFY(trace.ok());
        auto got = trace->events_in_window(lane, t0, t1);
        QVERIFY(got.ok());
        std::vector<std::pair<std::int64_t, std::int64_t>> expected, actual;
        for (const auto& e : all) {
            const bool overlaps = e.start_ns < t1 && (e.end_ns > t0 || e.start_ns >= t0);
            if (e.lane == lane && overlaps) {
                expected.emplace_back(e.start_ns, e.end_ns);
            }
        }
        for (const auto& e : *got) {
            actual.emplace_back(e.start_ns, e.end_ns);
        }
        std::sort(expected.begin(), expected.end());
        std::sort(actual.begin(), actual.end());
        QCOMPARE(actual, expected);
    }

    void kindForStepSelectsOneStep() {
        QTemporaryDir dir;
        const std::string path = dir.filePath("k.sqlite").toStdString();
        auto writer = TraceWriter::create(path, test_run());
        (*writer)->add_rank(RankInfo{});
        const LaneId lane = (*writer)->add_lane(0, LaneKind::host_thread, "main");
        for (int step = 0; step < 5; ++step) {
            for (int i = 0; i < 10; ++i) {
                Event e = make_event(lane, (*writer)->intern("allreduce"), step * 1000 + i,
                                     step * 1000 + i + 1,
                                     i % 2 ? EventKind::collective : EventKind::range);
                e.step = step;
                (*writer)->add_event(e);
            }
        }
        QVERIFY((*writer)->close().ok());
        auto trace = TraceReader::open(path);
        auto events = trace->events_of_kind_for_step(EventKind::collective, 3);
        QVERIFY(events.ok());
        QCOMPARE(events->size(), 5u);
        for (const auto& e : *events) {
            QCOMPARE(e.step, 3);
            QCOMPARE(e.kind, EventKind::collective);
        }
        auto summary = trace->summary();
        QCOMPARE(summary->steps, (std::vector<std::int32_t>{0, 1, 2, 3, 4}));
        QCOMPARE(summary->events_by_kind[static_cast<int>(EventKind::collective)], 25);
    }

    // A process killed with SIGKILL keeps everything it had committed: at most the last
    // commit interval is lost, and the file opens, marked incomplete.
    void killedWriterKeepsItsLastCommit() {
        QTemporaryDir dir;
        const std::string path = dir.filePath("killed.sqlite").toStdString();
        const pid_t child = fork();
        QVERIFY(child >= 0);
        if (child == 0) {
            WriterOptions options;
            options.commit_interval = std::chrono::milliseconds(100);
            auto writer = TraceWriter::create(path, test_run(), options);
            if (!writer) {
                _exit(1);
            }
            (*writer)->add_rank(RankInfo{});
            const LaneId lane = (*writer)->add_lane(0, LaneKind::host_thread, "main");
            const StringId name = (*writer)->intern("before the kill");
            for (int i = 0; i < 50000; ++i) {
                (*writer)->add_event(make_event(lane, name, i * 10, i * 10 + 5));
            }
            (*writer)->flush();
            for (int i = 0; i < 100; ++i) {  // never committed: killed within the interval
                (*writer)->add_event(make_event(lane, name, 900'000'000, 900'000'001));
            }
            raise(SIGKILL);
            _exit(2);
        }
        int status = 0;
        QCOMPARE(waitpid(child, &status, 0), child);
        QVERIFY(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

        auto trace = TraceReader::open(path);
        QVERIFY2(trace.ok(), trace.ok() ? "" : trace.error().message.c_str());
        QVERIFY(trace->incomplete());
        QVERIFY(!trace->has_indexes());
        auto summary = trace->summary();
        QVERIFY(summary.ok());
        QCOMPARE(summary->event_count, 50000);
        auto window = trace->events_in_window(trace->lanes()[0].id, 1000, 2000);
        QCOMPARE(window->size(), 100u);
    }

    // Many small batches, added one event at a time and in blocks that straddle batches,
    // with a flush between and a producer that waits on a short queue: every event is stored
    // exactly once — none lost at a hand-over, none written twice.
    void smallBatchesKeepEveryEventOnce() {
        QTemporaryDir dir;
        const std::string path = dir.filePath("batches.sqlite").toStdString();
        WriterOptions options;
        options.batch_events = 64;
        options.max_queued_batches = 2;  // the producer waits: nothing is dropped
        auto writer = TraceWriter::create(path, test_run(), options);
        (*writer)->add_rank(RankInfo{});
        const LaneId lane = (*writer)->add_lane(0, LaneKind::host_thread, "main");
        const StringId name = (*writer)->intern("batch");
        constexpr int kEvents = 50000;
        for (int i = 0; i < kEvents / 2; ++i) {
            (*writer)->add_event(make_event(lane, name, i, i + 1));
        }
        (*writer)->flush();
        std::vector<Event> block;
        for (int i = kEvents / 2; i < kEvents; ++i) {
            block.push_back(make_event(lane, name, i, i + 1));
            if (block.size() == 100 || i == kEvents - 1) {
                (*writer)->add_events(block.data(), block.size());
                block.clear();
            }
        }
        QVERIFY((*writer)->close().ok());
        QCOMPARE((*writer)->stats().events_dropped, std::int64_t{0});
        QCOMPARE((*writer)->stats().events_written, std::int64_t{kEvents});
        auto trace = TraceReader::open(path);
        auto events = trace->events_in_window(lane, 0, kEvents + 1);
        QVERIFY(events.ok());
        QCOMPARE(events->size(), std::size_t{kEvents});
        std::vector<std::int64_t> starts;
        for (const Event& event : *events) {
            starts.push_back(event.start_ns);
        }
        std::sort(starts.begin(), starts.end());
        for (int i = 0; i < kEvents; ++i) {
            QCOMPARE(starts[static_cast<std::size_t>(i)], std::int64_t{i});
        }
    }

    // Overflow::drop never blocks the producer; everything is accounted for.
    void droppedEventsAreCounted() {
        QTemporaryDir dir;
        const std::string path = dir.filePath("drop.sqlite").toStdString();
        WriterOptions options;
        options.overflow = WriterOptions::Overflow::drop;
        options.batch_events = 64;
        options.max_queued_batches = 1;
        auto writer = TraceWriter::create(path, test_run(), options);
        (*writer)->add_rank(RankInfo{});
        const LaneId lane = (*writer)->add_lane(0, LaneKind::host_thread, "main");
        const StringId name = (*writer)->intern("burst");
        constexpr int kEvents = 200000;
        for (int i = 0; i < kEvents; ++i) {
            (*writer)->add_event(make_event(lane, name, i, i + 1));
        }
        QVERIFY((*writer)->close().ok());
        const WriterStats stats = (*writer)->stats();
        QCOMPARE(stats.events_written + stats.events_dropped, std::int64_t{kEvents});
        auto trace = TraceReader::open(path);
        QCOMPARE(trace->summary()->event_count, stats.events_written);
    }

    // A real full disk (a tiny tmpfs): recording stops with a message naming the problem,
    // the producer is never blocked, and what was committed before stays readable.
    void fullDiskStopsRecordingAndKeepsCommittedData() {
        QTemporaryDir dir;
        const std::string mount_point = dir.filePath("small").toStdString();
        std::filesystem::create_directory(mount_point);
        if (mount("tmpfs", mount_point.c_str(), "tmpfs", 0, "size=1m") != 0) {
            QSKIP("needs root to mount a small tmpfs");
        }
        struct Unmount {
            std::string path;
            ~Unmount() { umount2(path.c_str(), MNT_DETACH); }
        } unmount{mount_point};
        const std::string path = mount_point + "/full.sqlite";
        WriterOptions options;
        options.batch_events = 512;
        auto writer = TraceWriter::create(path, test_run(), options);
        QVERIFY2(writer.ok(), writer.ok() ? "" : writer.error().message.c_str());
        (*writer)->add_rank(RankInfo{});
        const LaneId lane = (*writer)->add_lane(0, LaneKind::host_thread, "main");
        const StringId name = (*writer)->intern("fill");
        for (int i = 0; i < 512; ++i) {
            (*writer)->add_event(make_event(lane, name, i, i + 1));
        }
        (*writer)->flush();
        QVERIFY(!(*writer)->failure().has_value());
        for (int i = 0; i < 400000; ++i) {
            (*writer)->add_event(make_event(lane, name, i, i + 1));
        }
        (*writer)->flush();
        const auto failure = (*writer)->failure();
        QVERIFY(failure.has_value());
        QVERIFY2(failure->message.find("full") != std::string::npos, failure->message.c_str());
        QVERIFY((*writer)->stats().events_dropped > 0);
        QVERIFY(!(*writer)->close().ok());
        auto trace = TraceReader::open(path);
        QVERIFY2(trace.ok(), trace.ok() ? "" : trace.error().message.c_str());
        QVERIFY(trace->summary()->event_count >= 512);
    }

    void badFilesGetTheirOwnMessage_data() {
        QTest::addColumn<QString>("damage");
        QTest::addColumn<int>("code");
        QTest::addColumn<QString>("message");
        QTest::newRow("missing") << "missing" << int(ErrorCode::io) << "No such file";
        QTest::newRow("empty") << "empty" << int(ErrorCode::not_sqlite) << "is empty";
        QTest::newRow("text") << "text" << int(ErrorCode::not_sqlite) << "not an SQLite database";
        QTest::newRow("json") << "json" << int(ErrorCode::not_sqlite) << "fulcrum import";
        QTest::newRow("foreign") << "foreign" << int(ErrorCode::foreign_sqlite)
                                 << "another program";
        QTest::newRow("nsys") << "nsys" << int(ErrorCode::foreign_sqlite) << "Nsight Systems";
        QTest::newRow("newer") << "newer" << int(ErrorCode::newer_schema) << "newer Fulcrum";
        QTest::newRow("truncated") << "truncated" << int(ErrorCode::corrupt) << "truncated";
        QTest::newRow("short header") << "short" << int(ErrorCode::corrupt) << "truncated";
        QTest::newRow("missing table")
            << "no-table" << int(ErrorCode::corrupt) << "'event' is missing";
        QTest::newRow("unmerged capture folder")
            << "rank-folder" << int(ErrorCode::invalid_input) << "fulcrum merge -o";
        QTest::newRow("empty folder")
            << "folder" << int(ErrorCode::invalid_input) << "a folder without a run.fulcrum";
    }
    void badFilesGetTheirOwnMessage() {
        QFETCH(QString, damage);
        QFETCH(int, code);
        QFETCH(QString, message);
        QTemporaryDir dir;
        std::string path = dir.filePath("bad.sqlite").toStdString();
        if (damage == "missing") {
            path = dir.filePath("nothing-here.sqlite").toStdString();
        } else if (damage == "empty") {
            write_file(path, "");
        } else if (damage == "text") {
            write_file(path, "step,time\n1,2\n");
        } else if (damage == "json") {
            write_file(path, "  {\"traceEvents\": []}");
        } else if (damage == "foreign") {
            exec_sql(path, "CREATE TABLE songs (title TEXT)");
        } else if (damage == "nsys") {
            exec_sql(path, "CREATE TABLE StringIds (id INTEGER, value TEXT)");
        } else if (damage == "newer") {
            path = small_trace(dir, "newer.sqlite");
            exec_sql(path, "PRAGMA user_version = 99");
        } else if (damage == "truncated") {
            const std::string good = small_trace(dir, "good.sqlite", 50000);
            std::filesystem::copy_file(good, path);
            std::filesystem::resize_file(path, std::filesystem::file_size(good) / 2);
        } else if (damage == "short") {
            write_file(path, std::string("SQLite format 3\0\x10\0", 19));
        } else if (damage == "no-table") {
            path = small_trace(dir, "no-table.sqlite");
            exec_sql(path, "DROP TABLE event");
        } else if (damage == "rank-folder" || damage == "folder") {
            path = dir.filePath("capture").toStdString();
            std::filesystem::create_directory(path);
            if (damage == "rank-folder") {
                small_trace(dir, "capture/rank-0.sqlite");
            }
        }
        auto trace = TraceReader::open(path);
        QVERIFY(!trace.ok());
        QCOMPARE(int(trace.error().code), code);
        const std::string& text = trace.error().message;
        QVERIFY2(text.find(message.toStdString()) != std::string::npos, text.c_str());
        // Every message names the file it is about.
        QVERIFY2(text.find(path) != std::string::npos, text.c_str());
    }

    // `fulcrum capture -o DIR` leaves DIR/run.fulcrum: every reader takes DIR for it.
    void captureFolderOpensItsMergedRun() {
        QTemporaryDir dir;
        QVERIFY(QDir(dir.path()).mkdir("capture"));
        const std::string run = small_trace(dir, "capture/run.fulcrum", 10);
        small_trace(dir, "capture/rank-0.sqlite", 3);
        auto trace = TraceReader::open(dir.filePath("capture").toStdString());
        QVERIFY2(trace.ok(), trace.ok() ? "" : trace.error().message.c_str());
        QCOMPARE(trace->path(), run);
    }

    void writerRefusesToClobberOrWriteNowhere() {
        QTemporaryDir dir;
        const std::string existing = small_trace(dir, "exists.sqlite");
        const auto size_before = std::filesystem::file_size(existing);
        auto again = TraceWriter::create(existing, test_run());
        QVERIFY(!again.ok());
        QVERIFY(again.error().message.find("already exists") != std::string::npos);
        QCOMPARE(std::filesystem::file_size(existing), size_before);

        auto nowhere = TraceWriter::create("/nonexistent-dir/x.sqlite", test_run());
        QVERIFY(!nowhere.ok());
        QCOMPARE(nowhere.error().code, ErrorCode::io);
        QVERIFY(nowhere.error().message.find("/nonexistent-dir/x.sqlite") != std::string::npos);
    }
};

QTEST_GUILESS_MAIN(StoreTest)
#include "test_store.moc"
