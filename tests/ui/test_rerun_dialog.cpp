// The re-run dialog against the real engine: a copy of the `fixed` capture re-run with wlb
// through `fulcrum capture` opens in Compare against it; a cancelled re-run leaves no process
// and no run; "simulate instead" opens a simulated run.
#include <QComboBox>
#include <QDirIterator>
#include <QElapsedTimer>
#include <QLabel>
#include <QProcess>
#include <QSettings>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QVector>

#include "app/ui/main_window.h"
#include "app/ui/rerun_dialog.h"

using namespace fulcrum;
using namespace fulcrum::ui;

namespace {

const QString kRuns = QStringLiteral(FULCRUM_GUI_RUNS_DIR);
constexpr int kRerunMs = 120000;

// Processes still in process group `group` (the capture's, with mpirun and its ranks).
int processes_in_group(qint64 group) {
    int count = 0;
    QDirIterator it("/proc", QDir::Dirs | QDir::NoDotAndDotDot);
    while (it.hasNext()) {
        QFile stat(it.next() + "/stat");
        if (!stat.open(QIODevice::ReadOnly)) {
            continue;
        }
        const QString text = QString::fromLatin1(stat.readAll());
        // pid (comm) state ppid pgrp ...: comm may hold spaces, so split after ')'.
        const QStringList fields = text.mid(text.lastIndexOf(')') + 2).split(' ');
        if (fields.size() > 2 && fields[2].toLongLong() == group && fields[0] != "Z") {
            ++count;
        }
    }
    return count;
}

}  // namespace

class RerunDialogTest : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() {
        QVERIFY2(QFileInfo::exists(kRuns + "/fixed/run.fulcrum"),
                 "run the gui_capture_runs fixture first");
        QSettings::setDefaultFormat(QSettings::IniFormat);
        QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, work_.path());
        QCoreApplication::setOrganizationName("fulcrum-tests");
    }

    // Each test works on its own copy, so new runs land beside it in a temp folder.
    void init() {
        copy_ = std::make_unique<QTemporaryDir>();
        QDir().mkpath(copy_->filePath("fixed"));
        QVERIFY(QFile::copy(kRuns + "/fixed/run.fulcrum", copy_->filePath("fixed/run.fulcrum")));
        window_ = std::make_unique<MainWindow>();
        window_->set_modal_dialogs(false);
        window_->set_tools_dir(QStringLiteral(FULCRUM_BINARY_DIR "/app/ui"));
        connect(window_.get(), &MainWindow::error_reported, this,
                [](const QString& message) { qWarning("error: %s", qPrintable(message)); });
        window_->open_path(copy_->filePath("fixed/run.fulcrum"));
        QTRY_COMPARE_WITH_TIMEOUT(window_->runs().size(), 1, 60000);
    }
    void cleanup() {
        window_.reset();
        copy_.reset();
    }

    void dialog_offers_the_runs_own_configuration() {
        RerunDialog* dialog = window_->rerun_dialog();
        QVERIFY(dialog);
        QVERIFY2(dialog->plan().capture_here, qPrintable(dialog->plan().why_not));
        // The fixture is pp2 × cp2 with fixed, per-doc, 1f1b: another balancer by default.
        QCOMPARE(dialog->choice().balancer, QString("ilp"));
        QCOMPARE(dialog->choice().cp_shard, QString("per-doc"));
        QCOMPARE(dialog->choice().schedule, QString("1f1b"));
        dialog->set_choice({.balancer = "wlb", .cp_shard = "zigzag", .schedule = "gpipe"});
        const QString args = dialog->arguments().join(' ');
        QVERIFY2(args.startsWith("capture -o " + copy_->filePath("fixed-rerun-wlb") +
                                 " -- mpirun -np 4 /"),
                 qPrintable(args));
        QVERIFY2(args.contains("--balancer wlb") && args.contains("--cp-shard zigzag") &&
                     args.contains("--schedule gpipe") && args.contains("--micro-batches 4"),
                 qPrintable(args));
        QVERIFY(QFileInfo(dialog->program()).isExecutable());
    }

    // An imported run has no grid: the dialog says so instead of "DP 1 × TP 1 × PP 1 × CP 1".
    void dialog_says_when_the_grid_is_unknown() {
        analysis::RunTrace trace;
        trace.run.origin = RunOrigin::imported;
        for (int rank = 0; rank < 2; ++rank) {
            RankInfo info;
            info.rank = rank;
            trace.add_rank(info);
        }
        trace.finish();
        QVERIFY(!trace.config.grid_known);
        auto run = std::make_shared<views::OpenedRun>();
        run->title = QStringLiteral("imported");
        run->trace = std::make_shared<const analysis::RunTrace>(std::move(trace));
        RerunDialog dialog(run, nullptr, QStringLiteral(FULCRUM_BINARY_DIR "/app/ui"));
        QString summary;
        for (const QLabel* label : dialog.findChildren<QLabel*>()) {
            if (label->text().startsWith(QStringLiteral("<b>imported</b>"))) {
                summary = label->text();
            }
        }
        QVERIFY2(summary.contains(QStringLiteral("grid unknown")), qPrintable(summary));
        QVERIFY2(!summary.contains(QStringLiteral("DP 1")), qPrintable(summary));
    }

    // A run on FPDT's input order offers it again (it follows the run's attention chunk); a run
    // without chunks does not offer it at all.
    void dialog_offers_chunked_sharding_with_chunks() {
        for (const int chunk : {64, 0}) {
            analysis::RunTrace trace;
            for (int rank = 0; rank < 2; ++rank) {
                RankInfo info;
                info.rank = rank;
                trace.add_rank(info);
            }
            trace.finish();
            trace.config.layout.grid.cp = 2;
            trace.config.attention_chunk = chunk;
            trace.config.cp_shard = chunk > 0 ? "chunked" : "per-doc";
            auto run = std::make_shared<views::OpenedRun>();
            run->title = QStringLiteral("chunked");
            run->trace = std::make_shared<const analysis::RunTrace>(std::move(trace));
            RerunDialog dialog(run, nullptr, QStringLiteral(FULCRUM_BINARY_DIR "/app/ui"));
            QCOMPARE(dialog.choice().cp_shard, QString(chunk > 0 ? "chunked" : "per-doc"));
            dialog.set_choice({.cp_shard = "chunked"});
            QCOMPARE(dialog.choice().cp_shard == "chunked", chunk > 0);
        }
    }

    void rerun_opens_in_compare() {
        RerunDialog* dialog = window_->rerun_dialog();
        dialog->set_choice({.balancer = "wlb"});
        QElapsedTimer timer;
        timer.start();
        dialog->start();
        QCOMPARE(dialog->state(), RerunDialog::State::running);
        QTRY_VERIFY_WITH_TIMEOUT(dialog->state() != RerunDialog::State::running, kRerunMs);
        QVERIFY2(dialog->state() == RerunDialog::State::succeeded,
                 qPrintable(dialog->status_text()));
        QTRY_COMPARE_WITH_TIMEOUT(window_->runs().size(), 2, 60000);
        qInfo("re-run captured and opened in %.1f s", timer.elapsed() / 1000.0);

        const views::RunPtr original = window_->runs()[0];
        const views::RunPtr rerun = window_->runs()[1];
        QCOMPARE(rerun->path, copy_->filePath("fixed-rerun-wlb/run.fulcrum"));
        QCOMPARE(rerun->trace->config.balancer, std::string("wlb"));
        QCOMPARE(rerun->trace->config.layout.grid.pp, 2);
        QCOMPARE(rerun->trace->config.layout.grid.cp, 2);
        QCOMPARE(rerun->trace->run.origin, RunOrigin::captured);
        QCOMPARE(window_->current_view(), View::compare);
        QCOMPARE(window_->reference_run(), original);
        QCOMPARE(window_->compare_runs(), (QVector<views::RunPtr>{original, rerun}));
    }

    void cancelled_rerun_leaves_nothing() {
        RerunDialog* dialog = window_->rerun_dialog();
        dialog->set_choice({.balancer = "wlb"});
        QSignalSpy opened(window_.get(), &MainWindow::run_opened);
        dialog->start();
        QVERIFY2(dialog->process(), qPrintable(dialog->status_text()));
        const qint64 group = dialog->process()->processId();
        QVERIFY(group > 0);
        QTest::qWait(400);  // the whole re-run takes ~1.3 s here
        if (dialog->state() != RerunDialog::State::running) {
            QSKIP("the re-run finished within a second; nothing left to cancel");
        }
        dialog->cancel();
        QTRY_COMPARE_WITH_TIMEOUT(dialog->state(), RerunDialog::State::cancelled, 20000);
        QCOMPARE(dialog->process()->state(), QProcess::NotRunning);
        QVERIFY2(dialog->status_text().contains("Cancelled"), qPrintable(dialog->status_text()));
        // mpirun and the ranks go with it.
        QTRY_COMPARE_WITH_TIMEOUT(processes_in_group(group), 0, 10000);
        QTest::qWait(300);
        QCOMPARE(opened.size(), 0);
        QCOMPARE(window_->runs().size(), 1);
        QVERIFY(!QFileInfo::exists(copy_->filePath("fixed-rerun-wlb")));
    }

    void simulate_instead() {
        RerunDialog* dialog = window_->rerun_dialog();
        dialog->set_simulate(true);
        dialog->set_choice({.balancer = "wlb", .cp_shard = "zigzag"});
        QVERIFY(dialog->simulate());
        dialog->start();
        QTRY_VERIFY_WITH_TIMEOUT(dialog->state() != RerunDialog::State::running, kRerunMs);
        QVERIFY2(dialog->state() == RerunDialog::State::succeeded,
                 qPrintable(dialog->status_text()));
        QTRY_COMPARE_WITH_TIMEOUT(window_->runs().size(), 2, 60000);
        const views::RunPtr simulated = window_->runs()[1];
        QCOMPARE(simulated->path, copy_->filePath("fixed-sim-wlb.fulcrum"));
        QCOMPARE(simulated->trace->run.origin, RunOrigin::simulated);
        QCOMPARE(simulated->trace->config.balancer, std::string("wlb"));
        QCOMPARE(simulated->trace->config.cp_shard, std::string("zigzag"));
        QCOMPARE(window_->current_view(), View::compare);
        QCOMPARE(window_->compare_runs().size(), 2);

        // A simulated run can only be simulated again.
        window_->set_current_run(1);
        RerunDialog* again = window_->rerun_dialog();
        QVERIFY(again != dialog || again->run() == simulated);
        QVERIFY(!again->plan().capture_here);
        QVERIFY(again->simulate());
        again->set_simulate(false);
        QVERIFY(again->simulate());
    }

    // Same documents: the run's own settings over one epoch first, as Compare's reference,
    // then the chosen balancer over the same epoch; the re-run gets a tokens/s ratio against
    // the baseline, the original (3 steps) none.
    void same_documents_runs_a_baseline_first() {
        RerunDialog* dialog = window_->rerun_dialog();
        dialog->set_simulate(true);
        dialog->set_choice({.balancer = "wlb"});
        dialog->set_same_documents(true);
        QVERIFY2(dialog->arguments().join(' ').contains("--balancer wlb") &&
                     dialog->arguments().join(' ').contains("--epochs 1"),
                 qPrintable(dialog->arguments().join(' ')));
        QSignalSpy baseline(dialog, &RerunDialog::baseline_ready);
        dialog->start();
        QVERIFY(dialog->running_baseline());
        QTRY_VERIFY_WITH_TIMEOUT(dialog->state() != RerunDialog::State::running, kRerunMs);
        QVERIFY2(dialog->state() == RerunDialog::State::succeeded,
                 qPrintable(dialog->status_text()));
        QCOMPARE(baseline.size(), 1);
        QCOMPARE(baseline[0][0].toString(), copy_->filePath("fixed-sim-epoch-fixed.fulcrum"));
        QTRY_COMPARE_WITH_TIMEOUT(window_->runs().size(), 3, 60000);
        const views::RunPtr first = window_->reference_run();
        QCOMPARE(first->path, copy_->filePath("fixed-sim-epoch-fixed.fulcrum"));
        QCOMPARE(first->trace->config.epochs, 1);
        QCOMPARE(first->trace->config.balancer, std::string("fixed"));
        const views::RunPtr rerun = window_->runs()[2];
        QCOMPARE(rerun->path, copy_->filePath("fixed-sim-epoch-wlb.fulcrum"));
        QCOMPARE(rerun->trace->config.balancer, std::string("wlb"));
        QCOMPARE(window_->compare_runs().front(), first);
        QCOMPARE(window_->current_view(), View::compare);
    }

private:
    QTemporaryDir work_;
    std::unique_ptr<QTemporaryDir> copy_;
    std::unique_ptr<MainWindow> window_;
};

QTEST_MAIN(RerunDialogTest)
#include "test_rerun_dialog.moc"
