// Communication by collective on a hand-built 4-rank trace (tp = rank mod 2, cp = rank / 2):
// calls, bytes, transfer and wait per name and group, and NCCL-tests' bandwidths. Figures in µs
// and bytes, worked out in each test.
#include <QTest>

#include "core/analysis/communication.h"
#include "tests/analysis/trace_builders.h"

using namespace fulcrum;
using namespace fulcrum::analysis;
using namespace fulcrum::analysis::builders;

namespace {

constexpr std::int64_t us = 1000;

void call(RunTrace& trace, int rank, std::string_view name, int mb, std::int64_t start,
          std::int64_t end, std::int64_t bytes) {
    Event& e = trace.add_range(host(trace, rank), name, Category::communication, start * us,
                               end * us, 0, mb, 0, Phase::forward);
    e.kind = EventKind::collective;
    e.bytes = bytes;
}

// tp all-reduce on {0,1}: call 1, rank 0 at 0 and rank 1 at 50 (the last), both end at 150:
// transfer 100, wait 50; call 2, both start at 1000 (the lowest rank counts as last), end at
// 1300: transfer 300. 2 × 10⁶ bytes over 400 µs: algbw 5 GB/s, busbw 5·2(2−1)/2 = 5.
// tp all-reduce on {2,3}: one call of 2·10⁶ bytes, [0,500) on both: 4 GB/s.
// cp all-gather kv on {0,2}: rank 0 [0,1000), rank 2 [200,1000): transfer 800, wait 200;
// 4·10⁶ bytes: algbw 5 GB/s, busbw 5·(2−1)/2 = 2.5.
RunTrace hand_trace() {
    RunTrace trace;
    for (int r = 0; r < 4; ++r)
        add_rank(trace, r, 0, r % 2, 0, r / 2);
    call(trace, 0, "tp all-reduce", 0, 0, 150, 1'000'000);
    call(trace, 1, "tp all-reduce", 0, 50, 150, 1'000'000);
    call(trace, 0, "tp all-reduce", 1, 1000, 1300, 1'000'000);
    call(trace, 1, "tp all-reduce", 1, 1000, 1300, 1'000'000);
    call(trace, 2, "tp all-reduce", 0, 0, 500, 2'000'000);
    call(trace, 3, "tp all-reduce", 0, 0, 500, 2'000'000);
    call(trace, 0, "cp all-gather kv", 0, 2000, 3000, 4'000'000);
    call(trace, 2, "cp all-gather kv", 0, 2200, 3000, 4'000'000);
    trace.finish();
    return trace;
}

const CollectiveSummary& row(const std::vector<CollectiveSummary>& rows, std::string_view name,
                             std::vector<std::int32_t> ranks) {
    for (const CollectiveSummary& r : rows) {
        if (r.name == name && r.ranks == ranks)
            return r;
    }
    qFatal("no row %s", std::string(name).c_str());
}

}  // namespace

class CommunicationTest : public QObject {
    Q_OBJECT

private slots:
    void perCollectiveAndGroup() {
        const RunTrace trace = hand_trace();
        const auto rows = summarize_collectives(trace, matched_collectives(trace));
        QCOMPARE(rows.size(), std::size_t(3));
        const CollectiveSummary& tp01 = row(rows, "tp all-reduce", {0, 1});
        QCOMPARE(tp01.kind, CollectiveKind::all_reduce);
        QCOMPARE(tp01.calls, std::int64_t(2));
        QCOMPARE(tp01.bytes, std::int64_t(2'000'000));
        QCOMPARE(tp01.transfer_ns, 400 * us);
        QCOMPARE(tp01.wait_ns, 50 * us);
        QCOMPARE(tp01.algbw_gb_s, 5.0);
        QCOMPARE(tp01.busbw_gb_s, 5.0);
        const CollectiveSummary& tp23 = row(rows, "tp all-reduce", {2, 3});
        QCOMPARE(tp23.algbw_gb_s, 4.0);
        const CollectiveSummary& cp = row(rows, "cp all-gather kv", {0, 2});
        QCOMPARE(cp.kind, CollectiveKind::all_gather);
        QCOMPARE(cp.transfer_ns, 800 * us);
        QCOMPARE(cp.wait_ns, 200 * us);
        QCOMPARE(cp.algbw_gb_s, 5.0);
        QCOMPARE(cp.busbw_gb_s, 2.5);
    }

    // The hand trace's groups together: tp all-reduce, 2 groups of 2, 3 calls, 4·10⁶ bytes
    // over 900 µs (algbw 4.44, busbw the same for n = 2), its slower group {2,3} at 4 GB/s,
    // which is 0.9 of the name's; the cp all-gather's one group at 1.0. Slowest first:
    // {2,3}, then the others in their order.
    void groupsTogetherAndTheSlowestFirst() {
        const RunTrace trace = hand_trace();
        const auto rows = summarize_collectives(trace, matched_collectives(trace));
        const std::vector<CollectiveTotal> totals = total_collectives(rows);
        QCOMPARE(totals.size(), std::size_t(2));
        const CollectiveTotal& tp = totals[0].name == "tp all-reduce" ? totals[0] : totals[1];
        QCOMPARE(tp.groups, std::int64_t(2));
        QCOMPARE(tp.group_size, 2);
        QCOMPARE(tp.calls, std::int64_t(3));
        QCOMPARE(tp.bytes, std::int64_t(4'000'000));
        QCOMPARE(tp.transfer_ns, 900 * us);
        QCOMPARE(tp.wait_ns, 50 * us);
        QCOMPARE(tp.algbw_gb_s, 4.0e6 / 900e3);
        QCOMPARE(tp.busbw_gb_s, tp.algbw_gb_s);
        QCOMPARE(tp.slowest_busbw_gb_s, 4.0);
        const std::vector<SlowGroup> slow = slowest_first(rows, totals);
        QCOMPARE(slow.size(), std::size_t(3));
        QCOMPARE(slow[0].group.ranks, (std::vector<std::int32_t>{2, 3}));
        QCOMPARE(slow[0].vs_name, 4.0 / tp.busbw_gb_s);
        QCOMPARE(slow.back().group.ranks, (std::vector<std::int32_t>{0, 1}));
        QCOMPARE(slow.back().vs_name, 5.0 / tp.busbw_gb_s);
        // A table listing them: the three groups as they are while three fit, folded past.
        const CollectiveListing plain = list_collectives(rows, 3);
        QVERIFY(!plain.folded && plain.totals.empty());
        QCOMPARE(plain.groups.size(), std::size_t(3));
        QCOMPARE(plain.groups[0].group.ranks, rows[0].ranks);
        QCOMPARE(plain.groups[0].vs_name, 0.0);
        const CollectiveListing folded = list_collectives(rows, 2);
        QVERIFY(folded.folded);
        QCOMPARE(folded.totals.size(), totals.size());
        QCOMPARE(folded.groups[0].group.ranks, (std::vector<std::int32_t>{2, 3}));
        QCOMPARE(folded.groups[0].vs_name, slow[0].vs_name);
    }

    void kindsAndFactors() {
        QCOMPARE(collective_kind_of("ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
                 CollectiveKind::all_reduce);
        QCOMPARE(collective_kind_of("dp all-reduce gradients"), CollectiveKind::all_reduce);
        QCOMPARE(collective_kind_of("cp reduce-scatter dkv"), CollectiveKind::reduce_scatter);
        QCOMPARE(collective_kind_of("ncclDevKernel_AllGather_RING_LL"), CollectiveKind::all_gather);
        QCOMPARE(collective_kind_of("ncclDevKernel_SendRecv"), CollectiveKind::point_to_point);
        QCOMPARE(collective_kind_of("ncclDevKernel_Broadcast_RING_LL"), CollectiveKind::broadcast);
        QCOMPARE(bus_bandwidth_factor(CollectiveKind::all_reduce, 8), 1.75);
        QCOMPARE(bus_bandwidth_factor(CollectiveKind::all_gather, 8), 0.875);
        QCOMPARE(bus_bandwidth_factor(CollectiveKind::broadcast, 8), 1.0);
    }
};

QTEST_GUILESS_MAIN(CommunicationTest)
#include "test_analysis_communication.moc"
