#include "app/ui/main_window.h"

#include <QAction>
#include <QClipboard>
#include <QComboBox>
#include <QDir>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QGuiApplication>
#include <QKeySequence>
#include <QLabel>
#include <QLayout>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QStatusBar>
#include <QTabWidget>
#include <QToolBar>

#include "app/ui/plan_dialog.h"
#include "app/ui/rerun_dialog.h"
#include "core/report/html_report.h"
#include "core/store/trace_reader.h"
#include "core/util/output_file.h"
#include "views/charts/bubble_view.h"
#include "views/charts/compare_view.h"
#include "views/charts/cp_load_view.h"
#include "views/charts/heatmap_view.h"
#include "views/charts/hot_switch_view.h"
#include "views/charts/kernels_view.h"
#include "views/charts/memory_view.h"
#include "views/charts/overlap_view.h"
#include "views/charts/plan_view.h"
#include "views/timeline/timeline_view.h"

namespace fulcrum::ui {
namespace {

constexpr int kRecentRuns = 10;
const char* const kRecentKey = "recent_runs";

QStringList existing(const QStringList& paths) {
    QStringList kept;
    for (const QString& path : paths) {
        if (QFileInfo::exists(path) && !kept.contains(path)) {
            kept << path;
        }
    }
    return kept;
}

}  // namespace

QStringList view_keys() {
    return {"timeline", "bubbles", "cp-load", "overlap", "memory",
            "heatmap",  "compare", "kernels", "plan",    "hot-switch"};
}

std::optional<View> view_from_key(const QString& key) {
    const qsizetype at = view_keys().indexOf(key);
    if (at < 0) {
        return std::nullopt;
    }
    return View(at);
}

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
    setWindowTitle(tr("Fulcrum"));
    setAcceptDrops(true);

    tabs_ = new QTabWidget(this);
    timeline_ = new views::TimelineView(tabs_);
    bubbles_ = new views::BubbleView(tabs_);
    cp_load_ = new views::CpLoadView(tabs_);
    overlap_ = new views::OverlapView(tabs_);
    memory_ = new views::MemoryView(tabs_);
    heatmaps_ = new views::HeatmapView(tabs_);
    compare_ = new views::CompareView(tabs_);
    kernels_ = new views::KernelsView(tabs_);
    plan_view_ = new views::PlanView(tabs_);
    hot_switch_ = new views::HotSwitchView(tabs_);
    // The order is View's.
    tabs_->addTab(timeline_, tr("Timeline"));
    tabs_->addTab(bubbles_, tr("Bubbles"));
    tabs_->addTab(cp_load_, tr("CP load"));
    tabs_->addTab(overlap_, tr("Overlap"));
    tabs_->addTab(memory_, tr("Memory"));
    tabs_->addTab(heatmaps_, tr("Heatmaps"));
    tabs_->addTab(compare_, tr("Compare"));
    tabs_->addTab(kernels_, tr("Kernels"));
    tabs_->addTab(plan_view_, tr("Plan"));
    tabs_->addTab(hot_switch_, tr("Hot switch"));
    // Only a hot-switched run has something to show there (refresh_views).
    tabs_->setTabVisible(int(View::hot_switch), false);
    connect(plan_view_, &views::PlanView::rerun_requested, this,
            [this](const plan::Candidate& candidate) { rerun_candidate(candidate); });
    setCentralWidget(tabs_);

    run_selector_ = new QComboBox(this);
    run_selector_->setMinimumContentsLength(24);
    run_selector_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    run_selector_->setToolTip(
        tr("The run the Timeline, Bubbles, CP load, Overlap and Heatmaps "
           "tabs show"));
    auto* toolbar = addToolBar(tr("Run"));
    toolbar->setObjectName("run_toolbar");
    toolbar->setMovable(false);
    toolbar->addWidget(new QLabel(tr(" Run: "), toolbar));
    toolbar->addWidget(run_selector_);
    connect(run_selector_, &QComboBox::currentIndexChanged, this, [this] { refresh_views(); });

    connect(heatmaps_, &views::HeatmapView::place_activated, this, &MainWindow::show_place);
    connect(timeline_, &views::TimelineView::status_message, this,
            [this](const QString& text) { statusBar()->showMessage(text); });

    connect(&loader_, &RunLoader::opened, this, &MainWindow::add_run);
    connect(&loader_, &RunLoader::analysed, this, &MainWindow::replace_run);
    connect(&loader_, &RunLoader::failed, this,
            [this](const QString& path, const QString& message) {
                // Messages from core usually name the file already; the path leads either way.
                report_error(tr("Could not open '%1': %2").arg(path, message));
            });
    connect(&loader_, &RunLoader::cancelled, this, [this](const QString& path) {
        statusBar()->showMessage(tr("Cancelled opening %1").arg(path), 5000);
        emit load_cancelled(path);
    });
    connect(&loader_, &RunLoader::progress, this,
            [this](const QString& path, const QString& stage, double fraction) {
                if (!loader_.busy()) {
                    return;
                }
                load_label_->setText(tr("%1: %2").arg(QFileInfo(path).fileName(), stage));
                load_bar_->setValue(int(fraction * 100));
                load_label_->show();
                load_bar_->show();
                load_cancel_->show();
            });
    connect(&loader_, &RunLoader::idle, this, [this] {
        load_label_->hide();
        load_bar_->hide();
        load_cancel_->hide();
        emit loading_idle();
    });

    build_menus();
    build_status_bar();
    refresh_views();
    resize(1400, 900);
}

MainWindow::~MainWindow() = default;

void MainWindow::build_menus() {
    QMenu* file = menuBar()->addMenu(tr("&File"));
    QAction* open = file->addAction(tr("&Open…"), this, &MainWindow::show_open_dialog);
    open->setShortcut(QKeySequence::Open);
    recent_menu_ = file->addMenu(tr("Open &Recent"));
    connect(recent_menu_, &QMenu::aboutToShow, this, &MainWindow::rebuild_recent_menu);
    rebuild_recent_menu();
    file->addSeparator();
    QAction* export_action =
        file->addAction(tr("&Export Report…"), this, &MainWindow::show_export_dialog);
    export_action->setShortcut(tr("Ctrl+E"));
    file->addSeparator();
    file->addAction(tr("Open &Plan…"), this, [this] {
        const QString path = QFileDialog::getOpenFileName(
            this, tr("Open a plan (fulcrum plan --json)"), {}, tr("Plans (*.json);;All files (*)"));
        if (!path.isEmpty())
            open_plan(path);
    });
    QAction* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
    quit->setShortcut(QKeySequence::Quit);

    QMenu* run = menuBar()->addMenu(tr("&Run"));
    rerun_action_ =
        run->addAction(tr("&Re-run with Another Balancer…"), this, &MainWindow::show_rerun_dialog);
    rerun_action_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));
    QAction* plan = run->addAction(tr("&Plan Layouts…"), this, [this] {
        PlanDialog* dialog = plan_dialog();
        dialog->show();
        dialog->raise();
        dialog->activateWindow();
    });
    plan->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_P));
    QAction* next = run->addAction(tr("&Next Run"), this, [this] {
        if (run_selector_->count() > 0) {
            set_current_run((run_selector_->currentIndex() + 1) % run_selector_->count());
        }
    });
    next->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_BracketRight));
    QAction* previous = run->addAction(tr("&Previous Run"), this, [this] {
        if (const int n = run_selector_->count(); n > 0) {
            set_current_run((run_selector_->currentIndex() + n - 1) % n);
        }
    });
    previous->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_BracketLeft));
    run->addAction(tr("&Import Notes…"), this, [this] {
        if (modal_dialogs_) {
            QMessageBox box(QMessageBox::Information, tr("Import notes"), import_notes(),
                            QMessageBox::Ok, this);
            box.setTextInteractionFlags(Qt::TextSelectableByMouse);
            box.exec();
        }
    });
    QAction* cancel = run->addAction(tr("&Cancel Loading"), this, &MainWindow::cancel_loading);
    cancel->setShortcut(QKeySequence(Qt::Key_Escape));

    QMenu* view = menuBar()->addMenu(tr("&View"));
    for (int i = 0; i < tabs_->count(); ++i) {
        // A hidden tab (Hot switch, for a run without it) stays hidden.
        QAction* action = view->addAction(tabs_->tabText(i), this, [this, i] {
            if (tabs_->isTabVisible(i)) {
                tabs_->setCurrentIndex(i);
            }
        });
        // Ctrl+1 … Ctrl+9, then Ctrl+0 for the tenth.
        if (i < 10) {
            action->setShortcut(
                QKeySequence(Qt::CTRL | Qt::Key(i < 9 ? Qt::Key_1 + i : Qt::Key_0)));
        }
    }
}

void MainWindow::build_status_bar() {
    load_label_ = new QLabel(this);
    load_bar_ = new QProgressBar(this);
    load_bar_->setRange(0, 100);
    load_bar_->setMaximumWidth(200);
    load_cancel_ = new QPushButton(tr("Cancel"), this);
    load_cancel_->setToolTip(tr("Stop loading (Esc)"));
    connect(load_cancel_, &QPushButton::clicked, this, &MainWindow::cancel_loading);
    statusBar()->addPermanentWidget(load_label_);
    statusBar()->addPermanentWidget(load_bar_);
    statusBar()->addPermanentWidget(load_cancel_);
    load_label_->hide();
    load_bar_->hide();
    load_cancel_->hide();
    statusBar()->showMessage(
        tr("Open a run: File ▸ Open, or drop a run file or capture folder here"));
}

void MainWindow::open_path(const QString& path) {
    open(OpenRequest{path, nullptr, false});
}

void MainWindow::open(const OpenRequest& request) {
    // Importers of other formats plug in here, chosen by sniffing the file's first bytes;
    // today every path is a Fulcrum run or a capture folder.
    load_bar_->setValue(0);
    loader_.open(request);
}

void MainWindow::cancel_loading() {
    loader_.cancel();
}

bool MainWindow::loading() const {
    return loader_.busy();
}

views::RunPtr MainWindow::current_run() const {
    const int at = run_selector_->currentIndex();
    return at >= 0 && at < runs_.size() ? runs_[at] : nullptr;
}

void MainWindow::set_current_run(int index) {
    run_selector_->setCurrentIndex(index);
}

void MainWindow::show_view(View view) {
    tabs_->setCurrentIndex(int(view));
}

View MainWindow::current_view() const {
    return View(tabs_->currentIndex());
}

void MainWindow::add_run(const views::RunPtr& run, const OpenRequest& request) {
    runs_.push_back(run);
    if (!reference_ || request.reference || request.as_reference) {
        reference_ = request.reference ? request.reference : run;
    }
    remember_recent(run->path);
    QString label = run->title;
    if (run->trace) {
        const auto& config = run->trace->config;
        const QString balancer = QString::fromStdString(config.balancer);
        if (!balancer.isEmpty() && !label.contains(balancer)) {
            label += QString(" (%1)").arg(balancer);
        }
    }
    run_selector_->addItem(label, run->path);
    run_selector_->setItemData(run_selector_->count() - 1, run->path, Qt::ToolTipRole);
    // A new run shows in the single-run views; a re-run is read against its original in Compare.
    set_current_run(run_selector_->count() - 1);
    refresh_compare();
    if (request.show_compare) {
        show_view(View::compare);
    }
    if (!run->notice.isEmpty()) {
        statusBar()->showMessage(tr("%1: %2").arg(run->title, run->notice));
    } else if (!run->analysis_error.isEmpty()) {
        statusBar()->showMessage(
            tr("%1: analyses unavailable: %2").arg(run->title, run->analysis_error));
    } else {
        statusBar()->showMessage(tr("Opened %1").arg(run->path), 5000);
    }
    emit run_opened(run);
}

void MainWindow::replace_run(const views::RunPtr& run, const views::RunPtr& analysed) {
    const int at = runs_.indexOf(run);
    if (at < 0) {
        return;  // closed meanwhile
    }
    runs_[at] = analysed;
    if (reference_ == run) {
        reference_ = analysed;
    }
    refresh_compare();
    if (current_run() == analysed) {
        // The timeline keeps the view the user has; the others show the analyses.
        refresh_views(false);
    }
    statusBar()->showMessage(
        analysed->analysis != nullptr
            ? tr("Analysed %1").arg(analysed->path)
            : tr("%1: analyses unavailable: %2").arg(analysed->title, analysed->analysis_error),
        10000);
    emit run_analysed(analysed);
}

void MainWindow::refresh_views(bool timeline) {
    const views::RunPtr run = current_run();
    if (timeline) {
        timeline_->set_run(run);
    }
    bubbles_->set_run(run);
    cp_load_->set_run(run);
    overlap_->set_run(run);
    memory_->set_run(run);
    heatmaps_->set_run(run);
    kernels_->set_run(run);
    hot_switch_->set_run(run);
    const bool switched = views::HotSwitchView::applies(run);
    if (!switched && current_view() == View::hot_switch) {
        show_view(View::timeline);
    }
    tabs_->setTabVisible(int(View::hot_switch), switched);
    rerun_action_->setEnabled(run != nullptr);
    setWindowTitle(run ? tr("%1 — Fulcrum").arg(run->title) : tr("Fulcrum"));
}

void MainWindow::refresh_compare() {
    QVector<views::RunPtr> ordered;
    if (reference_) {
        ordered.push_back(reference_);
    }
    for (const auto& run : runs_) {
        if (run != reference_) {
            ordered.push_back(run);
        }
    }
    compare_runs_ = ordered;
    compare_->set_runs(ordered);
}

void MainWindow::report_error(const QString& message) {
    statusBar()->showMessage(message, 10000);
    emit error_reported(message);
    if (modal_dialogs_) {
        // open(), not exec(): the window keeps painting and loading behind the box.
        auto* box =
            new QMessageBox(QMessageBox::Warning, tr("Fulcrum"), message, QMessageBox::Ok, this);
        box->setAttribute(Qt::WA_DeleteOnClose);
        box->open();
    }
}

QStringList MainWindow::recent_runs() const {
    return existing(QSettings().value(kRecentKey).toStringList());
}

void MainWindow::remember_recent(const QString& path) {
    QStringList recent = recent_runs();
    const QString absolute = QFileInfo(path).absoluteFilePath();
    recent.removeAll(absolute);
    recent.prepend(absolute);
    while (recent.size() > kRecentRuns) {
        recent.removeLast();
    }
    QSettings().setValue(kRecentKey, recent);
    rebuild_recent_menu();
}

void MainWindow::rebuild_recent_menu() {
    // Runs deleted since they were opened drop out of the list here.
    const QStringList recent = recent_runs();
    QSettings().setValue(kRecentKey, recent);
    recent_menu_->clear();
    for (int i = 0; i < recent.size(); ++i) {
        const QString& path = recent[i];
        const QFileInfo info(path);
        const QString name = info.fileName() == QLatin1String("run.fulcrum")
                                 ? info.dir().dirName() + "/" + info.fileName()
                                 : info.fileName();
        QAction* action = recent_menu_->addAction(QString("&%1 %2").arg((i + 1) % 10).arg(name),
                                                  this, [this, path] { open_path(path); });
        action->setToolTip(path);
        action->setStatusTip(path);
    }
    if (recent.isEmpty()) {
        recent_menu_->addAction(tr("(none)"))->setEnabled(false);
    } else {
        recent_menu_->addSeparator();
        recent_menu_->addAction(tr("Clear List"), this, [this] {
            QSettings().remove(kRecentKey);
            rebuild_recent_menu();
        });
    }
}

void MainWindow::show_open_dialog() {
    // A non-native dialog lists folders and files together, so a capture folder can be
    // chosen as it is.
    auto* dialog = new QFileDialog(
        this, tr("Open Run"), QString(),
        tr("Runs and traces (*.fulcrum *.sqlite *.json *.json.gz);;Fulcrum runs (*.fulcrum);;"
           "Nsight Systems exports (*.sqlite);;"
           "PyTorch profiler traces (*.json *.json.gz);;All files (*)"));
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    dialog->setFileMode(QFileDialog::ExistingFiles);
    dialog->setOption(QFileDialog::DontUseNativeDialog);
    connect(dialog, &QFileDialog::filesSelected, this, [this](const QStringList& files) {
        for (const QString& file : files) {
            open_path(file);
        }
    });
    // Choosing a folder and pressing Open would enter it; "Open folder" opens its run.
    auto* open_folder = new QPushButton(tr("Open Capture &Folder"), dialog);
    connect(open_folder, &QPushButton::clicked, dialog, [this, dialog] {
        open_path(dialog->directory().absolutePath());
        dialog->close();
    });
    if (auto* layout = dialog->layout()) {
        layout->addWidget(open_folder);
    }
    dialog->open();
}

RerunDialog* MainWindow::rerun_dialog() {
    const views::RunPtr run = current_run();
    if (!run) {
        return nullptr;
    }
    if (rerun_dialog_ && rerun_dialog_->run() == run) {
        return rerun_dialog_;
    }
    if (rerun_dialog_ && rerun_dialog_->state() == RerunDialog::State::running) {
        return rerun_dialog_;  // one re-run at a time; it keeps its own run
    }
    delete rerun_dialog_;
    rerun_dialog_ = new RerunDialog(run, this, tools_dir_);
    connect(rerun_dialog_, &RerunDialog::run_ready, this,
            [this](const QString& path, const views::RunPtr& original) {
                open(OpenRequest{path, original, true});
            });
    connect(rerun_dialog_, &RerunDialog::baseline_ready, this, [this](const QString& path) {
        open(OpenRequest{path, nullptr, false, true});
    });
    return rerun_dialog_;
}

PlanDialog* MainWindow::plan_dialog() {
    const views::RunPtr run = current_run();
    if (plan_dialog_ && (plan_dialog_->running() || plan_dialog_->run() == run)) {
        return plan_dialog_;  // one search at a time; a running one keeps its run
    }
    delete plan_dialog_;
    plan_dialog_ = new PlanDialog(run, this);
    connect(plan_dialog_, &PlanDialog::plan_ready, this, [this](const views::PlanPtr& plan) {
        plan_view_->set_plan(plan);
        show_view(View::plan);
    });
    return plan_dialog_;
}

void MainWindow::open_plan(const QString& path) {
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly)) {
        report_error(tr("Could not open '%1': %2").arg(path, file.errorString()));
        return;
    }
    auto plan = views::read_plan_json(file.readAll());
    if (!plan) {
        report_error(tr("Could not read the plan '%1': %2")
                         .arg(path, QString::fromStdString(plan.error().message)));
        return;
    }
    plan_view_->set_plan(std::make_shared<views::PlanData>(std::move(*plan)));
    show_view(View::plan);
}

RerunDialog* MainWindow::rerun_candidate(const plan::Candidate& candidate, QString* why_not) {
    const views::RunPtr run = current_run();
    RerunDialog* dialog = rerun_dialog();
    QString why = tr("no run is open to take the model, documents and command from");
    if (dialog != nullptr && run && run->analysis) {
        const RunConfig& config = run->analysis->config;
        const CandidateRerun rerun =
            candidate_rerun(candidate, dialog->plan(), config.layout.grid.world());
        if (rerun.why_not.isEmpty()) {
            dialog->set_simulate(false);
            dialog->set_choice(rerun.choice);
            dialog->show();
            dialog->raise();
            return dialog;
        }
        why = rerun.why_not;
    }
    why = tr("This layout cannot run here: %1.").arg(why);
    if (why_not != nullptr)
        *why_not = why;
    statusBar()->showMessage(why, 10000);
    if (modal_dialogs_) {
        auto* box = new QMessageBox(QMessageBox::Information, tr("Re-run this layout"),
                                    why + tr("\n\nIts fulcrum-train command:\n%1")
                                              .arg(QString::fromStdString(candidate.train_command)),
                                    QMessageBox::Close, this);
        QPushButton* copy = box->addButton(tr("Copy Command"), QMessageBox::ActionRole);
        const QString command = QString::fromStdString(candidate.train_command);
        connect(copy, &QPushButton::clicked, this,
                [command] { QGuiApplication::clipboard()->setText(command); });
        box->setAttribute(Qt::WA_DeleteOnClose);
        box->open();
    }
    return nullptr;
}

void MainWindow::show_export_dialog() {
    const QVector<views::RunPtr> runs = compare_runs_.size() > 1 ? compare_runs_
                                        : current_run() ? QVector<views::RunPtr>{current_run()}
                                                        : QVector<views::RunPtr>{};
    if (runs.isEmpty()) {
        report_error(tr("Open a run first: there is nothing to report."));
        return;
    }
    const QFileInfo first(runs.front()->path);
    const QString suggested = runs.size() > 1 ? first.dir().filePath("report.html")
                                              : first.dir().filePath(runs.front()->title + ".html");
    const QString path = QFileDialog::getSaveFileName(this, tr("Export Report"), suggested,
                                                      tr("HTML report (*.html)"));
    if (!path.isEmpty() && export_report(path)) {
        statusBar()->showMessage(tr("Wrote the report %1").arg(path), 10000);
    }
}

namespace {

// A run's import log, read from its file: it is small, and not kept in memory. Empty when the
// file cannot be read.
std::vector<ImportLogEntry> import_log_of(const QString& path) {
    if (auto reader = store::TraceReader::open(path.toStdString())) {
        if (auto log = reader->import_log()) {
            return std::move(*log);
        }
    }
    return {};
}

}  // namespace

bool MainWindow::export_report(const QString& path) {
    const QVector<views::RunPtr> runs = compare_runs_.size() > 1 ? compare_runs_
                                        : current_run() ? QVector<views::RunPtr>{current_run()}
                                                        : QVector<views::RunPtr>{};
    std::vector<report::ReportRun> inputs;
    for (const views::RunPtr& run : runs) {
        if (!run->analysis) {
            report_error(tr("Cannot report %1: its analysis failed (%2)")
                             .arg(run->path, run->analysis_error));
            return false;
        }
        inputs.push_back(report::make_report_run(run->path.toStdString(), *run->trace,
                                                 *run->analysis, import_log_of(run->path)));
        const analysis::RunAnalysis& first = *runs.front()->analysis;
        if (inputs.size() > 1 && first.names && run->analysis->names) {
            // As `fulcrum report` does: each run against the first, by name (the analyses'
            // tallies; a paged run holds no events to count).
            inputs.back().diff = analysis::diff_tallies({&*first.names, runs.front()->trace.get()},
                                                        {&*run->analysis->names, run->trace.get()});
        }
    }
    if (inputs.empty()) {
        report_error(tr("Open a run first: there is nothing to report."));
        return false;
    }
    const std::string html = report::html_report(inputs);
    auto file = OutputFile::create(path.toStdString(), /*overwrite=*/true);
    if (!file) {
        report_error(QString::fromStdString(file.error().message));
        return false;
    }
    file->write(html);
    if (auto status = file->commit(); !status) {
        report_error(QString::fromStdString(status.error().message));
        return false;
    }
    return true;
}

QString MainWindow::import_notes() const {
    const views::RunPtr run = current_run();
    if (!run) {
        return tr("Open a run first.");
    }
    const std::vector<ImportLogEntry> log = import_log_of(run->path);
    if (log.empty()) {
        return run->trace && run->trace->run.origin != RunOrigin::imported
                   ? tr("%1 was recorded by Fulcrum, not imported: it has no import notes.")
                         .arg(run->path)
                   : tr("%1: the importer had nothing to say.").arg(run->path);
    }
    QStringList lines;
    for (const ImportLogEntry& entry : log) {
        QString line =
            QString::fromStdString(entry.source) + ": " + QString::fromStdString(entry.reason);
        if (entry.skipped > 0) {
            line += tr(" (%1 records skipped)").arg(entry.skipped);
        }
        lines << line;
    }
    return tr("%1, as imported:\n\n%2").arg(run->path, lines.join("\n"));
}

void MainWindow::show_rerun_dialog() {
    if (RerunDialog* dialog = rerun_dialog()) {
        dialog->show();
        dialog->raise();
        dialog->activateWindow();
    }
}

void MainWindow::show_place(const views::Place& place) {
    show_view(View::timeline);
    timeline_->show_place(place);
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
    if (event->mimeData()->hasUrls()) {
        for (const QUrl& url : event->mimeData()->urls()) {
            if (url.isLocalFile()) {
                event->acceptProposedAction();
                return;
            }
        }
    }
}

void MainWindow::dropEvent(QDropEvent* event) {
    bool any = false;
    for (const QUrl& url : event->mimeData()->urls()) {
        if (url.isLocalFile()) {
            open_path(url.toLocalFile());
            any = true;
        }
    }
    if (any) {
        event->acceptProposedAction();
    }
}

}  // namespace fulcrum::ui
