// The views on real GPU captures (tests/data/README.md: fulcrum-train's CUDA backend on an
// NVIDIA H200): the offload-overlap chart of the pp2 × cp2 run with Q/K/V offload, the Kernels
// tab of the 125M model's profile, and the timeline with its CUDA stream lanes, kernels and
// launch flows. What each shows is checked against the analysis and the events it came from;
// the charts are rendered offscreen and checked at pixels taken from the plots' own axes.
#include <qcustomplot.h>

#include <QAbstractItemModelTester>
#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include "tests/views/pixels.h"
#include "views/charts/chart_common.h"
#include "views/charts/hta_table_model.h"
#include "views/charts/kernels_view.h"
#include "views/charts/overlap_view.h"
#include "views/common/palette.h"
#include "views/timeline/lane_tree_model.h"
#include "views/timeline/timeline_canvas.h"
#include "views/timeline/timeline_view.h"

using namespace fulcrum;
using namespace fulcrum::views;
using namespace fulcrum::views::timeline;

namespace {

QImage render(QWidget& view) {
    view.resize(1200, 800);
    view.show();
    if (!QTest::qWaitForWindowExposed(&view)) {
        qWarning("window not exposed");
    }
    QCoreApplication::processEvents();
    for (auto* plot : view.findChildren<QCustomPlot*>()) {
        plot->replot();
    }
    return view.grab().toImage().convertToFormat(QImage::Format_RGB32);
}

bool same_colour(QColor a, QColor b, int tolerance = 6) {
    return std::abs(a.red() - b.red()) <= tolerance &&
           std::abs(a.green() - b.green()) <= tolerance &&
           std::abs(a.blue() - b.blue()) <= tolerance;
}

QString colour_at(const QImage& image, QPoint point, QColor expected) {
    const QColor got = image.pixelColor(point);
    return same_colour(got, expected) ? QString()
                                      : QStringLiteral("at (%1,%2): %3, want %4")
                                            .arg(point.x())
                                            .arg(point.y())
                                            .arg(got.name(), expected.name());
}

}  // namespace

class GpuFixtureViewsTest : public QObject {
    Q_OBJECT

    QTemporaryDir copies_;
    RunPtr offload_, profile_;

    // The fixtures are opened from copies: opening a run may add timeline summaries beside it.
    RunPtr open_fixture(const char* name) {
        const QString target = copies_.filePath(name);
        if (!QFile::copy(QStringLiteral(FULCRUM_SOURCE_DIR "/tests/data/") + name, target)) {
            qFatal("cannot copy %s", name);
        }
        auto run = open_run(target);
        if (!run) {
            qFatal("cannot open %s: %s", name, run.error().message.c_str());
        }
        return *run;
    }

private slots:
    void initTestCase() {
        QVERIFY(copies_.isValid());
        offload_ = open_fixture("gpu-pp2cp2-offload-fixed.fulcrum");
        profile_ = open_fixture("gpu-profile-125m.fulcrum");
        for (const RunPtr& run : {offload_, profile_}) {
            QVERIFY(!run->paged());
            QVERIFY2(run->analysis != nullptr, qPrintable(run->analysis_error));
        }
    }

    // One stacked bar per rank: what hid behind compute under what was exposed, the ranks'
    // own figures, and the totals and bandwidth in the summary.
    void overlapViewShowsEachRanksCopies() {
        OverlapView view;
        view.set_run(offload_);
        QVERIFY2(view.message().isEmpty(), qPrintable(view.message()));
        const auto& offload = offload_->analysis->offload;
        QCOMPARE(offload.ranks.size(), std::size_t{4});
        QCOMPARE(view.overlapped_bars()->data()->size(), 4);
        QCOMPARE(view.exposed_bars()->data()->size(), 4);
        for (int i = 0; i < 4; ++i) {
            const auto& rank = offload.ranks[std::size_t(i)];
            QCOMPARE(rank.rank, i);
            QCOMPARE(view.overlapped_bars()->data()->at(i)->key, double(i));
            QCOMPARE(view.overlapped_bars()->data()->at(i)->value,
                     double(rank.overlapped_ns) / 1e6);
            QCOMPARE(view.exposed_bars()->data()->at(i)->value, double(rank.exposed_ns) / 1e6);
            // Stacked, the two reach the rank's copy time.
            QCOMPARE(view.overlapped_bars()->data()->at(i)->value +
                         view.exposed_bars()->data()->at(i)->value,
                     double(rank.copy_ns) / 1e6);
        }
        const QString summary = view.summary();
        QVERIFY2(summary.contains(charts::format_ms(double(offload.copy_ns))), qPrintable(summary));
        QVERIFY(summary.contains(charts::format_ms(double(offload.exposed_ns))));
        QVERIFY(summary.contains(
            charts::format_percent(double(offload.overlapped_ns) / double(offload.copy_ns))));
        QVERIFY(
            summary.contains(QStringLiteral("%1 GB/s").arg(*offload.bandwidth_gb_s, 0, 'f', 2)));

        // Rank 0's bar: its lower part in the offload colour, the upper in the bubble's.
        const QImage image = render(view);
        const QCustomPlot* plot = view.plot();
        const auto& rank = offload.ranks[0];
        const double x = plot->xAxis->coordToPixel(0);
        const double base = plot->yAxis->coordToPixel(0);
        const double middle = plot->yAxis->coordToPixel(double(rank.overlapped_ns) / 1e6);
        const double top = plot->yAxis->coordToPixel(double(rank.copy_ns) / 1e6);
        QVERIFY2(base - middle > 4 && middle - top > 4, "both parts are visible");
        const QString hidden =
            colour_at(image, plot->mapTo(&view, QPointF(x, (base + middle) / 2).toPoint()),
                      palette::category(Category::offload));
        QVERIFY2(hidden.isEmpty(), qPrintable(hidden));
        const QString exposed = colour_at(
            image, plot->mapTo(&view, QPointF(x, (middle + top) / 2).toPoint()), palette::bubble());
        QVERIFY2(exposed.isEmpty(), qPrintable(exposed));
    }

    // The 125M profile's copies (weights in, losses out) all run on the compute stream, so
    // nothing hides: one bar, wholly exposed.
    void overlapViewOnTheProfile() {
        OverlapView view;
        view.set_run(profile_);
        // Its copies are pageable (weights up, losses down): no offload to show, and the view
        // says so instead of drawing them as exposed offload.
        QVERIFY(profile_->analysis->offload.ranks.empty());
        QVERIFY(profile_->analysis->offload.pageable_copies > 0);
        QVERIFY(view.message().contains("pageable"));
        QVERIFY(view.exposed_bars() == nullptr);
    }

    // The Kernels tab holds the analysis's rows: the attention kernels first in the top
    // kernels, each figure the analysis's, and every model a valid one.
    void kernelsViewShowsTheProfile() {
        KernelsView view;
        view.set_run(profile_);
        render(view);
        QVERIFY(view.message().isEmpty());
        QVERIFY(view.device_note().isEmpty());
        const auto& kernels = profile_->analysis->kernels;
        const auto value = [](HtaTableModel* model, int row, int column) {
            return model->data(model->index(row, column), HtaTableModel::ValueRole);
        };
        HtaTableModel* top = view.model(HtaTableModel::Table::top_kernels);
        QCOMPARE(top->rowCount(), int(kernels.top_kernels.size()));
        QVERIFY(top->data(top->index(0, 0)).toString().contains("attention_backward_dkdv_kernel"));
        QVERIFY(top->data(top->index(1, 0)).toString().contains("attention_backward_dq_kernel"));
        QVERIFY(top->data(top->index(2, 0)).toString().contains("attention_forward_kernel"));
        for (int row = 0; row < top->rowCount(); ++row) {
            const auto& stats = kernels.top_kernels[std::size_t(row)];
            QCOMPARE(top->data(top->index(row, 0)).toString(), QString::fromStdString(stats.name));
            QCOMPARE(value(top, row, 2).toLongLong(), stats.count);
            QCOMPARE(value(top, row, 3).toLongLong(), stats.total_ns);
            QCOMPARE(value(top, row, 5).toLongLong(), stats.min_ns);
            QCOMPARE(value(top, row, 6).toLongLong(), stats.max_ns);
        }
        HtaTableModel* by_type = view.model(HtaTableModel::Table::kernel_time);
        QCOMPARE(by_type->rowCount(), 1);
        QCOMPARE(value(by_type, 0, 1).toLongLong(), kernels.time_by_type[0].kernel_span_ns);
        HtaTableModel* idle = view.model(HtaTableModel::Table::idle);
        QCOMPARE(idle->rowCount(), int(kernels.idle.size()));
        QStringList streams;
        for (int row = 0; row < idle->rowCount(); ++row) {
            streams << idle->data(idle->index(row, 1)).toString();
        }
        QVERIFY2(streams.contains(QStringLiteral("compute")), qPrintable(streams.join(", ")));
        HtaTableModel* paths = view.model(HtaTableModel::Table::critical_path);
        QCOMPARE(paths->rowCount(), int(profile_->analysis->critical_paths.size()));
        for (auto table :
             {HtaTableModel::Table::kernel_time, HtaTableModel::Table::top_kernels,
              HtaTableModel::Table::idle, HtaTableModel::Table::launches,
              HtaTableModel::Table::communication, HtaTableModel::Table::critical_path}) {
            QAbstractItemModelTester tester(view.model(table),
                                            QAbstractItemModelTester::FailureReportingMode::QtTest);
        }
        // The pp2 × cp2 run: one kernel-time row per rank.
        view.set_run(offload_);
        QVERIFY(view.device_note().isEmpty());
        QCOMPARE(view.model(HtaTableModel::Table::kernel_time)->rowCount(), 4);
    }

    // The timeline: a row for every lane, the CUDA streams among them under their names, the
    // launch flows from an API call on the host thread to its kernel on a stream, and a long
    // attention kernel drawn in its colour where the canvas maps it.
    void timelineShowsStreamsKernelsAndLaunches() {
        TimelineView view;
        view.resize(1400, 800);
        view.set_run(offload_);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        const Layout& layout = *view.layout();
        const auto& trace = *offload_->trace;
        std::size_t lanes = 0;
        for (const auto& rank : trace.ranks) {
            lanes += rank.lanes.size();
        }
        QCOMPARE(layout.rows.size(), lanes);
        std::map<std::int32_t, QStringList> streams;
        for (const LaneRow& row : layout.rows) {
            if (row.lane->info.kind == LaneKind::gpu_stream) {
                streams[row.rank] << QString::fromStdString(row.lane->info.name);
            }
        }
        QCOMPARE(streams.size(), std::size_t{4});
        for (const auto& [rank, names] : streams) {
            for (const char* name : {"compute", "offload", "prefetch"}) {
                QVERIFY2(names.contains(name), qPrintable(names.join(", ")));
            }
        }

        // Launch flows: an API call on the host thread and the device work it started, one
        // rank, one correlation id.
        QVERIFY(!layout.flows.empty());
        for (const Flow& flow : layout.flows) {
            const LaneRow& host = layout.rows[flow.host_row];
            const LaneRow& device = layout.rows[flow.device_row];
            QCOMPARE(host.rank, device.rank);
            QCOMPARE(host.lane->info.kind, LaneKind::host_thread);
            QCOMPARE(device.lane->info.kind, LaneKind::gpu_stream);
            const Event& call = host.lane->events[flow.host_event];
            const Event& work = device.lane->events[flow.device_event];
            QCOMPARE(call.kind, EventKind::api);
            QCOMPARE(call.correlation, work.correlation);
            QCOMPARE(flow.kernel_ns, work.start_ns);
        }

        // Rank 0's longest attention kernel, zoomed to a third of the view.
        std::optional<EventRef> widest;
        std::int64_t longest = -1;
        for (std::uint32_t r = 0; r < layout.rows.size(); ++r) {
            if (layout.rows[r].rank != 0 || layout.rows[r].lane->info.name != "compute") {
                continue;
            }
            const auto& events = layout.rows[r].lane->events;
            for (std::uint32_t i = 0; i < events.size(); ++i) {
                if (events[i].kind == EventKind::kernel &&
                    trace.name(events[i].name).find("attention") != std::string_view::npos &&
                    events[i].duration_ns() > longest) {
                    longest = events[i].duration_ns();
                    widest = EventRef{r, i};
                }
            }
        }
        QVERIFY(widest.has_value());
        const Event& kernel = layout.rows[widest->row].lane->events[widest->event];
        view.zoom_to(kernel.start_ns - kernel.duration_ns(), kernel.end_ns + kernel.duration_ns());
        QCoreApplication::processEvents();
        TimelineCanvas* canvas = view.canvas();
        const QRect box = canvas->event_rect(*widest).toAlignedRect().adjusted(1, 1, -2, -1);
        QVERIFY2(box.width() > 100, qPrintable(QString::number(box.width())));
        QVERIFY(canvas->rect().contains(box));
        const QImage image = canvas->grab().toImage().convertToFormat(QImage::Format_RGB32);
        const QColor colour = canvas->event_colour(kernel);
        const int coloured = count_colour(image, box, colour);
        QVERIFY2(
            coloured > box.width() * box.height() / 2,
            qPrintable(QStringLiteral("%1 of %2").arg(coloured).arg(box.width() * box.height())));
        QCOMPARE(canvas->event_at_point(QPointF(box.center())), widest);
    }

    // Grouped by pipeline stage, the lane tree holds two stages of two ranks; every rank's
    // lanes are its rows.
    void laneTreeGroupsTheGrid() {
        const Layout layout = build_layout(*offload_->trace);
        LaneTreeModel model;
        QAbstractItemModelTester tester(&model,
                                        QAbstractItemModelTester::FailureReportingMode::QtTest);
        model.set_run(offload_->trace.get(), &layout);
        model.set_grouping(Grouping::pp);
        QCOMPARE(model.rowCount(), 2);
        for (int stage = 0; stage < 2; ++stage) {
            const QModelIndex node = model.index(stage, 0);
            QCOMPARE(model.rowCount(node), 2);
            for (int r = 0; r < 2; ++r) {
                QCOMPARE(model.rowCount(model.index(r, 0, node)), 6);  // main and five streams
            }
        }
    }
};

QTEST_MAIN(GpuFixtureViewsTest)
#include "test_views_gpu_fixtures.moc"
