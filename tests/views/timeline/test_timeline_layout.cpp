// The timeline's layout and level of detail on hand-built traces: nesting depths, the sorted
// per-depth index, folding of sub-pixel runs, flows, search, and the lane tree model.
#include <QAbstractItemModelTester>
#include <QTest>

#include "views/timeline/lane_tree_model.h"
#include "views/timeline/timeline_layout.h"

using namespace fulcrum;
using namespace fulcrum::views::timeline;

namespace {

// rank 0: step ⊃ {forward ⊃ {attention, mlp}, backward ⊃ {mark}}; rank 1: one lane, one range.
analysis::RunTrace nested_trace() {
    analysis::RunTrace trace;
    for (int r = 0; r < 4; ++r) {
        RankInfo info;
        info.rank = r;
        info.dp = 0;
        info.pp = r / 2;
        info.cp = r % 2;
        info.tp = 0;
        trace.add_rank(info);
    }
    auto& lane = trace.add_lane(0, LaneKind::host_thread, "main");
    // Added out of order on purpose: finish() sorts into the store's order.
    trace.add_range(lane, "mlp", Category::compute, 20, 40, 0, 0);
    trace.add_range(lane, "step", Category::schedule, 0, 100, 0);
    trace.add_range(lane, "attention", Category::attention, 10, 20, 0, 0);
    trace.add_range(lane, "forward", Category::compute, 0, 50, 0, 0, 0, Phase::forward);
    trace.add_range(lane, "backward", Category::compute, 50, 100, 0, 0, 0, Phase::backward);
    trace.add_range(lane, "mark", Category::other, 60, 60, 0, 0);
    for (int r = 1; r < 4; ++r) {
        auto& other = trace.add_lane(r, LaneKind::host_thread, "main");
        trace.add_range(other, "forward", Category::compute, 5 + r, 45, 0, 1);
    }
    trace.finish();
    return trace;
}

void check_depth_invariant(const LaneRow& row) {
    const auto& events = row.lane->events;
    for (const auto& depth : row.by_depth) {
        for (std::size_t i = 1; i < depth.size(); ++i) {
            QVERIFY(depth[i - 1] < depth[i]);
            QVERIFY(events[depth[i - 1]].end_ns <= events[depth[i]].start_ns);
        }
    }
}

}  // namespace

class TestTimelineLayout : public QObject {
    Q_OBJECT
private slots:
    void depths_of_nested_ranges() {
        const analysis::RunTrace trace = nested_trace();
        const Layout layout = build_layout(trace, 2);
        QCOMPARE(layout.rows.size(), std::size_t(4));
        QCOMPARE(layout.events, std::int64_t(9));
        QCOMPARE(layout.start_ns, std::int64_t(0));
        QCOMPARE(layout.end_ns, std::int64_t(100));
        const LaneRow& row = layout.rows[0];
        QCOMPARE(row.depths(), 3);
        auto names_at = [&](int depth) {
            QStringList names;
            for (std::uint32_t i : row.by_depth[depth]) {
                names << QString::fromStdString(std::string(trace.name(row.lane->events[i].name)));
            }
            return names;
        };
        QCOMPARE(names_at(0), QStringList({"step"}));
        QCOMPARE(names_at(1), QStringList({"forward", "backward"}));
        QCOMPARE(names_at(2), QStringList({"attention", "mlp", "mark"}));
        check_depth_invariant(row);
        for (std::uint32_t i = 0; i < row.lane->events.size(); ++i) {
            QVERIFY(std::find(row.by_depth[row.depth[i]].begin(), row.by_depth[row.depth[i]].end(),
                              i) != row.by_depth[row.depth[i]].end());
        }
        QCOMPARE(layout.rows[1].depths(), 1);
        QCOMPARE(layout.rows[1].rank, 1);
        // Spans: step 0 micro-batch 0 covers forward and backward; the step range itself is
        // micro-batch -1.
        QCOMPARE(layout.spans[0].size(), std::size_t(2));
        for (const WorkSpan& span : layout.spans[0]) {
            QCOMPARE(span.step, 0);
            QCOMPARE(span.start_ns, std::int64_t(0));
            QCOMPARE(span.end_ns, std::int64_t(100));
        }
    }

    void broken_nesting_keeps_depths_disjoint() {
        analysis::RunTrace trace;
        auto& lane = trace.add_lane(0, LaneKind::host_thread, "main");
        // A child that outlives its parent, and a chain of partial overlaps.
        trace.add_range(lane, "parent", Category::compute, 0, 100);
        trace.add_range(lane, "child", Category::compute, 50, 150);
        trace.add_range(lane, "next", Category::compute, 120, 200);
        trace.add_range(lane, "later", Category::compute, 160, 170);
        trace.finish();
        const Layout layout = build_layout(trace);
        check_depth_invariant(layout.rows[0]);
        QCOMPARE(layout.end_ns, std::int64_t(200));
    }

    // Two kernels that overlap on one stream (Kineto rounds to the µs) are stacked, each
    // drawn whole: gemm A [0, 400) on depth 0, gemm B [298, 698) on depth 1, never cut at 400.
    void overlapping_kernels_are_stacked_not_cut() {
        analysis::RunTrace trace;
        auto& lane = trace.add_lane(0, LaneKind::gpu_stream, "stream 7 (device 0)");
        trace.add_range(lane, "gemm A", Category::compute, 0, 400).kind = EventKind::kernel;
        trace.add_range(lane, "gemm B", Category::compute, 298, 698).kind = EventKind::kernel;
        trace.finish();
        const Layout layout = build_layout(trace);
        const LaneRow& row = layout.rows[0];
        QCOMPARE(row.depths(), 2);
        check_depth_invariant(row);
        for (int depth = 0; depth < 2; ++depth) {
            std::vector<PlanItem> items;
            plan_row(row.lane->events, row.by_depth[depth], 0, 1000, 1000.0, 3.0, items);
            QCOMPARE(items.size(), std::size_t(1));
            const Event& event = row.lane->events[items[0].first];
            QCOMPARE(items[0].start_ns, event.start_ns);
            QCOMPARE(items[0].end_ns, event.end_ns);
        }
        QCOMPARE(row.lane->events[row.by_depth[1][0]].end_ns, std::int64_t(698));
        QCOMPARE(layout.end_ns, std::int64_t(698));
    }

    void lod_folds_sub_pixel_runs() {
        // 100000 events of 10 ns every 20 ns (2 ms), then 10 wide ones of 100 µs.
        analysis::RunTrace trace;
        auto& lane = trace.add_lane(0, LaneKind::gpu_stream, "stream 7");
        constexpr int kTiny = 100'000;
        for (int i = 0; i < kTiny; ++i) {
            trace.add_range(lane, "tiny", Category::compute, 20LL * i, 20LL * i + 10);
        }
        const std::int64_t wide_start = 20LL * kTiny + 50'000;
        for (int i = 0; i < 10; ++i) {
            trace.add_range(lane, "wide", Category::communication, wide_start + 150'000LL * i,
                            wide_start + 150'000LL * i + 100'000);
        }
        trace.finish();
        const Layout layout = build_layout(trace);
        const LaneRow& row = layout.rows[0];
        QCOMPARE(row.depths(), 1);
        const auto& events = row.lane->events;
        const auto& index = row.by_depth[0];

        const double width = 1000;
        std::vector<PlanItem> plan;
        plan_row(events, index, layout.start_ns, layout.end_ns, width, 3.0, plan);
        QVERIFY(!plan.empty());
        QVERIFY2(plan.size() <= static_cast<std::size_t>(width),
                 qPrintable(QString::number(plan.size())));
        std::int64_t total = 0;
        int wide = 0;
        for (std::size_t k = 0; k < plan.size(); ++k) {
            const PlanItem& item = plan[k];
            total += item.count;
            // A block runs exactly from its first event's start to its last event's end.
            QCOMPARE(item.start_ns, events[item.first].start_ns);
            QCOMPARE(item.end_ns, events[item.first + item.count - 1].end_ns);
            if (k > 0) {
                QVERIFY(plan[k - 1].end_ns <= item.start_ns);
                QCOMPARE(plan[k - 1].first + plan[k - 1].count, item.first);  // no event skipped
            }
            if (events[item.first].duration_ns() == 100'000) {
                QCOMPARE(item.count, 1u);
                ++wide;
            }
        }
        QCOMPARE(total, static_cast<std::int64_t>(events.size()));
        QCOMPARE(wide, 10);
        QCOMPARE(plan.front().start_ns, std::int64_t(0));
        QCOMPARE(plan.back().end_ns, layout.end_ns);
        // The dense part folds into a handful of blocks, not 100000 boxes.
        QVERIFY(plan.size() <= 10 + 20);

        // Zoomed into 2 µs at 1000 px: 5 px per event, nothing folds.
        plan.clear();
        plan_row(events, index, 1'000'000, 1'002'000, width, 3.0, plan);
        QCOMPARE(plan.size(), std::size_t(100));
        for (const PlanItem& item : plan) {
            QCOMPARE(item.count, 1u);
            QVERIFY(events[item.first].end_ns > 1'000'000 &&
                    events[item.first].start_ns < 1'002'000);
        }
        // A window between events draws nothing; one at the end only what overlaps it.
        plan.clear();
        plan_row(events, index, 1'000'011, 1'000'019, width, 3.0, plan);
        QVERIFY(plan.empty());
        plan.clear();
        plan_row(events, index, layout.end_ns - 10, layout.end_ns + 1'000'000, width, 3.0, plan);
        QCOMPARE(plan.size(), std::size_t(1));
        QCOMPARE(plan[0].count, 1u);

        // Hit testing finds the event under a time and the nearest within a tolerance.
        QCOMPARE(event_at(events, index, 25, 0), std::int64_t(1));
        QCOMPARE(event_at(events, index, 15, 0), std::int64_t(-1));
        QCOMPARE(event_at(events, index, 13, 4), std::int64_t(0));
        QCOMPARE(event_at(events, index, 18, 4), std::int64_t(1));
    }

    void flows_pair_launches_with_kernels_on_one_rank() {
        analysis::RunTrace trace;
        for (int r = 0; r < 2; ++r) {
            auto& host = trace.add_lane(r, LaneKind::host_thread, "main");
            Event& launch =
                trace.add_range(host, "cudaLaunchKernel", Category::runtime, 100 + r, 110 + r);
            launch.kind = EventKind::api;
            launch.correlation = 7;
            auto& stream = trace.add_lane(r, LaneKind::gpu_stream, "stream 7");
            Event& kernel = trace.add_range(stream, "gemm", Category::compute, 150 + r, 300);
            kernel.kind = EventKind::kernel;
            kernel.correlation = 7;
            Event& lonely = trace.add_range(stream, "orphan", Category::compute, 400, 500);
            lonely.correlation = 8;
        }
        trace.finish();
        const Layout layout = build_layout(trace);
        QCOMPARE(layout.flows.size(), std::size_t(2));  // one per rank, never across ranks
        for (const Flow& flow : layout.flows) {
            QCOMPARE(layout.rows[flow.host_row].rank, layout.rows[flow.device_row].rank);
            QCOMPARE(layout.rows[flow.device_row].lane->info.kind, LaneKind::gpu_stream);
            QCOMPARE(flow.kernel_ns - flow.launch_ns, std::int64_t(50));
        }
        QVERIFY(layout.flows[0].kernel_ns <= layout.flows[1].kernel_ns);
    }

    void search_by_name() {
        const analysis::RunTrace trace = nested_trace();
        const Layout layout = build_layout(trace);
        const auto hits = find_by_name(trace, layout, "FORWARD");
        QCOMPARE(hits.size(), std::size_t(4));
        for (std::size_t i = 1; i < hits.size(); ++i) {
            QVERIFY(layout.rows[hits[i - 1].row].lane->events[hits[i - 1].event].start_ns <=
                    layout.rows[hits[i].row].lane->events[hits[i].event].start_ns);
        }
        QCOMPARE(find_by_name(trace, layout, "ward").size(), std::size_t(5));
        QVERIFY(find_by_name(trace, layout, "nothing like it").empty());
        QVERIFY(find_by_name(trace, layout, "").empty());
    }

    void lane_model_groups() {
        const analysis::RunTrace trace = nested_trace();
        const Layout layout = build_layout(trace);
        LaneTreeModel model;
        QAbstractItemModelTester tester(&model,
                                        QAbstractItemModelTester::FailureReportingMode::QtTest);
        model.set_run(&trace, &layout);
        QCOMPARE(model.rowCount(), 2);  // PP stages 0 and 1 by default
        for (Grouping g :
             {Grouping::dp, Grouping::cp, Grouping::tp, Grouping::none, Grouping::pp}) {
            model.set_grouping(g);
        }
        QCOMPARE(model.rowCount(), 2);
        const QModelIndex stage1 = model.index(1, 0);
        QCOMPARE(stage1.data(LaneTreeModel::CoordinateRole).toInt(), 1);
        QCOMPARE(model.rowCount(stage1), 2);
        const QModelIndex rank3 = model.index(1, 0, stage1);
        QCOMPARE(rank3.data(LaneTreeModel::RankRole).toInt(), 3);
        const QModelIndex lane = model.index(0, 0, rank3);
        QCOMPARE(lane.data(LaneTreeModel::LaneRowRole).toInt(), 3);
        QCOMPARE(model.rowCount(lane), 0);
        // Collapsing survives regrouping; lanes cannot be collapsed.
        QVERIFY(model.setData(rank3, false, LaneTreeModel::ExpandedRole));
        QVERIFY(!model.setData(lane, false, LaneTreeModel::ExpandedRole));
        model.set_grouping(Grouping::none);
        QCOMPARE(model.rowCount(), 4);
        QCOMPARE(model.index(3, 0).data(LaneTreeModel::ExpandedRole).toBool(), false);
        model.reveal_rank(3);
        QCOMPARE(model.index(3, 0).data(LaneTreeModel::ExpandedRole).toBool(), true);
    }
};

QTEST_GUILESS_MAIN(TestTimelineLayout)
#include "test_timeline_layout.moc"
