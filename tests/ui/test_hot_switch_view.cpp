// The Hot switch tab and the timeline's switch marks on a simulated hot-switched run (HotSPa's
// buckets under their own layouts, core/sim/hot_switch_play.h): the breakdown table has a row
// per bucket with the simulation's tokens, then 'others' (the switching) and the rest; the
// matrix has each switch the simulation made, layout i → j, with its mean time and bytes; the
// timeline shades every switch with its layouts and bytes as the tooltip and has each bucket's
// passes; the main window shows the tab for the hot-switched run only.
#include <QSignalSpy>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTest>
#include <cmath>

#include "app/ui/main_window.h"
#include "core/sim/simulator.h"
#include "tests/support/hot_switch_run.h"
#include "views/charts/hot_switch_view.h"
#include "views/timeline/timeline_view.h"

using namespace fulcrum;
using Table = views::HotSwitchModel::Table;

namespace {

constexpr int kLoadMs = 60000;

}  // namespace

class HotSwitchViewTest : public QObject {
    Q_OBJECT

    QTemporaryDir dir_;
    QString hot_path_, static_path_;
    sim::SimulationResult hot_result_;
    views::RunPtr hot_, static_;

private slots:
    void initTestCase() {
        QVERIFY(dir_.isValid());
        sim::SimulationConfig config = test::hot_switch_workload();
        static_path_ = dir_.filePath("static.fulcrum");
        auto played = test::simulate_run(config, static_path_.toStdString());
        QVERIFY2(played.ok(), played.ok() ? "" : played.error().message.c_str());
        auto spec = parallel::parse_hot_switch_spec(test::kHotSwitchSpec, {.world = 4});
        QVERIFY(spec.ok());
        config.hot_switch = *spec;
        hot_path_ = dir_.filePath("hot.fulcrum");
        auto hot = test::simulate_run(config, hot_path_.toStdString());
        QVERIFY2(hot.ok(), hot.ok() ? "" : hot.error().message.c_str());
        hot_result_ = *hot;
        auto opened = views::open_run(hot_path_);
        QVERIFY2(opened.ok(), opened.ok() ? "" : opened.error().message.c_str());
        hot_ = *opened;
        auto plain = views::open_run(static_path_);
        QVERIFY(plain.ok());
        static_ = *plain;
    }

    // A row per bucket (its bounds, layout, and the simulation's documents and tokens), then
    // 'others' (switching) and the rest; the shares add up to the steps' time.
    void breakdownRowsAreTheBuckets() {
        views::HotSwitchView view;
        view.set_run(hot_);
        QVERIFY(view.message().isEmpty());
        QVERIFY(view.summary().contains(test::kHotSwitchSpec));
        const views::HotSwitchModel* model = view.model(Table::breakdown);
        QCOMPARE(model->rowCount(), 5);
        QCOMPARE(model->columnCount(), 7);
        const QStringList bounds = {"0-1024", "1024-2048", "2048-"};
        const QStringList layouts = {"dp4", "dp2,tp2", "tp4"};
        double shares = 0;
        for (int b = 0; b < 3; ++b) {
            QCOMPARE(model->index(b, 0).data().toString(), bounds[b]);
            QCOMPARE(model->index(b, 1).data().toString(), layouts[b]);
            const sim::SimulatedBucket& simulated = hot_result_.buckets[std::size_t(b)];
            QCOMPARE(model->index(b, 2).data(views::HotSwitchModel::ValueRole).toLongLong(),
                     simulated.documents);
            QCOMPARE(model->index(b, 3).data(views::HotSwitchModel::ValueRole).toLongLong(),
                     simulated.tokens);
            // The bucket's time as the simulation summed it (whole ns per segment).
            const double ns = model->index(b, 5).data(views::HotSwitchModel::ValueRole).toDouble();
            QVERIFY2(std::abs(ns - simulated.ns) <= 3, qPrintable(QString::number(ns)));
            shares += model->index(b, 6).data(views::HotSwitchModel::ValueRole).toDouble();
        }
        QCOMPARE(model->index(3, 0).data().toString(), QString("others (switching)"));
        double switching = 0;
        for (const sim::SimulatedSwitch& s : hot_result_.switches) {
            switching += s.ns;
        }
        QVERIFY(switching > 0);
        QCOMPARE(model->index(3, 5).data(views::HotSwitchModel::ValueRole).toDouble(), switching);
        QVERIFY(model->index(3, 2).data().toString().isEmpty());  // no documents of its own
        QVERIFY(model->index(4, 0).data().toString().startsWith("rest"));
        shares += model->index(3, 6).data(views::HotSwitchModel::ValueRole).toDouble() +
                  model->index(4, 6).data(views::HotSwitchModel::ValueRole).toDouble();
        QVERIFY2(std::abs(shares - 1.0) < 1e-6, qPrintable(QString::number(shares)));
    }

    // Rows and columns are the layouts in bucket order; each switch the simulation made is its
    // cell with the mean time and bytes per switch, every other off-diagonal cell "—".
    void matrixHasEachSwitch() {
        views::HotSwitchView view;
        view.set_run(hot_);
        const views::HotSwitchModel* model = view.model(Table::matrix);
        QCOMPARE(model->rowCount(), 3);
        QCOMPARE(model->columnCount(), 3);
        const QStringList layouts = {"dp4", "dp2,tp2", "tp4"};
        for (int i = 0; i < 3; ++i) {
            QCOMPARE(model->headerData(i, Qt::Horizontal).toString(), layouts[i]);
            QCOMPARE(model->headerData(i, Qt::Vertical).toString(), layouts[i]);
        }
        int cells = 0;
        for (int i = 0; i < 3; ++i) {
            for (int j = 0; j < 3; ++j) {
                const QModelIndex cell = model->index(i, j);
                const sim::SimulatedSwitch* made = nullptr;
                for (const sim::SimulatedSwitch& s : hot_result_.switches) {
                    if (QString::fromStdString(parallel::layout_string(s.from)) == layouts[i] &&
                        QString::fromStdString(parallel::layout_string(s.to)) == layouts[j]) {
                        made = &s;
                    }
                }
                if (made == nullptr) {
                    QCOMPARE(cell.data().toString(), i == j ? QString() : QString("—"));
                    QVERIFY(!cell.data(views::HotSwitchModel::BytesRole).isValid());
                    continue;
                }
                ++cells;
                const double bytes = cell.data(views::HotSwitchModel::BytesRole).toDouble();
                const double ns = cell.data(views::HotSwitchModel::ValueRole).toDouble();
                // The trace holds each switch's bytes rounded to whole bytes.
                QVERIFY2(std::abs(bytes - made->bytes / made->count) <= 1,
                         qPrintable(QString::number(bytes)));
                QVERIFY(std::abs(ns - made->ns / made->count) <= 1);
                QVERIFY(cell.data().toString().contains(" / "));
                QVERIFY(cell.data(Qt::ToolTipRole).toString().contains("switches"));
            }
        }
        QCOMPARE(cells, int(hot_result_.switches.size()));
        QVERIFY(cells >= 2);  // into tp4 and back to dp4 at least
    }

    // Every switch is a shaded band over all rows, with its layouts and bytes as the tooltip.
    void timelineMarksSwitches() {
        views::TimelineView view;
        view.resize(1200, 700);
        view.set_run(hot_);
        int switches = 0;
        for (const sim::SimulatedSwitch& s : hot_result_.switches) {
            switches += s.count;
        }
        auto* canvas = view.canvas();
        QCOMPARE(int(canvas->switch_marks().size()), switches);
        view.show();
        canvas->show_all();
        QImage image = canvas->grab().toImage();
        QVERIFY(canvas->painted_switches() > 0);
        const auto& mark = canvas->switch_marks().front();
        const double x = canvas->x_of(mark.start_ns) + 1;
        const QString text = canvas->switch_text_at(x);
        QVERIFY2(text.contains("→") && text.contains("sent by all ranks"), qPrintable(text));
        QVERIFY(canvas->switch_text_at(canvas->x_of(mark.start_ns) - 10).isEmpty());
        // The shade is painted in the band (lower in a row than any event's label would be).
        const QColor shaded = image.pixelColor(int(x), image.height() - 3);
        QVERIFY2(shaded != canvas->background(), qPrintable(shaded.name()));
        // Each bucket's passes are on the timeline: every micro-batch forward on its stages' and
        // TP ranks' lanes.
        std::int64_t forwards = 0;
        for (const sim::SimulatedBucket& bucket : hot_result_.buckets) {
            forwards += bucket.microbatches * bucket.bucket.layout.pp * bucket.bucket.layout.tp *
                        bucket.bucket.layout.cp;
        }
        QCOMPARE(std::int64_t(view.search("forward")), forwards);
        view.set_run(static_);
        QVERIFY(canvas->switch_marks().empty());
    }

    void staticRunSaysWhy() {
        views::HotSwitchView view;
        view.set_run(static_);
        QVERIFY(view.message().contains("did not switch layouts"));
        QCOMPARE(view.model(Table::breakdown)->rowCount(), 0);
    }

    // The tab is there for the hot-switched run and hidden for the static one.
    void mainWindowShowsTheTabForHotSwitchedRuns() {
        ui::MainWindow window;
        window.set_modal_dialogs(false);
        window.open_path(static_path_);
        QTRY_COMPARE_WITH_TIMEOUT(window.runs().size(), 1, kLoadMs);
        const int tab = int(ui::View::hot_switch);
        QCOMPARE(window.tabs()->tabText(tab), QString("Hot switch"));
        QVERIFY(!window.tabs()->isTabVisible(tab));
        window.open_path(hot_path_);
        QTRY_COMPARE_WITH_TIMEOUT(window.runs().size(), 2, kLoadMs);
        QVERIFY(window.tabs()->isTabVisible(tab));
        window.show_view(ui::View::hot_switch);
        QCOMPARE(window.hot_switch()->model(Table::breakdown)->rowCount(), 5);
        window.set_current_run(0);
        QVERIFY(!window.tabs()->isTabVisible(tab));
        QVERIFY(window.current_view() != ui::View::hot_switch);
        QCOMPARE(ui::view_from_key("hot-switch"), std::optional(ui::View::hot_switch));
    }
};

QTEST_MAIN(HotSwitchViewTest)
#include "test_hot_switch_view.moc"
