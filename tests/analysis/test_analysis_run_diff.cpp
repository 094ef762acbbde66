// The diff of two runs and of two steps by name, per step, on hand-built runs.
#include <QTest>

#include "core/analysis/run_diff.h"

using namespace fulcrum;
using namespace fulcrum::analysis;

namespace {

Event& kernel(RunTrace& trace, LaneTrace& lane, std::string_view name, std::int64_t start,
              std::int64_t end, int step) {
    Event& e = trace.add_range(lane, name, Category::compute, start, end, step);
    e.kind = EventKind::kernel;
    return e;
}

}  // namespace

class RunDiffTest : public QObject {
    Q_OBJECT

private slots:
    // A: 2 steps, each with gemm 100 and softmax 40; B: 1 step with gemm 150 and flash 30.
    // Per step: gemm 100 → 150 (+50), softmax 40 → 0 (removed), flash 0 → 30 (added); the
    // step ranges are containers and left out.
    void twoRuns() {
        RunTrace a, b;
        auto& la = a.add_lane(0, LaneKind::gpu_stream, "stream 7");
        auto& ha = a.add_lane(0, LaneKind::host_thread, "main");
        for (int step = 0; step < 2; ++step) {
            a.add_range(ha, "step", Category::schedule, step * 1000, step * 1000 + 500, step);
            kernel(a, la, "gemm", step * 1000, step * 1000 + 100, step);
            kernel(a, la, "softmax", step * 1000 + 100, step * 1000 + 140, step);
        }
        a.finish();
        auto& lb = b.add_lane(0, LaneKind::gpu_stream, "stream 7");
        kernel(b, lb, "gemm", 0, 150, 0);
        kernel(b, lb, "flash", 150, 180, 0);
        b.finish();
        const RunDiff diff = diff_runs({&a, std::nullopt}, {&b, std::nullopt});
        QCOMPARE(diff.steps_a, 2);
        QCOMPARE(diff.steps_b, 1);
        QCOMPARE(diff.rows.size(), std::size_t(3));
        QCOMPARE(diff.rows[0].name, std::string("gemm"));
        QCOMPARE(diff.rows[0].delta_ns(), 50.0);
        QCOMPARE(diff.rows[0].count_a, 1.0);
        QCOMPARE(diff.rows[1].name, std::string("softmax"));
        QVERIFY(diff.rows[1].removed());
        QCOMPARE(diff.rows[2].name, std::string("flash"));
        QVERIFY(diff.rows[2].added());
    }

    // Two steps of one run: step 0's gemm 100 against step 1's gemm 300.
    void twoStepsOfOneRun() {
        RunTrace run;
        auto& lane = run.add_lane(0, LaneKind::gpu_stream, "stream 7");
        kernel(run, lane, "gemm", 0, 100, 0);
        kernel(run, lane, "gemm", 1000, 1300, 1);
        run.finish();
        const RunDiff diff = diff_runs({&run, 0}, {&run, 1});
        QCOMPARE(diff.rows.size(), std::size_t(1));
        QCOMPARE(diff.rows[0].total_ns_a, 100.0);
        QCOMPARE(diff.rows[0].total_ns_b, 300.0);
    }
};

QTEST_GUILESS_MAIN(RunDiffTest)
#include "test_analysis_run_diff.moc"
