// Fulcrum's main window: the opened runs, the views that draw them, loading with progress and
// cancel, recent runs, drag and drop, and the re-run dialog.
#pragma once

#include <QMainWindow>
#include <QPointer>
#include <QVector>

#include "app/ui/run_loader.h"
#include "core/plan/planner.h"
#include "views/common/opened_run.h"
#include "views/common/place.h"

class QComboBox;
class QLabel;
class QMenu;
class QProgressBar;
class QPushButton;
class QTabWidget;

namespace fulcrum::views {
class TimelineView;
class BubbleView;
class CpLoadView;
class MemoryView;
class OverlapView;
class HeatmapView;
class CompareView;
class KernelsView;
class PlanView;
class HotSwitchView;
}  // namespace fulcrum::views

namespace fulcrum::ui {

class RerunDialog;
class PlanDialog;

// The tabs, in order; `view_key` names them on the command line (--view).
enum class View {
    timeline,
    bubbles,
    cp_load,
    overlap,
    memory,
    heatmap,
    compare,
    kernels,
    plan,
    hot_switch
};
QStringList view_keys();
std::optional<View> view_from_key(const QString& key);

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    // The one opener: a run file or a capture folder, loaded off the GUI thread. Errors go
    // to `error_reported` (and a message box unless modal dialogs are off).
    void open_path(const QString& path);
    void open(const OpenRequest& request);
    void cancel_loading();
    bool loading() const;

    const QVector<views::RunPtr>& runs() const { return runs_; }
    views::RunPtr current_run() const;
    // Writes the HTML report (core/report, as `fulcrum report`) of the runs in Compare when
    // there are several, else of the selected run. False, with the error reported, on failure.
    bool export_report(const QString& path);
    void set_current_run(int index);
    // Run > Import Notes: what the importer said of the current run's inputs — the grid and
    // passes it recovered and how sure each is, what it skipped (the import log, as `fulcrum
    // info` lists it) — or why there is nothing to say.
    QString import_notes() const;
    // Compare's reference: the first opened run until a re-run names its original.
    views::RunPtr reference_run() const { return reference_; }
    // What Compare shows, reference first.
    const QVector<views::RunPtr>& compare_runs() const { return compare_runs_; }

    void show_view(View view);
    View current_view() const;
    QTabWidget* tabs() const { return tabs_; }
    QComboBox* run_selector() const { return run_selector_; }
    views::TimelineView* timeline() const { return timeline_; }
    views::HeatmapView* heatmaps() const { return heatmaps_; }
    views::BubbleView* bubbles() const { return bubbles_; }
    views::CompareView* compare() const { return compare_; }
    views::KernelsView* kernels() const { return kernels_; }
    views::PlanView* plan_view() const { return plan_view_; }
    views::HotSwitchView* hot_switch() const { return hot_switch_; }
    PlanDialog* plan_dialog();
    // Reads what `fulcrum plan --json` wrote into the Plan tab; errors are reported.
    void open_plan(const QString& path);  // created on first use, for the open run
    // "Re-run this layout…" of the Plan tab: the re-run dialog filled with the candidate when it
    // can run here (returned), else null after saying why and offering its command (which
    // `why_not` receives when given).
    RerunDialog* rerun_candidate(const plan::Candidate& candidate, QString* why_not = nullptr);

    // Tests and --screenshot turn message boxes off; errors still reach error_reported.
    void set_modal_dialogs(bool on) { modal_dialogs_ = on; }

    // Where fulcrum and fulcrum-train are looked for (as if fulcrum-ui lived there); tests
    // point it at the build's app/ui. Default: the application's folder.
    void set_tools_dir(const QString& dir) { tools_dir_ = dir; }

    // The re-run dialog for the current run (created on demand, not shown).
    RerunDialog* rerun_dialog();
    QStringList recent_runs() const;  // existing ones, most recent first

signals:
    void run_opened(const fulcrum::views::RunPtr& run);
    // A paged run's analyses arrived (RunLoader::analysed): `run` replaced the run it was.
    void run_analysed(const fulcrum::views::RunPtr& run);
    void error_reported(const QString& message);
    void load_cancelled(const QString& path);
    void loading_idle();

protected:
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;

private:
    void build_menus();
    void build_status_bar();
    void add_run(const views::RunPtr& run, const OpenRequest& request);
    // `analysed` in place of `run` wherever the window holds it.
    void replace_run(const views::RunPtr& run, const views::RunPtr& analysed);
    // `timeline` false: every view but the timeline, which keeps its place.
    void refresh_views(bool timeline = true);
    void refresh_compare();
    void report_error(const QString& message);
    void remember_recent(const QString& path);
    void rebuild_recent_menu();
    void show_open_dialog();
    void show_rerun_dialog();
    void show_export_dialog();
    void show_place(const views::Place& place);

    QVector<views::RunPtr> runs_;
    views::RunPtr reference_;
    QVector<views::RunPtr> compare_runs_;
    RunLoader loader_;
    bool modal_dialogs_ = true;
    QString tools_dir_;

    QTabWidget* tabs_ = nullptr;
    QComboBox* run_selector_ = nullptr;
    views::TimelineView* timeline_ = nullptr;
    views::BubbleView* bubbles_ = nullptr;
    views::CpLoadView* cp_load_ = nullptr;
    views::OverlapView* overlap_ = nullptr;
    views::MemoryView* memory_ = nullptr;
    views::HeatmapView* heatmaps_ = nullptr;
    views::CompareView* compare_ = nullptr;
    views::KernelsView* kernels_ = nullptr;
    views::PlanView* plan_view_ = nullptr;
    views::HotSwitchView* hot_switch_ = nullptr;
    QPointer<PlanDialog> plan_dialog_;
    QMenu* recent_menu_ = nullptr;
    QAction* rerun_action_ = nullptr;
    QLabel* load_label_ = nullptr;
    QProgressBar* load_bar_ = nullptr;
    QPushButton* load_cancel_ = nullptr;
    QPointer<RerunDialog> rerun_dialog_;
};

}  // namespace fulcrum::ui
