// Compare: two or more runs side by side — step-time distributions, tokens and tokens/s
// (against the first run only on the same documents), bubble fraction and imbalance, the rank ×
// step compute difference against the reference run, and predicted against measured compute (from
// each run's RunAnalysis).
#pragma once

#include <QVector>
#include <QWidget>

#include <vector>

#include "core/analysis/run_diff.h"
#include "core/report/run_throughput.h"
#include "views/common/opened_run.h"

class QComboBox;
class QCustomPlot;
class QLabel;
class QTableView;
class QTableWidget;

namespace fulcrum::views {

namespace charts {
class MessageStack;
}
class HtaTableModel;

class CompareView : public QWidget {
    Q_OBJECT
public:
    explicit CompareView(QWidget* parent = nullptr);
    ~CompareView() override;

    // The first run is the reference that differences are taken against.
    void set_runs(const QVector<RunPtr>& runs);

    // For tests and the main window.
    QString message() const;             // why nothing is drawn; empty when charts are shown
    QString notes() const;               // the reference run and whether tokens/s compares
    QString difference_message() const;  // why there is no difference map; empty when drawn
    QString predicted_message() const;   // why there is no predicted-vs-measured chart
    QCustomPlot* step_time_plot() const { return step_times_; }  // one box per run, legend
    QCustomPlot* figures_plot() const { return figures_; }
    QCustomPlot* difference_plot() const { return difference_; }
    QCustomPlot* predicted_plot() const { return predicted_; }
    QTableWidget* table() const { return table_; }
    void set_difference_run(int index);  // which run (index into the runs) is compared
    // The op-level diff of that run against the reference (docs/analyses.md, "Diff of two
    // runs"), and its rows as a table.
    const analysis::RunDiff& op_diff() const { return diff_; }
    HtaTableModel* diff_model() const { return diff_model_; }
    QString diff_title() const;

private:
    void draw_step_times();
    void draw_figures();
    void draw_difference();
    void draw_predicted();
    void fill_table();
    void fill_diff();

    QVector<RunPtr> runs_;                            // those with an analysis
    std::vector<report::RunThroughput> throughputs_;  // of runs_, for the table and the notes
    QStringList skipped_;                             // runs without one, and why

    charts::MessageStack* stack_;
    QLabel* notes_;
    QCustomPlot* step_times_;
    QCustomPlot* figures_;
    QComboBox* difference_box_;
    charts::MessageStack* difference_stack_;
    QCustomPlot* difference_;
    charts::MessageStack* predicted_stack_;
    QCustomPlot* predicted_;
    QTableWidget* table_;
    analysis::RunDiff diff_;
    QLabel* diff_title_;
    HtaTableModel* diff_model_;
    QTableView* diff_view_;
};

}  // namespace fulcrum::views
