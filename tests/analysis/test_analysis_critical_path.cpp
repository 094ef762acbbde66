// The critical path of a pp2 1F1B step on a hand-built trace, its shares, and the what-if of
// its passes. Times in µs, worked out below.
#include <QTest>

#include "core/analysis/critical_path.h"
#include "tests/analysis/trace_builders.h"

using namespace fulcrum;
using namespace fulcrum::analysis;
using namespace fulcrum::analysis::builders;

namespace {

constexpr std::int64_t us = 1000;

void pass(RunTrace& trace, int rank, Phase phase, int mb, std::int64_t start, std::int64_t end,
          std::int64_t recv_end = -1) {
    LaneTrace& lane = host(trace, rank);
    const auto stage = static_cast<std::int16_t>(rank);
    trace.add_range(lane, phase == Phase::forward ? "forward" : "backward", Category::compute,
                    start * us, end * us, 0, mb, stage, phase);
    if (recv_end > start) {
        trace
            .add_range(lane, phase == Phase::forward ? "recv activations" : "recv gradients",
                       Category::communication, start * us, recv_end * us, 0, mb, stage, phase)
            .kind = EventKind::collective;
    }
}

// Rank 0 is stage 0, rank 1 stage 1 (pp2, 1F1B, 2 micro-batches):
//   rank 1: F0 [100,210) receiving until 110; B0 [210,410); F1 [410,510); B1 [510,810), slow;
//   rank 0: F0 [0,100); F1 [100,200); B0 [200,620) receiving until 420; B1 [620,1020)
//           receiving until 820; optimizer [1020,1070); rank 1's optimizer [810,860).
// Back from the end (1070, rank 0's optimizer): B1 on rank 0 waited for rank 1's B1, which
// ended at 810 and arrived at 820 → backward [820,1020), transfer [810,820); rank 1's B1
// followed its F1, which followed B0, which followed F0; F0 waited for rank 0's F0 (ended
// 100, arrived 110) → forward [110,210), transfer [100,110), rank 0's F0 [0,100).
// Shares: rank 0: 100 + 10 + 200 + 50 = 360; rank 1: 10 + 100 + 200 + 100 + 300 = 710;
// forward 300, backward 700, pipeline transfer 20, optimizer 50: 1070 in all.
RunTrace step_trace() {
    RunTrace trace;
    add_rank(trace, 0, 0, 0, 0, 0);
    add_rank(trace, 1, 0, 0, 1, 0);
    trace.run.config_json = R"({"dp":1,"tp":1,"pp":2,"cp":1,"schedule":"1f1b","microbatches":2})";
    trace.add_range(host(trace, 0), "step", Category::schedule, 0, 1070 * us, 0);
    trace.add_range(host(trace, 1), "step", Category::schedule, 100 * us, 860 * us, 0);
    pass(trace, 0, Phase::forward, 0, 0, 100);
    pass(trace, 0, Phase::forward, 1, 100, 200);
    pass(trace, 1, Phase::forward, 0, 100, 210, 110);
    pass(trace, 1, Phase::backward, 0, 210, 410);
    pass(trace, 1, Phase::forward, 1, 410, 510);
    pass(trace, 1, Phase::backward, 1, 510, 810);
    pass(trace, 0, Phase::backward, 0, 200, 620, 420);
    pass(trace, 0, Phase::backward, 1, 620, 1020, 820);
    trace.add_range(host(trace, 0), "optimizer", Category::optimizer, 1020 * us, 1070 * us, 0);
    trace.add_range(host(trace, 1), "optimizer", Category::optimizer, 810 * us, 860 * us, 0);
    trace.finish();
    return trace;
}

// pp2 interleaved over 2 model chunks, one micro-batch, forward only (µs): rank 0 runs chunk 0
// [0,100); rank 1 chunk 0 [100,200), receiving until 110; rank 0 chunk 1 [200,300), receiving
// from rank 1's chunk 0 until 210 (the last stage's chunk v feeds the first stage's v + 1);
// rank 1 chunk 1 [300,400) receiving until 310; optimizers rank 0 [300,350), rank 1 [400,450).
RunTrace interleaved_trace() {
    RunTrace trace;
    add_rank(trace, 0, 0, 0, 0, 0);
    add_rank(trace, 1, 0, 0, 1, 0);
    trace.run.config_json =
        R"({"dp":1,"tp":1,"pp":2,"cp":1,"schedule":"interleaved","microbatches":1})";
    trace.add_range(host(trace, 0), "step", Category::schedule, 0, 350 * us, 0);
    trace.add_range(host(trace, 1), "step", Category::schedule, 100 * us, 450 * us, 0);
    const StringId chunk1 = trace.intern(R"({"chunk":1})");
    for (const auto& [rank, chunk, start, end] :
         std::vector<std::tuple<int, int, std::int64_t, std::int64_t>>{
             {0, 0, 0, 100}, {1, 0, 100, 200}, {0, 1, 200, 300}, {1, 1, 300, 400}}) {
        pass(trace, rank, Phase::forward, 0, start, end, start == 0 ? -1 : start + 10);
        if (chunk == 1) {
            for (Event& event : host(trace, rank).events) {
                if (event.start_ns == start * us && trace.name(event.name) == "forward")
                    event.args = chunk1;
            }
        }
    }
    trace.add_range(host(trace, 0), "optimizer", Category::optimizer, 300 * us, 350 * us, 0);
    trace.add_range(host(trace, 1), "optimizer", Category::optimizer, 400 * us, 450 * us, 0);
    trace.finish();
    return trace;
}

// dp2 under ZeRO-2, one micro-batch (µs): each backward reduce-scatters a block's gradients
// inside the pass, then the step ends with the reduce-scatter of the rest. Rank 0: F [0,100),
// B [100,340) with its in-pass reduce-scatter [280,330) (rank 1 arrives at 320), step-end
// reduce-scatter [340,360), optimizer [360,400). Rank 1: F [0,120), B [120,350) with its
// in-pass reduce-scatter [320,330), step-end reduce-scatter [350,360) (the last arrival),
// optimizer [360,390). Back from 400: the step-end reduce-scatter waited for rank 1, whose
// backward ran to 350 — not the in-pass reduce-scatter, which ended well before.
RunTrace zero_trace() {
    RunTrace trace;
    add_rank(trace, 0, 0, 0, 0, 0);
    add_rank(trace, 1, 1, 0, 0, 0);
    trace.run.config_json = R"({"dp":2,"tp":1,"pp":1,"cp":1,"zero_stage":2,"microbatches":1})";
    auto collective = [&](int rank, std::int64_t start, std::int64_t end, int mb, Phase phase) {
        trace
            .add_range(host(trace, rank), "zero reduce-scatter grads", Category::communication,
                       start * us, end * us, 0, mb, 0, phase)
            .kind = EventKind::collective;
    };
    for (const auto& [rank, forward_end, backward_end, in_pass, step_end, optimizer_end] :
         std::vector<
             std::tuple<int, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t>>{
             {0, 100, 340, 280, 340, 400}, {1, 120, 350, 320, 350, 390}}) {
        trace.add_range(host(trace, rank), "step", Category::schedule, 0, optimizer_end * us, 0);
        pass(trace, rank, Phase::forward, 0, 0, forward_end);
        pass(trace, rank, Phase::backward, 0, forward_end, backward_end);
        collective(rank, in_pass, 330, 0, Phase::backward);
        collective(rank, step_end, 360, -1, Phase::none);
        trace.add_range(host(trace, rank), "optimizer", Category::optimizer, 360 * us,
                        optimizer_end * us, 0);
    }
    trace.finish();
    return trace;
}

// DP 2 with the reduction overlapped (fulcrum-train's --overlap-grad-reduce): after its
// backward each rank reduces the rest of the buffer, rank 0 from 340 and rank 1 from 350 to
// 360, waits for the started layers until 380, and updates until 420 (rank 0) and 410.
RunTrace overlapped_trace() {
    RunTrace trace;
    add_rank(trace, 0, 0, 0, 0, 0);
    add_rank(trace, 1, 1, 0, 0, 0);
    trace.run.config_json = R"({"dp":2,"tp":1,"pp":1,"cp":1,"microbatches":1})";
    for (const auto& [rank, forward_end, backward_end, optimizer_end] :
         std::vector<std::tuple<int, std::int64_t, std::int64_t, std::int64_t>>{
             {0, 100, 340, 420}, {1, 120, 350, 410}}) {
        LaneTrace& lane = host(trace, rank);
        trace.add_range(lane, "step", Category::schedule, 0, optimizer_end * us, 0);
        pass(trace, rank, Phase::forward, 0, 0, forward_end);
        pass(trace, rank, Phase::backward, 0, forward_end, backward_end);
        trace.add_range(lane, "dp all-reduce start", Category::runtime, (backward_end - 20) * us,
                        (backward_end - 19) * us, 0, 0, 0, Phase::backward);
        trace.add_range(lane, "dp all-reduce gradients", Category::communication, backward_end * us,
                        360 * us, 0);
        trace.add_range(lane, "dp all-reduce wait", Category::communication, 360 * us, 380 * us, 0);
        trace.add_range(lane, "optimizer", Category::optimizer, 380 * us, optimizer_end * us, 0);
    }
    trace.finish();
    return trace;
}

}  // namespace

class CriticalPathTest : public QObject {
    Q_OBJECT

private slots:
    // Under interleaving the first stage's chunk 1 waits for the last stage's chunk 0: the
    // path crosses back to rank 0 through that hand-over, not through rank 0's own chunk 0.
    void interleavedChunksHandOverAcrossTheWrap() {
        const RunTrace trace = interleaved_trace();
        const auto paths = critical_paths(trace, find_passes(trace));
        QCOMPARE(paths.size(), std::size_t(1));
        std::vector<std::tuple<int, std::string, std::int64_t, std::int64_t>> expected = {
            {0, "forward", 0, 100},   {1, "pipeline transfer", 100, 110},
            {1, "forward", 110, 200}, {0, "pipeline transfer", 200, 210},
            {0, "forward", 210, 300}, {1, "pipeline transfer", 300, 310},
            {1, "forward", 310, 400}, {1, "optimizer", 400, 450}};
        const CriticalPath& path = paths[0];
        QCOMPARE(path.segments.size(), expected.size());
        for (std::size_t i = 0; i < expected.size(); ++i) {
            const auto& [rank, what, start, end] = expected[i];
            QCOMPARE(path.segments[i].rank, rank);
            QCOMPARE(path.segments[i].what, what);
            QCOMPARE(path.segments[i].start_ns, start * us);
            QCOMPARE(path.segments[i].end_ns, end * us);
        }
        QCOMPARE(path.segments[4].phase, Phase::forward);
        QCOMPARE(path.segments[4].microbatch, 0);
    }

    void pathThroughThePipeline() {
        const RunTrace trace = step_trace();
        const auto paths = critical_paths(trace, find_passes(trace));
        QCOMPARE(paths.size(), std::size_t(1));
        const CriticalPath& path = paths[0];
        QCOMPARE(path.start_ns, 0 * us);
        QCOMPARE(path.end_ns, 1070 * us);
        std::vector<std::tuple<int, std::string, std::int64_t, std::int64_t>> expected = {
            {0, "forward", 0, 100},
            {1, "pipeline transfer", 100, 110},
            {1, "forward", 110, 210},
            {1, "backward", 210, 410},
            {1, "forward", 410, 510},
            {1, "backward", 510, 810},
            {0, "pipeline transfer", 810, 820},
            {0, "backward", 820, 1020},
            {0, "optimizer", 1020, 1070}};
        QCOMPARE(path.segments.size(), expected.size());
        for (std::size_t i = 0; i < expected.size(); ++i) {
            const auto& [rank, what, start, end] = expected[i];
            const CriticalSegment& s = path.segments[i];
            QVERIFY2(s.rank == rank && s.what == what && s.start_ns == start * us &&
                         s.end_ns == end * us,
                     qPrintable(QString("segment %1: rank %2 %3 [%4, %5)")
                                    .arg(i)
                                    .arg(s.rank)
                                    .arg(QString::fromStdString(s.what))
                                    .arg(s.start_ns / us)
                                    .arg(s.end_ns / us)));
        }
        QCOMPARE(path.by_rank.at(0), 360 * us);
        QCOMPARE(path.by_rank.at(1), 710 * us);
        QCOMPARE(path.by_what.at("forward"), 300 * us);
        QCOMPARE(path.by_what.at("backward"), 700 * us);
        QCOMPARE(path.by_what.at("pipeline transfer"), 20 * us);
        QCOMPARE(path.by_what.at("optimizer"), 50 * us);
    }

    // Replayed with busy times (stage 0: F 100, 100, B 200, 200; stage 1: F 100, 100, B 200,
    // 300) the pipeline's makespan is 1000; with stage 1's B1 at its stage's mean, 250, it is
    // 950: 50 saved. The other critical passes are at their means: nothing to gain.
    void whatIfTheSlowPassWereTypical() {
        const RunTrace trace = step_trace();
        const auto paths = critical_paths(trace, find_passes(trace));
        const CriticalPath& path = paths[0];
        QVERIFY(!path.what_if.empty());
        const WhatIf& best = path.what_if.front();
        QCOMPARE(best.rank, 1);
        QCOMPARE(best.microbatch, 1);
        QCOMPARE(best.phase, Phase::backward);
        QCOMPARE(best.busy_ns, 300 * us);
        QCOMPARE(best.typical_ns, 250 * us);
        QCOMPARE(best.step_saving_ns, 50 * us);
        for (std::size_t i = 1; i < path.what_if.size(); ++i)
            QCOMPARE(path.what_if[i].step_saving_ns, 0 * us);
    }

    // The tail goes through the reduction before the optimizer, not through the first DP
    // collective of the step (ZeRO's passes make their own).
    void tailThroughTheStepEndReduction() {
        const RunTrace trace = zero_trace();
        const auto paths = critical_paths(trace, find_passes(trace));
        QCOMPARE(paths.size(), std::size_t(1));
        const CriticalPath& path = paths[0];
        QCOMPARE(path.end_ns, 400 * us);
        QVERIFY(!path.segments.empty());
        const CriticalSegment& last = path.segments.back();
        QCOMPARE(last.what, std::string("optimizer"));
        QCOMPARE(last.rank, 0);
        const CriticalSegment& reduction = path.segments[path.segments.size() - 2];
        QCOMPARE(reduction.what, std::string("zero reduce-scatter grads"));
        QCOMPARE(reduction.rank, 1);
        QCOMPARE(reduction.start_ns, 350 * us);
        QCOMPARE(reduction.end_ns, 360 * us);
        QVERIFY(path.by_what.find("other") == path.by_what.end());
        const CriticalSegment& before = path.segments[path.segments.size() - 3];
        QCOMPARE(before.rank, 1);
        QCOMPARE(before.what, std::string("backward"));
        QCOMPARE(before.end_ns, 350 * us);
    }

    // The overlapped reduction's wait is the step's, on the rank that waited, between the
    // rest's reduction (held up by its last arrival) and the optimizer: no time left as
    // "other".
    void tailThroughAnOverlappedReductionsWait() {
        const RunTrace trace = overlapped_trace();
        const auto paths = critical_paths(trace, find_passes(trace));
        QCOMPARE(paths.size(), std::size_t(1));
        const CriticalPath& path = paths[0];
        QCOMPARE(path.end_ns, 420 * us);
        QVERIFY(path.segments.size() >= 4);
        const auto from_end = [&](std::size_t k) {
            return path.segments[path.segments.size() - 1 - k];
        };
        QCOMPARE(from_end(0).what, std::string("optimizer"));
        QCOMPARE(from_end(1).what, std::string("dp all-reduce wait"));
        QCOMPARE(from_end(1).rank, 0);
        QCOMPARE(from_end(1).start_ns, 360 * us);
        QCOMPARE(from_end(1).end_ns, 380 * us);
        QCOMPARE(from_end(2).what, std::string("dp all-reduce gradients"));
        QCOMPARE(from_end(2).rank, 1);
        QCOMPARE(from_end(2).start_ns, 350 * us);
        QCOMPARE(from_end(3).what, std::string("backward"));
        QCOMPARE(from_end(3).rank, 1);
        QVERIFY(path.by_what.find("other") == path.by_what.end());
    }

    void noPassesNoPath() {
        RunTrace trace;
        trace.add_lane(0, LaneKind::host_thread, "main");
        trace.finish();
        QVERIFY(critical_paths(trace, {}).empty());
    }
};

QTEST_GUILESS_MAIN(CriticalPathTest)
#include "test_analysis_critical_path.moc"
