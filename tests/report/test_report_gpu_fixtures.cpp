// The HTML report of real GPU captures (tests/data/README.md: fulcrum-train's CUDA backend on
// an NVIDIA H200): the 125M model's profile by itself, and the pp2 × cp2 offload runs, fixed
// against WLB-LLM, as a comparison. The kernel and offload sections must be there with the
// analysis's figures: the tables' sort values are read back and compared with the structs.
#include <QRegularExpression>
#include <QTest>

#include "core/analysis/run_diff.h"
#include "core/report/html_report.h"
#include "core/report/report_html.h"
#include "core/store/trace_reader.h"
#include "core/util/text_table.h"

using namespace fulcrum;
using namespace fulcrum::report;

namespace {

std::string fixture(const char* name) {
    return std::string(FULCRUM_SOURCE_DIR "/tests/data/") + name;
}

struct TableCell {
    QString sort;  // data-v, empty when the cell has none
    QString html;
};
using TableRows = std::vector<std::vector<TableCell>>;

// The body rows of the first table `name` of run `index`'s section.
TableRows table_of(const QString& html, int index, const QString& name) {
    const qsizetype section =
        html.indexOf(QStringLiteral("<section class=\"run\" id=\"run-%1\"").arg(index));
    if (section < 0) {
        return {};
    }
    const qsizetype start = html.indexOf(QStringLiteral("data-table=\"%1\"").arg(name), section);
    const qsizetype body = html.indexOf(QStringLiteral("<tbody>"), start);
    const qsizetype end = html.indexOf(QStringLiteral("</table>"), start);
    if (start < 0 || body < 0 || end < 0) {
        return {};
    }
    const QString rows_html = html.mid(body, end - body);
    static const QRegularExpression row_pattern(QStringLiteral("<tr>(.*?)</tr>"));
    static const QRegularExpression cell_pattern(
        QStringLiteral("<td(?: data-v=\"([^\"]*)\")?>(.*?)</td>"));
    TableRows rows;
    for (const auto& row : row_pattern.globalMatch(rows_html)) {
        std::vector<TableCell> cells;
        for (const auto& cell : cell_pattern.globalMatch(row.captured(1))) {
            cells.push_back({cell.captured(1), cell.captured(2)});
        }
        rows.push_back(std::move(cells));
    }
    return rows;
}

QString section_of(const QString& html, int index, const char* slug) {
    const qsizetype start = html.indexOf(QStringLiteral("id=\"run-%1-%2\"").arg(index).arg(slug));
    if (start < 0) {
        return {};
    }
    const qsizetype end = html.indexOf(QStringLiteral("<h3 "), start + 1);
    return html.mid(start, end < 0 ? -1 : end - start);
}

QString escaped(const std::string& text) {
    return QString::fromStdString(html_escape(text));
}

// Checks the run's offload section against its analysis: the sentence's totals and one table
// row per rank with its copies, times and bytes.
void check_offload(const QString& html, int index, const analysis::OffloadAnalysis& offload) {
    const QString section = section_of(html, index, "offload");
    QVERIFY(!section.isEmpty());
    QVERIFY(offload.bandwidth_gb_s.has_value());
    for (const std::string& figure :
         {duration_text(double(offload.copy_ns)), duration_text(double(offload.exposed_ns)),
          format_percent(double(offload.overlapped_ns), double(offload.copy_ns)),
          format_fixed(*offload.bandwidth_gb_s, 2) + " GB/s"}) {
        QVERIFY2(section.contains(escaped(figure)), figure.c_str());
    }
    const TableRows rows = table_of(html, index, QStringLiteral("offload"));
    QCOMPARE(rows.size(), offload.ranks.size());
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const auto& rank = offload.ranks[i];
        const auto& cells = rows[i];
        QCOMPARE(cells.size(), std::size_t{9});
        QCOMPARE(cells[0].sort.toLongLong(), std::int64_t{rank.rank});
        QCOMPARE(cells[1].sort.toLongLong(), rank.copies);
        QCOMPARE(cells[2].sort.toLongLong(), rank.copy_ns);
        QCOMPARE(cells[3].sort.toLongLong(), rank.overlapped_ns);
        QCOMPARE(cells[4].sort.toLongLong(), rank.exposed_ns);
        QCOMPARE(cells[5].sort.toLongLong(), rank.host_to_device_ns);
        QCOMPARE(cells[6].sort.toLongLong(), rank.device_to_host_ns);
        QCOMPARE(cells[7].sort.toLongLong(), rank.bytes);
        QCOMPARE(cells[8].sort.toDouble(), std::stod(format_fixed(*rank.bandwidth_gb_s, 6)));
    }
}

// The run's Kernels section: one kernel-time row per rank with its span, and the top kernels
// in the analysis's order with their counts and totals, names escaped.
void check_kernels(const QString& html, int index, const analysis::KernelAnalysis& kernels) {
    QVERIFY(!section_of(html, index, "kernels").isEmpty());
    const TableRows by_type = table_of(html, index, QStringLiteral("kernel_time"));
    QCOMPARE(by_type.size(), kernels.time_by_type.size());
    for (std::size_t i = 0; i < by_type.size(); ++i) {
        QCOMPARE(by_type[i][0].sort.toLongLong(), std::int64_t{kernels.time_by_type[i].rank});
        QCOMPARE(by_type[i][1].sort.toLongLong(), kernels.time_by_type[i].kernel_span_ns);
    }
    const TableRows top = table_of(html, index, QStringLiteral("top_kernels"));
    QCOMPARE(top.size(), kernels.top_kernels.size());
    for (std::size_t i = 0; i < top.size(); ++i) {
        const auto& stats = kernels.top_kernels[i];
        QCOMPARE(top[i][0].html, escaped(stats.name));
        QCOMPARE(top[i][2].sort.toLongLong(), stats.count);
        QCOMPARE(top[i][3].sort.toLongLong(), stats.total_ns);
    }
}

}  // namespace

class ReportGpuFixturesTest : public QObject {
    Q_OBJECT

private slots:
    // The 125M profile: its kernels section leads with the three attention kernels; its
    // copies are pageable, so the offload section says there is no offload and why.
    void profileReport() {
        auto run = load_report_run(fixture("gpu-profile-125m.fulcrum"));
        QVERIFY2(run.ok(), run.ok() ? "" : run.error().message.c_str());
        const auto& analysis = run->analysis;
        QVERIFY(analysis.has_device_activity);
        const QString html = QString::fromStdString(html_report({*run}));
        check_kernels(html, 0, analysis.kernels);
        const TableRows top = table_of(html, 0, QStringLiteral("top_kernels"));
        QVERIFY(top.size() >= 3);
        QVERIFY(top[0][0].html.contains("attention_backward_dkdv_kernel&lt;"));
        QVERIFY(top[1][0].html.contains("attention_backward_dq_kernel&lt;"));
        QVERIFY(top[2][0].html.contains("attention_forward_kernel&lt;"));
        // Kernel names are escaped everywhere: no template argument opens a tag.
        QVERIFY(!html.contains("attention_forward_kernel<"));
        QVERIFY(analysis.offload.ranks.empty());
        const QString offload = section_of(html, 0, "offload");
        QVERIFY(offload.contains("No offload copies recorded."));
        QVERIFY(offload.contains(
            QString("%1 copies of pageable host memory").arg(analysis.offload.pageable_copies)));
        // A single run has no diff section.
        QVERIFY(section_of(html, 0, "diff").isEmpty());
    }

    // Fixed against WLB-LLM: both runs' offload and kernel sections with their own figures,
    // the comparison's table with both balancers, and the second run's diff against the first.
    void comparisonReport() {
        std::optional<DiffBase> first;
        LoadReportOptions keep;
        keep.keep_tally = &first;
        auto fixed = load_report_run(fixture("gpu-pp2cp2-offload-fixed.fulcrum"), keep);
        QVERIFY2(fixed.ok(), fixed.ok() ? "" : fixed.error().message.c_str());
        QVERIFY(first.has_value());
        LoadReportOptions against;
        against.diff_against = &*first;
        auto wlb = load_report_run(fixture("gpu-pp2cp2-offload-wlb.fulcrum"), against);
        QVERIFY2(wlb.ok(), wlb.ok() ? "" : wlb.error().message.c_str());
        QVERIFY(wlb->diff.has_value());
        // Tallied a rank at a time from the files, the diff is the one of the runs held whole.
        {
            const auto whole = [](const std::string& path) {
                auto reader = store::TraceReader::open(path);
                return std::move(*analysis::load_run_trace(*reader));
            };
            const analysis::RunTrace a = whole(fixture("gpu-pp2cp2-offload-fixed.fulcrum"));
            const analysis::RunTrace b = whole(fixture("gpu-pp2cp2-offload-wlb.fulcrum"));
            const analysis::RunDiff held =
                analysis::diff_runs({&a, std::nullopt}, {&b, std::nullopt});
            QVERIFY(!held.rows.empty());
            QCOMPARE(wlb->diff->steps_a, held.steps_a);
            QCOMPARE(wlb->diff->steps_b, held.steps_b);
            QCOMPARE(wlb->diff->rows.size(), held.rows.size());
            for (std::size_t i = 0; i < held.rows.size(); ++i) {
                QCOMPARE(wlb->diff->rows[i].name, held.rows[i].name);
                QCOMPARE(wlb->diff->rows[i].kind, held.rows[i].kind);
                QCOMPARE(wlb->diff->rows[i].count_a, held.rows[i].count_a);
                QCOMPARE(wlb->diff->rows[i].count_b, held.rows[i].count_b);
                QCOMPARE(wlb->diff->rows[i].total_ns_a, held.rows[i].total_ns_a);
                QCOMPARE(wlb->diff->rows[i].total_ns_b, held.rows[i].total_ns_b);
            }
        }

        const QString html = QString::fromStdString(html_report({*fixed, *wlb}));
        QVERIFY(html.contains("<section id=\"comparison\"><h2>Balancer comparison</h2>"));
        const qsizetype comparison = html.indexOf("data-table=\"comparison\"");
        const QString comparison_table =
            html.mid(comparison, html.indexOf("</table>", comparison) - comparison);
        QVERIFY(comparison_table.contains("<td>fixed</td>"));
        QVERIFY(comparison_table.contains("<td>wlb</td>"));
        int index = 0;
        for (const ReportRun* run : {&*fixed, &*wlb}) {
            QCOMPARE(run->analysis.offload.ranks.size(), std::size_t{4});
            check_offload(html, index, run->analysis.offload);
            check_kernels(html, index, run->analysis.kernels);
            ++index;
        }
        QVERIFY(section_of(html, 0, "diff").isEmpty());
        const QString diff = section_of(html, 1, "diff");
        QVERIFY(!diff.isEmpty());
        // Its rows are the diff's, the largest change first.
        const TableRows rows = table_of(html, 1, QStringLiteral("diff"));
        QVERIFY(!rows.empty());
        QCOMPARE(rows[0][0].html, escaped(wlb->diff->rows[0].name));
    }
};

QTEST_GUILESS_MAIN(ReportGpuFixturesTest)
#include "test_report_gpu_fixtures.moc"
