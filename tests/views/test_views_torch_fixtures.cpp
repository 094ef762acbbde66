// The views on an imported PyTorch pipeline (tests/data/torch: Schedule1F1B over 4 ranks, no
// labels, its passes recovered from the sends; docs/import.md, "The 4D structure of a PyTorch
// run"): the timeline groups the ranks by stage as it does fulcrum-train's runs, and the bubble
// view draws every stage's recovered passes with the bubble table beside them; and on the
// DP × TP mesh without a pipeline, the heatmap of its recovered passes; and the interleaved
// pipeline with its labels taken out (as Megatron-LM's records none), its chunks drawn; and
// Megatron-LM's 1F1B job in Nsight Systems exports (tests/data/megatron).
#include <qcustomplot.h>

#include <QTemporaryDir>
#include <QTest>

#include <nlohmann/json.hpp>

#include <fstream>
#include <set>

#include "core/import/importer.h"
#include "tests/support/trace_json.h"
#include "views/charts/bubble_stage_model.h"
#include "views/charts/bubble_view.h"
#include "views/charts/heatmap_view.h"
#include "views/timeline/lane_tree_model.h"
#include "views/timeline/timeline_canvas.h"

using namespace fulcrum;
using namespace fulcrum::views;
using namespace fulcrum::views::timeline;

class TorchFixtureViewsTest : public QObject {
    Q_OBJECT

    QTemporaryDir dir_;
    RunPtr run_;

    // `inputs` imported into the run NAME.fulcrum and opened as the GUI does.
    RunPtr import_and_open(const std::vector<std::string>& inputs, const std::string& name) {
        const QString path = dir_.filePath(QString::fromStdString(name + ".fulcrum"));
        auto imported = importer::import_files(inputs, path.toStdString());
        if (!imported) {
            qFatal("%s: %s", name.c_str(), imported.error().message.c_str());
        }
        auto run = open_run(path);
        if (!run) {
            qFatal("%s: %s", name.c_str(), run.error().message.c_str());
        }
        if (!(*run)->analysis) {
            qFatal("%s: %s", name.c_str(), qPrintable((*run)->analysis_error));
        }
        return *run;
    }

    // The files `tests/data/DIR/PREFIX<r>SUFFIX` of ranks 0 … ranks − 1.
    static std::vector<std::string> rank_files(const std::string& dir, const std::string& prefix,
                                               int ranks, const std::string& suffix) {
        std::vector<std::string> files;
        for (int r = 0; r < ranks; ++r) {
            files.push_back(std::string(FULCRUM_SOURCE_DIR "/tests/data/") + dir + "/" + prefix +
                            std::to_string(r) + suffix);
        }
        return files;
    }

    // The torch fixture `job`'s four rank traces.
    RunPtr import_and_open(const std::string& job) {
        return import_and_open(rank_files("torch", job + "-rank", 4, ".json.gz"), job);
    }

    // The interleaved fixture's two ranks without torch.distributed.pipelining's PP: labels,
    // imported and opened.
    RunPtr import_unlabelled_interleaved() {
        std::vector<std::string> inputs;
        for (int r = 0; r < 2; ++r) {
            nlohmann::json trace = nlohmann::json::parse(test::read_gzip(
                std::string(FULCRUM_SOURCE_DIR "/tests/data/torch/interleaved-pp2-rank") +
                std::to_string(r) + ".json.gz"));
            test::drop_events(trace, "PP:");
            inputs.push_back(dir_.filePath(QString("unlabelled-rank%1.json").arg(r)).toStdString());
            std::ofstream(inputs.back()) << trace.dump();
        }
        return import_and_open(inputs, "unlabelled");
    }

private slots:
    void initTestCase() {
        QVERIFY(dir_.isValid());
        run_ = import_and_open("1f1b-pp4");
        QVERIFY2(run_->analysis != nullptr, qPrintable(run_->analysis_error));
    }

    void laneTreeGroupsByStage() {
        const Layout layout = build_layout(*run_->trace);
        LaneTreeModel model;
        model.set_run(run_->trace.get(), &layout);
        model.set_grouping(Grouping::pp);
        QCOMPARE(model.rowCount(), 4);  // PP stages 0–3
        for (int stage = 0; stage < 4; ++stage) {
            QCOMPARE(model.rowCount(model.index(stage, 0)), 1);  // one rank each
        }
    }

    void bubbleViewDrawsTheRecoveredPasses() {
        BubbleView view;
        view.resize(1200, 800);
        view.set_run(run_);
        QVERIFY2(view.message().isEmpty(), qPrintable(view.message()));
        QVERIFY(view.select_pipeline(1, 0, 0, 0));
        // Step 1 of 4 stages × 8 micro-batches, forward and backward.
        QCOMPARE(view.shown_passes().size(), std::size_t(4 * 8 * 2));
        std::set<int> stages;
        for (const analysis::Pass& pass : view.shown_passes()) {
            stages.insert(pass.stage);
            QVERIFY(pass.microbatch >= 0 && pass.microbatch < 8);
        }
        QCOMPARE(stages, (std::set<int>{0, 1, 2, 3}));
        QCOMPARE(view.stage_model()->rowCount(), 4);
        // The step's critical path is drawn over the passes.
        QVERIFY(!view.shown_critical().empty());
    }

    // The rank × micro-batch map: a cell per rank and micro-batch of the step.
    void heatmapHasRanksByMicrobatches() {
        HeatmapView view;
        view.resize(1200, 800);
        view.set_run(run_);
        QVERIFY2(view.message().isEmpty(), qPrintable(view.message()));
        view.set_step(1);
        QCPColorMapData* data = view.microbatch_map()->data();
        QCOMPARE(data->keySize(), 8);    // micro-batches
        QCOMPARE(data->valueSize(), 4);  // ranks
    }

    // The DP × TP mesh without a pipeline (FSDP2 and DTensor): its recovered passes fill the
    // heatmap, a micro-batch column by 4 ranks; the bubble view says why it has nothing to draw.
    void meshWithoutPipeline() {
        const RunPtr run = import_and_open("tp2-dp2");
        HeatmapView heatmap;
        heatmap.resize(1200, 800);
        heatmap.set_run(run);
        QVERIFY2(heatmap.message().isEmpty(), qPrintable(heatmap.message()));
        heatmap.set_step(1);
        QCOMPARE(heatmap.microbatch_values().columns, std::vector<std::int32_t>{0});
        QCOMPARE(heatmap.microbatch_values().rows.size(), std::size_t(4));
        BubbleView bubbles;
        bubbles.resize(1200, 800);
        bubbles.set_run(run);
        QVERIFY2(bubbles.message().contains("no pipeline (pp = 1)"), qPrintable(bubbles.message()));
    }

    // The interleaved pipeline without labels: the bubble view draws both chunks' passes of
    // each stage, with the critical path over them; the heatmap a cell per rank and
    // micro-batch.
    void interleavedWithoutLabels() {
        const RunPtr run = import_unlabelled_interleaved();
        QVERIFY2(run->analysis != nullptr, qPrintable(run->analysis_error));
        BubbleView bubbles;
        bubbles.resize(1200, 800);
        bubbles.set_run(run);
        QVERIFY2(bubbles.message().isEmpty(), qPrintable(bubbles.message()));
        QVERIFY(bubbles.select_pipeline(1, 0, 0, 0));
        // Step 1 of 2 stages × 2 chunks × 4 micro-batches, forward and backward.
        QCOMPARE(bubbles.shown_passes().size(), std::size_t(2 * 2 * 4 * 2));
        std::set<std::pair<int, int>> stage_chunks;
        for (const analysis::Pass& pass : bubbles.shown_passes()) {
            stage_chunks.insert({pass.stage, pass.chunk});
        }
        QCOMPARE(stage_chunks, (std::set<std::pair<int, int>>{{0, 0}, {0, 1}, {1, 0}, {1, 1}}));
        QVERIFY(!bubbles.shown_critical().empty());
        HeatmapView heatmap;
        heatmap.resize(1200, 800);
        heatmap.set_run(run);
        heatmap.set_step(1);
        QCPColorMapData* data = heatmap.microbatch_map()->data();
        QCOMPARE(data->keySize(), 4);    // micro-batches
        QCOMPARE(data->valueSize(), 2);  // ranks
    }

    // Megatron-LM's pp 4 × dp 2 job in Nsight Systems exports (tests/data/megatron; its
    // passes from its hand-over ranges, docs/import.md): the timeline groups its 8 ranks by
    // stage, two a stage; the bubble view draws one pipeline's passes on their GPU times with
    // the critical path over them; the heatmap a cell per rank and micro-batch.
    void megatronInNsysExports() {
        const RunPtr run =
            import_and_open(rank_files("megatron", "rank", 8, ".sqlite"), "megatron");
        const Layout layout = build_layout(*run->trace);
        LaneTreeModel model;
        model.set_run(run->trace.get(), &layout);
        model.set_grouping(Grouping::pp);
        QCOMPARE(model.rowCount(), 4);
        for (int stage = 0; stage < 4; ++stage) {
            QCOMPARE(model.rowCount(model.index(stage, 0)), 2);  // dp 2
        }
        BubbleView bubbles;
        bubbles.resize(1200, 800);
        bubbles.set_run(run);
        QVERIFY2(bubbles.message().isEmpty(), qPrintable(bubbles.message()));
        QVERIFY(bubbles.select_pipeline(1, 0, 0, 0));
        // Step 1 of 4 stages × 8 micro-batches, forward and backward, of the dp 0 pipeline
        // (the slower, which the step's critical path runs through).
        QCOMPARE(bubbles.shown_passes().size(), std::size_t(4 * 8 * 2));
        std::set<int> ranks;
        for (const analysis::Pass& pass : bubbles.shown_passes()) {
            ranks.insert(pass.rank);
        }
        QCOMPARE(ranks, (std::set<int>{0, 2, 4, 6}));
        QVERIFY(!bubbles.shown_critical().empty());
        HeatmapView heatmap;
        heatmap.resize(1200, 800);
        heatmap.set_run(run);
        heatmap.set_step(2);
        QCPColorMapData* data = heatmap.microbatch_map()->data();
        QCOMPARE(data->keySize(), 8);    // micro-batches
        QCOMPARE(data->valueSize(), 8);  // ranks
    }

    // Megatron-LM's interleaved job in Nsight Systems exports (pp 4, 2 model chunks a stage):
    // the bubble view draws both chunks' passes of every stage.
    void megatronInterleavedInNsysExports() {
        const RunPtr run = import_and_open(rank_files("megatron", "interleaved-rank", 4, ".sqlite"),
                                           "megatron-interleaved");
        BubbleView bubbles;
        bubbles.resize(1200, 800);
        bubbles.set_run(run);
        QVERIFY2(bubbles.message().isEmpty(), qPrintable(bubbles.message()));
        QVERIFY(bubbles.select_pipeline(1, 0, 0, 0));
        // Step 1 of 4 stages × 2 chunks × 8 micro-batches, forward and backward.
        QCOMPARE(bubbles.shown_passes().size(), std::size_t(4 * 2 * 8 * 2));
        std::set<std::pair<int, int>> stage_chunks;
        for (const analysis::Pass& pass : bubbles.shown_passes()) {
            stage_chunks.insert({pass.stage, pass.chunk});
        }
        QCOMPARE(stage_chunks.size(), std::size_t(4 * 2));
        QVERIFY(!bubbles.shown_critical().empty());
        // The table's theory column names the interleaved schedule's formula.
        QCOMPARE(bubbles.stage_model()
                     ->headerData(BubbleStageModel::theory_fraction, Qt::Horizontal)
                     .toString(),
                 QString("Theory (p−1)/(v·m)"));
    }
};

QTEST_MAIN(TorchFixtureViewsTest)
#include "test_views_torch_fixtures.moc"
