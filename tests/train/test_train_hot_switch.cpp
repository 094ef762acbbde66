// fulcrum-train --hot-switch (HotSPa's hot switching, engine/distributed/hot_switch_trainer.h)
// against the 1-rank run on the same documents: every step's loss and the weights after 3
// steps within 1e-5 relative, as test_train_layouts holds every static layout to (its header
// says why that tolerance). The rows switch between DP and CP (nothing moves), to a TP layout
// (each TP rank's slice of the split tensors moves), to a pipeline (layers move to their
// stage), all of them on 4 ranks, and TP 2 → 4. Each run also moves the parameters from the
// first layout to every other one and back before training (--hot-switch-check) and must get
// the same bits. And bad specs fail before any work with one message.
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QTest>

#include <vector>

#include "tests/train/train_run.h"

namespace {

using fulcrum::test::train;
using Run = fulcrum::test::TrainRun;

// Lengths around the bucket bounds below (median 40 tokens, a tail to the context).
const QStringList kModel = {
    "--steps",     "3",   "--layers",  "4",   "--hidden",   "32",
    "--heads",     "4",   "--context", "128", "--lengths",  "lognormal:median=40,sigma=0.9",
    "--documents", "400", "--seed",    "3",   "--balancer", "fixed"};

}  // namespace

class TrainHotSwitchTest : public QObject {
    Q_OBJECT

    QTemporaryDir work_;

private slots:
    void hotSwitchMatchesOneRank_data() {
        QTest::addColumn<int>("ranks");
        QTest::addColumn<QString>("spec");
        QTest::addColumn<int>("home_dp");  // the first layout's DP: the global batch's replicas
        QTest::addColumn<bool>("moves");   // whether a switch moves any bytes
        QTest::newRow("dp2, cp2") << 2 << "0-48:dp2;48-:cp2" << 2 << false;
        QTest::newRow("dp2, tp2") << 2 << "0-48:dp2;48-:tp2" << 2 << true;
        QTest::newRow("dp2, pp2") << 2 << "0-48:dp2;48-:pp2" << 2 << true;
        QTest::newRow("dp4, dp2 tp2, cp2 pp2")
            << 4 << "0-32:dp4;32-64:dp2,tp2;64-:cp2,pp2" << 4 << true;
        // TP 2 → 4 → 1: each layer's split tensors in lcm(2, 4) = 4 pieces of one head.
        QTest::newRow("dp2 tp2, tp4, dp2 pp2")
            << 4 << "0-40:dp2,tp2;40-80:tp4;80-:dp2,pp2" << 2 << true;
    }
    void hotSwitchMatchesOneRank() {
        QFETCH(int, ranks);
        QFETCH(QString, spec);
        QFETCH(int, home_dp);
        QFETCH(bool, moves);
        const QString tag = QString(QTest::currentDataTag()).replace(' ', '-').remove(',');
        // The 1-rank run trains the same global batches: the home layout's replicas × 4.
        const Run serial =
            train(1, kModel + QStringList{"--micro-batches", QString::number(4 * home_dp)},
                  work_.path(), tag + "-serial");
        QVERIFY2(serial.exit_code == 0, qPrintable(serial.output));
        const Run hot = train(ranks,
                              kModel + QStringList{"--micro-batches", "4", "--hot-switch", spec,
                                                   "--hot-switch-check"},
                              work_.path(), tag);
        QVERIFY2(hot.exit_code == 0, qPrintable(hot.output));
        QVERIFY2(hot.output.contains("hot-switch check: parameters bitwise equal"),
                 qPrintable(hot.output));

        fulcrum::test::check_matches_serial(hot, serial);
        if (QTest::currentTestFailed()) {
            return;
        }

        // Every rank's traffic is reported; a rank's bytes sent to its peers add up to what
        // the others received from it (the same numbers from both ends).
        static const QRegularExpression line(
            "rank (\\d+) sent (\\d+)(?: \\(to ([^)]*)\\))?, received (\\d+)");
        double sent = 0, received = 0;
        int reported = 0;
        for (auto it = line.globalMatch(hot.output); it.hasNext();) {
            const auto match = it.next();
            sent += match.captured(2).toDouble();
            received += match.captured(4).toDouble();
            double to_peers = 0;
            for (const QString& peer : match.captured(3).split(", ", Qt::SkipEmptyParts)) {
                to_peers += peer.section(": ", 1).toDouble();
            }
            QCOMPARE(to_peers, match.captured(2).toDouble());
            ++reported;
        }
        QCOMPARE(reported, ranks);
        QCOMPARE(sent, received);
        QCOMPARE(sent > 0, moves);
    }

    void badSpecsFailBeforeAnyWork_data() {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("message");
        QTest::newRow("gap") << QStringList{"--hot-switch", "0-32:dp2;64-:dp2"} << "leaving a gap";
        QTest::newRow("overlap") << QStringList{"--hot-switch", "0-64:dp2;32-:dp2"}
                                 << "overlapping";
        QTest::newRow("product is not the world") << QStringList{"--hot-switch", "0-32:dp2;32-:dp4"}
                                                  << "every layout must cover the world of 2";
        QTest::newRow("with a static layout")
            << QStringList{"--hot-switch", "0-32:dp2;32-:tp2", "--tp", "2"} << "leave out --tp";
        QTest::newRow("with stage layers")
            << QStringList{"--hot-switch", "0-32:dp2;32-:pp2", "--stage-layers", "1,3"}
            << "leave out --stage-layers";
        QTest::newRow("with overlapped reduction")
            << QStringList{"--hot-switch", "0-32:dp2;32-:tp2", "--overlap-grad-reduce", "on"}
            << "leave out --overlap-grad-reduce on";
        QTest::newRow("with sequence parallelism")
            << QStringList{"--hot-switch", "0-32:dp2;32-:tp2", "--sequence-parallel"}
            << "does not take --sequence-parallel";
        QTest::newRow("check without a spec") << QStringList{"--hot-switch-check"} << "give one";
    }
    void badSpecsFailBeforeAnyWork() {
        QFETCH(QStringList, args);
        QFETCH(QString, message);
        const Run run = train(2, kModel + args, work_.path(), "bad", true);
        QVERIFY2(run.exit_code == 2, qPrintable(run.output));
        QVERIFY2(run.output.contains(message), qPrintable(run.output));
        QCOMPARE(run.output.count("fulcrum-train: error:"), 1);
        QVERIFY(!run.output.contains("step "));
    }
};

QTEST_GUILESS_MAIN(TrainHotSwitchTest)
#include "test_train_hot_switch.moc"
