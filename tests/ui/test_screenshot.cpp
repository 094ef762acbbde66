// fulcrum-ui as a process: --screenshot renders each view of the real runs to a PNG of the
// requested size with content in it, without a display; bad input exits 2 with a message.
#include <QImage>
#include <QProcess>
#include <QProcessEnvironment>
#include <QSet>
#include <QTemporaryDir>
#include <QTest>

namespace {

const QString kRuns = QStringLiteral(FULCRUM_GUI_RUNS_DIR);

struct Outcome {
    int exit_code = -1;
    QString err;
};

// Runs fulcrum-ui with no display at all, as on a CI machine.
Outcome run_ui(const QStringList& args) {
    QProcess process;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove("DISPLAY");
    env.remove("WAYLAND_DISPLAY");
    env.remove("QT_QPA_PLATFORM");
    process.setProcessEnvironment(env);
    process.start(FULCRUM_UI_BINARY, args);
    if (!process.waitForFinished(120000)) {
        process.kill();
        process.waitForFinished();
        return {};
    }
    return {process.exitStatus() == QProcess::NormalExit ? process.exitCode() : -1,
            QString::fromLocal8Bit(process.readAllStandardError())};
}

int distinct_colours(const QImage& image) {
    QSet<QRgb> colours;
    for (int y = 0; y < image.height(); y += 3) {
        for (int x = 0; x < image.width(); x += 3) {
            colours.insert(image.pixel(x, y));
        }
    }
    return int(colours.size());
}

}  // namespace

class ScreenshotTest : public QObject {
    Q_OBJECT
private slots:
    void each_view_data() {
        QTest::addColumn<QString>("view");
        for (const char* view :
             {"timeline", "bubbles", "cp-load", "overlap", "heatmap", "compare", "kernels"}) {
            QTest::newRow(view) << QString(view);
        }
    }
    void each_view() {
        QFETCH(QString, view);
        QTemporaryDir dir;
        const QString png = dir.filePath(view + ".png");
        const Outcome outcome = run_ui({"--screenshot", png, "--view", view, "--size", "900x600",
                                        kRuns + "/fixed/run.fulcrum", kRuns + "/wlb"});
        QVERIFY2(outcome.exit_code == 0, qPrintable(outcome.err));
        QImage image(png);
        QVERIFY(!image.isNull());
        QCOMPARE(image.size(), QSize(900, 600));
        // Menus, tabs, the run selector and the view: far from one flat colour.
        QVERIFY2(distinct_colours(image) >= 8,
                 qPrintable(QString::number(distinct_colours(image))));
    }

    void default_size() {
        QTemporaryDir dir;
        const QString png = dir.filePath("default.png");
        const Outcome outcome = run_ui({"--screenshot", png, kRuns + "/fixed"});
        QVERIFY2(outcome.exit_code == 0, qPrintable(outcome.err));
        QCOMPARE(QImage(png).size(), QSize(1600, 1000));
    }

    void bad_input_exits_2_data() {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("mentions");
        QTest::newRow("missing run")
            << QStringList{"/nonexistent/run.fulcrum"} << "/nonexistent/run.fulcrum";
        QTest::newRow("unknown view")
            << QStringList{"--view", "flamegraph", kRuns + "/fixed"} << "flamegraph";
        QTest::newRow("bad size") << QStringList{"--size", "big", kRuns + "/fixed"} << "big";
        QTest::newRow("not a run")
            << QStringList{QString(FULCRUM_UI_BINARY)} << QString(FULCRUM_UI_BINARY);
    }
    void bad_input_exits_2() {
        QFETCH(QStringList, args);
        QFETCH(QString, mentions);
        QTemporaryDir dir;
        const QString png = dir.filePath("out.png");
        const Outcome outcome = run_ui(QStringList{"--screenshot", png} + args);
        QCOMPARE(outcome.exit_code, 2);
        QVERIFY2(outcome.err.contains(mentions), qPrintable(outcome.err));
        QVERIFY(!QFileInfo::exists(png));
    }

    void no_display_without_screenshot_exits_2() {
        const Outcome outcome = run_ui({kRuns + "/fixed"});
        QCOMPARE(outcome.exit_code, 2);
        QVERIFY2(outcome.err.contains("display"), qPrintable(outcome.err));
    }

    void help_and_version() {
        QCOMPARE(run_ui({"--version"}).exit_code, 0);
        QCOMPARE(run_ui({"--help"}).exit_code, 0);
    }
};

QTEST_GUILESS_MAIN(ScreenshotTest)
#include "test_screenshot.moc"
