// Offload overlap: per rank, host↔device copy time split into what hid behind compute
// (overlapped) and what the rank waited on (exposed), the overlap percentage, bandwidth and the
// chunk size at which copies would hide (core/analysis/offload.h).
#pragma once

#include <QWidget>

#include "views/common/opened_run.h"
#include "views/common/place.h"

class QCPBars;
class QCustomPlot;
class QLabel;

namespace fulcrum::views {

namespace charts {
class MessageStack;
}

class OverlapView : public QWidget {
    Q_OBJECT
public:
    explicit OverlapView(QWidget* parent = nullptr);
    ~OverlapView() override;

    void set_run(RunPtr run);

    // For tests and the main window.
    QString message() const;  // why nothing is drawn; empty when the chart is shown
    QString summary() const;  // totals, bandwidth and chunk size
    QCustomPlot* plot() const { return plot_; }
    QCPBars* overlapped_bars() const { return overlapped_; }  // key: index into offload.ranks
    QCPBars* exposed_bars() const { return exposed_; }        // stacked on overlapped

private:
    RunPtr run_;
    charts::MessageStack* stack_;
    QLabel* summary_;
    QCustomPlot* plot_;
    QCPBars* overlapped_ = nullptr;
    QCPBars* exposed_ = nullptr;
};

}  // namespace fulcrum::views
