// Pipeline bubbles: per stage, each micro-batch's forward and backward over time, bubbles shaded,
// and the measured bubble fraction of each stage against theory (core/analysis/bubbles.h).
#pragma once

#include <QWidget>
#include <vector>

#include "core/analysis/passes.h"
#include "views/common/opened_run.h"
#include "views/common/pass_marks.h"
#include "views/common/place.h"

class QComboBox;
class QCustomPlot;
class QLabel;
class QTableView;

namespace fulcrum::views {

class BubbleStageModel;
namespace charts {
class MessageStack;
}

class BubbleView : public QWidget {
    Q_OBJECT
public:
    explicit BubbleView(QWidget* parent = nullptr);
    ~BubbleView() override;

    void set_run(RunPtr run);

    // Shows one pipeline (the ranks sharing dp, cp and tp) in one step; false when the run has
    // no such pipeline. set_run shows the one with the largest measured bubble.
    bool select_pipeline(int step, int dp, int cp, int tp);

    // For tests and the main window.
    QString message() const;  // why nothing is drawn; empty when the chart is shown
    QCustomPlot* gantt_plot() const { return gantt_; }
    QCustomPlot* fraction_plot() const { return fractions_; }
    BubbleStageModel* stage_model() const { return model_; }
    // The passes drawn as bars (one per pass) and the step window they lie in.
    const std::vector<analysis::Pass>& shown_passes() const { return shown_; }
    // The pipeline receives inside the window, shaded as bubble over their pass.
    struct Wait {
        int stage = 0;
        std::int64_t start_ns = 0;
        std::int64_t end_ns = 0;
    };
    const std::vector<Wait>& shown_waits() const { return shown_waits_; }
    // The shown passes on the step's critical path (outlined in palette::critical()).
    const std::vector<PassKey>& shown_critical() const { return shown_critical_; }
    std::int64_t window_start_ns() const { return window_start_ns_; }
    // The plot's x coordinate (ms from the window's start) of a time.
    double time_coord(std::int64_t ns) const;

private:
    void fill_selectors();
    void draw();

    RunPtr run_;
    std::vector<analysis::Pass> passes_;
    std::vector<analysis::Pass> shown_;
    std::vector<Wait> shown_waits_;
    std::vector<PassKey> shown_critical_;
    std::int64_t window_start_ns_ = 0;
    bool filling_ = false;

    charts::MessageStack* stack_;
    QComboBox* step_box_;
    QComboBox* pipeline_box_;
    QLabel* summary_;
    QCustomPlot* gantt_;
    QCustomPlot* fractions_;
    QTableView* table_;
    BubbleStageModel* model_;
};

}  // namespace fulcrum::views
