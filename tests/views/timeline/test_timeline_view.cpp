// The timeline view on the real captured runs (tests/views/capture_runs.sh): the lane model
// under every grouping, screenshots checked for content at the view's own coordinates,
// highlight, selection and its details, wheel zoom, search, show_place; flows on a hand-built
// run with a GPU stream (the captures are CPU-only).
#include <QAbstractItemModelTester>
#include <QApplication>
#include <QImage>
#include <QSignalSpy>
#include <QTest>
#include <QTextBrowser>
#include <QWheelEvent>

#include "core/trace/annotations.h"
#include "tests/views/pixels.h"
#include "views/common/palette.h"
#include "views/common/pass_marks.h"
#include "views/timeline/timeline_view.h"

using namespace fulcrum;
using namespace fulcrum::views;
using namespace fulcrum::views::timeline;

namespace {

RunPtr open_fixture(const char* name) {
    const QString path = QStringLiteral(FULCRUM_GUI_RUNS_DIR "/%1/run.fulcrum").arg(name);
    auto run = open_run(path);
    if (!run) {
        qFatal("cannot open %s: %s", qPrintable(path), run.error().message.c_str());
    }
    return *run;
}

}  // namespace

class TestTimelineView : public QObject {
    Q_OBJECT
private:
    RunPtr fixed_;
    std::unique_ptr<TimelineView> view_;

    std::optional<EventRef> first_named(std::int32_t rank, std::string_view name) const {
        const Layout& layout = *view_->layout();
        for (std::uint32_t r = 0; r < layout.rows.size(); ++r) {
            if (layout.rows[r].rank != rank) {
                continue;
            }
            const auto& events = layout.rows[r].lane->events;
            for (std::uint32_t i = 0; i < events.size(); ++i) {
                if (fixed_->trace->name(events[i].name) == name) {
                    return EventRef{r, i};
                }
            }
        }
        return std::nullopt;
    }
    // The longest event of that name on the rank: its box is the easiest to find in a picture.
    std::optional<EventRef> widest_named(std::int32_t rank, std::string_view name) const {
        const Layout& layout = *view_->layout();
        std::optional<EventRef> widest;
        std::int64_t longest = -1;
        for (std::uint32_t r = 0; r < layout.rows.size(); ++r) {
            if (layout.rows[r].rank != rank) {
                continue;
            }
            const auto& events = layout.rows[r].lane->events;
            for (std::uint32_t i = 0; i < events.size(); ++i) {
                if (fixed_->trace->name(events[i].name) == name &&
                    events[i].duration_ns() > longest) {
                    longest = events[i].duration_ns();
                    widest = EventRef{r, i};
                }
            }
        }
        return widest;
    }
    const Event& event_of(EventRef ref) const {
        return view_->layout()->rows[ref.row].lane->events[ref.event];
    }
    QImage grab_canvas() const {
        return view_->canvas()->grab().toImage().convertToFormat(QImage::Format_RGB32);
    }
    // FULCRUM_SAVE_SCREENSHOTS=DIR keeps the whole view's picture for a person to look at.
    void save_view(const char* name) const {
        const QString dir = qEnvironmentVariable("FULCRUM_SAVE_SCREENSHOTS");
        if (!dir.isEmpty()) {
            view_->grab().save(dir + "/" + name + ".png");
        }
    }

private slots:
    void initTestCase() {
        fixed_ = open_fixture("fixed");
        QVERIFY(fixed_->trace->ranks.size() == 4);
    }

    void init() {
        view_ = std::make_unique<TimelineView>();
        view_->resize(1400, 800);
        view_->set_run(fixed_);
        view_->show();
        QVERIFY(QTest::qWaitForWindowExposed(view_.get()));
    }

    void cleanup() { view_.reset(); }

    void model_under_every_grouping() {
        for (const char* name : {"fixed", "wlb"}) {
            const RunPtr run = open_fixture(name);
            const Layout layout = build_layout(*run->trace);
            LaneTreeModel model;
            QAbstractItemModelTester tester(&model,
                                            QAbstractItemModelTester::FailureReportingMode::QtTest);
            model.set_run(run->trace.get(), &layout);
            for (Grouping g :
                 {Grouping::dp, Grouping::cp, Grouping::tp, Grouping::none, Grouping::pp}) {
                model.set_grouping(g);
                int lanes = 0;
                for (int top = 0; top < model.rowCount(); ++top) {
                    const QModelIndex node = model.index(top, 0);
                    const bool grouped = g != Grouping::none;
                    for (int c = 0; c < (grouped ? model.rowCount(node) : 1); ++c) {
                        const QModelIndex rank = grouped ? model.index(c, 0, node) : node;
                        lanes += model.rowCount(rank);
                    }
                }
                QCOMPARE(lanes, static_cast<int>(layout.rows.size()));
            }
            // pp2 × cp2: two stages of two ranks each, and two CP groups.
            model.set_grouping(Grouping::pp);
            QCOMPARE(model.rowCount(), 2);
            QCOMPARE(model.rowCount(model.index(0, 0)), 2);
            QCOMPARE(model.rowCount(model.index(1, 0)), 2);
            model.set_grouping(Grouping::cp);
            QCOMPARE(model.rowCount(), 2);
            model.set_grouping(Grouping::dp);
            QCOMPARE(model.rowCount(), 1);
        }
    }

    void screenshot_shows_events_where_the_mapping_says() {
        TimelineCanvas* canvas = view_->canvas();
        const auto forward = widest_named(0, "forward");
        QVERIFY(forward);
        // Whole run: in the forward pass's row, after the run's last event (the window keeps a
        // 1% margin), only background; and no highlight anywhere.
        const QImage whole = grab_canvas();
        const QRect row = canvas->event_rect(*forward).toAlignedRect().adjusted(0, 1, 0, -1);
        const int x_after = static_cast<int>(canvas->x_of(view_->layout()->end_ns)) + 4;
        QVERIFY(x_after < canvas->width() - 2);
        const QRect empty(x_after, row.top(), canvas->width() - x_after - 2, row.height());
        QCOMPARE(count_colour(whole, empty, canvas->background()), empty.width() * empty.height());
        QCOMPARE(count_colour(whole, canvas->rect(), palette::highlight()), 0);
        save_view("timeline-whole-run");

        // Rank 0's longest forward pass, zoomed to a third of the view (how wide it is at full
        // zoom-out depends on how the captured run's timing came out on a shared machine).
        const Event& event = event_of(*forward);
        view_->zoom_to(event.start_ns - event.duration_ns(), event.end_ns + event.duration_ns());
        const QRect box = canvas->event_rect(*forward).toAlignedRect().adjusted(1, 1, -2, -1);
        QVERIFY2(box.width() > 100, qPrintable(QString::number(box.width())));
        QVERIFY(canvas->rect().contains(box));
        const QImage image = grab_canvas();
        const QColor colour = palette::category(event.category);
        // Most of the box has its category's colour (the label takes the rest).
        QVERIFY2(count_colour(image, box, colour) > box.width() * box.height() / 2,
                 qPrintable(QStringLiteral("%1 of %2")
                                .arg(count_colour(image, box, colour))
                                .arg(box.width() * box.height())));
        view_->canvas()->show_all();
    }

    // Passes by kind (forward and backward in palette::phase), and the critical path: the
    // canvas's set is the analysis's (critical_pass_keys), and a critical pass, zoomed to,
    // is outlined in palette::critical().
    void passes_by_kind_and_the_critical_path() {
        TimelineCanvas* canvas = view_->canvas();
        const std::set<PassKey> keys = critical_pass_keys(*fixed_->analysis);
        QVERIFY(!keys.empty());
        QCOMPARE(canvas->critical_passes(), keys);
        const Layout& layout = *view_->layout();
        std::optional<EventRef> critical, backward;
        for (std::uint32_t r = 0; r < layout.rows.size() && (!critical || !backward); ++r) {
            const auto& events = layout.rows[r].lane->events;
            for (std::uint32_t i = 0; i < events.size(); ++i) {
                const Phase kind = pass_kind(*fixed_->trace, events[i]);
                if (kind == Phase::none)
                    continue;
                const PassKey key{layout.rows[r].rank, events[i].step, events[i].microbatch, kind};
                if (!critical && keys.count(key) > 0)
                    critical = EventRef{r, i};
                if (!backward && kind == Phase::backward && keys.count(key) == 0)
                    backward = EventRef{r, i};
            }
        }
        QVERIFY(critical && backward);
        for (const EventRef ref : {*critical, *backward}) {
            const Event& event = event_of(ref);
            view_->zoom_to(event.start_ns - event.duration_ns(),
                           event.end_ns + event.duration_ns());
            const QRect box = canvas->event_rect(ref).toAlignedRect();
            const QImage image = grab_canvas();
            const bool on_path = ref.row == critical->row && ref.event == critical->event;
            QVERIFY(count_colour(image, box.adjusted(3, 3, -4, -3), canvas->event_colour(event)) >
                    box.width() * box.height() / 3);
            if (on_path) {
                QVERIFY(canvas->painted_critical() > 0);
                QVERIFY(count_colour(image, box.adjusted(-1, -1, 1, 1), palette::critical()) >
                        box.width());
            } else {
                QCOMPARE(canvas->event_colour(event).rgb(), palette::phase(Phase::backward).rgb());
            }
        }
        save_view("timeline-critical-path");
        canvas->show_all();
    }

    void highlight_step_draws_the_highlight_colour() {
        view_->highlight_step(0);
        const QImage image = grab_canvas();
        QVERIFY(count_colour(image, view_->canvas()->rect(), palette::highlight()) > 200);
        view_->highlight_step(-1);
        view_->highlight_microbatch(1);
        const QImage microbatch = grab_canvas();
        QVERIFY(count_colour(microbatch, view_->canvas()->rect(), palette::highlight()) > 50);
        view_->highlight_microbatch(-1);
        QCOMPARE(count_colour(grab_canvas(), view_->canvas()->rect(), palette::highlight()), 0);
    }

    void click_selects_and_shows_details() {
        const auto forward = first_named(0, "forward");
        QVERIFY(forward);
        TimelineCanvas* canvas = view_->canvas();
        const QPoint centre = canvas->event_rect(*forward).center().toPoint();
        QTest::mouseClick(canvas, Qt::LeftButton, {}, centre);
        QVERIFY(canvas->selected());
        QCOMPARE(*canvas->selected(), *forward);
        const QString text = view_->details()->toPlainText();
        QVERIFY2(text.contains("forward"), qPrintable(text));
        QVERIFY2(text.contains(format_duration(event_of(*forward).duration_ns())),
                 qPrintable(text));
        QVERIFY(text.contains("Micro-batch"));
        // The CPU the pass's thread used, from fulcrum-train's fulcrum.cpu mark after it.
        QVERIFY2(text.contains("Thread CPU") && text.contains("% of its wall time"),
                 qPrintable(text));
        // A range that ends last inside its pass (stage 0's backward ends with the first
        // layer's attention) is not given the pass's CPU time, which the mark after the pass
        // would otherwise be nearest to.
        const auto backward = first_named(0, "backward");
        QVERIFY(backward);
        const Event& pass = event_of(*backward);
        std::optional<EventRef> last_inside;
        for (std::uint32_t i = backward->event + 1;; ++i) {
            const Event& e = view_->layout()->rows[backward->row].lane->events[i];
            if (e.start_ns >= pass.end_ns) {
                break;
            }
            if (e.kind == EventKind::range) {
                last_inside = EventRef{backward->row, i};
            }
        }
        QVERIFY(last_inside);
        canvas->select(*last_inside);
        QVERIFY2(!view_->details()->toPlainText().contains("Thread CPU"),
                 qPrintable(view_->details()->toPlainText()));
        canvas->select(*forward);
        // The selection is outlined in the highlight colour.
        QVERIFY(count_colour(grab_canvas(), canvas->rect(), palette::highlight()) > 20);
        // A click on empty space clears it.
        const int x_after = static_cast<int>(canvas->x_of(view_->layout()->end_ns)) + 6;
        QTest::mouseClick(canvas, Qt::LeftButton, {}, QPoint(x_after, centre.y()));
        QVERIFY(!canvas->selected());
        QVERIFY(view_->details()->toPlainText().isEmpty());
    }

    void wheel_zooms_about_the_cursor() {
        TimelineCanvas* canvas = view_->canvas();
        const std::int64_t before = canvas->window_end() - canvas->window_start();
        const QPointF cursor(canvas->kGutterWidth + 300, 100);
        const std::int64_t anchor = canvas->time_at(cursor.x());
        QWheelEvent wheel(cursor, canvas->mapToGlobal(cursor), QPoint(), QPoint(0, 240),
                          Qt::NoButton, Qt::NoModifier, Qt::NoScrollPhase, false);
        QApplication::sendEvent(canvas, &wheel);
        const std::int64_t after = canvas->window_end() - canvas->window_start();
        QVERIFY(after < before * 0.8);
        const double ns_per_px = static_cast<double>(after) / canvas->time_area_width();
        QVERIFY(std::abs(canvas->time_at(cursor.x()) - anchor) <= ns_per_px * 1.5);
        QVERIFY(canvas->window_start() < anchor && anchor < canvas->window_end());

        view_->zoom_to(1'000'000, 2'000'000);
        QCOMPARE(canvas->window_start(), std::int64_t(1'000'000));
        QCOMPARE(canvas->window_end(), std::int64_t(2'000'000));
        QTest::keyClick(canvas, Qt::Key_Home);
        QVERIFY(canvas->window_start() <= view_->layout()->start_ns);
        QVERIFY(canvas->window_end() >= view_->layout()->end_ns);
    }

    void drag_with_shift_zooms_to_the_range_and_ctrl_measures() {
        TimelineCanvas* canvas = view_->canvas();
        const int y = 100;
        const QPoint a(canvas->kGutterWidth + 200, y), b(canvas->kGutterWidth + 400, y);
        const std::int64_t ta = canvas->time_at(a.x()), tb = canvas->time_at(b.x());
        QSignalSpy status(view_.get(), &TimelineView::status_message);
        QTest::mousePress(canvas, Qt::LeftButton, Qt::ControlModifier, a);
        QTest::mouseMove(canvas, b);
        QTest::mouseRelease(canvas, Qt::LeftButton, Qt::ControlModifier, b);
        QVERIFY(!status.isEmpty());
        QVERIFY2(status.last().at(0).toString().contains(format_duration(tb - ta)),
                 qPrintable(status.last().at(0).toString()));

        QTest::mousePress(canvas, Qt::LeftButton, Qt::ShiftModifier, a);
        QTest::mouseMove(canvas, b);
        QTest::mouseRelease(canvas, Qt::LeftButton, Qt::ShiftModifier, b);
        QVERIFY(std::abs(canvas->window_start() - ta) < (tb - ta) / 100);
        QVERIFY(std::abs(canvas->window_end() - tb) < (tb - ta) / 100);
    }

    void search_finds_every_forward_pass() {
        std::int64_t expected = 0;
        for (const auto& rank : fixed_->trace->ranks) {
            for (const auto& lane : rank.lanes) {
                for (const Event& event : lane.events) {
                    expected += fixed_->trace->name(event.name) == "forward";
                }
            }
        }
        QVERIFY(expected >= 4);
        QCOMPARE(view_->search("forward"), static_cast<int>(expected));
        QCOMPARE(view_->search("FORWARD"), static_cast<int>(expected));
        // The first hit is selected and in view.
        const auto selected = view_->canvas()->selected();
        QVERIFY(selected);
        QCOMPARE(*selected, view_->hits().front());
        const Event& hit = event_of(*selected);
        QVERIFY(view_->canvas()->window_start() <= hit.start_ns &&
                hit.end_ns <= view_->canvas()->window_end());
        view_->next_hit();
        QCOMPARE(*view_->canvas()->selected(), view_->hits()[1]);
        QCOMPARE(view_->search("no event has this name"), 0);
    }

    void show_place_zooms_to_a_microbatch() {
        view_->show_place(Place{1, 0, 2});
        const TimelineCanvas* canvas = view_->canvas();
        const Layout& layout = *view_->layout();
        const std::int64_t whole = layout.end_ns - layout.start_ns;
        QVERIFY(canvas->window_end() - canvas->window_start() < whole / 2);
        // Every event of rank 1's step 0, micro-batch 2 is inside the window.
        int inside = 0;
        for (const LaneRow& row : layout.rows) {
            if (row.rank != 1) {
                continue;
            }
            for (const Event& event : row.lane->events) {
                if (event.step == 0 && event.microbatch == 2) {
                    QVERIFY(canvas->window_start() <= event.start_ns &&
                            event.end_ns <= canvas->window_end());
                    ++inside;
                }
            }
        }
        QVERIFY(inside > 0);
        QVERIFY(count_colour(grab_canvas(), canvas->rect(), palette::highlight()) > 50);
        view_->select_event(first_named(1, "attention"));
        save_view("timeline-place");
    }

    void collapse_hides_rows() {
        TimelineCanvas* canvas = view_->canvas();
        const auto forward = first_named(0, "forward");
        const int height = canvas->content_height();
        LaneTreeModel* model = view_->lane_model();
        QVERIFY(model->setData(model->rank_index(0), false, LaneTreeModel::ExpandedRole));
        QVERIFY(canvas->event_rect(*forward).isNull());
        QVERIFY(canvas->content_height() < height);
        // A click on the rank's header expands it again.
        const auto rank1 = first_named(1, "forward");
        QVERIFY(model->setData(model->rank_index(0), true, LaneTreeModel::ExpandedRole));
        QCOMPARE(canvas->content_height(), height);
        QVERIFY(!canvas->event_rect(*rank1).isNull());
        // Collapse a whole PP stage through its header in the gutter (the first band).
        QTest::mouseClick(canvas, Qt::LeftButton, {},
                          QPoint(20, canvas->kAxisHeight + canvas->kHeaderHeight / 2));
        QVERIFY(canvas->event_rect(*forward).isNull());
        QVERIFY(!model->index(0, 0).data(LaneTreeModel::ExpandedRole).toBool());
    }

    // zb-h1's and interleaving's passes on a hand-built run: a `weight gradients` range (phase
    // wgrad) is a W pass, filled in palette::phase(weight_grad); `chunk=` names the virtual
    // stage in the label that hover and details show.
    void weight_gradient_passes_and_virtual_stages() {
        auto trace = std::make_shared<analysis::RunTrace>();
        auto& host = trace->add_lane(0, LaneKind::host_thread, "main");
        Event& forward =
            trace->add_range(host, "forward", Category::compute, 0, 1000, 0, 2, 0, Phase::forward);
        forward.args = trace->intern(R"({"chunk":1})");
        trace->add_range(host, "backward", Category::compute, 1000, 2000, 0, 2, 0, Phase::backward);
        trace->add_range(host, "weight gradients", Category::compute, 2000, 3000, 0, 2, 0,
                         Phase::weight_grad);
        trace->add_range(host, "attention", Category::attention, 3000, 4000, 0, 2);
        trace->finish();
        const auto& events = trace->ranks[0].lanes[0].events;
        QCOMPARE(pass_kind(*trace, events[0]), Phase::forward);
        QCOMPARE(pass_kind(*trace, events[1]), Phase::backward);
        QCOMPARE(pass_kind(*trace, events[2]), Phase::weight_grad);
        QCOMPARE(pass_kind(*trace, events[3]), Phase::none);
        QCOMPARE(pass_label(Phase::forward, 2, chunk_of_args(trace->name(events[0].args))),
                 QStringLiteral("F2 v1"));
        QCOMPARE(pass_label(Phase::weight_grad, 2, -1), QStringLiteral("W2"));
        auto run = std::make_shared<OpenedRun>();
        run->title = "zb";
        run->trace = trace;
        view_->set_run(run);
        const TimelineCanvas* canvas = view_->canvas();
        QCOMPARE(canvas->event_colour(events[2]).rgb(), palette::phase(Phase::weight_grad).rgb());
        QCOMPARE(canvas->event_colour(events[3]).rgb(),
                 palette::category(Category::attention).rgb());
        view_->select_event(EventRef{0, 0});
        QVERIFY(view_->details()->toPlainText().contains(QStringLiteral("F2 v1")));
    }

    void flows_are_drawn_from_launch_to_kernel() {
        auto trace = std::make_shared<analysis::RunTrace>();
        auto& host = trace->add_lane(0, LaneKind::host_thread, "main");
        auto& stream = trace->add_lane(0, LaneKind::gpu_stream, "stream 7");
        for (int i = 0; i < 4; ++i) {
            Event& launch = trace->add_range(host, "cudaLaunchKernel", Category::runtime, 1000 * i,
                                             1000 * i + 100);
            launch.kind = EventKind::api;
            launch.correlation = i;
            Event& kernel =
                trace->add_range(stream, "gemm", Category::compute, 1000 * i + 500, 1000 * i + 900);
            kernel.kind = EventKind::kernel;
            kernel.correlation = i;
        }
        trace->finish();
        auto run = std::make_shared<OpenedRun>();
        run->title = "flows";
        run->trace = trace;
        view_->set_run(run);
        QCOMPARE(view_->layout()->flows.size(), std::size_t(4));
        const TimelineCanvas* canvas = view_->canvas();
        const Flow& flow = view_->layout()->flows[1];
        const QRectF launch = canvas->event_rect({flow.host_row, flow.host_event});
        const QRectF kernel = canvas->event_rect({flow.device_row, flow.device_event});
        QVERIFY(kernel.top() > launch.bottom());
        // The middle of the arrow's line, between the two lanes, is dark.
        const QPointF middle =
            (QPointF(launch.left(), launch.bottom()) + QPointF(kernel.left(), kernel.top())) / 2;
        const QImage image = grab_canvas();
        int dark = 0;
        for (int dx = -1; dx <= 1; ++dx) {
            for (int dy = -1; dy <= 1; ++dy) {
                dark += image.pixelColor(middle.toPoint() + QPoint(dx, dy)).lightness() < 180;
            }
        }
        QVERIFY2(dark > 0, "an arrow crosses from the launch to its kernel");
        save_view("timeline-flows");
    }
};

QTEST_MAIN(TestTimelineView)
#include "test_timeline_view.moc"
