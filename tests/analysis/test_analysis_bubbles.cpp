// Pipeline bubbles on hand-built GPipe traces, p = 2, m = 2; every value is worked out below.
#include <QTest>

#include "core/analysis/bubbles.h"
#include "core/parallel/replay.h"

using namespace fulcrum;
using namespace fulcrum::analysis;

namespace {

// Two ranks, one per stage, and the run's config.
RunTrace two_stage_run() {
    RunTrace trace;
    trace.run.config_json = R"({"dp":1,"tp":1,"pp":2,"cp":1,"schedule":"gpipe","microbatches":2})";
    for (int stage = 0; stage < 2; ++stage) {
        RankInfo info;
        info.rank = stage;
        info.dp = info.cp = info.tp = 0;
        info.pp = stage;
        trace.add_rank(info);
        trace.add_lane(stage, LaneKind::host_thread, "main");
    }
    return trace;
}

void pass(RunTrace& trace, int stage, int mb, Phase phase, std::int64_t start, std::int64_t end,
          std::int64_t wait_until = -1) {
    auto& lane = trace.ranks[static_cast<std::size_t>(stage)].lanes[0];
    trace.add_range(lane, phase == Phase::forward ? "forward" : "backward", Category::compute,
                    start, end, 0, mb, static_cast<std::int16_t>(stage), phase);
    if (wait_until > start) {
        trace.add_range(lane, phase == Phase::forward ? "recv activations" : "recv gradients",
                        Category::communication, start, wait_until, 0, mb,
                        static_cast<std::int16_t>(stage));
    }
}

// A run of `schedule` on p stages whose passes are the replay of equal micro-batches (F, B and
// W are a stage's whole share; the replay gives each of its v chunks 1/v of it), recorded as
// the engine records them: a pass opens when the stage starts waiting for its input, the wait
// a receive range inside it, each pass's model chunk in its args.
RunTrace replayed_run(parallel::PipelineSchedule schedule, int p, int m, int v, std::int64_t f,
                      std::int64_t b, std::int64_t w) {
    RunTrace trace;
    trace.run.config_json = R"({"dp":1,"tp":1,"pp":)" + std::to_string(p) +
                            R"(,"cp":1,"schedule":")" + parallel::schedule_name(schedule) +
                            R"(","virtual_stages":)" + std::to_string(v) + R"(,"microbatches":)" +
                            std::to_string(m) + "}";
    parallel::ReplayInput input;
    input.schedule = schedule;
    input.stages = p;
    input.microbatches = m;
    input.virtual_stages = v;
    input.forward_ns.assign(p, std::vector<std::int64_t>(m, f));
    input.backward_ns.assign(p, std::vector<std::int64_t>(m, b));
    if (parallel::splits_backward(schedule)) {
        input.weight_ns.assign(p, std::vector<std::int64_t>(m, w));
    }
    const auto replay = parallel::replay_pipeline(input);
    for (int stage = 0; stage < p; ++stage) {
        RankInfo info;
        info.rank = stage;
        info.dp = info.cp = info.tp = 0;
        info.pp = stage;
        trace.add_rank(info);
        auto& lane = trace.add_lane(stage, LaneKind::host_thread, "main");
        for (const parallel::ReplayedOp& op : replay->stages[static_cast<std::size_t>(stage)]) {
            const bool forward = op.kind == Phase::forward;
            const bool weight = op.kind == Phase::weight_grad;
            const auto stage16 = static_cast<std::int16_t>(stage);
            Event& range = trace.add_range(lane,
                                           forward  ? "forward"
                                           : weight ? "weight gradients"
                                                    : "backward",
                                           Category::compute, op.start_ns - op.wait_ns, op.end_ns,
                                           0, op.microbatch, stage16,
                                           forward  ? Phase::forward
                                           : weight ? Phase::weight_grad
                                                    : Phase::backward);
            range.args = trace.intern(R"({"chunk":)" + std::to_string(op.chunk) + "}");
            if (op.wait_ns > 0) {
                trace.add_range(lane, forward ? "recv activations" : "recv gradients",
                                Category::communication, op.start_ns - op.wait_ns, op.start_ns, 0,
                                op.microbatch, stage16);
            }
        }
    }
    trace.finish();
    return trace;
}

}  // namespace

class BubblesTest : public QObject {
    Q_OBJECT

private slots:
    // Equal micro-batches, F = 10, B = 20 (the replay test's timeline, as the engine records
    // it: a pass range opens when the stage starts waiting for its input).
    //   stage 0: F0 [0,10) F1 [10,20) B0 [20,70) waiting to 50, B1 [70,90)
    //   stage 1: F0 [0,20) waiting to 10, F1 [20,30), B0 [30,50), B1 [50,70)
    // window [0,90); busy 60 per stage; bubble 30; fraction 30/60 = 0.5 = (p−1)/m.
    // All of it is warm-up/cool-down: the uniform replay gives the same 90.
    void equalMicroBatchesHaveTheTheoreticalBubble() {
        RunTrace trace = two_stage_run();
        pass(trace, 0, 0, Phase::forward, 0, 10);
        pass(trace, 0, 1, Phase::forward, 10, 20);
        pass(trace, 0, 0, Phase::backward, 20, 70, 50);
        pass(trace, 0, 1, Phase::backward, 70, 90);
        pass(trace, 1, 0, Phase::forward, 0, 20, 10);
        pass(trace, 1, 1, Phase::forward, 20, 30);
        pass(trace, 1, 0, Phase::backward, 30, 50);
        pass(trace, 1, 1, Phase::backward, 50, 70);
        trace.finish();
        const auto result = analyze_bubbles(trace, find_passes(trace));
        QCOMPARE(result.schedule, std::string("gpipe"));
        QCOMPARE(result.theory_fraction.value(), 0.5);
        QCOMPARE(result.pipelines.size(), 1u);
        QCOMPARE(result.pipelines[0].window_ns, 90);
        QCOMPARE(result.pipelines[0].measured_fraction.value(), 0.5);
        QCOMPARE(result.stages.size(), 2u);
        for (const auto& stage : result.stages) {
            QCOMPARE(stage.busy_ns, 60);
            QCOMPARE(stage.bubble_ns, 30);
            QCOMPARE(stage.warmup_cooldown_ns, 30);
            QCOMPARE(stage.unequal_microbatch_ns, 0);
            QCOMPARE(stage.other_ns, 0);
        }
        QCOMPARE(result.stages[0].wait_on_next_ns, 30);
        QCOMPARE(result.stages[1].wait_on_previous_ns, 10);
    }

    // Micro-batch 0 is three times micro-batch 1 on both stages (a long document):
    // F = 30/10, B = 60/20.
    //   stage 0: F0 [0,30) F1 [30,40) B0 [40,190) waiting to 130, B1 [190,210)
    //   stage 1: F0 [0,60) waiting to 30, F1 [60,70), B0 [70,130), B1 [130,150)
    // window 210, busy 120, bubble 90 (fraction 0.75 against the theory's 0.5).
    // Uniform replay (F = 20, B = 40): makespan 180, bubble 60 → warm-up/cool-down 60;
    // measured replay: 210 → unequal micro-batches 30; other 0.
    void unequalMicroBatchesAddToTheBubble() {
        RunTrace trace = two_stage_run();
        pass(trace, 0, 0, Phase::forward, 0, 30);
        pass(trace, 0, 1, Phase::forward, 30, 40);
        pass(trace, 0, 0, Phase::backward, 40, 190, 130);
        pass(trace, 0, 1, Phase::backward, 190, 210);
        pass(trace, 1, 0, Phase::forward, 0, 60, 30);
        pass(trace, 1, 1, Phase::forward, 60, 70);
        pass(trace, 1, 0, Phase::backward, 70, 130);
        pass(trace, 1, 1, Phase::backward, 130, 150);
        trace.finish();
        const auto result = analyze_bubbles(trace, find_passes(trace));
        QCOMPARE(result.stages.size(), 2u);
        for (const auto& stage : result.stages) {
            QCOMPARE(stage.window_ns, 210);
            QCOMPARE(stage.busy_ns, 120);
            QCOMPARE(stage.bubble_ns, 90);
            QCOMPARE(stage.bubble_fraction.value(), 0.75);
            QCOMPARE(stage.warmup_cooldown_ns, 60);
            QCOMPARE(stage.unequal_microbatch_ns, 30);
            QCOMPARE(stage.other_ns, 0);
        }
        QCOMPARE(result.pipelines[0].replay_fraction.value(), 0.75);
    }

    // The same equal timeline stretched by a 5 ns hand-over at each of the 2 forward and 2
    // backward crossings on the critical path: window 90 + 10 = 100 (stage 1 starts 5 later,
    // stage 0's backward 5 + 5 later). bubble 40 per stage: 30 schedule + 10 other.
    void transferTimeIsOther() {
        RunTrace trace = two_stage_run();
        pass(trace, 0, 0, Phase::forward, 0, 10);
        pass(trace, 0, 1, Phase::forward, 10, 20);
        pass(trace, 0, 0, Phase::backward, 20, 80, 60);
        pass(trace, 0, 1, Phase::backward, 80, 100);
        pass(trace, 1, 0, Phase::forward, 0, 25, 15);
        pass(trace, 1, 1, Phase::forward, 25, 35);
        pass(trace, 1, 0, Phase::backward, 35, 55);
        pass(trace, 1, 1, Phase::backward, 55, 75);
        trace.finish();
        const auto result = analyze_bubbles(trace, find_passes(trace));
        QCOMPARE(result.stages[0].bubble_ns, 40);
        QCOMPARE(result.stages[0].warmup_cooldown_ns, 30);
        QCOMPARE(result.stages[0].unequal_microbatch_ns, 0);
        QCOMPARE(result.stages[0].other_ns, 10);
    }

    // ZB-H1, p = 2, m = 4, F = 10, B = 10, W = 6 per micro-batch on each stage: the W passes
    // are busy time of their own (busy = 4·26 = 104 per stage), the theory is ZB-H1's
    // (p−1)(F + B − W)/(m(F + B + W)) = 14/104, not 1F1B's (p−1)/m = 0.25, and with equal
    // micro-batches the whole bubble is the schedule's.
    void zeroBubbleCountsWeightPassesAndHasItsOwnTheory() {
        const RunTrace trace =
            replayed_run(parallel::PipelineSchedule::zero_bubble_h1, 2, 4, 1, 10, 10, 6);
        const auto passes = find_passes(trace);
        QCOMPARE(std::count_if(passes.begin(), passes.end(),
                               [](const Pass& pass) { return pass.phase == Phase::weight_grad; }),
                 8);
        const auto result = analyze_bubbles(trace, passes);
        QCOMPARE(result.schedule, std::string("zb-h1"));
        QVERIFY(std::abs(result.theory_fraction.value() - 14.0 / 104.0) < 1e-12);
        QVERIFY(std::abs(result.pipelines[0].theory_fraction - 14.0 / 104.0) < 1e-12);
        for (const StageBubble& stage : result.stages) {
            QCOMPARE(stage.busy_ns, 104);
            QCOMPARE(stage.warmup_cooldown_ns, stage.bubble_ns);
            QCOMPARE(stage.unequal_microbatch_ns, 0);
            QCOMPARE(stage.other_ns, 0);
        }
        QCOMPARE(result.pipelines[0].measured_fraction, result.pipelines[0].replay_fraction);
    }

    // Interleaved 1F1B, p = 2, v = 2, m = 4, F = 10, B = 20 per micro-batch on each stage's
    // whole share (5 and 10 per chunk pass): 16 passes per stage whose chunks 0 and 1 come
    // from their args, busy 4·30 = 120 per stage, theory (p−1)/(v·m) = 1/8; equal micro-batches
    // leave no unequal part, and the measured fraction is the replay's.
    void interleavedReadsChunksAndHasItsOwnTheory() {
        const RunTrace trace =
            replayed_run(parallel::PipelineSchedule::interleaved, 2, 4, 2, 10, 20, 0);
        const auto passes = find_passes(trace);
        QCOMPARE(passes.size(), 32u);
        QCOMPARE(std::count_if(passes.begin(), passes.end(),
                               [](const Pass& pass) { return pass.chunk == 1; }),
                 16);
        const auto result = analyze_bubbles(trace, passes);
        QCOMPARE(result.schedule, std::string("interleaved"));
        QCOMPARE(result.theory_fraction.value(), 0.125);
        for (const StageBubble& stage : result.stages) {
            QCOMPARE(stage.busy_ns, 120);
            QCOMPARE(stage.warmup_cooldown_ns, stage.bubble_ns);
            QCOMPARE(stage.unequal_microbatch_ns, 0);
            QCOMPARE(stage.other_ns, 0);
        }
        QCOMPARE(result.pipelines[0].measured_fraction, result.pipelines[0].replay_fraction);
        // Fewer bubbles than 1F1B's on the same passes: the measured fraction is below 1/4.
        QVERIFY(result.pipelines[0].measured_fraction.value() < 0.25);
    }
};

QTEST_GUILESS_MAIN(BubblesTest)
#include "test_analysis_bubbles.moc"
