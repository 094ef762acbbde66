// A simulated run read back by the analyses: the passes they find are the ones played, with
// the compute the cost model predicted; the cost model fitted on the run is the one it was
// played with; and the run's settings and fitted costs play the same steps again.
#include <QTemporaryDir>
#include <QTest>

#include <cmath>

#include "core/analysis/cost_model.h"
#include "core/analysis/passes.h"
#include "core/analysis/run_analysis.h"
#include "core/analysis/run_trace.h"
#include "core/sim/simulator.h"
#include "core/store/trace_reader.h"

using namespace fulcrum;
using namespace fulcrum::sim;

namespace {

analysis::PassCost pass_cost(int stage, Phase phase, double scale) {
    analysis::PassCost cost;
    cost.stage = static_cast<std::int16_t>(stage);
    cost.phase = phase;
    cost.fixed_ns = 20000 * scale;
    cost.per_token_ns = (50 + 10 * stage) * scale;
    cost.per_pair_ns = 0.25 * scale;
    return cost;
}

analysis::CollectiveCost collective_cost(std::string_view name, double latency, double per_byte) {
    analysis::CollectiveCost cost;
    cost.name = std::string(name);
    cost.latency_ns = latency;
    cost.per_byte_ns = per_byte;
    return cost;
}

// CP collectives without latency: the simulator writes one range for the calls of all a
// stage's layers, so a fitted latency would be per range, not per call (docs/simulate.md).
analysis::CostModel given_model() {
    analysis::CostModel model;
    model.source = "given";
    for (int s = 0; s < 2; ++s) {
        model.passes.push_back(pass_cost(s, Phase::forward, 1));
        model.passes.push_back(pass_cost(s, Phase::backward, 2));
    }
    model.collectives.push_back(collective_cost(kCpAllGather, 0, 0.002));
    model.collectives.push_back(collective_cost(kCpReduceScatter, 0, 0.002));
    model.collectives.push_back(collective_cost(kRecvActivations, 5000, 0.01));
    model.collectives.push_back(collective_cost(kRecvGradients, 5000, 0.01));
    model.collectives.push_back(collective_cost(kDpAllReduce, 20000, 0.001));
    model.optimizer_ns = 30000;
    return model;
}

SimulationConfig played_config() {
    SimulationConfig config;
    config.model = {.layers = 4, .hidden = 64, .heads = 4, .context = 1024, .vocab = 256};
    config.layout.grid = {.dp = 2, .tp = 1, .pp = 2, .cp = 2};
    config.balancer = balance::Balancer::wlb;
    config.layout.microbatches = 6;
    config.steps = 3;
    config.lengths = "long-tail:context=1024,median=128";
    config.documents = 2000;
    config.seed = 7;
    config.cost_model = given_model();
    return config;
}

// As the GUI calibrates on a run it holds: its analysis's fit.
Result<Calibration> calibrate_held(const analysis::RunTrace& trace) {
    auto analysed = analysis::analyze_run(trace);
    if (!analysed) {
        return analysed.error();
    }
    return calibrate(trace, *analysed);
}

}  // namespace

class RoundTripTest : public QObject {
    Q_OBJECT

    QTemporaryDir work_;
    std::optional<analysis::RunTrace> trace_;
    SimulationResult played_;

private slots:
    void initTestCase() {
        QVERIFY(work_.isValid());
        SimulationOutput output;
        output.path = work_.filePath("played.fulcrum").toStdString();
        auto played = simulate_to_file(played_config(), output);
        QVERIFY2(played.ok(), played.ok() ? "" : played.error().message.c_str());
        played_ = *played;
        auto reader = store::TraceReader::open(output.path);
        QVERIFY(reader.ok());
        auto trace = analysis::load_run_trace(*reader);
        QVERIFY2(trace.ok(), trace.ok() ? "" : trace.error().message.c_str());
        trace_ = std::move(*trace);
    }

    // One pass per rank, micro-batch and phase; its compute (wall less receives and
    // collectives) is the pass cost of what the rank held.
    void passesAreThePlayedOnes() {
        const std::vector<analysis::Pass> passes = analysis::find_passes(*trace_);
        std::int64_t expected = 0;
        for (const SimulatedStep& step : played_.steps) {
            expected += std::int64_t(step.microbatches) * 2 /*pp*/ * 2 /*cp*/ * 2 /*phases*/;
        }
        QCOMPARE(std::int64_t(passes.size()), expected);
        const std::vector<analysis::HeldWork> held = analysis::held_work(*trace_);
        std::map<std::tuple<int, int, int>, analysis::HeldWork> by_key;
        for (const auto& work : held) {
            by_key[{work.rank, work.step, work.microbatch}] = work;
        }
        const analysis::CostModel model = given_model();
        for (const analysis::Pass& pass : passes) {
            const auto found = by_key.find({pass.rank, pass.step, pass.microbatch});
            QVERIFY(found != by_key.end());
            const analysis::PassCost* cost = nullptr;
            for (const auto& candidate : model.passes) {
                if (candidate.stage == pass.stage && candidate.phase == pass.phase) {
                    cost = &candidate;
                }
            }
            QVERIFY(cost != nullptr);
            QCOMPARE(pass.compute_ns,
                     predict_pass_ns(*cost, found->second.tokens, found->second.pairs));
            if (pass.stage == 0 && pass.phase == Phase::forward) {
                QCOMPARE(pass.pipeline_wait_ns, std::int64_t(0));
            }
        }
    }

    void fitRecoversTheModel() {
        auto calibration = calibrate_held(*trace_);
        QVERIFY2(calibration.ok(), calibration.ok() ? "" : calibration.error().message.c_str());
        QCOMPARE(calibration->origin.layers, 4);
        QCOMPARE(calibration->origin.pp, 2);
        QCOMPARE(calibration->origin.hidden, 64);
        QVERIFY(calibration->model.source.starts_with("fitted on"));
        const analysis::CostModel given = given_model();
        QCOMPARE(calibration->model.passes.size(), given.passes.size());
        // Durations are whole nanoseconds, so the fit is exact to rounding.
        const auto close = [](double fitted, double truth) {
            return std::abs(fitted - truth) <= 1e-3 * std::abs(truth) + 1.0;
        };
        for (const auto& fitted : calibration->model.passes) {
            for (const auto& truth : given.passes) {
                if (truth.stage == fitted.stage && truth.phase == fitted.phase) {
                    QVERIFY2(close(fitted.fixed_ns, truth.fixed_ns),
                             qPrintable(QString::number(fitted.fixed_ns)));
                    QVERIFY(std::abs(fitted.per_token_ns - truth.per_token_ns) <
                            1e-3 * truth.per_token_ns);
                    QVERIFY(std::abs(fitted.per_pair_ns - truth.per_pair_ns) <
                            1e-3 * truth.per_pair_ns);
                }
            }
        }
        QCOMPARE(calibration->model.optimizer_ns, given.optimizer_ns);
    }

    // `--calibrate RUN` reads the run a rank at a time (analyze_run_file, no events held): the
    // same settings and the same fitted model, to the byte, as the run held whole.
    void calibrationFromTheFileIsTheHeldOne() {
        auto reader = store::TraceReader::open(work_.filePath("played.fulcrum").toStdString());
        QVERIFY(reader.ok());
        analysis::RunTrace metadata;
        auto analysed = analysis::analyze_run_file(*reader, metadata);
        QVERIFY2(analysed.ok(), analysed.ok() ? "" : analysed.error().message.c_str());
        QCOMPARE(metadata.event_count(), std::int64_t(0));
        auto from_file = calibrate(metadata, *analysed);
        auto held = calibrate_held(*trace_);
        QVERIFY(from_file.ok() && held.ok());
        QCOMPARE(analysis::cost_model_json(from_file->model),
                 analysis::cost_model_json(held->model));
        QCOMPARE(from_file->origin.layers, held->origin.layers);
        QCOMPARE(from_file->grid.pp, held->grid.pp);
        QCOMPARE(from_file->sequence_parallel, held->sequence_parallel);

        // A run without passes says so, whichever way it was read.
        analysis::RunAnalysis none = *analysed;
        none.passes = 0;
        none.cost_model.reset();
        auto refused = calibrate(metadata, none);
        QVERIFY(!refused.ok());
        QVERIFY(refused.error().message.find("no forward or backward passes") != std::string::npos);
    }

    void settingsComeBack() {
        auto settings = config_from_run(*trace_);
        QVERIFY(settings.ok());
        const SimulationConfig& back = settings->config;
        const SimulationConfig played = played_config();
        QVERIFY2(settings->unknown.empty(),
                 settings->unknown.empty() ? "" : settings->unknown.front().c_str());
        QCOMPARE(back.model.layers, played.model.layers);
        QCOMPARE(back.model.hidden, played.model.hidden);
        QCOMPARE(back.model.heads, played.model.heads);
        QCOMPARE(back.model.context, played.model.context);
        QCOMPARE(back.layout.grid.dp, played.layout.grid.dp);
        QCOMPARE(back.layout.grid.pp, played.layout.grid.pp);
        QCOMPARE(back.layout.grid.cp, played.layout.grid.cp);
        QCOMPARE(back.layout.grid.tp, played.layout.grid.tp);
        QCOMPARE(back.layout.schedule, played.layout.schedule);
        QCOMPARE(back.balancer, played.balancer);
        QCOMPARE(back.sharding, played.sharding);
        QCOMPARE(back.layout.microbatches, played.layout.microbatches);
        QCOMPARE(back.steps, played.steps);
        QCOMPARE(back.lengths, played.lengths);
        QCOMPARE(back.documents, played.documents);
        QCOMPARE(back.seed, played.seed);
        QCOMPARE(back.ilp_window, played.ilp_window);
    }

    // The run's own settings and fitted costs predict the run: the same plans, and step
    // times within 2% (the fitted pipeline receives see only part of some transfers).
    void replayFromTheRun() {
        auto settings = config_from_run(*trace_);
        auto calibration = calibrate_held(*trace_);
        QVERIFY(settings.ok() && calibration.ok());
        SimulationConfig config = settings->config;
        config.cost_model = calibration->model;
        config.cost_origin = calibration->origin;
        auto again = simulate(config, nullptr);
        QVERIFY2(again.ok(), again.ok() ? "" : again.error().message.c_str());
        QCOMPARE(again->steps.size(), played_.steps.size());
        for (std::size_t i = 0; i < again->steps.size(); ++i) {
            QCOMPARE(again->steps[i].imbalance, played_.steps[i].imbalance);
            QCOMPARE(again->steps[i].tokens, played_.steps[i].tokens);
            const double ratio =
                double(again->steps[i].duration_ns) / double(played_.steps[i].duration_ns);
            QVERIFY2(std::abs(ratio - 1) < 0.02, qPrintable(QString::number(ratio)));
        }
    }

    // A run of another schedule, fitted, predicts the given model's run of this one: W passes
    // fitted on a ZB-H1 run and the recomputation in its backward and W passes are taken
    // apart again (docs/simulate.md, "Knobs"), an interleaved run's passes hold half a stage.
    void otherSchedulesCalibrate_data() {
        QTest::addColumn<int>("schedule");
        QTest::addColumn<int>("recompute");
        QTest::newRow("zb-h1, full recomputation")
            << int(parallel::PipelineSchedule::zero_bubble_h1) << int(parallel::Recompute::full);
        QTest::newRow("interleaved v2, selective recomputation")
            << int(parallel::PipelineSchedule::interleaved) << int(parallel::Recompute::selective);
    }
    void otherSchedulesCalibrate() {
        QFETCH(int, schedule);
        QFETCH(int, recompute);
        SimulationConfig config = played_config();
        config.layout.grid.pp = 2;
        config.balancer = balance::Balancer::fixed;
        config.layout.recompute = static_cast<parallel::Recompute>(recompute);
        SimulationConfig other = config;
        other.layout.schedule = static_cast<parallel::PipelineSchedule>(schedule);
        other.layout.virtual_stages =
            other.layout.schedule == parallel::PipelineSchedule::interleaved ? 2 : 1;
        SimulationOutput output;
        output.path = work_.filePath(QString("other-%1.fulcrum").arg(schedule)).toStdString();
        QVERIFY(simulate_to_file(other, output).ok());
        auto reader = store::TraceReader::open(output.path);
        QVERIFY(reader.ok());
        auto trace = analysis::load_run_trace(*reader);
        QVERIFY(trace.ok());
        auto settings = config_from_run(*trace);
        auto calibration = calibrate_held(*trace);
        QVERIFY(settings.ok() && calibration.ok());
        QCOMPARE(settings->config.layout.schedule, other.layout.schedule);
        QCOMPARE(settings->config.layout.virtual_stages, other.layout.virtual_stages);
        QCOMPARE(settings->config.layout.recompute, other.layout.recompute);
        QCOMPARE(calibration->origin.recompute, other.layout.recompute);

        const SimulationResult direct = *simulate(config, nullptr);
        SimulationConfig predicted = config;
        predicted.cost_model = calibration->model;
        predicted.cost_origin = calibration->origin;
        auto again = simulate(predicted, nullptr);
        QVERIFY2(again.ok(), again.ok() ? "" : again.error().message.c_str());
        const double ratio = again->mean_step_ns / direct.mean_step_ns;
        QVERIFY2(std::abs(ratio - 1) < 0.02, qPrintable(QString::number(ratio)));
    }
};

QTEST_GUILESS_MAIN(RoundTripTest)
#include "test_sim_roundtrip.moc"
