// Pipeline bubbles on hand-built GPipe traces, p = 2, m = 2; every value is worked out below.
#include <QtTest>

#include "core/analysis/bubbles.h"

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
};

QTEST_GUILESS_MAIN(BubblesTest)
#include "test_analysis_bubbles.moc"
