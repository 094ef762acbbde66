// A rank × column matrix drawn as a QCustomPlot colour map; shared by the heatmaps and Compare.
// Includes qcustomplot.h: only for chart sources.
#pragma once

#include <qcustomplot.h>

#include <QString>
#include <cmath>

#include "core/analysis/imbalance.h"

namespace fulcrum::views::charts {

// Sets a plot up for a matrix: a colour scale on the right, ranks down the y axis (rank of
// row 0 on top), columns along x. Returns the scale.
inline QCPColorScale* prepare_matrix_plot(QCustomPlot* plot) {
    auto* scale = new QCPColorScale(plot);
    plot->plotLayout()->addElement(0, 1, scale);
    scale->setType(QCPAxis::atRight);
    auto* margins = new QCPMarginGroup(plot);
    plot->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
    scale->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
    plot->yAxis->setRangeReversed(true);
    plot->xAxis->grid()->setVisible(false);
    plot->yAxis->grid()->setVisible(false);
    return scale;
}

// Draws `matrix` (NaN cells transparent) with cell (row, column) centred on (column, row).
// A dimension of one cell is stored twice, since QCPColorMap draws a single cell with no width.
inline QCPColorMap* draw_matrix(QCustomPlot* plot, QCPColorScale* scale,
                                const analysis::Matrix& matrix, const QString& column_name,
                                const QString& unit, const QCPColorGradient& gradient) {
    plot->clearPlottables();
    const int columns = static_cast<int>(matrix.columns.size());
    const int rows = static_cast<int>(matrix.rows.size());
    auto* map = new QCPColorMap(plot->xAxis, plot->yAxis);
    map->setInterpolate(false);
    map->setTightBoundary(false);
    const int key_size = columns == 1 ? 2 : std::max(columns, 1);
    const int value_size = rows == 1 ? 2 : std::max(rows, 1);
    const QCPRange key_range = columns <= 1 ? QCPRange(-0.25, 0.25) : QCPRange(0, columns - 1);
    const QCPRange value_range = rows <= 1 ? QCPRange(-0.25, 0.25) : QCPRange(0, rows - 1);
    map->data()->setSize(key_size, value_size);
    map->data()->setRange(key_range, value_range);
    for (int k = 0; k < key_size; ++k) {
        for (int v = 0; v < value_size; ++v) {
            const int column = columns == 1 ? 0 : k;
            const int row = rows == 1 ? 0 : v;
            const double value =
                (column < columns && row < rows)
                    ? matrix.at(static_cast<std::size_t>(row), static_cast<std::size_t>(column))
                    : std::nan("");
            map->data()->setCell(k, v, value);
        }
    }
    QCPColorGradient g = gradient;
    g.setNanHandling(QCPColorGradient::nhTransparent);
    // The scale first: attaching a map to a scale gives the map the scale's gradient.
    map->setColorScale(scale);
    map->setGradient(g);
    map->rescaleDataRange(true);
    // A flat matrix still needs a range that is not empty to map onto the gradient.
    if (map->dataRange().size() <= 0) {
        const double v = map->dataRange().lower;
        map->setDataRange(QCPRange(v - 0.5, v + 0.5));
    }
    scale->axis()->setLabel(unit);

    auto row_ticker = QSharedPointer<QCPAxisTickerText>::create();
    for (int r = 0; r < rows; ++r) {
        row_ticker->addTick(r,
                            QObject::tr("rank %1").arg(matrix.rows[static_cast<std::size_t>(r)]));
    }
    auto column_ticker = QSharedPointer<QCPAxisTickerText>::create();
    for (int c = 0; c < columns; ++c) {
        column_ticker->addTick(c, QString::number(matrix.columns[static_cast<std::size_t>(c)]));
    }
    plot->yAxis->setTicker(row_ticker);
    plot->xAxis->setTicker(column_ticker);
    plot->xAxis->setLabel(column_name);
    plot->xAxis->setRange(-0.5, std::max(columns, 1) - 0.5);
    plot->yAxis->setRange(-0.5, std::max(rows, 1) - 0.5);
    return map;
}

}  // namespace fulcrum::views::charts
