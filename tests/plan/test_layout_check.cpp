// The one layout check (core/parallel/layout.h): each rule's words, and the simulator and the
// planner saying the same as fulcrum-train does (tests/train/test_train_layouts checks the
// engine's command line against the same words).
#include <QTest>

#include "core/parallel/layout.h"
#include "core/plan/planner.h"
#include "core/sim/simulator.h"

using namespace fulcrum;
using parallel::Layout;
using parallel::ModelShape;

namespace {

ModelShape model() {
    return {.layers = 4, .hidden = 64, .heads = 4, .context = 256};
}

}  // namespace

class LayoutCheckTest : public QObject {
    Q_OBJECT

private slots:
    void refusesEachRule_data() {
        QTest::addColumn<int>("rule");
        QTest::addColumn<QString>("words");
        QTest::newRow("no degree") << 0 << "--dp, --tp, --pp and --cp must be at least 1";
        QTest::newRow("more stages than layers") << 1 << "every stage needs a layer";
        QTest::newRow("heads") << 2 << "--heads 3 must divide --hidden 64";
        QTest::newRow("tp") << 3 << "--tp 8 must divide --heads 4";
        QTest::newRow("interleaved on one stage") << 4 << "needs --pp 2 or more";
        QTest::newRow("chunks without interleaving")
            << 5 << "virtual stages are for the interleaved";
        QTest::newRow("more chunks than layers") << 6 << "every model chunk needs a layer";
        QTest::newRow("stage layers") << 7 << "--stage-layers sums to 5 layers";
        QTest::newRow("sequence parallel") << 8 << "it needs --tp 2 or more";
    }
    void refusesEachRule() {
        QFETCH(int, rule);
        QFETCH(QString, words);
        Layout layout;
        ModelShape shape = model();
        switch (rule) {
            case 0:
                layout.grid.cp = 0;
                break;
            case 1:
                layout.grid.pp = 8;
                break;
            case 2:
                shape.heads = 3;
                break;
            case 3:
                layout.grid.tp = 8;
                break;
            case 4:
                layout.schedule = parallel::PipelineSchedule::interleaved;
                layout.virtual_stages = 2;
                break;
            case 5:
                layout.grid.pp = 2;
                layout.virtual_stages = 2;
                break;
            case 6:
                layout.grid.pp = 2;
                layout.schedule = parallel::PipelineSchedule::interleaved;
                layout.virtual_stages = 4;
                break;
            case 7:
                layout.grid.pp = 2;
                layout.stage_layers = {2, 3};
                break;
            case 8:
                layout.sequence_parallel = true;
                break;
        }
        const Status status = parallel::check_layout(layout, shape);
        QVERIFY(!status);
        QVERIFY2(QString::fromStdString(status.error().message).contains(words),
                 status.error().message.c_str());
        // The simulator refuses the same layout with the same words.
        sim::SimulationConfig config;
        config.model = shape;
        config.layout.grid = layout.grid;
        config.layout.microbatches = layout.microbatches;
        config.layout.schedule = layout.schedule;
        config.layout.virtual_stages = layout.virtual_stages;
        config.layout.stage_layers = layout.stage_layers;
        config.layout.sequence_parallel = layout.sequence_parallel;
        config.lengths = "long-tail:context=256";
        const Status simulated = sim::validate(config);
        QVERIFY(!simulated);
        QCOMPARE(simulated.error().message, status.error().message);
    }

    void acceptsWhatRuns() {
        Layout layout;
        layout.grid = {.dp = 1, .tp = 2, .pp = 2, .cp = 1};
        layout.schedule = parallel::PipelineSchedule::interleaved;
        layout.virtual_stages = 2;
        layout.stage_layers = {1, 1, 1, 1};
        layout.sequence_parallel = true;
        QVERIFY(parallel::check_layout(layout, model()));
    }

    // Every layout the planner estimates or plays passes the check fulcrum-train makes.
    void plannedLayoutsPass() {
        plan::PlanRequest request;
        request.world_sizes = {4};
        request.gpus_per_node = 4;
        request.model = {.layers = 4, .hidden = 64, .heads = 4, .context = 256, .vocab = 256};
        request.lengths = "long-tail:context=256,median=64";
        request.global_batch = 8;
        request.steps = 1;
        request.space.schedules = {parallel::PipelineSchedule::one_f_one_b,
                                   parallel::PipelineSchedule::interleaved};
        auto result = plan::plan(request);
        QVERIFY2(result, result ? "" : result.error().message.c_str());
        int checked = 0;
        for (const plan::Candidate& c : result->candidates) {
            QVERIFY(c.reason_kind != "layout refused");
            if (c.status == plan::CandidateStatus::ranked ||
                c.status == plan::CandidateStatus::estimated) {
                const Status status = parallel::check_layout(
                    plan::simulation_config(request, c).layout, request.model);
                QVERIFY2(status, status ? "" : status.error().message.c_str());
                ++checked;
            }
        }
        QVERIFY(checked > 0);
    }
};

QTEST_GUILESS_MAIN(LayoutCheckTest)
#include "test_layout_check.moc"
