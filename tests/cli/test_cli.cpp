// The `fulcrum` command line, end to end: real processes, real files, output compared with
// golden files by `diff -u`. Set FULCRUM_UPDATE_GOLDEN=1 to rewrite the golden files after a
// deliberate change, and review the diff before committing it.
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QJsonValue>
#include <QProcess>
#include <QProcessEnvironment>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QTest>

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

QString fulcrum() {
    return kBinaryDir + "/app/fulcrum";
}

// The tokens/s of the first result of `fulcrum simulate --json`.
double played_tokens_per_second(const Outcome& simulated) {
    return QJsonDocument::fromJson(simulated.output.toUtf8())
        .object()
        .value("results")
        .toArray()
        .at(0)
        .toObject()
        .value("tokens_per_second")
        .toDouble();
}

QJsonObject read_json(const QString& path) {
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly)) {
        qFatal("cannot read %s", qPrintable(path));
    }
    return QJsonDocument::fromJson(file.readAll()).object();
}

// The help line of `flag` in a tool's --help ("  --context INT=256   Tokens of ..."), trimmed;
// empty when the tool has no such flag.
QString help_line(const QString& help, const QString& flag) {
    const QRegularExpression line("^\\s+" + QRegularExpression::escape(flag) + "(\\s.*)?$",
                                  QRegularExpression::MultilineOption);
    return line.match(help).captured(0).trimmed();
}

// The value at a path of member names and array indices ("0").
QJsonValue at(const QJsonObject& root, const QStringList& path) {
    QJsonValue value = root;
    for (const QString& key : path) {
        value = value.isArray() ? value.toArray().at(key.toInt()) : value.toObject().value(key);
    }
    return value;
}

// The first object of an array whose member `key` is `value`.
QJsonObject find_row(const QJsonArray& rows, const QString& key, const QJsonValue& value) {
    for (const QJsonValue& row : rows) {
        if (row.toObject().value(key) == value) {
            return row.toObject();
        }
    }
    return {};
}

// One rank of a PyTorch-profiler (Kineto) trace, times in µs. Stream 7 runs four computation
// kernels, stream 20 an NCCL all-reduce and a copy; every kernel's launch call is on thread 100.
// `softmax` names kernels 3 and 4 (the diff test renames them).
QByteArray kineto_rank(const QString& softmax) {
    QString text =
        R"json({"schemaVersion":1,"distributedInfo":{"backend":"nccl","rank":0,"world_size":1},
"baseTimeNanoseconds":1700000000000000000,"traceEvents":[
{"ph":"X","cat":"user_annotation","name":"ProfilerStep#0","pid":100,"tid":100,"ts":1000,"dur":1000},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":100,"tid":100,"ts":1010,"dur":10,"args":{"correlation":1}},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":100,"tid":100,"ts":1025,"dur":5,"args":{"correlation":2}},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":100,"tid":100,"ts":1100,"dur":10,"args":{"correlation":5}},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":100,"tid":100,"ts":1300,"dur":10,"args":{"correlation":3}},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":100,"tid":100,"ts":1330,"dur":5,"args":{"correlation":4}},
{"ph":"X","cat":"cuda_runtime","name":"cudaMemcpyAsync","pid":100,"tid":100,"ts":1410,"dur":5,"args":{"correlation":6}},
{"ph":"X","cat":"kernel","name":"gemm_a","pid":0,"tid":7,"ts":1030,"dur":100,"args":{"correlation":1,"device":0,"stream":7}},
{"ph":"X","cat":"kernel","name":"gemm_a","pid":0,"tid":7,"ts":1140,"dur":100,"args":{"correlation":2,"device":0,"stream":7}},
{"ph":"X","cat":"kernel","name":"SOFTMAX","pid":0,"tid":7,"ts":1320,"dur":50,"args":{"correlation":3,"device":0,"stream":7}},
{"ph":"X","cat":"kernel","name":"SOFTMAX","pid":0,"tid":7,"ts":1420,"dur":30,"args":{"correlation":4,"device":0,"stream":7}},
{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce_Sum_f32_RING_LL","pid":0,"tid":20,"ts":1200,"dur":200,"args":{"correlation":5,"device":0,"stream":20}},
{"ph":"X","cat":"gpu_memcpy","name":"Memcpy HtoD (Pinned -> Device)","pid":0,"tid":20,"ts":1440,"dur":60,"args":{"correlation":6,"device":0,"stream":20,"bytes":1048576}}
]})json";
    return text.replace("SOFTMAX", softmax).toUtf8();
}

void write_file(const QString& path, const QByteArray& bytes) {
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly)) {
        qFatal("cannot write %s", qPrintable(path));
    }
    file.write(bytes);
}

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
        QVERIFY2(diff.exit_code == 0,
                 qPrintable("output differs from " + golden + ":\n" + diff.output));
    }

    QString transcript(const QStringList& args) {
        const Outcome outcome = run(fulcrum(), args, work_.path());
        return "$ fulcrum " + args.join(' ') + "\n" + outcome.output + "[exit " +
               QString::number(outcome.exit_code) + "]\n";
    }

private slots:
    // One flag table (core/parallel/layout_flags.h): fulcrum-train and fulcrum simulate show
    // each layout and model flag alike, name, default and help; fulcrum plan the model's.
    void oneFlagTable() {
        QTemporaryDir dir;
        // fulcrum-train links Open MPI, whose libraries leak at exit: under the sanitizer build
        // LeakSanitizer would fail the run, which is not what this test asks about.
        QProcess train_process;
        QProcessEnvironment environment = QProcessEnvironment::systemEnvironment();
        const QString asan = environment.value("ASAN_OPTIONS");
        environment.insert("ASAN_OPTIONS", (asan.isEmpty() ? "" : asan + ":") + "detect_leaks=0");
        train_process.setProcessEnvironment(environment);
        train_process.start(kBinaryDir + "/engine/fulcrum-train", {"--help"});
        QVERIFY(train_process.waitForFinished(60'000));
        const Outcome train{train_process.exitCode(),
                            QString::fromUtf8(train_process.readAllStandardOutput())};
        const Outcome simulate = run(fulcrum(), {"simulate", "--help"}, dir.path());
        const Outcome plan = run(fulcrum(), {"plan", "--help"}, dir.path());
        QCOMPARE(train.exit_code, 0);
        QCOMPARE(simulate.exit_code, 0);
        QCOMPARE(plan.exit_code, 0);
        for (const QString flag :
             {"--dp", "--tp", "--pp", "--cp", "--micro-batches", "--schedule", "--virtual-stages",
              "--stage-layers", "--recompute", "--sequence-parallel", "--layers", "--hidden",
              "--heads", "--context"}) {
            const QString line = help_line(train.output, flag);
            QVERIFY2(!line.isEmpty(), qPrintable(flag));
            QCOMPARE(help_line(simulate.output, flag), line);
        }
        const QString context = help_line(plan.output, "--context");
        QVERIFY2(context.endsWith("Tokens of one fixed-length micro-batch; no document is longer"),
                 qPrintable(context));
        QVERIFY(!help_line(plan.output, "--vocab").isEmpty());
        QVERIFY(help_line(train.output, "--vocab").isEmpty());  // fulcrum-train models bytes
    }
    void initTestCase() {
        QVERIFY(work_.isValid());
        const Outcome synth =
            run(kBinaryDir + "/tests/support/fulcrum-synth",
                {"ranks", "--dp", "2", "--pp", "2", "--steps", "2", "--microbatches", "4"},
                work_.path());
        QVERIFY2(synth.exit_code == 0, qPrintable(synth.output));
    }

    void mergeInfoAndExport() {
        QString text = transcript({"merge", "-o", "run.fulcrum", "ranks"});
        text += transcript({"info", "run.fulcrum"});
        text += transcript({"info", "ranks/rank-3.sqlite"});
        text += transcript({"export", "run.fulcrum", "--format", "csv", "-o", "events.csv"});
        text += transcript({"export", "run.fulcrum", "--format", "chrome"});
        // Rows for SQL: the run copied as rows, and merged straight into rows; both hold the
        // events the run of blocks holds, which plain sqlite3 can count.
        text += transcript({"export", "run.fulcrum", "--format", "sqlite"});
        text += transcript({"merge", "--rows", "-o", "rows.fulcrum", "ranks"});
        text += transcript({"export", "rows.fulcrum", "--format", "csv", "-o", "rows.csv"});
        text += transcript({"export", "run-rows.fulcrum", "--format", "csv", "-o", "copy.csv"});
        expect_golden("merge-info-export.txt", text);
        const auto read_all = [&](const char* name) {
            QFile file(work_.filePath(name));
            return file.open(QIODevice::ReadOnly) ? file.readAll() : QByteArray();
        };
        QVERIFY(!read_all("events.csv").isEmpty());
        QCOMPARE(read_all("rows.csv"), read_all("events.csv"));
        QCOMPARE(read_all("copy.csv"), read_all("events.csv"));
        const Outcome counted =
            run("sqlite3", {"run-rows.fulcrum", "SELECT COUNT(*) FROM event"}, work_.path());
        QCOMPARE(counted.exit_code, 0);
        QCOMPARE(counted.output.trimmed().toLongLong(),
                 static_cast<long long>(read_all("events.csv").count('\n') - 1));

        QFile csv(work_.filePath("events.csv"));
        QVERIFY(csv.open(QIODevice::ReadOnly));
        expect_golden("events.csv", QString::fromUtf8(csv.readAll()));
        QFile json(work_.filePath("run.json"));
        QVERIFY(json.open(QIODevice::ReadOnly));
        expect_golden("run.json", QString::fromUtf8(json.readAll()));
    }

    // More collective groups than --top shows: each name's groups together first (the run's
    // two DP groups of two: 4 calls, 256 MiB), then the groups furthest below their name's
    // bandwidth, with how far.
    void analyzeFoldsCollectiveGroupsPastTop() {
        const QString text = transcript({"analyze", "run.fulcrum", "--top", "1"});
        QVERIFY2(text.contains("communication by collective (per name, its groups together"),
                 qPrintable(text));
        QVERIFY(text.contains(
            QRegularExpression("dp all-reduce gradients +all-reduce +2 +2 +4 +256.00 MiB")));
        QVERIFY(
            text.contains("communication's slowest groups (per name and group, the furthest "
                          "below their name's busbw first) (1 of 2 groups)"));
        QVERIFY(text.contains(QRegularExpression("0,2 +2 +128.00 MiB .* 1.00x")));
    }

    // A report of a run with more collective groups than it lists plainly (a simulated
    // dp2 tp2 pp4 cp2 run: 16 TP, 16 CP, 8 DP and 8 embedding groups): each name's groups
    // together, then every group with its busbw against its name's.
    void reportFoldsCollectiveGroups() {
        const Outcome simulated = run(fulcrum(),
                                      {"simulate",
                                       "--hardware",
                                       "a100",
                                       "--layers",
                                       "8",
                                       "--hidden",
                                       "512",
                                       "--heads",
                                       "8",
                                       "--context",
                                       "2048",
                                       "--dp",
                                       "2",
                                       "--tp",
                                       "2",
                                       "--pp",
                                       "4",
                                       "--cp",
                                       "2",
                                       "--steps",
                                       "1",
                                       "-o",
                                       "groups.fulcrum",
                                       "--force"},
                                      work_.path());
        QVERIFY2(simulated.exit_code == 0, qPrintable(simulated.output));
        const Outcome reported = run(
            fulcrum(), {"report", "groups.fulcrum", "-o", "groups.html", "--force"}, work_.path());
        QVERIFY2(reported.exit_code == 0, qPrintable(reported.output));
        QFile file(work_.filePath("groups.html"));
        QVERIFY(file.open(QIODevice::ReadOnly));
        const QString html = QString::fromUtf8(file.readAll());
        const qsizetype totals = html.indexOf("data-table=\"communication_totals\"");
        QVERIFY(totals > 0);
        const QString rows = html.mid(totals, html.indexOf("</table>", totals) - totals);
        QCOMPARE(rows.count("<tr"), 1 + 5);  // the header; tp all-reduce, cp ×2, dp, embedding
        QVERIFY(html.indexOf("busbw vs its name") > totals);
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
        // A trace cut short imports what it holds, says so and exits 3: the run is incomplete.
        QVERIFY(rank0.seek(0));
        const QByteArray whole = rank0.readAll();
        QFile cut(work_.filePath("cut.json"));
        QVERIFY(cut.open(QIODevice::WriteOnly));
        cut.write(whole.left(whole.size() / 2));
        cut.close();
        const Outcome cut_import =
            run(fulcrum(), {"import", "cut.json", "-o", "cut.fulcrum"}, work_.path());
        QCOMPARE(cut_import.exit_code, 3);
        QVERIFY2(cut_import.output.contains("'cut.json' ends early"),
                 qPrintable(cut_import.output));
        QVERIFY(QFile::exists(work_.filePath("cut.fulcrum")));
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
                                                {"offload", "min_hidden_chunk_tokens"},
                                                {"offload", "bandwidth_gb_s"}}) {
            QVERIFY2(at(path).isNull(), qPrintable(path.join('.') + " is not null"));
        }
        // Known: the step windows (ProfilerStep#N), the copies (from pageable memory, so not
        // offload: the bandwidth above is null), the stragglers of the all-reduce both ranks
        // ran.
        QCOMPARE(at({"step_breakdown", "0", "step"}).toInt(-1), 0);
        QCOMPARE(at({"step_breakdown", "0", "whole_trace"}).toBool(true), false);
        QCOMPARE(at({"offload", "pageable_copies"}).toInt(), 2);
        QCOMPARE(at({"offload", "pageable_copy_ns"}).toInt(), 80000);
        QCOMPARE(at({"imbalance", "stragglers"}).toArray().size(), 1);
    }

    // HTA's answers on the synthetic CPU run (dp 2 × pp 2, 2 steps; tests/support/synthetic_run):
    // no kernels, which one line of the tables says; the DP all-reduce by group with NCCL-tests'
    // bandwidths; a critical path per step that tiles the step and ends in the all-reduce and
    // optimizer.
    void htaAnswersOnTheCpuRun() {
        QFile::remove(work_.filePath("hta.json"));
        const Outcome outcome =
            run(fulcrum(), {"analyze", "run.fulcrum", "--json", "-o", "hta.json"}, work_.path());
        QCOMPARE(outcome.exit_code, 0);
        const QJsonObject root = read_json(work_.filePath("hta.json"));
        // A CPU run lacks nothing (no note) but has no kernel figures; the tables say why.
        QVERIFY(root.value("kernels").isNull());
        QCOMPARE(root.value("notes").toArray().size(), 0);
        const Outcome tables = run(fulcrum(), {"analyze", "run.fulcrum"}, work_.path());
        QVERIFY(tables.output.contains(
            "\nkernels: no device activity (kernels, copies, memsets) in this run"));
        // Every rank's all-reduce lasts 1.4 ms and they start together: per DP group of two
        // ranks, 2 calls of 64 MiB, 2.8 ms of transfer, no wait; busbw = algbw · 2(n−1)/n = algbw.
        const QJsonArray communication = root.value("communication").toArray();
        int groups = 0;
        for (const QJsonValue& value : communication) {
            const QJsonObject row = value.toObject();
            if (row.value("name").toString() != "dp all-reduce gradients") {
                continue;
            }
            ++groups;
            QCOMPARE(row.value("kind").toString(), QString("all-reduce"));
            QCOMPARE(row.value("ranks").toArray().size(), 2);
            QCOMPARE(row.value("calls").toInt(), 2);
            QCOMPARE(row.value("bytes").toDouble(), 2.0 * (64 << 20));
            QCOMPARE(row.value("transfer_ns").toDouble(), 2.8e6);
            QCOMPARE(row.value("wait_ns").toDouble(), 0.0);
            QCOMPARE(row.value("algbw_gb_s").toDouble(), 2.0 * (64 << 20) / 2.8e6);
            QCOMPARE(row.value("busbw_gb_s").toDouble(), 2.0 * (64 << 20) / 2.8e6);
        }
        QCOMPARE(groups, 2);
        const QJsonArray paths = root.value("critical_paths").toArray();
        QCOMPARE(paths.size(), 2);
        for (const QJsonValue& value : paths) {
            const QJsonObject path = value.toObject();
            double tiled = 0;
            for (const QJsonValue& segment : path.value("segments").toArray()) {
                tiled += segment["end_ns"].toDouble() - segment["start_ns"].toDouble();
            }
            QCOMPARE(tiled, path.value("length_ns").toDouble());
            const QJsonArray by_what = path.value("by_what").toArray();
            QCOMPARE(find_row(by_what, "what", "optimizer").value("ns").toDouble(), 400'000.0);
            QCOMPARE(find_row(by_what, "what", "dp all-reduce gradients").value("ns").toDouble(),
                     1'400'000.0);
            QVERIFY(find_row(by_what, "what", "forward").value("ns").toDouble() > 0);
        }
    }

    // A Kineto trace written here, imported and analysed; every figure worked out by hand from
    // the events of kineto_rank (µs). Kernels: computation [30,130] [140,240] [320,370]
    // [420,450], communication [200,400], memory [440,500] (times less 1000).
    void kernelAnswersOnAKinetoTrace() {
        write_file(work_.filePath("gpu.json"), kineto_rank("softmax"));
        write_file(work_.filePath("gpu2.json"), kineto_rank("softmax_fused"));
        QString text = transcript({"import", "gpu.json", "-o", "gpu.fulcrum"});
        text += transcript({"import", "gpu2.json", "-o", "gpu2.fulcrum"});
        text += transcript({"analyze", "gpu.fulcrum"});
        text += transcript({"analyze", "gpu.fulcrum", "--json", "-o", "gpu-analysis.json"});
        text += transcript({"diff", "gpu.fulcrum", "gpu2.fulcrum"});
        text +=
            transcript({"diff", "gpu.fulcrum", "gpu2.fulcrum", "--json", "-o", "gpu-diff.json"});
        text += transcript({"diff", "run.fulcrum", "--step-a", "0", "--step-b", "1", "--top", "6"});
        text += transcript({"diff", "run.fulcrum"});
        text += transcript({"diff", "run.fulcrum", "--step-a", "0", "--step-b", "9"});
        expect_golden("analyze-kernels.txt", text);

        const QJsonObject root = read_json(work_.filePath("gpu-analysis.json"));
        // Time by type: comp ∩ comm = [200,240] + [320,370] = 90; comp ∩ memory = [440,450] =
        // 10; computation alone 280 − 90 − 10 = 180; communication alone 200 − 90 = 110;
        // memory alone 60 − 10 = 50; span 30..500 = 470; idle [130,140] + [400,420] = 30.
        const QJsonObject by_type = at(root, {"kernels", "time_by_type", "0"}).toObject();
        QCOMPARE(by_type.value("computation_ns").toDouble(), 180e3);
        QCOMPARE(by_type.value("communication_ns").toDouble(), 110e3);
        QCOMPARE(by_type.value("memory_ns").toDouble(), 50e3);
        QCOMPARE(by_type.value("computation_communication_ns").toDouble(), 90e3);
        QCOMPARE(by_type.value("computation_memory_ns").toDouble(), 10e3);
        QCOMPARE(by_type.value("communication_memory_ns").toDouble(), 0.0);
        QCOMPARE(by_type.value("kernel_span_ns").toDouble(), 470e3);
        QCOMPARE(by_type.value("idle_ns").toDouble(), 30e3);
        // Idle by cause, stream 7: gemm_a #2 waits 10 (launched at 25, before #1 ended: kernel
        // wait, under 30 µs); softmax #1 waits 80 (launched at 300, after 240: host wait);
        // softmax #2 waits 50 (launched at 330, before 370; 50 ≥ 30: other). Stream 20: the
        // copy waits 40 (launched at 410, after the all-reduce ended at 400: host wait).
        const QJsonArray idle = at(root, {"kernels", "idle"}).toArray();
        QCOMPARE(idle.size(), 2);
        const QJsonObject compute_stream = idle.at(0).toObject(),
                          nccl_stream = idle.at(1).toObject();
        QCOMPARE(compute_stream.value("kernels").toInt(), 4);
        QCOMPARE(compute_stream.value("host_wait_ns").toDouble(), 80e3);
        QCOMPARE(compute_stream.value("kernel_wait_ns").toDouble(), 10e3);
        QCOMPARE(compute_stream.value("other_ns").toDouble(), 50e3);
        // Queue: launches at 10, 25, 300, 330, ends at 130, 240, 370, 450: 1·15 + 2·105 + 1·110
        // + 1·30 + 2·40 + 1·80 = 525 over 440, at most 2.
        QCOMPARE(compute_stream.value("mean_queue_length").toDouble(), 525.0 / 440.0);
        QCOMPARE(compute_stream.value("max_queue_length").toInt(), 2);
        QCOMPARE(nccl_stream.value("host_wait_ns").toDouble(), 40e3);
        QCOMPARE(nccl_stream.value("kernel_wait_ns").toDouble(), 0.0);
        QCOMPARE(nccl_stream.value("other_ns").toDouble(), 0.0);
        // Launches: delays 10, 110, 10, 85, 90, 25 (kernel start − call end); one over 100.
        const QJsonObject launches = at(root, {"kernels", "launches", "0"}).toObject();
        QCOMPARE(launches.value("launches").toInt(), 6);
        QCOMPARE(launches.value("cpu_total_ns").toDouble(), 45e3);
        QCOMPARE(launches.value("gpu_total_ns").toDouble(), 540e3);
        QCOMPARE(launches.value("mean_delay_ns").toDouble(), 55e3);
        QCOMPARE(launches.value("max_delay_ns").toDouble(), 110e3);
        QCOMPARE(launches.value("delay_outliers").toInt(), 1);
        QCOMPARE(launches.value("short_kernels").toInt(), 0);
        // Top kernels: by total, ties by name.
        const QJsonArray top = at(root, {"kernels", "top_kernels"}).toArray();
        QCOMPARE(top.size(), 4);
        QCOMPARE(top.at(0)["name"].toString(), QString("gemm_a"));
        QCOMPARE(top.at(0)["count"].toInt(), 2);
        QCOMPARE(top.at(1)["type"].toString(), QString("communication"));
        QCOMPARE(top.at(2)["name"].toString(), QString("softmax"));
        QCOMPARE(top.at(2)["min_ns"].toDouble(), 30e3);
        QCOMPARE(top.at(2)["max_ns"].toDouble(), 50e3);
        QCOMPARE(top.at(3)["type"].toString(), QString("memory"));
        // One rank: no group to measure a collective on; no passes: no critical path.
        QCOMPARE(root.value("communication").toArray().size(), 0);
        QCOMPARE(root.value("critical_paths").toArray().size(), 0);

        // The diff: softmax (2 calls, 80 µs) removed, softmax_fused added, the rest unchanged.
        const QJsonArray rows = read_json(work_.filePath("gpu-diff.json")).value("rows").toArray();
        const QJsonObject removed = find_row(rows, "name", "softmax");
        QCOMPARE(removed.value("change").toString(), QString("removed"));
        QCOMPARE(removed.value("count_a").toDouble(), 2.0);
        QCOMPARE(removed.value("total_ns_a").toDouble(), 80e3);
        const QJsonObject added = find_row(rows, "name", "softmax_fused");
        QCOMPARE(added.value("change").toString(), QString("added"));
        QCOMPARE(added.value("delta_ns").toDouble(), 80e3);
        QCOMPARE(find_row(rows, "name", "gemm_a").value("delta_ns").toDouble(), 0.0);
    }

    void badInputAndOptions() {
        QFile text_file(work_.filePath("notes.txt"));
        QVERIFY(text_file.open(QIODevice::WriteOnly));
        text_file.write("these are notes, not a trace\n");
        text_file.close();
        QVERIFY(
            QFile::copy(work_.filePath("ranks/rank-1.sqlite"), work_.filePath("killed.sqlite")));
        sqlite3* db = nullptr;
        QCOMPARE(sqlite3_open(qPrintable(work_.filePath("killed.sqlite")), &db), SQLITE_OK);
        QCOMPARE(sqlite3_exec(db, "UPDATE rank SET complete = 0", nullptr, nullptr, nullptr),
                 SQLITE_OK);
        sqlite3_close(db);

        QString text = transcript({"info", "missing.fulcrum"});
        text += transcript({"info", "notes.txt"});
        text += transcript({"info", "killed.sqlite"});
        text += transcript({"merge", "-o", "run2.fulcrum", "ranks/rank-0.sqlite", "notes.txt"});
        text += transcript(
            {"merge", "-o", "run2.fulcrum", "ranks/rank-0.sqlite", "ranks/rank-0.sqlite"});
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

    // fulcrum plan on 8 GPUs of a 4-layer model: the table, the reasons, the command lines;
    // and bad values, each refused with exit 2. The search's time is masked.
    void planTable() {
        const QStringList small = {"plan", "--world",        "8",  "--layers",
                                   "4",    "--global-batch", "16", "--documents",
                                   "400",  "--top",          "3",  "--gpu-memory-gib",
                                   "0.002"};
        QString text = transcript(small);
        text += transcript({"plan", "--world", "8,4", "--layers", "4", "--global-batch", "16",
                            "--documents", "400", "--top", "1", "--balancers", "fixed"});
        text += transcript({"plan", "--world", "0"});
        text += transcript({"plan", "--world", "64-8"});
        text += transcript({"plan", "--schedules", "1f1b,foo"});
        text += transcript({"plan", "--gpu-memory-gib", "0"});
        text += transcript({"plan", "--heads", "3"});
        text += transcript({"plan", "--stage-layers", "1,1"});
        // FPDT's question on Llama 3 8B over one A100 node, and a context past the last.
        const QStringList llama = {"plan",           "--longest-context",
                                   "--world",        "8",
                                   "--hardware",     "a100",
                                   "--layers",       "32",
                                   "--hidden",       "4096",
                                   "--heads",        "32",
                                   "--kv-heads",     "8",
                                   "--ffn-hidden",   "14336",
                                   "--vocab",        "128256",
                                   "--architecture", "llama",
                                   "--context",      "65536",
                                   "--global-batch", "8",
                                   "--zero",         "1,2,3",
                                   "--cp-impls",     "all-gather,ulysses",
                                   "--balancers",    "fixed"};
        text += transcript(llama);
        text += transcript(llama + QStringList{"--max-context", "1024"});
        text += transcript({"plan", "--zero", "4"});
        text.replace(QRegularExpression("candidates in [0-9.]+ s"), "candidates in X s");
        expect_golden("plan.txt", text);
    }

    // The top candidate's `fulcrum simulate` line plays the figures plan ranked it by, and
    // -o writes the top candidates as runs that every command opens.
    void planMatchesSimulate() {
        const QStringList small = {"plan", "--world",     "8",   "--layers", "4", "--global-batch",
                                   "16",   "--documents", "400", "--top",    "2"};
        // Plans with `args` (and --json) and plays the top candidate's printed `fulcrum
        // simulate` line, which must give the tokens/s the plan ranked it by; `top` is that
        // candidate and `command` its line.
        const auto replay_plans_top = [&](const QStringList& args, QJsonObject& top,
                                          QStringList& command) {
            const Outcome planned = run(fulcrum(), args + QStringList{"--json"}, work_.path());
            QCOMPARE(planned.exit_code, 0);
            const QJsonObject json = QJsonDocument::fromJson(planned.output.toUtf8()).object();
            QCOMPARE(json.value("format").toString(), QString("fulcrum plan"));
            top = json.value("ranked").toArray().at(0).toObject();
            command = top.value("simulate_command").toString().split(' ');
            QCOMPARE(command.value(0), QString("fulcrum"));
            const Outcome simulated =
                run(fulcrum(), command.mid(1) + QStringList{"--json"}, work_.path());
            QCOMPARE(simulated.exit_code, 0);
            QCOMPARE(played_tokens_per_second(simulated),
                     top.value("tokens_per_second").toDouble());
        };
        QJsonObject top;
        QStringList command;
        replay_plans_top(small, top, command);
        if (QTest::currentTestFailed()) {
            return;
        }
        // Megatron-LM's gather beside the next step's forward: the printed line plays it too.
        QJsonObject gathered;
        replay_plans_top(small + QStringList{"--overlap-param-gather"}, gathered, command);
        if (QTest::currentTestFailed()) {
            return;
        }
        QVERIFY(command.contains("--distributed-optimizer"));
        QVERIFY(command.contains("--overlap-param-gather"));
        // One causal mask across each micro-batch's documents: the printed line plays it too,
        // and the layout pays more attention than with each document's own mask.
        QJsonObject packed;
        replay_plans_top(small + QStringList{"--attention-mask", "packed"}, packed, command);
        if (QTest::currentTestFailed()) {
            return;
        }
        QVERIFY(command.contains("packed"));
        QVERIFY(packed.value("tokens_per_second").toDouble() <
                top.value("tokens_per_second").toDouble());

        const Outcome written = run(fulcrum(), small + QStringList{"-o", "plans"}, work_.path());
        QCOMPARE(written.exit_code, 0);
        QVERIFY(QFile::exists(work_.filePath("plans/rank-1.fulcrum")));
        QVERIFY(QFile::exists(work_.filePath("plans/rank-2.fulcrum")));
        QCOMPARE(run(fulcrum(), {"info", "plans/rank-1.fulcrum"}, work_.path()).exit_code, 0);
        // Not over an existing run without --force.
        QCOMPARE(run(fulcrum(), small + QStringList{"-o", "plans"}, work_.path()).exit_code, 2);
        // Costs fitted on a run: the one just written.
        const Outcome calibrated = run(
            fulcrum(), small + QStringList{"--calibrate", "plans/rank-1.fulcrum"}, work_.path());
        QCOMPARE(calibrated.exit_code, 0);
        QVERIFY2(calibrated.output.contains("(fitted on 'rank-1')"), qPrintable(calibrated.output));
        QVERIFY(calibrated.output.contains("fulcrum simulate --calibrate plans/rank-1.fulcrum"));
        // Without the distributed optimizer (--zero 0 or its flag): every printed line says so
        // by carrying no --distributed-optimizer, and the two spellings plan alike.
        const Outcome unsharded = run(
            fulcrum(), small + QStringList{"--no-distributed-optimizer", "--json"}, work_.path());
        QVERIFY2(unsharded.exit_code == 0, qPrintable(unsharded.output));
        const QJsonArray plain =
            QJsonDocument::fromJson(unsharded.output.toUtf8()).object().value("ranked").toArray();
        QCOMPARE(plain.size(), 2);
        for (const auto& entry : plain) {
            QVERIFY(!entry.toObject()
                         .value("simulate_command")
                         .toString()
                         .contains("--distributed-optimizer"));
        }
        const Outcome zero =
            run(fulcrum(), small + QStringList{"--zero", "0", "--json"}, work_.path());
        QCOMPARE(zero.exit_code, 0);
        QCOMPARE(QJsonDocument::fromJson(zero.output.toUtf8()).object().value("ranked"),
                 QJsonValue(plain));
        QCOMPARE(run(fulcrum(), small + QStringList{"--zero", "4"}, work_.path()).exit_code, 2);

        // Megatron-LM's asynchronous backward: every printed line carries it, and the top
        // candidate's line plays the figure the plan ranked it by.
        const Outcome overlapped =
            run(fulcrum(), small + QStringList{"--tp-backward-overlap", "--json"}, work_.path());
        QVERIFY2(overlapped.exit_code == 0, qPrintable(overlapped.output));
        const QJsonArray with_overlap =
            QJsonDocument::fromJson(overlapped.output.toUtf8()).object().value("ranked").toArray();
        QCOMPARE(with_overlap.size(), 2);
        for (const auto& entry : with_overlap) {
            QVERIFY(entry.toObject()
                        .value("simulate_command")
                        .toString()
                        .contains("--tp-backward-overlap"));
        }
        QStringList overlap_command =
            with_overlap.at(0).toObject().value("simulate_command").toString().split(' ');
        overlap_command.takeFirst();
        const Outcome replayed =
            run(fulcrum(), overlap_command + QStringList{"--json"}, work_.path());
        QCOMPARE(replayed.exit_code, 0);
        QCOMPARE(played_tokens_per_second(replayed),
                 with_overlap.at(0).toObject().value("tokens_per_second").toDouble());
    }

    // --report writes the plan as a page: the chart and the top k (core/report/plan_section.h);
    // not over an existing file without --force.
    void planReport() {
        const QStringList small = {
            "plan",        "--world", "8",     "--layers", "4",        "--global-batch", "16",
            "--documents", "400",     "--top", "2",        "--report", "plan.html"};
        QCOMPARE(run(fulcrum(), small, work_.path()).exit_code, 0);
        QFile file(work_.filePath("plan.html"));
        QVERIFY(file.open(QIODevice::ReadOnly));
        const QString html = QString::fromUtf8(file.readAll());
        QVERIFY(html.contains("data-chart=\"plan\""));
        QCOMPARE(html.count("data-rank=\"1\""), 1);
        const qsizetype table = html.indexOf("data-table=\"plan_top\"");
        QVERIFY(table > 0);
        QCOMPARE(html.mid(table, html.indexOf("</table>", table) - table).count("<tr><td"), 2);
        QCOMPARE(run(fulcrum(), small, work_.path()).exit_code, 2);
        QCOMPARE(run(fulcrum(), small + QStringList{"--force"}, work_.path()).exit_code, 0);
    }

    // --calibrate repeated: runs of pp2, tp2 (with and without sequence parallelism), cp2 and
    // dp2 of the same model give every cost a 2-GPU layout needs, so nothing the plan prints is
    // taken from the analytic model, and the top candidate's simulate line, which repeats
    // every --calibrate, plays the figures plan ranked it by. Without the tp2 runs, TP's
    // collectives are analytic and a derived: line says so.
    void planCalibratedOnSeveralRuns() {
        const QList<QStringList> layouts = {{"pp2", "--pp", "2"},
                                            {"tp2", "--tp", "2"},
                                            {"tp2sp", "--tp", "2", "--sequence-parallel"},
                                            {"cp2", "--cp", "2"},
                                            {"dp2", "--dp", "2"}};
        QStringList calibrate;
        for (QStringList layout : layouts) {
            const QString name = layout.takeFirst();
            const Outcome written =
                run(fulcrum(),
                    QStringList{"simulate", "--layers", "4", "--micro-batches", "4", "--documents",
                                "200", "--steps", "2", "-o", name + ".fulcrum", "--force"} +
                        layout,
                    work_.path());
            QVERIFY2(written.exit_code == 0, qPrintable(written.output));
            calibrate << "--calibrate" << name + ".fulcrum";
        }
        const QStringList plan = {"plan", "--world",     "2",   "--layers", "4",  "--global-batch",
                                  "4",    "--documents", "200", "--top",    "30", "--json"};
        const Outcome planned = run(fulcrum(), plan + calibrate, work_.path());
        QVERIFY2(planned.exit_code == 0, qPrintable(planned.output));
        const QJsonObject json = QJsonDocument::fromJson(planned.output.toUtf8()).object();
        for (const QJsonValue note : json.value("derived_costs").toArray()) {
            QVERIFY2(!note.toString().contains("not in the cost model"),
                     qPrintable(note.toString()));
        }
        // 20 layouts played; the cp2 layout's shardings that played alike are one entry each.
        const QJsonArray ranked = json.value("ranked").toArray();
        int twins = 0;
        for (const QJsonValue entry : ranked) {
            twins += int(entry.toObject().value("equal_cp_shardings").toArray().size());
        }
        QCOMPARE(ranked.size() + twins, 20);
        for (const QJsonValue entry : ranked) {
            const QJsonObject c = entry.toObject();
            const QString source = c.value("cost_source").toString();
            const QString nearest = c.value("tp").toInt() == 2
                                        ? (c.value("sequence_parallel").toBool() ? "tp2sp" : "tp2")
                                    : c.value("pp").toInt() == 2 ? "pp2"
                                    : c.value("cp").toInt() == 2 ? "cp2"
                                                                 : "dp2";
            QVERIFY2(source.contains(QRegularExpression("passes \\([^)]*\\)[^;']* fitted on '" +
                                                        nearest + ".fulcrum'")),
                     qPrintable(source));
        }
        const QJsonObject top = ranked.at(0).toObject();
        QStringList command = top.value("simulate_command").toString().split(' ');
        QCOMPARE(command.takeFirst(), QString("fulcrum"));
        QCOMPARE(command.mid(1, 10), calibrate);
        const Outcome simulated = run(fulcrum(), command + QStringList{"--json"}, work_.path());
        QCOMPARE(simulated.exit_code, 0);
        QCOMPARE(played_tokens_per_second(simulated), top.value("tokens_per_second").toDouble());

        const Outcome without_tp =
            run(fulcrum(), plan + calibrate.mid(0, 2) + calibrate.mid(6), work_.path());
        QCOMPARE(without_tp.exit_code, 0);
        const QJsonArray derived = QJsonDocument::fromJson(without_tp.output.toUtf8())
                                       .object()
                                       .value("derived_costs")
                                       .toArray();
        bool tp_analytic = false;
        for (const QJsonValue note : derived) {
            tp_analytic |= note.toString().startsWith("tp all-reduce: not in the cost model");
        }
        QVERIFY(tp_analytic);
    }

    // --cost-model FILE, as simulate takes it (here the model simulate --json printed for a pp2
    // grid): the plan names it as its cost source, and every simulate line repeats it and plays
    // the same figures; a file that is not a cost model is refused with exit 2.
    void planWithCostModelFile() {
        const Outcome simulated = run(fulcrum(),
                                      {"simulate", "--layers", "4", "--pp", "2", "--micro-batches",
                                       "4", "--documents", "200", "--steps", "1", "--json"},
                                      work_.path());
        QCOMPARE(simulated.exit_code, 0);
        const QJsonObject model = QJsonDocument::fromJson(simulated.output.toUtf8())
                                      .object()
                                      .value("cost_model")
                                      .toObject();
        QVERIFY(!model.isEmpty());
        QFile file(work_.filePath("pp2-costs.json"));
        QVERIFY(file.open(QIODevice::WriteOnly));
        file.write(QJsonDocument(model).toJson());
        file.close();
        const QStringList plan = {"plan",
                                  "--world",
                                  "2",
                                  "--layers",
                                  "4",
                                  "--global-batch",
                                  "4",
                                  "--documents",
                                  "200",
                                  "--top",
                                  "3",
                                  "--json",
                                  "--cost-model",
                                  "pp2-costs.json"};
        const Outcome planned = run(fulcrum(), plan, work_.path());
        QVERIFY2(planned.exit_code == 0, qPrintable(planned.output));
        const QJsonObject json = QJsonDocument::fromJson(planned.output.toUtf8()).object();
        const QJsonObject top = json.value("ranked").toArray().at(0).toObject();
        QStringList command = top.value("simulate_command").toString().split(' ');
        QCOMPARE(command.takeFirst(), QString("fulcrum"));
        QCOMPARE(command.mid(1, 2), (QStringList{"--cost-model", "pp2-costs.json"}));
        const Outcome replayed = run(fulcrum(), command + QStringList{"--json"}, work_.path());
        QCOMPARE(replayed.exit_code, 0);
        QCOMPARE(played_tokens_per_second(replayed), top.value("tokens_per_second").toDouble());
        QFile bad(work_.filePath("bad-costs.json"));
        QVERIFY(bad.open(QIODevice::WriteOnly));
        bad.write("[1, 2]");
        bad.close();
        const Outcome refused = run(
            fulcrum(), plan.mid(0, plan.size() - 1) + QStringList{"bad-costs.json"}, work_.path());
        QCOMPARE(refused.exit_code, 2);
        QVERIFY2(refused.output.contains("bad-costs.json"), qPrintable(refused.output));
        // A rank order that is not one of the four dimensions each once is refused, naming it.
        for (const QStringList& command : {QStringList{"simulate", "--rank-order"},
                                           QStringList{"plan", "--world", "8", "--rank-orders"}}) {
            const Outcome order = run(fulcrum(), command + QStringList{"tp-dp-pp"}, work_.path());
            QCOMPARE(order.exit_code, 2);
            QVERIFY2(order.output.contains("--rank-order 'tp-dp-pp'"), qPrintable(order.output));
        }
    }

    // fulcrum report RUN --plan PLAN.json: the run's report with the plan's chart and top k
    // (the ranked candidates the JSON holds), the same table as plan --report draws; a missing
    // file and JSON that is not a plan are refused with exit 2, saying which.
    void reportWithPlan() {
        const QStringList small = {"plan", "--world",     "8",   "--layers", "4", "--global-batch",
                                   "16",   "--documents", "400", "--top",    "3"};
        const Outcome planned = run(fulcrum(), small + QStringList{"--json"}, work_.path());
        QCOMPARE(planned.exit_code, 0);
        QFile json(work_.filePath("chosen-plan.json"));
        QVERIFY(json.open(QIODevice::WriteOnly));
        json.write(planned.output.toUtf8());
        json.close();
        QCOMPARE(
            run(fulcrum(), small + QStringList{"-o", "chosen", "--force"}, work_.path()).exit_code,
            0);
        const Outcome reported = run(fulcrum(),
                                     {"report", "chosen/rank-1.fulcrum", "--plan",
                                      "chosen-plan.json", "-o", "with-plan.html", "--force"},
                                     work_.path());
        QCOMPARE(reported.exit_code, 0);
        QFile file(work_.filePath("with-plan.html"));
        QVERIFY(file.open(QIODevice::ReadOnly));
        const QString html = QString::fromUtf8(file.readAll());
        QVERIFY(html.contains("<a href=\"#plan\">Plan</a>"));
        QVERIFY(html.contains("<section class=\"run\" id=\"run-0\">"));
        QVERIFY(html.contains("data-chart=\"plan\""));
        QCOMPARE(html.count("data-rank=\"1\""), 1);
        QCOMPARE(html.count("data-rank=\"3\""), 1);
        const qsizetype table = html.indexOf("data-table=\"plan_top\"");
        QVERIFY(table > 0);
        const QString rows = html.mid(table, html.indexOf("</table>", table) - table);
        QCOMPARE(rows.count("<tr><td"), 3);
        // The top candidate's layout and tokens/s, as the JSON has them.
        const QJsonObject top = QJsonDocument::fromJson(planned.output.toUtf8())
                                    .object()
                                    .value("ranked")
                                    .toArray()
                                    .at(0)
                                    .toObject();
        const QString layout = QString("%1×%2×%3×%4")
                                   .arg(top.value("dp").toInt())
                                   .arg(top.value("tp").toInt())
                                   .arg(top.value("pp").toInt())
                                   .arg(top.value("cp").toInt());
        QVERIFY2(rows.contains(layout), qPrintable(layout));

        const Outcome missing =
            run(fulcrum(),
                {"report", "chosen/rank-1.fulcrum", "--plan", "nowhere.json", "-o", "x.html"},
                work_.path());
        QCOMPARE(missing.exit_code, 2);
        QVERIFY2(missing.output.contains("cannot read the plan 'nowhere.json'"),
                 qPrintable(missing.output));
        QFile other(work_.filePath("not-a-plan.json"));
        QVERIFY(other.open(QIODevice::WriteOnly));
        other.write("{\"format\": \"something else\"}");
        other.close();
        const Outcome wrong =
            run(fulcrum(),
                {"report", "chosen/rank-1.fulcrum", "--plan", "not-a-plan.json", "-o", "x.html"},
                work_.path());
        QCOMPARE(wrong.exit_code, 2);
        QVERIFY2(wrong.output.contains("not a plan"), qPrintable(wrong.output));
    }

    void helpOnEverySubcommand_data() {
        QTest::addColumn<QString>("subcommand");
        QTest::newRow("top") << "";
        QTest::newRow("info") << "info";
        QTest::newRow("merge") << "merge";
        QTest::newRow("export") << "export";
        QTest::newRow("capture") << "capture";
        QTest::newRow("analyze") << "analyze";
        QTest::newRow("diff") << "diff";
        QTest::newRow("simulate") << "simulate";
        QTest::newRow("plan") << "plan";
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
