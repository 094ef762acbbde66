// The `fulcrum` command line, end to end: real processes, real files, output compared with
// golden files by `diff -u`. Set FULCRUM_UPDATE_GOLDEN=1 to rewrite the golden files after a
// deliberate change, and review the diff before committing it.
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <sqlite3.h>

namespace {

const QString kBinaryDir = QStringLiteral(FULCRUM_BINARY_DIR);
const QString kGoldenDir = QStringLiteral(FULCRUM_SOURCE_DIR "/tests/golden/cli");

struct Outcome {
    int exit_code = -1;
    QString output;  // stdout then stderr
};

Outcome run(const QString& program, const QStringList& args, const QString& directory) {
    QProcess process;
    process.setWorkingDirectory(directory);
    process.start(program, args);
    if (!process.waitForFinished(120'000)) {
        return {-1, "did not finish: " + process.errorString()};
    }
    return {process.exitStatus() == QProcess::NormalExit ? process.exitCode() : -1,
            QString::fromUtf8(process.readAllStandardOutput()) +
                QString::fromUtf8(process.readAllStandardError())};
}

QString fulcrum() { return kBinaryDir + "/app/fulcrum"; }

}  // namespace

class CliTest : public QObject {
    Q_OBJECT

    QTemporaryDir work_;

    // Compares `actual` with the golden file; on a difference, fails with diff's output.
    void expect_golden(const QString& golden_name, const QString& actual) {
        const QString golden = kGoldenDir + "/" + golden_name;
        const QString actual_path = work_.filePath(golden_name + ".actual");
        QFile file(actual_path);
        QVERIFY(file.open(QIODevice::WriteOnly));
        file.write(actual.toUtf8());
        file.close();
        if (qEnvironmentVariableIsSet("FULCRUM_UPDATE_GOLDEN")) {
            QFile::remove(golden);
            QVERIFY(QFile::copy(actual_path, golden));
            return;
        }
        const Outcome diff = run("diff", {"-u", golden, actual_path}, work_.path());
        QVERIFY2(diff.exit_code == 0, qPrintable("output differs from " + golden + ":\n" +
                                                 diff.output));
    }

    QString transcript(const QStringList& args) {
        const Outcome outcome = run(fulcrum(), args, work_.path());
        return "$ fulcrum " + args.join(' ') + "\n" + outcome.output + "[exit " +
               QString::number(outcome.exit_code) + "]\n";
    }

private slots:
    void initTestCase() {
        QVERIFY(work_.isValid());
        const Outcome synth = run(kBinaryDir + "/tests/support/fulcrum-synth",
                                  {"ranks", "--dp", "2", "--pp", "2", "--steps", "2",
                                   "--microbatches", "4"},
                                  work_.path());
        QVERIFY2(synth.exit_code == 0, qPrintable(synth.output));
    }

    void mergeInfoAndExport() {
        QString text = transcript({"merge", "-o", "run.fulcrum", "ranks"});
        text += transcript({"info", "run.fulcrum"});
        text += transcript({"info", "ranks/rank-3.sqlite"});
        text += transcript({"export", "run.fulcrum", "--format", "csv", "-o", "events.csv"});
        text += transcript({"export", "run.fulcrum", "--format", "chrome"});
        expect_golden("merge-info-export.txt", text);

        QFile csv(work_.filePath("events.csv"));
        QVERIFY(csv.open(QIODevice::ReadOnly));
        expect_golden("events.csv", QString::fromUtf8(csv.readAll()));
        QFile json(work_.filePath("run.json"));
        QVERIFY(json.open(QIODevice::ReadOnly));
        expect_golden("run.json", QString::fromUtf8(json.readAll()));
    }

    // The analyses on the deterministic synthetic run: tables, and errors a user can act on.
    void analyzeTables() {
        QString text = transcript({"analyze", "run.fulcrum"});
        text += transcript({"analyze", "run.fulcrum", "--json", "-o", "analysis.json"});
        text += transcript({"analyze", "run.fulcrum", "--json", "-o", "analysis.json"});
        text += transcript({"analyze", "run.fulcrum", "--top", "0"});
        text += transcript({"analyze", "missing.fulcrum"});
        expect_golden("analyze.txt", text);
        QFile json(work_.filePath("analysis.json"));
        QVERIFY(json.open(QIODevice::ReadOnly));
        QVERIFY(json.readAll().startsWith("{\"version\":1,\"run\":{"));
    }

    // An imported PyTorch-profiler trace (two ranks, ProfilerStep#0 and #1, an NCCL
    // all-reduce, no coordinates, no workload): every figure nothing was measured or predicted
    // for is "—" in the tables and null in the JSON, and the notes say why.
    void analyzeImportedTrace() {
        for (const char* name : {"rank0.json", "rank1.json"}) {
            QFile::remove(work_.filePath(name));
            QVERIFY(
                QFile::copy(QStringLiteral(FULCRUM_SOURCE_DIR "/tests/import/kineto/data/") + name,
                            work_.filePath(name)));
        }
        QString text = transcript({"import", "rank0.json", "rank1.json", "-o", "imported.fulcrum"});
        text += transcript({"info", "imported.fulcrum"});
        text += transcript({"analyze", "imported.fulcrum"});
        text += transcript({"analyze", "imported.fulcrum", "--json", "-o", "imported.json"});
        // The same rank 0 without its ProfilerStep ranges: one window over its whole trace.
        QFile rank0(work_.filePath("rank0.json"));
        QVERIFY(rank0.open(QIODevice::ReadOnly));
        QByteArray without_steps;
        for (const QByteArray& line : rank0.readAll().split('\n')) {
            if (!line.contains("ProfilerStep")) {
                without_steps += line + '\n';
            }
        }
        QFile nosteps(work_.filePath("nosteps.json"));
        QVERIFY(nosteps.open(QIODevice::WriteOnly));
        nosteps.write(without_steps);
        nosteps.close();
        text += transcript({"import", "nosteps.json", "-o", "nosteps.fulcrum"});
        text += transcript({"analyze", "nosteps.fulcrum"});
        expect_golden("analyze-imported.txt", text);
        QVERIFY(!text.contains("imbalance 1.000"));
        QVERIFY(!text.contains("predicted 1.000"));
        QVERIFY(text.contains("setup    schedule —, balancer —, cp sharding —, micro-batches —"));
        QVERIFY(text.contains("whole trace"));

        QFile file(work_.filePath("imported.json"));
        QVERIFY(file.open(QIODevice::ReadOnly));
        const QJsonObject root = QJsonDocument::fromJson(file.readAll()).object();
        const auto at = [&](const QStringList& path) {
            QJsonValue value = root;
            for (const QString& key : path) {
                value =
                    value.isArray() ? value.toArray().at(key.toInt()) : value.toObject().value(key);
            }
            return value;
        };
        // Unknown: the grid, names, micro-batches, every figure of passes and workload.
        for (const QStringList& path :
             std::initializer_list<QStringList>{{"run", "dp"},
                                                {"run", "tp"},
                                                {"run", "pp"},
                                                {"run", "cp"},
                                                {"run", "schedule"},
                                                {"run", "balancer"},
                                                {"run", "cp_shard"},
                                                {"run", "microbatches"},
                                                {"bubbles", "schedule"},
                                                {"bubbles", "theory_fraction"},
                                                {"bubbles", "mean_measured_fraction"},
                                                {"cp_load", "sharding"},
                                                {"cp_load", "cp"},
                                                {"cp_load", "mean_measured_imbalance"},
                                                {"cp_load", "mean_predicted_imbalance"},
                                                {"imbalance", "predicted_unit"},
                                                {"imbalance", "compute_imbalance"},
                                                {"imbalance", "predicted_imbalance"},
                                                {"cost_model"},
                                                {"offload", "min_hidden_chunk_tokens"}}) {
            QVERIFY2(at(path).isNull(), qPrintable(path.join('.') + " is not null"));
        }
        // Known: the step windows (ProfilerStep#N), the copies, the stragglers of the
        // all-reduce both ranks ran.
        QCOMPARE(at({"step_breakdown", "0", "step"}).toInt(-1), 0);
        QCOMPARE(at({"step_breakdown", "0", "whole_trace"}).toBool(true), false);
        QVERIFY(at({"offload", "bandwidth_gb_s"}).toDouble() > 0);
        QCOMPARE(at({"imbalance", "stragglers"}).toArray().size(), 1);
    }

    void badInputAndOptions() {
        QFile text_file(work_.filePath("notes.txt"));
        QVERIFY(text_file.open(QIODevice::WriteOnly));
        text_file.write("these are notes, not a trace\n");
        text_file.close();
        QVERIFY(QFile::copy(work_.filePath("ranks/rank-1.sqlite"), work_.filePath("killed.sqlite")));
        sqlite3* db = nullptr;
        QCOMPARE(sqlite3_open(qPrintable(work_.filePath("killed.sqlite")), &db), SQLITE_OK);
        QCOMPARE(sqlite3_exec(db, "UPDATE rank SET complete = 0", nullptr, nullptr, nullptr),
                 SQLITE_OK);
        sqlite3_close(db);

        QString text = transcript({"info", "missing.fulcrum"});
        text += transcript({"info", "notes.txt"});
        text += transcript({"info", "killed.sqlite"});
        text += transcript({"merge", "-o", "run2.fulcrum", "ranks/rank-0.sqlite", "notes.txt"});
        text += transcript({"merge", "-o", "run2.fulcrum", "ranks/rank-0.sqlite",
                            "ranks/rank-0.sqlite"});
        text += transcript({"merge", "-o", "no-such-dir/run.fulcrum", "ranks"});
        text += transcript({"export", "ranks/rank-0.sqlite", "--format", "svg"});
        text += transcript({"export", "ranks/rank-0.sqlite", "-o", "notes.txt"});
        text += transcript({"frobnicate"});
        expect_golden("errors.txt", text);
        QVERIFY(!QFile::exists(work_.filePath("run2.fulcrum")));
        QVERIFY(!QFile::exists(work_.filePath("no-such-dir")));
    }

    // fulcrum simulate's comparison table: one epoch of the same documents by default, by
    // steps when asked, and what it says about wlb's settings and adaptive CP sharding.
    void simulateTable() {
        const QStringList small = {"--layers", "2",           "--pp", "2",          "--cp",
                                   "2",        "--documents", "120",  "--cp-shard", "adaptive"};
        QString text =
            transcript(QStringList{"simulate"} + small + QStringList{"--compare", "fixed,wlb"});
        text += transcript(QStringList{"simulate"} + small +
                           QStringList{"--compare", "fixed,wlb", "--steps", "3"});
        text += transcript(QStringList{"simulate"} + small +
                           QStringList{"--compare", "fixed,wlb", "--wlb-max-delay", "1",
                                       "--wlb-thresholds", "32,64"});
        text += transcript({"simulate", "--epochs", "1", "--steps", "2"});
        expect_golden("simulate.txt", text);
    }

    void helpOnEverySubcommand_data() {
        QTest::addColumn<QString>("subcommand");
        QTest::newRow("top") << "";
        QTest::newRow("info") << "info";
        QTest::newRow("merge") << "merge";
        QTest::newRow("export") << "export";
        QTest::newRow("capture") << "capture";
        QTest::newRow("analyze") << "analyze";
        QTest::newRow("simulate") << "simulate";
        QTest::newRow("report") << "report";
        QTest::newRow("import") << "import";
    }
    void helpOnEverySubcommand() {
        QFETCH(QString, subcommand);
        QStringList args;
        if (!subcommand.isEmpty()) {
            args << subcommand;
        }
        args << "--help";
        const Outcome outcome = run(fulcrum(), args, work_.path());
        QCOMPARE(outcome.exit_code, 0);
        QVERIFY(outcome.output.contains("Usage:"));
        QVERIFY(outcome.output.contains(subcommand.isEmpty() ? "Subcommands:" : "Options:"));
    }
};

QTEST_GUILESS_MAIN(CliTest)
#include "test_cli.moc"
