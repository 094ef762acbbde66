// The memory model's prediction of fulcrum-train's own count (core/parallel/memory_model.h,
// engine_stage_memory) against real runs under mpirun: for a matrix of layouts, the peak of
// the backend's counted allocations that fulcrum-train reports for rank 0 and for the first
// rank of the last stage is within 2% of the prediction, and so is the pinned host memory of
// offloaded attention. Issue 16 asks for 10%; the model counts the engine's buffers term by
// term and agrees to the printed KiB, and at 10% a dropped term can hide (ZB-H1 keeping what
// only B reads until W moves the peak by 4%), so the bound is the tighter one. Every row is one
// model (4 layers × 64, context 256) on documents of exactly the context, so every micro-batch
// holds the same tokens and no buffer grows after the first step (the model predicts from the
// second step on). The arguments of each row are read into the MemoryShape, so a row cannot predict
// one layout and run another.
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QTest>

#include <cmath>
#include <map>
#include <set>

#include "core/parallel/memory_model.h"
#include "core/parallel/schedule.h"
#include "tests/train/mpi_environment.h"

using namespace fulcrum;

namespace {

const QString kTrain = QStringLiteral(FULCRUM_BINARY_DIR "/engine/fulcrum-train");
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kTolerance = 0.02;

const QStringList kModel = {"--steps",    "2",       "--layers",    "4",         "--hidden",
                            "64",         "--heads", "4",           "--context", "256",
                            "--balancer", "fixed",   "--documents", "64"};

// A peak as fulcrum-train prints it: "memory by rank: rank R (dp d, tp t, pp s, cp c): peak X
// MiB, Y MiB pinned".
struct RankPeak {
    int dp = 0, tp = 0, pp = 0, cp = 0;
    double device_bytes = 0, pinned_bytes = 0;
    double predicted_bytes = -1;  // fulcrum-train's own prediction, -1 when it printed none
};

std::map<int, RankPeak> peaks_of(const QString& output) {
    static const QRegularExpression line(
        "memory by rank: rank (\\d+) \\(dp (\\d+), tp (\\d+), pp (\\d+), cp (\\d+)\\): peak "
        "([0-9.]+) MiB, ([0-9.]+) MiB pinned(; predicted for full micro-batches ([0-9.]+) MiB)?");
    std::map<int, RankPeak> peaks;
    for (auto it = line.globalMatch(output); it.hasNext();) {
        const auto match = it.next();
        peaks[match.captured(1).toInt()] = {
            .dp = match.captured(2).toInt(),
            .tp = match.captured(3).toInt(),
            .pp = match.captured(4).toInt(),
            .cp = match.captured(5).toInt(),
            .device_bytes = match.captured(6).toDouble() * kMiB,
            .pinned_bytes = match.captured(7).toDouble() * kMiB,
            .predicted_bytes =
                match.captured(9).isEmpty() ? -1 : match.captured(9).toDouble() * kMiB};
    }
    return peaks;
}

// The layout fulcrum-train runs, as the memory model's shape: the same arguments, read once.
parallel::MemoryShape shape_of(const QStringList& args) {
    parallel::MemoryShape shape;
    shape.precision = parallel::Precision::fp32();
    shape.model.vocab = 256;
    shape.layout.microbatches = 4;
    auto value = [&](const char* option) { return args[args.indexOf(option) + 1]; };
    const std::map<QString, int*> integers = {{"--layers", &shape.model.layers},
                                              {"--hidden", &shape.model.hidden},
                                              {"--heads", &shape.model.heads},
                                              {"--context", &shape.model.context},
                                              {"--dp", &shape.layout.grid.dp},
                                              {"--tp", &shape.layout.grid.tp},
                                              {"--pp", &shape.layout.grid.pp},
                                              {"--cp", &shape.layout.grid.cp},
                                              {"--virtual-stages", &shape.layout.virtual_stages},
                                              {"--micro-batches", &shape.layout.microbatches},
                                              {"--zero", &shape.layout.zero_stage},
                                              {"--attention-chunk", &shape.attention_chunk}};
    for (const auto& [option, field] : integers) {
        if (args.contains(option)) {
            *field = value(qPrintable(option)).toInt();
        }
    }
    if (args.contains("--schedule")) {
        shape.layout.schedule = *parallel::parse_schedule(value("--schedule").toStdString());
    }
    if (args.contains("--recompute")) {
        shape.layout.recompute = *parallel::parse_recompute(value("--recompute").toStdString());
    }
    if (args.contains("--stage-layers")) {
        shape.layout.stage_layers =
            *parallel::parse_stage_layers(value("--stage-layers").toStdString());
    }
    shape.layout.sequence_parallel = args.contains("--sequence-parallel");
    shape.layout.offload_checkpoints = args.contains("--offload-checkpoints");
    if (args.contains("--cp-impl")) {
        shape.layout.context_parallelism =
            *parallel::parse_context_parallelism(value("--cp-impl").toStdString());
    }
    shape.offload =
        shape.attention_chunk > 0 && (!args.contains("--offload") || value("--offload") == "on");
    return shape;
}

// fulcrum-train under mpirun on `ranks` ranks: kModel with `layout`'s options (replacing
// kModel's where both give one) on the documents listed in `lengths`.
struct TrainRun {
    QStringList args;
    QString output;
    bool finished = false;
    int exit_code = -1;
};

TrainRun run_train(int ranks, const QStringList& layout, const QString& lengths) {
    TrainRun run;
    run.args = kModel;
    for (qsizetype i = 0; i < layout.size(); ++i) {
        const auto at = run.args.indexOf(layout[i]);
        if (at >= 0 && layout[i].startsWith("--") && i + 1 < layout.size()) {
            run.args[at + 1] = layout[++i];  // fulcrum-train refuses an option given twice
        } else {
            run.args << layout[i];
        }
    }
    run.args << "--lengths"
             << "file:" + lengths;
    QProcess process;
    process.setProcessEnvironment(mpi_environment());
    process.setProcessChannelMode(QProcess::MergedChannels);
    process.start(FULCRUM_MPIRUN, QStringList{"-np", QString::number(ranks), kTrain} + run.args);
    run.finished = process.waitForFinished(120'000);
    run.output = QString::fromUtf8(process.readAll());
    run.exit_code = process.exitCode();
    return run;
}

bool within(double predicted, double measured, double tolerance) {
    return std::abs(predicted - measured) <= tolerance * measured;
}

}  // namespace

class TrainMemoryTest : public QObject {
    Q_OBJECT

    QTemporaryDir work_;

private slots:
    void initTestCase() {
        // Documents of exactly the context: every micro-batch alike.
        QFile file(work_.filePath("lengths.txt"));
        QVERIFY(file.open(QIODevice::WriteOnly));
        for (int document = 0; document < 64; ++document) {
            file.write("256\n");  // one document a line
        }
    }

    void predictedPeakWithinTenPercent_data() {
        QTest::addColumn<int>("ranks");
        QTest::addColumn<QStringList>("layout");
        auto row = [](const char* name, int ranks, QStringList layout) {
            QTest::newRow(name) << ranks << layout;
        };
        row("1 rank", 1, {"--micro-batches", "2"});
        row("dp2", 2, {"--dp", "2"});
        // ZeRO over DP × CP: each rank keeps the moments of its shard (and a staging copy);
        // under ZeRO-2 the gradients' shard too, and one block's and the embedding's and
        // head's whole, or all of them under a split backward.
        row("dp2 zero 1", 2, {"--dp", "2", "--zero", "1"});
        row("dp2 zero 2", 2, {"--dp", "2", "--zero", "2"});
        row("dp2 cp2 zero 2", 4, {"--dp", "2", "--cp", "2", "--zero", "2"});
        row("dp2 pp2 zero 2 zb-h1", 4,
            {"--dp", "2", "--pp", "2", "--zero", "2", "--schedule", "zb-h1"});
        // ZeRO-3: the shard of the parameters in place of all of them, and a block, wte and wpe,
        // lnf gathered whole (wte and wpe on the first stage, wte and lnf on the last).
        row("dp2 zero 3", 2, {"--dp", "2", "--zero", "3"});
        row("dp2 pp2 zero 3", 4, {"--dp", "2", "--pp", "2", "--zero", "3"});
        row("tp2", 2, {"--tp", "2"});
        row("tp2 sequence parallel", 2, {"--tp", "2", "--sequence-parallel"});
        row("cp2", 2, {"--cp", "2"});
        // Ulysses: the head shard of Q, K, V and the attention's output kept per block in
        // place of the gathered K|V; selective recomputation keeps only the head shard.
        row("cp2 ulysses", 2, {"--cp", "2", "--cp-impl", "ulysses"});
        row("tp2 cp2 ulysses recompute selective", 4,
            {"--tp", "2", "--cp", "2", "--cp-impl", "ulysses", "--recompute", "selective"});
        row("pp2 cp2 ulysses zb-h1", 4,
            {"--pp", "2", "--cp", "2", "--cp-impl", "ulysses", "--schedule", "zb-h1"});
        // FPDT's design: the head shard's Q, K, V in pinned memory, chunks of it on the device.
        row("cp2 ulysses chunk 32 offload", 2,
            {"--cp", "2", "--cp-impl", "ulysses", "--attention-chunk", "32"});
        row("cp2 ulysses chunk 32 no offload", 2,
            {"--cp", "2", "--cp-impl", "ulysses", "--attention-chunk", "32", "--offload", "off"});
        row("pp2 cp2 ulysses zb-h1 recompute full chunk 32", 4,
            {"--pp", "2", "--cp", "2", "--cp-impl", "ulysses", "--schedule", "zb-h1", "--recompute",
             "full", "--attention-chunk", "32"});
        row("pp2 gpipe", 2, {"--pp", "2", "--schedule", "gpipe"});
        row("pp2 1f1b", 2, {"--pp", "2", "--schedule", "1f1b"});
        row("pp2 1f1b one micro-batch", 2, {"--pp", "2", "--micro-batches", "1"});
        row("pp4 1f1b 8 micro-batches", 4, {"--pp", "4", "--micro-batches", "8"});
        row("pp2 interleaved v2", 2,
            {"--pp", "2", "--schedule", "interleaved", "--virtual-stages", "2"});
        row("pp2 zb-h1", 2, {"--pp", "2", "--schedule", "zb-h1"});
        row("pp2 1f1b stage layers 1,3", 2, {"--pp", "2", "--stage-layers", "1,3"});
        row("pp2 interleaved v2 stage layers 2,1,1,2", 2,
            {"--pp", "2", "--schedule", "interleaved", "--virtual-stages", "2", "--layers", "6",
             "--stage-layers", "2,1,1,2"});
        row("pp2 gpipe recompute full", 2,
            {"--pp", "2", "--schedule", "gpipe", "--recompute", "full"});
        row("pp2 1f1b recompute selective", 2, {"--pp", "2", "--recompute", "selective"});
        // Offloaded checkpoints: a chunk's block outputs but its last in pinned memory, two
        // device slots for all; with FPDT's chunks (both offloads at once) and interleaved.
        row("recompute full offload checkpoints", 1,
            {"--micro-batches", "2", "--recompute", "full", "--offload-checkpoints"});
        row("pp2 1f1b recompute full offload checkpoints chunk 32", 2,
            {"--pp", "2", "--recompute", "full", "--offload-checkpoints", "--attention-chunk",
             "32"});
        row("pp2 interleaved v2 recompute full offload checkpoints", 2,
            {"--pp", "2", "--schedule", "interleaved", "--virtual-stages", "2", "--layers", "8",
             "--recompute", "full", "--offload-checkpoints"});
        row("chunk 32 offload", 1, {"--attention-chunk", "32"});
        row("chunk 32 no offload", 1, {"--attention-chunk", "32", "--offload", "off"});
        row("cp2 chunk 32 offload", 2, {"--cp", "2", "--attention-chunk", "32"});
        row("pp2 zb-h1 chunk 32 offload", 2,
            {"--pp", "2", "--schedule", "zb-h1", "--attention-chunk", "32"});
        row("pp2 zb-h1 recompute full chunk 32", 2,
            {"--pp", "2", "--schedule", "zb-h1", "--recompute", "full", "--attention-chunk", "32"});
        row("dp2 pp2 1f1b", 4, {"--dp", "2", "--pp", "2"});
        row("tp2 pp2 zb-h1 sequence parallel", 4,
            {"--tp", "2", "--pp", "2", "--schedule", "zb-h1", "--sequence-parallel"});
        row("pp2 cp2 interleaved v2", 4,
            {"--pp", "2", "--cp", "2", "--schedule", "interleaved", "--virtual-stages", "2"});
    }
    void predictedPeakWithinTenPercent() {
        QFETCH(int, ranks);
        QFETCH(QStringList, layout);
        const TrainRun run = run_train(ranks, layout, work_.filePath("lengths.txt"));
        QVERIFY2(run.finished && run.exit_code == 0, qPrintable(run.output));
        const std::map<int, RankPeak> peaks = peaks_of(run.output);
        QCOMPARE(int(peaks.size()), ranks);

        const parallel::MemoryShape shape = shape_of(run.args);
        for (const int stage : std::set<int>{0, shape.layout.grid.pp - 1}) {
            const auto measured = std::find_if(peaks.begin(), peaks.end(), [&](const auto& peak) {
                const RankPeak& r = peak.second;
                return r.pp == stage && r.dp == 0 && r.cp == 0 && r.tp == 0;
            });
            QVERIFY(measured != peaks.end());
            const parallel::EngineMemory predicted = parallel::engine_stage_memory(shape, stage);
            const RankPeak& engine = measured->second;
            const QString figures =
                QString(
                    "stage %1 (rank %2): engine %3 MiB, predicted %4 MiB (model state %5, "
                    "workspace %6, activations %7); pinned engine %8, predicted %9")
                    .arg(stage)
                    .arg(measured->first)
                    .arg(engine.device_bytes / kMiB, 0, 'f', 3)
                    .arg(predicted.peak_bytes() / kMiB, 0, 'f', 3)
                    .arg(predicted.model_state_bytes / kMiB, 0, 'f', 3)
                    .arg(predicted.workspace_bytes / kMiB, 0, 'f', 3)
                    .arg(predicted.activations_bytes / kMiB, 0, 'f', 3)
                    .arg(engine.pinned_bytes / kMiB, 0, 'f', 3)
                    .arg(predicted.pinned_bytes / kMiB, 0, 'f', 3);
            qInfo("%s", qPrintable(figures));
            QVERIFY2(within(predicted.peak_bytes(), engine.device_bytes, kTolerance),
                     qPrintable(figures));
            QVERIFY2(within(predicted.pinned_bytes, engine.pinned_bytes, kTolerance),
                     qPrintable(figures));
            // fulcrum-train prints the same prediction beside its peak (to the printed KiB).
            QVERIFY2(std::abs(engine.predicted_bytes - predicted.peak_bytes()) <= 0.001 * kMiB,
                     qPrintable(figures));
        }
    }

    // ZeRO-2 keeps the shard of the gradients where ZeRO-1 keeps them whole: over 4 ranks
    // a rank saves P − S − block − O floats (zero_gradients.h; 2 · block − O/4 for this
    // model), measured as the model says.
    void zeroTwoKeepsOnlyTheShardOfTheGradients() {
        const QString lengths = work_.filePath("lengths.txt");
        double measured[2] = {}, predicted[2] = {};
        for (const int stage : {1, 2}) {
            const QStringList layout = {"--dp", "4", "--zero", QString::number(stage)};
            const TrainRun run = run_train(4, layout, lengths);
            QVERIFY2(run.finished && run.exit_code == 0, qPrintable(run.output));
            const std::map<int, RankPeak> peaks = peaks_of(run.output);
            QVERIFY(peaks.contains(0));
            measured[stage - 1] = peaks.at(0).device_bytes;
            predicted[stage - 1] =
                parallel::engine_stage_memory(shape_of(run.args), 0).peak_bytes();
        }
        const double saved = measured[0] - measured[1], expected = predicted[0] - predicted[1];
        const QString figures = QString("ZeRO-1 %1 MiB, ZeRO-2 %2 MiB: saved %3 MiB, predicted %4")
                                    .arg(measured[0] / kMiB, 0, 'f', 3)
                                    .arg(measured[1] / kMiB, 0, 'f', 3)
                                    .arg(saved / kMiB, 0, 'f', 3)
                                    .arg(expected / kMiB, 0, 'f', 3);
        qInfo("%s", qPrintable(figures));
        QVERIFY2(expected > 0.3 * kMiB, qPrintable(figures));
        QVERIFY2(within(expected, saved, kTolerance), qPrintable(figures));
    }
};

QTEST_GUILESS_MAIN(TrainMemoryTest)
#include "test_train_memory.moc"
