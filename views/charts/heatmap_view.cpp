#include "views/charts/heatmap_view.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QHBoxLayout>
#include <QHelpEvent>
#include <QLabel>
#include <QStandardItemModel>
#include <QToolTip>
#include <QVBoxLayout>
#include <cmath>

#include "views/charts/chart_common.h"
#include "views/charts/color_map.h"

namespace fulcrum::views {

namespace {

// The cells of a matrix in the unit shown: times in ms, pairs as they are, and measured over
// predicted cell by cell (NaN where either is missing or the prediction is 0).
analysis::Matrix shown_values(const analysis::Matrix& measured, const analysis::Matrix& predicted,
                              HeatmapView::Quantity quantity, bool predicted_is_time) {
    analysis::Matrix out = quantity == HeatmapView::Quantity::predicted ? predicted : measured;
    for (std::size_t i = 0; i < out.values.size(); ++i) {
        switch (quantity) {
            case HeatmapView::Quantity::measured:
                out.values[i] = measured.values[i] / 1e6;
                break;
            case HeatmapView::Quantity::predicted:
                if (predicted_is_time)
                    out.values[i] = predicted.values[i] / 1e6;
                break;
            case HeatmapView::Quantity::ratio: {
                const bool same_grid =
                    predicted.rows == measured.rows && predicted.columns == measured.columns;
                const double p = same_grid ? predicted.values[i] : std::nan("");
                out.values[i] = (std::isnan(p) || p == 0) ? std::nan("") : measured.values[i] / p;
                break;
            }
        }
    }
    return out;
}

QCPColorScale* scale_of(const QCustomPlot* plot) {
    return qobject_cast<QCPColorScale*>(plot->plotLayout()->element(0, 1));
}

}  // namespace

HeatmapView::HeatmapView(QWidget* parent)
    : QWidget(parent),
      quantity_box_(new QComboBox),
      step_box_(new QComboBox),
      summary_(new QLabel),
      microbatch_plot_(new QCustomPlot),
      step_plot_(new QCustomPlot) {
    quantity_box_->addItem(tr("measured compute"), static_cast<int>(Quantity::measured));
    quantity_box_->addItem(tr("predicted work"), static_cast<int>(Quantity::predicted));
    quantity_box_->addItem(tr("measured / predicted"), static_cast<int>(Quantity::ratio));
    auto* controls = new QHBoxLayout;
    controls->addWidget(new QLabel(tr("Show")));
    controls->addWidget(quantity_box_);
    controls->addWidget(new QLabel(tr("Step of the rank × micro-batch map")));
    controls->addWidget(step_box_);
    summary_->setWordWrap(true);
    controls->addWidget(summary_, 1);

    for (QCustomPlot* plot : {microbatch_plot_, step_plot_}) {
        charts::prepare_matrix_plot(plot);
        plot->installEventFilter(this);
        plot->setMouseTracking(true);
        connect(plot, &QCustomPlot::mousePress, this, [this, plot](QMouseEvent* event) {
            if (event->button() != Qt::LeftButton)
                return;
            const auto cell = cell_at(plot, event->pos());
            if (!cell)
                return;
            if (const auto place = place_of(plot, *cell))
                emit place_activated(*place);
        });
    }
    auto* plots = new QHBoxLayout;
    plots->addWidget(microbatch_plot_, 1);
    plots->addWidget(step_plot_, 1);

    auto* content = new QWidget;
    auto* layout = new QVBoxLayout(content);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addLayout(controls);
    layout->addLayout(plots, 1);
    stack_ = new charts::MessageStack(content, this);
    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(0, 0, 0, 0);
    outer->addWidget(stack_);

    connect(quantity_box_, &QComboBox::currentIndexChanged, this, [this] {
        quantity_ = static_cast<Quantity>(quantity_box_->currentData().toInt());
        draw();
    });
    connect(step_box_, &QComboBox::currentIndexChanged, this, [this] {
        if (step_box_->currentIndex() >= 0)
            step_ = step_box_->currentData().toInt();
        draw();
    });
    set_run(nullptr);
}

HeatmapView::~HeatmapView() = default;

QString HeatmapView::message() const {
    return stack_->message();
}
QString HeatmapView::summary() const {
    return summary_->text();
}

void HeatmapView::set_run(RunPtr run) {
    run_ = std::move(run);
    {
        const QSignalBlocker block(step_box_);
        step_box_->clear();
        step_ = -1;
        if (run_ && run_->analysis) {
            for (const auto& m : run_->analysis->imbalance.by_microbatch) {
                step_box_->addItem(tr("step %1").arg(m.step), m.step);
            }
            if (step_box_->count() > 0)
                step_ = step_box_->itemData(0).toInt();
        }
    }
    // Without a workload table nothing was predicted: the predicted and ratio maps would be
    // empty, so they cannot be chosen, and the tooltip says why.
    const bool predicted = run_ && run_->analysis && run_->analysis->imbalance.has_prediction;
    if (auto* items = qobject_cast<QStandardItemModel*>(quantity_box_->model())) {
        for (const Quantity q : {Quantity::predicted, Quantity::ratio}) {
            QStandardItem* item = items->item(quantity_box_->findData(static_cast<int>(q)));
            item->setEnabled(predicted);
            item->setToolTip(predicted ? QString()
                                       : tr("No work was predicted: the run has no workload "
                                            "table."));
        }
    }
    if (!predicted && quantity_ != Quantity::measured) {
        const QSignalBlocker block(quantity_box_);
        quantity_ = Quantity::measured;
        quantity_box_->setCurrentIndex(quantity_box_->findData(static_cast<int>(quantity_)));
    }
    const QString missing = charts::missing_analysis(run_);
    if (!missing.isEmpty()) {
        stack_->show_message(missing);
    } else if (run_->analysis->imbalance.compute_by_step.rows.empty()) {
        stack_->show_message(
            tr("This run has no forward/backward passes with a step: there is "
               "no rank × step matrix to draw."));
    } else {
        stack_->show_content();
    }
    draw();
}

void HeatmapView::set_quantity(Quantity quantity) {
    quantity_box_->setCurrentIndex(quantity_box_->findData(static_cast<int>(quantity)));
}

void HeatmapView::set_step(int step) {
    const int index = step_box_->findData(step);
    if (index >= 0)
        step_box_->setCurrentIndex(index);
}

QString HeatmapView::unit() const {
    const bool time = run_ && run_->analysis && run_->analysis->imbalance.predicted_is_time;
    switch (quantity_) {
        case Quantity::measured:
            return tr("ms");
        case Quantity::predicted:
            return time ? tr("ms") : tr("causal pairs");
        case Quantity::ratio:
            return time ? tr("× predicted") : tr("ns per pair");
    }
    return {};
}

void HeatmapView::draw() {
    microbatch_values_ = {};
    step_values_ = {};
    microbatch_plot_->clearPlottables();
    step_plot_->clearPlottables();
    microbatch_map_ = nullptr;
    step_map_ = nullptr;
    summary_->clear();
    if (!run_ || !run_->analysis || !message().isEmpty()) {
        microbatch_plot_->replot();
        step_plot_->replot();
        return;
    }
    const auto& imbalance = run_->analysis->imbalance;
    const QCPColorGradient gradient(QCPColorGradient::gpThermal);
    for (const auto& m : imbalance.by_microbatch) {
        if (m.step != step_)
            continue;
        microbatch_values_ =
            shown_values(m.compute_ns, m.predicted, quantity_, imbalance.predicted_is_time);
    }
    if (!microbatch_values_.rows.empty()) {
        microbatch_map_ =
            charts::draw_matrix(microbatch_plot_, scale_of(microbatch_plot_), microbatch_values_,
                                tr("micro-batch (step %1)").arg(step_), unit(), gradient);
    }
    step_values_ = shown_values(imbalance.compute_by_step, imbalance.predicted_by_step, quantity_,
                                imbalance.predicted_is_time);
    step_map_ = charts::draw_matrix(step_plot_, scale_of(step_plot_), step_values_, tr("step"),
                                    unit(), gradient);
    QString summary = tr("Imbalance (max/mean over ranks, mean over steps): compute %1, "
                         "predicted %2")
                          .arg(charts::format_fixed(imbalance.compute_imbalance, 3))
                          .arg(charts::format_fixed(imbalance.predicted_imbalance, 3));
    if (!imbalance.compute_imbalance) {
        summary += tr(" (no step has passes on two ranks or more)");
    }
    if (!imbalance.has_prediction) {
        summary += tr(" (no workload table: nothing predicted)");
    }
    summary_->setText(summary);
    microbatch_plot_->replot();
    step_plot_->replot();
}

QPoint HeatmapView::cell_centre(const QCustomPlot* plot, int row, int column) const {
    const QPoint in_plot(static_cast<int>(std::lround(plot->xAxis->coordToPixel(column))),
                         static_cast<int>(std::lround(plot->yAxis->coordToPixel(row))));
    return plot->mapTo(this, in_plot);
}

std::optional<HeatmapView::Cell> HeatmapView::cell_at(const QCustomPlot* plot,
                                                      QPoint plot_pos) const {
    const analysis::Matrix& values = plot == microbatch_plot_ ? microbatch_values_ : step_values_;
    if (values.rows.empty() || !plot->axisRect()->rect().contains(plot_pos))
        return std::nullopt;
    const long column = std::lround(plot->xAxis->pixelToCoord(plot_pos.x()));
    const long row = std::lround(plot->yAxis->pixelToCoord(plot_pos.y()));
    if (column < 0 || row < 0 || column >= static_cast<long>(values.columns.size()) ||
        row >= static_cast<long>(values.rows.size())) {
        return std::nullopt;
    }
    return Cell{static_cast<int>(row), static_cast<int>(column)};
}

std::optional<Place> HeatmapView::place_of(const QCustomPlot* plot, const Cell& cell) const {
    const bool by_microbatch = plot == microbatch_plot_;
    const analysis::Matrix& values = by_microbatch ? microbatch_values_ : step_values_;
    const auto row = static_cast<std::size_t>(cell.row);
    const auto column = static_cast<std::size_t>(cell.column);
    if (row >= values.rows.size() || column >= values.columns.size())
        return std::nullopt;
    Place place;
    place.rank = values.rows[row];
    if (by_microbatch) {
        place.step = step_;
        place.microbatch = values.columns[column];
    } else {
        place.step = values.columns[column];
    }
    return place;
}

QString HeatmapView::cell_text(const QCustomPlot* plot, const Cell& cell) const {
    const auto place = place_of(plot, cell);
    if (!place)
        return {};
    const analysis::Matrix& values = plot == microbatch_plot_ ? microbatch_values_ : step_values_;
    const double value =
        values.at(static_cast<std::size_t>(cell.row), static_cast<std::size_t>(cell.column));
    const QString where = place->microbatch >= 0
                              ? tr("rank %1, step %2, micro-batch %3")
                                    .arg(place->rank)
                                    .arg(place->step)
                                    .arg(place->microbatch)
                              : tr("rank %1, step %2").arg(place->rank).arg(place->step);
    const QString shown = std::isnan(value)
                              ? tr("no value")
                              : QStringLiteral("%1 %2").arg(value, 0, 'g', 6).arg(unit());
    return QStringLiteral("%1: %2").arg(where, shown);
}

QString HeatmapView::tooltip_at(QPoint pos) const {
    for (const QCustomPlot* plot : {microbatch_plot_, step_plot_}) {
        if (!plot->isVisibleTo(this))
            continue;
        const QPoint in_plot = plot->mapFrom(this, pos);
        if (!plot->rect().contains(in_plot))
            continue;
        if (const auto cell = cell_at(plot, in_plot))
            return cell_text(plot, *cell);
    }
    return {};
}

bool HeatmapView::eventFilter(QObject* watched, QEvent* event) {
    if (event->type() == QEvent::ToolTip) {
        if (auto* plot = qobject_cast<QCustomPlot*>(watched)) {
            auto* help = static_cast<QHelpEvent*>(event);
            const QString text = tooltip_at(plot->mapTo(this, help->pos()));
            if (text.isEmpty()) {
                QToolTip::hideText();
            } else {
                QToolTip::showText(help->globalPos(), text, plot);
            }
            return true;
        }
    }
    return QWidget::eventFilter(watched, event);
}

}  // namespace fulcrum::views
