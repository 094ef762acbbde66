// `fulcrum simulate` end to end: real processes, real files. Errors exit 2 and say what to
// do; --compare prints one row per balancer and writes one run per balancer; existing
// outputs are refused; --json is machine-readable; --calibrate takes a run's settings and
// costs, and says what a run lacks.
#include <map>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QJsonParseError>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QTest>

#include "core/store/trace_reader.h"
#include "core/store/trace_writer.h"

using namespace fulcrum;

namespace {

const QString kBinaryDir = QStringLiteral(FULCRUM_BINARY_DIR);

struct Outcome {
    int exit_code = -1;
    QString out;
    QString err;
};

// A small grid that still exercises every part: pp, cp, dp and tp.
const QStringList kSmall = {
    "--layers",        "4", "--dp", "2", "--pp", "2", "--cp", "2", "--tp", "2", "--steps", "2",
    "--micro-batches", "4"};

}  // namespace

class SimulateCliTest : public QObject {
    Q_OBJECT

    QTemporaryDir work_;

    Outcome simulate(const QStringList& args) {
        QProcess process;
        process.setWorkingDirectory(work_.path());
        process.start(kBinaryDir + "/app/fulcrum", QStringList{"simulate"} + args);
        if (!process.waitForFinished(120'000)) {
            return {-1, {}, "did not finish: " + process.errorString()};
        }
        return {process.exitStatus() == QProcess::NormalExit ? process.exitCode() : -1,
                QString::fromUtf8(process.readAllStandardOutput()),
                QString::fromUtf8(process.readAllStandardError())};
    }

    QString path(const QString& name) const { return work_.filePath(name); }

private slots:
    void initTestCase() { QVERIFY(work_.isValid()); }

    void badOptions_data() {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("message");
        QTest::newRow("more stages than layers")
            << QStringList{"--pp", "4", "--layers", "2"}
            << "--pp 4 is more pipeline stages than --layers 2";
        QTest::newRow("no layers") << QStringList{"--layers", "0"} << "--layers must be at least 1";
        QTest::newRow("unknown balancer") << QStringList{"--balancer", "greedy"} << "unknown";
        QTest::newRow("unknown balancer in --compare")
            << QStringList{"--compare", "fixed,best"} << "--compare:";
        QTest::newRow("unknown schedule")
            << QStringList{"--schedule", "zb"} << "gpipe, 1f1b, interleaved, zb-h1";
        QTest::newRow("interleaved without virtual stages")
            << QStringList{"--schedule", "interleaved", "--pp", "2"} << "--virtual-stages 2";
        QTest::newRow("interleaved micro-batches not a multiple of p")
            << QStringList{"--schedule", "interleaved", "--virtual-stages", "2", "--pp", "2",
                           "--layers",   "4",           "--micro-batches",  "3"}
            << "not a multiple of 2";
        QTest::newRow("more model chunks than layers")
            << QStringList{"--schedule", "interleaved", "--virtual-stages", "2", "--pp", "2"}
            << "more model chunks than --layers 2";
        QTest::newRow("sequence parallelism without TP")
            << QStringList{"--sequence-parallel"} << "--tp 2 or more";
        QTest::newRow("parameter gather without the distributed optimizer")
            << QStringList{"--dp", "2", "--overlap-param-gather"} << "add --distributed-optimizer";
        QTest::newRow("unknown attention mask")
            << QStringList{"--attention-mask", "sliding"} << "--attention-mask";
        QTest::newRow("unknown dtype") << QStringList{"--dtype", "fp8"} << "bf16, fp16, fp32";
        QTest::newRow("unknown gradient dtype")
            << QStringList{"--grad-reduce-dtype", "fp8"} << "--grad-reduce-dtype";
        QTest::newRow("unknown recompute") << QStringList{"--recompute", "some"} << "--recompute:";
        QTest::newRow("unknown hardware") << QStringList{"--hardware", "tpu"} << "h100, a100";
        QTest::newRow("two comparisons")
            << QStringList{"--compare", "fixed,wlb", "--compare-schedules", "1f1b,gpipe"}
            << "not both";
        QTest::newRow("unknown schedule in --compare-schedules")
            << QStringList{"--compare-schedules", "1f1b,zb"} << "--compare-schedules:";
        QTest::newRow("compared schedule that cannot run")
            << QStringList{"--pp",     "2", "--micro-batches",     "3",
                           "--layers", "4", "--compare-schedules", "1f1b,interleaved"}
            << "--compare-schedules: interleaved:";
        QTest::newRow("bad length spec") << QStringList{"--lengths", "uniform:max=9"} << "uniform";
        QTest::newRow("tp must divide heads")
            << QStringList{"--tp", "3"} << "--tp 3 must divide --heads 4";
        QTest::newRow("unknown option") << QStringList{"--bogus"} << "--bogus";
        QTest::newRow("missing calibration run")
            << QStringList{"--calibrate", "nowhere.fulcrum"} << "nowhere.fulcrum";
        QTest::newRow("missing cost model")
            << QStringList{"--cost-model", "nowhere.json"} << "nowhere.json";
        QTest::newRow("no epochs") << QStringList{"--epochs", "0"} << "--epochs must be at least 1";
        QTest::newRow("S_max below the context")
            << QStringList{"--context", "256", "--wlb-max-tokens", "100"}
            << "--wlb-max-tokens 100 is less than --context 256";
        QTest::newRow("negative delay bound")
            << QStringList{"--wlb-max-delay", "-1"} << "--wlb-max-delay must be at least 0";
        QTest::newRow("bad thresholds")
            << QStringList{"--wlb-thresholds", "9,3"} << "--wlb-thresholds takes tuned, none";
        QTest::newRow("fitted packing cost without a fit")
            << QStringList{"--packing-cost", "fitted"} << "--packing-cost fitted needs";
        QTest::newRow("hot-switch gap")
            << QStringList{"--hot-switch", "0-10:dp1;20-:dp1"} << "leaving a gap";
        QTest::newRow("hot-switch world")
            << QStringList{"--dp", "2", "--hot-switch", "0-:dp4"} << "the world of 2";
        QTest::newRow("hot-switch with --compare")
            << QStringList{"--dp", "2", "--hot-switch", "0-:dp2", "--compare", "fixed,wlb"}
            << "leave out --compare";
        QTest::newRow("no such folder")
            << QStringList{"-o", "missing/dir/run.fulcrum"} << "does not exist";
    }
    void badOptions() {
        QFETCH(QStringList, args);
        QFETCH(QString, message);
        const Outcome outcome = simulate(args);
        QCOMPARE(outcome.exit_code, 2);
        QVERIFY2(outcome.err.contains(message), qPrintable(outcome.err));
        QVERIFY(outcome.out.isEmpty());
    }

    void compareTable() {
        const Outcome outcome =
            simulate(kSmall + QStringList{"--compare", "fixed,ilp,wlb", "--ilp-time-limit", "0.2"});
        QVERIFY2(outcome.exit_code == 0, qPrintable(outcome.err));
        const QStringList lines = outcome.out.split('\n');
        int header = -1;
        for (int i = 0; i < lines.size(); ++i) {
            if (lines[i].startsWith("balancer")) {
                header = i;
            }
        }
        QVERIFY2(header >= 0, qPrintable(outcome.out));
        const QStringList columns =
            lines[header].split(QRegularExpression("\\s{2,}"), Qt::SkipEmptyParts);
        QCOMPARE(columns,
                 (QStringList{"balancer", "steps", "step time", "tokens", "tokens/s", "vs fixed",
                              "imbalance", "bubble", "delay mean", "delay max"}));
        QVERIFY(lines[header + 1].startsWith("fixed "));
        QVERIFY(lines[header + 1].contains("1.00x"));
        QVERIFY(lines[header + 2].startsWith("ilp "));
        QVERIFY(lines[header + 3].startsWith("wlb "));
        QVERIFY(outcome.out.contains("dp 2 × tp 2 × pp 2 × cp 2 = 16 ranks"));
        QVERIFY(outcome.out.contains("cost model: analytic"));
        // --steps: the balancers trained different documents, and the table says so.
        QVERIFY2(outcome.out.contains("by steps the balancers train different documents"),
                 qPrintable(outcome.out));
    }

    // --hot-switch: the static layout and the hot-switched run on the same documents, then
    // the time per bucket with the switching as "others" and the switches' bytes.
    void hotSwitchTable() {
        const QStringList args = {"--layers",
                                  "4",
                                  "--dp",
                                  "2",
                                  "--pp",
                                  "2",
                                  "--cp",
                                  "2",
                                  "--tp",
                                  "2",
                                  "--micro-batches",
                                  "4",
                                  "--documents",
                                  "256",
                                  "--hot-switch",
                                  "0-64:dp16;64-:dp2,tp2,pp2,cp2"};
        const Outcome outcome = simulate(args);
        QVERIFY2(outcome.exit_code == 0, qPrintable(outcome.err));
        QVERIFY2(outcome.out.contains(QRegularExpression("\\nstatic dp2,tp2,pp2,cp2 +\\d+ ")),
                 qPrintable(outcome.out));
        QVERIFY(outcome.out.contains(QRegularExpression("\\nhot-switch +\\d+ ")));
        QVERIFY(outcome.out.contains("every balancer trained the same"));
        QVERIFY(outcome.out.contains(QRegularExpression("\\n0-64 +dp16 ")));
        QVERIFY(outcome.out.contains("others (switching)"));
        QVERIFY(outcome.out.contains("dp2,tp2,pp2,cp2 -> dp16"));
    }

    // Without --steps a comparison plays one epoch: every balancer the same documents, each
    // once, so tokens agree and tokens/s is the fair ratio.
    void compareOnTheSameDocuments() {
        const QStringList args = {"--layers",
                                  "2",
                                  "--dp",
                                  "2",
                                  "--micro-batches",
                                  "4",
                                  "--documents",
                                  "300",
                                  "--compare",
                                  "fixed,ilp,wlb",
                                  "--ilp-time-limit",
                                  "0.2"};
        const Outcome table = simulate(args);
        QVERIFY2(table.exit_code == 0, qPrintable(table.err));
        QVERIFY2(table.out.contains("every balancer trained the same 300 documents, 1 epoch(s)"),
                 qPrintable(table.out));
        QVERIFY2(
            table.out.contains("wlb: S_max ") && table.out.contains("tuned on the first epoch"),
            qPrintable(table.out));
        const Outcome outcome = simulate(args + QStringList{"--json"});
        QVERIFY2(outcome.exit_code == 0, qPrintable(outcome.err));
        const QJsonArray results =
            QJsonDocument::fromJson(outcome.out.toUtf8()).object()["results"].toArray();
        QCOMPARE(results.size(), 3);
        const QJsonObject fixed = results[0].toObject();
        QCOMPARE(fixed["documents"].toInt(), 300);
        QCOMPARE(fixed["epochs"].toInt(), 1);
        QCOMPARE(fixed["max_delay_steps"].toInt(), 0);
        QCOMPARE(fixed["tokens_per_s_vs_first"].toDouble(), 1.0);
        QVERIFY(fixed["tokens"].toDouble() > 0);
        for (const auto& result : results) {
            const QJsonObject r = result.toObject();
            QCOMPARE(r["tokens"].toDouble(), fixed["tokens"].toDouble());
            QCOMPARE(r["documents"].toInt(), 300);
            QCOMPARE(r["tokens_per_s_vs_first"].toDouble(),
                     r["tokens_per_s"].toDouble() / fixed["tokens_per_s"].toDouble());
        }
        const QJsonObject wlb = results[2].toObject();
        QVERIFY(wlb["mean_delay_steps"].toDouble() > 0);
        QVERIFY(wlb["max_delay_steps"].toInt() >= 1);
        QVERIFY(wlb["wlb"].toObject()["tuned"].toBool());
        // The epoch's steps differ: wlb holds documents back and drains them at the end.
        QVERIFY(results[2].toObject()["steps"].toArray().size() > 0);
    }

    // Adaptive CP sharding says what it chose, per balancer: every micro-batch of the epoch
    // per document or per sequence.
    // wlb's default S_max comes from the memory model of the layout as it runs: full
    // recomputation keeps each layer's input and one layer's activations (the one being
    // recomputed) instead of every layer's, so a 7B model at 32K on 80 GiB packs micro-batches
    // of up to 1.875× the context instead of 1×.
    void wlbMaxTokensFollowRecomputation() {
        const auto s_max = [&](const QString& recompute) {
            const Outcome out = simulate(
                {"--layers",         "32",    "--hidden",   "4096",  "--heads",     "32",
                 "--vocab",          "32000", "--context",  "32768", "--dp",        "8",
                 "--micro-batches",  "4",     "--balancer", "wlb",   "--steps",     "1",
                 "--documents",      "2000",  "--dtype",    "bf16",  "--recompute", recompute,
                 "--wlb-thresholds", "none"});
            const QRegularExpressionMatch match =
                QRegularExpression("S_max (\\d+) tokens \\(memory model").match(out.out);
            return match.hasMatch() ? match.captured(1).toLongLong() : -1;
        };
        QCOMPARE(s_max("none"), 32768LL);
        QCOMPARE(s_max("full"), 61440LL);
    }

    void adaptiveShardingIsRecorded() {
        const QStringList args = {"--layers",           "2",        "--cp",        "2",
                                  "--micro-batches",    "4",        "--documents", "200",
                                  "--cp-shard",         "adaptive", "--compare",   "fixed,wlb",
                                  "--attention-kernel", "cuda"};
        const Outcome table = simulate(args);
        QVERIFY2(table.exit_code == 0, qPrintable(table.err));
        QVERIFY2(table.out.contains("adaptive cp sharding, wlb (cuda kernel model): "),
                 qPrintable(table.out));
        const Outcome outcome = simulate(args + QStringList{"--json"});
        const QJsonArray results =
            QJsonDocument::fromJson(outcome.out.toUtf8()).object()["results"].toArray();
        for (const auto& result : results) {
            const QJsonObject r = result.toObject();
            int microbatches = 0;
            for (const auto& step : r["steps"].toArray()) {
                microbatches += step.toObject()["microbatches"].toInt();
            }
            const QJsonObject chosen = r["cp_sharding"].toObject();
            QCOMPARE(
                chosen["per_document_microbatches"].toInt() + chosen["zigzag_microbatches"].toInt(),
                microbatches);
        }
        const Outcome bad = simulate({"--attention-kernel", "tpu"});
        QCOMPARE(bad.exit_code, 2);
        QVERIFY2(bad.err.contains("unknown attention kernel 'tpu'"), qPrintable(bad.err));
    }

    void epochsAndStepsExclude() {
        const Outcome both = simulate({"--steps", "2", "--epochs", "1"});
        QCOMPARE(both.exit_code, 2);
        QVERIFY2(both.err.contains("excludes"), qPrintable(both.err));
    }

    // The schedules of a comparison play with otherwise identical settings: interleaving and
    // ZB-H1 shrink 1F1B's bubble (docs/simulate.md, "The pipeline").
    void compareSchedules() {
        const Outcome outcome =
            simulate(kSmall + QStringList{"--compare-schedules", "1f1b,interleaved,zb-h1", "--json",
                                          "--sequence-parallel", "--dtype", "bf16"});
        QVERIFY2(outcome.exit_code == 0, qPrintable(outcome.err));
        const QJsonArray results =
            QJsonDocument::fromJson(outcome.out.toUtf8()).object()["results"].toArray();
        QCOMPARE(results.size(), 3);
        QCOMPARE(results[0].toObject()["schedule"].toString(), QString("1f1b"));
        QCOMPARE(results[1].toObject()["schedule"].toString(), QString("interleaved"));
        QCOMPARE(results[1].toObject()["virtual_stages"].toInt(), 2);
        QCOMPARE(results[2].toObject()["schedule"].toString(), QString("zb-h1"));
        const double one_f_one_b = results[0].toObject()["mean_bubble_fraction"].toDouble();
        QVERIFY(results[1].toObject()["mean_bubble_fraction"].toDouble() < one_f_one_b);
        QVERIFY(results[2].toObject()["mean_bubble_fraction"].toDouble() < one_f_one_b);

        const Outcome help = simulate({"--help"});
        QCOMPARE(help.exit_code, 0);
        for (const char* option :
             {"--compare-schedules", "interleaved", "zb-h1", "--virtual-stages", "--recompute",
              "--sequence-parallel", "--dtype", "--overlap-grad-reduce", "--hardware"}) {
            QVERIFY2(help.out.contains(option), option);
        }
    }

    void compareWritesOneRunPerBalancer() {
        const Outcome outcome =
            simulate(kSmall + QStringList{"--compare", "fixed,wlb", "-o", "cmp.fulcrum"});
        QVERIFY2(outcome.exit_code == 0, qPrintable(outcome.err));
        for (const QString balancer : {"fixed", "wlb"}) {
            const QString file = path("cmp-" + balancer + ".fulcrum");
            QVERIFY2(outcome.out.contains("wrote " + QString("cmp-") + balancer + ".fulcrum"),
                     qPrintable(outcome.out));
            auto reader = store::TraceReader::open(file.toStdString());
            QVERIFY(reader.ok());
            QCOMPARE(reader->run().origin, RunOrigin::simulated);
            QCOMPARE(reader->ranks().size(), std::size_t(16));
            const auto config =
                QJsonDocument::fromJson(QByteArray::fromStdString(reader->run().config_json))
                    .object();
            QCOMPARE(config["balancer"].toString(), balancer);
            QVERIFY(config["simulated"].toBool());
            QVERIFY(QString::fromStdString(reader->run().command).contains("--compare"));
        }
        QVERIFY(!QFile::exists(path("cmp.fulcrum")));
    }

    void existingOutputRefused() {
        const QStringList args = kSmall + QStringList{"-o", "once.fulcrum"};
        QCOMPARE(simulate(args).exit_code, 0);
        const Outcome again = simulate(args);
        QCOMPARE(again.exit_code, 2);
        QVERIFY2(again.err.contains("already exists") && again.err.contains("--force"),
                 qPrintable(again.err));
        // A comparison checks every output before simulating anything.
        QVERIFY(QFile::copy(path("once.fulcrum"), path("both-wlb.fulcrum")));
        const Outcome compared =
            simulate(kSmall + QStringList{"--compare", "fixed,wlb", "-o", "both.fulcrum"});
        QCOMPARE(compared.exit_code, 2);
        QVERIFY(!QFile::exists(path("both-fixed.fulcrum")));
        QCOMPARE(simulate(args + QStringList{"--force"}).exit_code, 0);
        QVERIFY(store::TraceReader::open(path("once.fulcrum").toStdString()).ok());
        QVERIFY(!QFile::exists(path("once.fulcrum.partial")));
    }

    void json() {
        const Outcome outcome = simulate(kSmall + QStringList{"--compare", "fixed,wlb", "--json"});
        QVERIFY2(outcome.exit_code == 0, qPrintable(outcome.err));
        QJsonParseError error;
        const QJsonDocument document = QJsonDocument::fromJson(outcome.out.toUtf8(), &error);
        QVERIFY2(error.error == QJsonParseError::NoError, qPrintable(error.errorString()));
        const QJsonObject root = document.object();
        QCOMPARE(root["format"].toString(), QString("fulcrum simulate"));
        QCOMPARE(root["config"].toObject()["pp"].toInt(), 2);
        QVERIFY(root["cost_model"].toObject().contains("passes"));
        const QJsonArray results = root["results"].toArray();
        QCOMPARE(results.size(), 2);
        QCOMPARE(results[0].toObject()["balancer"].toString(), QString("fixed"));
        QCOMPARE(results[1].toObject()["balancer"].toString(), QString("wlb"));
        QCOMPARE(results[0].toObject()["vs_first"].toDouble(), 1.0);
        QCOMPARE(results[1].toObject()["steps"].toArray().size(), 2);
        QVERIFY(results[1].toObject()["mean_step_ns"].toDouble() > 0);
    }

    // A run fulcrum-train trained on text records no length spec: --calibrate replays the
    // documents it trained (its workload table), every one once, instead of refusing.
    void calibrateOnATextRunReplaysItsDocuments() {
        QProcess capture;
        capture.setProcessChannelMode(QProcess::MergedChannels);
        capture.start(kBinaryDir + "/app/fulcrum",
                      {"capture", "-o", path("text"), "--", kBinaryDir + "/engine/fulcrum-train",
                       "--layers", "2", "--steps", "3"});
        QVERIFY(capture.waitForFinished(120'000));
        QVERIFY2(capture.exitCode() == 0, capture.readAll().constData());
        auto reader = store::TraceReader::open(path("text/run.fulcrum").toStdString());
        QVERIFY(reader.ok());
        auto workload = reader->workload();
        QVERIFY(workload.ok() && !workload->empty());
        std::map<std::pair<std::int32_t, std::int64_t>, std::int64_t> trained;
        for (const auto& row : *workload) {
            trained[{row.step, row.doc_id}] = row.doc_length;
        }
        std::int64_t tokens = 0;
        for (const auto& [document, length] : trained) {
            tokens += length;
        }
        const Outcome replayed = simulate({"--calibrate", "text/run.fulcrum", "--json"});
        QVERIFY2(replayed.exit_code == 0, qPrintable(replayed.err));
        QVERIFY2(replayed.err.contains(
                     QString("replaying the %1 documents it trained").arg(trained.size())),
                 qPrintable(replayed.err));
        const QJsonObject result = QJsonDocument::fromJson(replayed.out.toUtf8())
                                       .object()["results"]
                                       .toArray()
                                       .at(0)
                                       .toObject();
        QCOMPARE(result["tokens"].toInteger(), tokens);
        QCOMPARE(result["documents"].toInteger(), static_cast<qint64>(trained.size()));
    }

    // --calibrate on a simulated run: its settings unless overridden, its fitted costs.
    void calibrateOnARun() {
        QCOMPARE(
            simulate(kSmall + QStringList{"--balancer", "wlb", "-o", "calib.fulcrum"}).exit_code,
            0);
        const Outcome same = simulate({"--calibrate", "calib.fulcrum"});
        QVERIFY2(same.exit_code == 0, qPrintable(same.err));
        QVERIFY2(same.out.contains("dp 2 × tp 2 × pp 2 × cp 2"), qPrintable(same.out));
        QVERIFY(same.out.contains("cost model: fitted on 'calib'"));
        QVERIFY(same.out.contains("\nwlb "));
        const Outcome deeper =
            simulate({"--calibrate", "calib.fulcrum", "--pp", "4", "--compare", "fixed,wlb"});
        QVERIFY2(deeper.exit_code == 0, qPrintable(deeper.err));
        QVERIFY(deeper.out.contains("dp 2 × tp 2 × pp 4 × cp 2"));
        // One line for the three stages the same fit gives (not one per stage).
        QVERIFY2(deeper.out.contains("derived: stages 0-2 forward: from the fit of stage 0 (2 -> "
                                     "1 layers)\n"),
                 qPrintable(deeper.out));
    }

    // A run played with FPDT's techniques on a Llama shape says so in run.config, and
    // --calibrate on it plays them again unless the command line says otherwise.
    void fpdtSettingsRoundTrip() {
        const QStringList llama = {"--layers",
                                   "2",
                                   "--hidden",
                                   "256",
                                   "--heads",
                                   "8",
                                   "--kv-heads",
                                   "2",
                                   "--ffn-hidden",
                                   "704",
                                   "--architecture",
                                   "llama",
                                   "--vocab",
                                   "1024",
                                   "--context",
                                   "2048",
                                   "--dp",
                                   "2",
                                   "--cp",
                                   "2",
                                   "--cp-impl",
                                   "ulysses",
                                   "--zero",
                                   "3",
                                   "--recompute",
                                   "full",
                                   "--offload-checkpoints",
                                   "--attention-chunk",
                                   "512",
                                   "--offload",
                                   "on",
                                   "--dtype",
                                   "bf16",
                                   "--grad-reduce-dtype",
                                   "bf16",
                                   "--hardware",
                                   "a100",
                                   "--lengths",
                                   "long-tail:context=2048",
                                   "--documents",
                                   "64",
                                   "--steps",
                                   "1",
                                   "-o",
                                   "fpdt.fulcrum"};
        const Outcome played = simulate(llama);
        QVERIFY2(played.exit_code == 0, qPrintable(played.err));
        QVERIFY2(played.out.contains("model: llama, 2 layers, hidden 256, 8 heads (2 key-value), "
                                     "MLP 704"),
                 qPrintable(played.out));
        auto reader = store::TraceReader::open(path("fpdt.fulcrum").toStdString());
        QVERIFY(reader.ok());
        const auto config =
            QJsonDocument::fromJson(QByteArray::fromStdString(reader->run().config_json)).object();
        QCOMPARE(config["cp_impl"].toString(), QString("ulysses"));
        QCOMPARE(config["zero_stage"].toInt(), 3);
        QVERIFY(config["offload_checkpoints"].toBool());
        QCOMPARE(config["attention_backend"].toString(), QString("flash"));
        QCOMPARE(config["model"].toObject()["architecture"].toString(), QString("llama"));
        QCOMPARE(config["model"].toObject()["kv_heads"].toInt(), 2);
        QCOMPARE(config["model"].toObject()["ffn_hidden"].toInt(), 704);
        QCOMPARE(config["attention_chunk"].toInt(), 512);
        QVERIFY(config["offload"].toBool());
        QCOMPARE(config["grad_reduce_dtype"].toString(), QString("bf16"));
        const Outcome again =
            simulate({"--calibrate", "fpdt.fulcrum", "--zero", "1", "-o", "again.fulcrum"});
        QVERIFY2(again.exit_code == 0, qPrintable(again.err));
        QVERIFY2(again.out.contains("model: llama, 2 layers, hidden 256, 8 heads (2 key-value)"),
                 qPrintable(again.out));
        // The run's chunks and their offload are replayed unless the command line says.
        auto replayed = store::TraceReader::open(path("again.fulcrum").toStdString());
        QVERIFY(replayed.ok());
        const auto again_config =
            QJsonDocument::fromJson(QByteArray::fromStdString(replayed->run().config_json))
                .object();
        QCOMPARE(again_config["attention_chunk"].toInt(), 512);
        QVERIFY(again_config["offload"].toBool());
        QCOMPARE(again_config["zero_stage"].toInt(), 1);
        QCOMPARE(again_config["grad_reduce_dtype"].toString(), QString("bf16"));
        // fulcrum analyze says what the CP load's alternatives are under Ulysses.
        QProcess analyze;
        analyze.start(kBinaryDir + "/app/fulcrum", {"analyze", path("fpdt.fulcrum")});
        QVERIFY(analyze.waitForFinished(120'000));
        const QString analysed = QString::fromUtf8(analyze.readAllStandardOutput());
        QVERIFY2(analyze.exitCode() == 0 &&
                     analysed.contains("Ulysses splits the heads: attention is even whatever "
                                       "the sharding") &&
                     analysed.contains("sharding (all-gather CP)"),
                 qPrintable(analysed));
        // Refused with the option named: Ulysses needs whole heads on every TP × CP rank.
        const Outcome refused = simulate({"--layers", "2", "--heads", "4", "--cp", "8", "--cp-impl",
                                          "ulysses", "--lengths", "long-tail:context=256"});
        QCOMPARE(refused.exit_code, 2);
        QVERIFY2(refused.err.contains("--cp-impl ulysses gives each CP rank whole heads"),
                 qPrintable(refused.err));
    }

    // --calibrate packs as the run did: its S_max, delay bound and thresholds, unless given.
    void calibrateKeepsTheRunsWlbSettings() {
        QCOMPARE(simulate(kSmall + QStringList{"--balancer", "wlb", "--wlb-max-tokens", "300",
                                               "--wlb-max-delay", "2", "--wlb-thresholds", "64,128",
                                               "-o", "wlb-settings.fulcrum"})
                     .exit_code,
                 0);
        const Outcome same = simulate({"--calibrate", "wlb-settings.fulcrum"});
        QVERIFY2(same.out.contains("wlb: S_max 300 tokens, max delay 2, thresholds 64,128"),
                 qPrintable(same.out));
        const Outcome given =
            simulate({"--calibrate", "wlb-settings.fulcrum", "--wlb-thresholds", "none"});
        QVERIFY2(given.out.contains("max delay 2, thresholds none"), qPrintable(given.out));
    }

    // A run without the engine's configuration or workload cannot calibrate; the message
    // says what is missing and what to give instead.
    void calibrateNeedsWhatTheRunLacks() {
        const std::string bare = path("bare.fulcrum").toStdString();
        {
            RunInfo run;
            run.name = "bare";
            run.config_json = R"({"dp":1,"tp":1,"pp":1,"cp":1})";
            auto writer = store::TraceWriter::create(bare, run);
            QVERIFY(writer.ok());
            RankInfo rank;
            rank.dp = rank.pp = rank.cp = rank.tp = 0;
            (*writer)->add_rank(rank);
            const LaneId lane = (*writer)->add_lane(0, LaneKind::host_thread, "main");
            for (int j = 0; j < 4; ++j) {
                Event event;
                event.lane = lane;
                event.name = (*writer)->intern("forward");
                event.start_ns = j * 100;
                event.end_ns = j * 100 + 50;
                event.step = 0;
                event.microbatch = j;
                event.stage = 0;
                event.phase = Phase::forward;
                event.category = Category::compute;
                (*writer)->add_event(event);
            }
            QVERIFY((*writer)->close().ok());
        }
        const Outcome unshaped = simulate({"--calibrate", "bare.fulcrum"});
        QCOMPARE(unshaped.exit_code, 2);
        QVERIFY2(unshaped.err.contains("--layers") && unshaped.err.contains("--lengths"),
                 qPrintable(unshaped.err));
        const Outcome no_workload =
            simulate({"--calibrate", "bare.fulcrum", "--layers", "2", "--hidden", "64", "--context",
                      "256", "--micro-batches", "4", "--lengths", "lognormal:median=100"});
        QCOMPARE(no_workload.exit_code, 2);
        QVERIFY2(no_workload.err.contains("no workload table") &&
                     no_workload.err.contains("--cost-model"),
                 qPrintable(no_workload.err));
    }

    // A run that does not say its grid (a trace imported without rank coordinates or
    // degrees): its placeholder 1×1×1×1 is no grid to calibrate on, and simulate says so.
    void calibrateRefusesAnUnknownGrid() {
        const std::string foreign = path("foreign.fulcrum").toStdString();
        {
            RunInfo run;
            run.name = "foreign";
            run.origin = RunOrigin::imported;
            auto writer = store::TraceWriter::create(foreign, run);
            QVERIFY(writer.ok());
            RankInfo rank;  // no coordinates: dp, pp, cp, tp stay −1
            (*writer)->add_rank(rank);
            const LaneId lane = (*writer)->add_lane(0, LaneKind::host_thread, "main");
            Event event;
            event.lane = lane;
            event.name = (*writer)->intern("forward");
            event.end_ns = 50;
            event.step = 0;
            event.microbatch = 0;
            event.phase = Phase::forward;
            event.category = Category::compute;
            (*writer)->add_event(event);
            QVERIFY((*writer)->close().ok());
        }
        const Outcome outcome = simulate({"--calibrate", "foreign.fulcrum", "--layers", "2",
                                          "--hidden", "64", "--context", "256", "--micro-batches",
                                          "4", "--lengths", "lognormal:median=100"});
        QCOMPARE(outcome.exit_code, 2);
        QVERIFY2(outcome.err.contains("does not say its grid"), qPrintable(outcome.err));
    }

    void costModelFile() {
        const Outcome analytic = simulate(kSmall + QStringList{"--json"});
        QCOMPARE(analytic.exit_code, 0);
        const QJsonObject model =
            QJsonDocument::fromJson(analytic.out.toUtf8()).object()["cost_model"].toObject();
        QFile file(path("model.json"));
        QVERIFY(file.open(QIODevice::WriteOnly));
        file.write(QJsonDocument(model).toJson());
        file.close();
        const Outcome given =
            simulate(kSmall + QStringList{"--cost-model", "model.json", "--json"});
        QVERIFY2(given.exit_code == 0, qPrintable(given.err));
        const auto step = [](const Outcome& outcome) {
            return QJsonDocument::fromJson(outcome.out.toUtf8())
                .object()["results"]
                .toArray()[0]
                .toObject()["mean_step_ns"]
                .toDouble();
        };
        // The analytic model written out and read back plays the same steps.
        QCOMPARE(step(given), step(analytic));

        QVERIFY(file.open(QIODevice::WriteOnly));
        file.write("{\"passes\": 3}");
        file.close();
        const Outcome broken = simulate({"--cost-model", "model.json"});
        QCOMPARE(broken.exit_code, 2);
        QVERIFY2(broken.err.contains("model.json"), qPrintable(broken.err));
    }

    void help() {
        const Outcome outcome = simulate({"--help"});
        QCOMPARE(outcome.exit_code, 0);
        for (const QString option : {"--calibrate", "--cost-model", "--compare", "--output",
                                     "--force", "--json", "--progress", "--lengths", "--tflops",
                                     "--micro-batches", "--cp-shard", "--ilp-window"}) {
            QVERIFY2(outcome.out.contains(option), qPrintable(option));
        }
    }

    void progressWhenAsked() {
        const Outcome outcome = simulate(kSmall + QStringList{"--progress", "-o", "p.fulcrum"});
        QCOMPARE(outcome.exit_code, 0);
        QVERIFY2(outcome.err.contains("simulating fixed 100%"), qPrintable(outcome.err));
        const Outcome quiet = simulate(kSmall);
        QVERIFY(quiet.err.isEmpty());
    }
};

QTEST_GUILESS_MAIN(SimulateCliTest)
#include "test_sim_cli.moc"
