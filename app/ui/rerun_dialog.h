// The re-run dialog: the run's own configuration with another balancer, CP sharding or
// schedule, captured again through `fulcrum capture` (or simulated with a cost model fitted on
// the run when it cannot run here), in the background with progress and cancel.
#pragma once

#include <QDialog>
#include <QElapsedTimer>
#include <QProcess>

#include "app/ui/rerun.h"
#include "views/common/opened_run.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QRadioButton;
class QTimer;

namespace fulcrum::ui {

class RerunDialog : public QDialog {
    Q_OBJECT
public:
    enum class State { idle, running, succeeded, failed, cancelled };

    // `app_dir`: where fulcrum-ui lives, to find this build's fulcrum and fulcrum-train.
    explicit RerunDialog(views::RunPtr run, QWidget* parent = nullptr, QString app_dir = {});
    ~RerunDialog() override;  // a running re-run is killed with its process tree

    views::RunPtr run() const { return run_; }
    const RerunPlan& plan() const { return plan_; }

    void set_choice(const RerunChoice& choice);
    RerunChoice choice() const;
    // Simulate instead of capturing; forced on when the run cannot be captured here.
    void set_simulate(bool on);
    bool simulate() const;

    // The tool and its arguments for the current choice, as `start` would run them.
    QString program() const;
    QStringList arguments() const;

    void start();
    // SIGTERM (capture forwards it to mpirun, which forwards it to the ranks), then SIGKILL to
    // the whole process group after `grace_ms`.
    void cancel(int grace_ms = 3000);
    State state() const { return state_; }
    QString status_text() const;
    QString output_path() const { return output_; }  // the run file it writes
    QProcess* process() const { return process_; }

    // Same documents: one epoch each, the run's own settings first as the baseline.
    void set_same_documents(bool on);
    bool same_documents() const;
    bool running_baseline() const { return running_baseline_; }

signals:
    // The new run is complete at `path`; `original` is the run to read it against: the run it
    // was made from, or null after a baseline (keep Compare's reference, the baseline).
    void run_ready(const QString& path, const fulcrum::views::RunPtr& original);
    // Same documents: the original settings over one epoch are complete at `path`; Compare
    // reads the re-run against it.
    void baseline_ready(const QString& path);
    void state_changed(fulcrum::ui::RerunDialog::State state);

private:
    void update_command();
    void launch(const RerunChoice& choice);
    QStringList arguments_for(const RerunChoice& choice) const;
    QString suffix_for(const RerunChoice& choice) const;
    void read_output();
    void process_finished(int exit_code, QProcess::ExitStatus status);
    void set_state(State state, const QString& text);
    void kill_tree();
    QString last_lines(int count) const;

    views::RunPtr run_;
    QString app_dir_;
    RerunPlan plan_;
    QString fulcrum_;
    QString output_;      // run file the tool writes
    QString output_dir_;  // capture folder, removed when cancelled
    State state_ = State::idle;
    bool cancel_requested_ = false;
    bool running_baseline_ = false;
    QProcess* process_ = nullptr;
    QStringList lines_;
    QStringList layout_;  // a plan candidate's layout (RerunChoice::layout)
    int world_ = 0;
    QString partial_line_;
    QElapsedTimer elapsed_;

    QComboBox* balancer_ = nullptr;
    QComboBox* cp_shard_ = nullptr;
    QComboBox* schedule_ = nullptr;
    QCheckBox* same_documents_ = nullptr;
    QRadioButton* capture_button_ = nullptr;
    QRadioButton* simulate_button_ = nullptr;
    QLineEdit* command_ = nullptr;
    QProgressBar* bar_ = nullptr;
    QLabel* status_ = nullptr;
    QLabel* last_line_ = nullptr;
    QPlainTextEdit* log_ = nullptr;
    QPushButton* start_button_ = nullptr;
    QPushButton* cancel_button_ = nullptr;
    QTimer* tick_ = nullptr;
};

}  // namespace fulcrum::ui
