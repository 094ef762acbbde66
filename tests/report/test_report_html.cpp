// The HTML report on a hand-built run whose every name is an injection attempt: the escaping
// in the bytes, then the page in headless Chromium (nothing injected runs, the page's own
// scripts do, every chart has its marks), an imported trace that must show no figure nothing was
// measured for, and the caps that keep a large run's report small.
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QTest>

#include "core/import/importer.h"
#include "core/report/html_report.h"
#include "core/report/report_html.h"
#include "core/util/text_table.h"
#include "tests/report/chromium.h"

using namespace fulcrum;
using namespace fulcrum::analysis;

namespace {

// If any of these ran, it would mark the page; the test looks for that mark.
const std::string kScriptName = "<script>alert(1)</script>";
const std::string kPwnScript =
    "<script>document.documentElement.setAttribute('data-pwned','1')</script>";
const std::string kImgHost =
    "<img src=x onerror=\"document.documentElement.setAttribute('data-pwned','2')\">";
const std::string kAttributeBreak =
    "\"onmouseover=\"document.documentElement.setAttribute('data-pwned','3')\" x='";

constexpr int kStages = 2;
constexpr int kSteps = 3;
constexpr int kMicrobatches = 2;

// pp 2, GPipe, 2 micro-batches, 3 steps; every name a trace can carry is hostile.
RunTrace hostile_run() {
    RunTrace trace;
    trace.run.name = kScriptName;
    trace.run.command = "fulcrum-train " + kAttributeBreak;
    trace.run.producer = kPwnScript;
    trace.run.config_json =
        R"({"dp":1,"tp":1,"pp":2,"cp":1,"schedule":"gpipe","microbatches":2,)"
        R"("balancer":"<script>alert(1)</script>","backend":"\"onmouseover=x"})";
    for (int stage = 0; stage < kStages; ++stage) {
        RankInfo info;
        info.rank = stage;
        info.dp = info.cp = info.tp = 0;
        info.pp = stage;
        info.host = stage == 0 ? kImgHost : kScriptName;
        info.complete = stage == 0;
        info.dropped_records = stage == 0 ? 0 : 17;
        trace.add_rank(info);
        trace.add_lane(stage, LaneKind::host_thread, kPwnScript);
    }
    for (int step = 0; step < kSteps; ++step) {
        const std::int64_t t0 = step * 1'000'000;
        for (int stage = 0; stage < kStages; ++stage) {
            auto& lane = trace.ranks[static_cast<std::size_t>(stage)].lanes[0];
            trace.add_range(lane, "step", Category::schedule, t0, t0 + 900'000, step);
            trace.add_range(lane, kScriptName, Category::other, t0 + 850'000, t0 + 860'000, step);
            for (int mb = 0; mb < kMicrobatches; ++mb) {
                const std::int64_t f = t0 + (stage + mb) * 100'000;
                trace.add_range(lane, "forward", Category::compute, f, f + 90'000 + stage * 5'000,
                                step, mb, static_cast<std::int16_t>(stage), Phase::forward);
                const std::int64_t b = t0 + 400'000 + (kStages - 1 - stage + mb) * 150'000;
                trace.add_range(lane, "backward", Category::compute, b, b + 140'000, step, mb,
                                static_cast<std::int16_t>(stage), Phase::backward);
            }
        }
    }
    trace.finish();
    return trace;
}

report::ReportRun hostile_report_run() {
    RunTrace trace = hostile_run();
    auto analysis = analyze_run(trace);
    if (!analysis) {
        qFatal("analyze_run: %s", analysis.error().message.c_str());
    }
    std::vector<ImportLogEntry> log;
    log.push_back(
        {kPwnScript, 3, "unknown phase " + kAttributeBreak, "{\"name\":\"" + kScriptName + "\"}"});
    log.push_back({"trace.json", 4, "bad record", std::string(2000, 'x') + "é"});
    return report::make_report_run("/tmp/<b>bold</b>.fulcrum", trace, std::move(*analysis),
                                   std::move(log));
}

// The text of every <td> of the table `name` (data-table), in order, tags stripped.
QStringList table_cells(const std::string& html, const std::string& name) {
    const std::size_t start = html.find("data-table=\"" + name + "\"");
    const std::size_t end = html.find("</table>", start);
    QStringList cells;
    if (start == std::string::npos || end == std::string::npos) {
        return cells;
    }
    const QString table = QString::fromStdString(html.substr(start, end - start));
    static const QRegularExpression cell(QStringLiteral("<td[^>]*>(.*?)</td>"));
    static const QRegularExpression tag(QStringLiteral("<[^>]*>"));
    for (const auto& match : cell.globalMatch(table)) {
        cells << match.captured(1).remove(tag);
    }
    return cells;
}

QString write_file(const QString& path, const std::string& content) {
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly)) {
        return {};
    }
    file.write(content.data(), static_cast<qint64>(content.size()));
    return path;
}

}  // namespace

class ReportHtmlTest : public QObject {
    Q_OBJECT

private slots:
    void escapeCoversTextAndAttributes() {
        QCOMPARE(report::html_escape("a<b>&\"c'"), std::string("a&lt;b&gt;&amp;&quot;c&#39;"));
        QCOMPARE(report::html_escape("名前 — ok"), std::string("名前 — ok"));
    }

    // The bytes: every hostile string appears escaped, never raw; the only scripts are ours.
    void hostileNamesAreEscaped() {
        const std::string html = report::html_report({hostile_report_run()});
        for (const std::string& raw : {kScriptName, kPwnScript, kImgHost,
                                       std::string("\"onmouseover="), std::string("<b>bold</b>")}) {
            QVERIFY2(html.find(raw) == std::string::npos, raw.c_str());
        }
        QVERIFY(html.find(report::html_escape(kScriptName)) != std::string::npos);
        QVERIFY(html.find(report::html_escape(kImgHost)) != std::string::npos);
        QVERIFY(html.find("&quot;onmouseover=") != std::string::npos);
        QVERIFY(html.find("&lt;b&gt;bold&lt;/b&gt;") != std::string::npos);
        // Our two scripts and nothing else: <head>'s error recorder and <body>'s last one.
        std::size_t scripts = 0;
        for (std::size_t at = html.find("<script"); at != std::string::npos;
             at = html.find("<script", at + 1)) {
            ++scripts;
        }
        QCOMPARE(scripts, std::size_t{2});
        QVERIFY(html.find("Content-Security-Policy") != std::string::npos);
        // No URL the browser could fetch.
        QVERIFY(html.find("http://") == std::string::npos);
        QVERIFY(html.find("https://") == std::string::npos);
        // The clipped import-log record keeps valid UTF-8 and says it was clipped.
        QVERIFY(html.find(std::string(300, 'x') + "…") != std::string::npos);
    }

    void deterministic() {
        const auto run = hostile_report_run();
        QCOMPARE(report::html_report({run}), report::html_report({run}));
    }

    // The page: our scripts ran to the end, nothing injected ran, the hostile names show as
    // text, and each chart holds one mark per value of the analysis.
    void hostileReportInChromium() {
        FULCRUM_REQUIRE_CHROMIUM();
        const auto run = hostile_report_run();
        const QString file = write_file(FULCRUM_BINARY_DIR "/tests/report/hostile-report.html",
                                        report::html_report({run}));
        QVERIFY(!file.isEmpty());
        QString log;
        const QString dom =
            QString::fromUtf8(fulcrum::testing::run_chromium(file, {"--dump-dom"}, &log));
        QVERIFY2(dom.contains("data-ready=\"1\""),
                 qPrintable("the report's script did not finish\n" + log));
        QVERIFY2(!dom.contains("data-errors=\""),
                 qPrintable(dom.section("id=\"report-errors\"", 1, 1).left(2000)));
        QVERIFY2(!dom.contains(" data-pwned=\""), "an injected script ran");
        QVERIFY(dom.contains("data-pwned"));  // as text, escaped
        // The detector works: the same page with the hostile strings left raw is marked.
        std::string raw = report::html_report({run});
        raw.insert(raw.rfind("</body>"), kPwnScript + kImgHost);
        const QString control =
            write_file(FULCRUM_BINARY_DIR "/tests/report/hostile-control.html", raw);
        const QString control_dom =
            QString::fromUtf8(fulcrum::testing::run_chromium(control, {"--dump-dom"}));
        QVERIFY2(control_dom.contains(" data-pwned=\""), "the injection detector does not detect");
        // Chromium serialises text with < as &lt;: the name is text, not an element.
        QVERIFY(dom.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        QVERIFY(!dom.contains("<script>alert(1)"));
        QVERIFY(!dom.contains("<img src=\"x\""));

        const RunAnalysis& a = run.analysis;
        using fulcrum::testing::chart_marks;
        QCOMPARE(chart_marks(dom, "grid", 0), kStages);
        QCOMPARE(chart_marks(dom, "breakdown", 0), kSteps * 4);
        QCOMPARE(chart_marks(dom, "bubbles", 0), kStages * 3);
        QCOMPARE(chart_marks(dom, "cp_load", 0), -1);  // cp = 1
        QCOMPARE(chart_marks(dom, "offload", 0), -1);  // no copies
        QCOMPARE(chart_marks(dom, "heatmap_compute", 0),
                 int(a.imbalance.compute_by_step.rows.size() *
                     a.imbalance.compute_by_step.columns.size()));
        QCOMPARE(chart_marks(dom, "heatmap_compute", 0), kStages * kSteps);
        QCOMPARE(chart_marks(dom, "heatmap_microbatch", 0), kStages * kMicrobatches);
        // No workload table: no cost model, so only the two measured bars.
        QVERIFY(!a.cost_model);
        QCOMPARE(chart_marks(dom, "comparison", -1), 2);
        // The ranks that dropped records or stopped early are listed.
        QVERIFY(
            dom.contains("1 of 2 ranks incomplete or with dropped records; 17 records dropped"));
    }

    // An imported PyTorch-profiler trace (tests/import/kineto/data, two ranks): no workload,
    // no passes, no coordinates, no run.config model. Nothing in the report stands for what
    // was not measured: "—" in the figures, "unknown" for the model, and the clock row says
    // the ranks were aligned by their UTC offsets instead of printing the offset as a shift.
    void importedRunShowsNoInventedFigures() {
        QTemporaryDir dir;
        const std::string path = dir.filePath("imported.fulcrum").toStdString();
        const std::string data = FULCRUM_SOURCE_DIR "/tests/import/kineto/data/";
        auto imported = importer::import_files({data + "rank0.json", data + "rank1.json"}, path);
        QVERIFY2(imported.ok(), imported.ok() ? "" : imported.error().message.c_str());
        auto run = report::load_report_run(path);
        QVERIFY2(run.ok(), run.ok() ? "" : run.error().message.c_str());
        const std::string html = report::html_report({*run});

        // Predicted against measured: compute imbalance, predicted imbalance, bubble fraction
        // and CP imbalance have nothing behind them.
        const QStringList comparison = table_cells(html, "comparison");
        QCOMPARE(comparison.size(), 13);
        for (int column : {7, 8, 9, 10, 11, 12}) {
            QCOMPARE(comparison[column], QStringLiteral("—"));
        }
        QCOMPARE(comparison[5], QStringLiteral("1.000 ms"));  // the slowest rank's step: known
        // The ranks: coordinates unknown, host unknown, clock aligned by UTC offset.
        const QStringList ranks = table_cells(html, "ranks");
        QCOMPARE(ranks.size(), 2 * 12);
        for (int rank = 0; rank < 2; ++rank) {
            for (int column : {1, 4, 5, 6, 7}) {
                QCOMPARE(ranks[rank * 12 + column], QStringLiteral("—"));
            }
            QCOMPARE(ranks[rank * 12 + 10], QStringLiteral("UTC offset (host clock)"));
            QCOMPARE(ranks[rank * 12 + 11], QStringLiteral("— (aligned by UTC offset)"));
        }
        QVERIFY(html.find("<tr><th>model</th><td>unknown</td></tr>") != std::string::npos);
        QVERIFY(html.find("<tr><th>data</th><td>unknown</td></tr>") != std::string::npos);
        for (const char* invented : {"layers 0", "hidden 0", "dp -1", ">-1<", "1.000<", "0.000<",
                                     "-1.000 ms", "-500.000 us"}) {
            QVERIFY2(html.find(invented) == std::string::npos, invented);
        }
        // What was there is there, and the notes say what was not.
        QCOMPARE(table_cells(html, "breakdown").size(), 2 * 9);
        QVERIFY(html.find("no workload table") != std::string::npos);
        QVERIFY(html.find("No pipeline: the grid is unknown") != std::string::npos);
    }

    // HTA's sections: on the imported Kineto trace (kernels on two ranks) the tables hold the
    // analysis's figures; on the hand-built CPU run they say why they are empty; in a
    // comparison the second run has the op-level diff against the first, and the first none.
    void htaSectionsShowTheAnalysis() {
        QTemporaryDir dir;
        const std::string path = dir.filePath("imported.fulcrum").toStdString();
        const std::string data = FULCRUM_SOURCE_DIR "/tests/import/kineto/data/";
        auto imported = importer::import_files({data + "rank0.json", data + "rank1.json"}, path);
        QVERIFY2(imported.ok(), imported.ok() ? "" : imported.error().message.c_str());
        std::optional<report::DiffBase> first;
        report::LoadReportOptions options;
        options.keep_tally = &first;
        auto gpu = report::load_report_run(path, options);
        QVERIFY2(gpu.ok(), gpu.ok() ? "" : gpu.error().message.c_str());
        QVERIFY(first.has_value());
        QVERIFY(!gpu->diff);
        report::ReportRun cpu = hostile_report_run();
        const RunTrace cpu_trace = hostile_run();
        NameTally cpu_tally;
        for (const RankTrace& rank : cpu_trace.ranks) {
            cpu_tally.add(rank);
        }
        cpu.diff = diff_tallies({&first->tally, &first->names}, {&cpu_tally, &cpu_trace});
        const std::string html = report::html_report({*gpu, cpu});

        // Rank 0 of rank0.json: kernels from 1050 µs to 2650 µs.
        const QStringList by_type = table_cells(html, "kernel_time");
        const auto& kernels = gpu->analysis.kernels;
        QCOMPARE(by_type.size(), 10 * int(kernels.time_by_type.size()));
        QCOMPARE(by_type[0], QStringLiteral("0"));
        QCOMPARE(by_type[1], QStringLiteral("1.600 ms"));
        QCOMPARE(kernels.time_by_type[0].kernel_span_ns, 1'600'000);
        const QStringList top = table_cells(html, "top_kernels");
        QCOMPARE(top.size(), 11 * int(kernels.top_kernels.size()));
        QCOMPARE(top[0], QString::fromStdString(kernels.top_kernels[0].name));
        QCOMPARE(top[3], QString::fromStdString(format_duration(kernels.top_kernels[0].total_ns)));
        QCOMPARE(table_cells(html, "idle").size(), 9 * int(kernels.idle.size()));
        // The all-reduce ran on both ranks: one group.
        const QStringList communication = table_cells(html, "communication");
        QCOMPARE(communication.size(), 9 * int(gpu->analysis.communication.size()));
        QVERIFY(!communication.isEmpty());
        QCOMPARE(communication[2], QStringLiteral("0, 1"));

        // The CPU run: no kernels, no collectives; a critical path per step.
        QVERIFY(html.find("No device activity (kernels, copies, memsets) in this run") !=
                std::string::npos);
        QVERIFY(html.find("No collective was matched across two ranks or more.") !=
                std::string::npos);
        const QStringList paths = table_cells(html, "critical_path");
        QCOMPARE(paths.size(), 6 * kSteps);
        QCOMPARE(paths[0], QStringLiteral("0"));
        QCOMPARE(paths[1],
                 QString::fromStdString(format_duration(cpu.analysis.critical_paths[0].end_ns -
                                                        cpu.analysis.critical_paths[0].start_ns)));
        // The imported run has no passes, so no critical path; it says so.
        QVERIFY(html.find("No forward/backward passes: the critical path needs") !=
                std::string::npos);

        // The diff: the kernels only the first run had are removed, the passes added.
        QVERIFY(html.find("id=\"run-0-diff\"") == std::string::npos);
        QVERIFY(html.find("id=\"run-1-diff\"") != std::string::npos);
        const QStringList diff = table_cells(html, "diff");
        const int gemm = int(diff.indexOf("sm90_xmma_gemm_bf16"));
        QVERIFY(gemm >= 0);
        QCOMPARE(diff[gemm + 2], QStringLiteral("removed"));
        const int forward = int(diff.indexOf("forward"));
        QVERIFY(forward >= 0);
        QCOMPARE(diff[forward + 2], QStringLiteral("added"));
    }

    // A run far larger than a screen: heatmaps average neighbours into at most the cap.
    void heatmapsAreCapped() {
        report::ReportRun run;
        auto& matrix = run.analysis.imbalance.compute_by_step;
        for (int r = 0; r < 1000; ++r) {
            matrix.rows.push_back(r);
        }
        for (int c = 0; c < 500; ++c) {
            matrix.columns.push_back(c);
        }
        matrix.values.assign(matrix.rows.size() * matrix.columns.size(), 1e6);
        report::ReportOptions options;
        const std::string html = report::html_report({run}, options);
        const QString text = QString::fromStdString(html);
        const int cells = fulcrum::testing::chart_marks(text, "heatmap_compute", 0);
        // 1000 rows in buckets of 16 → 63; 500 columns in buckets of 4 → 125.
        QCOMPARE(cells, 63 * 125);
        QVERIFY(cells <= options.max_heatmap_rows * options.max_heatmap_columns);
        QVERIFY(html.size() < 2'000'000);
    }
};

QTEST_GUILESS_MAIN(ReportHtmlTest)
#include "test_report_html.moc"
