// The charts on the fixture's two real captures (pp2 × cp2, 1F1B, 4 micro-batches, 3 steps):
// each view rendered offscreen at 1200×800 and checked for content at pixels taken from the
// plots' own axes, plus hand-built runs for what the fixture lacks (copies, cp = 1) and for
// missing data (no run, failed analysis).
#include <qcustomplot.h>
#include <QAbstractItemModelTester>
#include <QComboBox>
#include <QSignalSpy>
#include <QStandardItemModel>
#include <QTableView>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTest>
#include <QVector>

#include "core/analysis/run_analysis.h"
#include "core/sim/simulator.h"
#include "views/charts/bubble_stage_model.h"
#include "views/charts/bubble_view.h"
#include "views/charts/compare_view.h"
#include "views/charts/cp_load_view.h"
#include "views/charts/heatmap_view.h"
#include "views/charts/hta_table_model.h"
#include "views/charts/kernels_view.h"
#include "views/charts/memory_view.h"
#include "views/charts/overlap_view.h"
#include "views/common/palette.h"
#include "views/common/pass_marks.h"

using namespace fulcrum;
using namespace fulcrum::views;

namespace {

RunPtr load(const QString& name) {
    const QString path = QStringLiteral(FULCRUM_GUI_RUNS_DIR "/%1/run.fulcrum").arg(name);
    auto run = open_run(path);
    if (!run)
        qFatal("cannot open %s: %s", qPrintable(path), run.error().message.c_str());
    return *run;
}

// One GPU rank that copies K/V to and from the host beside a kernel (as in the offload
// analysis test): copy 110 ns, 50 overlapped, 60 exposed, 10 GB/s. It has no steps, no passes
// and cp = 1.
RunPtr copying_run() {
    analysis::RunTrace trace;
    trace.run.config_json = R"({"pp":1,"dp":1,"tp":1,"cp":1,"model":{"layers":2,"hidden":64}})";
    auto& compute = trace.add_lane(0, LaneKind::gpu_stream, "compute");
    auto& copies = trace.add_lane(0, LaneKind::gpu_stream, "prefetch");
    trace.add_range(compute, "attention kernel", Category::attention, 0, 100).kind =
        EventKind::kernel;
    Event& in = trace.add_range(copies, "kv prefetch", Category::offload, 50, 150);
    in.kind = EventKind::memcpy;
    in.copy_kind = CopyKind::host_to_device;
    in.bytes = 1000;
    Event& out = trace.add_range(copies, "kv offload", Category::offload, 160, 170);
    out.kind = EventKind::memcpy;
    out.copy_kind = CopyKind::device_to_host;
    out.bytes = 100;
    trace.finish();
    auto analysed = analysis::analyze_run(trace);
    if (!analysed)
        qFatal("analysis failed: %s", analysed.error().message.c_str());
    auto run = std::make_shared<OpenedRun>();
    run->title = QStringLiteral("copies");
    run->trace = std::make_shared<const analysis::RunTrace>(std::move(trace));
    run->analysis = std::make_shared<const analysis::RunAnalysis>(std::move(*analysed));
    return run;
}

RunPtr opened(analysis::RunTrace trace, const QString& title) {
    trace.finish();
    auto analysed = analysis::analyze_run(trace);
    if (!analysed)
        qFatal("analysis failed: %s", analysed.error().message.c_str());
    auto run = std::make_shared<OpenedRun>();
    run->title = title;
    run->trace = std::make_shared<const analysis::RunTrace>(std::move(trace));
    run->analysis = std::make_shared<const analysis::RunAnalysis>(std::move(*analysed));
    return run;
}

// As an imported trace with forward/backward annotations has it: `ranks` ranks without 4D
// coordinates, no run.config, no workload table. Each rank's step 0 has one forward and one
// backward pass (rank r: 100·(r + 1) and 200·(r + 1) ns), so compute is measured; nothing is
// predicted, and no pipeline or CP group can be formed.
RunPtr unannotated_grid_run(int ranks) {
    analysis::RunTrace trace;
    for (int r = 0; r < ranks; ++r) {
        RankInfo info;
        info.rank = r;
        trace.add_rank(info);
        auto& lane = trace.add_lane(r, LaneKind::host_thread, "main");
        trace.add_range(lane, "step", Category::schedule, 0, 1000, 0);
        trace.add_range(lane, "forward", Category::compute, 0, 100 * (r + 1), 0, 0, -1,
                        Phase::forward);
        trace.add_range(lane, "backward", Category::compute, 300, 300 + 200 * (r + 1), 0, 0, -1,
                        Phase::backward);
    }
    return opened(std::move(trace), QStringLiteral("imported %1").arg(ranks));
}

RunPtr failed_run() {
    auto run = std::make_shared<OpenedRun>();
    run->title = QStringLiteral("broken");
    run->trace = std::make_shared<const analysis::RunTrace>();
    run->analysis_error = QStringLiteral("the workload table is damaged");
    return run;
}

// Lays the view out at 1200×800, replots every chart at its final size and renders it.
QImage render(QWidget& view) {
    view.resize(1200, 800);
    view.show();
    if (!QTest::qWaitForWindowExposed(&view))
        qWarning("window not exposed");
    QCoreApplication::processEvents();
    for (auto* plot : view.findChildren<QCustomPlot*>())
        plot->replot();
    QImage image = view.grab().toImage();
    // FULCRUM_CHART_SHOTS=DIR keeps the screenshots, to look at them.
    const QString shots = qEnvironmentVariable("FULCRUM_CHART_SHOTS");
    if (!shots.isEmpty()) {
        image.save(QStringLiteral("%1/%2-%3.png")
                       .arg(shots,
                            QString::fromLatin1(view.metaObject()->className()).section(':', -1),
                            QString::fromLatin1(QTest::currentTestFunction())));
    }
    return image;
}

// A point of a plot, in plot coordinates, in the view's pixels.
QPoint pixel(const QWidget& view, const QCustomPlot* plot, QPointF plot_pixel) {
    return plot->mapTo(&view, plot_pixel.toPoint());
}
QPoint pixel_at(const QWidget& view, const QCustomPlot* plot, double x, double y) {
    return pixel(view, plot, {plot->xAxis->coordToPixel(x), plot->yAxis->coordToPixel(y)});
}

bool same_colour(QColor a, QColor b, int tolerance = 6) {
    return std::abs(a.red() - b.red()) <= tolerance &&
           std::abs(a.green() - b.green()) <= tolerance &&
           std::abs(a.blue() - b.blue()) <= tolerance;
}

#define QVERIFY_COLOUR(image, point, expected)                                                     \
    do {                                                                                           \
        const QColor got = (image).pixelColor(point);                                              \
        QVERIFY2(same_colour(got, expected), qPrintable(QStringLiteral("at (%1,%2): %3, want %4")  \
                                                            .arg((point).x())                      \
                                                            .arg((point).y())                      \
                                                            .arg(got.name(), (expected).name()))); \
    } while (0)

}  // namespace

class ChartsTest : public QObject {
    Q_OBJECT

private:
    RunPtr fixed_;
    RunPtr wlb_;
    RunPtr copies_;

private slots:
    void initTestCase() {
        fixed_ = load(QStringLiteral("fixed"));
        wlb_ = load(QStringLiteral("wlb"));
        copies_ = copying_run();
        QVERIFY(fixed_->analysis);
        QVERIFY(wlb_->analysis);
    }

    // Bars at the passes' times in their phase colour; idle time in the window shaded.
    void bubbleViewDrawsPassesAndBubbles() {
        BubbleView view;
        view.set_run(fixed_);
        QVERIFY(view.message().isEmpty());
        const auto& bubbles = fixed_->analysis->bubbles;
        const QImage image = render(view);

        // The worst pipeline is shown first.
        double worst = 0;
        for (const auto& p : bubbles.pipelines)
            worst = std::max(worst, p.measured_fraction.value());
        const auto& passes = view.shown_passes();
        QVERIFY(!passes.empty());
        const int step = passes.front().step;
        const analysis::PipelineBubble* shown = nullptr;
        for (const auto& p : bubbles.pipelines) {
            if (p.step == step && p.measured_fraction == worst)
                shown = &p;
        }
        QVERIFY(shown);
        QCOMPARE(static_cast<int>(passes.size()), shown->stages * shown->microbatches * 2);

        // Stage 0's longest forward pass: the captured run's timings vary with the machine's
        // load, and only a bar a few pixels wide has a middle pixel of its own colour.
        const QCustomPlot* gantt = view.gantt_plot();
        const analysis::Pass* longest_forward = nullptr;
        for (const auto& pass : passes) {
            if (pass.stage != 0 || pass.phase != Phase::forward)
                continue;
            if (longest_forward == nullptr || pass.wall_ns() > longest_forward->wall_ns())
                longest_forward = &pass;
        }
        QVERIFY(longest_forward != nullptr);
        const double middle =
            view.time_coord((longest_forward->start_ns + longest_forward->end_ns) / 2);
        QVERIFY(gantt->xAxis->coordToPixel(view.time_coord(longest_forward->end_ns)) -
                    gantt->xAxis->coordToPixel(view.time_coord(longest_forward->start_ns)) >
                4);
        QVERIFY_COLOUR(image, pixel_at(view, gantt, middle, 0), palette::phase(Phase::forward));

        // The widest idle gap of the last stage (its warm-up, at least) is bubble-coloured.
        const int last = shown->stages - 1;
        std::vector<std::pair<std::int64_t, std::int64_t>> busy;
        std::int64_t window_end = 0;
        for (const auto& pass : passes) {
            window_end = std::max(window_end, pass.end_ns);
            if (pass.stage == last)
                busy.emplace_back(pass.start_ns, pass.end_ns);
        }
        std::sort(busy.begin(), busy.end());
        std::int64_t cursor = view.window_start_ns(), gap_start = 0, gap_end = 0;
        for (const auto& [start, end] : busy) {
            if (start - cursor > gap_end - gap_start) {
                gap_start = cursor;
                gap_end = start;
            }
            cursor = std::max(cursor, end);
        }
        const auto gap_pixels = [&](std::int64_t from, std::int64_t to) {
            return gantt->xAxis->coordToPixel(view.time_coord(to)) -
                   gantt->xAxis->coordToPixel(view.time_coord(from));
        };
        if (gap_pixels(gap_start, gap_end) > 4) {
            QVERIFY_COLOUR(image,
                           pixel_at(view, gantt, view.time_coord((gap_start + gap_end) / 2), last),
                           palette::bubble());
        }
        // The longest pipeline receive (a wait for the neighbour stage) is shaded over its pass.
        QVERIFY(!view.shown_waits().empty());
        const auto longest = *std::max_element(
            view.shown_waits().begin(), view.shown_waits().end(), [](const auto& a, const auto& b) {
                return a.end_ns - a.start_ns < b.end_ns - b.start_ns;
            });
        QVERIFY(gap_pixels(longest.start_ns, longest.end_ns) > 4);
        QVERIFY_COLOUR(
            image,
            pixel_at(view, gantt, view.time_coord((longest.start_ns + longest.end_ns) / 2),
                     longest.stage),
            palette::bubble());

        // The side chart: three stacked series (warm-up/cool-down, unequal, other), one bar per
        // stage; the table: one row per stage with its measured fraction.
        QCOMPARE(view.fraction_plot()->plottableCount(), 3);
        for (int i = 0; i < 3; ++i) {
            auto* bars = qobject_cast<QCPBars*>(view.fraction_plot()->plottable(i));
            QVERIFY(bars);
            QCOMPARE(bars->data()->size(), shown->stages);
        }
        const auto* model = view.stage_model();
        QCOMPARE(model->rowCount(), shown->stages);
        for (const auto& s : bubbles.stages) {
            if (s.step != step || s.dp != shown->dp || s.cp != shown->cp || s.tp != shown->tp) {
                continue;
            }
            const QModelIndex index = model->index(s.stage, BubbleStageModel::measured_fraction);
            QCOMPARE(model->data(index, BubbleStageModel::ValueRole).toDouble(),
                     s.bubble_fraction.value());
            QCOMPARE(model->data(model->index(s.stage, BubbleStageModel::rank)).toString(),
                     QString::number(s.rank.value()));
        }

        // Another step of the same pipeline.
        const int other_step = step == 0 ? 1 : 0;
        QVERIFY(view.select_pipeline(other_step, shown->dp, shown->cp, shown->tp));
        for (const auto& pass : view.shown_passes())
            QCOMPARE(pass.step, other_step);
        QVERIFY(!view.select_pipeline(999, 0, 0, 0));
    }

    void bubbleStageModelIsAValidModel() {
        BubbleStageModel model;
        QAbstractItemModelTester tester(&model,
                                        QAbstractItemModelTester::FailureReportingMode::QtTest);
        std::vector<analysis::StageBubble> stages(2);
        stages[1].stage = 1;
        stages[1].rank = 1;
        stages[1].bubble_fraction = 0.25;
        stages[1].bubble_ns = 2'000'000;
        model.set_stages(stages, 0.25);
        QCOMPARE(model.rowCount(), 2);
        QCOMPARE(model.data(model.index(1, BubbleStageModel::measured_fraction)).toString(),
                 QStringLiteral("25.0 %"));
        QCOMPARE(model.data(model.index(1, BubbleStageModel::bubble)).toString(),
                 QStringLiteral("2.000 ms"));
        // Stage 0 has no passes: no rank and no fraction, shown as "—" with no value.
        QCOMPARE(model.data(model.index(0, BubbleStageModel::rank)).toString(),
                 QStringLiteral("—"));
        QCOMPARE(model.data(model.index(0, BubbleStageModel::measured_fraction)).toString(),
                 QStringLiteral("—"));
        QVERIFY(!model
                     .data(model.index(0, BubbleStageModel::measured_fraction),
                           BubbleStageModel::ValueRole)
                     .isValid());
        model.set_stages({}, std::nullopt);
        QCOMPARE(model.rowCount(), 0);
    }

    // Two CP ranks, measured and predicted as shares of the group, each bar in its colour.
    void cpLoadViewShowsBothCpRanks() {
        CpLoadView view;
        view.set_run(fixed_);
        QVERIFY(view.message().isEmpty());
        const auto& cp_load = fixed_->analysis->cp_load;
        QCOMPARE(cp_load.cp.value(), 2);
        QCOMPARE(view.cp_ranks(), 2);
        QCOMPARE(view.predicted_bars()->data()->size(), 2);
        double measured_sum = 0, predicted_sum = 0;
        for (int i = 0; i < 2; ++i) {
            measured_sum += view.measured_bars()->data()->at(i)->value;
            predicted_sum += view.predicted_bars()->data()->at(i)->value;
        }
        QVERIFY(qFuzzyCompare(measured_sum, 1.0));
        QVERIFY(qFuzzyCompare(predicted_sum, 1.0));
        QVERIFY(view.summary().contains(
            QString::number(cp_load.mean_measured_imbalance.value(), 'f', 3)));
        QVERIFY(view.summary().contains(
            QString::number(cp_load.mean_predicted_imbalance.value(), 'f', 3)));

        // One micro-batch: the shares are that group's.
        view.select_group(0);
        const auto& group = cp_load.groups[0];
        double total = 0;
        for (const auto& r : group.ranks)
            total += static_cast<double>(r.attention_ns.value());
        for (const auto& r : group.ranks) {
            QVERIFY(qFuzzyCompare(1.0 + view.measured_bars()->data()->at(r.cp_rank)->value,
                                  1.0 + static_cast<double>(*r.attention_ns) / total));
        }
        QVERIFY(view.summary().contains(QString::number(group.measured_imbalance.value(), 'f', 3)));

        const QImage image = render(view);
        const QCustomPlot* plot = view.plot();
        for (auto [bars, colour] : {std::pair{view.measured_bars(), palette::measured()},
                                    std::pair{view.predicted_bars(), palette::predicted()}}) {
            for (int i = 0; i < 2; ++i) {
                const QPointF top = bars->dataPixelPosition(i);
                const double base = plot->yAxis->coordToPixel(0);
                QVERIFY(base - top.y() > 10);
                QVERIFY_COLOUR(image, pixel(view, plot, {top.x(), (top.y() + base) / 2}), colour);
            }
        }
    }

    void cpLoadViewSaysWhenThereIsNoCp() {
        CpLoadView view;
        view.set_run(copies_);
        QVERIFY(view.message().contains(QStringLiteral("no context parallelism")));
        render(view);
    }

    void overlapViewSaysWhenThereAreNoCopies() {
        OverlapView view;
        view.set_run(fixed_);
        QVERIFY(view.message().contains(QStringLiteral("No host↔device copies")));
        render(view);
    }

    // The chunk size that hides the copies, in words: "any" where one token's copy is faster
    // than its attention (the CPU backend: "from chunks of 1 tokens" read as a limit).
    void overlapViewSaysWhichChunksHide() {
        for (const auto& [tokens, words] :
             {std::pair{std::int64_t{1}, QStringLiteral("at any chunk size")},
              std::pair{std::int64_t{300}, QStringLiteral("in chunks of 300 tokens or more")}}) {
            auto run = std::make_shared<OpenedRun>(*copies_);
            auto analysed = std::make_shared<analysis::RunAnalysis>(*copies_->analysis);
            analysed->offload.min_hidden_chunk_tokens = tokens;
            run->analysis = analysed;
            OverlapView view;
            view.set_run(run);
            QVERIFY2(view.summary().contains(words), qPrintable(view.summary()));
        }
    }

    // The hand-built rank: 50 ns overlapped under 60 ns exposed, 10 GB/s.
    void overlapViewDrawsHiddenAndExposedCopies() {
        OverlapView view;
        view.set_run(copies_);
        QVERIFY2(view.message().isEmpty(), qPrintable(view.message()));
        QCOMPARE(view.overlapped_bars()->data()->size(), 1);
        QCOMPARE(view.overlapped_bars()->data()->at(0)->value, 50 / 1e6);
        QCOMPARE(view.exposed_bars()->data()->at(0)->value, 60 / 1e6);
        QVERIFY(view.summary().contains(QStringLiteral("10.00 GB/s")));
        QVERIFY(view.summary().contains(QStringLiteral("45.5 %")));  // 50 / 110

        const QImage image = render(view);
        const QCustomPlot* plot = view.plot();
        const double base = plot->yAxis->coordToPixel(0);
        const double overlapped_top = plot->yAxis->coordToPixel(50 / 1e6);
        const double exposed_top = plot->yAxis->coordToPixel(110 / 1e6);
        const double x = plot->xAxis->coordToPixel(0);
        QVERIFY_COLOUR(image, pixel(view, plot, {x, (base + overlapped_top) / 2}),
                       palette::category(Category::offload));
        QVERIFY_COLOUR(image, pixel(view, plot, {x, (overlapped_top + exposed_top) / 2}),
                       palette::bubble());
    }

    // Memory per rank: a bar per rank for the measured peak beside one for the prediction,
    // a gap where a figure is missing, the techniques and the prediction's parts in words.
    void memoryViewDrawsMeasuredBesidePredicted() {
        auto run = std::make_shared<OpenedRun>(*copies_);
        auto analysed = std::make_shared<analysis::RunAnalysis>(*copies_->analysis);
        constexpr double kMiB = 1024.0 * 1024.0;
        analysis::RankMemory first;
        first.stage = 0;
        first.peak_bytes = std::int64_t(3 * kMiB);
        first.predicted_bytes = 4 * kMiB;
        first.predicted_pinned_bytes = kMiB;
        first.model_state_bytes = 2 * kMiB;
        first.workspace_bytes = 1.5 * kMiB;
        first.activations_bytes = 0.5 * kMiB;
        analysis::RankMemory second;
        second.rank = second.stage = 1;
        second.peak_bytes = std::int64_t(2 * kMiB);  // no prediction for it
        analysed->memory.ranks = {first, second};
        analysed->memory.techniques = "recompute full, offloaded checkpoints";
        analysed->memory.note.clear();
        run->analysis = analysed;
        MemoryView view;
        view.set_run(run);
        QVERIFY2(view.message().isEmpty(), qPrintable(view.message()));
        QCOMPARE(view.measured_bars()->data()->size(), 2);
        QCOMPARE(view.measured_bars()->data()->at(0)->value, 3.0);
        QCOMPARE(view.predicted_bars()->data()->at(0)->value, 4.0);
        QVERIFY(std::isnan(view.predicted_bars()->data()->at(1)->value));
        QVERIFY2(view.summary().contains(QStringLiteral("recompute full, offloaded checkpoints")) &&
                     view.summary().contains(
                         QStringLiteral("Stage 0: model state 2.00 MiB, workspace 1.50 MiB, "
                                        "activations 0.50 MiB, 1.00 MiB pinned")),
                 qPrintable(view.summary()));
        const QImage image = render(view);
        const QCustomPlot* plot = view.plot();
        const double y = plot->yAxis->coordToPixel(1.0);
        const double bar = plot->xAxis->coordToPixel(0);
        const double half = std::abs(plot->xAxis->coordToPixel(0.35) - bar) / 2;
        QVERIFY_COLOUR(image, pixel(view, plot, {bar - half, y}), palette::measured());
        QVERIFY_COLOUR(image, pixel(view, plot, {bar + half, y}), palette::predicted());
    }

    void memoryViewSaysWhenThereIsNothingToShow() {
        MemoryView view;
        view.set_run(copies_);  // hand-built: no fulcrum-train peak, no prediction
        QVERIFY2(view.message().contains(QStringLiteral("No memory figures")),
                 qPrintable(view.message()));
        render(view);
    }

    // Cells carry the analysis' values; their colours follow the gradient; hover and click
    // name the cell.
    void heatmapViewDrawsTheMatrices() {
        HeatmapView view;
        view.set_run(fixed_);
        QVERIFY(view.message().isEmpty());
        const auto& imbalance = fixed_->analysis->imbalance;
        const auto& by_step = view.step_values();
        QCOMPARE(by_step.rows, imbalance.compute_by_step.rows);
        QCOMPARE(by_step.columns, imbalance.compute_by_step.columns);
        QCOMPARE(by_step.rows.size(), 4u);
        QCOMPARE(by_step.columns.size(), 3u);
        for (std::size_t i = 0; i < by_step.values.size(); ++i) {
            QCOMPARE(by_step.values[i], imbalance.compute_by_step.values[i] / 1e6);
        }
        const auto& by_microbatch = view.microbatch_values();
        QCOMPARE(by_microbatch.rows.size(), 4u);
        QCOMPARE(by_microbatch.columns, imbalance.by_microbatch[0].compute_ns.columns);

        const QImage image = render(view);
        // The hottest and the coldest cell of the rank × step map, in the gradient's colours.
        std::size_t hot = 0, cold = 0;
        for (std::size_t i = 0; i < by_step.values.size(); ++i) {
            if (by_step.values[i] > by_step.values[hot])
                hot = i;
            if (by_step.values[i] < by_step.values[cold])
                cold = i;
        }
        QVERIFY(by_step.values[hot] > by_step.values[cold]);
        const QCPColorMap* map = view.step_map();
        const std::size_t columns = by_step.columns.size();
        QColor drawn[2];
        for (int k = 0; k < 2; ++k) {
            const std::size_t cell = k == 0 ? hot : cold;
            const int row = static_cast<int>(cell / columns),
                      column = static_cast<int>(cell % columns);
            const QPoint at = view.cell_centre(view.step_plot(), row, column);
            const QColor expected =
                QColor::fromRgb(map->gradient().color(by_step.values[cell], map->dataRange()));
            QVERIFY_COLOUR(image, at, expected);
            drawn[k] = image.pixelColor(at);
            // Hover names the cell and its value.
            const QString tip = view.tooltip_at(at);
            QVERIFY2(tip.contains(QStringLiteral("rank %1").arg(by_step.rows[row])),
                     qPrintable(tip));
            QVERIFY2(tip.contains(QStringLiteral("step %1").arg(by_step.columns[column])),
                     qPrintable(tip));
            QVERIFY2(tip.contains(QString::number(by_step.values[cell], 'g', 6) + " ms"),
                     qPrintable(tip));
        }
        QVERIFY(!same_colour(drawn[0], drawn[1], 20));

        // A click on a cell jumps to its place: rank and step, or rank, step and micro-batch.
        QSignalSpy spy(&view, &HeatmapView::place_activated);
        QCustomPlot* step_plot = view.step_plot();
        QTest::mouseClick(step_plot, Qt::LeftButton, {},
                          step_plot->mapFrom(&view, view.cell_centre(step_plot, 2, 1)));
        QCOMPARE(spy.count(), 1);
        QCOMPARE(spy[0][0].value<Place>(), (Place{by_step.rows[2], by_step.columns[1], -1}));
        QCustomPlot* mb_plot = view.microbatch_plot();
        QTest::mouseClick(mb_plot, Qt::LeftButton, {},
                          mb_plot->mapFrom(&view, view.cell_centre(mb_plot, 3, 2)));
        QCOMPARE(spy.count(), 2);
        QCOMPARE(spy[1][0].value<Place>(),
                 (Place{by_microbatch.rows[3], imbalance.by_microbatch[0].step,
                        by_microbatch.columns[2]}));
        // Off the cells: nothing.
        QTest::mouseClick(mb_plot, Qt::LeftButton, {}, QPoint(2, 2));
        QCOMPARE(spy.count(), 2);
        QVERIFY(view.tooltip_at(QPoint(1, 1)).isEmpty());
    }

    void heatmapViewSwitchesMatrixAndStep() {
        HeatmapView view;
        view.set_run(fixed_);
        const auto& imbalance = fixed_->analysis->imbalance;
        QVERIFY(imbalance.by_microbatch.size() >= 2);
        view.set_step(imbalance.by_microbatch[1].step);
        const auto& second = imbalance.by_microbatch[1];
        QCOMPARE(view.microbatch_values().columns, second.compute_ns.columns);
        QCOMPARE(view.microbatch_values().values[0], second.compute_ns.values[0] / 1e6);

        view.set_quantity(HeatmapView::Quantity::ratio);
        for (std::size_t i = 0; i < view.step_values().values.size(); ++i) {
            const double p = imbalance.predicted_by_step.values[i];
            if (std::isnan(p) || p == 0)
                continue;
            QCOMPARE(view.step_values().values[i], imbalance.compute_by_step.values[i] / p);
        }
        view.set_quantity(HeatmapView::Quantity::predicted);
        const double scale = imbalance.predicted_is_time ? 1e6 : 1.0;
        QCOMPARE(view.step_values().values[0], imbalance.predicted_by_step.values[0] / scale);
        render(view);
    }

    void compareViewShowsBothRuns() {
        CompareView view;
        view.set_runs({fixed_, wlb_});
        QVERIFY(view.message().isEmpty());
        render(view);
        QCustomPlot* steps = view.step_time_plot();
        QCOMPARE(steps->legend->itemCount(), 2);
        QCOMPARE(steps->plottableCount(), 2);
        for (int i = 0; i < 2; ++i) {
            auto* box = qobject_cast<QCPStatisticalBox*>(steps->plottable(i));
            QVERIFY(box);
            QCOMPARE(box->data()->size(), 1);
            const auto data = box->data()->at(0);
            QVERIFY(data->minimum > 0);
            QVERIFY(data->minimum <= data->median && data->median <= data->maximum);
            QCOMPARE(box->brush().color().rgb(), palette::run(i).rgb());
        }
        for (int i = 0; i < 2; ++i) {
            auto* item = qobject_cast<QCPPlottableLegendItem*>(steps->legend->item(i));
            QVERIFY(item);
            QCOMPARE(item->plottable()->name(), (i == 0 ? fixed_ : wlb_)->title);
        }
        QCOMPARE(view.figures_plot()->plottableCount(), 2);
        QVERIFY2(view.difference_message().isEmpty(), qPrintable(view.difference_message()));
        QCOMPARE(view.difference_plot()->plottableCount(), 1);
        QCOMPARE(view.table()->rowCount(), 2);
        // Predicted against measured: points for both runs, or a message saying why not.
        if (view.predicted_message().isEmpty()) {
            QCOMPARE(view.predicted_plot()->graphCount(), 2);
            QVERIFY(view.predicted_plot()->graph(0)->data()->size() > 0);
        }
    }

    // The fixture's runs trained 2 steps each, different documents: tokens and tokens/s are
    // shown, the ratio is not, and the notes say why. Two simulated epochs of the same
    // documents get the ratio, and the notes say what they share.
    void compareViewTokensPerSecond() {
        CompareView view;
        view.set_runs({fixed_, wlb_});
        const QTableWidget* table = view.table();
        const auto cell = [&](int row, const QString& header) {
            for (int c = 0; c < table->columnCount(); ++c) {
                if (table->horizontalHeaderItem(c)->text() == header) {
                    return table->item(row, c)->text();
                }
            }
            return QStringLiteral("no column %1").arg(header);
        };
        QVERIFY(cell(0, QStringLiteral("Tokens")).toLongLong() > 0);
        QVERIFY(cell(1, QStringLiteral("Tokens/s")).toDouble() > 0);
        QCOMPARE(cell(1, QStringLiteral("Tokens/s vs first")), QStringLiteral("—"));
        QVERIFY2(view.notes().contains(QStringLiteral("trained different documents")),
                 qPrintable(view.notes()));

        QTemporaryDir work;
        QVector<RunPtr> runs;
        std::vector<double> rates;
        for (auto balancer : {balance::Balancer::fixed, balance::Balancer::wlb}) {
            sim::SimulationConfig config;
            config.balancer = balancer;
            config.layout.grid.pp = 2;
            config.epochs = 1;
            config.documents = 100;
            config.lengths = "long-tail:context=256,median=32";
            sim::SimulationOutput output;
            output.path =
                work.filePath(balance::balancer_name(balancer)).toStdString() + ".fulcrum";
            auto result = sim::simulate_to_file(config, output);
            QVERIFY(result.ok());
            rates.push_back(result->tokens_per_second);
            auto run = open_run(QString::fromStdString(output.path));
            QVERIFY(run.ok());
            runs.push_back(*run);
        }
        view.set_runs(runs);
        QVERIFY2(view.notes().contains(QStringLiteral("the same 100 documents (1 epoch)")),
                 qPrintable(view.notes()));
        QCOMPARE(cell(0, QStringLiteral("Tokens/s vs first")), QStringLiteral("1.00×"));
        QCOMPARE(cell(1, QStringLiteral("Tokens/s vs first")),
                 QStringLiteral("%1×").arg(rates[1] / rates[0], 0, 'f', 2));
        QCOMPARE(cell(0, QStringLiteral("Tokens")), cell(1, QStringLiteral("Tokens")));
        render(view);
    }

    // The bubble chart outlines the shown passes that the step's critical path runs through:
    // exactly the analysis's critical passes of that pipeline and step.
    void bubbleViewOutlinesTheCriticalPath() {
        BubbleView view;
        view.set_run(fixed_);
        render(view);
        const std::set<PassKey> keys = critical_pass_keys(*fixed_->analysis);
        std::set<PassKey> expected;
        for (const auto& pass : view.shown_passes()) {
            const PassKey key{pass.rank, pass.step, pass.microbatch, pass.phase};
            if (keys.count(key) > 0)
                expected.insert(key);
        }
        QVERIFY(!expected.empty());
        const std::set<PassKey> shown(view.shown_critical().begin(), view.shown_critical().end());
        QCOMPARE(shown, expected);
        QCOMPARE(view.shown_critical().size(), expected.size());
    }

    // The Kernels tab's models hold the analysis's rows: the copying GPU run has kernels; the
    // CPU capture has none (and says so), but has its collectives and critical paths.
    void kernelsViewHoldsTheAnalysis() {
        KernelsView view;
        view.set_run(copies_);
        render(view);
        QVERIFY(view.message().isEmpty());
        QVERIFY(view.device_note().isEmpty());
        const auto& kernels = copies_->analysis->kernels;
        HtaTableModel* by_type = view.model(HtaTableModel::Table::kernel_time);
        QCOMPARE(by_type->rowCount(), int(kernels.time_by_type.size()));
        QCOMPARE(by_type->data(by_type->index(0, 1), HtaTableModel::ValueRole).toLongLong(),
                 kernels.time_by_type[0].kernel_span_ns);
        HtaTableModel* idle = view.model(HtaTableModel::Table::idle);
        QCOMPARE(idle->rowCount(), int(kernels.idle.size()));
        QCOMPARE(view.model(HtaTableModel::Table::top_kernels)->rowCount(),
                 int(kernels.top_kernels.size()));

        view.set_run(fixed_);
        QVERIFY(view.device_note().startsWith(QStringLiteral("No device activity")));
        QCOMPARE(view.model(HtaTableModel::Table::kernel_time)->rowCount(), 0);
        const auto& a = *fixed_->analysis;
        HtaTableModel* communication = view.model(HtaTableModel::Table::communication);
        QCOMPARE(communication->rowCount(), int(a.communication.size()));
        for (int row = 0; row < communication->rowCount(); ++row) {
            QCOMPARE(communication->data(communication->index(row, 3), HtaTableModel::ValueRole)
                         .toLongLong(),
                     a.communication[std::size_t(row)].calls);
        }
        // Each name's groups together: as many rows as names (by group size), the calls of
        // all its groups.
        HtaTableModel* totals = view.model(HtaTableModel::Table::communication_totals);
        const std::vector<analysis::CollectiveTotal> summed =
            analysis::total_collectives(a.communication);
        QCOMPARE(totals->rowCount(), int(summed.size()));
        QVERIFY(totals->rowCount() > 0);
        std::int64_t calls = 0;
        for (int row = 0; row < totals->rowCount(); ++row) {
            calls += totals->data(totals->index(row, 4), HtaTableModel::ValueRole).toLongLong();
        }
        std::int64_t group_calls = 0;
        for (const analysis::CollectiveSummary& c : a.communication) {
            group_calls += c.calls;
        }
        QCOMPARE(calls, group_calls);
        HtaTableModel* paths = view.model(HtaTableModel::Table::critical_path);
        QCOMPARE(paths->rowCount(), int(a.critical_paths.size()));
        QVERIFY(paths->rowCount() > 0);
        QCOMPARE(paths->data(paths->index(0, 1), HtaTableModel::ValueRole).toLongLong(),
                 a.critical_paths[0].end_ns - a.critical_paths[0].start_ns);
        for (auto table :
             {HtaTableModel::Table::kernel_time, HtaTableModel::Table::top_kernels,
              HtaTableModel::Table::idle, HtaTableModel::Table::launches,
              HtaTableModel::Table::communication_totals, HtaTableModel::Table::communication,
              HtaTableModel::Table::critical_path}) {
            QAbstractItemModelTester tester(view.model(table),
                                            QAbstractItemModelTester::FailureReportingMode::QtTest);
        }
    }

    // Compare shows the op-level diff of the second run against the reference.
    void compareViewShowsTheOpDiff() {
        CompareView view;
        view.set_runs({fixed_, wlb_});
        const auto& diff = view.op_diff();
        QVERIFY(!diff.rows.empty());
        // Taken from the analyses' tallies, which count what the held events count.
        const analysis::RunDiff held = analysis::diff_runs({fixed_->trace.get(), std::nullopt},
                                                           {wlb_->trace.get(), std::nullopt});
        QCOMPARE(diff.rows.size(), held.rows.size());
        for (std::size_t i = 0; i < held.rows.size(); ++i) {
            QCOMPARE(diff.rows[i].name, held.rows[i].name);
            QCOMPARE(diff.rows[i].count_b, held.rows[i].count_b);
            QCOMPARE(diff.rows[i].total_ns_a, held.rows[i].total_ns_a);
        }
        HtaTableModel* model = view.diff_model();
        QAbstractItemModelTester tester(model,
                                        QAbstractItemModelTester::FailureReportingMode::QtTest);
        QCOMPARE(model->rowCount(), int(diff.rows.size()));
        QCOMPARE(model->data(model->index(0, 0)).toString(),
                 QString::fromStdString(diff.rows[0].name));
        QCOMPARE(model->data(model->index(0, 7), HtaTableModel::ValueRole).toLongLong(),
                 std::llround(diff.rows[0].delta_ns()));
        QVERIFY(view.diff_title().contains(wlb_->title));
        view.set_runs({fixed_});
        QCOMPARE(model->rowCount(), 0);
    }

    void compareViewSaysWhenGridsDiffer() {
        CompareView view;
        view.set_runs({fixed_, copies_});
        QVERIFY(view.message().isEmpty());
        QVERIFY2(view.difference_message().contains(QStringLiteral("grids differ")),
                 qPrintable(view.difference_message()));
        QCOMPARE(view.step_time_plot()->legend->itemCount(), 2);
        render(view);
    }

    // A run without coordinates or workload (an import): no pipeline and no CP groups, said in
    // place of the charts; compute measured, predicted work not, so the heatmaps show "—" for
    // the predicted imbalance and cannot be switched to predicted work; Compare's table says
    // "—" for every figure the run lacks and draws no bar for it.
    void viewsShowDashesForUnknownFigures() {
        const RunPtr run = unannotated_grid_run(2);
        BubbleView bubble;
        bubble.set_run(run);
        QVERIFY2(bubble.message().contains(QStringLiteral("grid is unknown")),
                 qPrintable(bubble.message()));
        CpLoadView cp_load;
        cp_load.set_run(run);
        QVERIFY2(cp_load.message().contains(QStringLiteral("grid is unknown")),
                 qPrintable(cp_load.message()));

        HeatmapView heatmap;
        heatmap.set_run(run);
        QVERIFY(heatmap.message().isEmpty());
        render(heatmap);
        // compute 300 vs 600: max/mean 600/450
        QVERIFY2(heatmap.summary().contains(QStringLiteral("compute 1.333, predicted —")),
                 qPrintable(heatmap.summary()));
        QVERIFY(heatmap.summary().contains(QStringLiteral("no workload table")));
        QComboBox* quantity = nullptr;
        for (auto* box : heatmap.findChildren<QComboBox*>()) {
            if (box->count() == 3 && box->itemText(0) == QStringLiteral("measured compute")) {
                quantity = box;
            }
        }
        QVERIFY(quantity);
        auto* items = qobject_cast<QStandardItemModel*>(quantity->model());
        QVERIFY(items);
        QVERIFY(items->item(0)->isEnabled());
        QVERIFY(!items->item(1)->isEnabled());  // predicted work
        QVERIFY(!items->item(2)->isEnabled());  // measured / predicted
        // The same view on a run with a prediction offers them again.
        heatmap.set_run(fixed_);
        QVERIFY(items->item(1)->isEnabled());

        CompareView compare;
        compare.set_runs({run});
        render(compare);
        const QTableWidget* table = compare.table();
        QCOMPARE(table->rowCount(), 1);
        const auto cell = [&](const QString& header) {
            for (int c = 0; c < table->columnCount(); ++c) {
                if (table->horizontalHeaderItem(c)->text() == header)
                    return table->item(0, c)->text();
            }
            return QStringLiteral("no column %1").arg(header);
        };
        QCOMPARE(cell(QStringLiteral("Balancer")), QStringLiteral("—"));
        QCOMPARE(cell(QStringLiteral("Bubble (measured)")), QStringLiteral("—"));
        QCOMPARE(cell(QStringLiteral("Bubble (theory)")), QStringLiteral("—"));
        QCOMPARE(cell(QStringLiteral("Compute imbalance")), QStringLiteral("1.333"));
        QCOMPARE(cell(QStringLiteral("Predicted imbalance")), QStringLiteral("—"));
        QCOMPARE(cell(QStringLiteral("CP imbalance measured / predicted")),
                 QStringLiteral("— (grid unknown)"));
        // One bar: the compute imbalance (key 2); the four unknown figures have none.
        auto* bars = qobject_cast<QCPBars*>(compare.figures_plot()->plottable(0));
        QVERIFY(bars);
        QCOMPARE(bars->data()->size(), 1);
        QCOMPARE(bars->data()->at(0)->key, 2.0);
    }

    // One rank: its compute is measured, but max/mean over one rank says nothing.
    void heatmapHasNoImbalanceOverOneRank() {
        HeatmapView heatmap;
        heatmap.set_run(unannotated_grid_run(1));
        QVERIFY(heatmap.message().isEmpty());
        QVERIFY2(heatmap.summary().contains(QStringLiteral("compute —, predicted —")),
                 qPrintable(heatmap.summary()));
        QVERIFY(heatmap.summary().contains(QStringLiteral("two ranks or more")));
        QCOMPARE(heatmap.step_values().rows.size(), std::size_t{1});
        render(heatmap);
    }

    // No run, a run whose analysis failed, a run without passes: a message, no crash.
    void viewsShowMessagesForMissingData_data() {
        QTest::addColumn<int>("which");
        QTest::newRow("no run") << 0;
        QTest::newRow("analysis failed") << 1;
        QTest::newRow("no passes") << 2;
    }
    void viewsShowMessagesForMissingData() {
        QFETCH(int, which);
        const RunPtr run = which == 0 ? nullptr : which == 1 ? failed_run() : copies_;
        BubbleView bubble;
        CpLoadView cp_load;
        OverlapView overlap;
        HeatmapView heatmap;
        CompareView compare;
        bubble.set_run(run);
        cp_load.set_run(run);
        overlap.set_run(run);
        heatmap.set_run(run);
        compare.set_runs({run});
        for (QWidget* w :
             std::initializer_list<QWidget*>{&bubble, &cp_load, &overlap, &heatmap, &compare}) {
            render(*w);
        }
        QVERIFY(!bubble.message().isEmpty());
        QVERIFY(!cp_load.message().isEmpty());
        QVERIFY(!heatmap.message().isEmpty());
        if (which == 1) {
            for (const QString& m : {bubble.message(), cp_load.message(), overlap.message(),
                                     heatmap.message(), compare.message()}) {
                QVERIFY2(m.contains(QStringLiteral("the workload table is damaged")),
                         qPrintable(m));
            }
        }
        if (which == 0) {
            QVERIFY(!overlap.message().isEmpty());
            QVERIFY(!compare.message().isEmpty());
        }
        // Back to a real run after an empty one.
        heatmap.set_run(fixed_);
        QVERIFY(heatmap.message().isEmpty());
        bubble.set_run(fixed_);
        QVERIFY(bubble.message().isEmpty());
    }
};

QTEST_MAIN(ChartsTest)
#include "test_charts.moc"
