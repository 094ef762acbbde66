// The Plan tab: `fulcrum plan`'s candidates (core/plan/planner.h) as predicted tokens/s against
// the peak memory of the fullest rank — ranked ones coloured by schedule (the top k large),
// estimated ones light, infeasible ones grey at their memory with the reason in the tooltip, a
// dashed line at the memory budget — and the top k in a table. Selecting a row or clicking a
// ranked point highlights it in both; "Re-run this layout…" asks the main window to run it.
// The report draws the same plan (core/report/plan_section.h).
#pragma once

#include <QAbstractTableModel>
#include <QWidget>
#include <memory>

#include "core/plan/planner.h"

class QCPGraph;
class QCustomPlot;
class QLabel;
class QPushButton;
class QTableView;

namespace fulcrum::views {

namespace charts {
class MessageStack;
}

// A plan and the request it answers; the view and its model share it.
struct PlanData {
    plan::PlanRequest request;
    plan::PlanResult result;
};
using PlanPtr = std::shared_ptr<const PlanData>;

// What `fulcrum plan --json` wrote (plan::plan_json, docs/plan.md): the request's model, world
// sizes and memory, the counts, the ranked candidates and the infeasible ones by reason. The
// file holds no unranked candidates, so only the ranked ones are drawn. Errors say what is wrong.
Result<PlanData> read_plan_json(const QByteArray& json);

// The top k (PlanRequest::top_k) of PlanResult::ranked, best first, one row each.
class PlanTableModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column {
        rank,
        layout,
        microbatches,
        schedule,
        knobs,
        balancer,
        sharding,
        step,
        tokens_per_second,
        mfu,
        peak_gib,
        bubble,
        imbalance,
        column_count
    };
    static constexpr int ValueRole = Qt::UserRole + 1;  // the number sorted on

    using QAbstractTableModel::QAbstractTableModel;
    void set_plan(PlanPtr plan);
    // The candidate shown on `row`, or null.
    const plan::Candidate* candidate(int row) const;

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

private:
    PlanPtr plan_;
    int rows_ = 0;
};

class PlanView : public QWidget {
    Q_OBJECT
public:
    explicit PlanView(QWidget* parent = nullptr);
    ~PlanView() override;

    void set_plan(PlanPtr plan);  // null: the empty state
    PlanPtr plan() const { return plan_; }

    // Selects the row-th of the top k (-1: none), in the table and on the chart.
    void select_row(int row);
    int selected_row() const;
    const plan::Candidate* selected_candidate() const;

    // For tests and the main window.
    QString message() const;  // why nothing is shown; empty when the plan is
    int point_count(plan::CandidateStatus status) const;
    QColor point_color(plan::CandidateStatus status) const;  // grey for infeasible
    double budget_gib() const;                               // where the dashed line is
    QPointF highlighted_point() const;  // (GiB, tokens/s) of the highlight; NaN when none
    QString reasons_text() const;       // the counts of infeasible candidates by reason
    QString tooltip_at(double gib, double tokens_per_second) const;
    QTableView* table() const { return table_; }
    PlanTableModel* model() const { return model_; }
    QCustomPlot* plot() const { return plot_; }
    QPushButton* rerun_button() const { return rerun_; }

signals:
    // "Re-run this layout…": the selected candidate (valid until the next set_plan).
    void rerun_requested(const fulcrum::plan::Candidate& candidate);

private:
    void draw();
    void highlight(const plan::Candidate* candidate);
    // The candidate drawn nearest to a pixel, within 8 px; null when none.
    const plan::Candidate* candidate_near(const QPointF& pixel) const;
    void hover(QMouseEvent* event);
    void click(QMouseEvent* event);

    PlanPtr plan_;
    charts::MessageStack* stack_;
    QCustomPlot* plot_;
    QCPGraph* highlight_ = nullptr;
    QLabel* summary_;
    QLabel* reasons_;
    QTableView* table_;
    PlanTableModel* model_;
    QPushButton* rerun_;
    std::vector<std::pair<plan::CandidateStatus, QCPGraph*>> graphs_;
};

}  // namespace fulcrum::views

Q_DECLARE_METATYPE(fulcrum::plan::Candidate)
Q_DECLARE_METATYPE(fulcrum::views::PlanPtr)
