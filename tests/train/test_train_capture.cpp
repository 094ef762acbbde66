// A real capture of fulcrum-train: `fulcrum capture -- mpirun -np 4 fulcrum-train --pp 2
// --cp 2`, then the run database is checked for what the analyses need from the engine's
// annotations (docs/annotations.md).
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <map>
#include <set>

#include "core/store/trace_reader.h"
#include "tests/train/mpi_environment.h"

using namespace fulcrum;

namespace {

constexpr int kSteps = 3;
constexpr int kMicrobatches = 4;

}  // namespace

class TrainCaptureTest : public QObject {
    Q_OBJECT

    QTemporaryDir work_;
    std::string run_path_;

private slots:
    void initTestCase() {
        QProcess process;
        process.setProcessEnvironment(mpi_environment());
        process.setProcessChannelMode(QProcess::MergedChannels);
        const QString capture_dir = work_.filePath("capture");
        process.start(FULCRUM_BINARY_DIR "/app/fulcrum",
                      {"capture", "-o", capture_dir, "--", FULCRUM_MPIRUN, "-np", "4",
                       FULCRUM_BINARY_DIR "/engine/fulcrum-train", "--pp", "2", "--cp", "2",
                       "--balancer", "wlb", "--lengths", "long-tail:context=256,median=48",
                       "--context", "256", "--micro-batches", QString::number(kMicrobatches),
                       "--layers", "2", "--hidden", "32", "--steps", QString::number(kSteps)});
        QVERIFY(process.waitForFinished(300'000));
        const QString output = QString::fromUtf8(process.readAll());
        QVERIFY2(process.exitCode() == 0, qPrintable(output));
        run_path_ = (capture_dir + "/run.fulcrum").toStdString();
    }

    void ranksCarryTheirCoordinates() {
        auto trace = store::TraceReader::open(run_path_);
        QVERIFY2(trace.ok(), trace.ok() ? "" : trace.error().message.c_str());
        QCOMPARE(trace->ranks().size(), 4u);
        for (const auto& rank : trace->ranks()) {
            // picotron order with tp = dp = 1: rank = pp·2 + cp
            QCOMPARE(rank.pp, rank.rank / 2);
            QCOMPARE(rank.cp, rank.rank % 2);
            QCOMPARE(rank.dp, 0);
            QCOMPARE(rank.tp, 0);
            QVERIFY(rank.complete);
            QCOMPARE(rank.alignment, ClockAlignment::barrier_marks);
        }
        QVERIFY(trace->run().config_json.find("\"balancer\":\"wlb\"") != std::string::npos);
    }

    void everyStepMicroBatchAndPhaseIsThere() {
        auto trace = store::TraceReader::open(run_path_);
        for (const auto& rank : trace->ranks()) {
            std::set<std::tuple<int, int, int>> passes;  // step, micro-batch, phase
            std::set<int> steps;
            int collectives_with_bytes = 0, attention = 0, wrong_stage = 0;
            for (const auto& lane : trace->lanes_of_rank(rank.rank)) {
                // Ranges nest on their lane: sorted by start (end descending), each range
                // ends before the enclosing one does.
                std::vector<std::int64_t> open;
                QVERIFY(trace->for_each_event(lane.id, [&](const Event& e) {
                    const std::string_view name = trace->string(e.name);
                    if (e.kind != EventKind::mark) {
                        while (!open.empty() && open.back() <= e.start_ns) {
                            open.pop_back();
                        }
                        if (!open.empty() && e.end_ns > open.back()) {
                            qWarning("range %s overlaps its parent", std::string(name).c_str());
                            return false;
                        }
                        open.push_back(e.end_ns);
                    }
                    if (name == "step") {
                        steps.insert(e.step);
                    }
                    if (name == "forward" || name == "backward") {
                        wrong_stage += e.stage != rank.pp;
                        passes.insert({e.step, e.microbatch, int(e.phase)});
                    }
                    attention += name == "attention";
                    if (e.kind == EventKind::collective && e.bytes > 0) {
                        ++collectives_with_bytes;
                    }
                    return true;
                }).ok());
                QVERIFY2(open.size() < 1000, "nesting check stopped early");
            }
            QCOMPARE(wrong_stage, 0);
            QCOMPARE(int(steps.size()), kSteps);
            // wlb gives exactly N micro-batches per step; each has a forward and a backward.
            QCOMPARE(int(passes.size()), kSteps * kMicrobatches * 2);
            QVERIFY(attention > 0);
            QVERIFY(collectives_with_bytes > 0);
        }
    }

    // The manifest: for every (step, micro-batch, stage), the two CP ranks together hold
    // every token of every document exactly once.
    void workloadManifestIsComplete() {
        auto trace = store::TraceReader::open(run_path_);
        auto workload = trace->workload();
        QVERIFY(workload.ok());
        QVERIFY(!workload->empty());
        std::map<std::tuple<int, int, int, std::int64_t>, std::vector<int>> held;
        for (const auto& entry : *workload) {
            QCOMPARE(entry.balancer, std::string("wlb"));
            auto& counts = held[{entry.step, entry.microbatch, entry.rank / 2, entry.doc_id}];
            counts.resize(static_cast<std::size_t>(entry.doc_length));
            for (int t = entry.token_begin; t < entry.token_end; ++t) {
                ++counts[static_cast<std::size_t>(t)];
            }
        }
        std::set<std::pair<int, int>> microbatches;
        for (const auto& [key, counts] : held) {
            microbatches.insert({std::get<0>(key), std::get<1>(key)});
            for (int count : counts) {
                QCOMPARE(count, 1);
            }
        }
        QCOMPARE(int(microbatches.size()), kSteps * kMicrobatches);
    }
};

QTEST_GUILESS_MAIN(TrainCaptureTest)
#include "test_train_capture.moc"
