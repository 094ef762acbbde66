// A real capture of fulcrum-train: `fulcrum capture -- mpirun -np 4 fulcrum-train --pp 2
// --cp 2`, then the run database is checked for what the analyses need from the engine's
// annotations (docs/annotations.md). And captures of the interleaved and ZB-H1 schedules: every
// pass says its model chunk and its kind (F, B, W), and the analyses find them.
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <map>
#include <set>

#include "core/analysis/collectives.h"
#include "core/analysis/memory.h"
#include "core/analysis/passes.h"
#include "core/analysis/run_trace.h"
#include "core/parallel/memory_model.h"
#include "core/store/trace_reader.h"
#include "core/trace/annotations.h"
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
                      {"capture",
                       "-o",
                       capture_dir,
                       "--",
                       FULCRUM_MPIRUN,
                       "-np",
                       "4",
                       FULCRUM_BINARY_DIR "/engine/fulcrum-train",
                       "--pp",
                       "2",
                       "--cp",
                       "2",
                       "--balancer",
                       "wlb",
                       "--lengths",
                       "long-tail:context=256,median=48",
                       "--context",
                       "256",
                       "--micro-batches",
                       QString::number(kMicrobatches),
                       "--layers",
                       "2",
                       "--hidden",
                       "32",
                       "--steps",
                       QString::number(kSteps)});
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
        // No --stage-layers: no split in the configuration, and the analyses take the even one.
        const RunConfig config = parse_run_config(trace->run().config_json, trace->ranks());
        QVERIFY(config.layout.stage_layers.empty());
        QCOMPARE(analysis::stage_layer_count(config, 1), 1);
    }

    // Each rank's fulcrum.memory mark comes through the capture: the memory analysis finds
    // every rank's peak, more than its stage's model state alone, beside a prediction. (Not
    // equal to it: these micro-batches vary, and a buffer that grows is held twice for a
    // moment; test_train_memory holds the prediction to full, equal micro-batches.)
    void everyRankSaysItsPeakMemory() {
        auto reader = store::TraceReader::open(run_path_);
        QVERIFY(reader.ok());
        auto trace = analysis::load_run_trace(*reader);
        QVERIFY(trace.ok());
        const analysis::MemoryAnalysis memory = analysis::analyze_memory(*trace);
        QCOMPARE(memory.ranks.size(), 4u);
        QVERIFY2(memory.note.empty(), memory.note.c_str());
        for (const analysis::RankMemory& r : memory.ranks) {
            QCOMPARE(r.stage, r.rank / 2);
            QVERIFY(r.peak_bytes && r.predicted_bytes);
            QVERIFY2(*r.predicted_bytes > 0 && double(*r.peak_bytes) > r.model_state_bytes,
                     qPrintable(QString("rank %1: peak %2, predicted %3")
                                    .arg(r.rank)
                                    .arg(*r.peak_bytes)
                                    .arg(*r.predicted_bytes)));
        }
    }

    void everyStepMicroBatchAndPhaseIsThere() {
        auto trace = store::TraceReader::open(run_path_);
        for (const auto& rank : trace->ranks()) {
            std::set<std::tuple<int, int, int>> passes;  // step, micro-batch, phase
            std::set<int> steps;
            int collectives_with_bytes = 0, attention = 0, wrong_stage = 0, memory_marks = 0;
            for (const auto& lane : trace->lanes_of_rank(rank.rank)) {
                // Ranges nest on their lane: sorted by start (end descending), each range
                // ends before the enclosing one does.
                std::vector<std::int64_t> open;
                QVERIFY(trace
                            ->for_each_event(
                                lane.id,
                                [&](const Event& e) {
                                    const std::string_view name = trace->string(e.name);
                                    if (e.kind != EventKind::mark) {
                                        while (!open.empty() && open.back() <= e.start_ns) {
                                            open.pop_back();
                                        }
                                        if (!open.empty() && e.end_ns > open.back()) {
                                            qWarning("range %s overlaps its parent",
                                                     std::string(name).c_str());
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
                                    memory_marks += e.kind == EventKind::mark &&
                                                    name.starts_with("fulcrum.memory");
                                    if (e.kind == EventKind::collective && e.bytes > 0) {
                                        ++collectives_with_bytes;
                                    }
                                    return true;
                                })
                            .ok());
                QVERIFY2(open.size() < 1000, "nesting check stopped early");
            }
            QCOMPARE(wrong_stage, 0);
            QCOMPARE(int(steps.size()), kSteps);
            // wlb gives exactly N micro-batches per step; each has a forward and a backward.
            QCOMPARE(int(passes.size()), kSteps * kMicrobatches * 2);
            QVERIFY(attention > 0);
            QVERIFY(collectives_with_bytes > 0);
            QCOMPARE(memory_marks, 1);  // the rank's peak, at the end
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

// Captures `fulcrum-train` on `ranks` ranks with `args` into `directory`; the run's path.
std::string capture_ranks(const QString& directory, int ranks, const QStringList& args) {
    QProcess process;
    process.setProcessEnvironment(mpi_environment());
    process.setProcessChannelMode(QProcess::MergedChannels);
    process.start(FULCRUM_BINARY_DIR "/app/fulcrum",
                  QStringList{"capture",
                              "-o",
                              directory,
                              "--",
                              FULCRUM_MPIRUN,
                              "-np",
                              QString::number(ranks),
                              FULCRUM_BINARY_DIR "/engine/fulcrum-train",
                              "--lengths",
                              "lognormal:median=40,sigma=0.9",
                              "--context",
                              "128",
                              "--micro-batches",
                              QString::number(kMicrobatches),
                              "--layers",
                              "4",
                              "--hidden",
                              "32",
                              "--steps",
                              QString::number(kSteps)} +
                      args);
    if (!process.waitForFinished(300'000) || process.exitCode() != 0) {
        qWarning("%s", process.readAll().constData());
        return {};
    }
    return (directory + "/run.fulcrum").toStdString();
}

// The same on 2 ranks of a pipeline of 2 stages.
std::string capture_two_ranks(const QString& directory, const QStringList& args) {
    return capture_ranks(directory, 2, QStringList{"--pp", "2"} + args);
}

class ScheduleCaptureTest : public QObject {
    Q_OBJECT

    QTemporaryDir work_;

private slots:
    // Interleaved, 2 chunks per stage: every micro-batch of every step has one forward and
    // one backward through each chunk on each stage, each with its chunk in args, and each
    // range inside a pass has the pass's chunk. ZB-H1: each micro-batch has one forward, one
    // backward (B) and one "weight gradients" pass (phase wgrad, W), which find_passes files
    // as weight_grad.
    void passesCarryTheirChunkAndKind_data() {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<int>("chunks");
        QTest::addColumn<bool>("split");
        QTest::newRow("interleaved")
            << QStringList{"--schedule", "interleaved", "--virtual-stages", "2"} << 2 << false;
        QTest::newRow("zb-h1") << QStringList{"--schedule", "zb-h1"} << 1 << true;
    }
    void passesCarryTheirChunkAndKind() {
        QFETCH(QStringList, args);
        QFETCH(int, chunks);
        QFETCH(bool, split);
        const std::string path = capture_two_ranks(work_.filePath(QTest::currentDataTag()), args);
        QVERIFY(!path.empty());
        auto reader = store::TraceReader::open(path);
        QVERIFY2(reader.ok(), reader.ok() ? "" : reader.error().message.c_str());
        QVERIFY(reader->run().config_json.find("\"virtual_stages\":" + std::to_string(chunks)) !=
                std::string::npos);
        for (const auto& rank : reader->ranks()) {
            // (step, micro-batch, phase, chunk) of every pass range
            std::map<std::tuple<int, int, int, int>, int> passes;
            int without_chunk = 0, inner = 0, inner_other_chunk = 0, wrong_kind = 0;
            std::int64_t pass_end = -1;
            int pass_chunk = -1;
            for (const auto& lane : reader->lanes_of_rank(rank.rank)) {
                pass_end = -1;
                QVERIFY(reader
                            ->for_each_event(
                                lane.id,
                                [&](const Event& e) {
                                    const std::string_view name = reader->string(e.name);
                                    const int chunk = chunk_of_args(reader->string(e.args));
                                    if (name == range_name::kForward ||
                                        name == range_name::kBackward ||
                                        name == range_name::kWeightGradients) {
                                        without_chunk += chunk < 0;
                                        ++passes[{e.step, e.microbatch, int(e.phase), chunk}];
                                        wrong_kind += (name == range_name::kWeightGradients) !=
                                                      (e.phase == Phase::weight_grad);
                                        pass_end = e.end_ns;
                                        pass_chunk = chunk;
                                    } else if (e.start_ns < pass_end && e.kind != EventKind::mark) {
                                        ++inner;
                                        inner_other_chunk += chunk != pass_chunk;
                                    }
                                    return true;
                                })
                            .ok());
            }
            QCOMPARE(without_chunk, 0);
            QVERIFY(inner > 0);
            QCOMPARE(inner_other_chunk, 0);
            QCOMPARE(wrong_kind, 0);
            // Each kind once per step, micro-batch and chunk.
            const int kinds = split ? 3 : 2;
            QCOMPARE(int(passes.size()), kSteps * kMicrobatches * chunks * kinds);
            for (const auto& [key, count] : passes) {
                QCOMPARE(count, 1);
                QVERIFY(std::get<3>(key) >= 0 && std::get<3>(key) < chunks);
                QVERIFY(split || std::get<2>(key) != int(Phase::weight_grad));
            }
        }
        // The analyses see the same passes, W as weight_grad work of its own.
        auto trace = analysis::load_run_trace(*reader);
        QVERIFY(trace.ok());
        const auto found = analysis::find_passes(*trace);
        std::map<Phase, int> by_phase;
        for (const auto& pass : found) {
            ++by_phase[pass.phase];
        }
        const int per_rank = kSteps * kMicrobatches * chunks;
        QCOMPARE(by_phase[Phase::forward], 2 * per_rank);
        QCOMPARE(by_phase[Phase::backward], 2 * per_rank);
        QCOMPARE(by_phase[Phase::weight_grad], split ? 2 * per_rank : 0);
    }

    // Every communication range the engine writes is a collective of one of its communicators
    // or a pipeline transfer: matched within its group, never across the run. DP 2 × TP 2
    // with sequence parallelism (tp all-gather, tp reduce-scatter) and the overlapped DP
    // reduction (its started layers' `dp all-reduce start`, the host calls that begin them,
    // are runtime work, not collectives).
    void everyCollectiveIsMatchedInItsCommunicator() {
        const std::string path = capture_ranks(
            work_.filePath("dp2tp2sp"), 4,
            {"--dp", "2", "--tp", "2", "--sequence-parallel", "--overlap-grad-reduce", "on"});
        QVERIFY(!path.empty());
        auto reader = store::TraceReader::open(path);
        QVERIFY2(reader.ok(), reader.ok() ? "" : reader.error().message.c_str());
        auto trace = analysis::load_run_trace(*reader);
        QVERIFY(trace.ok());
        std::map<std::string, int> instances;
        for (const analysis::CollectiveInstance& instance : analysis::match_collectives(*trace)) {
            const std::string name(trace->name(instance.name));
            QVERIFY2(instance.role != analysis::Role::collective, name.c_str());
            QVERIFY2(instance.participants.size() == 2, name.c_str());
            ++instances[name];
        }
        QVERIFY(instances[std::string(range_name::kTpAllGather)] > 0);
        QVERIFY(instances[std::string(range_name::kTpReduceScatter)] > 0);
        QVERIFY(instances[std::string(range_name::kDpAllReduce)] > 0);
        QCOMPARE(instances.count(std::string(range_name::kDpAllReduceWait)), std::size_t(0));

        // The overlapped reduction's ranges carry the bytes their calls moved: the layers'
        // starts and the rest's `dp all-reduce gradients` together the whole gradient buffer
        // (a quarter of the model state: parameters, gradients and two moments, fp32), each
        // byte once; then a `dp all-reduce wait` of no bytes, the wait the overlap left.
        const parallel::MemoryShape shape =
            parallel::engine_memory_shape(trace->config.model, trace->config.layout, 0, false);
        const auto buffer_bytes =
            std::llround(parallel::engine_stage_memory(shape, 0).model_state_bytes / 4);
        for (const analysis::RankTrace& rank : trace->ranks) {
            std::map<int, std::int64_t> reduced;          // by step
            std::map<int, std::int64_t> rest_end, waits;  // by step
            for (const analysis::LaneTrace& lane : rank.lanes) {
                for (const Event& event : lane.events) {
                    const std::string_view name = trace->name(event.name);
                    if (name == range_name::kDpAllReduceStart || name == range_name::kDpAllReduce) {
                        reduced[event.step] += event.bytes;
                        if (name == range_name::kDpAllReduce) {
                            rest_end[event.step] = event.end_ns;
                        }
                    } else if (name == range_name::kDpAllReduceWait) {
                        QVERIFY(event.bytes < 0);
                        QVERIFY(event.start_ns >= rest_end[event.step]);
                        ++waits[event.step];
                    }
                }
            }
            QCOMPARE(int(reduced.size()), kSteps);
            for (const auto& [step, bytes] : reduced) {
                QCOMPARE(bytes, buffer_bytes);
                QCOMPARE(waits[step], std::int64_t(1));
            }
        }
    }
};

int main(int argc, char** argv) {
    QCoreApplication app(argc, argv);
    TrainCaptureTest capture;
    ScheduleCaptureTest schedules;
    return QTest::qExec(&capture, argc, argv) | QTest::qExec(&schedules, argc, argv);
}
#include "test_train_capture.moc"
