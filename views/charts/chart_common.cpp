#include "views/charts/chart_common.h"

#include <qcustomplot.h>

#include <QVBoxLayout>

namespace fulcrum::views::charts {

QString missing_analysis(const RunPtr& run) {
    if (!run)
        return QStringLiteral("No run is open.");
    if (!run->analysis) {
        return run->analysis_error.isEmpty()
                   ? QStringLiteral("The run could not be analysed.")
                   : QStringLiteral("The run could not be analysed: %1").arg(run->analysis_error);
    }
    return {};
}

MessageStack::MessageStack(QWidget* content, QWidget* parent)
    : QStackedWidget(parent), content_(content), label_(new QLabel(this)) {
    label_->setAlignment(Qt::AlignCenter);
    label_->setWordWrap(true);
    label_->setObjectName(QStringLiteral("chart_message"));
    QFont font = label_->font();
    font.setPointSizeF(font.pointSizeF() * 1.2);
    label_->setFont(font);
    addWidget(content_);
    addWidget(label_);
    setCurrentWidget(label_);
}

void MessageStack::show_message(const QString& text) {
    label_->setText(text);
    setCurrentWidget(label_);
}

void MessageStack::show_content() {
    label_->clear();
    setCurrentWidget(content_);
}

QString MessageStack::message() const {
    return currentWidget() == label_ ? label_->text() : QString();
}

QString format_ms(double ns) {
    return QStringLiteral("%1 ms").arg(ns / 1e6, 0, 'f', 3);
}

QString format_percent(double fraction) {
    return QStringLiteral("%1 %").arg(fraction * 100.0, 0, 'f', 1);
}

QString format_percent(const std::optional<double>& fraction) {
    return fraction ? format_percent(*fraction) : kUnknown;
}

QString format_fixed(const std::optional<double>& value, int decimals) {
    return value ? QString::number(*value, 'f', decimals) : kUnknown;
}

MessageStack* stack_summary_and_plot(QWidget* owner, QLabel* summary, QCustomPlot* plot) {
    summary->setWordWrap(true);
    summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    auto* content = new QWidget;
    auto* layout = new QVBoxLayout(content);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(summary);
    layout->addWidget(plot, 1);
    auto* stack = new MessageStack(content, owner);
    auto* outer = new QVBoxLayout(owner);
    outer->setContentsMargins(0, 0, 0, 0);
    outer->addWidget(stack);
    return stack;
}

QCPBars* add_bars(QCustomPlot* plot, const QString& name, const QVector<double>& keys,
                  const QVector<double>& values, const QColor& colour, double width,
                  QCPBarsGroup* group) {
    auto* bars = new QCPBars(plot->xAxis, plot->yAxis);
    bars->setName(name);
    bars->setData(keys, values, true);
    bars->setBrush(colour);
    bars->setPen(QPen(colour.darker(130)));
    bars->setWidth(width);
    if (group != nullptr) {
        bars->setBarsGroup(group);
    }
    return bars;
}

QString no_grid_reason() {
    return QStringLiteral(
        "Its grid is unknown: the ranks have no DP/TP/PP/CP coordinates (an imported trace "
        "records none).");
}

}  // namespace fulcrum::views::charts
