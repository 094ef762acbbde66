// The main window on the two real captures: opening from every entry point, errors that leave
// the window usable, the recent list, drag and drop, cancel, and the heatmap → timeline link.
#include <QComboBox>
#include <QMimeData>
#include <QSettings>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTest>

#include "app/ui/main_window.h"
#include "core/import/importer.h"
#include "views/charts/compare_view.h"
#include "views/charts/heatmap_view.h"
#include "views/charts/memory_view.h"

using namespace fulcrum;
using namespace fulcrum::ui;

namespace {

const QString kRuns = QStringLiteral(FULCRUM_GUI_RUNS_DIR);
QString fixed_run() {
    return kRuns + "/fixed/run.fulcrum";
}
QString wlb_run() {
    return kRuns + "/wlb/run.fulcrum";
}
constexpr int kLoadMs = 60000;

}  // namespace

class MainWindowTest : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() {
        QVERIFY2(QFileInfo::exists(fixed_run()), "run the gui_capture_runs fixture first");
        // The recent list goes to a settings file of this test, not the user's.
        QSettings::setDefaultFormat(QSettings::IniFormat);
        QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, settings_dir_.path());
        QCoreApplication::setOrganizationName("fulcrum-tests");
        QCoreApplication::setApplicationName("test_ui_main_window");
    }
    void init() { QSettings().clear(); }

    void opens_both_runs() {
        MainWindow window;
        window.set_modal_dialogs(false);
        QSignalSpy opened(&window, &MainWindow::run_opened);
        QSignalSpy errors(&window, &MainWindow::error_reported);
        window.open_path(fixed_run());
        window.open_path(wlb_run());
        QTRY_COMPARE_WITH_TIMEOUT(window.runs().size(), 2, kLoadMs);
        QCOMPARE(opened.size(), 2);
        QCOMPARE(errors.size(), 0);

        QStringList tabs;
        for (int i = 0; i < window.tabs()->count(); ++i) {
            tabs << window.tabs()->tabText(i);
        }
        QCOMPARE(tabs, (QStringList{"Timeline", "Bubbles", "CP load", "Overlap", "Memory",
                                    "Heatmaps", "Compare", "Kernels", "Plan", "Hot switch"}));
        // Both are fulcrum-train runs on the CPU: the Memory tab has a bar per rank.
        QVERIFY2(window.findChild<views::MemoryView*>()->message().isEmpty(),
                 qPrintable(window.findChild<views::MemoryView*>()->message()));
        // Neither run switched layouts, so the Hot switch tab stays hidden.
        QVERIFY(!window.tabs()->isTabVisible(int(View::hot_switch)));
        QCOMPARE(window.run_selector()->count(), 2);
        // Opened in order; the first is Compare's reference, the newest is shown.
        QCOMPARE(window.runs()[0]->path, QFileInfo(fixed_run()).absoluteFilePath());
        QCOMPARE(window.runs()[1]->path, QFileInfo(wlb_run()).absoluteFilePath());
        QVERIFY(window.runs()[0]->analysis);
        QCOMPARE(window.compare_runs(), window.runs());
        QCOMPARE(window.reference_run(), window.runs()[0]);
        QCOMPARE(window.current_run(), window.runs()[1]);
        window.set_current_run(0);
        QCOMPARE(window.current_run(), window.runs()[0]);
        QVERIFY(window.windowTitle().contains("fixed"));
        QVERIFY(!window.loading());
    }

    // A run large enough to page (here every run: FULCRUM_PAGED_EVENTS=0) opens with its
    // timeline at once and its analyses after, read from the file a rank at a time (issue
    // 37): the run is replaced by one with them, equal to the analyses of the run held whole.
    void paged_run_is_analysed_after_it_opens() {
        QTemporaryDir dir;
        const QString copy = dir.filePath("run.fulcrum");
        QVERIFY(QFile::copy(fixed_run(), copy));  // opening a paged run may add summaries
        qputenv("FULCRUM_PAGED_EVENTS", "0");
        MainWindow window;
        window.set_modal_dialogs(false);
        QSignalSpy analysed(&window, &MainWindow::run_analysed);
        window.open_path(copy);
        QTRY_COMPARE_WITH_TIMEOUT(window.runs().size(), 1, kLoadMs);
        qunsetenv("FULCRUM_PAGED_EVENTS");
        QVERIFY(window.runs()[0]->paged());
        QTRY_COMPARE_WITH_TIMEOUT(analysed.size(), 1, kLoadMs);
        const views::RunPtr run = window.runs()[0];
        QVERIFY2(run->analysis != nullptr, qPrintable(run->analysis_error));
        QVERIFY(run->paged());
        QCOMPARE(window.current_run(), run);
        QCOMPARE(window.reference_run(), run);
        QVERIFY(!run->trace->workload.empty());  // read with the analyses
        auto held = views::open_run(fixed_run());
        QVERIFY(held.ok() && (*held)->analysis != nullptr);
        QCOMPARE(analysis::analysis_json(*run->analysis),
                 analysis::analysis_json(*(*held)->analysis));
        QTRY_VERIFY_WITH_TIMEOUT(!window.loading(), kLoadMs);
        // The Memory tab shows the paged run's bars now that it has analyses.
        QVERIFY2(window.findChild<views::MemoryView*>()->message().isEmpty(),
                 qPrintable(window.findChild<views::MemoryView*>()->message()));

        // Compare diffs it by name against a second run though it holds no events: the
        // analyses tallied them as the ranks were read.
        QCOMPARE(run->trace->event_count(), std::int64_t(0));
        window.open_path(wlb_run());
        QTRY_COMPARE_WITH_TIMEOUT(window.runs().size(), 2, kLoadMs);
        QTRY_VERIFY_WITH_TIMEOUT(!window.loading(), kLoadMs);
        auto wlb = views::open_run(wlb_run());
        QVERIFY(wlb.ok());
        const analysis::RunDiff counted = analysis::diff_runs({(*held)->trace.get(), std::nullopt},
                                                              {(*wlb)->trace.get(), std::nullopt});
        const analysis::RunDiff& shown = window.compare()->op_diff();
        QVERIFY(!counted.rows.empty());
        QCOMPARE(shown.rows.size(), counted.rows.size());
        QCOMPARE(shown.rows[0].name, counted.rows[0].name);
        QCOMPARE(shown.rows[0].delta_ns(), counted.rows[0].delta_ns());
    }

    // Run > Import Notes: an imported run's import log — here how Megatron-LM's grid and
    // passes were recovered from its nsys exports — and, for a captured run, that it has none.
    void import_notes() {
        QTemporaryDir dir;
        std::vector<std::string> inputs;
        for (int rank = 0; rank < 8; ++rank) {
            inputs.push_back(std::string(FULCRUM_SOURCE_DIR "/tests/data/megatron/rank") +
                             std::to_string(rank) + ".sqlite");
        }
        const QString imported = dir.filePath("megatron.fulcrum");
        QVERIFY(importer::import_files(inputs, imported.toStdString()).ok());
        MainWindow window;
        window.set_modal_dialogs(false);
        QCOMPARE(window.import_notes(), QString("Open a run first."));
        window.open_path(imported);
        QTRY_COMPARE_WITH_TIMEOUT(window.runs().size(), 1, kLoadMs);
        QTRY_VERIFY_WITH_TIMEOUT(!window.loading(), kLoadMs);
        const QString notes = window.import_notes();
        QVERIFY2(notes.contains("rank0.sqlite: note: structure: grid dp2 tp1 pp4 cp1, from "
                                "Megatron-LM's pipeline hand-over ranges"),
                 qPrintable(notes));
        QVERIFY2(notes.contains("32 passes of rank 7"), qPrintable(notes));
        window.open_path(fixed_run());
        QTRY_COMPARE_WITH_TIMEOUT(window.runs().size(), 2, kLoadMs);
        QTRY_VERIFY_WITH_TIMEOUT(!window.loading(), kLoadMs);
        window.set_current_run(1);
        QVERIFY2(window.import_notes().contains("was recorded by Fulcrum, not imported"),
                 qPrintable(window.import_notes()));
    }

    // File > Export Report writes what `fulcrum report` writes: one file, both runs compared.
    void exports_the_comparison_as_a_report() {
        MainWindow window;
        window.set_modal_dialogs(false);
        QSignalSpy errors(&window, &MainWindow::error_reported);
        QTemporaryDir dir;
        QVERIFY(!window.export_report(dir.filePath("none.html")));  // nothing open yet
        QCOMPARE(errors.size(), 1);
        window.open_path(fixed_run());
        window.open_path(wlb_run());
        QTRY_COMPARE_WITH_TIMEOUT(window.runs().size(), 2, kLoadMs);
        const QString path = dir.filePath("both.html");
        QVERIFY(window.export_report(path));
        QFile file(path);
        QVERIFY(file.open(QIODevice::ReadOnly));
        const QString html = QString::fromUtf8(file.readAll());
        QVERIFY(html.contains("data-chart=\"comparison\""));
        // One grid chart per run.
        QCOMPARE(html.count("data-chart=\"grid\""), 2);
        QVERIFY(html.contains("fixed") && html.contains("wlb"));
        QCOMPARE(errors.size(), 1);
    }

    // A PyTorch profiler trace opens through its importer, into a run beside it.
    void opens_a_kineto_trace_through_its_importer() {
        QTemporaryDir dir;
        const QString trace = dir.filePath("rank0.json");
        QVERIFY(QFile::copy(FULCRUM_SOURCE_DIR "/tests/import/kineto/data/rank0.json", trace));
        MainWindow window;
        window.set_modal_dialogs(false);
        QSignalSpy errors(&window, &MainWindow::error_reported);
        window.open_path(trace);
        QTRY_COMPARE_WITH_TIMEOUT(window.runs().size(), 1, kLoadMs);
        QCOMPARE(errors.size(), 0);
        const auto run = window.runs().front();
        QCOMPARE(run->trace->run.origin, RunOrigin::imported);
        QCOMPARE(run->path, trace + ".fulcrum");
        QVERIFY(QFileInfo::exists(trace + ".fulcrum"));
        QVERIFY(run->trace->event_count() > 0);
        QVERIFY(run->analysis);
    }

    void opens_a_capture_folder() {
        MainWindow window;
        window.set_modal_dialogs(false);
        window.open_path(kRuns + "/wlb");
        QTRY_COMPARE_WITH_TIMEOUT(window.runs().size(), 1, kLoadMs);
        QCOMPARE(window.runs()[0]->path, QFileInfo(wlb_run()).absoluteFilePath());
        QCOMPARE(window.runs()[0]->title, QString("wlb"));
    }

    void errors_name_the_file_and_leave_the_window_usable_data() {
        QTest::addColumn<QByteArray>("content");  // empty name: the path does not exist
        QTest::addColumn<bool>("create");
        QTest::newRow("missing") << QByteArray() << false;
        QTest::newRow("not SQLite") << QByteArray("this is not a database\n").repeated(200) << true;
        QTest::newRow("empty") << QByteArray() << true;
        QTest::newRow("folder without a run") << QByteArray() << false;
    }
    void errors_name_the_file_and_leave_the_window_usable() {
        QFETCH(QByteArray, content);
        QFETCH(bool, create);
        QTemporaryDir dir;
        QString path = dir.filePath("bad run.fulcrum");
        if (create) {
            QFile file(path);
            QVERIFY(file.open(QIODevice::WriteOnly));
            file.write(content);
        } else if (QString(QTest::currentDataTag()).startsWith("folder")) {
            path = dir.path();
        }
        MainWindow window;
        window.set_modal_dialogs(false);
        QSignalSpy errors(&window, &MainWindow::error_reported);
        QSignalSpy idle(&window, &MainWindow::loading_idle);
        window.open_path(path);
        QTRY_COMPARE_WITH_TIMEOUT(errors.size(), 1, kLoadMs);
        const QString message = errors[0][0].toString();
        QVERIFY2(message.contains(path), qPrintable(message));
        QVERIFY(window.runs().isEmpty());
        QTRY_VERIFY(idle.size() >= 1);
        // Still usable: a good run opens after the bad one.
        window.open_path(fixed_run());
        QTRY_COMPARE_WITH_TIMEOUT(window.runs().size(), 1, kLoadMs);
        QCOMPARE(errors.size(), 1);
    }

    void recent_runs_are_remembered_and_pruned() {
        QTemporaryDir dir;
        MainWindow window;
        window.set_modal_dialogs(false);
        // Twelve copies: the list keeps the ten newest, most recent first.
        QStringList copies;
        for (int i = 0; i < 12; ++i) {
            const QString copy = dir.filePath(QString("copy%1.fulcrum").arg(i));
            QVERIFY(QFile::copy(fixed_run(), copy));
            copies << copy;
            window.open_path(copy);
        }
        QTRY_COMPARE_WITH_TIMEOUT(window.runs().size(), 12, kLoadMs);
        QStringList recent = window.recent_runs();
        QCOMPARE(recent.size(), 10);
        QCOMPARE(recent.first(), copies[11]);
        QCOMPARE(recent.last(), copies[2]);
        // Deleted runs drop out, and the stored list follows.
        QVERIFY(QFile::remove(copies[11]));
        recent = window.recent_runs();
        QCOMPARE(recent.size(), 9);
        QVERIFY(!recent.contains(copies[11]));
        // A new window reads the same list.
        MainWindow other;
        QCOMPARE(other.recent_runs(), recent);
    }

    void drop_opens_runs() {
        MainWindow window;
        window.set_modal_dialogs(false);
        QMimeData mime;
        mime.setUrls({QUrl::fromLocalFile(fixed_run()), QUrl::fromLocalFile(kRuns + "/wlb")});
        QDragEnterEvent enter(QPoint(10, 10), Qt::CopyAction, &mime, Qt::LeftButton,
                              Qt::NoModifier);
        QCoreApplication::sendEvent(&window, &enter);
        QVERIFY(enter.isAccepted());
        QDropEvent drop(QPointF(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
        QCoreApplication::sendEvent(&window, &drop);
        QTRY_COMPARE_WITH_TIMEOUT(window.runs().size(), 2, kLoadMs);
        QCOMPARE(window.runs()[1]->title, QString("wlb"));
    }

    void cancel_adds_no_run() {
        MainWindow window;
        window.set_modal_dialogs(false);
        QSignalSpy cancelled(&window, &MainWindow::load_cancelled);
        QSignalSpy opened(&window, &MainWindow::run_opened);
        QSignalSpy idle(&window, &MainWindow::loading_idle);
        window.open_path(fixed_run());
        window.open_path(wlb_run());  // queued: dropped by the cancel
        QVERIFY(window.loading());
        window.cancel_loading();
        QTRY_COMPARE_WITH_TIMEOUT(idle.size(), 1, kLoadMs);
        QCOMPARE(cancelled.size(), 1);
        QCOMPARE(cancelled[0][0].toString(), fixed_run());
        QCOMPARE(opened.size(), 0);
        QVERIFY(window.runs().isEmpty());
        QCOMPARE(window.run_selector()->count(), 0);
        // Cancelling while idle does nothing; loading afterwards works.
        window.cancel_loading();
        window.open_path(wlb_run());
        QTRY_COMPARE_WITH_TIMEOUT(window.runs().size(), 1, kLoadMs);
        QCOMPARE(cancelled.size(), 1);
    }

    void heatmap_click_shows_the_place_in_the_timeline() {
        MainWindow window;
        window.set_modal_dialogs(false);
        window.open_path(fixed_run());
        QTRY_COMPARE_WITH_TIMEOUT(window.runs().size(), 1, kLoadMs);
        window.show_view(View::heatmap);
        QCOMPARE(window.current_view(), View::heatmap);
        emit window.heatmaps()->place_activated(views::Place{1, 0, -1});
        QCOMPARE(window.current_view(), View::timeline);
    }

    void view_keys_match_tabs() {
        QCOMPARE(view_keys().size(), 10);
        QCOMPARE(view_from_key("memory"), std::optional<View>(View::memory));
        QCOMPARE(view_from_key("hot-switch"), std::optional<View>(View::hot_switch));
        QCOMPARE(view_from_key("plan"), std::optional<View>(View::plan));
        QCOMPARE(view_from_key("kernels"), std::optional<View>(View::kernels));
        QCOMPARE(view_from_key("cp-load"), std::optional<View>(View::cp_load));
        QVERIFY(!view_from_key("flamegraph"));
    }

private:
    QTemporaryDir settings_dir_;
};

QTEST_MAIN(MainWindowTest)
#include "test_main_window.moc"
