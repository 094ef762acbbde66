// One definition per figure: what `fulcrum simulate` reports is what `fulcrum analyze` finds
// in the run the simulator writes (docs/analyses.md). The bubble fraction is Σ bubble / Σ busy
// over a pipeline's stages in both; a simulated run fed to the analyses gives the simulator's
// figure within 0.01.
#include <QTemporaryDir>
#include <QTest>

#include "core/analysis/passes.h"
#include "core/analysis/run_analysis.h"
#include "core/sim/simulator.h"
#include "core/store/trace_reader.h"

using namespace fulcrum;
using namespace fulcrum::sim;

namespace {

SimulationResult must(Result<SimulationResult> result) {
    if (!result)
        qFatal("%s", result.error().message.c_str());
    return std::move(result).value();
}

analysis::RunAnalysis analyse(const std::string& path) {
    auto reader = store::TraceReader::open(path);
    if (!reader)
        qFatal("%s", reader.error().message.c_str());
    auto trace = analysis::load_run_trace(*reader);
    if (!trace)
        qFatal("%s", trace.error().message.c_str());
    auto result = analysis::analyze_run(*trace);
    if (!result)
        qFatal("%s", result.error().message.c_str());
    return std::move(result).value();
}

}  // namespace

Q_DECLARE_METATYPE(fulcrum::parallel::PipelineSchedule)

class SimulatorDefinitionsTest : public QObject {
    Q_OBJECT

private slots:
    void bubbleFractionIsOneFigure_data() {
        QTest::addColumn<parallel::PipelineSchedule>("schedule");
        QTest::addColumn<int>("stages");
        QTest::addColumn<QString>("lengths");
        for (auto schedule :
             {parallel::PipelineSchedule::one_f_one_b, parallel::PipelineSchedule::gpipe,
              parallel::PipelineSchedule::interleaved,
              parallel::PipelineSchedule::zero_bubble_h1}) {
            for (int p : {2, 4}) {
                for (const char* lengths :
                     {"long-tail:context=2048", "lognormal:median=600,sigma=0.9"}) {
                    QTest::addRow("%s p%d %s", parallel::schedule_name(schedule), p, lengths)
                        << schedule << p << QString(lengths);
                }
            }
        }
    }
    void bubbleFractionIsOneFigure() {
        QFETCH(parallel::PipelineSchedule, schedule);
        QFETCH(int, stages);
        QFETCH(QString, lengths);
        SimulationConfig config;
        config.model = {.layers = 8, .hidden = 64, .heads = 4, .context = 2048, .vocab = 256};
        config.layout.grid = {.dp = 2, .tp = 1, .pp = stages, .cp = 1};
        config.layout.schedule = schedule;
        config.layout.virtual_stages = schedule == parallel::PipelineSchedule::interleaved ? 2 : 1;
        config.layout.microbatches = 8;
        config.steps = 4;
        config.lengths = lengths.toStdString();
        config.documents = 2048;
        QTemporaryDir dir;
        SimulationOutput output;
        output.path = dir.filePath("sim.fulcrum").toStdString();
        const SimulationResult simulated = must(simulate_to_file(config, output));
        const analysis::RunAnalysis analysed = analyse(output.path);
        QVERIFY(simulated.mean_bubble_fraction > 0);
        QVERIFY(analysed.bubbles.mean_measured_fraction);
        QVERIFY2(std::abs(*analysed.bubbles.mean_measured_fraction -
                          simulated.mean_bubble_fraction) < 0.01,
                 qPrintable(QString("analyze %1, simulate %2")
                                .arg(*analysed.bubbles.mean_measured_fraction)
                                .arg(simulated.mean_bubble_fraction)));
    }

    // Attention time is one figure (docs/analyses.md, "Attention time"): the engine's
    // `attention` range is a layer's whole attention block, so the simulator's holds the core
    // (per_pair · pairs) and the block's GEMMs, 8h² of the 24h² linear FLOPs per token. With a
    // linear-only cost model (per_pair 0) a pass's attention is a third of its compute; with a
    // quadratic-only one (per_token 0) it is all of it.
    void attentionTimeIsTheWholeAttentionBlock_data() {
        QTest::addColumn<double>("per_token");
        QTest::addColumn<double>("per_pair");
        QTest::addColumn<double>("share");
        QTest::newRow("linear only") << 300.0 << 0.0 << 1.0 / 3.0;
        QTest::newRow("quadratic only") << 0.0 << 2.0 << 1.0;
    }
    void attentionTimeIsTheWholeAttentionBlock() {
        QFETCH(double, per_token);
        QFETCH(double, per_pair);
        QFETCH(double, share);
        SimulationConfig config;
        config.model = {.layers = 4, .hidden = 64, .heads = 4, .context = 1024, .vocab = 256};
        config.layout.microbatches = 2;
        config.steps = 2;
        config.lengths = "long-tail:context=1024";
        config.documents = 256;
        analysis::CostModel model;
        for (Phase phase : {Phase::forward, Phase::backward}) {
            analysis::PassCost pass;
            pass.phase = phase;
            pass.per_token_ns = per_token;
            pass.per_pair_ns = per_pair;
            model.passes.push_back(pass);
        }
        config.cost_model = model;
        QTemporaryDir dir;
        SimulationOutput output;
        output.path = dir.filePath("sim.fulcrum").toStdString();
        must(simulate_to_file(config, output));
        auto reader = store::TraceReader::open(output.path);
        QVERIFY(reader.ok());
        auto trace = analysis::load_run_trace(*reader);
        QVERIFY(trace.ok());
        const auto passes = analysis::find_passes(*trace);
        QVERIFY(!passes.empty());
        for (const analysis::Pass& pass : passes) {
            QVERIFY(pass.compute_ns > 0);
            QVERIFY2(std::abs(double(pass.attention_ns) - share * double(pass.compute_ns)) <= 2.0,
                     qPrintable(QString("attention %1 of compute %2")
                                    .arg(pass.attention_ns)
                                    .arg(pass.compute_ns)));
        }
    }
};

QTEST_GUILESS_MAIN(SimulatorDefinitionsTest)
#include "test_sim_definitions.moc"
