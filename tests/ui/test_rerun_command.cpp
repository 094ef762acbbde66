// Re-run command building: the engine's command line rewritten for another balancer, sharding
// or schedule; the tools found; where the new run goes; progress read from the tools' output.
#include <unistd.h>
#include <QFile>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>

#include "app/ui/rerun.h"

using namespace fulcrum;
using namespace fulcrum::ui;

namespace {

const QString kRecorded =
    "mpirun -np 4 build/engine/fulcrum-train --pp 2 --cp 2 --schedule 1f1b --cp-shard per-doc "
    "--lengths long-tail:context=512,median=96 --steps 3 --balancer fixed";

void make_executable(const QString& path) {
    QDir().mkpath(QFileInfo(path).absolutePath());
    QFile file(path);
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.write("#!/bin/sh\n");
    file.close();
    QVERIFY(file.setPermissions(QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner));
}

std::shared_ptr<views::OpenedRun> run_with(const std::string& command, RunOrigin origin,
                                           const std::vector<std::string>& hosts) {
    auto trace = std::make_shared<analysis::RunTrace>();
    trace->run.command = command;
    trace->run.origin = origin;
    for (std::size_t i = 0; i < hosts.size(); ++i) {
        RankInfo info;
        info.rank = std::int32_t(i);
        info.host = hosts[i];
        trace->add_rank(info);
    }
    auto run = std::make_shared<views::OpenedRun>();
    run->trace = trace;
    run->title = "fixed";
    return run;
}

}  // namespace

class RerunCommandTest : public QObject {
    Q_OBJECT
private slots:
    void split_words_data() {
        QTest::addColumn<QString>("command");
        QTest::addColumn<QStringList>("words");
        QTest::newRow("plain") << "mpirun -np 4 a/fulcrum-train --steps 3"
                               << QStringList{"mpirun",          "-np",     "4",
                                              "a/fulcrum-train", "--steps", "3"};
        QTest::newRow("single quotes")
            << "train --data-dir '/data/my corpus' --x ''"
            << QStringList{"train", "--data-dir", "/data/my corpus", "--x", ""};
        QTest::newRow("quote in quotes (shell_quote)")
            << R"(echo 'it'\''s')" << QStringList{"echo", "it's"};
        QTest::newRow("spaces collapse") << "  a   b  " << QStringList{"a", "b"};
    }
    void split_words() {
        QFETCH(QString, command);
        QFETCH(QStringList, words);
        QCOMPARE(split_shell_words(command), words);
    }

    void rerun_argv_data() {
        QTest::addColumn<QString>("recorded");
        QTest::addColumn<QString>("balancer");
        QTest::addColumn<QString>("cp_shard");
        QTest::addColumn<QString>("schedule");
        QTest::addColumn<int>("pp");
        QTest::addColumn<int>("cp");
        QTest::addColumn<QString>("engine");
        QTest::addColumn<QString>("expected");

        QTest::newRow("replaces the balancer, keeps the rest")
            << kRecorded << "wlb"
            << ""
            << "" << 2 << 2 << ""
            << QString(kRecorded).replace("--balancer fixed", "--balancer wlb");
        QTest::newRow("replaces sharding and schedule")
            << kRecorded << "ilp"
            << "zigzag"
            << "gpipe" << 2 << 2 << ""
            << QString(kRecorded)
                   .replace("--balancer fixed", "--balancer ilp")
                   .replace("--cp-shard per-doc", "--cp-shard zigzag")
                   .replace("--schedule 1f1b", "--schedule gpipe");
        QTest::newRow("adds a missing balancer and sharding")
            << "fulcrum-train --cp 2 --steps 3"
            << "wlb"
            << "adaptive"
            << "" << 1 << 2 << ""
            << "fulcrum-train --cp 2 --steps 3 --balancer wlb --cp-shard adaptive";
        QTest::newRow("no sharding without CP, no schedule without PP")
            << "fulcrum-train --steps 3"
            << "wlb"
            << "zigzag"
            << "gpipe" << 1 << 1 << ""
            << "fulcrum-train --steps 3 --balancer wlb";
        QTest::newRow("--option=value form")
            << "fulcrum-train --balancer=fixed --pp=2"
            << "ilp"
            << ""
            << "gpipe" << 2 << 1 << ""
            << "fulcrum-train --balancer=ilp --pp=2 --schedule gpipe";
        QTest::newRow("engine path replaced, launcher untouched")
            << "mpirun -np 4 --bind-to none build/engine/fulcrum-train --balancer fixed"
            << "wlb"
            << ""
            << "" << 1 << 1 << "/opt/fulcrum/bin/fulcrum-train"
            << "mpirun -np 4 --bind-to none /opt/fulcrum/bin/fulcrum-train --balancer wlb";
        QTest::newRow("interleaved gets virtual stages")
            << "fulcrum-train --pp 2 --schedule 1f1b"
            << ""
            << ""
            << "interleaved" << 2 << 1 << ""
            << "fulcrum-train --pp 2 --schedule interleaved --virtual-stages 2";
        QTest::newRow("interleaved keeps the run's virtual stages")
            << "fulcrum-train --pp 2 --schedule interleaved --virtual-stages 3"
            << ""
            << ""
            << "interleaved" << 2 << 1 << ""
            << "fulcrum-train --pp 2 --schedule interleaved --virtual-stages 3";
        QTest::newRow("another schedule drops virtual stages")
            << "fulcrum-train --pp 2 --schedule interleaved --virtual-stages=2"
            << ""
            << ""
            << "zb-h1" << 2 << 1 << ""
            << "fulcrum-train --pp 2 --schedule zb-h1";
        QTest::newRow("empty choice keeps the run's own") << kRecorded << ""
                                                          << ""
                                                          << "" << 2 << 2 << "" << kRecorded;
    }
    void rerun_argv() {
        QFETCH(QString, recorded);
        QFETCH(QString, balancer);
        QFETCH(QString, cp_shard);
        QFETCH(QString, schedule);
        QFETCH(int, pp);
        QFETCH(int, cp);
        QFETCH(QString, engine);
        QFETCH(QString, expected);
        const QStringList argv = ui::rerun_argv(
            split_shell_words(recorded),
            RerunChoice{.balancer = balancer, .cp_shard = cp_shard, .schedule = schedule}, pp, cp,
            engine);
        QCOMPARE(argv.join(' '), expected);
    }

    // The same documents: one epoch instead of the run's steps, in both tools.
    void same_documents() {
        RerunChoice choice{.balancer = "wlb", .same_documents = true};
        QCOMPARE(ui::rerun_argv(split_shell_words("mpirun -np 2 fulcrum-train --steps 3 --pp 2"),
                                choice, 2, 1)
                     .join(' '),
                 QString("mpirun -np 2 fulcrum-train --pp 2 --balancer wlb --epochs 1"));
        QCOMPARE(
            ui::rerun_argv(split_shell_words("fulcrum-train --steps=3"), choice, 1, 1).join(' '),
            QString("fulcrum-train --balancer wlb --epochs 1"));
        QCOMPARE(simulate_arguments("/r/run.fulcrum", choice, 1, 1, "/o").join(' '),
                 QString("simulate --calibrate /r/run.fulcrum --balancer wlb --epochs 1 --progress "
                         "-o /o"));
        QCOMPARE(schedule_names(), (QStringList{"gpipe", "1f1b", "interleaved", "zb-h1"}));
        QCOMPARE(
            simulate_arguments("/r/run.fulcrum", RerunChoice{.schedule = "interleaved"}, 2, 1, "/o")
                .join(' '),
            QString("simulate --calibrate /r/run.fulcrum --schedule interleaved "
                    "--virtual-stages 2 --progress -o /o"));
    }

    void capture_and_simulate_arguments() {
        QCOMPARE(capture_arguments("/r/fixed-rerun-wlb", {"mpirun", "-np", "4"}).join(' '),
                 QString("capture -o /r/fixed-rerun-wlb -- mpirun -np 4"));
        QCOMPARE(simulate_arguments(
                     "/r/run.fulcrum",
                     RerunChoice{.balancer = "wlb", .cp_shard = "zigzag", .schedule = "gpipe"}, 2,
                     2, "/r/o.fulcrum")
                     .join(' '),
                 QString("simulate --calibrate /r/run.fulcrum --balancer wlb --cp-shard zigzag "
                         "--schedule gpipe --progress -o /r/o.fulcrum"));
        QCOMPARE(simulate_arguments(
                     "/r/run.fulcrum",
                     RerunChoice{.balancer = "ilp", .cp_shard = "zigzag", .schedule = "gpipe"}, 1,
                     1, "/o")
                     .join(' '),
                 QString("simulate --calibrate /r/run.fulcrum --balancer ilp --progress -o /o"));
    }

    void locate_engine_order() {
        QTemporaryDir dir;
        const QString app_dir = dir.filePath("build/app/ui");
        QDir().mkpath(app_dir);
        const QString recorded = dir.filePath("elsewhere/fulcrum-train");
        const QString built = dir.filePath("build/engine/fulcrum-train");
        const QString on_path = dir.filePath("bin/fulcrum-train");
        const QByteArray old_path = qgetenv("PATH");
        qputenv("PATH", QFile::encodeName(dir.filePath("bin")));

        QCOMPARE(locate_engine(recorded, app_dir), QString());  // none anywhere
        make_executable(on_path);
        QCOMPARE(locate_engine(recorded, app_dir), on_path);
        make_executable(built);
        QCOMPARE(locate_engine(recorded, app_dir), QFileInfo(built).canonicalFilePath());
        make_executable(recorded);
        QCOMPARE(locate_engine(recorded, app_dir), recorded);
        // fulcrum: next to the GUI's folder, else PATH
        QCOMPARE(locate_fulcrum(app_dir), QString());
        make_executable(dir.filePath("bin/fulcrum"));
        QCOMPARE(locate_fulcrum(app_dir), dir.filePath("bin/fulcrum"));
        make_executable(dir.filePath("build/app/fulcrum"));
        QCOMPARE(locate_fulcrum(app_dir),
                 QFileInfo(dir.filePath("build/app/fulcrum")).canonicalFilePath());
        qputenv("PATH", old_path);
    }

    void output_paths() {
        QTemporaryDir dir;
        const QString run = dir.filePath("fixed/run.fulcrum");
        QCOMPARE(unique_output_path(run, "fixed", "-rerun-wlb"), dir.filePath("fixed-rerun-wlb"));
        QDir().mkpath(dir.filePath("fixed-rerun-wlb"));
        QCOMPARE(unique_output_path(run, "fixed", "-rerun-wlb"), dir.filePath("fixed-rerun-wlb-2"));
        QCOMPARE(unique_output_path(dir.filePath("a.fulcrum"), "a", "-sim-ilp.fulcrum"),
                 dir.filePath("a-sim-ilp.fulcrum"));
        QFile(dir.filePath("a-sim-ilp.fulcrum")).open(QIODevice::WriteOnly);
        QCOMPARE(unique_output_path(dir.filePath("a.fulcrum"), "a", "-sim-ilp.fulcrum"),
                 dir.filePath("a-sim-ilp-2.fulcrum"));
        // Not writable: the temp folder.
        if (geteuid() != 0) {
            QDir().mkpath(dir.filePath("ro/run"));
            QFile::setPermissions(dir.filePath("ro"), QFile::ReadOwner | QFile::ExeOwner);
            QVERIFY(unique_output_path(dir.filePath("ro/run/run.fulcrum"), "run", "-rerun-x")
                        .startsWith(QDir::tempPath()));
            QFile::setPermissions(dir.filePath("ro"),
                                  QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
        }
    }

    void progress_lines_data() {
        QTest::addColumn<QString>("line");
        QTest::addColumn<int>("steps");
        QTest::addColumn<double>("fraction");
        QTest::newRow("engine step")
            << "step    1 | epoch 0 | loss 5.5 | grad norm 1.0" << 4 << 0.5;
        QTest::newRow("last step") << "step    2 | epoch 0 | loss" << 3 << 1.0;
        QTest::newRow("simulate --progress") << "simulating wlb 60%" << 0 << 0.6;
        QTest::newRow("other line") << "grid dp 1 × tp 1 × pp 2 × cp 2 on 4 ranks" << 3 << -1.0;
        QTest::newRow("steps unknown") << "step    1 | x" << 0 << -1.0;
    }
    void progress_lines() {
        QFETCH(QString, line);
        QFETCH(int, steps);
        QFETCH(double, fraction);
        QCOMPARE(progress_from_line(line, steps), fraction);
    }

    void plan_for_runs() {
        const QString app_dir = QCoreApplication::applicationDirPath();  // no engine near tests
        const std::string command = "mpirun -np 2 /nonexistent/fulcrum-train --balancer fixed";
        auto simulated = run_with(command, RunOrigin::simulated, {"here"});
        QVERIFY(!plan_rerun(*simulated, app_dir, "here").capture_here);
        QVERIFY(plan_rerun(*simulated, app_dir, "here").why_not.contains("simulated"));
        auto imported = run_with("python train.py", RunOrigin::imported, {"here"});
        QVERIFY(plan_rerun(*imported, app_dir, "here").why_not.contains("imported"));
        auto cluster = run_with(command, RunOrigin::captured, {"here", "node17.cluster"});
        const RerunPlan on_cluster = plan_rerun(*cluster, app_dir, "here.lab");
        QVERIFY(!on_cluster.capture_here);
        QVERIFY2(on_cluster.why_not.contains("node17"), qPrintable(on_cluster.why_not));

        // Same host, engine found next to a build of the GUI.
        QTemporaryDir dir;
        make_executable(dir.filePath("build/engine/fulcrum-train"));
        QDir().mkpath(dir.filePath("build/app/ui"));
        auto local = run_with(command, RunOrigin::captured, {"here", "here"});
        const RerunPlan here = plan_rerun(*local, dir.filePath("build/app/ui"), "here");
        if (QStandardPaths::findExecutable("mpirun").isEmpty()) {
            QVERIFY(here.why_not.contains("mpirun"));
        } else {
            QVERIFY2(here.capture_here, qPrintable(here.why_not));
            QCOMPARE(here.engine,
                     QFileInfo(dir.filePath("build/engine/fulcrum-train")).canonicalFilePath());
        }
        // ...and not found at all.
        const RerunPlan missing = plan_rerun(*local, dir.filePath("nowhere/a/b"), "here");
        if (QStandardPaths::findExecutable("fulcrum-train").isEmpty()) {
            QVERIFY(!missing.capture_here);
            QVERIFY(missing.why_not.contains("fulcrum-train"));
        }
    }
};

QTEST_GUILESS_MAIN(RerunCommandTest)
#include "test_rerun_command.moc"
