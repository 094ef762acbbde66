// Heatmaps: rank × micro-batch (one step) and rank × step of measured compute, predicted work
// or their ratio (core/analysis/imbalance.h), with a colour scale, values on hover and a click
// that jumps to the cell's place.
#pragma once

#include <QWidget>
#include <optional>

#include "core/analysis/imbalance.h"
#include "views/common/opened_run.h"
#include "views/common/place.h"

class QComboBox;
class QCPColorMap;
class QCustomPlot;
class QLabel;

namespace fulcrum::views {

namespace charts {
class MessageStack;
}

class HeatmapView : public QWidget {
    Q_OBJECT
public:
    enum class Quantity { measured, predicted, ratio };

    explicit HeatmapView(QWidget* parent = nullptr);
    ~HeatmapView() override;

    void set_run(RunPtr run);

    void set_quantity(Quantity quantity);
    void set_step(int step);  // the step of the rank × micro-batch map

    // For tests and the main window.
    QString message() const;  // why nothing is drawn; empty when the maps are shown
    QString summary() const;  // the imbalance figures above the maps ("—" where unknown)
    QCustomPlot* microbatch_plot() const { return microbatch_plot_; }
    QCustomPlot* step_plot() const { return step_plot_; }
    QCPColorMap* microbatch_map() const { return microbatch_map_; }
    QCPColorMap* step_map() const { return step_map_; }
    // The values drawn (in the unit of the colour scale; NaN where there is none) and their
    // rows (ranks) and columns (micro-batches or steps).
    const analysis::Matrix& microbatch_values() const { return microbatch_values_; }
    const analysis::Matrix& step_values() const { return step_values_; }
    // Where the centre of a cell (row, column index) is, in this widget's coordinates.
    QPoint cell_centre(const QCustomPlot* plot, int row, int column) const;
    // The hover text at a point of this widget: rank, step/micro-batch, value and unit; empty
    // off the cells.
    QString tooltip_at(QPoint pos) const;

signals:
    // A cell was clicked: the timeline jumps there.
    void place_activated(const fulcrum::views::Place& place);

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    struct Cell {
        int row = 0;
        int column = 0;
    };
    void draw();
    std::optional<Cell> cell_at(const QCustomPlot* plot, QPoint plot_pos) const;
    QString cell_text(const QCustomPlot* plot, const Cell& cell) const;
    std::optional<Place> place_of(const QCustomPlot* plot, const Cell& cell) const;
    QString unit() const;

    RunPtr run_;
    Quantity quantity_ = Quantity::measured;
    int step_ = -1;
    analysis::Matrix microbatch_values_;
    analysis::Matrix step_values_;

    charts::MessageStack* stack_;
    QComboBox* quantity_box_;
    QComboBox* step_box_;
    QLabel* summary_;
    QCustomPlot* microbatch_plot_;
    QCustomPlot* step_plot_;
    QCPColorMap* microbatch_map_ = nullptr;
    QCPColorMap* step_map_ = nullptr;
};

}  // namespace fulcrum::views
