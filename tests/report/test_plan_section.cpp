// The plan's section of the report (core/report/plan_section): on a PlanResult built by hand
// (tests/support/hand_plan.h), one point per candidate with memory figures, the infeasible ones
// grey, the ranked ones numbered, the budget line at the usable memory, the top k in order,
// the infeasible ones counted by reason, and the reason escaped.
#include <QRegularExpression>
#include <QTest>

#include "core/report/plan_section.h"
#include "tests/support/hand_plan.h"

using namespace fulcrum;

class PlanSectionTest : public QObject {
    Q_OBJECT

    static int count(const QString& text, const QString& pattern) {
        return static_cast<int>(text.count(QRegularExpression(pattern)));
    }

    static QString chart(const QString& html) {
        const auto begin = html.indexOf("data-chart=\"plan\"");
        return html.mid(begin, html.indexOf("</svg>", begin) - begin);
    }

    static QString table(const QString& html, const QString& name) {
        const auto begin = html.indexOf("data-table=\"" + name + "\"");
        return begin < 0 ? QString() : html.mid(begin, html.indexOf("</table>", begin) - begin);
    }

private slots:
    void pointsByStatus() {
        const auto p = test::hand_plan();
        std::string out;
        report::plan_section(p.request, p.result, out);
        const QString svg = chart(QString::fromStdString(out));
        // Six candidates, five with memory figures (the invalid layout has none).
        QCOMPARE(count(svg, "<circle class=\"mark\""), 5);
        QCOMPARE(count(svg, "data-status=\"ranked\""), 3);
        QCOMPARE(count(svg, "data-status=\"estimated\""), 1);
        QCOMPARE(count(svg, "data-status=\"infeasible\"[^>]*fill=\"#b5b5b5\""), 1);
        QCOMPARE(count(svg, "fill=\"#b5b5b5\""), 1);
        QCOMPARE(count(svg, "data-rank=\"[123]\""), 3);
        // The infeasible point's tooltip carries its reason, escaped.
        QVERIFY(svg.contains("activations &lt;b&gt;120 GiB&lt;/b&gt;"));
        QVERIFY(!svg.contains("<b>"));
        // The budget line at 90% of 80 GiB, left of the infeasible point (120 GiB).
        const QRegularExpression budget("class=\"budget\"[^>]*x1=\"([0-9.]+)\"");
        const QRegularExpression grey("cx=\"([0-9.]+)\"[^>]*fill=\"#b5b5b5\"");
        const auto b = budget.match(svg), g = grey.match(svg);
        QVERIFY(b.hasMatch() && g.hasMatch());
        QVERIFY(b.captured(1).toDouble() < g.captured(1).toDouble());
        QVERIFY(svg.contains("budget 72 GiB"));
    }

    void topTableInOrder() {
        const auto p = test::hand_plan();
        std::string out;
        report::plan_section(p.request, p.result, out);
        const QString html = QString::fromStdString(out);
        const QString top = table(html, "plan_top");
        QCOMPARE(count(top, "<tr><td"), 2);  // top k = 2 of three ranked
        const auto first = top.indexOf("2×2×2×1"), second = top.indexOf("4×2×1×1");
        QVERIFY(first > 0 && second > first);
        QVERIFY(top.contains("interleaved x2"));
        QVERIFY(!top.contains("1×2×2×2"));
        const QString reasons = table(html, "plan_infeasible");
        QCOMPARE(count(reasons, "<tr><td"), 2);
        QVERIFY(reasons.contains("tp &gt; heads"));
    }

    void nothingFits() {
        auto p = test::hand_plan();
        p.result.ranked.clear();
        for (auto& c : p.result.candidates) {
            c.status = plan::CandidateStatus::infeasible;
        }
        std::string out;
        report::plan_section(p.request, p.result, out);
        const QString html = QString::fromStdString(out);
        QVERIFY(table(html, "plan_top").isEmpty());
        QVERIFY(html.contains("No layout fits"));
        QCOMPARE(count(chart(html), "fill=\"#b5b5b5\""), 5);
    }

    void wholePage() {
        const auto p = test::hand_plan();
        const QString page = QString::fromStdString(report::plan_report(p.request, p.result));
        QVERIFY(page.startsWith("<!DOCTYPE html>"));
        QVERIFY(page.contains("Content-Security-Policy"));
        QVERIFY(page.contains("<section id=\"plan\">"));
        QVERIFY(page.trimmed().endsWith("</html>"));
    }
};

QTEST_GUILESS_MAIN(PlanSectionTest)
#include "test_plan_section.moc"
