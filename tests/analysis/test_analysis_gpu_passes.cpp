// GPU-true passes: on a rank with device work a host range only launches kernels, so a pass
// is timed by the kernels it launched (joined by correlation id, as Nsight Systems projects
// NVTX ranges onto the GPU). Hand-built traces where a host range is 10 µs and its kernels
// 2 ms; CPU ranks keep their host times. Figures worked out in each test.
#include <QTest>

#include "core/analysis/correlation_map.h"
#include "core/analysis/passes.h"

using namespace fulcrum;
using namespace fulcrum::analysis;

namespace {

constexpr std::int64_t us = 1000;

Event& launch(RunTrace& trace, LaneTrace& host, std::int64_t start, std::int64_t correlation) {
    Event& event =
        trace.add_range(host, "cudaLaunchKernel", Category::runtime, start, start + 1 * us);
    event.kind = EventKind::api;
    event.correlation = correlation;
    return event;
}

Event& kernel(RunTrace& trace, LaneTrace& stream, std::string_view name, std::int64_t start,
              std::int64_t end, std::int64_t correlation, EventKind kind = EventKind::kernel) {
    Event& event = trace.add_range(
        stream, name, kind == EventKind::collective ? Category::communication : Category::compute,
        start, end);
    event.kind = kind;
    event.correlation = correlation;
    return event;
}

// Host: forward [0, 10) µs launching at 2 µs (correlation 1) and 4 µs (2); backward
// [20, 30) µs holding "recv gradients" [21, 23) µs that launches an NCCL receive (3), then a
// launch at 25 µs (4).
// Stream 7: kernel 1 [5, 2005) µs, kernel 2 [2005, 2105) µs, kernel 4 [2700, 3700) µs.
// Stream 13: the NCCL receive [2200, 2700) µs.
//   forward:  [5, 2105) µs = 2100 µs of wall, all compute.
//   backward: [2200, 3700) µs = 1500 µs; pipeline wait 500 µs (the receive); compute 1000 µs.
// `id_stride` spreads the correlation ids apart (1: dense, as CUPTI numbers them).
RunTrace gpu_rank(bool with_streams, std::int64_t id_stride = 1) {
    RunTrace trace;
    auto& host = trace.add_lane(0, LaneKind::host_thread, "main");
    trace.add_range(host, "forward", Category::compute, 0, 10 * us, 0, 0, 0, Phase::forward);
    launch(trace, host, 2 * us, 1 * id_stride);
    launch(trace, host, 4 * us, 2 * id_stride);
    trace.add_range(host, "backward", Category::compute, 20 * us, 30 * us, 0, 0, 0,
                    Phase::backward);
    trace.add_range(host, "recv gradients", Category::communication, 21 * us, 23 * us, 0, 0, 0);
    launch(trace, host, 22 * us, 3 * id_stride);
    launch(trace, host, 25 * us, 4 * id_stride);
    if (with_streams) {
        auto& compute = trace.add_lane(0, LaneKind::gpu_stream, "stream 7");
        auto& nccl = trace.add_lane(0, LaneKind::gpu_stream, "stream 13");
        kernel(trace, compute, "gemm", 5 * us, 2005 * us, 1 * id_stride);
        kernel(trace, compute, "gelu", 2005 * us, 2105 * us, 2 * id_stride);
        kernel(trace, nccl, "ncclDevKernel_SendRecv", 2200 * us, 2700 * us, 3 * id_stride,
               EventKind::collective);
        kernel(trace, compute, "gemm", 2700 * us, 3700 * us, 4 * id_stride);
    }
    trace.finish();
    return trace;
}

}  // namespace

class GpuPassesTest : public QObject {
    Q_OBJECT

private slots:
    // Ids far apart (an importer keeps whatever ids it read) take CorrelationMap's sorted
    // path instead of its table; the passes must not change.
    void sparseCorrelationIdsGiveTheSamePasses() {
        const auto dense = find_passes(gpu_rank(true));
        const auto sparse = find_passes(gpu_rank(true, 1'000'000'007));
        QCOMPARE(sparse.size(), dense.size());
        for (std::size_t i = 0; i < dense.size(); ++i) {
            QCOMPARE(sparse[i].start_ns, dense[i].start_ns);
            QCOMPARE(sparse[i].end_ns, dense[i].end_ns);
            QCOMPARE(sparse[i].pipeline_wait_ns, dense[i].pipeline_wait_ns);
            QCOMPARE(sparse[i].compute_ns, dense[i].compute_ns);
        }
    }

    // Both of CorrelationMap's layouts: a repeated id is folded into the first, absent ids
    // (below, between and above the ones there) are not found.
    void correlationMapFoldsRepeatsAndFindsOnlyWhatIsThere() {
        for (const std::int64_t stride : {std::int64_t{1}, std::int64_t{1} << 40}) {
            const CorrelationMap<std::int64_t> map(
                {{3 * stride, 10}, {1 * stride, 5}, {3 * stride, 7}},
                [](std::int64_t& kept, std::int64_t more) { kept += more; });
            QVERIFY(map.find(1 * stride) != nullptr);
            QCOMPARE(*map.find(1 * stride), std::int64_t{5});
            QCOMPARE(*map.find(3 * stride), std::int64_t{17});
            QVERIFY(map.find(2 * stride) == nullptr);
            QVERIFY(map.find(0) == nullptr);
            QVERIFY(map.find(4 * stride) == nullptr);
        }
        const CorrelationMap<int> empty({}, [](int&, int) {});
        QVERIFY(empty.find(1) == nullptr);
    }

    void passesAreTimedByTheirKernels() {
        const auto passes = find_passes(gpu_rank(true));
        QCOMPARE(passes.size(), std::size_t(2));
        const Pass& forward = passes[0];
        QCOMPARE(forward.phase, Phase::forward);
        QCOMPARE(forward.start_ns, 5 * us);
        QCOMPARE(forward.end_ns, 2105 * us);
        QCOMPARE(forward.wall_ns(), 2100 * us);  // the host range: 10 µs
        QCOMPARE(forward.compute_ns, 2100 * us);
        const Pass& backward = passes[1];
        QCOMPARE(backward.wall_ns(), 1500 * us);
        QCOMPARE(backward.pipeline_wait_ns, 500 * us);
        QCOMPARE(backward.compute_ns, 1000 * us);
    }

    // The same ranges without streams (a CPU rank): host times, 10 µs each.
    void cpuRanksKeepHostTimes() {
        const auto passes = find_passes(gpu_rank(false));
        QCOMPARE(passes.size(), std::size_t(2));
        QCOMPARE(passes[0].wall_ns(), 10 * us);
        QCOMPARE(passes[1].wall_ns(), 10 * us);
        QCOMPARE(passes[1].pipeline_wait_ns, 2 * us);
    }

    // Streams but no launch records (runtime API tracing was off): nothing joins the host
    // ranges to the kernels, so the rank keeps its host times.
    void withoutLaunchRecordsHostTimesStay() {
        RunTrace trace;
        auto& host = trace.add_lane(0, LaneKind::host_thread, "main");
        trace.add_range(host, "forward", Category::compute, 0, 10 * us, 0, 0, 0, Phase::forward);
        auto& stream = trace.add_lane(0, LaneKind::gpu_stream, "stream 7");
        kernel(trace, stream, "gemm", 5 * us, 2005 * us, -1);
        trace.finish();
        const auto passes = find_passes(trace);
        QCOMPARE(passes.size(), std::size_t(1));
        QCOMPARE(passes[0].wall_ns(), 10 * us);
    }

    // On a rank with streams, a forward range that launched nothing is no pass: no device
    // time to give it.
    void aRangeThatLaunchedNothingIsNoPassOnAGpuRank() {
        RunTrace trace = gpu_rank(true);
        auto& host = trace.ranks[0].lanes[0];
        trace.add_range(host, "forward", Category::compute, 40 * us, 50 * us, 1, 0, 0,
                        Phase::forward);
        trace.finish();
        const auto passes = find_passes(trace);
        QCOMPARE(passes.size(), std::size_t(2));
    }
};

QTEST_GUILESS_MAIN(GpuPassesTest)
#include "test_analysis_gpu_passes.moc"
