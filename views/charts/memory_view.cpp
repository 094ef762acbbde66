#include "views/charts/memory_view.h"

#include <qcustomplot.h>

#include <QLabel>

#include "views/charts/chart_common.h"
#include "views/common/palette.h"

namespace fulcrum::views {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

QString mib(double bytes) {
    return QStringLiteral("%1 MiB").arg(bytes / kMiB, 0, 'f', 2);
}

}  // namespace

MemoryView::MemoryView(QWidget* parent)
    : QWidget(parent), summary_(new QLabel), plot_(new QCustomPlot) {
    plot_->yAxis->setLabel(tr("peak memory (MiB)"));
    plot_->legend->setVisible(true);
    stack_ = charts::stack_summary_and_plot(this, summary_, plot_);
    set_run(nullptr);
}

MemoryView::~MemoryView() = default;

QString MemoryView::message() const {
    return stack_->message();
}
QString MemoryView::summary() const {
    return summary_->text();
}

void MemoryView::set_run(RunPtr run) {
    run_ = std::move(run);
    plot_->clearPlottables();
    plot_->clearItems();
    measured_ = nullptr;
    predicted_ = nullptr;
    summary_->clear();
    const QString missing = charts::missing_analysis(run_);
    if (!missing.isEmpty()) {
        stack_->show_message(missing);
        return;
    }
    const analysis::MemoryAnalysis& memory = run_->analysis->memory;
    if (memory.ranks.empty()) {
        stack_->show_message(
            tr("No memory figures in this run: fulcrum-train writes each rank's peak at its "
               "end, and the memory model predicts its CPU runs; imports and simulated runs "
               "have neither.%1")
                .arg(memory.note.empty()
                         ? QString()
                         : QStringLiteral(" (") + QString::fromStdString(memory.note) + ")"));
        return;
    }

    QVector<double> keys, measured, predicted;
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    double top = 0;
    for (std::size_t i = 0; i < memory.ranks.size(); ++i) {
        const analysis::RankMemory& r = memory.ranks[i];
        const double key = static_cast<double>(i);
        keys << key;
        ticker->addTick(key, tr("rank %1").arg(r.rank));
        // A missing figure draws no bar (NaN is a gap in QCustomPlot).
        const double nan = std::numeric_limits<double>::quiet_NaN();
        measured << (r.peak_bytes ? double(*r.peak_bytes) / kMiB : nan);
        predicted << (r.predicted_bytes ? *r.predicted_bytes / kMiB : nan);
        top = std::max({top, r.peak_bytes ? double(*r.peak_bytes) / kMiB : 0.0,
                        r.predicted_bytes ? *r.predicted_bytes / kMiB : 0.0});
    }
    auto* group = new QCPBarsGroup(plot_);
    measured_ = charts::add_bars(plot_, tr("measured peak"), keys, measured, palette::measured(),
                                 0.35, group);
    predicted_ = charts::add_bars(plot_, tr("predicted (memory model)"), keys, predicted,
                                  palette::predicted(), 0.35, group);
    plot_->xAxis->setTicker(ticker);
    plot_->xAxis->setRange(-0.6, static_cast<double>(memory.ranks.size()) - 0.4);
    plot_->yAxis->setRange(0, top * 1.2 + 1e-9);
    plot_->replot();

    QString text = tr("Techniques: %1. Predicted for micro-batches of the full context "
                      "(docs/analyses.md §12).")
                       .arg(QString::fromStdString(memory.techniques));
    for (const analysis::StageMemoryRow& row : analysis::memory_by_stage(memory)) {
        const analysis::RankMemory& r = row.fullest;
        if (!r.predicted_bytes) {
            continue;
        }
        text += tr(" Stage %1: model state %2, workspace %3, activations %4%5.")
                    .arg(row.stage)
                    .arg(mib(r.model_state_bytes), mib(r.workspace_bytes), mib(r.activations_bytes))
                    .arg(r.predicted_pinned_bytes && *r.predicted_pinned_bytes > 0
                             ? tr(", %1 pinned").arg(mib(*r.predicted_pinned_bytes))
                             : QString());
    }
    if (!memory.note.empty()) {
        text += " " + QString::fromStdString(memory.note) + ".";
    }
    summary_->setText(text);
    stack_->show_content();
}

}  // namespace fulcrum::views
