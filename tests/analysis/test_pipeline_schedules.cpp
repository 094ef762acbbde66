// Pipeline schedules and their replay (core/parallel): every schedule's order is a valid one
// (each stage runs every pass of every micro-batch and chunk exactly once, nothing deadlocks),
// and replayed with equal micro-batches each reaches its published bubble:
//   GPipe, 1F1B      (p−1)/m of the busy time                       (GPipe; Narayanan et al. SC'21)
//   interleaved 1F1B (p−1)/(v·m)                                     (Narayanan et al. SC'21
//   §2.2.2) ZB-H1            (p−1)(F + B − W) per stage, 1F1B's (p−1)(F+B+W) (Qi et al. ICLR'24 §2)
#include <QTest>

#include <map>
#include <set>
#include <tuple>

#include "core/parallel/replay.h"

using namespace fulcrum;
using namespace fulcrum::parallel;

namespace {

ReplayInput equal_passes(PipelineSchedule schedule, int p, int m, int v, std::int64_t forward,
                         std::int64_t backward, std::int64_t weight = 0) {
    ReplayInput input;
    input.schedule = schedule;
    input.stages = p;
    input.microbatches = m;
    input.virtual_stages = v;
    input.forward_ns.assign(p, std::vector<std::int64_t>(m, forward));
    input.backward_ns.assign(p, std::vector<std::int64_t>(m, backward));
    if (splits_backward(schedule))
        input.weight_ns.assign(p, std::vector<std::int64_t>(m, weight));
    return input;
}

}  // namespace

Q_DECLARE_METATYPE(fulcrum::parallel::PipelineSchedule)

class PipelineSchedulesTest : public QObject {
    Q_OBJECT

private slots:
    void everyPassOnceInADependencyOrder_data() {
        QTest::addColumn<PipelineSchedule>("schedule");
        QTest::addColumn<int>("p");
        QTest::addColumn<int>("m");
        QTest::addColumn<int>("v");
        for (auto [p, m] : {std::pair{1, 1}, std::pair{2, 4}, std::pair{4, 8}, std::pair{4, 3},
                            std::pair{8, 16}}) {
            QTest::addRow("gpipe p%d m%d", p, m) << PipelineSchedule::gpipe << p << m << 1;
            QTest::addRow("1f1b p%d m%d", p, m) << PipelineSchedule::one_f_one_b << p << m << 1;
            QTest::addRow("zb-h1 p%d m%d", p, m) << PipelineSchedule::zero_bubble_h1 << p << m << 1;
        }
        for (auto [p, m, v] : {std::tuple{2, 4, 2}, std::tuple{4, 8, 3}, std::tuple{4, 4, 2},
                               std::tuple{8, 16, 2}}) {
            QTest::addRow("interleaved p%d m%d v%d", p, m, v)
                << PipelineSchedule::interleaved << p << m << v;
        }
    }
    void everyPassOnceInADependencyOrder() {
        QFETCH(PipelineSchedule, schedule);
        QFETCH(int, p);
        QFETCH(int, m);
        QFETCH(int, v);
        const PipelineShape shape{p, m, v};
        QVERIFY(check_pipeline(schedule, shape));
        const int kinds = splits_backward(schedule) ? 3 : 2;
        for (int s = 0; s < p; ++s) {
            const auto ops = stage_ops(schedule, s, shape);
            QCOMPARE(static_cast<int>(ops.size()), kinds * m * v);
            std::set<std::tuple<int, int, int>> seen;
            for (const PipelineOp& op : ops) {
                QVERIFY(seen.insert({static_cast<int>(op.kind), op.microbatch, op.chunk}).second);
                QVERIFY(op.microbatch >= 0 && op.microbatch < m && op.chunk >= 0 && op.chunk < v);
                // On one stage: a chunk's backward after its forward, W after B.
                if (op.kind == Phase::backward) {
                    QVERIFY(seen.count(
                                {static_cast<int>(Phase::forward), op.microbatch, op.chunk}) == 1);
                }
                if (op.kind == Phase::weight_grad) {
                    QVERIFY(seen.count(
                                {static_cast<int>(Phase::backward), op.microbatch, op.chunk}) == 1);
                }
            }
        }
        QVERIFY(
            replay_pipeline(equal_passes(schedule, p, m, v, 100, 100, 100)).ok());  // no deadlock
    }

    // Equal micro-batches, no latency: the replayed bubble over the busy time is the theory.
    void replayReachesTheTheory_data() {
        QTest::addColumn<PipelineSchedule>("schedule");
        QTest::addColumn<int>("p");
        QTest::addColumn<int>("m");
        QTest::addColumn<int>("v");
        for (auto [p, m] : {std::pair{2, 4}, std::pair{4, 8}, std::pair{8, 16}}) {
            QTest::addRow("gpipe p%d m%d", p, m) << PipelineSchedule::gpipe << p << m << 1;
            QTest::addRow("1f1b p%d m%d", p, m) << PipelineSchedule::one_f_one_b << p << m << 1;
        }
        for (auto [p, m, v] : {std::tuple{2, 4, 2}, std::tuple{4, 8, 2}, std::tuple{4, 8, 3},
                               std::tuple{4, 16, 4}, std::tuple{8, 16, 2}}) {
            QTest::addRow("interleaved p%d m%d v%d", p, m, v)
                << PipelineSchedule::interleaved << p << m << v;
        }
    }
    void replayReachesTheTheory() {
        QFETCH(PipelineSchedule, schedule);
        QFETCH(int, p);
        QFETCH(int, m);
        QFETCH(int, v);
        // Durations divisible by v: each chunk takes an exact 1/v.
        const auto result = replay_pipeline(equal_passes(schedule, p, m, v, 1200, 2400)).value();
        const double busy = m * 3600.0;
        for (int s = 0; s < p; ++s) {
            QCOMPARE(result.bubble_ns(s) / busy, theory_bubble_fraction(schedule, {p, m, v}));
        }
    }

    // ZB-H1 with forward F, input-gradient B and weight-gradient W: every stage's bubble is
    // (p−1)(F + B − W), against (p−1)(F + B + W) for 1F1B with the backward B + W whole.
    // p = 4, m = 8: F = B = W = 100 gives 300 against 900; F = B = 200, W = 100 gives 900
    // against 1500; F = 300, B = 200, W = 100 gives 1200 against 1800.
    void zeroBubbleH1ShrinksTheBubble_data() {
        QTest::addColumn<int>("p");
        QTest::addColumn<int>("m");
        QTest::addColumn<qint64>("f");
        QTest::addColumn<qint64>("b");
        QTest::addColumn<qint64>("w");
        for (auto [p, m] : {std::pair{2, 4}, std::pair{4, 8}, std::pair{4, 4}, std::pair{8, 16}}) {
            for (auto [f, b, w] : {std::tuple{100, 100, 100}, std::tuple{200, 200, 100},
                                   std::tuple{300, 200, 100}}) {
                QTest::addRow("p%d m%d F%d B%d W%d", p, m, f, b, w)
                    << p << m << qint64(f) << qint64(b) << qint64(w);
            }
        }
    }
    void zeroBubbleH1ShrinksTheBubble() {
        QFETCH(int, p);
        QFETCH(int, m);
        QFETCH(qint64, f);
        QFETCH(qint64, b);
        QFETCH(qint64, w);
        const auto zb =
            replay_pipeline(equal_passes(PipelineSchedule::zero_bubble_h1, p, m, 1, f, b, w))
                .value();
        const auto one_f_one_b =
            replay_pipeline(equal_passes(PipelineSchedule::one_f_one_b, p, m, 1, f, b + w)).value();
        for (int s = 0; s < p; ++s) {
            QCOMPARE(zb.bubble_ns(s), (p - 1) * (f + b - w));
            QCOMPARE(one_f_one_b.bubble_ns(s), (p - 1) * (f + b + w));
        }
        const double busy = double(m) * double(f + b + w);
        QCOMPARE(zb.bubble_ns(0) / busy,
                 theory_bubble_fraction(PipelineSchedule::zero_bubble_h1, {p, m, 1},
                                        {double(f), double(b), double(w)}));
    }

    // ZB-H1 holds no more micro-batches than 1F1B's first stage (Qi et al., ICLR'24, §2.1: its
    // peak activation memory is 1F1B's): counting a micro-batch from its forward to its W, no
    // stage ever has more than p in flight; stage 0 runs each steady-state W right after its
    // B (p = 2, m = 4: F0 F1 B0 W0 F2 B1 W1 F3 B2 W2 B3 W3), the last stage delays its Ws.
    void zeroBubbleH1KeepsOneFOneBsMicroBatchesInFlight() {
        for (auto [p, m] : {std::pair{1, 3}, std::pair{2, 4}, std::pair{4, 8}, std::pair{4, 3},
                            std::pair{8, 16}}) {
            int most_on_any_stage = 0;
            for (int s = 0; s < p; ++s) {
                int in_flight = 0, most = 0;
                for (const PipelineOp& op :
                     stage_ops(PipelineSchedule::zero_bubble_h1, s, {p, m, 1})) {
                    in_flight += op.kind == Phase::forward       ? 1
                                 : op.kind == Phase::weight_grad ? -1
                                                                 : 0;
                    most = std::max(most, in_flight);
                }
                QVERIFY2(
                    most <= p,
                    qPrintable(
                        QString("p%1 m%2 stage %3: %4 in flight").arg(p).arg(m).arg(s).arg(most)));
                most_on_any_stage = std::max(most_on_any_stage, most);
            }
            QCOMPARE(most_on_any_stage, std::min(p, m));  // 1F1B's stage 0
        }
        const std::vector<PipelineOp> stage0 =
            stage_ops(PipelineSchedule::zero_bubble_h1, 0, {2, 4, 1});
        const auto F = Phase::forward, B = Phase::backward, W = Phase::weight_grad;
        const std::vector<PipelineOp> expected = {{0, F}, {1, F}, {0, B}, {0, W}, {2, F}, {1, B},
                                                  {1, W}, {3, F}, {2, B}, {2, W}, {3, B}, {3, W}};
        QCOMPARE(stage0, expected);
    }

    // Interleaved, p = 2, v = 2, m = 2, each stage's forward 200 (100 per chunk), backward 400
    // (200 per chunk). Model chunks 0 and 2 on stage 0, 1 and 3 on stage 1. Stage 0 warms up
    // with (p−1)·2 + (v−1)·p = 4 = every forward: F(0,c0) 0–100, F(1,c0) 100–200, F(0,c2)
    // 200–300 (its input F(0,c1) ran 100–200 on stage 1), F(1,c2) 300–400.
    void interleavedHandTimeline() {
        const auto result =
            replay_pipeline(equal_passes(PipelineSchedule::interleaved, 2, 2, 2, 200, 400)).value();
        const auto& stage0 = result.stages[0];
        QCOMPARE(stage0.size(), std::size_t(8));
        const std::vector<std::tuple<int, int, std::int64_t>> forwards = {
            {0, 0, 0}, {1, 0, 100}, {0, 1, 200}, {1, 1, 300}};
        for (std::size_t i = 0; i < forwards.size(); ++i) {
            QCOMPARE(stage0[i].kind, Phase::forward);
            QCOMPARE(stage0[i].microbatch, std::get<0>(forwards[i]));
            QCOMPARE(stage0[i].chunk, std::get<1>(forwards[i]));
            QCOMPARE(stage0[i].start_ns, std::get<2>(forwards[i]));
        }
        QCOMPARE(stage0[4].kind, Phase::backward);
        QCOMPARE(stage0[4].chunk, 1);  // backwards go through the chunks in reverse
    }

    // Parameters arriving during micro-batch 0's forward (Megatron-LM's --overlap-param-gather):
    // its layers each wait for their own, so the pass ends one layer's share after the last
    // arrival where that is later (gathers slower than layers), else at max(start, first) +
    // its length; later micro-batches and the backwards do not wait.
    void forwardWaitsForArrivingParameters() {
        // 1F1B, p 2, m 2; a forward 400 (4 layers of 100), a backward 800.
        ReplayInput input = equal_passes(PipelineSchedule::one_f_one_b, 2, 2, 1, 400, 800);
        input.parameters = {{{.first_ns = 150, .layer_ns = 150, .layers = 4, .bytes = 4000}},
                            {{.first_ns = 50, .layer_ns = 50, .layers = 4, .bytes = 400}}};
        const ReplayResult result = replay_pipeline(input).value();
        // Stage 0, F0: layers at 150, 300, 450, 600: it ends at 600 + 100 = 700, 300 waited,
        // while 3 of the 4 layers' gathers (600 ns) were still running: 4000 · 300/600.
        const ReplayedOp& first = result.stages[0][0];
        QCOMPARE(first.kind, Phase::forward);
        QCOMPARE(first.start_ns, std::int64_t(0));
        QCOMPARE(first.end_ns, std::int64_t(700));
        QCOMPARE(first.parameter_wait_ns, std::int64_t(300));
        QCOMPARE(first.parameter_bytes, std::int64_t(2000));
        // F1 on stage 0 runs at its own length.
        QCOMPARE(result.stages[0][1].end_ns - result.stages[0][1].start_ns, std::int64_t(400));
        // Stage 1's parameters were there before its F0 started (at 700): no wait.
        const ReplayedOp& later = result.stages[1][0];
        QCOMPARE(later.start_ns, std::int64_t(700));
        QCOMPARE(later.end_ns, std::int64_t(1100));
        QCOMPARE(later.parameter_wait_ns, std::int64_t(0));
        // Without arrivals the step is 300 shorter: the whole pipeline waited behind F0.
        ReplayInput plain = input;
        plain.parameters.clear();
        QCOMPARE(result.makespan_ns - replay_pipeline(plain).value().makespan_ns,
                 std::int64_t(300));
        // The first layer's arrival alone: a pass that starts before it ends at first + length.
        input.parameters = {{{.first_ns = 250, .layer_ns = 10, .layers = 4}}, {}};
        QCOMPARE(replay_pipeline(input).value().stages[0][0].end_ns, std::int64_t(650));
    }

    void shapesASchedulesCannotRunAreRefused() {
        QVERIFY(
            !check_pipeline(PipelineSchedule::interleaved, {4, 6, 2}));  // m not a multiple of p
        QVERIFY(!check_pipeline(PipelineSchedule::interleaved, {4, 8, 1}));  // needs v ≥ 2
        QVERIFY(!check_pipeline(PipelineSchedule::one_f_one_b, {4, 8, 2}));  // v only interleaved
        QVERIFY(check_pipeline(PipelineSchedule::interleaved, {4, 8, 2}));
        auto wrong = equal_passes(PipelineSchedule::zero_bubble_h1, 2, 2, 1, 1, 1, 1);
        wrong.weight_ns.clear();
        const auto refused = replay_pipeline(wrong);
        QVERIFY(!refused);
        QVERIFY(refused.error().message.find("weight") != std::string::npos);
        for (const char* name : {"gpipe", "1f1b", "interleaved", "zb-h1"}) {
            auto parsed = parse_schedule(name);
            QVERIFY(parsed);
            QCOMPARE(std::string(schedule_name(*parsed)), std::string(name));
        }
        QVERIFY(!parse_schedule("zb-v"));
    }

    // Shared cores (replay_on_shared_cores, processor sharing): with a core for every rank it
    // is replay_pipeline of each pipeline, for every schedule, unequal passes and latency.
    void sharedCoresWithACoreEachIsTheReplay() {
        std::vector<ReplayInput> inputs;
        const std::tuple<PipelineSchedule, int, int, int> shapes[] = {
            {PipelineSchedule::gpipe, 2, 3, 1},
            {PipelineSchedule::one_f_one_b, 4, 6, 1},
            {PipelineSchedule::interleaved, 2, 4, 2},
            {PipelineSchedule::zero_bubble_h1, 3, 5, 1}};
        int ranks = 0;
        for (auto [schedule, p, m, v] : shapes) {
            ReplayInput input = equal_passes(schedule, p, m, v, 0, 0, 0);
            for (int s = 0; s < p; ++s) {
                for (int j = 0; j < m; ++j) {
                    input.forward_ns[s][j] = 1000 * v * (1 + (s * 7 + j * 3) % 5);
                    input.backward_ns[s][j] = 1000 * v * (2 + (s * 5 + j) % 4);
                    if (splits_backward(schedule))
                        input.weight_ns[s][j] = 1000 * v * (1 + j % 2);
                }
            }
            input.p2p_latency_ns = 300;
            inputs.push_back(input);
            ranks += p;
        }
        const auto shared = replay_on_shared_cores(inputs, ranks).value();
        QCOMPARE(shared.size(), inputs.size());
        for (std::size_t k = 0; k < inputs.size(); ++k) {
            const auto alone = replay_pipeline(inputs[k]).value();
            QCOMPARE(shared[k].makespan_ns, alone.makespan_ns);
            for (int s = 0; s < inputs[k].stages; ++s) {
                QCOMPARE(shared[k].stages[s].size(), alone.stages[s].size());
                for (std::size_t i = 0; i < alone.stages[s].size(); ++i) {
                    QCOMPARE(shared[k].stages[s][i].start_ns, alone.stages[s][i].start_ns);
                    QCOMPARE(shared[k].stages[s][i].end_ns, alone.stages[s][i].end_ns);
                    QCOMPARE(shared[k].stages[s][i].wait_ns, alone.stages[s][i].wait_ns);
                }
            }
        }
    }

    // By hand, two one-stage pipelines (two DP replicas), F = 1000 and B = 2000, on one core:
    // both forwards run at half a core and end at 2000; both backwards at half too, 2000 + 4000.
    // On two cores each runs alone: 3000. A pass's transfers take no core: with 400 of each
    // forward's 1000 a transfer, the two computing parts (600 each) share the core until 1200,
    // the transfers end at 1600.
    void sharedCoresByHand() {
        const ReplayInput one = equal_passes(PipelineSchedule::one_f_one_b, 1, 1, 1, 1000, 2000);
        QCOMPARE(replay_on_shared_cores({one, one}, 1).value()[1].makespan_ns, 6000);
        QCOMPARE(replay_on_shared_cores({one, one}, 2).value()[1].makespan_ns, 3000);
        ReplayInput transfer = one;
        transfer.forward_work = {{{600}}};
        transfer.backward_work = {{{2000}}};
        const auto both = replay_on_shared_cores({transfer, transfer}, 1).value();
        QCOMPARE(both[0].stages[0][0].end_ns, 1600);
        QCOMPARE(both[0].makespan_ns, 1600 + 4000);
    }

    // A group's members compute apart (CP ranks, each on `work_copies` TP ranks): on two cores
    // a pass of members 1000 and 3000, each on two ranks, runs four ranks at half a core until
    // the light pair is done at 2000, then the heavy pair at a whole core: 2000 + 2000.
    void sharedCoresFreeWhatALightMemberLeaves() {
        ReplayInput input = equal_passes(PipelineSchedule::one_f_one_b, 1, 1, 1, 3000, 0);
        input.forward_work = {{{1000, 3000}}};
        input.backward_work = {{{0, 0}}};
        input.work_copies = 2;
        const auto replay = replay_on_shared_cores({input}, 2).value();
        QCOMPARE(replay[0].stages[0][0].end_ns, 4000);
    }
};

QTEST_GUILESS_MAIN(PipelineSchedulesTest)
#include "test_pipeline_schedules.moc"
