// The Plan tab (views/charts/plan_view) on a PlanResult built by hand (tests/support/hand_plan.h):
// points by status with the infeasible one grey and the invalid layout not drawn, the budget
// line, the top k in order, the reasons counted, selection shared by the table and the chart,
// tooltips with the reason, and "Re-run this layout…" handing over the selected candidate.
#include <qcustomplot.h>
#include <QAbstractItemModelTester>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableView>
#include <QTest>

#include "tests/support/hand_plan.h"
#include "views/charts/plan_view.h"

using namespace fulcrum;
using plan::CandidateStatus;

class PlanViewTest : public QObject {
    Q_OBJECT

    static views::PlanPtr hand() {
        auto p = test::hand_plan();
        return std::make_shared<views::PlanData>(
            views::PlanData{std::move(p.request), std::move(p.result)});
    }

private slots:
    void emptyState() {
        views::PlanView view;
        QVERIFY(view.message().contains("No plan yet"));
        QCOMPARE(view.model()->rowCount(), 0);
        QVERIFY(!view.rerun_button()->isEnabled());
    }

    void pointsByStatus() {
        views::PlanView view;
        view.resize(900, 700);
        view.set_plan(hand());
        QVERIFY(view.message().isEmpty());
        QCOMPARE(view.point_count(CandidateStatus::ranked), 3);
        QCOMPARE(view.point_count(CandidateStatus::estimated), 1);
        QCOMPARE(view.point_count(CandidateStatus::infeasible),
                 1);  // the invalid one has no memory
        QCOMPARE(view.point_color(CandidateStatus::infeasible).rgb(),
                 QColor(0xb5, 0xb5, 0xb5).rgb());
        QVERIFY(view.point_color(CandidateStatus::ranked).rgb() != QColor(0xb5, 0xb5, 0xb5).rgb());
        QCOMPARE(view.budget_gib(), 72.0);
        QVERIFY(view.reasons_text().contains("1 × activations"));
        QVERIFY(view.reasons_text().contains("1 × tp > heads"));
    }

    void tableInOrder() {
        views::PlanView view;
        view.set_plan(hand());
        auto* model = view.model();
        QCOMPARE(model->rowCount(), 2);  // top k = 2 of three ranked
        const auto layout = views::PlanTableModel::layout;
        QCOMPARE(model->index(0, layout).data().toString(), QString("2×2×2×1"));
        QCOMPARE(model->index(1, layout).data().toString(), QString("4×2×1×1"));
        QCOMPARE(model->index(0, views::PlanTableModel::schedule).data().toString(),
                 QString("interleaved x2"));
        QCOMPARE(model->index(0, views::PlanTableModel::rank).data().toInt(), 1);
        QCOMPARE(model->index(0, views::PlanTableModel::tokens_per_second)
                     .data(views::PlanTableModel::ValueRole)
                     .toDouble(),
                 1200.0);
        QAbstractItemModelTester tester(model,
                                        QAbstractItemModelTester::FailureReportingMode::QtTest);
    }

    void selectionSync() {
        views::PlanView view;
        view.resize(900, 700);
        view.show();
        view.set_plan(hand());
        // The best candidate is selected and highlighted at first.
        QCOMPARE(view.selected_row(), 0);
        QCOMPARE(view.highlighted_point(), QPointF(60, 1200));
        view.select_row(1);
        QCOMPARE(view.highlighted_point(), QPointF(40, 1000));
        QVERIFY(view.rerun_button()->isEnabled());
        // A click on the first candidate's point selects its row.
        view.plot()->replot();
        const QPoint at(static_cast<int>(view.plot()->xAxis->coordToPixel(60)),
                        static_cast<int>(view.plot()->yAxis->coordToPixel(1200)));
        QTest::mousePress(view.plot(), Qt::LeftButton, {}, at);
        QCOMPARE(view.selected_row(), 0);
        // A click on the infeasible point highlights it and leaves no row selected.
        const QPoint grey(static_cast<int>(view.plot()->xAxis->coordToPixel(120)),
                          static_cast<int>(view.plot()->yAxis->coordToPixel(0)));
        QTest::mousePress(view.plot(), Qt::LeftButton, {}, grey);
        QCOMPARE(view.selected_row(), -1);
        QCOMPARE(view.highlighted_point(), QPointF(120, 0));
        QVERIFY(!view.rerun_button()->isEnabled());
    }

    // Rendered: the infeasible point grey, the best one coloured, where the axes put them.
    void rendered() {
        views::PlanView view;
        view.resize(900, 700);
        view.show();
        view.set_plan(hand());
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        view.plot()->replot();
        const QImage image = view.plot()->toPixmap().toImage();
        if (const QByteArray png = qgetenv("FULCRUM_PLAN_PNG"); !png.isEmpty())
            view.grab().save(QString::fromLocal8Bit(png));
        auto pixel = [&](double gib, double tokens) {
            return image.pixelColor(static_cast<int>(view.plot()->xAxis->coordToPixel(gib)),
                                    static_cast<int>(view.plot()->yAxis->coordToPixel(tokens)));
        };
        const QColor grey = pixel(120, 0);
        QVERIFY2(grey.red() == grey.green() && grey.green() == grey.blue() && grey.red() < 230,
                 qPrintable(grey.name()));
        const QColor best = pixel(60, 1200);
        QVERIFY2(best.red() != best.green() || best.green() != best.blue(),
                 qPrintable(best.name()));
    }

    void tooltips() {
        views::PlanView view;
        view.resize(900, 700);
        view.show();
        view.set_plan(hand());
        view.plot()->replot();
        const QString grey = view.tooltip_at(120, 0);
        QVERIFY2(grey.contains("infeasible") && grey.contains("activations <b>120 GiB</b>"),
                 qPrintable(grey));
        QVERIFY(view.tooltip_at(60, 1200).contains("ranked #1"));
    }

    // What `fulcrum plan --json` writes reads back: the ranked candidates and the reasons.
    void readJson() {
        const auto p = test::hand_plan();
        const auto data = views::read_plan_json(
            QByteArray::fromStdString(plan::plan_json(p.request, p.result, 0)));
        QVERIFY2(static_cast<bool>(data), data ? "" : data.error().message.c_str());
        QCOMPARE(data->result.ranked.size(), std::size_t{3});
        const plan::Candidate& best = data->result.candidates[data->result.ranked[0]];
        QCOMPARE(best.layout.grid.pp, 2);
        QCOMPARE(best.layout.schedule, parallel::PipelineSchedule::interleaved);
        QCOMPARE(best.layout.virtual_stages, 2);
        QCOMPARE(best.layout.stage_layers.size(), std::size_t{4});
        QCOMPARE(best.balancer, balance::Balancer::wlb);
        QCOMPARE(best.memory.total_gib, 60.0);
        QCOMPARE(data->result.counts.infeasible_by_reason.size(), std::size_t{2});
        QCOMPARE(data->request.gpu_memory_gib, 80.0);
        views::PlanView view;
        view.set_plan(std::make_shared<views::PlanData>(*data));
        QCOMPARE(view.point_count(CandidateStatus::ranked), 3);
        QVERIFY(!views::read_plan_json("{\"format\": \"fulcrum simulate\"}"));
        QVERIFY(!views::read_plan_json("not json"));
    }

    void rerunRequested() {
        views::PlanView view;
        view.set_plan(hand());
        QSignalSpy spy(&view, &views::PlanView::rerun_requested);
        view.select_row(1);
        view.rerun_button()->click();
        QCOMPARE(spy.count(), 1);
        const auto candidate = spy.front().front().value<plan::Candidate>();
        QCOMPARE(candidate.layout.grid.dp, 4);
    }
};

QTEST_MAIN(PlanViewTest)
#include "test_plan_view.moc"
