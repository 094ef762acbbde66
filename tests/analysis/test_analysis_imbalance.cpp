// Imbalance matrices and stragglers on hand-built traces, and on a merged run database.
#include <QTemporaryDir>
#include <QTest>

#include <cmath>

#include "core/analysis/imbalance.h"
#include "core/store/merge.h"
#include "core/store/trace_reader.h"
#include "tests/analysis/trace_builders.h"
#include "tests/support/synthetic_run.h"

using namespace fulcrum;
using namespace fulcrum::analysis;
using namespace fulcrum::analysis::builders;

namespace {

void pass(RunTrace& trace, int rank, std::int64_t start, std::int64_t duration, int step, int mb,
          Phase phase) {
    trace.add_range(host(trace, rank), phase == Phase::forward ? "forward" : "backward",
                    Category::compute, start, start + duration, step, mb, 0, phase);
}

void whole_document(RunTrace& trace, int rank, int step, int mb, std::int64_t doc, int length) {
    trace.workload.push_back({rank, step, mb, doc, length, 0, length, "fixed"});
}

// Two DP ranks, one step, two micro-batches; rank 1 has no pass for mb 1 (its cell is NaN)
// but holds work for it.
//   compute: rank 0 mb0 100 + 200 = 300, mb1 50 + 100 = 150; rank 1 mb0 60 + 120 = 180
//   pairs:   rank 0 [4] 10, [2] 3;  rank 1 [3] 6, [1] 1
RunTrace two_ranks() {
    RunTrace trace;
    add_rank(trace, 0, 0, 0, 0, 0);
    add_rank(trace, 1, 1, 0, 0, 0);
    pass(trace, 0, 0, 100, 0, 0, Phase::forward);
    pass(trace, 0, 100, 200, 0, 0, Phase::backward);
    pass(trace, 0, 300, 50, 0, 1, Phase::forward);
    pass(trace, 0, 350, 100, 0, 1, Phase::backward);
    pass(trace, 1, 0, 60, 0, 0, Phase::forward);
    pass(trace, 1, 60, 120, 0, 0, Phase::backward);
    whole_document(trace, 0, 0, 0, 1, 4);
    whole_document(trace, 0, 0, 1, 2, 2);
    whole_document(trace, 1, 0, 0, 3, 3);
    whole_document(trace, 1, 0, 1, 4, 1);
    trace.finish();
    return trace;
}

}  // namespace

class ImbalanceTest : public QObject {
    Q_OBJECT

private slots:
    // Two ranks, two steps: step 0 takes 10 and 30 (max 30, mean 20: 1.5), step 1 1000 and
    // 1000 (1.0). Time-weighted, the run lost (30 + 1000) / (20 + 1000) = 1030/1020 of an even
    // split; the plain mean of the ratios, (1.5 + 1)/2 = 1.25, would weigh the 40 ns step
    // like the 2000 ns one. Predicted causal pairs d(d + 1)/2 of whole documents: step 0
    // 3 (d = 2) and 10 (d = 4), max 10, mean 6.5; step 1 1 and 1: (10 + 1)/(6.5 + 1).
    void headlineImbalanceIsTimeWeighted() {
        RunTrace trace;
        add_rank(trace, 0, 0, 0, 0, 0);
        add_rank(trace, 1, 1, 0, 0, 0);
        pass(trace, 0, 0, 10, 0, 0, Phase::forward);
        pass(trace, 1, 0, 30, 0, 0, Phase::forward);
        pass(trace, 0, 100, 1000, 1, 0, Phase::forward);
        pass(trace, 1, 100, 1000, 1, 0, Phase::forward);
        whole_document(trace, 0, 0, 0, 1, 2);
        whole_document(trace, 1, 0, 0, 2, 4);
        whole_document(trace, 0, 1, 0, 3, 1);
        whole_document(trace, 1, 1, 0, 4, 1);
        trace.finish();
        const auto result =
            analyze_imbalance(trace, find_passes(trace), MatchedCollectives(trace), nullptr);
        QCOMPARE(result.compute_by_step.column_imbalance(), (std::vector<double>{1.5, 1.0}));
        QCOMPARE(result.compute_imbalance.value(), 1030.0 / 1020.0);
        QCOMPARE(result.predicted_imbalance.value(), 11.0 / 7.5);
    }

    //   by micro-batch: mb0 300 vs 180 → 300/240 = 1.25; mb1 only rank 0 → none (NaN): over
    //   one rank max/mean is 1 by definition and says nothing
    //   by step: 450 vs 180 → 450/315; predicted pairs by step 13 vs 7 → 13/10
    void matricesWithoutACostModel() {
        const RunTrace trace = two_ranks();
        const auto result =
            analyze_imbalance(trace, find_passes(trace), MatchedCollectives(trace), nullptr);
        QVERIFY(!result.predicted_is_time);
        QCOMPARE(result.by_microbatch.size(), 1u);
        const StepMatrices& step = result.by_microbatch[0];
        QCOMPARE(step.step, 0);
        QCOMPARE(step.compute_ns.rows, (std::vector<std::int32_t>{0, 1}));
        QCOMPARE(step.compute_ns.columns, (std::vector<std::int32_t>{0, 1}));
        QCOMPARE(step.compute_ns.at(0, 0), 300.0);
        QCOMPARE(step.compute_ns.at(0, 1), 150.0);
        QCOMPARE(step.compute_ns.at(1, 0), 180.0);
        QVERIFY(std::isnan(step.compute_ns.at(1, 1)));
        QCOMPARE(step.predicted.at(0, 0), 10.0);
        QCOMPARE(step.predicted.at(0, 1), 3.0);
        QCOMPARE(step.predicted.at(1, 0), 6.0);
        QCOMPARE(step.predicted.at(1, 1), 1.0);
        const auto by_mb = step.compute_ns.column_imbalance();
        QCOMPARE(by_mb.size(), 2u);
        QCOMPARE(by_mb[0], 1.25);
        QVERIFY(std::isnan(by_mb[1]));

        QCOMPARE(result.compute_by_step.columns, (std::vector<std::int32_t>{0}));
        QCOMPARE(result.compute_by_step.at(0, 0), 450.0);
        QCOMPARE(result.compute_by_step.at(1, 0), 180.0);
        QCOMPARE(result.predicted_by_step.at(0, 0), 13.0);
        QCOMPARE(result.predicted_by_step.at(1, 0), 7.0);
        QVERIFY(result.has_prediction);
        QCOMPARE(result.compute_imbalance.value(), 450.0 / 315);
        QCOMPARE(result.predicted_imbalance.value(), 1.3);
        QVERIFY(result.stragglers.empty());
    }

    // A (rank, step)'s passes interleave micro-batches as 1F1B runs them (forward 0, forward 1,
    // backward 0, backward 1, over two steps): each cell still sums its own passes. And passes
    // handed over out of (rank, step) order, which the cells' fold a (rank, step) at a time
    // does not expect, give the same matrices.
    void cellsFoldInterleavedAndUnorderedPasses() {
        RunTrace trace;
        add_rank(trace, 0, 0, 0, 0, 0);
        add_rank(trace, 1, 1, 0, 0, 0);
        for (int step = 0; step < 2; ++step) {
            const std::int64_t t = 1000 * step;
            pass(trace, 0, t, 10, step, 0, Phase::forward);
            pass(trace, 0, t + 10, 20, step, 1, Phase::forward);
            pass(trace, 0, t + 30, 40, step, 0, Phase::backward);
            pass(trace, 0, t + 70, 80, step, 1, Phase::backward);
            pass(trace, 1, t, 5, step, 0, Phase::forward);
            pass(trace, 1, t + 5, 7, step, 1, Phase::forward);
            pass(trace, 1, t + 12, 11, step, 0, Phase::backward);
            pass(trace, 1, t + 23, 13, step, 1, Phase::backward);
        }
        trace.finish();
        const std::vector<Pass> passes = find_passes(trace);
        const auto result = analyze_imbalance(trace, passes, MatchedCollectives(trace), nullptr);
        QCOMPARE(result.by_microbatch.size(), 2u);
        for (const StepMatrices& step : result.by_microbatch) {
            QCOMPARE(step.compute_ns.at(0, 0), 50.0);
            QCOMPARE(step.compute_ns.at(0, 1), 100.0);
            QCOMPARE(step.compute_ns.at(1, 0), 16.0);
            QCOMPARE(step.compute_ns.at(1, 1), 20.0);
        }
        QCOMPARE(result.compute_by_step.at(0, 1), 150.0);
        QCOMPARE(result.compute_by_step.at(1, 1), 36.0);

        const std::vector<Pass> reversed(passes.rbegin(), passes.rend());
        const auto unordered =
            analyze_imbalance(trace, reversed, MatchedCollectives(trace), nullptr);
        QCOMPARE(unordered.compute_by_step.values, result.compute_by_step.values);
        QCOMPARE(unordered.by_microbatch.size(), result.by_microbatch.size());
        for (std::size_t s = 0; s < result.by_microbatch.size(); ++s) {
            QCOMPARE(unordered.by_microbatch[s].compute_ns.values,
                     result.by_microbatch[s].compute_ns.values);
        }
    }

    // With a cost model: forward 10 + T + 0.5·P, backward 2·T + P.
    //   rank 0 mb0 (T 4, P 10): 19 + 18 = 37;   mb1 (T 2, P 3): 13.5 + 7 = 20.5
    //   rank 1 mb0 (T 3, P 6):  16 + 12 = 28;   mb1 (T 1, P 1): 11.5 + 3 = 14.5
    //   by step 57.5 vs 42.5 → 57.5/50 = 1.15
    void matricesWithACostModel() {
        const RunTrace trace = two_ranks();
        CostModel cost;
        PassCost forward;
        forward.stage = 0;
        forward.phase = Phase::forward;
        forward.fixed_ns = 10;
        forward.per_token_ns = 1;
        forward.per_pair_ns = 0.5;
        PassCost backward = forward;
        backward.phase = Phase::backward;
        backward.fixed_ns = 0;
        backward.per_token_ns = 2;
        backward.per_pair_ns = 1;
        cost.passes = {forward, backward};
        const auto result =
            analyze_imbalance(trace, find_passes(trace), MatchedCollectives(trace), &cost);
        QVERIFY(result.predicted_is_time);
        const Matrix& predicted = result.by_microbatch[0].predicted;
        QCOMPARE(predicted.at(0, 0), 37.0);
        QCOMPARE(predicted.at(0, 1), 20.5);
        QCOMPARE(predicted.at(1, 0), 28.0);
        QCOMPARE(predicted.at(1, 1), 14.5);
        QCOMPARE(result.predicted_by_step.at(0, 0), 57.5);
        QCOMPARE(result.predicted_imbalance.value(), 1.15);

        // A stage the model has no fit for predicts nothing: NaN cells, no imbalance.
        CostModel other_stage = cost;
        for (PassCost& p : other_stage.passes) {
            p.stage = 3;
        }
        const auto unfitted =
            analyze_imbalance(trace, find_passes(trace), MatchedCollectives(trace), &other_stage);
        QVERIFY(std::isnan(unfitted.by_microbatch[0].predicted.at(0, 0)));
        QVERIFY(std::isnan(unfitted.predicted_by_step.at(1, 0)));
        QVERIFY(!unfitted.predicted_imbalance);
    }

    // Three TP ranks, four tp all-reduces (step 0, mb 0, forward); starts:
    //   k0: 100 110 130 → last rank 2, wait 30 + 20 = 50
    //   k1: 200 200 200 → everyone together: no straggler
    //   k2: 300 310 300 → last rank 1, wait 10 + 10 = 20
    //   k3: 400 390 420 → last rank 2, wait 20 + 30 = 50
    // → rank 2: 2 last arrivals, 100 ns caused; rank 1: 1, 20 ns; rank 0 never last: omitted.
    void stragglersFromMatchedCollectives() {
        RunTrace trace;
        for (int r = 0; r < 3; ++r) {
            add_rank(trace, r, 0, r, 0, 0);
        }
        const std::int64_t starts[4][3] = {
            {100, 110, 130}, {200, 200, 200}, {300, 310, 300}, {400, 390, 420}};
        for (int k = 0; k < 4; ++k) {
            for (int r = 0; r < 3; ++r) {
                trace.add_range(host(trace, r), "tp all-reduce", Category::communication,
                                starts[k][r], 100 * (k + 1) + 80, 0, 0, 0, Phase::forward);
            }
        }
        trace.finish();
        const auto collectives = match_collectives(trace);
        QCOMPARE(collectives.size(), 4u);
        const auto result = analyze_imbalance(trace, find_passes(trace),
                                              MatchedCollectives(trace, collectives), nullptr);
        QCOMPARE(result.stragglers.size(), 2u);
        QCOMPARE(result.stragglers[0].rank, 2);
        QCOMPARE(result.stragglers[0].last_arrivals, 2);
        QCOMPARE(result.stragglers[0].instances, 4);
        QCOMPARE(result.stragglers[0].caused_wait_ns, 100);
        QCOMPARE(result.stragglers[1].rank, 1);
        QCOMPARE(result.stragglers[1].last_arrivals, 1);
        QCOMPARE(result.stragglers[1].caused_wait_ns, 20);
        QVERIFY(result.by_microbatch.empty());
        QVERIFY(!result.compute_imbalance);  // no passes: nothing measured
    }

    // A merged run database (tests/support/synthetic_run.cpp, pp = 2): both stages run every
    // micro-batch for the same time and hold the same documents, so each column of every
    // matrix is balanced (imbalance 1); the ranks' clocks are aligned on the barrier marks, so
    // the all-reduce starts together everywhere and no rank is a straggler.
    void mergedRunDatabase() {
        QTemporaryDir dir;
        testing::SyntheticRunOptions options;
        options.pp = 2;
        auto files =
            testing::write_synthetic_rank_files(dir.filePath("ranks").toStdString(), options);
        QVERIFY(files.ok());
        const std::string path = dir.filePath("run.fulcrum").toStdString();
        QVERIFY(store::merge_rank_files(*files, path).ok());
        auto reader = store::TraceReader::open(path);
        QVERIFY(reader.ok());
        auto trace = load_run_trace(*reader);
        QVERIFY(trace.ok());
        const auto passes = find_passes(*trace);
        const auto collectives = match_collectives(*trace);
        // dp = 1: each stage's dp all-reduce has no peer, so nothing to match.
        QVERIFY(collectives.empty());
        const auto result =
            analyze_imbalance(*trace, passes, MatchedCollectives(*trace, collectives), nullptr);
        QCOMPARE(int(result.by_microbatch.size()), options.steps);
        for (const StepMatrices& step : result.by_microbatch) {
            QCOMPARE(step.compute_ns.rows, (std::vector<std::int32_t>{0, 1}));
            QCOMPARE(int(step.compute_ns.columns.size()), options.microbatches);
            for (std::size_t c = 0; c < step.predicted.columns.size(); ++c) {
                QVERIFY(step.predicted.at(0, c) > 0);
                QCOMPARE(step.predicted.at(0, c), step.predicted.at(1, c));
            }
            for (const double imbalance : step.predicted.column_imbalance()) {
                QCOMPARE(imbalance, 1.0);
            }
        }
        QCOMPARE(result.predicted_imbalance.value(), 1.0);
        // The generator gives both stages the same compute per micro-batch, up to rounding.
        QVERIFY2(result.compute_imbalance.value() < 1.01,
                 qPrintable(QString::number(*result.compute_imbalance)));
        QVERIFY(result.stragglers.empty());
    }
};

QTEST_GUILESS_MAIN(ImbalanceTest)
#include "test_analysis_imbalance.moc"
