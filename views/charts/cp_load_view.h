// CP load: per CP rank, measured attention time against predicted work (causal pairs), each as
// its share of the group so the two are comparable, with the imbalance (max/mean) measured,
// predicted, and predicted under the other shardings (core/analysis/cp_load.h).
#pragma once

#include <QVector>
#include <QWidget>

#include "views/common/opened_run.h"
#include "views/common/place.h"

class QComboBox;
class QCPBars;
class QCustomPlot;
class QLabel;

namespace fulcrum::views {

namespace charts {
class MessageStack;
}

class CpLoadView : public QWidget {
    Q_OBJECT
public:
    explicit CpLoadView(QWidget* parent = nullptr);
    ~CpLoadView() override;

    void set_run(RunPtr run);

    // -1: every group of the run summed; otherwise an index into cp_load.groups.
    void select_group(int group);

    // For tests and the main window.
    QString message() const;  // why nothing is drawn; empty when the chart is shown
    QString summary() const;  // the imbalance figures shown above the chart
    QCustomPlot* plot() const { return plot_; }
    // Null when the series has nothing behind it (no attention measured, no work predicted).
    QCPBars* measured_bars() const { return measured_; }
    QCPBars* predicted_bars() const { return predicted_; }
    int cp_ranks() const;  // the CP ranks on the x axis

private:
    void draw();

    RunPtr run_;
    charts::MessageStack* stack_;
    QComboBox* group_box_;
    QLabel* summary_;
    QCustomPlot* plot_;
    QCPBars* measured_ = nullptr;
    QCPBars* predicted_ = nullptr;
    int cp_ranks_ = 0;
};

}  // namespace fulcrum::views
