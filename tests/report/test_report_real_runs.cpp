// `fulcrum report` on two real captures of fulcrum-train (pp 2 × cp 2, 1F1B, fixed against
// wlb: tests/views/capture_runs.sh), opened in headless Chromium: the page's script finishes
// without an error, every chart holds one mark per value of the analysis, and a screenshot
// is saved (FULCRUM_BINARY_DIR/tests/report/real-runs-report.png). Also the command's errors.
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <optional>

#include <cmath>
#include <set>

#include "core/report/html_report.h"
#include "tests/report/chromium.h"

using namespace fulcrum;

namespace {

struct Ran {
    int exit_code = -1;
    QString out, err;
};

Ran fulcrum_cli(const QStringList& arguments, const QString& directory = {}) {
    QProcess process;
    if (!directory.isEmpty()) {
        process.setWorkingDirectory(directory);
    }
    process.start(FULCRUM_BINARY_DIR "/app/fulcrum", arguments);
    process.waitForFinished(300'000);
    return {process.exitCode(), QString::fromUtf8(process.readAllStandardOutput()),
            QString::fromUtf8(process.readAllStandardError())};
}

bool any_finite(const analysis::Matrix& m) {
    for (const double v : m.values) {
        if (std::isfinite(v)) {
            return true;
        }
    }
    return false;
}

template <typename Rows, typename Key>
int distinct(const Rows& rows, Key key) {
    std::set<decltype(key(*rows.begin()))> seen;
    for (const auto& row : rows) {
        seen.insert(key(row));
    }
    return static_cast<int>(seen.size());
}

}  // namespace

class ReportRealRunsTest : public QObject {
    Q_OBJECT

    QTemporaryDir work_;
    QString fixed_, wlb_;
    std::vector<report::ReportRun> runs_;

private slots:
    void initTestCase() {
        QProcess capture;
        capture.setProcessChannelMode(QProcess::MergedChannels);
        capture.start("bash", {FULCRUM_SOURCE_DIR "/tests/views/capture_runs.sh",
                               FULCRUM_BINARY_DIR, work_.filePath("runs")});
        QVERIFY(capture.waitForFinished(600'000));
        QVERIFY2(capture.exitCode() == 0, capture.readAll().constData());
        fixed_ = work_.filePath("runs/fixed/run.fulcrum");
        wlb_ = work_.filePath("runs/wlb/run.fulcrum");
        // As `fulcrum report` loads a comparison: the second run diffed against the first.
        std::optional<report::DiffBase> first;
        for (const QString& path : {fixed_, wlb_}) {
            report::LoadReportOptions options;
            options.keep_tally = runs_.empty() ? &first : nullptr;
            options.diff_against = !runs_.empty() && first ? &*first : nullptr;
            auto run = report::load_report_run(path.toStdString(), options);
            QVERIFY2(run.ok(), run.ok() ? "" : run.error().message.c_str());
            runs_.push_back(std::move(*run));
        }
    }

    void helpNamesTheOptions() {
        const Ran ran = fulcrum_cli({"report", "--help"});
        QCOMPARE(ran.exit_code, 0);
        QVERIFY(ran.out.contains("--output"));
        QVERIFY(ran.out.contains("--title"));
    }

    void missingRunExitsTwoNamingIt() {
        const QString missing = work_.filePath("no-such-run.fulcrum");
        const Ran ran =
            fulcrum_cli({"report", fixed_, missing, "-o", work_.filePath("never.html")});
        QCOMPARE(ran.exit_code, 2);
        QVERIFY2(ran.err.contains(missing), qPrintable(ran.err));
        QVERIFY(!QFile::exists(work_.filePath("never.html")));
    }

    void singleRunDefaultsBesideItAndKeepsAnExistingFile() {
        const Ran first = fulcrum_cli({"report", fixed_});
        QVERIFY2(first.exit_code == 0, qPrintable(first.err));
        const QString beside = work_.filePath("runs/fixed/run.html");
        QVERIFY(QFile::exists(beside));
        const Ran again = fulcrum_cli({"report", fixed_});
        QCOMPARE(again.exit_code, 2);
        QVERIFY2(again.err.contains("run.html"), qPrintable(again.err));
        QCOMPARE(fulcrum_cli({"report", fixed_, "--force"}).exit_code, 0);
    }

    // Two runs, one file: ready, no error, every chart with its marks, a screenshot.
    void twoRunsInChromium() {
        FULCRUM_REQUIRE_CHROMIUM();
        const QString html = work_.filePath("compare.html");
        const Ran ran =
            fulcrum_cli({"report", fixed_, wlb_, "-o", html, "--title", "fixed <vs> wlb"});
        QVERIFY2(ran.exit_code == 0, qPrintable(ran.err));
        QFile file(html);
        QVERIFY(file.open(QIODevice::ReadOnly));
        const QByteArray bytes = file.readAll();
        QVERIFY(bytes.contains("<title>fixed &lt;vs&gt; wlb</title>"));
        // The command writes what the library makes of the same runs.
        QCOMPARE(bytes.toStdString(), report::html_report(runs_, {.title = "fixed <vs> wlb"}));

        QString log;
        const QString dom =
            QString::fromUtf8(fulcrum::testing::run_chromium(html, {"--dump-dom"}, &log));
        QVERIFY2(dom.contains("data-ready=\"1\""),
                 qPrintable("the report's script did not finish\n" + log));
        QVERIFY2(!dom.contains("data-errors=\""),
                 qPrintable(dom.section("id=\"report-errors\"", 1, 1).left(2000)));

        using fulcrum::testing::chart_marks;
        int comparison = 0;
        for (std::size_t i = 0; i < runs_.size(); ++i) {
            const auto& run = runs_[i];
            const auto& a = run.analysis;
            const int index = static_cast<int>(i);
            QCOMPARE(a.config.layout.grid.pp, 2);
            QCOMPARE(a.config.layout.grid.cp, 2);
            QCOMPARE(chart_marks(dom, "grid", index), int(run.ranks.size()));
            QCOMPARE(int(run.ranks.size()), 4);
            const int steps = distinct(a.breakdown, [](const auto& r) { return r.step; });
            QCOMPARE(steps, 3);
            QCOMPARE(chart_marks(dom, "breakdown", index), steps * 4);
            QCOMPARE(chart_marks(dom, "bubbles", index),
                     distinct(a.bubbles.stages, [](const auto& r) { return r.stage; }) * 3);
            QCOMPARE(chart_marks(dom, "bubbles", index), 2 * 3);
            int cp_ranks = 0;
            {
                std::set<int> seen;
                for (const auto& group : a.cp_load.groups) {
                    for (const auto& r : group.ranks) {
                        seen.insert(r.cp_rank);
                    }
                }
                cp_ranks = int(seen.size());
            }
            QCOMPARE(cp_ranks, 2);
            QCOMPARE(chart_marks(dom, "cp_load", index), cp_ranks * 2);
            QCOMPARE(chart_marks(dom, "offload", index),
                     a.offload.ranks.empty() ? -1 : int(a.offload.ranks.size()) * 2);
            const auto& compute = a.imbalance.compute_by_step;
            QCOMPARE(chart_marks(dom, "heatmap_compute", index),
                     int(compute.rows.size() * compute.columns.size()));
            QCOMPARE(chart_marks(dom, "heatmap_compute", index), 4 * 3);
            const auto& predicted = a.imbalance.predicted_by_step;
            QCOMPARE(chart_marks(dom, "heatmap_predicted", index),
                     predicted.rows.empty()
                         ? -1
                         : int(predicted.rows.size() * predicted.columns.size()));
            QVERIFY(chart_marks(dom, "heatmap_microbatch", index) > 0);
            QCOMPARE(chart_marks(dom, "stragglers", index),
                     a.imbalance.stragglers.empty()
                         ? -1
                         : std::min(int(a.imbalance.stragglers.size()), 32));
            comparison += (a.breakdown.empty() ? 0 : 1) + (any_finite(compute) ? 1 : 0) +
                          (a.imbalance.predicted_is_time && any_finite(predicted) ? 1 : 0);
            // A real capture has a workload table: the cost model predicts in time.
            QVERIFY(a.cost_model.has_value());
            QVERIFY(a.imbalance.predicted_is_time);
        }
        QCOMPARE(comparison, 6);
        QCOMPARE(chart_marks(dom, "comparison", -1), comparison);
        QVERIFY(dom.contains(">fixed<"));
        QVERIFY(dom.contains(">wlb<"));

        // The page drives its own controls (report.html#selftest): a table sorts on a header
        // click, a mark's tooltip shows its text, the wheel zooms a chart, a double click resets.
        const QString driven = QString::fromUtf8(
            fulcrum::testing::run_chromium(html, {"--dump-dom"}, &log, QStringLiteral("selftest")));
        QVERIFY2(driven.contains("data-selftest=\"sort=ok tip=ok zoom=ok reset=ok\""),
                 qPrintable(driven.section("data-selftest=", 1, 1).left(200) + "\n" + log));

        const QString png = FULCRUM_BINARY_DIR "/tests/report/real-runs-report.png";
        QFile::remove(png);
        fulcrum::testing::run_chromium(
            html, {"--screenshot=" + png, "--window-size=1400,2000", "--hide-scrollbars"});
        QVERIFY2(QFileInfo(png).size() > 20'000, "no screenshot, or a blank one");
    }
};

QTEST_GUILESS_MAIN(ReportRealRunsTest)
#include "test_report_real_runs.moc"
