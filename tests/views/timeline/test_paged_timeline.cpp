// The paged timeline (issue 18) on a block file of make_scale_run's 4D job (bench/common/
// scale_run.h, 64 ranks, one step):
// the stored lane summaries against the in-memory layout's depths and events, the paged view
// against the in-memory view pixel for pixel at detail zooms, and damaged or missing summary
// tables, which must fall back to loading the run whole with a message.
#include <sqlite3.h>

#include <QImage>
#include <QTemporaryDir>
#include <QTest>
#include <QTextBrowser>
#include <map>

#include <unistd.h>

#include "bench/common/scale_run.h"
#include "core/store/lane_summary.h"
#include "core/store/lane_summary_file.h"
#include "core/store/trace_reader.h"
#include "views/common/opened_run.h"
#include "views/timeline/lane_tree_model.h"
#include "views/timeline/paged_timeline.h"
#include "views/timeline/timeline_canvas.h"
#include "views/timeline/timeline_layout.h"
#include "views/timeline/timeline_view.h"

using namespace fulcrum;
using namespace fulcrum::views::timeline;

namespace {

void exec_sql(const QString& path, const char* sql) {
    sqlite3* db = nullptr;
    QCOMPARE(sqlite3_open(path.toUtf8().constData(), &db), SQLITE_OK);
    char* error = nullptr;
    const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &error);
    const QString message = error != nullptr ? QString::fromUtf8(error) : QString();
    sqlite3_free(error);
    sqlite3_close(db);
    QVERIFY2(rc == SQLITE_OK, qPrintable(message));
}

struct Expected {
    std::int64_t busy = 0;
    std::uint32_t events = 0;
    int max_depth = 0;
};

// What the summary of one level must hold, computed from the timeline's own layout: events by
// the bin they start in, depths as build_layout assigns them, depth-0 time clipped to bins.
std::map<std::int64_t, Expected> brute_force(const LaneRow& row, int shift) {
    std::map<std::int64_t, Expected> bins;
    const auto& events = row.lane->events;
    for (std::size_t i = 0; i < events.size(); ++i) {
        const Event& event = events[i];
        Expected& at = bins[event.start_ns >> shift];
        ++at.events;
        at.max_depth = std::max<int>(at.max_depth, row.depth[i]);
        if (row.depth[i] != 0) {
            continue;
        }
        const std::int64_t last = (std::max(event.end_ns, event.start_ns + 1) - 1) >> shift;
        for (std::int64_t index = event.start_ns >> shift; index <= last; ++index) {
            const std::int64_t lo = std::max(event.start_ns, index << shift);
            const std::int64_t hi = std::min(event.end_ns, (index + 1) << shift);
            bins[index].busy += std::max<std::int64_t>(0, hi - lo);
        }
    }
    return bins;
}

}  // namespace

class TestPagedTimeline : public QObject {
    Q_OBJECT
private:
    QTemporaryDir dir_;
    QString run_;
    analysis::RunTrace whole_;

    QString copy_of_run(const QString& name) {
        const QString path = dir_.filePath(name);
        QFile::remove(path);
        if (!QFile::copy(run_, path)) {
            return {};
        }
        QFile::setPermissions(path, QFile::ReadOwner | QFile::WriteOwner);
        return path;
    }

private slots:
    void initTestCase() {
        QVERIFY(dir_.isValid());
        run_ = dir_.filePath("blocks.fulcrum");
        // One step of 64 ranks (~0.5 M events): a step is far longer than 1,024 µs, so level 0
        // has to coarsen from its 1 µs bins and merged bins are checked too.
        auto written = bench::make_scale_run(run_.toStdString(), 64, 1);
        QVERIFY2(bool(written), written ? "" : written.error().message.c_str());
        auto built = store::build_lane_summaries(run_.toStdString());
        QVERIFY2(bool(built), built ? "" : built.error().message.c_str());
        auto reader = store::TraceReader::open(run_.toStdString());
        QVERIFY(bool(reader));
        auto trace = analysis::load_run_trace(*reader);
        QVERIFY(bool(trace));
        whole_ = std::move(*trace);
        QCOMPARE(whole_.event_count(), written->events);
    }

    void summaries_match_the_in_memory_layout() {
        auto reader = store::TraceReader::open(run_.toStdString());
        QVERIFY(bool(reader));
        auto summaries = reader->lane_summaries();
        QVERIFY(bool(summaries) && summaries->has_value());
        const Layout layout = build_layout(whole_, 1);
        QCOMPARE((*summaries)->size(), layout.rows.size());
        int coarsened = 0;
        for (const LaneRow& row : layout.rows) {
            const auto it = std::find_if(
                (*summaries)->begin(), (*summaries)->end(),
                [&](const store::LaneSummary& s) { return s.lane == row.lane->info.id; });
            QVERIFY(it != (*summaries)->end());
            QCOMPARE(it->events, static_cast<std::int64_t>(row.lane->events.size()));
            QCOMPARE(it->depths, row.depths());
            QCOMPARE(it->start_ns, row.lane->events.front().start_ns);
            QVERIFY(it->levels.size() >= 2);
            QVERIFY(it->levels.front().bins.back().index - it->levels.front().bins.front().index <
                    store::kSummaryBins);
            QVERIFY(it->levels.back().bins.size() <= std::size_t(store::kSummaryMinBins));
            coarsened += it->levels.front().shift > store::kSummaryFirstShift;
            for (const store::SummaryLevel& level : it->levels) {
                const auto expected = brute_force(row, level.shift);
                QCOMPARE(level.bins.size(), expected.size());
                for (const store::SummaryBin& bin : level.bins) {
                    const auto e = expected.find(bin.index);
                    QVERIFY(e != expected.end());
                    QCOMPARE(bin.events, e->second.events);
                    QCOMPARE(int(bin.max_depth), e->second.max_depth);
                    QCOMPARE(bin.busy_ns, e->second.busy);
                    QVERIFY(bin.dominant_ns <= bin.busy_ns);
                    if (bin.busy_ns > 0) {
                        QVERIFY(bin.name.valid());
                    }
                }
            }
        }
        QCOMPARE(coarsened, int(layout.rows.size()));
    }

    // At a detail zoom the paged canvas, once its detail has arrived, paints exactly what the
    // in-memory canvas paints: the same boxes, folds and pixels.
    // Windows as fractions of the run: a quarter of it, 1 ms and 20 µs in the middle.
    void paged_view_draws_the_same_boxes_data() {
        QTest::addColumn<double>("from");
        QTest::addColumn<qint64>("width");
        QTest::newRow("quarter") << 0.25 << qint64(-1);
        QTest::newRow("1 ms") << 0.5 << qint64(1'000'000);
        QTest::newRow("20 us") << 0.5 << qint64(20'000);
    }
    void paged_view_draws_the_same_boxes() {
        QFETCH(double, from);
        QFETCH(qint64, width);
        const Layout layout = build_layout(whole_, 1);
        const std::int64_t span = layout.end_ns - layout.start_ns;
        const std::int64_t start = layout.start_ns + static_cast<std::int64_t>(from * span);
        const std::int64_t end = start + (width > 0 ? width : span / 4);
        LaneTreeModel whole_model;
        TimelineCanvas whole_canvas;
        whole_canvas.resize(1200, 900);
        whole_model.set_run(&whole_, &layout);
        whole_canvas.set_data(&whole_, &layout, &whole_model);
        whole_canvas.set_window(start, end);

        auto reader = store::TraceReader::open(run_.toStdString());
        QVERIFY(bool(reader));
        analysis::LoadOptions metadata;
        metadata.read_events = false;
        auto skeleton = analysis::load_run_trace(*reader, metadata);
        QVERIFY(bool(skeleton));
        QCOMPARE(skeleton->event_count(), std::int64_t{0});
        auto summaries = reader->lane_summaries();
        QVERIFY(bool(summaries) && summaries->has_value());
        auto paged = PagedTimeline::open(
            run_.toStdString(), *skeleton,
            std::make_shared<const std::vector<store::LaneSummary>>(std::move(**summaries)));
        QVERIFY2(bool(paged), paged ? "" : paged.error().message.c_str());
        LaneTreeModel paged_model;
        TimelineCanvas paged_canvas;
        paged_canvas.resize(1200, 900);
        paged_model.set_run(&*skeleton, &(*paged)->skeleton_layout());
        paged_canvas.set_data(&*skeleton, &(*paged)->skeleton_layout(), &paged_model);
        paged_canvas.set_paged(paged->get());
        paged_canvas.set_window(start, end);
        QCOMPARE(paged_canvas.content_height(), whole_canvas.content_height());

        QImage whole_image(1200, 900, QImage::Format_RGB32);
        QImage paged_image(1200, 900, QImage::Format_RGB32);
        // First frame: nothing loaded, every row drawn from its summary; it asks for detail.
        paged_canvas.render(&paged_image);
        QVERIFY(paged_canvas.painted_bins() > 0);
        QCOMPARE(paged_canvas.painted_boxes(), std::int64_t{0});
        (*paged)->wait_idle();
        QTRY_VERIFY((*paged)->detail() != nullptr &&
                    paged_canvas.layout() != &(*paged)->skeleton_layout());
        paged_canvas.render(&paged_image);
        whole_canvas.render(&whole_image);
        QCOMPARE(paged_canvas.painted_bins(), std::int64_t{0});
        QVERIFY(whole_canvas.painted_boxes() > 0);
        QCOMPARE(paged_canvas.painted_boxes(), whole_canvas.painted_boxes());
        QCOMPARE(paged_canvas.painted_folds(), whole_canvas.painted_folds());
        QVERIFY(paged_image == whole_image);
        // The detail holds the window's events, not the run's.
        QVERIFY((*paged)->detail()->events < whole_.event_count());

        // A click selects the same event in both, and the details name it.
        const QPointF point(TimelineCanvas::kGutterWidth + 300,
                            TimelineCanvas::kAxisHeight + TimelineCanvas::kHeaderHeight * 2 + 8);
        const auto a = whole_canvas.event_at_point(point);
        const auto b = paged_canvas.event_at_point(point);
        QCOMPARE(a.has_value(), b.has_value());
        if (a) {
            QCOMPARE(paged_canvas.layout()->rows[b->row].lane->events[b->event],
                     layout.rows[a->row].lane->events[a->event]);
        }
    }

    // Through open_run, as the window opens a run: over the threshold the run opens paged,
    // holds no events, and says where its analyses are.
    void open_run_pages_a_large_run() {
        qputenv("FULCRUM_PAGED_EVENTS", "1000");
        auto run = views::open_run(run_);
        qunsetenv("FULCRUM_PAGED_EVENTS");
        QVERIFY2(bool(run), run ? "" : run.error().message.c_str());
        QVERIFY((*run)->paged());
        QCOMPARE((*run)->events, whole_.event_count());
        QCOMPARE((*run)->trace->event_count(), std::int64_t{0});
        QVERIFY((*run)->analysis == nullptr);
        QVERIFY2((*run)->analysis_error.contains(QStringLiteral("a rank at a time")),
                 qPrintable((*run)->analysis_error));
        // Then read a rank at a time: the analyses of the run held whole.
        auto analysed = views::analyse_paged_run(*run);
        QVERIFY2(bool(analysed), analysed ? "" : analysed.error().message.c_str());
        QVERIFY((*analysed)->analysis != nullptr);
        QVERIFY((*analysed)->paged());
        auto held = analysis::analyze_run(whole_);
        QVERIFY(bool(held));
        QCOMPARE(analysis::analysis_json(*(*analysed)->analysis), analysis::analysis_json(*held));

        views::TimelineView view;
        view.resize(1400, 900);
        view.set_run(*run);
        QVERIFY(view.paged() != nullptr);
        QImage image(view.canvas()->size(), QImage::Format_RGB32);
        view.canvas()->render(&image);
        QVERIFY(view.canvas()->painted_bins() > 0);
        view.paged()->wait_idle();
        QTRY_VERIFY(view.paged()->detail() != nullptr);
        view.canvas()->render(&image);
        // The whole run fits the detail budget for the rows in view: drawn event by event.
        QVERIFY(view.canvas()->painted_boxes() + view.canvas()->painted_folds() > 0);

        // Search finds what is loaded, shows the first hit (zooming in) and names it in the
        // details; the hit survives the detail that zoom brings.
        QVERIFY(view.search(QStringLiteral("forward")) > 0);
        QVERIFY(view.canvas()->selected().has_value());
        QVERIFY(view.details()->toPlainText().contains(QStringLiteral("forward")));
        view.canvas()->render(&image);
        view.paged()->wait_idle();
        QCoreApplication::processEvents();
        view.canvas()->render(&image);
        QVERIFY(view.canvas()->selected().has_value());
        QVERIFY(view.details()->toPlainText().contains(QStringLiteral("forward")));
        QVERIFY(!view.hits().empty());

        // Below the threshold the same file loads whole, as before.
        auto small = views::open_run(run_);
        QVERIFY(bool(small));
        QVERIFY(!(*small)->paged());
        QCOMPARE((*small)->trace->event_count(), whole_.event_count());
    }

    // The multi-lane builder a writer going through lanes interleaved uses (merge) gives the
    // same summaries as reading each lane through once.
    void run_builder_equals_the_one_pass_build() {
        auto reader = store::TraceReader::open(run_.toStdString());
        QVERIFY(bool(reader));
        auto stored = reader->lane_summaries();
        QVERIFY(bool(stored) && stored->has_value());
        store::RunSummaryBuilder builder;
        std::vector<LaneId> lanes;
        std::vector<const std::vector<Event>*> by_lane;
        for (const analysis::RankTrace& rank : whole_.ranks) {
            for (const analysis::LaneTrace& lane : rank.lanes) {
                lanes.push_back(lane.info.id);
                by_lane.push_back(&lane.events);
            }
        }
        // Round robin over the lanes, 1000 events at a time.
        for (std::size_t at = 0;; at += 1000) {
            bool any = false;
            for (const std::vector<Event>* events : by_lane) {
                for (std::size_t i = at; i < std::min(events->size(), at + 1000); ++i) {
                    builder.add((*events)[i]);
                    any = true;
                }
            }
            if (!any) {
                break;
            }
        }
        lanes.push_back(LaneId{9999});  // a lane without events still gets its row
        const std::vector<store::LaneSummary> built = std::move(builder).finish(lanes);
        QCOMPARE(built.size(), (*stored)->size() + 1);
        for (std::size_t i = 0; i < (*stored)->size(); ++i) {
            const store::LaneSummary& a = built[i];
            const store::LaneSummary& b = (**stored)[i];
            QCOMPARE(a.lane, b.lane);
            QCOMPARE(a.events, b.events);
            QCOMPARE(a.depths, b.depths);
            QCOMPARE(a.levels.size(), b.levels.size());
            for (std::size_t l = 0; l < a.levels.size(); ++l) {
                QCOMPARE(a.levels[l].shift, b.levels[l].shift);
                QVERIFY(a.levels[l].bins == b.levels[l].bins);
            }
        }
        QCOMPARE(built.back().lane, LaneId{9999});
        QCOMPARE(built.back().events, std::int64_t{0});
    }

    void damaged_summaries_fall_back_with_a_message() {
        const QString path = copy_of_run("damaged.fulcrum");
        QVERIFY(!path.isEmpty());
        exec_sql(path, "UPDATE lane_summary SET data = x'28b52ffd0000' WHERE lane = 2");
        auto reader = store::TraceReader::open(path.toStdString());
        QVERIFY(bool(reader));
        auto summaries = reader->lane_summaries();
        QVERIFY(!bool(summaries));
        QCOMPARE(summaries.error().code, ErrorCode::corrupt);
        QVERIFY2(QString::fromStdString(summaries.error().message).contains("lane 2"),
                 summaries.error().message.c_str());

        qputenv("FULCRUM_PAGED_EVENTS", "0");
        auto run = views::open_run(path);
        qunsetenv("FULCRUM_PAGED_EVENTS");
        QVERIFY(bool(run));
        QVERIFY(!(*run)->paged());
        QCOMPARE((*run)->trace->event_count(), whole_.event_count());
        QVERIFY2((*run)->notice.contains(QStringLiteral("damaged")), qPrintable((*run)->notice));
        QVERIFY((*run)->notice.contains(QStringLiteral("loaded the run whole")));

        // So does a lane without its row.
        exec_sql(path,
                 "UPDATE lane_summary SET data = (SELECT data FROM lane_summary WHERE lane = 1) "
                 "WHERE lane = 2; DELETE FROM lane_summary WHERE lane = 3");
        qputenv("FULCRUM_PAGED_EVENTS", "0");
        auto missing_lane = views::open_run(path);
        qunsetenv("FULCRUM_PAGED_EVENTS");
        QVERIFY(bool(missing_lane));
        QVERIFY(!(*missing_lane)->paged());
        QVERIFY2((*missing_lane)->notice.contains(QStringLiteral("miss lane 3")),
                 qPrintable((*missing_lane)->notice));

        // A format from a newer build reads as damaged too, not as garbage.
        exec_sql(path, "UPDATE lane_summary SET format = 99");
        auto newer = store::TraceReader::open(path.toStdString());
        QVERIFY(bool(newer));
        QVERIFY(!bool(newer->lane_summaries()));
    }

    void missing_summaries_are_built_once_or_fall_back() {
        const QString path = copy_of_run("missing.fulcrum");
        QVERIFY(!path.isEmpty());
        exec_sql(path, "DROP TABLE lane_summary");
        {
            auto reader = store::TraceReader::open(path.toStdString());
            QVERIFY(bool(reader));
            auto none = reader->lane_summaries();
            QVERIFY(bool(none) && !none->has_value());
        }
        // A file that cannot be written: loaded whole, with the reason.
        QFile::setPermissions(path, QFile::ReadOwner);
        qputenv("FULCRUM_PAGED_EVENTS", "0");
        auto whole = views::open_run(path);
        QVERIFY(bool(whole));
        if (::geteuid() != 0) {  // root writes read-only files
            QVERIFY(!(*whole)->paged());
            QVERIFY2((*whole)->notice.contains(QStringLiteral("could not add timeline summaries")),
                     qPrintable((*whole)->notice));
        }
        // A writable one gets its summaries on open and pages.
        QFile::setPermissions(path, QFile::ReadOwner | QFile::WriteOwner);
        auto paged = views::open_run(path);
        qunsetenv("FULCRUM_PAGED_EVENTS");
        QVERIFY(bool(paged));
        QVERIFY((*paged)->paged());
        QCOMPARE((*paged)->events, whole_.event_count());
    }
};

QTEST_MAIN(TestPagedTimeline)
#include "test_paged_timeline.moc"
