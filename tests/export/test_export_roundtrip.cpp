// Export then import gives back the same run: ranks with their coordinates, lanes, every
// event's kind, names, times to the nanosecond, steps and the rest of its columns, the
// workload, the counters and the configuration. One hand-made run with every kind of event
// and the awkward cases (ranges that overlap without nesting, kernels that overlap on a
// stream, marks, odd names, epoch-sized times), and a property test over random runs; both
// through one file and through one file per rank (the Kineto layout HTA reads).
#include <QTemporaryDir>
#include <QTest>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <tuple>

#include "core/export/chrome_trace.h"
#include "core/import/importer.h"
#include "core/store/merge.h"
#include "core/store/trace_reader.h"
#include "core/store/trace_writer.h"

using namespace fulcrum;
namespace fs = std::filesystem;

namespace {

// An event as the run holds it, with its strings resolved and its lane named.
struct Row {
    std::int32_t rank;
    std::string lane;
    LaneKind lane_kind;
    std::int64_t lane_native;
    Event event;  // lane, name and args ids cleared
    std::string name, args;
    auto key() const {
        return std::tie(rank, lane, event.start_ns, event.end_ns, name, event.kind,
                        event.correlation, args);
    }
    bool operator<(const Row& o) const { return key() < o.key(); }
};

std::vector<Row> rows_of(const store::TraceReader& run) {
    std::vector<Row> rows;
    for (const LaneInfo& lane : run.lanes()) {
        auto status = run.for_each_event(lane.id, [&](const Event& e) {
            Row row{lane.rank,
                    lane.name,
                    lane.kind,
                    lane.native_id,
                    e,
                    std::string(run.string(e.name)),
                    std::string(run.string(e.args))};
            row.event.lane = {};
            row.event.name = {};
            row.event.args = {};
            rows.push_back(std::move(row));
            return true;
        });
        if (!status)
            qFatal("%s", status.error().message.c_str());
    }
    std::sort(rows.begin(), rows.end());
    return rows;
}

// Args compare as JSON values: the export writes them compactly.
std::string normal_args(const std::string& text) {
    if (text.empty())
        return text;
    const auto parsed = nlohmann::json::parse(text, nullptr, false);
    return parsed.is_discarded() ? text : parsed.dump();
}

// Fails with the first difference between two runs.
void compare_runs(const store::TraceReader& a, const store::TraceReader& b) {
    QCOMPARE(b.ranks().size(), a.ranks().size());
    for (std::size_t i = 0; i < a.ranks().size(); ++i) {
        const RankInfo &x = a.ranks()[i], &y = b.ranks()[i];
        QCOMPARE(y.rank, x.rank);
        QCOMPARE(y.host, x.host);
        QCOMPARE(y.pid, x.pid);
        QCOMPARE(y.device, x.device);
        QCOMPARE(std::tie(y.dp, y.pp, y.cp, y.tp), std::tie(x.dp, x.pp, x.cp, x.tp));
    }
    QCOMPARE(b.run().start_utc_ns, a.run().start_utc_ns);
    QCOMPARE(nlohmann::json::parse(b.run().config_json).dump(),
             nlohmann::json::parse(a.run().config_json).dump());
    QCOMPARE(b.lanes().size(), a.lanes().size());
    const auto x = rows_of(a), y = rows_of(b);
    QCOMPARE(y.size(), x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
        const Row &p = x[i], &q = y[i];
        const QByteArray where = QByteArray("event ") + QByteArray::number(qint64(i)) + " '" +
                                 QByteArray::fromStdString(p.name) + "' on rank " +
                                 QByteArray::number(p.rank) + " lane " +
                                 QByteArray::fromStdString(p.lane);
        QVERIFY2(q.rank == p.rank && q.lane == p.lane && q.lane_kind == p.lane_kind &&
                     q.lane_native == p.lane_native,
                 where);
        QVERIFY2(q.name == p.name, where);
        QVERIFY2(normal_args(q.args) == normal_args(p.args),
                 where + " args " + QByteArray::fromStdString(q.args));
        QVERIFY2(q.event == p.event, where + " columns differ");
    }
    auto wa = a.workload(), wb = b.workload();
    QVERIFY(wa && wb);
    QCOMPARE(wb->size(), wa->size());
    for (std::size_t i = 0; i < wa->size(); ++i) {
        const auto &p = (*wa)[i], &q = (*wb)[i];
        QVERIFY(std::tie(p.rank, p.step, p.microbatch, p.doc_id, p.doc_length, p.token_begin,
                         p.token_end, p.balancer) == std::tie(q.rank, q.step, q.microbatch,
                                                              q.doc_id, q.doc_length, q.token_begin,
                                                              q.token_end, q.balancer));
    }
    auto ca = a.counters(), cb = b.counters();
    QVERIFY(ca && cb);
    QCOMPARE(cb->size(), ca->size());
    for (std::size_t i = 0; i < ca->size(); ++i) {
        QCOMPARE((*cb)[i].name, (*ca)[i].name);
        QCOMPARE((*cb)[i].rank, (*ca)[i].rank);
        QCOMPARE((*cb)[i].time_ns, (*ca)[i].time_ns);
        QCOMPARE((*cb)[i].value, (*ca)[i].value);
    }
}

// Writes rank files through the store's writer and merges them into `run`.
class RunBuilder {
public:
    RunBuilder(const QTemporaryDir& dir, std::string name) : dir_(dir), name_(std::move(name)) {}

    store::TraceWriter& rank(std::int32_t rank, const RankInfo& info, const std::string& config) {
        RunInfo run;
        run.name = name_;
        run.command = "hand-made";
        run.config_json = config;
        const std::string path =
            dir_.filePath(
                    QString::fromStdString(name_ + "-rank" + std::to_string(rank) + ".sqlite"))
                .toStdString();
        auto writer = store::TraceWriter::create(path, run);
        if (!writer)
            qFatal("%s", writer.error().message.c_str());
        files_.push_back(path);
        writers_.push_back(std::move(*writer));
        writers_.back()->add_rank(info);
        return *writers_.back();
    }

    std::string merge() {
        for (auto& writer : writers_) {
            if (auto status = writer->close(); !status)
                qFatal("%s", status.error().message.c_str());
        }
        const std::string out =
            dir_.filePath(QString::fromStdString(name_ + ".fulcrum")).toStdString();
        auto merged = store::merge_rank_files(files_, out);
        if (!merged)
            qFatal("%s", merged.error().message.c_str());
        return out;
    }

private:
    const QTemporaryDir& dir_;
    std::string name_;
    std::vector<std::string> files_;
    std::vector<std::unique_ptr<store::TraceWriter>> writers_;
};

Event make(LaneId lane, StringId name, EventKind kind, Category category, std::int64_t start,
           std::int64_t end) {
    Event e;
    e.lane = lane;
    e.name = name;
    e.kind = kind;
    e.category = category;
    e.start_ns = start;
    e.end_ns = kind == EventKind::mark ? start : end;
    return e;
}

// Export `run` both ways and import each back; compare with the original.
void round_trip(const QTemporaryDir& dir, const std::string& run_path, const std::string& tag) {
    auto run = store::TraceReader::open(run_path);
    QVERIFY(run);
    for (const bool per_rank : {false, true}) {
        const std::string out =
            dir.filePath(QString::fromStdString(tag + (per_rank ? "-ranks" : ".json")))
                .toStdString();
        ExportOptions options;
        options.per_rank = per_rank;
        auto exported = export_chrome_trace(*run, out, options);
        QVERIFY2(exported, exported ? "" : exported.error().message.c_str());
        QCOMPARE(exported->files.size(), per_rank ? run->ranks().size() : std::size_t(1));
        const std::string back =
            dir.filePath(QString::fromStdString(tag + (per_rank ? "-back-ranks" : "-back")))
                .toStdString();
        auto imported = importer::import_files(exported->files, back);
        QVERIFY2(imported, imported ? "" : imported.error().message.c_str());
        QCOMPARE(imported->skipped, std::int64_t(0));
        auto again = store::TraceReader::open(back);
        QVERIFY(again);
        compare_runs(*run, *again);
        if (QTest::currentTestFailed()) {
            qWarning("the round trip through %s differs",
                     per_rank ? "one file per rank" : "one file");
            return;
        }
    }
}

}  // namespace

class ExportRoundTripTest : public QObject {
    Q_OBJECT

private slots:
    // Two ranks of a pp2 run with GPU streams: every kind of event, columns set, the awkward
    // cases. Times are epoch-sized so that a double on the way would lose nanoseconds.
    void handMadeRunComesBack() {
        QTemporaryDir dir;
        RunBuilder builder(dir, "hand");
        const std::string config =
            R"({"pp":2,"dp":1,"tp":1,"cp":1,"schedule":"1f1b","model":{"layers":4,"hidden":64}})";
        for (std::int32_t r = 0; r < 2; ++r) {
            store::TraceWriter& w = builder.rank(r,
                                                 {.rank = r,
                                                  .host = "node-é",
                                                  .pid = 4242 + r,
                                                  .device = r,
                                                  .dp = 0,
                                                  .tp = 0,
                                                  .pp = r,
                                                  .cp = 0,
                                                  .utc_offset_ns = 1'713'306'186'817'333'117},
                                                 config);
            const LaneId host = w.add_lane(r, LaneKind::host_thread, "main, \"thread\"", 4242 + r);
            const LaneId compute = w.add_lane(r, LaneKind::gpu_stream,
                                              "stream 7 (device " + std::to_string(r) + ")", 7);
            const LaneId copies = w.add_lane(r, LaneKind::gpu_stream,
                                             "stream 9 (device " + std::to_string(r) + ")", 9);
            const std::int64_t t = 1'000'003 + r * 17;
            Event step = make(host, w.intern("step"), EventKind::range, Category::schedule, t,
                              t + 9'000'001);
            step.step = 3;
            Event forward = make(host, w.intern("forward"), EventKind::range, Category::compute,
                                 t + 1, t + 4'000'007);
            forward.step = 3;
            forward.microbatch = 1;
            forward.stage = static_cast<std::int16_t>(r);
            forward.phase = Phase::forward;
            Event send =
                make(host, w.intern("send activations"), EventKind::range, Category::communication,
                     t + 3'000'000, t + 5'000'000);  // outlives forward: not nested
            send.bytes = 65536;
            send.args = w.intern(R"({"peer": 1, "note": "ü\n"})");
            Event launch = make(host, w.intern("cudaLaunchKernel"), EventKind::api,
                                Category::runtime, t + 10, t + 20);
            launch.correlation = 77;
            Event sync = make(host, w.intern("cudaStreamSynchronize"), EventKind::sync,
                              Category::runtime, t + 6'000'000, t + 6'000'500);
            Event mark = make(host, w.intern(kClockSyncMark), EventKind::mark, Category::other,
                              t + 2, t + 2);
            Event gemm = make(compute, w.intern("sm90_xmma_gemm_bf16"), EventKind::kernel,
                              Category::compute, t + 100, t + 400'000);
            gemm.correlation = 77;
            gemm.step = 3;
            Event overlapping =
                make(compute, w.intern("flash_fwd_kernel"), EventKind::kernel, Category::attention,
                     t + 298'000, t + 698'000);  // overlaps gemm on one stream
            Event nccl = make(compute, w.intern("ncclDevKernel_SendRecv"), EventKind::collective,
                              Category::communication, t + 700'000, t + 900'000);
            nccl.bytes = 1 << 20;
            Event copy = make(copies, w.intern("Memcpy DtoH (Device -> Pinned)"), EventKind::memcpy,
                              Category::offload, t + 50, t + 150'000);
            copy.copy_kind = CopyKind::device_to_host;
            copy.src_memory = MemoryKind::device;
            copy.dst_memory = MemoryKind::pinned;
            copy.bytes = 4096;
            Event dtod = make(copies, w.intern("Memcpy DtoD (Device -> Device)"), EventKind::memcpy,
                              Category::memory, t + 200'000, t + 200'001);
            dtod.copy_kind = CopyKind::device_to_device;
            Event memset = make(copies, w.intern("Memset"), EventKind::memset, Category::memory,
                                t + 300'000, t + 300'010);
            Event zero = make(copies, w.intern("zero-length"), EventKind::kernel, Category::compute,
                              t + 400'000, t + 400'000);
            for (const Event& e : {step, forward, send, launch, sync, mark, gemm, overlapping, nccl,
                                   copy, dtod, memset, zero}) {
                w.add_event(e);
            }
            w.add_counter({r, "memory in use", t + 5, 1.5e9 + r});
            w.add_workload({r, 3, 1, 100 + r, 2048, 0, 1024, "wlb"});
        }
        round_trip(dir, builder.merge(), "hand");
    }

    // Random runs: ranks, lanes of both kinds, nested, overlapping and zero-length ranges,
    // kernels that overlap, marks, copies of every kind, steps and micro-batches, args.
    void randomRunsComeBack_data() {
        QTest::addColumn<unsigned>("seed");
        for (unsigned seed = 1; seed <= 12; ++seed)
            QTest::newRow(qPrintable(QString("seed %1").arg(seed))) << seed;
    }
    void randomRunsComeBack() {
        QFETCH(unsigned, seed);
        std::mt19937_64 random(seed);
        auto pick = [&](std::int64_t low, std::int64_t high) {
            return std::uniform_int_distribution<std::int64_t>(low, high)(random);
        };
        QTemporaryDir dir;
        const std::string tag = "random" + std::to_string(seed);
        RunBuilder builder(dir, tag);
        const int ranks = static_cast<int>(pick(1, 4));
        const char* names[] = {"forward",  "backward", "attention", "gemm",
                               "Ω-kernel", "a,b",      "quote\"d",  "tab\tname"};
        for (int r = 0; r < ranks; ++r) {
            RankInfo info{.rank = r,
                          .host = "h" + std::to_string(r),
                          .pid = pick(0, 1) ? 10'000 + r : 0,
                          .device = static_cast<std::int32_t>(pick(-1, 3)),
                          .dp = r % 2,
                          .tp = 0,
                          .pp = r / 2,
                          .cp = 0,
                          .utc_offset_ns = 1'700'000'000'000'000'000 + pick(0, 1'000'000'000)};
            store::TraceWriter& w =
                builder.rank(r, info, R"({"pp":2,"seed":)" + std::to_string(seed) + "}");
            const int lanes = static_cast<int>(pick(1, 4));
            for (int l = 0; l < lanes; ++l) {
                const bool stream = pick(0, 1) == 1;
                const LaneId lane =
                    w.add_lane(r, stream ? LaneKind::gpu_stream : LaneKind::host_thread,
                               (stream ? "stream " : "thread ") + std::to_string(l), pick(-1, 20));
                std::int64_t t = pick(0, 1'000'000);
                const int events = static_cast<int>(pick(0, 40));
                for (int i = 0; i < events; ++i) {
                    const EventKind kind =
                        stream ? std::array{EventKind::kernel, EventKind::memcpy,
                                            EventKind::memset, EventKind::collective,
                                            EventKind::sync,   EventKind::range}[pick(0, 5)]
                               : std::array{EventKind::range, EventKind::mark, EventKind::api,
                                            EventKind::sync, EventKind::collective}[pick(0, 4)];
                    t += pick(0, 5000);
                    Event e = make(lane, w.intern(names[pick(0, 7)]), kind,
                                   static_cast<Category>(pick(0, kCategoryCount - 1)), t,
                                   t + pick(0, 20'000));
                    e.step = pick(0, 2) == 0 ? -1 : static_cast<std::int32_t>(pick(0, 5));
                    e.microbatch = pick(0, 1) ? -1 : static_cast<std::int32_t>(pick(0, 7));
                    e.stage = pick(0, 1) ? std::int16_t(-1) : static_cast<std::int16_t>(pick(0, 3));
                    e.phase = static_cast<Phase>(pick(-1, 2));
                    e.bytes = pick(0, 1) ? -1 : pick(0, 1 << 30);
                    e.correlation = pick(0, 1) ? -1 : pick(0, 1'000'000);
                    if (kind == EventKind::memcpy) {
                        e.copy_kind = static_cast<CopyKind>(pick(1, 10));
                        e.src_memory = static_cast<MemoryKind>(pick(-1, 7));
                        e.dst_memory = static_cast<MemoryKind>(pick(-1, 7));
                    }
                    if (pick(0, 3) == 0)
                        e.args = w.intern(R"({"i":)" + std::to_string(i) + "}");
                    w.add_event(e);
                }
            }
            if (pick(0, 1))
                w.add_counter({r, "queue", pick(0, 1000), double(pick(0, 100))});
            if (pick(0, 1))
                w.add_workload({r, 0, 0, pick(0, 99), 512, 0, 512, "fixed"});
        }
        round_trip(dir, builder.merge(), tag);
    }
};

QTEST_GUILESS_MAIN(ExportRoundTripTest)
#include "test_export_roundtrip.moc"
