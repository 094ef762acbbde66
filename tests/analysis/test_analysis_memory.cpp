// Memory per rank (core/analysis/memory.h) on hand-built runs: the fulcrum.memory marks read
// as each rank's measured peak, the prediction that of the memory model for the rank's stage
// under the run's layout, and the notes where either is missing.
#include <QTest>

#include "core/analysis/memory.h"
#include "core/parallel/memory_model.h"

using namespace fulcrum;
using namespace fulcrum::analysis;

namespace {

// A captured two-stage CPU run: pp 2, 4 layers × 64, offloaded checkpoints; `marks` says
// whether each rank wrote its fulcrum.memory mark.
RunTrace two_stage_run(bool marks, std::string backend = "cpu") {
    RunTrace trace;
    trace.run.origin = RunOrigin::captured;
    for (int rank = 0; rank < 2; ++rank) {
        RankInfo info;
        info.rank = rank;
        info.dp = info.tp = info.cp = 0;
        info.pp = rank;
        trace.add_rank(info);
        auto& lane = trace.add_lane(rank, LaneKind::host_thread, "main");
        trace.add_range(lane, "step", Category::schedule, 0, 100);
        if (marks) {
            const std::string payload = "{\"peak_device_bytes\":" + std::to_string(1000 + rank) +
                                        ",\"peak_pinned_bytes\":" + std::to_string(10 * rank) + "}";
            trace.add_range(lane, "fulcrum.memory " + payload, Category::schedule, 100, 100).kind =
                EventKind::mark;
        }
        // Another mark, and a malformed memory mark: neither is a peak.
        trace.add_range(lane, "fulcrum.memory not json", Category::schedule, 50, 50).kind =
            EventKind::mark;
    }
    trace.finish();
    trace.config.model = {.layers = 4, .hidden = 64, .heads = 4, .context = 256, .vocab = 256};
    trace.config.layout.grid = {.dp = 1, .tp = 1, .pp = 2, .cp = 1};
    trace.config.layout.microbatches = 4;
    trace.config.layout.recompute = parallel::Recompute::full;
    trace.config.layout.offload_checkpoints = true;
    trace.config.layout.zero_stage = 1;
    trace.config.backend = std::move(backend);
    return trace;
}

}  // namespace

class MemoryTest : public QObject {
    Q_OBJECT

private slots:
    void measuredBesidePredicted() {
        const RunTrace trace = two_stage_run(true);
        const MemoryAnalysis memory = analyze_memory(trace);
        QCOMPARE(memory.techniques, std::string("recompute full, ZeRO-1, offloaded checkpoints"));
        QVERIFY2(memory.note.empty(), memory.note.c_str());
        QCOMPARE(memory.ranks.size(), 2u);
        parallel::MemoryShape shape;
        shape.precision = parallel::Precision::fp32();
        shape.model = trace.config.model;
        shape.layout = trace.config.layout;
        for (const RankMemory& r : memory.ranks) {
            QCOMPARE(r.stage, r.rank);
            QCOMPARE(r.peak_bytes.value(), 1000 + r.rank);
            QCOMPARE(r.peak_pinned_bytes.value(), 10 * r.rank);
            const parallel::EngineMemory expected = parallel::engine_stage_memory(shape, r.stage);
            QCOMPARE(r.predicted_bytes.value(), expected.peak_bytes());
            QCOMPARE(r.predicted_pinned_bytes.value(), expected.pinned_bytes);
            QCOMPARE(r.model_state_bytes, expected.model_state_bytes);
            QVERIFY(r.predicted_pinned_bytes.value() > 0);  // the offloaded checkpoints
        }
        // The first stage holds wpe, the last lnf: their model states differ.
        QVERIFY(memory.ranks[0].model_state_bytes != memory.ranks[1].model_state_bytes);
        const auto stages = memory_by_stage(memory);
        QCOMPARE(stages.size(), 2u);
        QCOMPARE(stages[1].fullest.rank, 1);
    }

    void missingPartsAreSaid() {
        const MemoryAnalysis gpu = analyze_memory(two_stage_run(true, "cuda"));
        QCOMPARE(gpu.ranks.size(), 2u);
        QVERIFY(!gpu.ranks[0].predicted_bytes);
        QVERIFY2(gpu.note.find("no prediction") != std::string::npos &&
                     gpu.note.find("on cuda") != std::string::npos,
                 gpu.note.c_str());
        const MemoryAnalysis unmeasured = analyze_memory(two_stage_run(false));
        QCOMPARE(unmeasured.ranks.size(), 2u);
        QVERIFY(!unmeasured.ranks[0].peak_bytes && unmeasured.ranks[0].predicted_bytes);
        QVERIFY2(unmeasured.note.find("no measured peak") != std::string::npos,
                 unmeasured.note.c_str());
        RunTrace foreign = two_stage_run(false, "");
        foreign.run.origin = RunOrigin::imported;
        QVERIFY(analyze_memory(foreign).ranks.empty());  // nothing measured, nothing predicted
    }
};

QTEST_GUILESS_MAIN(MemoryTest)
#include "test_analysis_memory.moc"
