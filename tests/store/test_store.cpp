// The trace store: what goes in comes out, the indexed queries answer like a full scan, a
// killed writer's file keeps its last commit, and every kind of bad file gets its own message.
#include <QTemporaryDir>
#include <QTest>

#include <sqlite3.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "core/store/merge.h"
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

// Events of three lanes as a collector hands them over: a lane's ranges arrive when they
// end (after what nests in them), with marks, kernels and every field set somewhere, in
// chunks with flushes between, so that a lane's blocks overlap in time.
std::vector<Event> collector_like_events(const std::vector<LaneId>& lanes,
                                         const std::vector<StringId>& names, int count) {
    std::mt19937_64 rng(11);
    std::vector<Event> events;
    std::vector<std::int64_t> clock(lanes.size(), 1'000);
    for (int i = 0; i < count; ++i) {
        const std::size_t lane = rng() % lanes.size();
        Event e = make_event(lanes[lane], names[rng() % names.size()], clock[lane],
                             clock[lane] + static_cast<std::int64_t>(rng() % 5'000),
                             static_cast<EventKind>(rng() % kEventKindCount));
        clock[lane] += static_cast<std::int64_t>(rng() % 3'000);
        if (e.kind == EventKind::mark) {
            e.end_ns = e.start_ns;
        }
        if (i % 97 == 0) {  // a parent that arrives after the events it spans
            e.start_ns -= 40'000;
        }
        e.step = i % 5 == 0 ? -1 : static_cast<std::int32_t>(e.start_ns / 2'000'000);
        e.microbatch = static_cast<std::int32_t>(rng() % 4);
        e.stage = static_cast<std::int16_t>(rng() % 3) - 1;
        e.phase = static_cast<Phase>(static_cast<int>(rng() % 4) - 1);
        e.bytes = i % 3 == 0 ? -1 : static_cast<std::int64_t>(rng() % (1ull << 40));
        e.copy_kind = static_cast<CopyKind>(rng() % 11);
        e.correlation = i % 4 == 0 ? -1 : 5'000 + i;
        e.args = i % 7 == 0 ? names[0] : StringId{};
        e.src_memory = static_cast<MemoryKind>(rng() % 8);
        e.dst_memory = static_cast<MemoryKind>(rng() % 8);
        events.push_back(e);
    }
    return events;
}

// Writes `events` with the given storage; returns the path.
std::string write_trace(const QTemporaryDir& dir, const char* name,
                        WriterOptions::EventStorage storage, const std::vector<Event>& events,
                        int lanes, int names) {
    const std::string path = dir.filePath(name).toStdString();
    WriterOptions options;
    options.events = storage;
    auto writer = TraceWriter::create(path, test_run(), options);
    if (!writer) {
        qFatal("%s", writer.error().message.c_str());
    }
    (*writer)->add_rank(RankInfo{});
    for (int lane = 0; lane < lanes; ++lane) {
        (*writer)->add_lane(0, LaneKind::host_thread, "lane " + std::to_string(lane));
    }
    for (int id = 0; id < names; ++id) {
        (*writer)->intern("name " + std::to_string(id));
    }
    for (std::size_t i = 0; i < events.size(); i += 7'000) {
        (*writer)->add_events(events.data() + i, std::min<std::size_t>(7'000, events.size() - i));
        (*writer)->flush();
    }
    if (!(*writer)->close()) {
        qFatal("close failed");
    }
    return path;
}

// The same events in a canonical order, for comparing readers whose order of equal (start,
// end) pairs is not specified.
std::vector<Event> canonical(std::vector<Event> events) {
    std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
        return std::tie(a.lane, a.start_ns, a.end_ns, a.correlation, a.name, a.kind, a.bytes) <
               std::tie(b.lane, b.start_ns, b.end_ns, b.correlation, b.name, b.kind, b.bytes);
    });
    return events;
}

std::vector<Event> every_event(const TraceReader& trace) {
    std::vector<Event> events;
    auto range = trace.event_rowids();
    if (!range || !trace.scan_events(range->first, range->second, [&](const Event& e) {
            events.push_back(e);
            return true;
        })) {
        qFatal("cannot scan '%s'", trace.path().c_str());
    }
    return events;
}

// Overwrites one event block's data (by rowid order) with what `damage` makes of it.
void damage_block(const std::string& path, int block,
                  const std::function<std::string(std::string)>& damage) {
    auto db = Database::open(path, Database::Mode::read_write);
    QVERIFY(db.ok());
    auto select = db->prepare("SELECT rowid, data FROM event_block ORDER BY rowid LIMIT 1 OFFSET " +
                              std::to_string(block));
    QVERIFY(select.ok() && select->step());
    const std::int64_t rowid = select->column_int64(0);
    const std::string data = damage(std::string(select->column_blob(1)));
    select = Statement();
    auto update = db->prepare("UPDATE event_block SET data = ?1 WHERE rowid = ?2");
    QVERIFY(update.ok());
    update->bind_blob(1, data);
    update->bind(2, rowid);
    QVERIFY(update->run());
}

// Runs `write` on a TraceWriter at `path` in a child process, which then dies by SIGKILL
// with whatever it had not committed; true when it did die that way.
bool write_then_kill(const std::string& path, const WriterOptions& options,
                     const std::function<void(TraceWriter&)>& write) {
    const pid_t child = fork();
    if (child < 0) {
        return false;
    }
    if (child == 0) {
        auto writer = TraceWriter::create(path, test_run(), options);
        if (!writer) {
            _exit(1);
        }
        write(**writer);
        raise(SIGKILL);
        _exit(2);
    }
    int status = 0;
    return waitpid(child, &status, 0) == child && WIFSIGNALED(status) &&
           WTERMSIG(status) == SIGKILL;
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
        (*writer)->add_workload({3, 2, 4, 12, 10, 0, 10, "fixed"});
        (*writer)->add_workload({3, 3, 0, 13, 20, 0, 20, std::string("wl") + "b"});
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
        QCOMPARE(workload->size(), 3u);
        QCOMPARE(workload->front().token_end, 2048);
        QCOMPARE(workload->front().balancer.str(), std::string("wlb"));
        // A balancer's name is one copy for every row that names it (InternedText): the
        // workload table of a 1 B-event run has millions of rows.
        const WorkloadEntry& fixed = (*workload)[1];
        const WorkloadEntry& later = (*workload)[2];
        QCOMPARE(fixed.balancer.str(), std::string("fixed"));
        QCOMPARE(later.balancer.str(), std::string("wlb"));
        QVERIFY(&later.balancer.str() == &workload->front().balancer.str());
        QVERIFY(&fixed.balancer.str() != &workload->front().balancer.str());
        QVERIFY(later.balancer == InternedText("wlb"));
        QVERIFY(InternedText().empty());
        QCOMPARE(sizeof(InternedText), sizeof(void*));
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
        WriterOptions options;
        options.commit_interval = std::chrono::milliseconds(100);
        QVERIFY(write_then_kill(path, options, [](TraceWriter& writer) {
            writer.add_rank(RankInfo{});
            const LaneId lane = writer.add_lane(0, LaneKind::host_thread, "main");
            const StringId name = writer.intern("before the kill");
            for (int i = 0; i < 50000; ++i) {
                writer.add_event(make_event(lane, name, i * 10, i * 10 + 5));
            }
            writer.flush();
            for (int i = 0; i < 100; ++i) {  // never committed: killed within the interval
                writer.add_event(make_event(lane, name, 900'000'000, 900'000'001));
            }
        }));

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

    // A rank file keeps its events in compressed blocks (docs/schema.md, event_block); every
    // reader method answers from them what it answers from rows.
    void blockStorageReadsLikeRows() {
        QTemporaryDir dir;
        const std::vector<LaneId> lanes{LaneId{1}, LaneId{2}, LaneId{3}};
        std::vector<StringId> names;
        for (std::uint32_t id = 1; id <= 40; ++id) {
            names.push_back(StringId{id});
        }
        const auto events = collector_like_events(lanes, names, 60'000);
        const std::string rows_path =
            write_trace(dir, "rows.sqlite", WriterOptions::EventStorage::rows, events, 3, 40);
        const std::string blocks_path =
            write_trace(dir, "blocks.sqlite", WriterOptions::EventStorage::blocks, events, 3, 40);
        auto rows = TraceReader::open(rows_path);
        auto blocks = TraceReader::open(blocks_path);
        QVERIFY(rows.ok() && blocks.ok());
        QVERIFY(!rows->events_in_blocks());
        QVERIFY(blocks->events_in_blocks());
        QVERIFY(blocks->has_indexes());
        QVERIFY(!blocks->incomplete());
        QCOMPARE(blocks->schema_version(), std::int64_t{3});
        // Several times smaller than rows (bench_store measures by how much).
        QVERIFY(std::filesystem::file_size(blocks_path) * 3 <
                std::filesystem::file_size(rows_path));

        for (std::size_t i = 0; i < lanes.size(); ++i) {
            QCOMPARE(blocks->lanes()[i].max_duration_ns, rows->lanes()[i].max_duration_ns);
        }
        auto rows_summary = rows->summary();
        auto blocks_summary = blocks->summary();
        QVERIFY(rows_summary.ok() && blocks_summary.ok());
        QCOMPARE(blocks_summary->event_count, std::int64_t{60'000});
        QCOMPARE(blocks_summary->event_count, rows_summary->event_count);
        QCOMPARE(blocks_summary->steps, rows_summary->steps);
        QCOMPARE(blocks_summary->start_ns, rows_summary->start_ns);
        QCOMPARE(blocks_summary->end_ns, rows_summary->end_ns);
        QCOMPARE(blocks_summary->events_per_lane, rows_summary->events_per_lane);
        for (int kind = 0; kind < kEventKindCount; ++kind) {
            QCOMPARE(blocks_summary->events_by_kind[kind], rows_summary->events_by_kind[kind]);
        }
        QCOMPARE(canonical(every_event(*blocks)), canonical(events));

        for (const LaneId lane : lanes) {
            // In store order: by start, end descending on ties.
            std::vector<std::pair<std::int64_t, std::int64_t>> by_rows, by_blocks;
            QVERIFY(rows->for_each_event(lane, [&](const Event& e) {
                by_rows.emplace_back(e.start_ns, e.end_ns);
                return true;
            }));
            QVERIFY(blocks->for_each_event(lane, [&](const Event& e) {
                by_blocks.emplace_back(e.start_ns, e.end_ns);
                return true;
            }));
            QCOMPARE(by_blocks, by_rows);
            // read_lane gives what for_each_event visits, event for event and in its order,
            // merging the blocks that overlap; appended after what `out` holds.
            for (const auto* reader : {&*rows, &*blocks}) {
                std::vector<Event> visited_events;
                QVERIFY(reader->for_each_event(lane, [&](const Event& e) {
                    visited_events.push_back(e);
                    return true;
                }));
                std::vector<Event> read{visited_events.front()};
                QVERIFY(reader->read_lane(lane, read));
                QCOMPARE(read.size(), visited_events.size() + 1);
                QVERIFY(std::equal(read.begin() + 1, read.end(), visited_events.begin()));
            }
            int visited = 0;
            QVERIFY(blocks->for_each_event(lane, [&](const Event&) { return ++visited < 10; }));
            QCOMPARE(visited, 10);
            for (const auto& [t0, t1] : std::vector<std::pair<std::int64_t, std::int64_t>>{
                     {0, 1'000'000}, {5'000'000, 5'050'000}, {by_rows.back().first, INT64_MAX}}) {
                auto from_rows = rows->events_in_window(lane, t0, t1);
                auto from_blocks = blocks->events_in_window(lane, t0, t1);
                QVERIFY(from_rows.ok() && from_blocks.ok());
                QVERIFY(!from_blocks->empty());
                QCOMPARE(canonical(*from_blocks), canonical(*from_rows));
            }
        }
        for (const std::int32_t step : {0, 3, 7, -1}) {
            auto from_rows = rows->events_of_kind_for_step(EventKind::kernel, step);
            auto from_blocks = blocks->events_of_kind_for_step(EventKind::kernel, step);
            QVERIFY(from_rows.ok() && from_blocks.ok());
            QCOMPARE(canonical(*from_blocks), canonical(*from_rows));
        }
        // The loader's fast path: the blocks stand in for the event pack.
        auto pack = blocks->event_pack();
        QVERIFY(pack.ok() && pack->has_value());
        QCOMPARE((*pack)->events, std::int64_t{60'000});
        std::vector<Event> unpacked;
        QVERIFY(blocks->scan_event_pack((*pack)->first_block, (*pack)->end_block,
                                        [&](LaneId) { return &unpacked; }, {}));
        QCOMPARE(canonical(unpacked), canonical(events));
    }

    // A killed writer with block storage loses at most what it staged in its last two commit
    // intervals: a flush() and a wait of three intervals put everything before them on disk.
    void killedBlockWriterKeepsEveryCommittedBlock() {
        QTemporaryDir dir;
        const std::string path = dir.filePath("killed-blocks.sqlite").toStdString();
        WriterOptions options;
        options.commit_interval = std::chrono::milliseconds(100);
        options.events = WriterOptions::EventStorage::blocks;
        QVERIFY(write_then_kill(path, options, [](TraceWriter& writer) {
            writer.add_rank(RankInfo{});
            const LaneId lane = writer.add_lane(0, LaneKind::host_thread, "main");
            const LaneId other = writer.add_lane(0, LaneKind::gpu_stream, "stream");
            const StringId name = writer.intern("before the kill");
            for (int i = 0; i < 50000; ++i) {
                writer.add_event(make_event(i % 2 ? lane : other, name, i * 10, i * 10 + 5));
            }
            writer.flush();
            for (int i = 50000; i < 80000; ++i) {  // no flush: the writer's timer commits them
                writer.add_event(make_event(i % 2 ? lane : other, name, i * 10, i * 10 + 5));
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
            for (int i = 0; i < 100; ++i) {  // within the interval: may be lost
                writer.add_event(make_event(lane, name, 900'000'000, 900'000'001));
            }
        }));

        auto trace = TraceReader::open(path);
        QVERIFY2(trace.ok(), trace.ok() ? "" : trace.error().message.c_str());
        QVERIFY(trace->events_in_blocks());
        QVERIFY(trace->incomplete());
        QVERIFY(!trace->has_indexes());
        auto summary = trace->summary();
        QVERIFY(summary.ok());
        QVERIFY2(summary->event_count >= 80000 && summary->event_count <= 80100,
                 std::to_string(summary->event_count).c_str());
        std::int64_t before_kill = 0;
        for (const LaneInfo& lane : trace->lanes()) {
            QCOMPARE(lane.max_duration_ns, std::int64_t{5});
            QVERIFY(trace->for_each_event(lane.id, [&](const Event& e) {
                before_kill += e.start_ns < 800'000 ? 1 : 0;
                return true;
            }));
        }
        QCOMPARE(before_kill, std::int64_t{80000});
        auto window = trace->events_in_window(trace->lanes()[0].id, 1000, 2000);
        QCOMPARE(window->size(), 50u);
        // And it merges into a run, marked incomplete.
        const std::string run = dir.filePath("run.fulcrum").toStdString();
        auto merged = merge_rank_files({path}, run);
        QVERIFY2(merged.ok(), merged.ok() ? "" : merged.error().message.c_str());
        QCOMPARE(merged->events, summary->event_count);
        auto merged_trace = TraceReader::open(run);
        QVERIFY(merged_trace->events_in_blocks());
        QVERIFY(merged_trace->has_indexes());
        QVERIFY(merged_trace->incomplete());
    }

    // A damaged block is a clear error naming the file, from every method that meets it;
    // never a crash or events that are not the ones written. Blocks are zstd frames with a
    // checksum, so any flipped byte is caught.
    void damagedBlockIsAnError_data() {
        QTest::addColumn<QString>("damage");
        QTest::newRow("truncated") << "truncated";
        QTest::newRow("empty") << "empty";
        QTest::newRow("flipped byte") << "flipped";
        QTest::newRow("wrong count") << "count";
        QTest::newRow("huge count") << "huge count";
        QTest::newRow("unknown codec") << "codec";
    }
    void damagedBlockIsAnError() {
        QFETCH(QString, damage);
        QTemporaryDir dir;
        const std::vector<LaneId> lanes{LaneId{1}, LaneId{2}};
        const std::vector<StringId> names{StringId{1}, StringId{2}};
        const auto events = collector_like_events(lanes, names, 20'000);
        const std::string path =
            write_trace(dir, "damaged.sqlite", WriterOptions::EventStorage::blocks, events, 2, 2);
        std::mt19937_64 rng(5);
        const int tries = damage == "flipped" ? 40 : 1;
        for (int attempt = 0; attempt < tries; ++attempt) {
            const std::string copy = dir.filePath("copy.sqlite").toStdString();
            std::filesystem::copy_file(path, copy,
                                       std::filesystem::copy_options::overwrite_existing);
            if (damage == "truncated") {
                damage_block(copy, 1,
                             [](std::string data) { return data.substr(0, data.size() / 2); });
            } else if (damage == "empty") {
                damage_block(copy, 1, [](std::string) { return std::string(); });
            } else if (damage == "flipped") {
                damage_block(copy, 1, [&](std::string data) {
                    data[rng() % data.size()] ^= static_cast<char>(1 + rng() % 255);
                    return data;
                });
            } else if (damage == "count") {
                exec_sql(copy, "UPDATE event_block SET events = events + 1 WHERE rowid = 2");
            } else if (damage == "huge count") {
                exec_sql(copy, "UPDATE event_block SET events = 1 << 50 WHERE rowid = 2");
            } else if (damage == "codec") {
                exec_sql(copy, "UPDATE event_block SET codec = 9 WHERE rowid = 2");
            }
            auto trace = TraceReader::open(copy);
            QVERIFY(trace.ok());
            const LaneId lane = [&] {
                auto db = Database::open(copy, Database::Mode::read_only);
                return LaneId{static_cast<std::uint32_t>(
                    *db->query_int("SELECT lane FROM event_block WHERE rowid = 2"))};
            }();
            auto check = [&](const Status& status) {
                QVERIFY(!status.ok());
                QCOMPARE(status.error().code, ErrorCode::corrupt);
                QVERIFY2(status.error().message.find(copy) != std::string::npos,
                         status.error().message.c_str());
                QVERIFY2(status.error().message.find("damaged") != std::string::npos,
                         status.error().message.c_str());
            };
            auto summary = trace->summary();
            check(summary.ok() ? Status() : Status(summary.error()));
            check(trace->for_each_event(lane, [](const Event&) { return true; }));
            auto window = trace->events_in_window(lane, INT64_MIN, INT64_MAX);
            check(window.ok() ? Status() : Status(window.error()));
            auto range = trace->event_rowids();
            check(
                trace->scan_events(range->first, range->second, [](const Event&) { return true; }));
            std::vector<Event> out;
            check(trace->scan_event_pack(range->first, range->second, [&](LaneId) { return &out; },
                                         {}));
            auto merged = merge_rank_files({copy}, dir.filePath("run.fulcrum").toStdString());
            check(merged.ok() ? Status() : Status(merged.error()));
            QVERIFY(!std::filesystem::exists(dir.filePath("run.fulcrum").toStdString()));
        }
    }

    // Version 2 files (rows, no event_block table) still read.
    void versionTwoFileStillReads() {
        QTemporaryDir dir;
        const std::string path = small_trace(dir, "v2.sqlite", 500);
        exec_sql(path, "DROP TABLE event_block; PRAGMA user_version = 2");
        auto trace = TraceReader::open(path);
        QVERIFY2(trace.ok(), trace.ok() ? "" : trace.error().message.c_str());
        QCOMPARE(trace->schema_version(), std::int64_t{2});
        QVERIFY(!trace->events_in_blocks());
        QCOMPARE(trace->summary()->event_count, std::int64_t{500});
        QCOMPARE(trace->events_in_window(trace->lanes()[0].id, 0, 1000)->size(), 10u);
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
