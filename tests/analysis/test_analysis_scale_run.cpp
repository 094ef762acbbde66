// Issue 37's check on the scale runs' own shape: a run of make_scale_run's 4D job (bench/common/
// scale_run.h; here TP 4 × PP 8 × CP 2, a few steps of 8 micro-batches) analysed held whole
// (analyze_run on every event in memory) and read a rank at a time (analyze_run_file: the
// workload summed in one scan and read back a step at a time, collectives and pipeline
// transfers matched as the ranks come in) gives the same JSON, byte for byte; so does the
// latter with its passes in a temporary file (PassTable), read back a window of steps at a time.
#include <QTemporaryDir>
#include <QTest>

#include "bench/common/scale_run.h"
#include "core/analysis/run_analysis.h"
#include "core/analysis/run_trace.h"
#include "core/store/trace_reader.h"

using namespace fulcrum;

class ScaleRunAnalysisTest : public QObject {
    Q_OBJECT

    QTemporaryDir dir_;

private slots:
    void heldAndStreamedAgree_data() {
        QTest::addColumn<int>("dp");
        QTest::newRow("tp4 pp8 cp2") << 1;
        QTest::newRow("dp2 tp4 pp8 cp2") << 2;
    }

    void heldAndStreamedAgree() {
        QFETCH(int, dp);
        QVERIFY(dir_.isValid());
        bench::ScaleRunOptions options;
        options.dp = dp;
        options.microbatches = 8;
        options.layers = 8;  // one a stage
        options.tokens_per_microbatch = 8192;
        options.target_events = 150'000 * dp;
        const std::string path = dir_.filePath(QString("scale-dp%1.fulcrum").arg(dp)).toStdString();
        auto written = bench::make_scale_run(path, options);
        QVERIFY2(bool(written), written ? "" : written.error().message.c_str());
        QVERIFY(written->steps >= 2);

        auto reader = store::TraceReader::open(path);
        QVERIFY(bool(reader));
        auto whole = analysis::load_run_trace(*reader);
        QVERIFY(bool(whole));
        QCOMPARE(whole->event_count(), written->events);
        auto held = analysis::analyze_run(*whole);
        QVERIFY2(bool(held), held ? "" : held.error().message.c_str());

        analysis::RunTrace metadata;
        auto streamed = analysis::analyze_run_file(*reader, metadata);
        QVERIFY2(bool(streamed), streamed ? "" : streamed.error().message.c_str());
        QCOMPARE(metadata.event_count(), std::int64_t{0});  // its events were never kept
        // The rows come back for the caller (a report's throughput), all of them.
        QCOMPARE(metadata.workload.size(), whole->workload.size());

        const std::string json = analysis::analysis_json(*held);
        QCOMPARE(analysis::analysis_json(*streamed), json);
        // The passes and the pipeline pairs in temporary files from the first, the passes read
        // back a step at a time by the analyses that go by steps (bubbles, critical path), as a
        // run of many steps has them.
        analysis::AnalyzeOptions spilling;
        spilling.scratch_memory_bytes = 0;
        auto spilled = analysis::analyze_run_file(*reader, metadata, spilling);
        QVERIFY2(bool(spilled), spilled ? "" : spilled.error().message.c_str());
        QCOMPARE(analysis::analysis_json(*spilled), json);
        // What the streamed path matches across ranks is there to compare: CP groups predicted
        // from the workload's rows, a cost model fitted with the pipeline's matched transfers,
        // and bubbles on every stage.
        QVERIFY(json.find("\"groups\":[{\"step\"") != std::string::npos);
        QVERIFY(held->cost_model.has_value());
        QCOMPARE(held->cp_load.cp.value_or(0), 2);
        QCOMPARE(held->events, written->events);
    }
};

QTEST_GUILESS_MAIN(ScaleRunAnalysisTest)
#include "test_analysis_scale_run.moc"
