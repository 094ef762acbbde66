// The Plan… dialog: fills a plan::PlanRequest (the model and documents of the open run by
// default) and runs plan::plan() on a worker thread with progress and cancel; the result goes
// to the Plan tab (views/charts/plan_view.h). `fulcrum plan` is the same search on the command
// line (docs/plan.md).
#pragma once

#include <QDialog>
#include <QFutureWatcher>
#include <atomic>
#include <memory>

#include "core/util/result.h"
#include "views/charts/plan_view.h"
#include "views/common/opened_run.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTimer;

namespace fulcrum::ui {

class PlanDialog : public QDialog {
    Q_OBJECT
public:
    // `run`: the open run whose model, documents and costs are the defaults; may be null.
    explicit PlanDialog(views::RunPtr run, QWidget* parent = nullptr);
    ~PlanDialog() override;  // cancels a running search and waits for it

    // The request the fields describe, or what is wrong with them (naming the field).
    Result<plan::PlanRequest> request() const;
    void start();
    void cancel();
    bool running() const;
    views::RunPtr run() const { return run_; }
    QString status_text() const;

    // For tests.
    QLineEdit* worlds() const { return worlds_; }
    QSpinBox* layers() const { return layers_; }
    QCheckBox* calibrate() const { return calibrate_; }

signals:
    void plan_ready(const fulcrum::views::PlanPtr& plan);

private:
    void finished();
    void set_running(bool on);

    views::RunPtr run_;
    std::atomic<bool> cancel_{false};
    bool running_ = false;
    std::atomic<double> progress_{0};
    // What the worker leaves for finished(): the plan, or the error.
    struct Outcome {
        std::shared_ptr<views::PlanData> plan;
        QString error;
        bool cancelled = false;
    };
    std::shared_ptr<Outcome> outcome_;
    QFutureWatcher<void>* watcher_;
    QTimer* tick_;

    QSpinBox* layers_;
    QSpinBox* hidden_;
    QSpinBox* heads_;
    QSpinBox* context_;
    QSpinBox* vocab_;
    QLineEdit* lengths_;
    QLineEdit* worlds_;
    QSpinBox* gpus_per_node_;
    QDoubleSpinBox* gpu_memory_;
    QComboBox* hardware_;
    QSpinBox* global_batch_;
    QSpinBox* top_k_;
    QCheckBox* calibrate_;
    QProgressBar* bar_;
    QLabel* status_;
    QPushButton* start_button_;
    QPushButton* cancel_button_;
};

}  // namespace fulcrum::ui
