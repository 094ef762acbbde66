// HTA's kernel answers on a hand-built trace: time by kernel type and their overlaps, top
// kernels with their spread over ranks, idle time by cause per stream with the queue length,
// and launch statistics. Every figure worked out below, in µs.
#include <QTest>

#include "core/analysis/kernels.h"

using namespace fulcrum;
using namespace fulcrum::analysis;

namespace {

constexpr std::int64_t us = 1000;

Event& add(RunTrace& trace, LaneTrace& lane, std::string_view name, EventKind kind,
           std::int64_t start, std::int64_t end, std::int64_t correlation) {
    Event& event = trace.add_range(lane, name,
                                   kind == EventKind::collective ? Category::communication
                                   : kind == EventKind::api      ? Category::runtime
                                                                 : Category::compute,
                                   start * us, end * us);
    event.kind = kind;
    event.correlation = correlation;
    return event;
}

// Rank 0. Launch calls on the host: L1 [0,10) → K1, L2 [20,30) → K2, L3 [200,260) → K3,
// L4 [270,280) → K4, L5 [90,95) → N1.
// Stream 7: gemm K1 [15,115), gelu K2 [120,140), gemm K3 [300,400), Memcpy K4 [450,458).
// Stream 13: NCCL all-reduce N1 [100,200).
// Rank 1: gemm [0,300) on its stream, no launch records.
RunTrace hand_trace() {
    RunTrace trace;
    auto& host = trace.add_lane(0, LaneKind::host_thread, "main");
    auto& s7 = trace.add_lane(0, LaneKind::gpu_stream, "stream 7");
    auto& s13 = trace.add_lane(0, LaneKind::gpu_stream, "stream 13");
    add(trace, host, "cudaLaunchKernel", EventKind::api, 0, 10, 1);
    add(trace, host, "cudaLaunchKernel", EventKind::api, 20, 30, 2);
    add(trace, host, "cudaLaunchKernel", EventKind::api, 90, 95, 5);
    add(trace, host, "cudaLaunchKernel", EventKind::api, 200, 260, 3);
    add(trace, host, "cudaMemcpyAsync", EventKind::api, 270, 280, 4);
    add(trace, s7, "gemm", EventKind::kernel, 15, 115, 1);
    add(trace, s7, "gelu", EventKind::kernel, 120, 140, 2);
    add(trace, s7, "gemm", EventKind::kernel, 300, 400, 3);
    add(trace, s7, "Memcpy HtoD", EventKind::memcpy, 450, 458, 4);
    add(trace, s13, "ncclDevKernel_AllReduce", EventKind::collective, 100, 200, 5);
    auto& s7_1 = trace.add_lane(1, LaneKind::gpu_stream, "stream 7");
    add(trace, s7_1, "gemm", EventKind::kernel, 0, 300, -1);
    trace.finish();
    return trace;
}

}  // namespace

class KernelsTest : public QObject {
    Q_OBJECT

private slots:
    // Rank 0: [15,100) computation 85; [100,115) both 15; [115,120) communication 5; [120,140)
    // both 20; [140,200) communication 60; [300,400) computation 100; [450,458) memory 8.
    // Computation only 185, communication only 65, both 35, memory 8: the union 293; the
    // kernels span [15,458) = 443, so 150 idle.
    void timeByTypeAndOverlaps() {
        const KernelAnalysis a = analyze_kernels(hand_trace());
        QCOMPARE(a.time_by_type.size(), std::size_t(2));
        const KernelTimeByType& r = a.time_by_type[0];
        QCOMPARE(r.rank, 0);
        QCOMPARE(r.ns[0b001], 185 * us);
        QCOMPARE(r.ns[0b010], 65 * us);
        QCOMPARE(r.ns[0b011], 35 * us);
        QCOMPARE(r.ns[0b100], 8 * us);
        QCOMPARE(r.busy_ns(), 293 * us);
        QCOMPARE(r.kernel_span_ns, 443 * us);
        QCOMPARE(r.idle_ns, 150 * us);
    }

    // gemm: K1 100 + K3 100 on rank 0, 300 on rank 1: count 3, total 500, min 100, max 300;
    // rank totals 200 and 300, rank 1 slowest. Then the NCCL kernel 100, gelu 20, the copy 8.
    void topKernelsWithTheirSpread() {
        const KernelAnalysis a = analyze_kernels(hand_trace());
        QCOMPARE(a.top_kernels.size(), std::size_t(4));
        const KernelStats& gemm = a.top_kernels[0];
        QCOMPARE(gemm.name, std::string("gemm"));
        QCOMPARE(gemm.count, std::int64_t(3));
        QCOMPARE(gemm.total_ns, 500 * us);
        QCOMPARE(gemm.min_ns, 100 * us);
        QCOMPARE(gemm.max_ns, 300 * us);
        QCOMPARE(gemm.ranks, 2);
        QCOMPARE(gemm.rank_total_min_ns, 200 * us);
        QCOMPARE(gemm.rank_total_max_ns, 300 * us);
        QCOMPARE(gemm.slowest_rank, 1);
        QCOMPARE(a.top_kernels[1].type, KernelType::communication);
        QCOMPARE(a.top_kernels[3].type, KernelType::memory);
    }

    // Stream 7 of rank 0: before K2 a 5 µs gap whose launch (20) came before K1 ended (115):
    // kernel wait; before K3 160 µs whose launch (200) came after K2 ended (140): host wait;
    // before K4 50 µs, launched at 270 before K3 ended, 50 ≥ 30: other.
    // Queue: +1 at 0 and 20, −1 at 115 and 140, +1 at 200 and 270, −1 at 400 and 458:
    // 1·20 + 2·95 + 1·25 + 0·60 + 1·70 + 2·130 + 1·58 = 623 over 458: mean 1.360, max 2.
    void idleByCauseAndQueueLength() {
        const KernelAnalysis a = analyze_kernels(hand_trace());
        const StreamIdle* stream = nullptr;
        for (const StreamIdle& idle : a.idle) {
            if (idle.rank == 0 && idle.lane == "stream 7")
                stream = &idle;
        }
        QVERIFY(stream != nullptr);
        QCOMPARE(stream->kernels, std::int64_t(4));
        QCOMPARE(stream->kernel_wait_ns, 5 * us);
        QCOMPARE(stream->host_wait_ns, 160 * us);
        QCOMPARE(stream->other_ns, 50 * us);
        QCOMPARE(stream->max_queue_length, std::int64_t(2));
        QVERIFY(std::abs(stream->mean_queue_length - 623.0 / 458.0) < 1e-12);
    }

    // Launches (µs): K1 call 10, kernel 100, delay 15 − 10 = 5; K2 10, 20, 120 − 30 = 90; K3 60,
    // 100, 300 − 260 = 40; K4 10, 8, 450 − 280 = 170; N1 5, 100, 100 − 95 = 5. Delays 310 in
    // all, the longest 170; one short kernel (K4: a 10 µs call for an 8 µs copy), one call over
    // 50 µs (L3), one delay over 100 µs (K4). Rank 1 has no launch records.
    void launchStatistics() {
        const KernelAnalysis a = analyze_kernels(hand_trace());
        QCOMPARE(a.launches.size(), std::size_t(1));
        const LaunchStats& l = a.launches[0];
        QCOMPARE(l.launches, std::int64_t(5));
        QCOMPARE(l.cpu_total_ns, 95 * us);
        QCOMPARE(l.gpu_total_ns, 328 * us);
        QCOMPARE(l.delay_total_ns, 310 * us);
        QCOMPARE(l.delay_max_ns, 170 * us);
        QCOMPARE(l.short_kernels, std::int64_t(1));
        QCOMPARE(l.slow_calls, std::int64_t(1));
        QCOMPARE(l.delay_outliers, std::int64_t(1));
    }

    // A CPU run has no kernels: nothing to report, nothing invented.
    void aCpuRunHasNoKernelFigures() {
        RunTrace trace;
        auto& host = trace.add_lane(0, LaneKind::host_thread, "main");
        trace.add_range(host, "forward", Category::compute, 0, 100, 0, 0, 0, Phase::forward);
        trace.finish();
        const KernelAnalysis a = analyze_kernels(trace);
        QVERIFY(a.time_by_type.empty() && a.top_kernels.empty() && a.idle.empty() &&
                a.launches.empty());
    }
};

QTEST_GUILESS_MAIN(KernelsTest)
#include "test_analysis_kernels.moc"
