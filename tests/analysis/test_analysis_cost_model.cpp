// The cost model: fits on hand-built passes whose times follow known coefficients, the
// degenerate cases that must not produce NaN, collective and pipeline transfer fits, the JSON
// format and its errors, and a fit on a merged run database.
#include <QTemporaryDir>
#include <QTest>
#include <QVector>

#include <algorithm>

#include <cmath>

#include "core/analysis/cost_model.h"
#include "core/store/merge.h"
#include "core/store/trace_reader.h"
#include "core/trace/annotations.h"
#include "tests/analysis/trace_builders.h"
#include "tests/support/synthetic_run.h"

using namespace fulcrum;
using namespace fulcrum::analysis;
using namespace fulcrum::analysis::builders;

namespace {

// Whole documents of the given lengths as one micro-batch held by `rank`.
void hold(RunTrace& trace, int rank, int step, int microbatch, std::vector<int> lengths) {
    static std::int64_t next_id = 0;
    for (int length : lengths) {
        trace.workload.push_back({rank, step, microbatch, next_id++, length, 0, length, "fixed"});
    }
}

bool close(double actual, double expected, double relative = 1e-9) {
    return std::fabs(actual - expected) <= relative * std::max(1.0, std::fabs(expected));
}

// The shared-cores fits' micro-batches: documents of each, and the forward's work at a whole
// core, 1000 + 30·tokens + 4·pairs ns (recoversExactCoefficients' coefficients).
const std::vector<std::vector<int>> kSharedDocuments = {{10}, {10, 10}, {20}, {30}, {5, 25}};
constexpr std::int64_t kSharedForward[] = {1520, 2040, 2440, 3760, 3260};

// A run whose ranks share `host_cores` cores (0: not said), as run.config says it.
RunTrace on_cores(int host_cores) {
    RunTrace trace;
    trace.run.config_json = "{\"host_cores\": " + std::to_string(host_cores) + "}";
    return trace;
}

// The fitted cost of collective `name` on the finished `trace`; a default one when there is
// none.
CollectiveCost fitted_collective(RunTrace& trace, std::string_view name) {
    trace.finish();
    auto model = fit_cost_model(trace, find_passes(trace));
    if (!model || model->collective(name) == nullptr) {
        return {};
    }
    return *model->collective(name);
}

Error error_of(std::string_view json) {
    auto parsed = parse_cost_model_json(json);
    if (parsed) {
        return Error{ErrorCode::io, "parsed without error"};
    }
    return parsed.error();
}

}  // namespace

class CostModelTest : public QObject {
    Q_OBJECT

private slots:
    // Five micro-batches on one stage-0 rank; held tokens T and pairs P = Σ d(d+1)/2:
    //   mb0 [10]      T 10  P 55         mb3 [30]     T 30  P 465
    //   mb1 [10, 10]  T 20  P 110        mb4 [5, 25]  T 30  P 15 + 325 = 340
    //   mb2 [20]      T 20  P 210
    // forward  = 1000 + 30·T + 4·P: 1520, 2040, 2440, 3760, 3260
    // backward =    0 + 60·T + 8·P: 1040, 2080, 2880, 5520, 4520
    // Forward mb3 also holds a 500 ns tp all-reduce, which is not compute. Noise-free, so the
    // fit recovers the coefficients, r² = 1 and no relative error. A stage-1 rank with two
    // passes is below the 3-pass minimum and gets no fit.
    void recoversExactCoefficients() {
        RunTrace trace;
        add_rank(trace, 0, 0, 0, 0, 0);
        add_rank(trace, 1, 0, 0, 1, 0);
        const std::vector<std::vector<int>> documents = {{10}, {10, 10}, {20}, {30}, {5, 25}};
        const std::int64_t forward[] = {1520, 2040, 2440, 3760, 3260};
        const std::int64_t backward[] = {1040, 2080, 2880, 5520, 4520};
        std::int64_t t = 0;
        for (int mb = 0; mb < 5; ++mb) {
            hold(trace, 0, 0, mb, documents[mb]);
            const std::int64_t extra = mb == 3 ? 500 : 0;
            trace.add_range(host(trace, 0), "forward", Category::compute, t,
                            t + forward[mb] + extra, 0, mb, 0, Phase::forward);
            if (extra > 0) {
                trace.add_range(host(trace, 0), "tp all-reduce", Category::communication, t + 100,
                                t + 600, 0, mb, 0, Phase::forward);
            }
            t += forward[mb] + extra;
            trace.add_range(host(trace, 0), "backward", Category::compute, t, t + backward[mb], 0,
                            mb, 0, Phase::backward);
            t += backward[mb];
        }
        for (int mb = 0; mb < 2; ++mb) {
            hold(trace, 1, 0, mb, documents[mb]);
            trace.add_range(host(trace, 1), "forward", Category::compute, 100 * mb, 100 * mb + 50,
                            0, mb, 1, Phase::forward);
        }
        trace.finish();
        auto model = fit_cost_model(trace, find_passes(trace));
        QVERIFY2(model.ok(), model.ok() ? "" : model.error().message.c_str());

        const PassCost* f = model->pass(0, Phase::forward);
        QVERIFY(f != nullptr);
        QVERIFY2(close(f->fixed_ns, 1000, 1e-6), qPrintable(QString::number(f->fixed_ns)));
        QVERIFY(close(f->per_token_ns, 30, 1e-6));
        QVERIFY(close(f->per_pair_ns, 4, 1e-6));
        QCOMPARE(f->fit.samples, 5);
        QVERIFY(f->fit.r_squared > 1 - 1e-9);
        QVERIFY(f->fit.mean_abs_rel_error < 1e-9);
        QVERIFY(close(f->predict(30, 465), 3760, 1e-9));

        // fixed = 0: the fit with the intercept would have it ±rounding; never below 0.
        const PassCost* b = model->pass(0, Phase::backward);
        QVERIFY(b != nullptr);
        QVERIFY(b->fixed_ns >= 0);
        QVERIFY(b->fixed_ns < 1e-6);
        QVERIFY(close(b->per_token_ns, 60, 1e-6));
        QVERIFY(close(b->per_pair_ns, 8, 1e-6));

        QVERIFY(model->pass(1, Phase::forward) == nullptr);
        QCOMPARE(model->passes.size(), 2u);
        QCOMPARE(model->optimizer_ns, 0.0);
    }

    // Two ranks of one host that has one core (RunConfig::host_cores): the passes of mb 0 run
    // alone on each rank and take their time at a whole core, those of mb 1–4 run on both
    // ranks at once and take twice as long (each had half the core). The fit takes the sharing
    // out (core_shares.h) and recovers recoversExactCoefficients' coefficients; told nothing
    // of the cores, it charges the stretch to the work.
    void sharedCoresComeOutOfTheFit() {
        const auto& documents = kSharedDocuments;
        const auto& forward = kSharedForward;
        const std::int64_t backward[] = {1040, 2080, 2880, 5520, 4520};
        const auto fitted = [&](int host_cores) -> PassCost {
            RunTrace trace = on_cores(host_cores);
            add_rank(trace, 0, 0, 0, 0, 0);
            add_rank(trace, 1, 1, 0, 0, 0);
            std::int64_t t = 0;
            for (int mb = 0; mb < 5; ++mb) {
                for (int rank : {0, 1}) {
                    hold(trace, rank, 0, mb, documents[mb]);
                }
                const auto run = [&](const char* name, Phase phase, std::int64_t ns) {
                    if (mb == 0) {  // one rank after the other, alone
                        for (int rank : {0, 1}) {
                            trace.add_range(host(trace, rank), name, Category::compute, t, t + ns,
                                            0, mb, 0, phase);
                            t += ns;
                        }
                        return;
                    }
                    for (int rank : {0, 1}) {  // both at once, at half a core each
                        trace.add_range(host(trace, rank), name, Category::compute, t, t + 2 * ns,
                                        0, mb, 0, phase);
                    }
                    t += 2 * ns;
                };
                run("forward", Phase::forward, forward[mb]);
                run("backward", Phase::backward, backward[mb]);
            }
            trace.finish();
            auto model = fit_cost_model(trace, find_passes(trace));
            if (!model || model->pass(0, Phase::forward) == nullptr) {
                return {};
            }
            return *model->pass(0, Phase::forward);
        };
        const PassCost shared = fitted(1);
        QVERIFY2(close(shared.fixed_ns, 1000, 1e-6), qPrintable(QString::number(shared.fixed_ns)));
        QVERIFY(close(shared.per_token_ns, 30, 1e-6));
        QVERIFY(close(shared.per_pair_ns, 4, 1e-6));
        // A core each (or not said): the stretched passes are taken as work.
        for (int cores : {2, 0}) {
            const PassCost apart = fitted(cores);
            QVERIFY(apart.predict(30, 465) > 1.5 * 3760);
        }
    }

    // Where the engine marked each pass's thread CPU time (`fulcrum.cpu`), the fit on shared
    // cores takes it as the work, whatever the wall time says. The forwards of the test above
    // (1000 + 30·tokens + 4·pairs), both ranks at once on one core, but each stretched 3× (the
    // scheduler gave the core to a third process): the shares of the two ranks alone say 1.5×
    // the work; the marks say the work itself. Likewise the optimizer: rank 1 arrives last and
    // its update's 900 ns of wall time used 250 ns of CPU.
    void sharedCoresFitTheCpuMarks() {
        const auto& documents = kSharedDocuments;
        const auto& forward = kSharedForward;
        RunTrace trace = on_cores(1);
        add_rank(trace, 0, 0, 0, 0, 0);
        add_rank(trace, 1, 1, 0, 0, 0);
        std::int64_t t = 0;
        for (int mb = 0; mb < 5; ++mb) {
            for (int rank : {0, 1}) {
                hold(trace, rank, 0, mb, documents[mb]);
                LaneTrace& lane = host(trace, rank);
                trace.add_range(lane, "forward", Category::compute, t, t + 3 * forward[mb], 0, mb,
                                0, Phase::forward);
                Event& mark = trace.add_range(lane, kCpuMark, Category::schedule,
                                              t + 3 * forward[mb], t + 3 * forward[mb]);
                mark.kind = EventKind::mark;
                mark.bytes = forward[mb];
            }
            t += 3 * forward[mb];
        }
        trace.add_range(host(trace, 0), "optimizer", Category::optimizer, t, t + 900, 0);
        trace.add_range(host(trace, 1), "optimizer", Category::optimizer, t + 10, t + 910, 0);
        Event& mark =
            trace.add_range(host(trace, 1), kCpuMark, Category::schedule, t + 910, t + 910);
        mark.kind = EventKind::mark;
        mark.bytes = 250;
        trace.finish();
        const auto model = fit_cost_model(trace, find_passes(trace));
        QVERIFY(model.ok());
        const PassCost* pass = model->pass(0, Phase::forward);
        QVERIFY(pass != nullptr);
        QVERIFY2(close(pass->fixed_ns, 1000, 1e-6), qPrintable(QString::number(pass->fixed_ns)));
        QVERIFY(close(pass->per_token_ns, 30, 1e-6));
        QVERIFY(close(pass->per_pair_ns, 4, 1e-6));
        QCOMPARE(model->optimizer_ns, 250.0);
    }

    // On shared cores a receiver that waited for its input wakes up when it gets a core, which
    // the replay plays as sharing: its receive does not time the transfer, while one that came
    // after the send does (the copy is the receiver's). Two pp ranks on one core: the receive
    // [500, 1800) waited for the send at 1000: dropped; [2100, 2150) and [3200, 3260) came
    // after theirs: 50 and 60. With a core a rank (or cores not said) the rule is the other
    // way round: only the waiting receive saw the whole transfer, 800.
    void sharedCoresTimeTransfersByTheCopy() {
        const auto fitted = [&](int host_cores) -> CollectiveCost {
            RunTrace trace = on_cores(host_cores);
            add_rank(trace, 0, 0, 0, 0, 0);
            add_rank(trace, 1, 0, 0, 1, 0);
            const auto range = [&](int rank, std::string_view name, std::int64_t start,
                                   std::int64_t end, int mb) {
                const bool forward = name == "forward";
                Event& e = trace.add_range(
                    host(trace, rank), name, forward ? Category::compute : Category::communication,
                    start, end, 0, mb, static_cast<std::int16_t>(rank), Phase::forward);
                e.bytes = forward ? -1 : 64;
            };
            range(0, "send activations", 1000, 1010, 0);
            range(1, "recv activations", 500, 1800, 0);
            range(0, "send activations", 2000, 2010, 1);
            range(1, "recv activations", 2100, 2150, 1);
            range(0, "send activations", 3000, 3010, 2);
            range(1, "recv activations", 3200, 3260, 2);
            for (int mb = 0; mb < 3; ++mb) {
                hold(trace, 1, 0, 10 + mb, {10 * (mb + 1)});
                range(1, "forward", 1'000'000 + 1000 * mb, 1'000'000 + 1000 * mb + 100, 10 + mb);
            }
            return fitted_collective(trace, "recv activations");
        };
        const CollectiveCost shared = fitted(1);
        QCOMPARE(shared.fit.samples, 2);
        QCOMPARE(shared.latency_ns, 55.0);  // one size: the median
        for (int cores : {0, 2}) {
            const CollectiveCost apart = fitted(cores);
            QCOMPARE(apart.fit.samples, 1);
            QCOMPARE(apart.latency_ns, 800.0);
        }
    }

    // A TP collective on shared cores keeps its members' mean time: they reach it a time slice
    // apart, which the fluid replay of the passes does not play. Two TP ranks; in each of
    // three all-reduces of one size rank 0 arrives 400 before rank 1 and both end 100 after
    // rank 1 arrived: the last arrival's 100 with a core each, (500 + 100) / 2 = 300 on one.
    void sharedCoresKeepATpCollectivesMean() {
        const auto fitted = [&](int host_cores) -> CollectiveCost {
            RunTrace trace = on_cores(host_cores);
            add_rank(trace, 0, 0, 0, 0, 0);
            add_rank(trace, 1, 0, 1, 0, 0);
            for (int k = 0; k < 3; ++k) {
                const std::int64_t t = 10'000 * (k + 1);
                for (int rank : {0, 1}) {
                    Event& e =
                        trace.add_range(host(trace, rank), "tp all-reduce", Category::communication,
                                        rank == 0 ? t : t + 400, t + 500, 0, k, 0, Phase::forward);
                    e.bytes = 4096;
                }
                hold(trace, 0, 0, k, {10 * (k + 1)});
                trace.add_range(host(trace, 0), "forward", Category::compute, 1'000'000 + 1000 * k,
                                1'000'000 + 1000 * k + 100, 0, k, 0, Phase::forward);
            }
            return fitted_collective(trace, "tp all-reduce");
        };
        QCOMPARE(fitted(1).latency_ns, 300.0);
        QCOMPARE(fitted(2).latency_ns, 100.0);
        QCOMPARE(fitted(0).latency_ns, 100.0);
    }

    // The degenerate fits, data-driven. Columns are (1, T, P); the rule is non-negative least
    // squares, ties to work terms before the fixed term (cost_model.cpp).
    void degenerateFits_data() {
        QTest::addColumn<QVector<QVector<int>>>("documents");  // per micro-batch
        QTest::addColumn<QVector<qint64>>("times");
        QTest::addColumn<double>("fixed");
        QTest::addColumn<double>("per_token");
        QTest::addColumn<double>("per_pair");
        QTest::addColumn<double>("r_squared");
        QTest::addColumn<double>("mean_abs_rel_error");

        // One 16-token document every time: T = 16, P = 136 in every sample, so 1, T and P are
        // proportional and only one term can be fitted. The tie goes to per_token:
        // 1000 / 16 = 62.5 (the mean). Predictions equal the mean: SS_res = SS_tot → r² = 0;
        // relative errors 0, 100/1100, 100/900 → mean 0.0673400673…
        QTest::newRow("one length, one document")
            << QVector<QVector<int>>{{16}, {16}, {16}} << QVector<qint64>{1000, 1100, 900} << 0.0
            << 62.5 << 0.0 << 0.0 << (100.0 / 1100 + 100.0 / 900) / 3;

        // Every micro-batch 32 tokens, split differently: P = 528, 2·136 = 272, 4·36 = 144.
        // times = 100·T + 2·P = 4256, 3744, 3488. T is constant, so fixed and per_token cannot
        // be told apart; per_token takes it: exactly 100 and 2, r² = 1.
        QTest::newRow("one length, different documents")
            << QVector<QVector<int>>{{32}, {16, 16}, {8, 8, 8, 8}}
            << QVector<qint64>{4256, 3744, 3488} << 0.0 << 100.0 << 2.0 << 1.0 << 0.0;

        // Time falling as tokens rise, pairs constant: [3] → T 3, P 6; [2,1,1,1] → T 5,
        // P 3+1+1+1 = 6; six [1] → T 6, P 6. times 70, 50, 40 = 100 − 10·T. Every fit with a
        // token term needs it negative, so the best non-negative fit is a constant: the pairs
        // column (constant 6) wins the tie with the intercept: per_pair = mean/6 = 160/18.
        // r² = 0; relative errors |53.3−70|/70, |53.3−50|/50, |53.3−40|/40.
        QTest::newRow("negative slope clamped")
            << QVector<QVector<int>>{{3}, {2, 1, 1, 1}, {1, 1, 1, 1, 1, 1}}
            << QVector<qint64>{70, 50, 40} << 0.0 << 0.0 << 160.0 / 18 << 0.0
            << ((70 - 160.0 / 3) / 70 + (160.0 / 3 - 50) / 50 + (160.0 / 3 - 40) / 40) / 3;

        // All times equal and all work equal: r² is 0 by definition, no NaN.
        QTest::newRow("all equal")
            << QVector<QVector<int>>{{8}, {8}, {8}} << QVector<qint64>{800, 800, 800} << 0.0
            << 100.0 << 0.0 << 0.0 << 0.0;
    }

    void degenerateFits() {
        QFETCH(QVector<QVector<int>>, documents);
        QFETCH(QVector<qint64>, times);
        RunTrace trace;
        add_rank(trace, 0, 0, 0, 0, 0);
        std::int64_t t = 0;
        for (int mb = 0; mb < documents.size(); ++mb) {
            hold(trace, 0, 0, mb, std::vector<int>(documents[mb].begin(), documents[mb].end()));
            trace.add_range(host(trace, 0), "forward", Category::compute, t, t + times[mb], 0, mb,
                            0, Phase::forward);
            t += times[mb];
        }
        trace.finish();
        auto model = fit_cost_model(trace, find_passes(trace));
        QVERIFY(model.ok());
        const PassCost* f = model->pass(0, Phase::forward);
        QVERIFY(f != nullptr);
        for (const double value : {f->fixed_ns, f->per_token_ns, f->per_pair_ns, f->fit.r_squared,
                                   f->fit.mean_abs_rel_error}) {
            QVERIFY(std::isfinite(value));
        }
        QFETCH(double, fixed);
        QFETCH(double, per_token);
        QFETCH(double, per_pair);
        QFETCH(double, r_squared);
        QFETCH(double, mean_abs_rel_error);
        QVERIFY2(close(f->fixed_ns, fixed, 1e-9), qPrintable(QString::number(f->fixed_ns)));
        QVERIFY2(close(f->per_token_ns, per_token, 1e-9),
                 qPrintable(QString::number(f->per_token_ns)));
        QVERIFY2(close(f->per_pair_ns, per_pair, 1e-9),
                 qPrintable(QString::number(f->per_pair_ns)));
        QVERIFY2(std::fabs(f->fit.r_squared - r_squared) < 1e-9,
                 qPrintable(QString::number(f->fit.r_squared)));
        QVERIFY2(std::fabs(f->fit.mean_abs_rel_error - mean_abs_rel_error) < 1e-9,
                 qPrintable(QString::number(f->fit.mean_abs_rel_error)));
    }

    // PipelineMatcher pairs a receive with its send whichever comes first in rank order, keeps
    // the receives in the ranks' order, drops a receive without a send, and takes a send's
    // bytes where the receive has none. Ranks 0 (stage 0) and 1 (stage 1) of one pipeline:
    // rank 0's gradient receive comes before the send it waits for, rank 1's activation
    // receives after theirs.
    void pipelinePairsAsRanksComeIn() {
        RunTrace trace;
        add_rank(trace, 0, 0, 0, 0, 0);
        add_rank(trace, 1, 0, 0, 1, 0);
        auto range = [&](int rank, std::string_view name, std::int64_t start, std::int64_t end,
                         int mb, std::int16_t stage, std::int64_t bytes) {
            Event& e = trace.add_range(host(trace, rank), name, Category::communication, start, end,
                                       0, mb, stage, Phase::forward);
            e.bytes = bytes;
        };
        range(0, "send activations", 100, 110, 0, 0, 64);
        range(0, "send activations", 200, 210, 1, 0, 64);
        range(0, "recv gradients", 900, 1000, 0, 0, -1);
        range(1, "recv activations", 50, 150, 0, 1, 64);
        range(1, "recv activations", 220, 300, 1, 1, 32);
        range(1, "recv activations", 400, 500, 2, 1, 64);  // no send: dropped
        range(1, "send gradients", 950, 960, 0, 1, 128);
        trace.finish();
        const std::vector<PipelinePair> pairs = pipeline_pairs(trace, rank_ranges(trace));
        QCOMPARE(pairs.size(), 3u);
        QCOMPARE(trace.name(pairs[0].name), std::string_view("recv gradients"));
        QCOMPARE(pairs[0].send_start_ns, 950);
        QCOMPARE(pairs[0].bytes, 128);  // the send's: the receive says none
        QCOMPARE(pairs[0].recv_start_ns, 900);
        QCOMPARE(pairs[1].send_start_ns, 100);
        QCOMPARE(pairs[1].recv_end_ns, 150);
        QCOMPARE(pairs[2].send_start_ns, 200);
        QCOMPARE(pairs[2].bytes, 32);  // the receive's own
        // With no memory for them, the final pairs go to a temporary file after each rank and
        // come back the same, in the same order.
        PipelineMatcher spilling(trace, 0);
        for (const RankRanges& rank : rank_ranges(trace)) {
            QVERIFY(bool(spilling.add(rank.rank, rank.transfers)));
        }
        auto spilled = spilling.finish();
        QVERIFY(bool(spilled));
        QVERIFY(spilled->spilled());
        const std::vector<PipelinePair> back = spilled->all();
        QCOMPARE(back.size(), pairs.size());
        for (std::size_t i = 0; i < pairs.size(); ++i) {
            QCOMPARE(back[i].name.value, pairs[i].name.value);
            QCOMPARE(back[i].recv_start_ns, pairs[i].recv_start_ns);
            QCOMPARE(back[i].send_start_ns, pairs[i].send_start_ns);
            QCOMPARE(back[i].bytes, pairs[i].bytes);
        }
        QVERIFY(bool(spilled->read_status()));

        // Without coordinates two ranks' sends can share a key: the later rank's wins, also
        // for a receive of a rank read before it.
        RunTrace foreign;
        for (int r = 0; r < 3; ++r) {
            RankInfo info;
            info.rank = r;
            foreign.add_rank(info);
        }
        auto foreign_range = [&](int rank, std::string_view name, std::int64_t start,
                                 std::int16_t stage) {
            foreign.add_range(host(foreign, rank), name, Category::communication, start,
                              start + 100, 0, 0, stage, Phase::forward);
        };
        foreign_range(0, "send activations", 10, 0);
        foreign_range(1, "recv activations", 5, 1);
        foreign_range(2, "send activations", 20, 0);
        foreign.finish();
        const std::vector<PipelinePair> last = pipeline_pairs(foreign, rank_ranges(foreign));
        QCOMPARE(last.size(), 1u);
        QCOMPARE(last[0].send_start_ns, 20);
    }

    // Two TP ranks (tp = 2) and two pipeline stages.
    //   tp all-reduce, 3 instances, bytes 1000/2000/3000; the last arrival (rank 1) takes
    //   1000 + 0.5·B = 1500, 2000, 2500; rank 0 arrives 300 earlier and so lasts 300 longer,
    //   which must not enter the fit → latency 1000, per_byte 0.5.
    //   "allreduce gradients" (an unknown name: one group of whoever emits it, ranks 2 and 3):
    //   same bytes every time, last-arrival (rank 3) durations 100, 300, 200 → latency =
    //   median 200, per_byte 0.
    //   recv activations on stage 1 from stage 0 (ranks 2 ← 0 … both tp 0): mb0 recv
    //   [500, 1800) with the send at 1000 → 800; mb1 recv [1900, 2500) with the send at 2000
    //   → 500. Same bytes → latency = median(800, 500) = 650. mb2's recv [3050, 3100) began
    //   after its send at 3000, so part of the transfer was already done: not a sample.
    //   recv gradients on stage 0 from stage 1: send at 5000, recv [4000, 5300) → 300.
    //   optimizer: step 0's ranks arrive together and the last ends 600 later; in step 1 rank 0
    //   arrives at 300 000 000 and waits for rank 1, which arrives 300 later and both end 500
    //   after rank 0's arrival → 200 (the wait is not update: the simulator plays it apart).
    //   The mean over the steps → 400.
    void collectiveAndPipelineFits() {
        RunTrace trace;
        add_rank(trace, 0, 0, 0, 0, 0);
        add_rank(trace, 1, 0, 1, 0, 0);
        add_rank(trace, 2, 0, 0, 1, 0);
        add_rank(trace, 3, 0, 1, 1, 0);
        auto range = [&](int rank, std::string_view name, std::int64_t start, std::int64_t end,
                         int mb, std::int16_t stage, Phase phase, std::int64_t bytes) {
            Event& e = trace.add_range(host(trace, rank), name, Category::communication, start, end,
                                       0, mb, stage, phase);
            e.bytes = bytes;
        };
        for (int k = 0; k < 3; ++k) {
            const std::int64_t bytes = 1000 * (k + 1);
            const std::int64_t start = 10'000 * (k + 1);
            const std::int64_t end = start + 1000 + bytes / 2;
            range(0, "tp all-reduce", start - 300, end, 0, 0, Phase::forward, bytes);
            range(1, "tp all-reduce", start, end, 0, 0, Phase::forward, bytes);
        }
        const std::int64_t dp_durations[] = {100, 300, 200};
        for (int k = 0; k < 3; ++k) {
            const std::int64_t start = 100'000 * (k + 1);
            range(2, "allreduce gradients", start - 50, start + dp_durations[k], -1, 1, Phase::none,
                  4096);
            range(3, "allreduce gradients", start, start + dp_durations[k], -1, 1, Phase::none,
                  4096);
        }
        range(0, "send activations", 1000, 1100, 0, 0, Phase::forward, 64);
        range(2, "recv activations", 500, 1800, 0, 1, Phase::forward, 64);
        range(0, "send activations", 2000, 2100, 1, 0, Phase::forward, 64);
        range(2, "recv activations", 1900, 2500, 1, 1, Phase::forward, 64);
        range(0, "send activations", 3000, 3100, 2, 0, Phase::forward, 64);
        range(2, "recv activations", 3050, 3100, 2, 1, Phase::forward, 64);
        range(2, "send gradients", 5000, 5100, 0, 1, Phase::backward, 64);
        range(0, "recv gradients", 4000, 5300, 0, 0, Phase::backward, 64);
        trace.add_range(host(trace, 0), "optimizer", Category::optimizer, 200'000'000, 200'000'400,
                        0);
        trace.add_range(host(trace, 1), "optimizer", Category::optimizer, 200'000'000, 200'000'600,
                        0);
        trace.add_range(host(trace, 0), "optimizer", Category::optimizer, 300'000'000, 300'000'500,
                        1);
        trace.add_range(host(trace, 1), "optimizer", Category::optimizer, 300'000'300, 300'000'500,
                        1);
        // Passes and workload so that the model can be fitted at all.
        for (int mb = 0; mb < 3; ++mb) {
            hold(trace, 3, 0, mb, {10 * (mb + 1)});
            trace.add_range(host(trace, 3), "forward", Category::compute, 1'000'000 + 1000 * mb,
                            1'000'000 + 1000 * mb + 100, 0, mb, 1, Phase::forward);
        }
        trace.finish();
        auto model = fit_cost_model(trace, find_passes(trace));
        QVERIFY2(model.ok(), model.ok() ? "" : model.error().message.c_str());

        const CollectiveCost* tp = model->collective("tp all-reduce");
        QVERIFY(tp != nullptr);
        QCOMPARE(tp->role, Role::tp_collective);
        QVERIFY2(close(tp->latency_ns, 1000, 1e-9), qPrintable(QString::number(tp->latency_ns)));
        QVERIFY(close(tp->per_byte_ns, 0.5, 1e-9));
        QCOMPARE(tp->fit.samples, 3);
        QVERIFY(close(tp->predict(4000), 3000, 1e-9));

        const CollectiveCost* gradients = model->collective("allreduce gradients");
        QVERIFY(gradients != nullptr);
        QCOMPARE(gradients->role, Role::collective);
        QCOMPARE(gradients->latency_ns, 200.0);
        QCOMPARE(gradients->per_byte_ns, 0.0);
        // Every sample moved 4096 bytes: no per-byte term can be fitted, and the model says
        // so; a per-byte cost given later (the simulator's analytic bandwidth) scales from
        // there: 200 + 0.5 · (8192 − 4096) = 2248.
        QVERIFY(!gradients->per_byte_fitted());
        QCOMPARE(gradients->fitted_bytes, std::int64_t(4096));
        QVERIFY(tp->per_byte_fitted());
        CollectiveCost scaled = *gradients;
        scaled.per_byte_ns = 0.5;
        QCOMPARE(scaled.predict(4096), 200.0);
        QCOMPARE(scaled.predict(8192), 2248.0);
        auto again = parse_cost_model_json(cost_model_json(*model));
        QVERIFY(again);
        QCOMPARE(again->collective("allreduce gradients")->fitted_bytes, std::int64_t(4096));
        QCOMPARE(again->collective("tp all-reduce")->fitted_bytes, std::int64_t(-1));

        const CollectiveCost* activations = model->collective("recv activations");
        QVERIFY(activations != nullptr);
        QCOMPARE(activations->role, Role::pipeline_recv);
        QCOMPARE(activations->fit.samples, 2);
        QCOMPARE(activations->latency_ns, 650.0);
        const CollectiveCost* grads = model->collective("recv gradients");
        QVERIFY(grads != nullptr);
        QCOMPARE(grads->latency_ns, 300.0);
        QVERIFY(model->collective("send activations") == nullptr);

        QCOMPARE(model->optimizer_ns, 400.0);

        // The fit does not depend on the order the instances were folded in (the matcher
        // closes them by communicator, not in run order): bit for bit.
        auto instances = match_collectives(trace);
        std::reverse(instances.begin(), instances.end());
        const MatchedCollectives reversed(trace, std::move(instances));
        auto refit = fit_cost_model(trace, find_passes(trace), &reversed);
        QVERIFY(refit.ok());
        QCOMPARE(cost_model_json(*refit), cost_model_json(*model));

        // Nor on where the transfer times were kept: each instance's in a temporary file as a
        // run of its own (a budget of 0 bytes), merged back in ascending order for the median
        // (the gradients' 200 of 100, 300, 200 in run order) and the fit.
        MatchedCollectives spilled(trace, 0);
        for (CollectiveInstance& instance : match_collectives(trace)) {
            spilled.add(std::move(instance));
        }
        QVERIFY(spilled.finish());
        auto from_file = fit_cost_model(trace, find_passes(trace), &spilled);
        QVERIFY(from_file.ok());
        QCOMPARE(from_file->collective("allreduce gradients")->latency_ns, 200.0);
        QCOMPARE(cost_model_json(*from_file), cost_model_json(*model));
    }

    // Forward ranges without a stage (a foreign trace that names its passes but not their
    // stage) are fitted under the rank's pp coordinate, 1 here, so the model still writes and
    // reads back: [10] 55 pairs, [20] 210, [30] 465; time = 2·T → per_token 2.
    void passesWithoutAStageUseTheRankCoordinate() {
        RunTrace trace;
        add_rank(trace, 0, 0, 0, 1, 0);
        for (int mb = 0; mb < 3; ++mb) {
            const int length = 10 * (mb + 1);
            hold(trace, 0, 0, mb, {length});
            trace.add_range(host(trace, 0), "forward", Category::compute, 1000 * mb,
                            1000 * mb + 2 * length, 0, mb, -1, Phase::forward);
        }
        trace.finish();
        auto model = fit_cost_model(trace, find_passes(trace));
        QVERIFY(model.ok());
        QCOMPARE(model->passes.size(), 1u);
        QCOMPARE(model->passes[0].stage, std::int16_t{1});
        QVERIFY(close(model->passes[0].per_token_ns, 2, 1e-9));
        QVERIFY(parse_cost_model_json(cost_model_json(*model)).ok());
    }

    // What cannot be fitted says so.
    void nothingToFit() {
        RunTrace empty;
        empty.run.name = "empty-run";
        empty.finish();
        auto none = fit_cost_model(empty, {});
        QVERIFY(!none.ok());
        QCOMPARE(none.error().code, ErrorCode::invalid_input);
        QVERIFY(none.error().message.find("forward or backward") != std::string::npos);
        QVERIFY(none.error().message.find("empty-run") != std::string::npos);

        RunTrace no_workload;
        add_rank(no_workload, 0, 0, 0, 0, 0);
        for (int mb = 0; mb < 3; ++mb) {
            no_workload.add_range(host(no_workload, 0), "forward", Category::compute, 10 * mb,
                                  10 * mb + 5, 0, mb, 0, Phase::forward);
        }
        no_workload.finish();
        auto missing = fit_cost_model(no_workload, find_passes(no_workload));
        QVERIFY(!missing.ok());
        QVERIFY(missing.error().message.find("workload") != std::string::npos);

        // Workload rows for other micro-batches than the passes: nothing joins.
        hold(no_workload, 0, 0, 7, {5});
        auto unjoined = fit_cost_model(no_workload, find_passes(no_workload));
        QVERIFY(!unjoined.ok());
        QVERIFY(unjoined.error().message.find("3 passes") != std::string::npos);
    }

    // Writing and reading back gives the same model, bit for bit (nlohmann writes the
    // shortest decimal that reads back as the same double).
    void jsonRoundTrip() {
        CostModel model;
        model.source = "run \"a\"";
        model.optimizer_ns = 123456.789;
        PassCost f;
        f.stage = 1;
        f.phase = Phase::backward;
        f.fixed_ns = 1.0 / 3;
        f.per_token_ns = 39.996;
        f.per_pair_ns = 0.008000000000000002;
        f.fit = {12, 0.99999, 0.0125};
        model.passes.push_back(f);
        f.stage = 0;
        f.phase = Phase::forward;
        f.fixed_ns = 0;
        model.passes.push_back(f);
        CollectiveCost c;
        c.role = Role::pipeline_recv;
        c.name = "recv activations";
        c.latency_ns = 20000;
        c.per_byte_ns = 1e-3;
        c.fit = {7, 0.5, 0.25};
        model.collectives.push_back(c);
        c.role = Role::cp_collective;
        c.name = "cp all-gather kv";
        model.collectives.push_back(c);

        const std::string json = cost_model_json(model);
        QVERIFY(json.find("\"version\": 1") != std::string::npos);
        QVERIFY(json.find("\"phase\": \"backward\"") != std::string::npos);
        QVERIFY(json.find("\"role\": \"pipeline_recv\"") != std::string::npos);
        auto back = parse_cost_model_json(json);
        QVERIFY2(back.ok(), back.ok() ? "" : back.error().message.c_str());
        QCOMPARE(back->source, model.source);
        QCOMPARE(back->optimizer_ns, model.optimizer_ns);
        QCOMPARE(back->passes.size(), 2u);
        for (std::size_t i = 0; i < 2; ++i) {
            const PassCost& a = model.passes[i];
            const PassCost& b = back->passes[i];
            QCOMPARE(b.stage, a.stage);
            QCOMPARE(b.phase, a.phase);
            QCOMPARE(b.fixed_ns, a.fixed_ns);
            QCOMPARE(b.per_token_ns, a.per_token_ns);
            QCOMPARE(b.per_pair_ns, a.per_pair_ns);
            QCOMPARE(b.fit.samples, a.fit.samples);
            QCOMPARE(b.fit.r_squared, a.fit.r_squared);
            QCOMPARE(b.fit.mean_abs_rel_error, a.fit.mean_abs_rel_error);
        }
        QCOMPARE(back->collectives.size(), 2u);
        for (std::size_t i = 0; i < 2; ++i) {
            const CollectiveCost& a = model.collectives[i];
            const CollectiveCost& b = back->collectives[i];
            QCOMPARE(b.name, a.name);
            QCOMPARE(b.role, a.role);
            QCOMPARE(b.latency_ns, a.latency_ns);
            QCOMPARE(b.per_byte_ns, a.per_byte_ns);
            QCOMPARE(b.fit.samples, a.fit.samples);
        }
        QCOMPARE(cost_model_json(*back), json);

        // The smallest file the simulator accepts: a version and the passes; the rest
        // defaults (source "given", no collectives, optimizer 0).
        auto minimal = parse_cost_model_json(
            R"({"version": 1, "passes": [{"stage": 0, "phase": "forward", "fixed_ns": 5,
                "per_token_ns": 1, "per_pair_ns": 0}]})");
        QVERIFY2(minimal.ok(), minimal.ok() ? "" : minimal.error().message.c_str());
        QCOMPARE(minimal->source, std::string("given"));
        QCOMPARE(minimal->pass(0, Phase::forward)->predict(10, 1000), 15.0);
        QVERIFY(minimal->collectives.empty());
    }

    void badJson_data() {
        QTest::addColumn<QString>("json");
        QTest::addColumn<QString>("names");  // what the message must contain
        const QString pass =
            R"({"stage":0,"phase":"forward","fixed_ns":1,"per_token_ns":1,"per_pair_ns":1})";
        QTest::newRow("not json") << "{\"version\": 1,"
                                  << "not valid JSON";
        QTest::newRow("not an object") << "[1, 2]"
                                       << "expected an object";
        QTest::newRow("no version") << R"({"passes": []})"
                                    << "version";
        QTest::newRow("version 2") << R"({"version": 2, "passes": []})"
                                   << "unsupported version 2";
        QTest::newRow("no passes") << R"({"version": 1})"
                                   << "missing \"passes\"";
        QTest::newRow("passes not array") << R"({"version": 1, "passes": {}})"
                                          << "passes: expected an array";
        QTest::newRow("missing per_token_ns")
            << R"({"version":1,"passes":[)" + pass +
                   R"(,{"stage":1,"phase":"forward","fixed_ns":1,"per_pair_ns":1}]})"
            << "passes[1]: missing \"per_token_ns\"";
        QTest::newRow("string coefficient")
            << R"({"version":1,"passes":[{"stage":0,"phase":"forward","fixed_ns":"1","per_token_ns":1,"per_pair_ns":1}]})"
            << "passes[0].fixed_ns: expected a number";
        QTest::newRow("negative coefficient")
            << R"({"version":1,"passes":[{"stage":0,"phase":"forward","fixed_ns":1,"per_token_ns":-2,"per_pair_ns":1}]})"
            << "passes[0].per_token_ns: must be ≥ 0";
        QTest::newRow("unknown phase")
            << R"({"version":1,"passes":[{"stage":0,"phase":"sideways","fixed_ns":1,"per_token_ns":1,"per_pair_ns":1}]})"
            << "passes[0].phase";
        QTest::newRow("negative stage")
            << R"({"version":1,"passes":[{"stage":-1,"phase":"forward","fixed_ns":1,"per_token_ns":1,"per_pair_ns":1}]})"
            << "passes[0].stage";
        QTest::newRow("duplicate pass") << R"({"version":1,"passes":[)" + pass + "," + pass + "]}"
                                        << "passes[1]: a second entry for stage 0 forward";
        QTest::newRow("unknown role")
            << R"({"version":1,"passes":[],"collectives":[{"name":"x","role":"wizard","latency_ns":1,"per_byte_ns":0}]})"
            << "collectives[0].role";
        QTest::newRow("collective without latency")
            << R"({"version":1,"passes":[],"collectives":[{"name":"x","per_byte_ns":0}]})"
            << "collectives[0]: missing \"latency_ns\"";
        QTest::newRow("optimizer not a number")
            << R"({"version":1,"passes":[],"optimizer_ns":"fast"})"
            << "optimizer_ns: expected a number";
    }

    void badJson() {
        QFETCH(QString, json);
        QFETCH(QString, names);
        const Error error = error_of(json.toStdString());
        QCOMPARE(error.code, ErrorCode::invalid_input);
        QVERIFY2(error.message.find(names.toStdString()) != std::string::npos,
                 error.message.c_str());
        QVERIFY(error.message.rfind("cost model JSON", 0) == 0);
    }

    // A merged run database (tests/support/synthetic_run.cpp, dp = 2, pp = 1, 2 steps × 4
    // micro-batches per replica): every rank holds whole documents filling 8192 tokens, and a
    // forward pass takes ⌊40·8192 + 0.004·Σd²⌋ ns per layer (one stage holds both layers),
    // backward twice that. With T = 8192 and Σd² = 2P − T, per layer:
    //   forward = 40·8192 − 0.004·8192 + 0.008·P = 39.996·T + 0.008·P
    // T is the same in every sample, so the token term takes what fixed would (fixed = 0).
    // The "dp all-reduce gradients" of the two DP ranks starts together on both and lasts
    // 1.4 ms with 64 MiB; the optimizer lasts 0.4 ms.
    void fitsAMergedRunDatabase() {
        QTemporaryDir dir;
        testing::SyntheticRunOptions options;
        options.dp = 2;
        options.pp = 1;
        auto files =
            testing::write_synthetic_rank_files(dir.filePath("ranks").toStdString(), options);
        QVERIFY(files.ok());
        const std::string path = dir.filePath("run.fulcrum").toStdString();
        auto merged = store::merge_rank_files(*files, path);
        QVERIFY2(merged.ok(), merged.ok() ? "" : merged.error().message.c_str());
        auto reader = store::TraceReader::open(path);
        QVERIFY(reader.ok());
        auto trace = load_run_trace(*reader);
        QVERIFY2(trace.ok(), trace.ok() ? "" : trace.error().message.c_str());

        auto model = fit_cost_model(*trace, find_passes(*trace));
        QVERIFY2(model.ok(), model.ok() ? "" : model.error().message.c_str());
        QCOMPARE(model->source, options.name);
        QCOMPARE(model->passes.size(), 2u);  // 1 stage × 2 phases
        for (const PassCost& pass : model->passes) {
            const double scale = (pass.phase == Phase::forward ? 1.0 : 2.0) * options.layers;
            QCOMPARE(pass.fit.samples, 16);  // 2 replicas × 2 steps × 4 micro-batches
            QCOMPARE(pass.fixed_ns, 0.0);
            QVERIFY2(close(pass.per_token_ns, 39.996 * scale, 1e-4),
                     qPrintable(QString::number(pass.per_token_ns)));
            QVERIFY2(close(pass.per_pair_ns, 0.008 * scale, 1e-4),
                     qPrintable(QString::number(pass.per_pair_ns)));
            QVERIFY(pass.fit.r_squared > 0.99999);
            QVERIFY(pass.fit.mean_abs_rel_error < 1e-5);
        }
        const CollectiveCost* gradients = model->collective("dp all-reduce gradients");
        QVERIFY(gradients != nullptr);
        QCOMPARE(gradients->fit.samples, 2);
        QCOMPARE(gradients->latency_ns, 1'400'000.0);
        QCOMPARE(gradients->per_byte_ns, 0.0);
        QCOMPARE(model->optimizer_ns, 400'000.0);

        auto back = parse_cost_model_json(cost_model_json(*model));
        QVERIFY(back.ok());
        QCOMPARE(back->pass(0, Phase::backward)->per_pair_ns,
                 model->pass(0, Phase::backward)->per_pair_ns);
    }
};

QTEST_GUILESS_MAIN(CostModelTest)
#include "test_analysis_cost_model.moc"
