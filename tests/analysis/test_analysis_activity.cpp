// What a rank is doing when events overlap on one lane: kernels on one stream that overlap
// (Kineto rounds to the microsecond; graph replays) count whole, as unions; host ranges that
// overlap without nesting keep their whole durations; synchronisation is not device work;
// only host↔device copies are offload. Figures worked out by hand in each test.
#include <QTest>

#include "core/analysis/activity.h"
#include "core/analysis/offload.h"
#include "core/analysis/step_breakdown.h"

using namespace fulcrum;
using namespace fulcrum::analysis;

namespace {

Event& kernel(RunTrace& trace, LaneTrace& lane, std::string_view name, std::int64_t start,
              std::int64_t end, Category category = Category::compute) {
    Event& event = trace.add_range(lane, name, category, start, end);
    event.kind = category == Category::communication ? EventKind::collective : EventKind::kernel;
    return event;
}

Event& copy(RunTrace& trace, LaneTrace& lane, CopyKind kind, std::int64_t start, std::int64_t end,
            std::int64_t bytes) {
    Event& event = trace.add_range(lane, "Memcpy", Category::memory, start, end);
    event.kind = EventKind::memcpy;
    event.copy_kind = kind;
    event.bytes = bytes;
    return event;
}

}  // namespace

class ActivityTest : public QObject {
    Q_OBJECT

private slots:
    // Host step [0, 1000) µs; on stream 7 gemm A [0, 400) and gemm B [298, 698): they overlap
    // by 102. The union is [0, 698) = 698 of compute, not A + the clipped B = 400.
    //   compute 698, idle 1000 − 698 = 302.
    void overlappingKernelsOnOneStreamCountWhole() {
        RunTrace trace;
        auto& host = trace.add_lane(0, LaneKind::host_thread, "main");
        trace.add_range(host, "step", Category::schedule, 0, 1'000'000, 0);
        auto& stream = trace.add_lane(0, LaneKind::gpu_stream, "stream 7 (device 0)");
        kernel(trace, stream, "gemm A", 0, 400'000);
        kernel(trace, stream, "gemm B", 298'000, 698'000);
        trace.finish();
        const RankActivity activity = rank_activity(trace.ranks[0]);
        QCOMPARE(activity.compute.total(), std::int64_t(698'000));
        const auto rows = step_breakdown(trace);
        QCOMPARE(rows.size(), std::size_t(1));
        QCOMPARE(rows[0].compute_ns, std::int64_t(698'000));
        QCOMPARE(rows[0].idle_ns, std::int64_t(302'000));
    }

    // Stream 7: compute [0, 100) and an NCCL kernel [50, 150) overlapping it on the same
    // stream (one clipped under the other before). Compute 100, communication 100 of which
    // [50, 100) = 50 under compute: overlapped 50, exposed 50; idle = 200 − 150 = 50.
    void computeAndCommunicationOnOneStreamBothCount() {
        RunTrace trace;
        auto& host = trace.add_lane(0, LaneKind::host_thread, "main");
        trace.add_range(host, "step", Category::schedule, 0, 200, 0);
        auto& stream = trace.add_lane(0, LaneKind::gpu_stream, "stream 7 (device 0)");
        kernel(trace, stream, "gemm", 0, 100);
        kernel(trace, stream, "ncclDevKernel_AllReduce", 50, 150, Category::communication);
        trace.finish();
        const auto rows = step_breakdown(trace);
        QCOMPARE(rows.size(), std::size_t(1));
        QCOMPARE(rows[0].compute_ns, std::int64_t(100));
        QCOMPARE(rows[0].overlapped_communication_ns, std::int64_t(50));
        QCOMPARE(rows[0].exposed_communication_ns, std::int64_t(50));
        QCOMPARE(rows[0].idle_ns, std::int64_t(50));
    }

    // A stream sync record [0, 80) (the host waited) and a kernel [80, 100): only the kernel
    // is device work. Compute 20, other 0, idle 80.
    void synchronisationIsNotDeviceWork() {
        RunTrace trace;
        auto& host = trace.add_lane(0, LaneKind::host_thread, "main");
        trace.add_range(host, "step", Category::schedule, 0, 100, 0);
        auto& stream = trace.add_lane(0, LaneKind::gpu_stream, "stream 7 (device 0)");
        trace.add_range(stream, "Stream Sync", Category::runtime, 0, 80).kind = EventKind::sync;
        kernel(trace, stream, "gemm", 80, 100);
        trace.finish();
        const auto rows = step_breakdown(trace);
        QCOMPARE(rows.size(), std::size_t(1));
        QCOMPARE(rows[0].compute_ns, std::int64_t(20));
        QCOMPARE(rows[0].other_ns, std::int64_t(0));
        QCOMPARE(rows[0].idle_ns, std::int64_t(80));
    }

    // CPU rank, one thread: forward [0, 100) (compute) holds a receive [20, 60); a send
    // [50, 130) starts inside the receive and outlives both (ranges of two code paths).
    // Innermost at each instant: [0, 20) forward, [20, 50) recv, [50, 130) send.
    //   compute 20 + communication 110 = 130; before, the send was cut at the receive's end
    //   (60) and [100, 130) counted as idle.
    void hostRangesThatOverlapKeepTheirDuration() {
        RunTrace trace;
        auto& host = trace.add_lane(0, LaneKind::host_thread, "main");
        trace.add_range(host, "step", Category::schedule, 0, 150, 0);
        trace.add_range(host, "forward", Category::compute, 0, 100, 0, 0, 0, Phase::forward);
        trace.add_range(host, "recv activations", Category::communication, 20, 60, 0, 0, 0);
        trace.add_range(host, "send activations", Category::communication, 50, 130, 0, 0, 0);
        trace.finish();
        const RankActivity activity = rank_activity(trace.ranks[0]);
        QCOMPARE(activity.compute.total(), std::int64_t(20));
        QCOMPARE(activity.communication.total(), std::int64_t(110));
        const auto rows = step_breakdown(trace);
        QCOMPARE(rows.size(), std::size_t(1));
        QCOMPARE(rows[0].idle_ns, std::int64_t(20));
    }

    // Copy stream: HtoD [0, 100) of 1000 B, DtoD [100, 300) of 10^6 B, PtoP [300, 400), and a
    // copy of no recorded kind but category offload [400, 450) of 500 B. Offload is the HtoD
    // and the offload-category copy: 150 ns, 1500 B / 150 ns = 10 GB/s. The DtoD copy is no
    // offload (it was counted before, and made the bandwidth 1001000 B / 300 ns).
    void onlyHostDeviceCopiesAreOffload() {
        RunTrace trace;
        auto& copies = trace.add_lane(0, LaneKind::gpu_stream, "stream 9 (device 0)");
        copy(trace, copies, CopyKind::host_to_device, 0, 100, 1000).category = Category::offload;
        copy(trace, copies, CopyKind::device_to_device, 100, 300, 1'000'000);
        copy(trace, copies, CopyKind::peer_to_peer, 300, 400, 1000);
        copy(trace, copies, CopyKind::none, 400, 450, 500).category = Category::offload;
        trace.finish();
        const auto result = analyze_offload(trace, nullptr, 2);
        QCOMPARE(result.ranks.size(), std::size_t(1));
        QCOMPARE(result.ranks[0].copies, std::int64_t(2));
        QCOMPARE(result.ranks[0].copy_ns, std::int64_t(150));
        QCOMPARE(result.ranks[0].bytes, std::int64_t(1500));
        QCOMPARE(result.bandwidth_gb_s.value(), 10.0);
        QVERIFY(is_offload_copy(copy(trace, copies, CopyKind::device_to_host, 0, 1, 1)));
        QVERIFY(!is_offload_copy(copy(trace, copies, CopyKind::host_to_host, 0, 1, 1)));
    }

    // A run whose only copies are device-to-device has no offload at all.
    void deviceToDeviceCopiesAloneAreNoOffload() {
        RunTrace trace;
        auto& copies = trace.add_lane(0, LaneKind::gpu_stream, "stream 9 (device 0)");
        copy(trace, copies, CopyKind::device_to_device, 0, 100, 4096);
        trace.finish();
        const auto result = analyze_offload(trace, nullptr, 2);
        QVERIFY(result.ranks.empty());
    }
};

QTEST_GUILESS_MAIN(ActivityTest)
#include "test_analysis_activity.moc"
