// Opening a report in headless Chromium (Debian's chromium package, a required test
// dependency: scripts/debian-packages.txt) and reading back what its scripts left in the DOM.
#pragma once

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QRegularExpression>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>

namespace fulcrum::testing {

inline QString chromium_path() {
    for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
        const QString path = QStandardPaths::findExecutable(name);
        if (!path.isEmpty()) {
            return path;
        }
    }
    return {};
}

// Runs Chromium headless on `html_file` with `mode` ("--dump-dom" or "--screenshot=PNG");
// returns its standard output (the DOM after the scripts ran, for --dump-dom).
inline QByteArray run_chromium(const QString& html_file, const QStringList& mode,
                               QString* log = nullptr, const QString& fragment = {}) {
    QTemporaryDir profile;
    QProcess process;
    // No sandbox: the tests run as root in containers, where Chromium's sandbox cannot start.
    QStringList arguments = {"--headless=new",
                             "--disable-gpu",
                             "--no-sandbox",
                             "--no-first-run",
                             "--disable-extensions",
                             "--user-data-dir=" + profile.path(),
                             "--virtual-time-budget=3000"};
    arguments += mode;
    QUrl url = QUrl::fromLocalFile(QFileInfo(html_file).absoluteFilePath());
    if (!fragment.isEmpty()) {
        url.setFragment(fragment);
    }
    arguments << url.toString();
    process.start(chromium_path(), arguments);
    if (!process.waitForFinished(180'000)) {
        process.kill();
        process.waitForFinished();
    }
    if (log) {
        *log = QString::fromUtf8(process.readAllStandardError());
    }
    return process.readAllStandardOutput();
}

// The marks (class "mark …") inside the chart <svg data-chart=NAME data-run=RUN>; -1 when the
// chart is not in the DOM.
inline int chart_marks(const QString& dom, const QString& chart, int run) {
    const QString open = "data-chart=\"" + chart + "\" data-run=\"" + QString::number(run) + "\"";
    const qsizetype start = dom.indexOf(open);
    if (start < 0) {
        return -1;
    }
    const qsizetype end = dom.indexOf("</svg>", start);
    const QString body = dom.mid(start, end - start);
    return static_cast<int>(body.count(QRegularExpression("class=\"mark[\" ]")));
}

}  // namespace fulcrum::testing

// Fails the test (not skips it) when Chromium is missing: it is a required package.
#define FULCRUM_REQUIRE_CHROMIUM()                    \
    QVERIFY2(                                         \
        !fulcrum::testing::chromium_path().isEmpty(), \
        "chromium not found: install Debian's chromium package (scripts/debian-packages.txt)")
