#include "views/charts/overlap_view.h"

#include <qcustomplot.h>

#include <QLabel>

#include "views/charts/chart_common.h"
#include "views/common/palette.h"

namespace fulcrum::views {

OverlapView::OverlapView(QWidget* parent)
    : QWidget(parent), summary_(new QLabel), plot_(new QCustomPlot) {
    plot_->yAxis->setLabel(tr("copy time (ms)"));
    plot_->legend->setVisible(true);
    stack_ = charts::stack_summary_and_plot(this, summary_, plot_);
    set_run(nullptr);
}

OverlapView::~OverlapView() = default;

QString OverlapView::message() const {
    return stack_->message();
}
QString OverlapView::summary() const {
    return summary_->text();
}

void OverlapView::set_run(RunPtr run) {
    run_ = std::move(run);
    plot_->clearPlottables();
    plot_->clearItems();
    overlapped_ = nullptr;
    exposed_ = nullptr;
    summary_->clear();
    const QString missing = charts::missing_analysis(run_);
    if (!missing.isEmpty()) {
        stack_->show_message(missing);
        return;
    }
    const auto& offload = run_->analysis->offload;
    if (offload.ranks.empty()) {
        stack_->show_message(
            offload.staging_copies > 0
                ? tr("No offload copies in this run: its %1 pinned copies are uploads and "
                     "small read-backs (nothing larger went to the host first), and %2 more "
                     "use pageable host memory.")
                      .arg(offload.staging_copies)
                      .arg(offload.pageable_copies)
            : offload.pageable_copies > 0
                ? tr("No offload copies in this run: its %1 host↔device copies use pageable "
                     "host memory (data loads, read-backs), which cannot overlap as an offload "
                     "does.")
                      .arg(offload.pageable_copies)
                : tr("No host↔device copies in this run: there is no offload "
                     "overlap to show."));
        return;
    }

    QVector<double> keys, overlapped, exposed;
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    double top = 0;
    for (std::size_t i = 0; i < offload.ranks.size(); ++i) {
        const auto& r = offload.ranks[i];
        keys << static_cast<double>(i);
        overlapped << static_cast<double>(r.overlapped_ns) / 1e6;
        exposed << static_cast<double>(r.exposed_ns) / 1e6;
        ticker->addTick(static_cast<double>(i), tr("rank %1").arg(r.rank));
        top = std::max(top, static_cast<double>(r.copy_ns) / 1e6);
    }
    overlapped_ = charts::add_bars(plot_, tr("overlapped with compute"), keys, overlapped,
                                   palette::category(Category::offload), 0.6);
    exposed_ = charts::add_bars(plot_, tr("exposed (not hidden by compute)"), keys, exposed,
                                palette::bubble(), 0.6);
    exposed_->moveAbove(overlapped_);
    // The overlap percentage above each rank's bar.
    for (std::size_t i = 0; i < offload.ranks.size(); ++i) {
        const auto& r = offload.ranks[i];
        auto* label = new QCPItemText(plot_);
        label->position->setCoords(static_cast<double>(i), static_cast<double>(r.copy_ns) / 1e6);
        label->setPositionAlignment(Qt::AlignHCenter | Qt::AlignBottom);
        const double fraction =
            r.copy_ns > 0 ? static_cast<double>(r.overlapped_ns) / static_cast<double>(r.copy_ns)
                          : 0.0;
        label->setText(
            tr("%1 overlapped\n%2 copies, %3")
                .arg(charts::format_percent(fraction))
                .arg(r.copies)
                .arg(r.bandwidth_gb_s
                         ? tr("%1 GB/s").arg(*r.bandwidth_gb_s, 0, 'f', 2)
                         : tr("bandwidth %1 (no copy gave its bytes)").arg(charts::kUnknown)));
    }
    plot_->xAxis->setTicker(ticker);
    plot_->xAxis->setRange(-0.6, static_cast<double>(offload.ranks.size()) - 0.4);
    plot_->yAxis->setRange(0, top * 1.35 + 1e-9);
    plot_->replot();

    const double total_fraction = offload.copy_ns > 0 ? static_cast<double>(offload.overlapped_ns) /
                                                            static_cast<double>(offload.copy_ns)
                                                      : 0.0;
    QString text =
        tr("Copies %1 in all: %2 overlapped with compute (%3), %4 exposed; bandwidth "
           "%5.")
            .arg(charts::format_ms(static_cast<double>(offload.copy_ns)))
            .arg(charts::format_ms(static_cast<double>(offload.overlapped_ns)))
            .arg(charts::format_percent(total_fraction))
            .arg(charts::format_ms(static_cast<double>(offload.exposed_ns)))
            .arg(offload.bandwidth_gb_s ? tr("%1 GB/s").arg(*offload.bandwidth_gb_s, 0, 'f', 2)
                                        : tr("%1 (no copy gave its bytes)").arg(charts::kUnknown));
    if (offload.min_hidden_chunk_tokens && *offload.min_hidden_chunk_tokens <= 1) {
        // A token's K/V copies faster than one token attends to one (the CPU backend).
        text += tr(" Copies hide behind attention at any chunk size.");
    } else if (offload.min_hidden_chunk_tokens) {
        text += tr(" Copies hide behind attention in chunks of %1 tokens or more.")
                    .arg(*offload.min_hidden_chunk_tokens);
    } else if (!offload.chunk_note.empty()) {
        text += tr(" Chunk size: %1.").arg(QString::fromStdString(offload.chunk_note));
    }
    summary_->setText(text);
    stack_->show_content();
}

}  // namespace fulcrum::views
