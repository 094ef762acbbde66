// Every parallel layout of fulcrum-train against the 1-rank run on the same data: the same
// loss at every step and the same weights after 3 steps, within 1e-5 relative.
//
// Tolerance: the layouts sum the same fp32 terms in another order (all-reduce over DP/CP,
// partial attention and GEMM sums over TP/CP), which moves each sum by a few ulps (~1e-7
// relative); three AdamW steps amplify that little because updates are normalised by √v.
// Weights are compared norm-wise (‖w − w₁‖ / ‖w₁‖): element-wise, a weight whose gradient
// is a near-cancelling sum can flip the sign of its first Adam update, a difference of 2·lr
// that says nothing about the layout being right.
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QTest>

#include <map>
#include <vector>

#include "tests/train/train_run.h"

namespace {

using fulcrum::test::train;
using Run = fulcrum::test::TrainRun;

const QStringList kModel = {"--steps",     "3",   "--layers",  "4",
                            "--hidden",    "32",  "--heads",   "4",
                            "--context",   "128", "--lengths", "lognormal:median=40,sigma=0.9",
                            "--documents", "400", "--seed",    "3"};

// `base` with each "--option value" of `changes` set: replaced where `base` has the option
// (fulcrum-train refuses an option given twice), appended where it has not.
QStringList with_options(QStringList base, const QStringList& changes) {
    for (qsizetype i = 0; i + 1 < changes.size(); i += 2) {
        if (const auto at = base.indexOf(changes[i]); at >= 0) {
            base[at + 1] = changes[i + 1];
        } else {
            base << changes[i] << changes[i + 1];
        }
    }
    return base;
}

}  // namespace

class TrainLayoutsTest : public QObject {
    Q_OBJECT

    QTemporaryDir work_;
    // 1-rank references by their arguments: most rows share one, which is run once.
    std::map<QString, Run> serial_runs_;

private slots:
    void layoutMatchesOneRank_data() {
        QTest::addColumn<int>("ranks");
        QTest::addColumn<QStringList>("layout");
        QTest::addColumn<QStringList>("common");
        const QStringList fixed = {"--balancer", "fixed", "--micro-batches", "4"};
        const QStringList wlb = {"--balancer", "wlb", "--micro-batches", "4"};
        QTest::newRow("dp2") << 2 << QStringList{"--dp", "2"} << fixed;
        // Five short documents an epoch, all in one micro-batch: DP replica 1 has none.
        QTest::newRow("dp2 one micro-batch an epoch")
            << 2 << QStringList{"--dp", "2"} << fixed + QStringList{"--documents", "5"};
        // The same with overlapped reduction: replica 1 must start the layer reductions the
        // other starts during its backward passes, or both wait for ever.
        QTest::newRow("dp2 overlapped reduction, one micro-batch an epoch")
            << 2 << QStringList{"--dp", "2", "--overlap-grad-reduce", "on"}
            << fixed + QStringList{"--documents", "5"};
        QTest::newRow("dp2 pp2 overlapped reduction, one micro-batch an epoch")
            << 4 << QStringList{"--dp", "2", "--pp", "2", "--overlap-grad-reduce", "on"}
            << fixed + QStringList{"--documents", "5"};
        QTest::newRow("pp2 1f1b") << 2 << QStringList{"--pp", "2", "--schedule", "1f1b"} << fixed;
        QTest::newRow("pp2 gpipe") << 2 << QStringList{"--pp", "2", "--schedule", "gpipe"} << fixed;
        QTest::newRow("pp4 1f1b wlb") << 4 << QStringList{"--pp", "4"} << wlb;
        QTest::newRow("dp2 pp2 wlb") << 4 << QStringList{"--dp", "2", "--pp", "2"} << wlb;
        // ZeRO: each DP × CP rank updates its shard and the shards are all-gathered (1); the
        // gradients reduce-scattered into the shards and the norm summed over them (2).
        QTest::newRow("dp2 zero 1") << 2 << QStringList{"--dp", "2", "--zero", "1"} << fixed;
        QTest::newRow("dp2 pp2 zero 1 overlapped reduction")
            << 4
            << QStringList{"--dp", "2", "--pp", "2", "--zero", "1", "--overlap-grad-reduce", "on"}
            << wlb;
        // ZeRO-3 (zero_parameters.h): only the shard of the parameters kept, a block's gathered
        // before each pass (under ZB-H1 its W gathers again). An epoch of 20 documents ends
        // in a step of 1 and 0 micro-batches, one of 45 in 3 and 2: the replica short of
        // micro-batches makes the gathers of the passes it lacks in the longer one's schedule.
        QTest::newRow("dp2 cp2 zero 3, 1 and 0 micro-batches at an epoch's end")
            << 4 << QStringList{"--dp", "2", "--cp", "2", "--zero", "3"}
            << fixed + QStringList{"--documents", "20"};
        QTest::newRow("dp2 pp2 zero 3 zb-h1, 3 and 2 micro-batches at an epoch's end")
            << 4 << QStringList{"--dp", "2", "--pp", "2", "--zero", "3", "--schedule", "zb-h1"}
            << fixed + QStringList{"--documents", "45"};
        // ZeRO-2 (zero_gradients.h): each block's gradients reduce-scattered into the shards
        // after its backward; the replica short of micro-batches makes the reduce-scatters (of
        // zeros) of the passes it lacks, or the other replica's would wait for ever.
        QTest::newRow("dp2 pp2 zero 2, 3 and 2 micro-batches at an epoch's end")
            << 4 << QStringList{"--dp", "2", "--pp", "2", "--zero", "2"}
            << fixed + QStringList{"--documents", "45"};
        QTest::newRow("dp2 cp2 zero 2, 1 and 0 micro-batches at an epoch's end")
            << 4 << QStringList{"--dp", "2", "--cp", "2", "--zero", "2"}
            << fixed + QStringList{"--documents", "20"};
        const QStringList interleaved_zero = {
            "--dp", "2", "--pp", "2", "--schedule", "interleaved", "--virtual-stages", "2"};
        QTest::newRow("dp2 pp2 interleaved v2 zero 2")
            << 4 << interleaved_zero + QStringList{"--zero", "2"} << fixed;
        QTest::newRow("tp2 dp2 zero 2 sequence parallel")
            << 4 << QStringList{"--tp", "2", "--dp", "2", "--zero", "2", "--sequence-parallel"}
            << fixed;
        QTest::newRow("tp2") << 2 << QStringList{"--tp", "2"} << fixed;
        // DeepSpeed-Ulysses (context_parallel.h): token shards traded for head shards and
        // back. With TP one head a rank, staged through host memory; with ZeRO-2; under ZB-H1
        // (the head shard freed after B, the serial dQKV kept for W) with the overlapped
        // reduction; and recomputed whole, both all-to-alls again.
        QTest::newRow("cp2 ulysses zigzag")
            << 2 << QStringList{"--cp", "2", "--cp-impl", "ulysses", "--cp-shard", "zigzag"}
            << fixed;
        QTest::newRow("tp2 cp2 ulysses staged")
            << 4
            << QStringList{"--tp", "2", "--cp", "2", "--cp-impl", "ulysses", "--comm", "staged"}
            << fixed;
        QTest::newRow("dp2 cp2 ulysses zero 2")
            << 4 << QStringList{"--dp", "2", "--cp", "2", "--cp-impl", "ulysses", "--zero", "2"}
            << wlb;
        QTest::newRow("pp2 cp2 ulysses zb-h1 overlapped reduction")
            << 4 << QStringList{"--pp",       "2",         "--cp",
                                "2",          "--cp-impl", "ulysses",
                                "--schedule", "zb-h1",     "--overlap-grad-reduce",
                                "on"}
            << fixed;
        // FPDT's own design: Ulysses' head shard in chunks with Q, K, V offloaded; with full
        // recomputation and offloaded checkpoints too, under ZB-H1 and the layer-by-layer
        // reduction.
        QTest::newRow("cp2 ulysses fpdt chunk 16")
            << 2 << QStringList{"--cp", "2", "--cp-impl", "ulysses", "--attention-chunk", "16"}
            << fixed;
        QTest::newRow("cp2 ulysses fpdt chunk 16 no offload")
            << 2 << QStringList{"--cp", "2",         "--cp-impl", "ulysses", "--attention-chunk",
                                "16",   "--offload", "off"}
            << fixed;
        QTest::newRow("pp2 cp2 ulysses fpdt chunk 16 recompute full offload checkpoints")
            << 4
            << QStringList{"--pp",
                           "2",
                           "--cp",
                           "2",
                           "--cp-impl",
                           "ulysses",
                           "--attention-chunk",
                           "16",
                           "--recompute",
                           "full",
                           "--offload-checkpoints",
                           "--overlap-grad-reduce",
                           "on"}
            << wlb;
        // All of FPDT's design at once (its table's last row): Ulysses, chunks offloaded,
        // checkpoints offloaded, ZeRO-3.
        QTest::newRow("cp2 ulysses fpdt chunk 16 offload checkpoints zero 3")
            << 2
            << QStringList{"--cp",
                           "2",
                           "--cp-impl",
                           "ulysses",
                           "--attention-chunk",
                           "16",
                           "--recompute",
                           "full",
                           "--offload-checkpoints",
                           "--zero",
                           "3"}
            << wlb;
        // Four ranks, contiguous shards and chunks that divide nothing: most chunks' all-to-alls
        // carry rows of one or two ranks only, and some ranks send none (exchange_window).
        QTest::newRow("cp4 ulysses fpdt chunk 24 contiguous")
            << 4 << QStringList{"--cp", "4",          "--cp-impl", "ulysses", "--attention-chunk",
                                "24",   "--cp-shard", "contiguous"}
            << wlb;
        // FPDT's input order: every chunk cut over the CP ranks (cp_shard.h, chunked), so each
        // rank projects and sends its share of every chunk; under all-gather CP too.
        QTest::newRow("cp2 ulysses fpdt chunk 16 chunked sharding")
            << 2 << QStringList{"--cp", "2",          "--cp-impl", "ulysses", "--attention-chunk",
                                "16",   "--cp-shard", "chunked"}
            << wlb;
        QTest::newRow("cp2 all-gather chunk 16 chunked sharding")
            << 2 << QStringList{"--cp", "2", "--attention-chunk", "16", "--cp-shard", "chunked"}
            << wlb;
        QTest::newRow("pp2 cp2 ulysses zb-h1 fpdt chunk 16")
            << 4 << QStringList{"--pp",       "2",         "--cp",
                                "2",          "--cp-impl", "ulysses",
                                "--schedule", "zb-h1",     "--attention-chunk",
                                "16"}
            << fixed;
        QTest::newRow("cp2 ulysses per-doc recompute full")
            << 2 << QStringList{"--cp",       "2",       "--cp-impl",   "ulysses",
                                "--cp-shard", "per-doc", "--recompute", "full"}
            << fixed;
        for (const char* sharding : {"contiguous", "zigzag", "per-doc", "adaptive"}) {
            QTest::newRow(qPrintable(QString("cp2 ") + sharding))
                << 2 << QStringList{"--cp", "2", "--cp-shard", sharding} << fixed;
        }
        QTest::newRow("tp2 pp2 ilp")
            << 4 << QStringList{"--tp", "2", "--pp", "2"}
            << QStringList{"--balancer", "ilp", "--micro-batches", "4", "--ilp-time-limit", "30"};
        QTest::newRow("dp2 pp2 cp2 wlb")
            << 8 << QStringList{"--dp", "2", "--pp", "2", "--cp", "2"} << wlb;
        // Device buffers staged through host memory (comm/staged_communicator.h), the path of
        // several ranks on one GPU; on the CPU backend each stage is a memcpy each way. Between
        // them the two rows use every call: p2p and posted sends, the embedding and DP
        // all-reduces, TP all-reduces, the CP all-gather and reduce-scatter.
        QTest::newRow("dp2 pp2 staged")
            << 4 << QStringList{"--dp", "2", "--pp", "2", "--comm", "staged"} << wlb;
        QTest::newRow("tp2 cp2 staged")
            << 4 << QStringList{"--tp", "2", "--cp", "2", "--comm", "staged"} << fixed;
        // Each layer's gradients reduced during the last backward pass (MPI_Iallreduce), plain
        // and staged through host memory.
        QTest::newRow("dp2 pp2 overlapped reduction")
            << 4 << QStringList{"--dp", "2", "--pp", "2", "--overlap-grad-reduce", "on"} << wlb;
        QTest::newRow("dp2 cp2 staged overlapped reduction")
            << 4
            << QStringList{"--dp", "2", "--cp", "2", "--comm", "staged", "--overlap-grad-reduce",
                           "on"}
            << fixed;
        // Waiting ranks that nap (--mpi-wait nap; auto naps where ranks outnumber cores, so
        // on a 2-core machine the 4-rank rows above nap and these spin): point-to-point sends
        // and receives, every collective behind its napping barrier, the CP exchange, the
        // overlapped reduction's MPI_Iallreduce.
        QTest::newRow("pp2 napping") << 2 << QStringList{"--pp", "2", "--mpi-wait", "nap"} << wlb;
        QTest::newRow("tp2 cp2 napping")
            << 4 << QStringList{"--tp", "2", "--cp", "2", "--mpi-wait", "nap"} << fixed;
        QTest::newRow("dp2 pp2 napping overlapped reduction")
            << 4 << QStringList{"--dp", "2",          "--pp", "2", "--overlap-grad-reduce",
                                "on",   "--mpi-wait", "nap"}
            << wlb;
        QTest::newRow("dp2 pp2 spinning")
            << 4 << QStringList{"--dp", "2", "--pp", "2", "--mpi-wait", "spin"} << wlb;
        // FPDT-style chunked attention (chunked_attention.h): each block's QKV projection and
        // attention in chunks of 16 rows, Q/K/V through host memory; whole micro-batches, CP
        // shards, 1F1B's micro-batches in flight on two stages, and block-by-block backward
        // calls (the overlapped gradient reduction).
        QTest::newRow("fpdt chunk 16") << 1 << QStringList{"--attention-chunk", "16"} << fixed;
        QTest::newRow("pp2 fpdt chunk 16")
            << 2 << QStringList{"--pp", "2", "--attention-chunk", "16"} << fixed;
        QTest::newRow("cp2 fpdt chunk 16 overlapped reduction")
            << 2
            << QStringList{"--cp", "2", "--attention-chunk", "16", "--overlap-grad-reduce", "on"}
            << fixed;
        QTest::newRow("cp2 fpdt chunk 16 no offload")
            << 2 << QStringList{"--cp", "2", "--attention-chunk", "16", "--offload", "off"}
            << fixed;
        QTest::newRow("cp2 zigzag fpdt chunk 16")
            << 2 << QStringList{"--cp", "2", "--cp-shard", "zigzag", "--attention-chunk", "16"}
            << fixed;
        // Interleaved 1F1B (two model chunks per stage: stage 1's chunk 0 sends to stage 0's
        // chunk 1, and with p = 2 activations and gradients go both ways between the ranks).
        const QStringList interleaved = {
            "--pp", "2", "--schedule", "interleaved", "--virtual-stages", "2"};
        QTest::newRow("pp2 interleaved v2") << 2 << interleaved << fixed;
        QTest::newRow("dp2 pp2 interleaved v2 overlapped reduction wlb")
            << 4 << interleaved + QStringList{"--dp", "2", "--overlap-grad-reduce", "on"} << wlb;
        QTest::newRow("pp2 cp2 interleaved v2")
            << 4 << interleaved + QStringList{"--cp", "2"} << fixed;
        QTest::newRow("pp2 interleaved v2 fpdt chunk 16")
            << 2 << interleaved + QStringList{"--attention-chunk", "16"} << fixed;
        // 20 documents make an epoch of two full steps and a third of one micro-batch, which
        // interleaving cannot take in groups of 2: that step runs depth-first over the chunks.
        QTest::newRow("pp2 interleaved v2 one-micro-batch step")
            << 2 << interleaved << fixed + QStringList{"--documents", "20"};
        // ZB-H1: every backward as B (input gradients) and W (weight gradients) passes.
        QTest::newRow("pp2 zb-h1") << 2 << QStringList{"--pp", "2", "--schedule", "zb-h1"} << fixed;
        QTest::newRow("pp4 zb-h1 wlb")
            << 4 << QStringList{"--pp", "4", "--schedule", "zb-h1"} << wlb;
        QTest::newRow("pp2 zb-h1 recompute full")
            << 2 << QStringList{"--pp", "2", "--schedule", "zb-h1", "--recompute", "full"} << fixed;
        QTest::newRow("pp2 cp2 zb-h1 fpdt chunk 16 overlapped reduction")
            << 4 << QStringList{"--pp",
                                "2",
                                "--cp",
                                "2",
                                "--schedule",
                                "zb-h1",
                                "--attention-chunk",
                                "16",
                                "--overlap-grad-reduce",
                                "on"}
            << fixed;
        // Uneven stages (--stage-layers): the first stage with one layer next to the
        // embedding, the last with three before the head, and the other way round under
        // ZB-H1; interleaved, one count per model chunk (stage 0 holds chunks 0 and 2).
        QTest::newRow("pp2 1f1b stage layers 1,3")
            << 2 << QStringList{"--pp", "2", "--stage-layers", "1,3"} << fixed;
        QTest::newRow("pp2 interleaved v2 6 layers, model chunks 2,1,1,2")
            << 2 << interleaved + QStringList{"--stage-layers", "2,1,1,2"}
            << fixed + QStringList{"--layers", "6"};
        QTest::newRow("pp2 zb-h1 stage layers 3,1")
            << 2 << QStringList{"--pp", "2", "--schedule", "zb-h1", "--stage-layers", "3,1"}
            << fixed;
        // Activation recomputation.
        QTest::newRow("pp2 recompute full")
            << 2 << QStringList{"--pp", "2", "--recompute", "full"} << fixed;
        QTest::newRow("pp2 recompute selective")
            << 2 << QStringList{"--pp", "2", "--recompute", "selective"} << fixed;
        QTest::newRow("tp2 recompute full fpdt chunk 16")
            << 2 << QStringList{"--tp", "2", "--recompute", "full", "--attention-chunk", "16"}
            << fixed;
        // Offloaded checkpoints (checkpoint_offload.h): block outputs through pinned memory
        // between the passes; with FPDT's chunks too, and over CP under Ulysses with the
        // layer-by-layer reduction.
        QTest::newRow("recompute full offload checkpoints")
            << 1 << QStringList{"--recompute", "full", "--offload-checkpoints"} << fixed;
        QTest::newRow("pp2 recompute full offload checkpoints fpdt chunk 16")
            << 2 << QStringList{"--pp",
                                "2",
                                "--recompute",
                                "full",
                                "--offload-checkpoints",
                                "--attention-chunk",
                                "16"}
            << fixed;
        QTest::newRow("pp2 cp2 ulysses interleaved v2 8 layers recompute full offload checkpoints")
            << 4
            << interleaved + QStringList{"--cp",
                                         "2",
                                         "--cp-impl",
                                         "ulysses",
                                         "--recompute",
                                         "full",
                                         "--offload-checkpoints",
                                         "--overlap-grad-reduce",
                                         "on"}
            << wlb + QStringList{"--layers", "8"};
        QTest::newRow("tp2 cp2 recompute selective wlb")
            << 4 << QStringList{"--tp", "2", "--cp", "2", "--recompute", "selective"} << wlb;
        // Sequence parallelism.
        QTest::newRow("tp2 sequence parallel")
            << 2 << QStringList{"--tp", "2", "--sequence-parallel"} << fixed;
        // Staged through host memory, and the layer-by-layer DP reduction, which must be done
        // before the LayerNorm gradients are summed over TP.
        QTest::newRow("dp2 tp2 sequence parallel staged overlapped reduction")
            << 4 << QStringList{"--dp",
                                "2",
                                "--tp",
                                "2",
                                "--sequence-parallel",
                                "--comm",
                                "staged",
                                "--overlap-grad-reduce",
                                "on"}
            << fixed;
        QTest::newRow("tp2 pp2 sequence parallel zb-h1 wlb")
            << 4
            << QStringList{"--tp", "2", "--pp", "2", "--sequence-parallel", "--schedule", "zb-h1"}
            << wlb;
        QTest::newRow("tp2 pp2 sequence parallel interleaved v2 recompute full")
            << 4
            << interleaved + QStringList{"--tp", "2", "--sequence-parallel", "--recompute", "full"}
            << fixed;
    }
    void layoutMatchesOneRank() {
        QFETCH(int, ranks);
        QFETCH(QStringList, layout);
        QFETCH(QStringList, common);
        // The 1-rank reference trains the same global batches: dp replicas × micro-batches.
        int dp = 1;
        if (const auto at = layout.indexOf("--dp"); at >= 0) {
            dp = layout[at + 1].toInt();
        }
        QStringList serial_args = with_options(kModel, common);
        serial_args[serial_args.indexOf("--micro-batches") + 1] = QString::number(4 * dp);
        const QString tag = QString(QTest::currentDataTag()).replace(' ', '-');
        const QString serial_key = serial_args.join(' ');
        if (serial_runs_.count(serial_key) == 0) {
            serial_runs_[serial_key] = train(1, serial_args, work_.path(), tag + "-serial");
        }
        const Run& serial = serial_runs_[serial_key];
        QVERIFY2(serial.exit_code == 0, qPrintable(serial.output));
        const Run parallel = train(ranks, with_options(kModel, common) + layout, work_.path(), tag);
        QVERIFY2(parallel.exit_code == 0, qPrintable(parallel.output));

        fulcrum::test::check_matches_serial(parallel, serial);
        if (QTest::currentTestFailed()) {
            return;
        }
        // A staged run did stage: the numbers above came through host copies, not around them.
        if (layout.contains("staged")) {
            static const QRegularExpression staged("staged ([0-9.]+) MiB between device and host");
            const auto match = staged.match(parallel.output);
            QVERIFY2(match.hasMatch(), qPrintable(parallel.output));
            QVERIFY2(match.captured(1).toDouble() > 0.01, qPrintable(match.captured(0)));
        }
        if (layout.contains("--overlap-grad-reduce")) {
            QVERIFY2(parallel.output.contains("gradient reduction: layer by layer"),
                     qPrintable(parallel.output));
        }
        // ZeRO sharded what its stage says, over every DP × CP rank.
        if (const auto at = layout.indexOf("--zero"); at >= 0) {
            const QString stage = layout[at + 1];
            const auto degree = [&](const char* option) {
                const auto i = layout.indexOf(option);
                return i >= 0 ? layout[i + 1].toInt() : 1;
            };
            const QString sharded = stage == "3"   ? ", the gradients and the parameters"
                                    : stage == "2" ? " and the gradients"
                                                   : "";
            const QString said =
                "ZeRO-" + stage + ": the optimizer state" + sharded + " sharded over the " +
                QString::number(degree("--dp") * degree("--cp")) + " DP x CP ranks";
            QVERIFY2(parallel.output.contains(said), qPrintable(parallel.output));
        }
        // The knobs said what they do.
        if (layout.contains("--recompute") || layout.contains("--sequence-parallel")) {
            static const QRegularExpression activations("activations: recompute (\\w+)");
            const auto match = activations.match(parallel.output);
            QVERIFY2(match.hasMatch(), qPrintable(parallel.output));
            const auto at = layout.indexOf("--recompute");
            QCOMPARE(match.captured(1), at >= 0 ? layout[at + 1] : QString("none"));
            QCOMPARE(parallel.output.contains("sequence parallel over TP"),
                     layout.contains("--sequence-parallel"));
        }
        // A chunked run did chunk, and with offload on its K/V went through the host.
        if (layout.contains("--attention-chunk")) {
            static const QRegularExpression chunked(
                "attention in chunks of (\\d+) tokens, offload (on|off).* ([0-9.]+) MiB of "
                "gradient slots; ([0-9.]+) MiB offloaded");
            const auto match = chunked.match(parallel.output);
            QVERIFY2(match.hasMatch(), qPrintable(parallel.output));
            QCOMPARE(match.captured(1), layout[layout.indexOf("--attention-chunk") + 1]);
            QCOMPARE(match.captured(4).toDouble() > 0, match.captured(2) == "on");
            // FPDT's offloading backward: Ulysses with offload, and only there.
            QCOMPARE(match.captured(3).toDouble() > 0,
                     layout.contains("ulysses") && match.captured(2) == "on");
            if (layout.contains("ulysses")) {  // FPDT's pipeline, and whether on its input order
                QVERIFY2(parallel.output.contains(
                             "traded one at a time, each while the one before computes"),
                         qPrintable(parallel.output));
                QCOMPARE(parallel.output.contains("(FPDT's input order)"),
                         layout.contains("chunked"));
                QCOMPARE(parallel.output.contains("∂L/∂o and dQ wait in host memory"),
                         match.captured(2) == "on");
            }
        }
        // Offloaded checkpoints went out and came back, the same bytes each way.
        if (layout.contains("--offload-checkpoints")) {
            static const QRegularExpression offloaded(
                "checkpoints offloaded: [0-9.]+ MiB of device slots; ([0-9.]+) MiB offloaded, "
                "([0-9.]+) MiB prefetched");
            const auto match = offloaded.match(parallel.output);
            QVERIFY2(match.hasMatch(), qPrintable(parallel.output));
            QVERIFY(match.captured(1).toDouble() > 0);
            QCOMPARE(match.captured(2), match.captured(1));
        }
    }

    void badOptionsFailBeforeAnyWork_data() {
        QTest::addColumn<int>("ranks");
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("message");
        QTest::newRow("product is not the world")
            << 2 << QStringList{"--dp", "2", "--pp", "2"} << "but 2 processes were started";
        QTest::newRow("more stages than layers")
            << 4 << QStringList{"--pp", "4", "--layers", "2"} << "every stage needs a layer";
        QTest::newRow("tp does not divide heads")
            << 3 << QStringList{"--tp", "3", "--heads", "4"} << "must divide --heads";
        QTest::newRow("empty data") << 1 << QStringList{"--data", "EMPTY"} << "no text";
        QTest::newRow("document longer than context")
            << 1 << QStringList{"--lengths", "file:LONG", "--context", "64"}
            << "longer than any micro-batch can hold";
        QTest::newRow("unknown balancer") << 1 << QStringList{"--balancer", "magic"} << "magic";
        QTest::newRow("zero 3 with overlapped reduction")
            << 2 << QStringList{"--dp", "2", "--zero", "3", "--overlap-grad-reduce", "on"}
            << "--zero 3 reduce-scatters the gradients after the passes";
        QTest::newRow("zero 2 with overlapped reduction")
            << 2 << QStringList{"--dp", "2", "--zero", "2", "--overlap-grad-reduce", "on"}
            << "reduce-scatters the gradients after the passes";
        QTest::newRow("zero 5") << 1 << QStringList{"--zero", "5"} << "from 0 to 3";
        QTest::newRow("ulysses with more CP ranks than heads")
            << 4 << QStringList{"--tp", "2",        "--cp", "2",         "--heads",
                                "2",    "--hidden", "32",   "--cp-impl", "ulysses"}
            << "--cp-impl ulysses gives each CP rank whole heads";
        QTest::newRow("chunked sharding without chunks")
            << 2 << QStringList{"--cp", "2", "--cp-shard", "chunked"} << "give --attention-chunk";
        QTest::newRow("unknown cp implementation")
            << 2 << QStringList{"--cp", "2", "--cp-impl", "ring"} << "ring";
        QTest::newRow("unknown schedule")
            << 1 << QStringList{"--schedule", "zb"} << "gpipe, 1f1b, interleaved, zb-h1";
        QTest::newRow("interleaved, micro-batches not a multiple of the stages")
            << 2 << QStringList{"--pp",
                                "2",
                                "--schedule",
                                "interleaved",
                                "--virtual-stages",
                                "2",
                                "--micro-batches",
                                "3"}
            << "3 micro-batches is not a multiple of 2";
        QTest::newRow("interleaved without virtual stages")
            << 2 << QStringList{"--pp", "2", "--schedule", "interleaved"}
            << "give --virtual-stages 2 or more";
        QTest::newRow("interleaved on one stage")
            << 1 << QStringList{"--schedule", "interleaved", "--virtual-stages", "2"}
            << "needs --pp 2 or more";
        QTest::newRow("virtual stages without interleaved")
            << 2 << QStringList{"--pp", "2", "--virtual-stages", "2"}
            << "virtual stages are for the interleaved schedule";
        QTest::newRow("more model chunks than layers")
            << 2 << QStringList{"--pp", "2",        "--schedule", "interleaved", "--virtual-stages",
                                "2",    "--layers", "3"}
            << "every model chunk needs a layer";
        QTest::newRow("stage layers not summing to the layers")
            << 2 << QStringList{"--pp", "2", "--stage-layers", "1,2"}
            << "--stage-layers sums to 3 layers, but the model has --layers 2";
        QTest::newRow("stage layers, one count too few")
            << 2 << QStringList{"--pp", "2", "--stage-layers", "2"}
            << "--stage-layers gives 1 layer counts for 2 model chunks";
        QTest::newRow("stage layers, an empty stage")
            << 2 << QStringList{"--pp", "2", "--stage-layers", "0,2"}
            << "model chunk 0 has 0 layers; every one needs at least 1";
        QTest::newRow("stage layers, not a number")
            << 2 << QStringList{"--pp", "2", "--stage-layers", "2,two"}
            << "--stage-layers: 'two' is not a layer count";
        QTest::newRow("sequence parallel without tp")
            << 1 << QStringList{"--sequence-parallel"} << "it needs --tp 2 or more";
        QTest::newRow("unknown recompute")
            << 1 << QStringList{"--recompute", "some"} << "none, selective, full";
        QTest::newRow("selective recompute with chunked attention")
            << 1 << QStringList{"--recompute", "selective", "--attention-chunk", "16"}
            << "use --recompute full or none with it";
        QTest::newRow("unknown comm") << 2 << QStringList{"--dp", "2", "--comm", "gloo"}
                                      << "--comm must be auto, mpi, staged or nccl";
        QTest::newRow("nccl on the cpu")
            << 2 << QStringList{"--dp", "2", "--backend", "cpu", "--comm", "nccl"}
            << "--comm nccl needs the CUDA backend";
        QTest::newRow("no epochs")
            << 1 << QStringList{"--epochs", "0"} << "--epochs must be at least 1";
        QTest::newRow("S_max below the context")
            << 1 << QStringList{"--context", "64", "--wlb-max-tokens", "32"}
            << "--wlb-max-tokens 32 is less than --context 64";
        QTest::newRow("negative delay bound")
            << 1 << QStringList{"--wlb-max-delay", "-2"} << "--wlb-max-delay must be at least 0";
        QTest::newRow("bad wlb thresholds")
            << 1 << QStringList{"--wlb-thresholds", "64,x"} << "--wlb-thresholds takes tuned, none";
        QTest::newRow("unknown packing cost")
            << 1 << QStringList{"--packing-cost", "flops"} << "--packing-cost must be model";
        QTest::newRow("rendezvous without nccl")
            << 2 << QStringList{"--dp", "2", "--rendezvous", "file:/tmp/never"}
            << "--rendezvous is for NCCL's bootstrap";
    }
    void badOptionsFailBeforeAnyWork() {
        QFETCH(int, ranks);
        QFETCH(QStringList, args);
        QFETCH(QString, message);
        QDir(work_.path()).mkpath("empty");
        QFile lengths(work_.filePath("long.txt"));
        QVERIFY(lengths.open(QIODevice::WriteOnly));
        lengths.write("10\n100\n");
        lengths.close();
        args.replaceInStrings("EMPTY", work_.filePath("empty"));
        args.replaceInStrings("file:LONG", "file:" + work_.filePath("long.txt"));
        const Run run = train(ranks, args, work_.path(), "bad", true);
        QVERIFY2(run.exit_code == 2, qPrintable(run.output));
        QVERIFY2(run.output.contains(message), qPrintable(run.output));
        // One message, from rank 0, not one per rank; and no step ran.
        QCOMPARE(run.output.count("fulcrum-train: error:"), 1);
        QVERIFY(!run.output.contains("step "));
    }
};

QTEST_GUILESS_MAIN(TrainLayoutsTest)
#include "test_train_layouts.moc"
