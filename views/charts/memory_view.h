// Memory per rank: each rank's measured peak beside the memory model's prediction for its
// stage, and the prediction's parts per stage, under the run's memory techniques (ZeRO,
// Ulysses, offloaded checkpoints, FPDT's chunks; core/analysis/memory.h).
#pragma once

#include <QWidget>

#include "views/common/opened_run.h"

class QCPBars;
class QCustomPlot;
class QLabel;

namespace fulcrum::views {

namespace charts {
class MessageStack;
}

class MemoryView : public QWidget {
    Q_OBJECT
public:
    explicit MemoryView(QWidget* parent = nullptr);
    ~MemoryView() override;

    void set_run(RunPtr run);

    // For tests and the main window.
    QString message() const;  // why nothing is drawn; empty when the chart is shown
    QString summary() const;  // the techniques, the parts per stage, what is missing
    QCustomPlot* plot() const { return plot_; }
    QCPBars* measured_bars() const { return measured_; }  // key: index into memory.ranks; MiB
    QCPBars* predicted_bars() const { return predicted_; }

private:
    RunPtr run_;
    charts::MessageStack* stack_;
    QLabel* summary_;
    QCustomPlot* plot_;
    QCPBars* measured_ = nullptr;
    QCPBars* predicted_ = nullptr;
};

}  // namespace fulcrum::views
