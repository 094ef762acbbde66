// The report of a simulated hot-switched run (HotSPa's buckets under their own layouts,
// core/sim/hot_switch_play.h) has a Hot switching section: a bar and a table row per bucket
// with the simulation's tokens, then 'others' (switching) and the rest, and the switch-cost
// matrix with each switch the simulation made (mean time and bytes per switch); a static run's
// report has no such section.
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QTest>
#include <cmath>

#include "core/report/html_report.h"
#include "core/sim/simulator.h"
#include "core/util/text_table.h"
#include "tests/support/hot_switch_run.h"

using namespace fulcrum;

namespace {

// The part of `html` from the section's heading to the next heading.
QString section_of(const std::string& html, const std::string& id) {
    const QString page = QString::fromStdString(html);
    const qsizetype start = page.indexOf(QString::fromStdString("id=\"" + id + "\""));
    if (start < 0) {
        return {};
    }
    const qsizetype end = page.indexOf("<h3 ", start);
    return page.mid(start, end < 0 ? -1 : end - start);
}

// The cells of table `name`'s rows, as text without tags.
QList<QStringList> table_rows(const QString& html, const QString& name) {
    const qsizetype start = html.indexOf("data-table=\"" + name + "\"");
    const qsizetype end = html.indexOf("</table>", start);
    const QString table = html.mid(start, end - start);
    QList<QStringList> rows;
    static const QRegularExpression row("<tr>(.*?)</tr>");
    static const QRegularExpression cell("<td[^>]*>(.*?)</td>");
    static const QRegularExpression tag("<[^>]*>");
    for (auto r = row.globalMatch(table); r.hasNext();) {
        QStringList cells;
        const QString content = r.next().captured(1);
        for (auto c = cell.globalMatch(content); c.hasNext();) {
            cells << c.next().captured(1).replace(tag, " ").simplified();
        }
        if (!cells.isEmpty()) {
            rows << cells;
        }
    }
    return rows;
}

}  // namespace

class HotSwitchSectionTest : public QObject {
    Q_OBJECT

private slots:
    void reportShowsBreakdownAndMatrix() {
        QTemporaryDir dir;
        sim::SimulationConfig config = test::hot_switch_workload();
        auto spec = parallel::parse_hot_switch_spec(test::kHotSwitchSpec, {.world = 4});
        QVERIFY(spec.ok());
        config.hot_switch = *spec;
        const std::string path = dir.filePath("hot.fulcrum").toStdString();
        auto played = test::simulate_run(config, path);
        QVERIFY2(played.ok(), played.ok() ? "" : played.error().message.c_str());
        auto run = report::load_report_run(path);
        QVERIFY2(run.ok(), run.ok() ? "" : run.error().message.c_str());
        const std::string html = report::html_report({*run});
        const QString section = section_of(html, "run-0-hot-switch");
        QVERIFY2(!section.isEmpty(), "no hot-switch section");
        QVERIFY(section.contains("0-1024:dp4;1024-2048:dp2,tp2;2048-:tp4"));
        QVERIFY(section.contains("data-chart=\"hot_switch\""));

        const QList<QStringList> buckets = table_rows(section, "hot_switch_buckets");
        QCOMPARE(buckets.size(), 5);
        const QStringList bounds = {"0-1024", "1024-2048", "2048-"};
        const QStringList layouts = {"dp4", "dp2,tp2", "tp4"};
        for (int b = 0; b < 3; ++b) {
            QCOMPARE(buckets[b][0], bounds[b]);
            QCOMPARE(buckets[b][1], layouts[b]);
            QCOMPARE(buckets[b][3].toLongLong(), played->buckets[std::size_t(b)].tokens);
        }
        QCOMPARE(buckets[3][0], QString("others (switching)"));
        double switching = 0;
        for (const sim::SimulatedSwitch& s : played->switches) {
            switching += s.ns;
        }
        QCOMPARE(buckets[3][5], QString::fromStdString(format_duration(std::llround(switching))));
        QVERIFY(buckets[4][0].startsWith("rest"));

        // The matrix: a row per layout; each switch made is its cell, the others "—".
        const QList<QStringList> matrix = table_rows(section, "hot_switch_matrix");
        QCOMPARE(matrix.size(), 3);
        int cells = 0;
        for (int i = 0; i < 3; ++i) {
            QCOMPARE(matrix[i][0], layouts[i]);
            QCOMPARE(matrix[i].size(), 4);
            for (int j = 0; j < 3; ++j) {
                const QString& cell = matrix[i][j + 1];
                const sim::SimulatedSwitch* made = nullptr;
                for (const sim::SimulatedSwitch& s : played->switches) {
                    if (QString::fromStdString(parallel::layout_string(s.from)) == layouts[i] &&
                        QString::fromStdString(parallel::layout_string(s.to)) == layouts[j]) {
                        made = &s;
                    }
                }
                if (made == nullptr) {
                    QCOMPARE(cell, i == j ? QString() : QString("—"));
                    continue;
                }
                ++cells;
                const QString expected = QString::fromStdString(
                    format_duration(std::llround(made->ns / made->count)) + " / " +
                    format_bytes(std::llround(made->bytes / made->count)));
                QVERIFY2(cell.startsWith(expected), qPrintable(cell + " vs " + expected));
                QVERIFY(cell.contains(QString("%1 switches").arg(made->count)));
            }
        }
        QCOMPARE(cells, int(played->switches.size()));

        // A static run's report has no such section.
        config.hot_switch.reset();
        const std::string plain = dir.filePath("static.fulcrum").toStdString();
        QVERIFY(test::simulate_run(config, plain).ok());
        auto static_run = report::load_report_run(plain);
        QVERIFY(static_run.ok());
        QVERIFY(report::html_report({*static_run}).find("hot-switch") == std::string::npos);
    }
};

QTEST_MAIN(HotSwitchSectionTest)
#include "test_hot_switch_section.moc"
