// The event pack: a compact copy of the event table that loading reads instead of the rows.
// It must give back exactly what the rows give, and never be trusted when it disagrees.
#include <QTemporaryDir>
#include <QTest>

#include <limits>

#include "core/analysis/run_trace.h"
#include "core/store/event_pack.h"
#include "core/store/merge.h"
#include "core/store/sqlite_handle.h"
#include "core/store/trace_reader.h"
#include "tests/support/synthetic_run.h"

using namespace fulcrum;
using namespace fulcrum::store;

namespace {

bool same_event(const Event& a, const Event& b) {
    return a == b;
}

analysis::RunTrace load(const std::string& path, bool read_pack) {
    auto reader = TraceReader::open(path);
    if (!reader) {
        qFatal("%s", reader.error().message.c_str());
    }
    analysis::LoadOptions options;
    options.read_event_pack = read_pack;
    auto trace = analysis::load_run_trace(*reader, options);
    if (!trace) {
        qFatal("%s", trace.error().message.c_str());
    }
    return std::move(*trace);
}

// Every lane of both traces holds the same events in the same order.
void compare_traces(const analysis::RunTrace& a, const analysis::RunTrace& b) {
    QCOMPARE(a.ranks.size(), b.ranks.size());
    QCOMPARE(a.event_count(), b.event_count());
    for (std::size_t r = 0; r < a.ranks.size(); ++r) {
        QCOMPARE(a.ranks[r].lanes.size(), b.ranks[r].lanes.size());
        for (std::size_t l = 0; l < a.ranks[r].lanes.size(); ++l) {
            const auto& x = a.ranks[r].lanes[l].events;
            const auto& y = b.ranks[r].lanes[l].events;
            QCOMPARE(x.size(), y.size());
            for (std::size_t i = 0; i < x.size(); ++i) {
                if (!same_event(x[i], y[i])) {
                    QFAIL(qPrintable(
                        QStringLiteral("rank %1 lane %2 event %3 differs").arg(r).arg(l).arg(i)));
                }
            }
        }
    }
}

std::string merged_synthetic_run(const QTemporaryDir& dir) {
    testing::SyntheticRunOptions options;
    options.pp = 2;
    options.tp = 2;
    options.kernels_per_layer = 3;  // stream lanes with correlation ids
    auto inputs = testing::write_synthetic_rank_files(dir.filePath("ranks").toStdString(), options);
    if (!inputs) {
        qFatal("%s", inputs.error().message.c_str());
    }
    const std::string path = dir.filePath("run.fulcrum").toStdString();
    MergeOptions rows;  // the pack is the cache of a run of rows
    rows.events = WriterOptions::EventStorage::rows;
    auto merged = merge_rank_files(*inputs, path, rows);
    if (!merged) {
        qFatal("%s", merged.error().message.c_str());
    }
    return path;
}

}  // namespace

class EventPackTest : public QObject {
    Q_OBJECT

private slots:
    // Unknown values (-1), extremes of every field and foreign negative correlation ids.
    void blockRoundTripsEveryField() {
        constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
        constexpr auto kMin = std::numeric_limits<std::int64_t>::min();
        std::vector<Event> events(6);
        events[0].start_ns = 0;
        events[0].end_ns = 10;
        Event& extreme = events[1];
        extreme.start_ns = kMin;
        extreme.end_ns = kMax;
        extreme.bytes = kMax;
        extreme.correlation = 7;
        extreme.name = StringId{0xffffffffu};
        extreme.args = StringId{2};
        extreme.step = std::numeric_limits<std::int32_t>::min();
        extreme.microbatch = 1 << 30;
        extreme.stage = -32768;
        extreme.kind = EventKind::kernel;
        extreme.category = Category::attention;
        extreme.phase = Phase::weight_grad;
        extreme.copy_kind = CopyKind::peer_to_peer;
        extreme.src_memory = MemoryKind::device;
        extreme.dst_memory = MemoryKind::managed_static;
        events[2].start_ns = kMax;
        events[2].end_ns = kMin;
        events[2].bytes = kMin;
        events[2].correlation = kMax;
        events[3].start_ns = 5;
        events[3].end_ns = 5;
        events[3].correlation = -12345;  // a foreign id
        events[4].start_ns = 6;
        events[4].end_ns = 9;
        events[4].correlation = 0;
        events[5].start_ns = 7;
        events[5].end_ns = 8;
        events[5].correlation = 1;
        events[5].phase = Phase::backward;
        events[5].copy_kind = CopyKind::device_to_host;
        events[5].src_memory = MemoryKind::device;
        events[5].dst_memory = MemoryKind::pinned;
        for (auto& event : events) {
            event.lane = LaneId{3};
        }
        const std::string bytes = encode_event_block(events.data(), events.size());
        std::vector<Event> decoded;
        QVERIFY(decode_event_block(bytes, events.size(), LaneId{3}, kEventPackFormat, decoded));
        QCOMPARE(decoded.size(), events.size());
        for (std::size_t i = 0; i < events.size(); ++i) {
            QVERIFY2(same_event(events[i], decoded[i]), qPrintable(QString::number(i)));
        }
    }

    // A format-1 block (before memory kinds) still decodes, with the memory kinds unknown.
    void formatOneBlocksStillDecode() {
        Event event;
        event.start_ns = 100;
        event.end_ns = 250;
        event.kind = EventKind::memcpy;
        event.copy_kind = CopyKind::host_to_device;
        event.bytes = 4096;
        event.lane = LaneId{1};
        std::string bytes = encode_event_block(&event, 1);
        // Format 1 is format 2 without the two memory-kind bytes after the copy kind:
        // Δstart, duration, name, args (one byte each here), kind, category, phase, copy kind.
        const std::size_t memory_at = 2 + 2 + 1 + 1 + 4;  // 100 and 150 take two varint bytes
        bytes.erase(memory_at, 2);
        std::vector<Event> decoded;
        QVERIFY(decode_event_block(bytes, 1, LaneId{1}, 1, decoded));
        QCOMPARE(decoded.size(), 1u);
        QCOMPARE(decoded[0].copy_kind, CopyKind::host_to_device);
        QCOMPARE(decoded[0].bytes, std::int64_t{4096});
        QCOMPARE(decoded[0].src_memory, MemoryKind::none);
        QCOMPARE(decoded[0].dst_memory, MemoryKind::none);
    }

    // Short, overlong or trailing bytes are refused, and nothing is appended.
    void damagedBlocksAreRefused() {
        std::vector<Event> events(100);
        for (int i = 0; i < 100; ++i) {
            events[i].start_ns = i * 1000;
            events[i].end_ns = i * 1000 + 500;
            events[i].correlation = 1000 + i;
        }
        const std::string bytes = encode_event_block(events.data(), events.size());
        std::vector<Event> out(2);
        QVERIFY(!decode_event_block(bytes.substr(0, bytes.size() - 1), 100, LaneId{1},
                                    kEventPackFormat, out));
        QVERIFY(!decode_event_block(bytes + '\0', 100, LaneId{1}, kEventPackFormat, out));
        QVERIFY(!decode_event_block(std::string(12, '\xff'), 1, LaneId{1}, kEventPackFormat, out));
        QCOMPARE(out.size(), 2u);
    }

    // What merge writes loads to exactly what the rows load to.
    void mergedRunLoadsTheSameByPackAndByRows() {
        QTemporaryDir dir;
        const std::string path = merged_synthetic_run(dir);
        auto reader = TraceReader::open(path);
        QVERIFY(reader.ok());
        auto pack = reader->event_pack();
        QVERIFY(pack.ok());
        QVERIFY(pack->has_value());
        auto summary = reader->summary();
        QVERIFY(summary.ok());
        QCOMPARE((*pack)->events, summary->event_count);
        compare_traces(load(path, true), load(path, false));
    }

    // A pack that no longer matches the table (a row deleted by hand) is ignored.
    void stalePackFallsBackToRows() {
        QTemporaryDir dir;
        const std::string path = merged_synthetic_run(dir);
        {
            auto db = Database::open(path, Database::Mode::read_write);
            QVERIFY(db.ok());
            QVERIFY(
                db->exec("DELETE FROM event WHERE rowid = (SELECT MAX(rowid) FROM event)").ok());
        }
        auto reader = TraceReader::open(path);
        QVERIFY(reader.ok());
        auto pack = reader->event_pack();
        QVERIFY(pack.ok());
        QVERIFY(!pack->has_value());
        compare_traces(load(path, true), load(path, false));
    }

    // A damaged block is a clear error naming the file, not a crash or silent garbage.
    void damagedBlockIsAnError() {
        QTemporaryDir dir;
        const std::string path = merged_synthetic_run(dir);
        {
            auto db = Database::open(path, Database::Mode::read_write);
            QVERIFY(db.ok());
            QVERIFY(db->exec("UPDATE event_pack SET data = substr(data, 1, length(data) - 3) "
                             "WHERE rowid = (SELECT MIN(rowid) FROM event_pack)")
                        .ok());
        }
        auto reader = TraceReader::open(path);
        QVERIFY(reader.ok());
        auto trace = analysis::load_run_trace(*reader);
        QVERIFY(!trace.ok());
        QCOMPARE(trace.error().code, ErrorCode::corrupt);
        QVERIFY(trace.error().message.find(path) != std::string::npos);
        QVERIFY(trace.error().message.find("event pack") != std::string::npos);
    }
};

QTEST_GUILESS_MAIN(EventPackTest)
#include "test_event_pack.moc"
