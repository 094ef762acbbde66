// fulcrum-train --epochs under mpirun: fixed, ilp and wlb each train the same documents
// exactly once in one epoch (the balancer's delayed documents drained before it ends), so
// their token counts agree and tokens/s compares them fairly; only the balancers that hold
// documents back report a delay.
#include <QProcess>
#include <QRegularExpression>
#include <QTest>

#include "tests/train/mpi_environment.h"

namespace {

const QString kTrain = QStringLiteral(FULCRUM_BINARY_DIR "/engine/fulcrum-train");

struct Run {
    int exit_code = -1;
    QString output;
};

Run train(const QStringList& args) {
    QProcess process;
    process.setProcessEnvironment(mpi_environment());
    process.setProcessChannelMode(QProcess::MergedChannels);
    process.start(FULCRUM_MPIRUN, QStringList{"-np", "2", kTrain} + args);
    if (!process.waitForFinished(120'000)) {
        return {-1, "timed out"};
    }
    return {process.exitCode(), QString::fromUtf8(process.readAll())};
}

// A small long-tailed mix: 120 documents of a 256-token context on a 2-stage pipeline.
const QStringList kSmall = {"--pp",        "2",   "--backend", "cpu",
                            "--documents", "120", "--lengths", "long-tail:context=256,median=32",
                            "--context",   "256", "--seed",    "7"};

}  // namespace

class TrainEpochsTest : public QObject {
    Q_OBJECT

private slots:
    void everyBalancerTrainsTheSameDocumentsOnce() {
        const QRegularExpression trained(
            "trained: (\\d+) documents, (\\d+) tokens, 1 epoch\\(s\\); delay mean ([0-9.]+), "
            "max (\\d+) steps");
        QString tokens;
        for (const QString balancer : {"fixed", "ilp", "wlb"}) {
            const Run run = train(kSmall + QStringList{"--balancer", balancer, "--epochs", "1",
                                                       "--ilp-time-limit", "0.2"});
            QVERIFY2(run.exit_code == 0, qPrintable(run.output));
            const auto match = trained.match(run.output);
            QVERIFY2(match.hasMatch(), qPrintable(run.output));
            QCOMPARE(match.captured(1).toInt(), 120);
            if (tokens.isEmpty()) {
                tokens = match.captured(2);
            }
            QCOMPARE(match.captured(2), tokens);
            // Every step reports epoch 0: the run stops at the epoch's end, drain included.
            QVERIFY2(!run.output.contains("| epoch 1 |"), qPrintable(run.output));
            if (balancer == "fixed") {
                QCOMPARE(match.captured(4).toInt(), 0);
            }
            if (balancer == "wlb") {
                QVERIFY2(run.output.contains("wlb: S_max 256 tokens, max delay unbounded, "
                                             "thresholds ") &&
                             run.output.contains("(tuned on the first epoch"),
                         qPrintable(run.output));
                QVERIFY(match.captured(3).toDouble() > 0);
            }
        }
    }

    // The delay bound: overdue documents go first, so waits shrink. A batch whose overdue
    // documents alone overflow it keeps some another step, so the maximum may pass K.
    void delayBoundShortensWaits() {
        const QRegularExpression delay("delay mean ([0-9.]+), max (\\d+) steps");
        const QStringList wlb = kSmall + QStringList{"--balancer", "wlb", "--epochs", "1"};
        const Run unbounded = train(wlb);
        const Run bounded = train(wlb + QStringList{"--wlb-max-delay", "1"});
        QVERIFY2(bounded.exit_code == 0, qPrintable(bounded.output));
        const auto free = delay.match(unbounded.output);
        const auto held = delay.match(bounded.output);
        QVERIFY2(free.hasMatch() && held.hasMatch(), qPrintable(bounded.output));
        QVERIFY(held.captured(1).toDouble() < free.captured(1).toDouble());
        QVERIFY(held.captured(2).toInt() < free.captured(2).toInt());
        QVERIFY(bounded.output.contains("max delay 1,"));
    }

    // Adaptive CP sharding on CP ranks: every micro-batch of the epoch is counted under
    // what it chose, by the CPU kernel's model.
    void adaptiveShardingCountsItsChoices() {
        QStringList args = kSmall;
        args.replaceInStrings(QRegularExpression("^--pp$"), "--cp");
        const Run run = train(
            args + QStringList{"--balancer", "wlb", "--epochs", "1", "--cp-shard", "adaptive"});
        QVERIFY2(run.exit_code == 0, qPrintable(run.output));
        const auto match = QRegularExpression(
                               "adaptive cp sharding \\(cpu kernel model\\): (\\d+) micro-batches "
                               "per document, (\\d+) per sequence")
                               .match(run.output);
        QVERIFY2(match.hasMatch(), qPrintable(run.output));
        const int steps =
            QRegularExpression("done: (\\d+) steps").match(run.output).captured(1).toInt();
        QVERIFY(steps > 0);
        QVERIFY(match.captured(1).toInt() + match.captured(2).toInt() >= steps);
    }

    // --help names the epoch and WLB-LLM options, and exits 0 without training.
    void helpNamesTheOptions() {
        QProcess process;
        process.setProcessEnvironment(mpi_environment());
        process.setProcessChannelMode(QProcess::MergedChannels);
        process.start(kTrain, {"--help"});
        QVERIFY(process.waitForFinished(60'000));
        QCOMPARE(process.exitCode(), 0);
        const QString help = QString::fromUtf8(process.readAll());
        for (const char* option : {"--epochs", "--wlb-max-tokens", "--wlb-max-delay",
                                   "--wlb-thresholds", "--packing-cost", "--cp-shard"}) {
            QVERIFY2(help.contains(option), option);
        }
    }

    void epochsExcludeSteps() {
        const Run run = train(kSmall + QStringList{"--epochs", "1", "--steps", "3"});
        QCOMPARE(run.exit_code, 2);
        QVERIFY2(run.output.contains("excludes"), qPrintable(run.output));
        QVERIFY(!run.output.contains("step "));
    }
};

QTEST_GUILESS_MAIN(TrainEpochsTest)
#include "test_train_epochs.moc"
