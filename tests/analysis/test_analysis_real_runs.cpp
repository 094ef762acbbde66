// The analyses on a real captured run: `fulcrum capture -- mpirun -np 4 fulcrum-train --pp 4
// --schedule gpipe`, analysed in process and through `fulcrum analyze`. Timing on a shared
// 2-core machine is noise, so this checks what must hold on any run (parts add up, every pass
// is found and joined to its workload, the theory is right); the measured bubble against the
// theory is a figure of bench/analysis/real_runs.sh.
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QJsonParseError>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include "core/analysis/run_analysis.h"
#include "core/store/trace_reader.h"
#include "tests/train/mpi_environment.h"

using namespace fulcrum;
using namespace fulcrum::analysis;

namespace {

constexpr int kSteps = 3;
constexpr int kMicrobatches = 6;
constexpr int kStages = 4;

}  // namespace

class RealRunsTest : public QObject {
    Q_OBJECT

    QTemporaryDir work_;
    std::string run_path_;
    RunTrace trace_;
    RunAnalysis analysis_;

    QByteArray fulcrum(const QStringList& arguments, int& exit_code) {
        QProcess process;
        process.start(FULCRUM_BINARY_DIR "/app/fulcrum", arguments);
        process.waitForFinished(300'000);
        exit_code = process.exitCode();
        return process.readAllStandardOutput() + process.readAllStandardError();
    }

private slots:
    void initTestCase() {
        QProcess process;
        process.setProcessEnvironment(mpi_environment());
        process.setProcessChannelMode(QProcess::MergedChannels);
        const QString capture_dir = work_.filePath("gpipe");
        process.start(FULCRUM_BINARY_DIR "/app/fulcrum",
                      {"capture",
                       "-o",
                       capture_dir,
                       "--",
                       FULCRUM_MPIRUN,
                       "-np",
                       "4",
                       FULCRUM_BINARY_DIR "/engine/fulcrum-train",
                       "--pp",
                       "4",
                       "--schedule",
                       "gpipe",
                       "--lengths",
                       "long-tail:context=256,median=48",
                       "--context",
                       "256",
                       "--micro-batches",
                       QString::number(kMicrobatches),
                       "--layers",
                       "4",
                       "--hidden",
                       "32",
                       "--steps",
                       QString::number(kSteps)});
        QVERIFY(process.waitForFinished(300'000));
        QVERIFY2(process.exitCode() == 0, process.readAll().constData());
        run_path_ = (capture_dir + "/run.fulcrum").toStdString();
        auto reader = store::TraceReader::open(run_path_);
        QVERIFY2(reader.ok(), reader.ok() ? "" : reader.error().message.c_str());
        auto trace = load_run_trace(*reader);
        QVERIFY2(trace.ok(), trace.ok() ? "" : trace.error().message.c_str());
        trace_ = std::move(*trace);
        auto analysis = analyze_run(trace_);
        QVERIFY2(analysis.ok(), analysis.ok() ? "" : analysis.error().message.c_str());
        analysis_ = std::move(*analysis);
    }

    // The same capture read a rank at a time (analyze_run_file, issue 37): the same JSON.
    void fileReadARankAtATimeEqualsTheRunInMemory() {
        auto reader = store::TraceReader::open(run_path_);
        QVERIFY(reader.ok());
        RunTrace metadata;
        auto streamed = analyze_run_file(*reader, metadata);
        QVERIFY2(streamed.ok(), streamed.ok() ? "" : streamed.error().message.c_str());
        QCOMPARE(analysis_json(*streamed), analysis_json(analysis_));
        QCOMPARE(metadata.event_count(), std::int64_t{0});
    }

    void configAndPassesAreComplete() {
        QCOMPARE(trace_.config.layout.grid.pp, kStages);
        QCOMPARE(schedule_text(trace_.config), std::string("gpipe"));
        QCOMPARE(trace_.config.layout.microbatches, kMicrobatches);
        // The CPU backend's dW GEMM rates, hot and with cold caches (ZB-H1's W, simulated).
        QVERIFY(trace_.config.gemm_gflops > 0);
        QVERIFY(trace_.config.gemm_gflops_cold > 0);
        // Every rank runs a forward and a backward of every micro-batch of every step.
        QCOMPARE(analysis_.passes, std::int64_t{kStages * kSteps * kMicrobatches * 2});
        QVERIFY2(analysis_.notes.empty(),
                 analysis_.notes.empty() ? "" : analysis_.notes.front().c_str());
        // Each pass carries the CPU its thread used (the engine's `fulcrum.cpu` mark after it),
        // which a thread cannot use more of than the pass's wall time.
        for (const Pass& pass : find_passes(trace_)) {
            QVERIFY2(pass.cpu_ns >= 0, qPrintable(QString("rank %1 step %2 mb %3 has no CPU time")
                                                      .arg(pass.rank)
                                                      .arg(pass.step)
                                                      .arg(pass.microbatch)));
            QVERIFY(pass.cpu_ns <= pass.wall_ns() + 100'000);
        }
    }

    void breakdownAddsUpOnEveryRankAndStep() {
        QCOMPARE(analysis_.breakdown.size(), std::size_t{kStages * kSteps});
        for (const auto& row : analysis_.breakdown) {
            QCOMPARE(row.compute_ns + row.exposed_communication_ns + row.other_ns + row.idle_ns,
                     row.wall_ns());
            QVERIFY(row.compute_ns > 0);
            QCOMPARE(row.overlapped_communication_ns, 0);  // one CPU thread per rank
        }
    }

    void bubblesHaveTheirTheoryAndParts() {
        const auto& bubbles = analysis_.bubbles;
        QCOMPARE(bubbles.schedule, std::string("gpipe"));
        QCOMPARE(bubbles.theory_fraction.value(), double(kStages - 1) / kMicrobatches);
        QCOMPARE(bubbles.pipelines.size(), std::size_t{kSteps});
        QCOMPARE(bubbles.stages.size(), std::size_t{kSteps * kStages});
        for (const auto& stage : bubbles.stages) {
            QCOMPARE(stage.warmup_cooldown_ns + stage.unequal_microbatch_ns + stage.other_ns,
                     stage.bubble_ns);
            QVERIFY(stage.busy_ns > 0);
            QVERIFY(stage.busy_ns <= stage.window_ns);
            QCOMPARE(stage.rank.value(), stage.stage);  // picotron order, pp only
            if (stage.stage == 0) {
                QCOMPARE(stage.wait_on_previous_ns, 0);  // no stage before the first
            }
            if (stage.stage == kStages - 1) {
                QCOMPARE(stage.wait_on_next_ns, 0);
            }
        }
        // Later stages wait for their first activations: the warm-up is real.
        for (const auto& stage : bubbles.stages) {
            if (stage.stage == kStages - 1) {
                QVERIFY(stage.wait_on_previous_ns > 0);
            }
        }
    }

    void costModelIsFittedPerStageAndPhase() {
        QVERIFY(analysis_.cost_model.has_value());
        QCOMPARE(analysis_.cost_model->passes.size(), std::size_t{kStages * 2});
        for (const auto& pass : analysis_.cost_model->passes) {
            QCOMPARE(pass.fit.samples, kSteps * kMicrobatches);
            QVERIFY(pass.predict(256, 256 * 257 / 2) > 0);
        }
    }

    void cliPrintsTablesAndJson() {
        int exit_code = -1;
        const QByteArray text = fulcrum({"analyze", QString::fromStdString(run_path_)}, exit_code);
        QVERIFY2(exit_code == 0, text.constData());
        QVERIFY(text.contains("step breakdown"));
        QVERIFY(text.contains("pipeline bubbles (gpipe, theory (p−1)/m = 0.500"));
        QVERIFY(text.contains("cost model"));
        // fulcrum-train records the cores its node's ranks could use; where 4 ranks outnumber
        // them (a 2-core machine), the summary says that passes waited for cores.
        QVERIFY(trace_.config.host_cores > 0);
        QCOMPARE(text.contains("shared by its ranks (4 in all)"), trace_.config.host_cores < 4);

        const QByteArray json =
            fulcrum({"analyze", "--json", QString::fromStdString(run_path_)}, exit_code);
        QCOMPARE(exit_code, 0);
        QJsonParseError error;
        const QJsonDocument document = QJsonDocument::fromJson(json, &error);
        QVERIFY2(error.error == QJsonParseError::NoError, qPrintable(error.errorString()));
        const QJsonObject root = document.object();
        QCOMPARE(root["version"].toInt(), 1);
        QCOMPARE(root["run"].toObject()["pp"].toInt(), kStages);
        QCOMPARE(root["step_breakdown"].toArray().size(), kStages * kSteps);
        QCOMPARE(root["bubbles"].toObject()["stages"].toArray().size(), kStages * kSteps);
        QVERIFY(root["cost_model"].isObject());
        QCOMPARE(
            root["imbalance"].toObject()["compute_by_step"].toObject()["rows"].toArray().size(),
            kStages);
    }

    void cliRejectsBadInput() {
        int exit_code = -1;
        const QString junk = work_.filePath("junk.fulcrum");
        QFile file(junk);
        QVERIFY(file.open(QIODevice::WriteOnly));
        file.write("this is not a run");
        file.close();
        const QByteArray text = fulcrum({"analyze", junk}, exit_code);
        QCOMPARE(exit_code, 2);
        QVERIFY2(text.contains("not"), text.constData());
        fulcrum({"analyze", QString::fromStdString(run_path_), "--top", "0"}, exit_code);
        QCOMPARE(exit_code, 2);
    }
};

QTEST_GUILESS_MAIN(RealRunsTest)
#include "test_analysis_real_runs.moc"
