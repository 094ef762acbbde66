// From the Plan tab to a run: "Re-run this layout…" fills the re-run dialog with a candidate's
// layout, schedule, knobs, balancer, sharding and stage layers when its world fits what the open
// run ran here, and refuses (saying why) one that needs more ranks; the Plan… dialog takes its
// defaults from the open run, refuses a bad world, and plans off the GUI thread with cancel.
#include <unistd.h>
#include <QFile>
#include <QLineEdit>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>

#include "app/ui/plan_dialog.h"
#include "app/ui/rerun.h"
#include "app/ui/rerun_dialog.h"
#include "tests/support/hand_plan.h"

using namespace fulcrum;
using namespace fulcrum::ui;

namespace {

QString host_name() {
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    return QString::fromLocal8Bit(name);
}

// A run captured here with 4 ranks (dp 1, pp 2, cp 2), its engine a stub next to `app_dir`.
std::shared_ptr<views::OpenedRun> captured_here(const QString& engine) {
    auto trace = std::make_shared<analysis::RunTrace>();
    trace->run.command = ("mpirun -np 4 " + engine +
                          " --pp 2 --cp 2 --schedule 1f1b --cp-shard per-doc --micro-batches 4 "
                          "--layers 4 --steps 3 --balancer fixed")
                             .toStdString();
    trace->run.origin = RunOrigin::captured;
    for (int i = 0; i < 4; ++i) {
        RankInfo info;
        info.rank = i;
        info.host = host_name().toStdString();
        trace->add_rank(info);
    }
    auto analysis = std::make_shared<analysis::RunAnalysis>();
    analysis->config.layout.grid.dp = 1;
    analysis->config.layout.grid.pp = 2;
    analysis->config.layout.grid.cp = 2;
    analysis->config.model.layers = 4;
    analysis->config.model.hidden = 64;
    analysis->config.model.heads = 4;
    analysis->config.model.context = 256;
    analysis->config.model.vocab = 256;
    auto run = std::make_shared<views::OpenedRun>();
    run->trace = trace;
    run->analysis = analysis;
    run->title = "fixed";
    run->path = "/tmp/fixed/run.fulcrum";
    return run;
}

}  // namespace

class PlanRerunTest : public QObject {
    Q_OBJECT
    QTemporaryDir dir_;

    QString engine() {
        const QString path = dir_.filePath("build/engine/fulcrum-train");
        QDir().mkpath(QFileInfo(path).absolutePath());
        QDir().mkpath(dir_.filePath("build/app/ui"));
        QFile file(path);
        if (file.open(QIODevice::WriteOnly)) {
            file.write("#!/bin/sh\n");
            file.close();
            file.setPermissions(QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
        }
        return path;
    }

private slots:
    void fillsTheDialog() {
        if (QStandardPaths::findExecutable("mpirun").isEmpty())
            QSKIP("no mpirun: the re-run dialog cannot capture here");
        RerunDialog dialog(captured_here(engine()), nullptr, dir_.filePath("build/app/ui"));
        QVERIFY2(dialog.plan().capture_here, qPrintable(dialog.plan().why_not));
        // 1×2×2×1 interleaved x2, wlb, stage layers 1/1/1/1: world 4 fits the run's 4 ranks.
        const plan::Candidate c = test::hand_plan().result.candidates[1];
        QCOMPARE(c.layout.grid.world(), 8);
        plan::Candidate fits = c;
        fits.layout.grid = {.dp = 1, .tp = 2, .pp = 2, .cp = 1};
        fits.layout.recompute = parallel::Recompute::selective;
        fits.layout.sequence_parallel = true;
        const CandidateRerun rerun = candidate_rerun(fits, dialog.plan(), 4);
        QVERIFY2(rerun.why_not.isEmpty(), qPrintable(rerun.why_not));
        dialog.set_simulate(false);
        dialog.set_choice(rerun.choice);
        QCOMPARE(dialog.choice().balancer, QString("wlb"));
        QCOMPARE(dialog.choice().schedule, QString("interleaved"));
        const QString command = dialog.arguments().join(' ');
        for (const char* expected :
             {"-np 4 ",
              "--dp 1 --tp 2 --pp 2 --cp 1 --micro-batches 8 --virtual-stages 2 "
              "--stage-layers 1,1,1,1 --recompute selective --sequence-parallel",
              "--balancer wlb", "--schedule interleaved", "--layers 4", "--steps 3"})
            QVERIFY2(command.contains(expected), qPrintable(command + " lacks " + expected));
        // The run's own degrees are gone, not repeated.
        QCOMPARE(command.count("--pp "), 1);
        QCOMPARE(command.count("--cp "), 1);
        QVERIFY(!command.contains("--micro-batches 4"));

        // The 8-rank candidate does not fit the 4 ranks this machine ran.
        const CandidateRerun too_big = candidate_rerun(c, dialog.plan(), 4);
        QVERIFY(too_big.why_not.contains("needs 8 ranks"));
    }

    void refusedWhenNotCapturable() {
        RerunPlan elsewhere;
        elsewhere.why_not = "it was captured on node17, not on this machine";
        const CandidateRerun rerun =
            candidate_rerun(test::hand_plan().result.candidates[0], elsewhere, 64);
        QVERIFY(rerun.why_not.contains("node17"));
    }

    void planDialogDefaults() {
        PlanDialog dialog(captured_here(engine()));
        QCOMPARE(dialog.layers()->value(), 4);
        QCOMPARE(dialog.worlds()->text(), QString("4"));
        auto request = dialog.request();
        QVERIFY2(static_cast<bool>(request), request ? "" : request.error().message.c_str());
        QCOMPARE(request->model.hidden, 64);
        QCOMPARE(request->world_sizes, std::vector<int>{4});
        dialog.worlds()->setText("4,eight");
        QVERIFY(!dialog.request());
        QVERIFY(QString::fromStdString(dialog.request().error().message).contains("eight"));
    }

    void planDialogRunsAndCancels() {
        PlanDialog dialog(captured_here(engine()));
        QSignalSpy ready(&dialog, &PlanDialog::plan_ready);
        dialog.start();
        QVERIFY(dialog.running());
        QTRY_VERIFY_WITH_TIMEOUT(!dialog.running(), 120000);
        QVERIFY2(ready.count() == 1, qPrintable(dialog.status_text()));
        const auto plan = ready.front().front().value<views::PlanPtr>();
        QVERIFY(plan && !plan->result.candidates.empty());
        // A large world, cancelled at once: no plan, the dialog says so.
        dialog.worlds()->setText("4096");
        dialog.start();
        dialog.cancel();
        QTRY_VERIFY_WITH_TIMEOUT(!dialog.running(), 120000);
        QCOMPARE(ready.count(), 1);
        QVERIFY2(dialog.status_text().contains("Cancelled"), qPrintable(dialog.status_text()));
    }
};

QTEST_MAIN(PlanRerunTest)
#include "test_plan_rerun.moc"
