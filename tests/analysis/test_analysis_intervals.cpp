// Interval arithmetic and the pipeline replay, on cases small enough to check by hand.
#include <QTest>

#include "core/analysis/intervals.h"
#include "core/parallel/replay.h"

using namespace fulcrum;
using analysis::Interval;
using analysis::IntervalSet;

class IntervalsTest : public QObject {
    Q_OBJECT

private slots:
    void overlappingIntervalsMerge() {
        const IntervalSet set({{5, 10}, {0, 3}, {2, 4}, {10, 12}, {20, 20}});
        const std::vector<Interval> expected = {{0, 4}, {5, 12}};
        QVERIFY(set.intervals() == expected);
        QCOMPARE(set.total(), 11);  // 4 + 7
    }

    void intersectSubtractUnite() {
        const IntervalSet a({{0, 10}, {20, 30}});
        const IntervalSet b({{5, 25}});
        QVERIFY((a.intersected(b).intervals() == std::vector<Interval>{{5, 10}, {20, 25}}));
        QVERIFY((a.subtracted(b).intervals() == std::vector<Interval>{{0, 5}, {25, 30}}));
        QVERIFY((a.united(b).intervals() == std::vector<Interval>{{0, 30}}));
        QCOMPARE(a.overlap(b), 10);
        QCOMPARE(a.overlap(8, 22), 4);  // [8,10) and [20,22)
        QVERIFY((a.clipped(8, 22).intervals() == std::vector<Interval>{{8, 10}, {20, 22}}));
    }

    // Lanes' intervals added one lane after another come as runs in start order, which are
    // merged (up to 64 runs) or sorted (more); either way the union is the one a plain sort
    // gives, worked out here by marking every covered point of [0, 2000).
    void lanesAddedInTurnUniteAsSorted() {
        for (const int lanes : {3, 100}) {
            IntervalSet set;
            std::vector<bool> covered(2000, false);
            std::uint64_t seed = 7;
            const auto next = [&seed](int bound) {
                seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                return static_cast<int>((seed >> 33) % static_cast<std::uint64_t>(bound));
            };
            for (int lane = 0; lane < lanes; ++lane) {
                int start = next(50);
                for (int k = 0; k < 6 && start < 1900; ++k) {
                    const int end = start + next(40);  // sometimes empty
                    set.add(start, end);
                    for (int x = start; x < end; ++x) {
                        covered[static_cast<std::size_t>(x)] = true;
                    }
                    start += next(300);  // sometimes the same start again
                }
            }
            std::vector<Interval> expected;
            for (int x = 0; x < 2000; ++x) {
                if (!covered[static_cast<std::size_t>(x)]) {
                    continue;
                }
                if (!expected.empty() && expected.back().end == x) {
                    expected.back().end = x + 1;
                } else {
                    expected.push_back({x, x + 1});
                }
            }
            QVERIFY2(set.intervals() == expected, qPrintable(QString::number(lanes)));
        }
    }

    void addingInOrderExtendsTheLast() {
        IntervalSet set;
        set.add(0, 5);
        set.add(3, 8);
        set.add(8, 9);
        set.add(1, 2);  // out of order: still right
        QVERIFY((set.intervals() == std::vector<Interval>{{0, 9}}));
    }

    // GPipe, p = 2, m = 2, F = 10, B = 20 on both stages (Narayanan et al., SC'21, §2.2):
    //   stage 0: F0 0–10, F1 10–20,                  B0 50–70, B1 70–90
    //   stage 1:          F0 10–20, F1 20–30, B0 30–50, B1 50–70
    // makespan 90; each stage is busy 60, so its bubble is 30 = (p−1)/m · 60.
    void replayOfGpipeMatchesTheHandTimeline() {
        parallel::ReplayInput input;
        input.schedule = parallel::PipelineSchedule::gpipe;
        input.stages = 2;
        input.microbatches = 2;
        input.forward_ns = {{10, 10}, {10, 10}};
        input.backward_ns = {{20, 20}, {20, 20}};
        const auto result = parallel::replay_pipeline(input).value();
        QCOMPARE(result.makespan_ns, 90);
        QCOMPARE(result.bubble_ns(0), 30);
        QCOMPARE(result.bubble_ns(1), 30);
        QCOMPARE(result.stages[1][0].start_ns, 10);  // F0 on stage 1 waits for stage 0's F0
        QCOMPARE(result.stages[0][2].start_ns, 50);  // B0 on stage 0 waits for stage 1's B0
        QCOMPARE(result.stages[0][2].wait_ns, 30);
    }

    // 1F1B, p = 4, m = 8, equal passes: the bubble is (p−1)(F+B) on every stage.
    void replayOf1f1bHasTheTheoreticalBubble() {
        parallel::ReplayInput input;
        input.schedule = parallel::PipelineSchedule::one_f_one_b;
        input.stages = 4;
        input.microbatches = 8;
        input.forward_ns.assign(4, std::vector<std::int64_t>(8, 100));
        input.backward_ns.assign(4, std::vector<std::int64_t>(8, 200));
        const auto result = parallel::replay_pipeline(input).value();
        for (int s = 0; s < 4; ++s) {
            QCOMPARE(result.bubble_ns(s), 3 * 300);
        }
        QCOMPARE(result.makespan_ns, 8 * 300 + 3 * 300);
    }

    // The point-to-point latency delays every hand-over between stages.
    void latencyDelaysHandOvers() {
        parallel::ReplayInput input;
        input.schedule = parallel::PipelineSchedule::gpipe;
        input.stages = 2;
        input.microbatches = 1;
        input.forward_ns = {{10}, {10}};
        input.backward_ns = {{10}, {10}};
        input.p2p_latency_ns = 5;
        // F0: 0–10 on stage 0, 15–25 on stage 1; B0: 25–35 on stage 1, 40–50 on stage 0.
        QCOMPARE(parallel::replay_pipeline(input).value().makespan_ns, 50);
    }
};

QTEST_GUILESS_MAIN(IntervalsTest)
#include "test_analysis_intervals.moc"
