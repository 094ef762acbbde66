// Chrome trace and CSV export: valid files whatever the names, ranges nest per thread as
// Perfetto requires, and overlapping ranges survive as async events.
#include <QTemporaryDir>
#include <QTest>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/export/chrome_trace.h"
#include "core/export/csv.h"
#include "core/store/merge.h"
#include "core/store/trace_reader.h"
#include "core/store/trace_writer.h"
#include "tests/support/synthetic_run.h"

using namespace fulcrum;
using namespace fulcrum::store;
using nlohmann::json;

namespace {

constexpr const char* kScriptName = "<script>alert(\"x\")</script>\\ \t";
constexpr const char* kInvalidUtf8 = "bad\xff\xfe utf8 \xc3\xa9";

// One rank, one lane: step [0,1000) holding forward [100,400) holding attention [100,200);
// a range [350,600) that overlaps forward without nesting; a mark at 700; one with odd names.
std::string hand_built_trace(const QTemporaryDir& dir) {
    const std::string path = dir.filePath("hand.sqlite").toStdString();
    RunInfo run;
    run.name = "hand-built";
    auto writer = TraceWriter::create(path, run);
    auto& w = **writer;
    w.add_rank({.rank = 0, .host = "h", .pid = 1, .dp = 0, .tp = 0, .pp = 0, .cp = 0});
    const LaneId lane = w.add_lane(0, LaneKind::host_thread, "main, thread");
    auto add = [&](const char* name, std::int64_t start, std::int64_t end, EventKind kind) {
        Event e;
        e.lane = lane;
        e.name = w.intern(name);
        e.start_ns = start;
        e.end_ns = end;
        e.kind = kind;
        e.step = 0;
        w.add_event(e);
    };
    add("step", 0, 1000, EventKind::range);
    add("forward", 100, 400, EventKind::range);
    add("attention", 100, 200, EventKind::range);
    add("overlapping", 350, 600, EventKind::range);
    add("sync", 700, 700, EventKind::mark);
    add(kScriptName, 800, 900, EventKind::range);
    add(kInvalidUtf8, 900, 950, EventKind::range);
    (void)w.close();
    return path;
}

json load_json(const std::string& path) {
    std::ifstream in(path);
    return json::parse(in);  // throws, and so fails the test, on invalid JSON
}

}  // namespace

class ExportTest : public QObject {
    Q_OBJECT

private slots:
    void chromeTraceNestsAndKeepsOverlapsAsAsync() {
        QTemporaryDir dir;
        auto trace = TraceReader::open(hand_built_trace(dir));
        const std::string out = dir.filePath("trace.json").toStdString();
        auto report = export_chrome_trace(*trace, out);
        QVERIFY2(report.ok(), report.ok() ? "" : report.error().message.c_str());
        QCOMPARE(report->events, 7);
        QCOMPARE(report->async_events, 1);

        const json doc = load_json(out);
        std::map<std::string, json> by_name;
        int begins = 0, ends = 0;
        for (const auto& e : doc["traceEvents"]) {
            const std::string ph = e["ph"];
            if (ph == "X" || ph == "i") {
                by_name[e["name"]] = e;
            }
            begins += ph == "b";
            ends += ph == "e";
            if (ph == "M" && e["name"] == "thread_name") {
                QCOMPARE(e["args"]["name"].get<std::string>(), std::string("main, thread"));
            }
            if (ph == "M" && e["name"] == "process_name") {
                QCOMPARE(e["args"]["name"].get<std::string>(),
                         std::string("rank 0 (dp0 pp0 cp0 tp0)"));
            }
        }
        QCOMPARE(begins, 1);
        QCOMPARE(ends, 1);
        // Microseconds with nanosecond decimals.
        QCOMPARE(by_name["forward"]["ts"].get<double>(), 0.1);
        QCOMPARE(by_name["forward"]["dur"].get<double>(), 0.3);
        QCOMPARE(by_name["sync"]["s"].get<std::string>(), std::string("t"));
        QCOMPARE(by_name["step"]["args"]["step"].get<int>(), 0);
        // Names come back byte for byte; invalid UTF-8 is replaced, not passed on.
        QVERIFY(by_name.count(kScriptName) == 1);
        QVERIFY(by_name.count("bad\xef\xbf\xbd\xef\xbf\xbd utf8 \xc3\xa9") == 1);
    }

    // Every thread's complete events must nest (a child inside its parent, siblings
    // disjoint), or Perfetto draws them wrongly. Checked on a whole synthetic run.
    void completeEventsNestPerThread() {
        QTemporaryDir dir;
        fulcrum::testing::SyntheticRunOptions options;
        options.pp = 2;
        options.dp = 2;
        options.kernels_per_layer = 2;
        auto inputs = fulcrum::testing::write_synthetic_rank_files(
            dir.filePath("ranks").toStdString(), options);
        const std::string run = dir.filePath("run.fulcrum").toStdString();
        QVERIFY(merge_rank_files(*inputs, run).ok());
        auto trace = TraceReader::open(run);
        const std::string out = dir.filePath("trace.json").toStdString();
        auto report = export_chrome_trace(*trace, out);
        QVERIFY(report.ok());
        QCOMPARE(report->events, trace->summary()->event_count);

        const json doc = load_json(out);
        std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> per_thread;
        for (const auto& e : doc["traceEvents"]) {
            if (e["ph"] == "X") {
                per_thread[{e["pid"].get<int>(), e["tid"].get<int>()}].emplace_back(
                    e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>());
            }
        }
        QVERIFY(per_thread.size() >= 8);  // 4 ranks x (host lane + stream lane)
        for (auto& [thread, spans] : per_thread) {
            std::sort(spans.begin(), spans.end(), [](auto a, auto b) {
                return a.first < b.first || (a.first == b.first && a.second > b.second);
            });
            std::vector<double> open;
            for (const auto& [start, end] : spans) {
                while (!open.empty() && open.back() <= start + 1e-9) {
                    open.pop_back();
                }
                QVERIFY2(open.empty() || end <= open.back() + 1e-9, "complete events overlap");
                open.push_back(end);
            }
        }
    }

    void csvHasOneRowPerEventAndQuotes() {
        QTemporaryDir dir;
        auto trace = TraceReader::open(hand_built_trace(dir));
        const std::string out = dir.filePath("events.csv").toStdString();
        auto report = export_csv(*trace, out);
        QVERIFY(report.ok());
        std::ifstream in(out);
        std::stringstream text;
        text << in.rdbuf();
        const std::string csv = text.str();
        QVERIFY(csv.starts_with("rank,lane,lane_kind,kind,category,name,start_ns,end_ns,"));
        // The lane name holds a comma, the script name a quote: both quoted per RFC 4180.
        QVERIFY(csv.find("0,\"main, thread\",host-thread,range,other,forward,100,400,300,0,,,,") !=
                std::string::npos);
        QVERIFY(csv.find("\"<script>alert(\"\"x\"\")</script>") != std::string::npos);
    }

    void unwritableOutputIsAnErrorAndLeavesNoFile() {
        QTemporaryDir dir;
        auto trace = TraceReader::open(hand_built_trace(dir));
        auto report = export_chrome_trace(*trace, "/nonexistent-dir/trace.json");
        QVERIFY(!report.ok());
        QVERIFY(report.error().message.find("/nonexistent-dir/trace.json") != std::string::npos);

        const std::string existing = dir.filePath("keep.json").toStdString();
        std::ofstream(existing) << "precious";
        auto refused = export_csv(*trace, existing);
        QVERIFY(!refused.ok());
        QCOMPARE(std::filesystem::file_size(existing), 8u);
    }
};

QTEST_GUILESS_MAIN(ExportTest)
#include "test_export.moc"
