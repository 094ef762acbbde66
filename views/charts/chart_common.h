// What every chart shares: a message in place of an empty plot, and how figures are written.
#pragma once

#include <QColor>
#include <QLabel>
#include <QStackedWidget>
#include <QString>
#include <QVector>
#include <cstdint>
#include <optional>

class QCPBars;
class QCPBarsGroup;
class QCustomPlot;

#include "views/common/opened_run.h"

namespace fulcrum::views::charts {

// Why a run cannot be charted: no run, or its analyses failed (with their error). Empty when
// the run has an analysis.
QString missing_analysis(const RunPtr& run);

// Shows either the chart or a centred, readable message saying why there is none.
class MessageStack : public QStackedWidget {
public:
    MessageStack(QWidget* content, QWidget* parent);
    void show_message(const QString& text);
    void show_content();
    QString message() const;  // empty while the content is shown

private:
    QWidget* content_;
    QLabel* label_;
};

// The layout of a chart view with a summary: `summary` (wrapped, selectable) above `plot`, the
// two in a MessageStack that fills `owner`; returns the stack.
MessageStack* stack_summary_and_plot(QWidget* owner, QLabel* summary, QCustomPlot* plot);

// Bars of `values` at `keys` in one colour, outlined a shade darker; in `group` when given
// (bars side by side).
QCPBars* add_bars(QCustomPlot* plot, const QString& name, const QVector<double>& keys,
                  const QVector<double>& values, const QColor& colour, double width,
                  QCPBarsGroup* group = nullptr);

// What a figure shows where nothing was measured or predicted
// (docs/analyses.md, "Unknown figures").
inline const QString kUnknown = QStringLiteral("—");

QString format_ms(double ns);             // "12.345 ms"
QString format_percent(double fraction);  // "12.3 %"
// The same, "—" where the analysis has no figure.
QString format_percent(const std::optional<double>& fraction);
QString format_fixed(const std::optional<double>& value, int decimals);  // "1.250"

// Why a run has no pipeline or CP figures when its 4D grid is unknown.
QString no_grid_reason();

}  // namespace fulcrum::views::charts
