#include "views/charts/compare_view.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QGridLayout>
#include <QHeaderView>
#include <QLabel>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QTableWidget>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "views/charts/chart_common.h"
#include "views/charts/color_map.h"
#include "views/charts/hta_table_model.h"
#include "views/common/palette.h"

namespace fulcrum::views {

namespace {

// The value at quantile q of sorted values (linear between neighbours).
double quantile(const std::vector<double>& sorted, double q) {
    if (sorted.empty())
        return 0;
    const double at = q * static_cast<double>(sorted.size() - 1);
    const auto below = static_cast<std::size_t>(std::floor(at));
    const auto above = std::min(below + 1, sorted.size() - 1);
    return sorted[below] + (sorted[above] - sorted[below]) * (at - static_cast<double>(below));
}

// Each rank's wall time of each step (StepBreakdown::wall_ns), in ms, sorted. A window over a
// rank's whole trace (a run without step ranges) is no step and is left out.
std::vector<double> step_walls_ms(const analysis::RunAnalysis& analysis) {
    std::vector<double> walls;
    for (const auto& b : analysis.breakdown) {
        if (!b.whole_trace)
            walls.push_back(static_cast<double>(b.wall_ns()) / 1e6);
    }
    std::sort(walls.begin(), walls.end());
    return walls;
}

QString grid_text(const analysis::Matrix& m) {
    return QObject::tr("%1 ranks × %2 steps").arg(m.rows.size()).arg(m.columns.size());
}

QCustomPlot* titled_plot(const QString& title) {
    auto* plot = new QCustomPlot;
    plot->plotLayout()->insertRow(0);
    plot->plotLayout()->addElement(0, 0, new QCPTextElement(plot, title, QFont()));
    return plot;
}

}  // namespace

CompareView::CompareView(QWidget* parent)
    : QWidget(parent),
      notes_(new QLabel),
      step_times_(titled_plot(tr("Step wall time per rank (ms)"))),
      figures_(titled_plot(tr("Bubble fraction and imbalance (max/mean)"))),
      difference_box_(new QComboBox),
      difference_(new QCustomPlot),
      predicted_(titled_plot(tr("Compute per rank and step: predicted against measured (ms)"))),
      table_(new QTableWidget),
      diff_title_(new QLabel),
      diff_model_(new HtaTableModel(HtaTableModel::Table::diff, this)),
      diff_view_(new QTableView) {
    notes_->setWordWrap(true);
    notes_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    step_times_->legend->setVisible(true);
    step_times_->yAxis->setLabel(tr("ms"));

    // The difference map lives in row 1 (row 0 is the title), so the colour scale goes there.
    difference_->plotLayout()->insertRow(0);
    difference_->plotLayout()->addElement(
        0, 0,
        new QCPTextElement(difference_, tr("Compute per rank and step: run − reference (ms)"),
                           QFont()));
    {
        auto* scale = new QCPColorScale(difference_);
        difference_->plotLayout()->addElement(1, 1, scale);
        auto* margins = new QCPMarginGroup(difference_);
        difference_->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
        scale->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
        difference_->yAxis->setRangeReversed(true);
    }
    predicted_->xAxis->setLabel(tr("predicted (ms)"));
    predicted_->yAxis->setLabel(tr("measured (ms)"));

    auto* difference_panel = new QWidget;
    auto* difference_layout = new QVBoxLayout(difference_panel);
    difference_layout->setContentsMargins(0, 0, 0, 0);
    auto* difference_controls = new QHBoxLayout;
    difference_controls->addWidget(new QLabel(tr("Run")));
    difference_controls->addWidget(difference_box_, 1);
    difference_layout->addLayout(difference_controls);
    difference_stack_ = new charts::MessageStack(difference_, difference_panel);
    difference_layout->addWidget(difference_stack_, 1);
    predicted_stack_ = new charts::MessageStack(predicted_, nullptr);

    auto* charts_grid = new QWidget;
    auto* grid = new QGridLayout(charts_grid);
    grid->setContentsMargins(0, 0, 0, 0);
    grid->addWidget(step_times_, 0, 0);
    grid->addWidget(figures_, 0, 1);
    grid->addWidget(difference_panel, 1, 0);
    grid->addWidget(predicted_stack_, 1, 1);
    grid->setRowStretch(0, 1);
    grid->setRowStretch(1, 1);
    for (QWidget* chart : {static_cast<QWidget*>(step_times_), static_cast<QWidget*>(figures_)}) {
        chart->setMinimumHeight(220);
    }

    table_->verticalHeader()->hide();
    table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    auto* sorted_diff = new QSortFilterProxyModel(this);
    sorted_diff->setSourceModel(diff_model_);
    sorted_diff->setSortRole(HtaTableModel::ValueRole);
    diff_view_->setModel(sorted_diff);
    // Unsorted until a header is clicked: the analysis's own order (largest first).
    diff_view_->horizontalHeader()->setSortIndicator(-1, Qt::AscendingOrder);
    diff_view_->setSortingEnabled(true);
    diff_view_->verticalHeader()->hide();
    diff_view_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    auto* diff_panel = new QWidget;
    auto* diff_layout = new QVBoxLayout(diff_panel);
    diff_layout->setContentsMargins(0, 0, 0, 0);
    diff_layout->addWidget(diff_title_);
    diff_layout->addWidget(diff_view_, 1);

    auto* split = new QSplitter(Qt::Vertical);
    split->addWidget(charts_grid);
    split->addWidget(table_);
    split->addWidget(diff_panel);
    split->setStretchFactor(0, 4);
    split->setStretchFactor(1, 1);
    split->setStretchFactor(2, 1);

    auto* content = new QWidget;
    auto* layout = new QVBoxLayout(content);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(notes_);
    layout->addWidget(split, 1);
    stack_ = new charts::MessageStack(content, this);
    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(0, 0, 0, 0);
    outer->addWidget(stack_);

    connect(difference_box_, &QComboBox::currentIndexChanged, this, [this] {
        draw_difference();
        fill_diff();
    });
    set_runs({});
}

CompareView::~CompareView() = default;

QString CompareView::message() const {
    return stack_->message();
}
QString CompareView::difference_message() const {
    return difference_stack_->message();
}
QString CompareView::predicted_message() const {
    return predicted_stack_->message();
}
QString CompareView::notes() const {
    return notes_->text();
}

void CompareView::set_difference_run(int index) {
    const int at = difference_box_->findData(index);
    if (at >= 0)
        difference_box_->setCurrentIndex(at);
}

void CompareView::set_runs(const QVector<RunPtr>& runs) {
    runs_.clear();
    skipped_.clear();
    for (const auto& run : runs) {
        const QString missing = charts::missing_analysis(run);
        if (missing.isEmpty()) {
            runs_.push_back(run);
        } else {
            skipped_ << (run ? QStringLiteral("%1: %2").arg(run->title, missing) : missing);
        }
    }
    {
        const QSignalBlocker block(difference_box_);
        difference_box_->clear();
        for (int i = 1; i < runs_.size(); ++i) {
            difference_box_->addItem(tr("%1 − %2").arg(runs_[i]->title, runs_[0]->title), i);
        }
    }
    if (runs_.isEmpty()) {
        stack_->show_message(skipped_.isEmpty()
                                 ? tr("No runs to compare: open two or more runs.")
                                 : tr("No run could be compared.\n%1").arg(skipped_.join('\n')));
    } else {
        stack_->show_content();
    }
    throughputs_.clear();
    for (const auto& run : runs_) {
        throughputs_.push_back(report::run_throughput(*run->trace, *run->analysis));
    }
    QString notes = tr("Reference: %1.").arg(runs_.isEmpty() ? QString() : runs_[0]->title);
    if (runs_.size() > 1) {
        notes += QLatin1Char(' ') + QString::fromStdString(report::comparison_basis(throughputs_));
    }
    if (!skipped_.isEmpty())
        notes += tr(" Left out: %1").arg(skipped_.join(QStringLiteral("; ")));
    notes_->setText(notes);
    draw_step_times();
    draw_figures();
    draw_difference();
    draw_predicted();
    fill_table();
    fill_diff();
}

QString CompareView::diff_title() const {
    return diff_title_->text();
}

// What ran more, less, or only in one of the two runs, by name, per step.
void CompareView::fill_diff() {
    diff_ = {};
    const int index =
        difference_box_->currentIndex() >= 0 ? difference_box_->currentData().toInt() : 1;
    const auto tallied = [](const RunPtr& run) {
        return run->trace && run->analysis && run->analysis->names;
    };
    if (runs_.size() < 2 || index >= runs_.size() || !tallied(runs_[0]) || !tallied(runs_[index])) {
        diff_title_->setText(
            tr("Operators and kernels: open a second run to compare them with the reference."));
        diff_model_->set_diff(nullptr);
        return;
    }
    // The analyses' tallies by name: a paged run holds no events to count.
    diff_ = analysis::diff_tallies({&*runs_[0]->analysis->names, runs_[0]->trace.get()},
                                   {&*runs_[index]->analysis->names, runs_[index]->trace.get()});
    diff_title_->setText(
        tr("Operators and kernels, per step: %1 against the reference %2 (largest change in time "
           "first)")
            .arg(runs_[index]->title, runs_[0]->title));
    diff_model_->set_diff(&diff_);
}

void CompareView::draw_step_times() {
    step_times_->clearPlottables();
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    double top = 0;
    for (int i = 0; i < runs_.size(); ++i) {
        const auto walls = step_walls_ms(*runs_[i]->analysis);
        auto* box = new QCPStatisticalBox(step_times_->xAxis, step_times_->yAxis);
        box->setName(runs_[i]->title);
        const QColor colour = palette::run(i);
        QColor fill = colour;
        fill.setAlpha(140);
        box->setBrush(fill);
        box->setPen(QPen(colour.darker(130)));
        box->setMedianPen(QPen(colour.darker(200), 2));
        if (!walls.empty()) {
            box->addData(i, walls.front(), quantile(walls, 0.25), quantile(walls, 0.5),
                         quantile(walls, 0.75), walls.back());
            top = std::max(top, walls.back());
        }
        ticker->addTick(i, runs_[i]->title);
    }
    step_times_->xAxis->setTicker(ticker);
    step_times_->xAxis->setRange(-0.6, std::max<int>(1, static_cast<int>(runs_.size())) - 0.4);
    step_times_->yAxis->setRange(0, top * 1.15 + 1e-9);
    step_times_->replot();
}

void CompareView::draw_figures() {
    figures_->clearPlottables();
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    ticker->addTick(0, tr("bubble\n(measured)"));
    ticker->addTick(1, tr("bubble\n(theory)"));
    ticker->addTick(2, tr("compute\nimbalance"));
    ticker->addTick(3, tr("predicted\nimbalance"));
    ticker->addTick(4, tr("CP attention\nimbalance"));
    auto* group = new QCPBarsGroup(figures_);
    double top = 1;
    const double width = 0.8 / std::max<int>(1, static_cast<int>(runs_.size()));
    for (int i = 0; i < runs_.size(); ++i) {
        const auto& a = *runs_[i]->analysis;
        // A figure the run does not have gets no bar (the table below says "—" and why).
        const std::optional<double> figures[] = {
            a.bubbles.mean_measured_fraction, a.bubbles.theory_fraction,
            a.imbalance.compute_imbalance, a.imbalance.predicted_imbalance,
            a.cp_load.mean_measured_imbalance};
        QVector<double> keys, values;
        for (int k = 0; k < 5; ++k) {
            if (figures[k]) {
                keys << k;
                values << *figures[k];
            }
        }
        auto* bars = new QCPBars(figures_->xAxis, figures_->yAxis);
        bars->setName(runs_[i]->title);
        bars->setData(keys, values, true);
        bars->setBrush(palette::run(i));
        bars->setPen(QPen(palette::run(i).darker(130)));
        bars->setWidth(width);
        bars->setBarsGroup(group);
        for (double v : values)
            top = std::max(top, v);
    }
    figures_->xAxis->setTicker(ticker);
    figures_->xAxis->setRange(-0.6, 4.6);
    figures_->yAxis->setRange(0, top * 1.15);
    figures_->replot();
}

void CompareView::draw_difference() {
    difference_->clearPlottables();
    if (runs_.size() < 2) {
        difference_stack_->show_message(
            tr("Open a second run to see the difference against "
               "the reference."));
        difference_->replot();
        return;
    }
    const int index =
        difference_box_->currentIndex() >= 0 ? difference_box_->currentData().toInt() : 1;
    const auto& reference = runs_[0]->analysis->imbalance.compute_by_step;
    const auto& other = runs_[index]->analysis->imbalance.compute_by_step;
    if (reference.rows.empty() || reference.rows != other.rows ||
        reference.columns != other.columns) {
        difference_stack_->show_message(
            tr("The rank × step grids differ (%1: %2; %3: %4), so there is no cell-by-cell "
               "difference.")
                .arg(runs_[0]->title, grid_text(reference), runs_[index]->title, grid_text(other)));
        difference_->replot();
        return;
    }
    analysis::Matrix diff = other;
    for (std::size_t i = 0; i < diff.values.size(); ++i) {
        diff.values[i] = (other.values[i] - reference.values[i]) / 1e6;
    }
    auto* scale = qobject_cast<QCPColorScale*>(difference_->plotLayout()->element(1, 1));
    // Faster than the reference in blue, slower in red, equal in white.
    QCPColorGradient diverging;
    diverging.clearColorStops();
    diverging.setColorStopAt(0, palette::faster());
    diverging.setColorStopAt(0.5, Qt::white);
    diverging.setColorStopAt(1, palette::slower());
    auto* map = charts::draw_matrix(difference_, scale, diff, tr("step"), tr("ms"), diverging);
    // Symmetric around 0 so that "faster" and "slower" get opposite colours of equal strength.
    const double extent =
        std::max(std::abs(map->dataRange().lower), std::abs(map->dataRange().upper));
    map->setDataRange(QCPRange(-extent - 1e-9, extent + 1e-9));
    difference_stack_->show_content();
    difference_->replot();
}

void CompareView::draw_predicted() {
    predicted_->clearPlottables();
    predicted_->clearItems();
    QStringList missing;
    double top = 0;
    int drawn = 0;
    for (int i = 0; i < runs_.size(); ++i) {
        const auto& a = *runs_[i]->analysis;
        const auto& measured = a.imbalance.compute_by_step;
        const auto& predicted = a.imbalance.predicted_by_step;
        if (!a.imbalance.predicted_is_time || measured.rows != predicted.rows ||
            measured.columns != predicted.columns || measured.values.empty()) {
            QString why = a.cost_model ? tr("predicted work is not in time") : tr("no cost model");
            for (const auto& note : a.notes)
                why += QStringLiteral("; ") + QString::fromStdString(note);
            missing << QStringLiteral("%1: %2").arg(runs_[i]->title, why);
            continue;
        }
        QVector<double> xs, ys;
        for (std::size_t k = 0; k < measured.values.size(); ++k) {
            if (std::isnan(measured.values[k]) || std::isnan(predicted.values[k]))
                continue;
            xs << predicted.values[k] / 1e6;
            ys << measured.values[k] / 1e6;
            top = std::max({top, xs.back(), ys.back()});
        }
        auto* graph = predicted_->addGraph();
        graph->setName(runs_[i]->title);
        graph->setData(xs, ys);
        graph->setLineStyle(QCPGraph::lsNone);
        graph->setScatterStyle(
            QCPScatterStyle(QCPScatterStyle::ssCircle, palette::run(i), palette::run(i), 7));
        ++drawn;
    }
    if (drawn == 0) {
        predicted_stack_->show_message(
            runs_.isEmpty() ? tr("No runs.")
                            : tr("No predicted times to compare with the measured ones.\n%1")
                                  .arg(missing.join('\n')));
        predicted_->replot();
        return;
    }
    auto* diagonal = new QCPItemStraightLine(predicted_);
    diagonal->point1->setCoords(0, 0);
    diagonal->point2->setCoords(1, 1);
    diagonal->setPen(QPen(palette::theory(), 1, Qt::DashLine));
    predicted_->xAxis->setRange(0, top * 1.1 + 1e-9);
    predicted_->yAxis->setRange(0, top * 1.1 + 1e-9);
    predicted_stack_->show_content();
    predicted_->replot();
}

void CompareView::fill_table() {
    const QStringList headers = {tr("Run"),
                                 tr("Balancer"),
                                 tr("Median step"),
                                 tr("Steps"),
                                 tr("Tokens"),
                                 tr("Tokens/s"),
                                 tr("Tokens/s vs first"),
                                 tr("Bubble (measured)"),
                                 tr("Bubble (theory)"),
                                 tr("Compute imbalance"),
                                 tr("Predicted imbalance"),
                                 tr("CP imbalance measured / predicted"),
                                 tr("Cost model"),
                                 tr("Notes")};
    table_->clear();
    table_->setColumnCount(static_cast<int>(headers.size()));
    table_->setHorizontalHeaderLabels(headers);
    table_->setRowCount(static_cast<int>(runs_.size()));
    for (int i = 0; i < runs_.size(); ++i) {
        const auto& a = *runs_[i]->analysis;
        const auto walls = step_walls_ms(a);
        QString cost = tr("none");
        if (a.cost_model) {
            double r2 = 0, error = 0;
            for (const auto& p : a.cost_model->passes) {
                r2 += p.fit.r_squared;
                error += p.fit.mean_abs_rel_error;
            }
            const double n = std::max<double>(1, static_cast<double>(a.cost_model->passes.size()));
            cost = tr("%1 pass fits, mean R² %2, mean error %3")
                       .arg(a.cost_model->passes.size())
                       .arg(r2 / n, 0, 'f', 3)
                       .arg(charts::format_percent(error / n));
        }
        QStringList notes;
        for (const auto& note : a.notes)
            notes << QString::fromStdString(note);
        const report::RunThroughput& throughput = throughputs_[static_cast<std::size_t>(i)];
        const auto ratio = report::tokens_per_s_vs(throughput, throughputs_.front());
        const QStringList cells = {
            runs_[i]->title,
            a.config.balancer.empty() ? charts::kUnknown
                                      : QString::fromStdString(a.config.balancer),
            walls.empty() ? charts::kUnknown
                          : QStringLiteral("%1 ms").arg(quantile(walls, 0.5), 0, 'f', 3),
            QString::number(throughput.steps),
            throughput.tokens > 0 ? QString::number(throughput.tokens) : charts::kUnknown,
            throughput.has_tokens() ? QString::number(throughput.tokens_per_s(), 'f', 0)
                                    : charts::kUnknown,
            // Only on the same documents is the ratio a speedup; the notes say why not.
            ratio ? QStringLiteral("%1×").arg(*ratio, 0, 'f', 2) : charts::kUnknown,
            charts::format_percent(a.bubbles.mean_measured_fraction),
            charts::format_percent(a.bubbles.theory_fraction),
            charts::format_fixed(a.imbalance.compute_imbalance, 3),
            charts::format_fixed(a.imbalance.predicted_imbalance, 3),
            !a.cp_load.cp ? tr("%1 (grid unknown)").arg(charts::kUnknown)
            : *a.cp_load.cp > 1
                ? QStringLiteral("%1 / %2")
                      .arg(charts::format_fixed(a.cp_load.mean_measured_imbalance, 3))
                      .arg(charts::format_fixed(a.cp_load.mean_predicted_imbalance, 3))
                : tr("no CP"),
            cost, notes.join(QStringLiteral("; "))};
        for (int c = 0; c < cells.size(); ++c) {
            auto* item = new QTableWidgetItem(cells[c]);
            if (c == 0)
                item->setForeground(palette::run(i));
            table_->setItem(i, c, item);
        }
    }
    table_->resizeColumnsToContents();
}

}  // namespace fulcrum::views
