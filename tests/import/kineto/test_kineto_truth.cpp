// Diff tests of what the Kineto importer makes of the traces people have: tiny inline traces
// read straight into a MemorySink (no file, no SQLite), the figures worked out by hand in each
// test, and two of HTA's own test traces (tests/import/kineto/data/hta, MIT licence) imported
// and analysed whole.
#include <QTest>

#include <filesystem>
#include <fstream>

#include "core/analysis/activity.h"
#include "core/analysis/run_trace.h"
#include "core/import/importer.h"
#include "core/import/kineto/json_stream.h"
#include "core/store/trace_reader.h"
#include "core/trace/memory_sink.h"

using namespace fulcrum;
namespace fs = std::filesystem;

namespace {

const std::string kHta = std::string(FULCRUM_SOURCE_DIR) + "/tests/import/kineto/data/hta/";

const importer::Importer& kineto() {
    static const auto importer = importer::make_kineto_importer();
    return *importer;
}

// Reads `json` as the file `name`; fails the test on an error or a malformed sink.
MemorySink read(const std::string& json, int input_index = 0,
                const std::string& name = "trace.json") {
    MemorySink sink;
    importer::ImportFileOptions options;
    options.input_index = input_index;
    const Status status = kineto().read(importer::ImportInput{name, &json}, sink, options);
    if (!status)
        qFatal("read failed: %s", status.error().message.c_str());
    if (!sink.problems().empty())
        qFatal("malformed: %s", sink.problems().front().c_str());
    return sink;
}

const Event& named(const MemorySink& sink, std::string_view name) {
    const Event* found = nullptr;
    for (const Event& event : sink.events()) {
        if (sink.string(event.name) == name) {
            if (found != nullptr)
                qFatal("two events named %s", std::string(name).c_str());
            found = &event;
        }
    }
    if (found == nullptr)
        qFatal("no event named %s", std::string(name).c_str());
    return *found;
}

void spit(const fs::path& path, std::string_view text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
}

// A one-kernel rank whose distributedInfo comes after traceEvents, as Kineto writes it.
std::string rank_file(int rank, std::string_view kernel) {
    return R"({"schemaVersion":1,"traceEvents":[{"ph":"X","cat":"kernel","name":")" +
           std::string(kernel) +
           R"(","pid":0,"tid":7,"ts":100,"dur":5,"args":{"device":0,"stream":7}}],
"distributedInfo":{"backend":"nccl","rank":)" +
           std::to_string(rank) + R"(,"world_size":2},"baseTimeNanoseconds":1700000000000000000})";
}

}  // namespace

class KinetoTruthTest : public QObject {
    Q_OBJECT
    fs::path dir_;

private slots:
    void initTestCase() {
        dir_ = fs::temp_directory_path() / ("fulcrum-kineto-truth-" + std::to_string(::getpid()));
        fs::create_directories(dir_);
    }
    void cleanupTestCase() { fs::remove_all(dir_); }

    // Microseconds to nanoseconds in integers: 16 integer digits and 3 decimals (Kineto's
    // epoch µs) come out exact, where a double is off by up to 256 ns.
    void microsecondsParseExactly_data() {
        QTest::addColumn<QString>("text");
        QTest::addColumn<qint64>("ns");
        QTest::newRow("kineto epoch") << "1713306186817333.117" << qint64(1713306186817333117);
        QTest::newRow("no fraction") << "1694039994071305" << qint64(1694039994071305000);
        QTest::newRow("one decimal") << "11.5" << qint64(11500);
        QTest::newRow("round half up") << "0.0005" << qint64(1);
        QTest::newRow("round down") << "0.0004999" << qint64(0);
        QTest::newRow("ns digits beyond") << "2.0015" << qint64(2002);
        QTest::newRow("negative") << "-0.5" << qint64(-500);
        QTest::newRow("exponent") << "1.5e3" << qint64(1500000);
        QTest::newRow("negative exponent") << "125e-3" << qint64(125);
        QTest::newRow("leading zeros") << "000012.000" << qint64(12000);
        QTest::newRow("huge zero") << "0e999999" << qint64(0);
        QTest::newRow("int64 edge") << "9223372036854775.807" << qint64(INT64_MAX);
    }
    void microsecondsParseExactly() {
        QFETCH(QString, text);
        QFETCH(qint64, ns);
        std::int64_t out = 0;
        QVERIFY(importer::kineto::json_us_to_ns(text.toStdString(), out));
        QCOMPARE(qint64(out), ns);
    }

    void badMicrosecondsAreRefused_data() {
        QTest::addColumn<QString>("text");
        for (const char* bad : {"", "-", "1.", ".5", "1e", "1e+", "abc", "1.5x",
                                "9223372036854775.808", "1e30", "--1", "0x10"}) {
            QTest::newRow(bad) << bad;
        }
    }
    void badMicrosecondsAreRefused() {
        QFETCH(QString, text);
        std::int64_t out = 0;
        QVERIFY(!importer::kineto::json_us_to_ns(text.toStdString(), out));
    }

    // The issue's case: a run start of …817333 µs read as …817216 ns off through a double,
    // kernel offsets off by 67–141 ns. Starts and durations must be the file's to the ns.
    void eventTimesAreTheFilesToTheNanosecond() {
        const MemorySink sink = read(R"json({"traceEvents":[
{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":100,"tid":100,"ts":1713306186817333.117,"dur":0.883},
{"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":1713306186817400.067,"dur":141.141,
 "args":{"device":0,"stream":7,"correlation":3}}]})json");
        QCOMPARE(named(sink, "aten::mm").start_ns, std::int64_t(1713306186817333117));
        QCOMPARE(named(sink, "aten::mm").duration_ns(), std::int64_t(883));
        QCOMPARE(named(sink, "gemm").start_ns, std::int64_t(1713306186817400067));
        QCOMPARE(named(sink, "gemm").duration_ns(), std::int64_t(141141));
        QCOMPARE(named(sink, "gemm").correlation, std::int64_t(3));
    }

    // distributedInfo after traceEvents still names the rank: given in reverse order, the two
    // files keep their identities (before, they took their positions: 0 became 1).
    void rankComesFromTheFileWhereverItStands() {
        const MemorySink first = read(rank_file(1, "k1"), 0);
        QCOMPARE(first.ranks().size(), std::size_t(1));
        QCOMPARE(first.ranks()[0].rank, 1);
        QCOMPARE(first.lanes()[0].rank, 1);
        QCOMPARE(first.ranks()[0].utc_offset_ns, std::int64_t(1700000000000000000));

        spit(dir_ / "a.json", rank_file(1, "on_rank_1"));
        spit(dir_ / "b.json", rank_file(0, "on_rank_0"));
        const std::string out = (dir_ / "ab.fulcrum").string();
        auto report =
            importer::import_files({(dir_ / "a.json").string(), (dir_ / "b.json").string()}, out);
        QVERIFY2(report, report ? "" : report.error().message.c_str());
        auto run = store::TraceReader::open(out);
        QVERIFY(run);
        QCOMPARE(run->ranks().size(), std::size_t(2));
        for (const LaneInfo& lane : run->lanes()) {
            auto events = run->events_in_window(lane.id, INT64_MIN / 4, INT64_MAX / 4);
            QVERIFY(events && events->size() == 1);
            QCOMPARE(std::string(run->string(events->front().name)),
                     "on_rank_" + std::to_string(lane.rank));
        }
        // The run's command names every input, not only the first.
        QCOMPARE(run->run().command,
                 "fulcrum import " + (dir_ / "a.json").string() + " " + (dir_ / "b.json").string());
    }

    void twoFilesClaimingOneRankIsAnError() {
        spit(dir_ / "x.json", rank_file(3, "x"));
        spit(dir_ / "y.json", rank_file(3, "y"));
        auto report =
            importer::import_files({(dir_ / "x.json").string(), (dir_ / "y.json").string()},
                                   (dir_ / "xy.fulcrum").string());
        QVERIFY(!report);
        const std::string& message = report.error().message;
        QVERIFY2(message.find("x.json") != std::string::npos &&
                     message.find("y.json") != std::string::npos &&
                     message.find("rank 3") != std::string::npos,
                 message.c_str());
        QVERIFY(!fs::exists(dir_ / "xy.fulcrum"));
    }

    // Copy and memory kinds from Kineto's names; only host<->device copies are offload.
    void copiesAreClassifiedByKind() {
        const MemorySink sink = read(R"json({"traceEvents":[
{"ph":"X","cat":"gpu_memcpy","name":"Memcpy HtoD (Pageable -> Device)","pid":0,"tid":7,"ts":1,"dur":1,"args":{"bytes":92928,"stream":7}},
{"ph":"X","cat":"gpu_memcpy","name":"Memcpy DtoH (Device -> Pinned)","pid":0,"tid":7,"ts":3,"dur":1,"args":{"bytes":64}},
{"ph":"X","cat":"gpu_memcpy","name":"Memcpy DtoD (Device -> Device)","pid":0,"tid":7,"ts":5,"dur":1},
{"ph":"X","cat":"gpu_memcpy","name":"Memcpy PtoP (Device -> Device)","pid":0,"tid":7,"ts":7,"dur":1}]})json");
        const Event& in = named(sink, "Memcpy HtoD (Pageable -> Device)");
        QCOMPARE(in.kind, EventKind::memcpy);
        QCOMPARE(in.copy_kind, CopyKind::host_to_device);
        QCOMPARE(in.src_memory, MemoryKind::pageable);
        QCOMPARE(in.dst_memory, MemoryKind::device);
        QCOMPARE(in.bytes, std::int64_t(92928));
        QCOMPARE(in.category, Category::offload);
        const Event& out = named(sink, "Memcpy DtoH (Device -> Pinned)");
        QCOMPARE(out.copy_kind, CopyKind::device_to_host);
        QCOMPARE(out.dst_memory, MemoryKind::pinned);
        QCOMPARE(out.category, Category::offload);
        QCOMPARE(named(sink, "Memcpy DtoD (Device -> Device)").copy_kind,
                 CopyKind::device_to_device);
        QCOMPARE(named(sink, "Memcpy DtoD (Device -> Device)").category, Category::memory);
        QCOMPARE(named(sink, "Memcpy PtoP (Device -> Device)").copy_kind, CopyKind::peer_to_peer);
        QCOMPARE(named(sink, "Memcpy PtoP (Device -> Device)").category, Category::memory);
    }

    // cuda_sync is the host waiting on a stream: a sync on that stream's lane. A CUPTI range
    // profiler's kernel is a transparent range on a lane of its own; the profiler's "Trace"
    // span and its global instants go on one "profiler" lane. None is a phantom host thread.
    void syncAndProfilerRecordsAreWhatTheyAre() {
        const MemorySink sink = read(R"json({"traceEvents":[
{"ph":"X","cat":"Trace","name":"PyTorch Profiler (0)","pid":"Spans","tid":"PyTorch Profiler","ts":0,"dur":100},
{"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":10,"dur":5,"args":{"stream":7}},
{"ph":"X","cat":"cuda_sync","name":"Stream Sync","pid":0,"tid":7,"ts":15,"dur":8,"args":{"stream":7,"cuda_sync_kind":"Stream Sync"}},
{"ph":"X","cat":"cuda_profiler_range","name":"gemm replayed","pid":0,"tid":0,"ts":30,"dur":121431},
{"name":"Record Window End","ph":"i","s":"g","pid":"","tid":"","ts":100}]})json");
        const Event& sync = named(sink, "Stream Sync");
        QCOMPARE(sync.kind, EventKind::sync);
        QCOMPARE(sync.lane, named(sink, "gemm").lane);
        QCOMPARE(sink.lane(sync.lane)->kind, LaneKind::gpu_stream);
        QCOMPARE(sink.lane(sync.lane)->name, std::string("stream 7 (device 0)"));
        const Event& replayed = named(sink, "gemm replayed");
        QCOMPARE(replayed.category, Category::schedule);
        QCOMPARE(sink.lane(replayed.lane)->name, std::string("profiler ranges (device 0)"));
        QCOMPARE(sink.lane(replayed.lane)->kind, LaneKind::gpu_stream);
        const Event& window = named(sink, "PyTorch Profiler (0)");
        QCOMPARE(window.category, Category::schedule);
        QCOMPARE(sink.lane(window.lane)->name, std::string("profiler"));
        QCOMPARE(named(sink, "Record Window End").lane, window.lane);
        QCOMPARE(sink.lanes().size(), std::size_t(3));  // stream 7, profiler ranges, profiler
    }

    // MTIA: command-processor events on the device's pid become stream lanes of device 17:
    // 41 DMA copies (27 DtoH, 14 HtoD, 28680576 bytes), 4 executions, 15 event records and
    // waits, and the runtime's 7 per-stream synchronizes (counted from the fixture with
    // Python's json module).
    void otherAcceleratorsGetDeviceLanes() {
        const std::string out = (dir_ / "mtia.fulcrum").string();
        auto report = importer::import_files({kHta + "mtia_small.json.gz"}, out);
        QVERIFY2(report, report ? "" : report.error().message.c_str());
        QCOMPARE(report->skipped, std::int64_t(0));
        auto run = store::TraceReader::open(out);
        QVERIFY(run);
        std::int64_t copies = 0, to_host = 0, to_device = 0, bytes = 0, kernels = 0, syncs = 0;
        for (const LaneInfo& lane : run->lanes()) {
            auto events = run->events_in_window(lane.id, INT64_MIN / 4, INT64_MAX / 4);
            QVERIFY(events);
            for (const Event& event : *events) {
                const bool device_work = event.kind == EventKind::memcpy ||
                                         event.kind == EventKind::kernel ||
                                         event.kind == EventKind::sync;
                QCOMPARE(lane.kind == LaneKind::gpu_stream, device_work);
                if (lane.kind == LaneKind::gpu_stream) {
                    QVERIFY2(lane.name.find("(device 17)") != std::string::npos, lane.name.c_str());
                }
                copies += event.kind == EventKind::memcpy;
                to_host += event.copy_kind == CopyKind::device_to_host;
                to_device += event.copy_kind == CopyKind::host_to_device;
                bytes += event.kind == EventKind::memcpy ? event.bytes : 0;
                kernels += event.kind == EventKind::kernel;
                syncs += event.kind == EventKind::sync;
            }
        }
        QCOMPARE(copies, std::int64_t(41));
        QCOMPARE(to_host, std::int64_t(27));
        QCOMPARE(to_device, std::int64_t(14));
        QCOMPARE(bytes, std::int64_t(28680576));
        QCOMPARE(kernels, std::int64_t(4));
        QCOMPARE(syncs, std::int64_t(22));
        QCOMPARE(run->ranks().front().device, 17);
    }

    // HTA's simple_add trace: 79 kernels on one A100; their union is 10,670,000 ns (their
    // sum 10,728,000 ns: some overlap), computed from the JSON with exact decimals. The
    // rank's compute is that union, to the ns.
    void aRealTracesKernelTimeIsTheirUnion() {
        const std::string out = (dir_ / "simple_add.fulcrum").string();
        auto report = importer::import_files({kHta + "simple_add.json.gz"}, out);
        QVERIFY2(report, report ? "" : report.error().message.c_str());
        QCOMPARE(report->skipped, std::int64_t(0));
        auto run = store::TraceReader::open(out);
        QVERIFY(run);
        auto trace = analysis::load_run_trace(*run);
        QVERIFY(trace);
        QCOMPARE(trace->ranks.size(), std::size_t(1));
        const auto activity = analysis::rank_activity(trace->ranks[0]);
        QCOMPARE(activity.compute.total(), std::int64_t(10'670'000));
        std::int64_t kernels = 0, host_lanes_with_sync = 0;
        for (const auto& lane : trace->ranks[0].lanes) {
            for (const Event& event : lane.events) {
                kernels += event.kind == EventKind::kernel;
                host_lanes_with_sync +=
                    lane.info.kind == LaneKind::host_thread && event.kind == EventKind::sync;
            }
        }
        QCOMPARE(kernels, std::int64_t(79));
        QCOMPARE(host_lanes_with_sync, std::int64_t(0));  // its 41 cuda_sync are on the stream
    }
};

QTEST_GUILESS_MAIN(KinetoTruthTest)
#include "test_kineto_truth.moc"
