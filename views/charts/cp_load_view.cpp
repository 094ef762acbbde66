#include "views/charts/cp_load_view.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QVBoxLayout>

#include "views/charts/chart_common.h"
#include "views/common/palette.h"

namespace fulcrum::views {

namespace {

QString shardings_text(const std::vector<std::pair<std::string, double>>& by_sharding) {
    QStringList parts;
    for (const auto& [name, imbalance] : by_sharding) {
        parts
            << QStringLiteral("%1 %2").arg(QString::fromStdString(name)).arg(imbalance, 0, 'f', 3);
    }
    return parts.isEmpty() ? QObject::tr("not known (no documents)")
                           : parts.join(QStringLiteral(", "));
}

}  // namespace

CpLoadView::CpLoadView(QWidget* parent)
    : QWidget(parent), group_box_(new QComboBox), summary_(new QLabel), plot_(new QCustomPlot) {
    auto* content = new QWidget;
    auto* controls = new QHBoxLayout;
    controls->addWidget(new QLabel(tr("Micro-batch")));
    controls->addWidget(group_box_, 1);
    summary_->setWordWrap(true);
    summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);

    plot_->xAxis->setLabel(tr("CP rank"));
    plot_->yAxis->setLabel(tr("share of the group"));
    plot_->legend->setVisible(true);
    plot_->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);

    auto* layout = new QVBoxLayout(content);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addLayout(controls);
    layout->addWidget(summary_);
    layout->addWidget(plot_, 1);
    stack_ = new charts::MessageStack(content, this);
    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(0, 0, 0, 0);
    outer->addWidget(stack_);

    connect(group_box_, &QComboBox::currentIndexChanged, this, [this] { draw(); });
    set_run(nullptr);
}

CpLoadView::~CpLoadView() = default;

QString CpLoadView::message() const {
    return stack_->message();
}
QString CpLoadView::summary() const {
    return summary_->text();
}

int CpLoadView::cp_ranks() const {
    return cp_ranks_;
}

void CpLoadView::set_run(RunPtr run) {
    run_ = std::move(run);
    const QSignalBlocker block(group_box_);
    group_box_->clear();
    const QString missing = charts::missing_analysis(run_);
    if (!missing.isEmpty()) {
        stack_->show_message(missing);
        draw();
        return;
    }
    const auto& cp_load = run_->analysis->cp_load;
    if (!cp_load.cp || *cp_load.cp <= 1 || cp_load.groups.empty()) {
        stack_->show_message(
            !cp_load.cp
                ? tr("There is no CP attention load to compare. %1").arg(charts::no_grid_reason())
            : *cp_load.cp <= 1
                ? tr("This run has no context parallelism (cp = 1): there is no attention "
                     "load to compare across CP ranks.")
                : tr("This run has no CP groups with passes to compare."));
        draw();
        return;
    }
    group_box_->addItem(tr("all steps and micro-batches"), -1);
    for (std::size_t i = 0; i < cp_load.groups.size(); ++i) {
        const auto& g = cp_load.groups[i];
        group_box_->addItem(tr("step %1 · micro-batch %2 · pp %3 (dp %4, tp %5)")
                                .arg(g.step)
                                .arg(g.microbatch)
                                .arg(g.pp)
                                .arg(g.dp)
                                .arg(g.tp),
                            static_cast<int>(i));
    }
    stack_->show_content();
    draw();
}

void CpLoadView::select_group(int group) {
    const int index = group_box_->findData(group);
    if (index >= 0)
        group_box_->setCurrentIndex(index);
}

void CpLoadView::draw() {
    plot_->clearPlottables();
    plot_->clearItems();
    measured_ = nullptr;
    predicted_ = nullptr;
    cp_ranks_ = 0;
    summary_->clear();
    if (!run_ || !run_->analysis || group_box_->currentIndex() < 0) {
        plot_->replot();
        return;
    }
    const auto& cp_load = run_->analysis->cp_load;
    const int cp = cp_load.cp.value_or(0);
    cp_ranks_ = cp;
    const int group = group_box_->currentData().toInt();

    // Σ over the chosen groups of each CP rank's attention time and causal pairs; each drawn as
    // its share of the total, so time and pairs share one axis (equal shares = balanced). A
    // series with nothing behind it (no attention measured, no workload table) is not drawn.
    QVector<double> attention(cp, 0.0), pairs(cp, 0.0);
    for (std::size_t i = 0; i < cp_load.groups.size(); ++i) {
        if (group >= 0 && static_cast<int>(i) != group)
            continue;
        for (const auto& r : cp_load.groups[i].ranks) {
            if (r.cp_rank < 0 || r.cp_rank >= cp)
                continue;
            attention[r.cp_rank] += static_cast<double>(r.attention_ns.value_or(0));
            pairs[r.cp_rank] += static_cast<double>(r.pairs.value_or(0));
        }
    }
    double attention_total = 0, pairs_total = 0;
    for (int i = 0; i < cp; ++i) {
        attention_total += attention[i];
        pairs_total += pairs[i];
    }
    QVector<double> keys, measured_share, predicted_share;
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    for (int i = 0; i < cp; ++i) {
        keys << i;
        if (attention_total > 0)
            measured_share << attention[i] / attention_total;
        if (pairs_total > 0)
            predicted_share << pairs[i] / pairs_total;
        ticker->addTick(i, tr("CP rank %1").arg(i));
    }

    auto* bars_group = new QCPBarsGroup(plot_);
    if (!measured_share.isEmpty()) {
        measured_ = charts::add_bars(plot_, tr("measured attention time"), keys, measured_share,
                                     palette::measured(), 0.35, bars_group);
    }
    if (!predicted_share.isEmpty()) {
        predicted_ = charts::add_bars(plot_, tr("predicted work (causal pairs)"), keys,
                                      predicted_share, palette::predicted(), 0.35, bars_group);
    }
    auto* even = new QCPItemStraightLine(plot_);
    even->point1->setCoords(0, 1.0 / cp);
    even->point2->setCoords(1, 1.0 / cp);
    even->setPen(QPen(palette::theory(), 1, Qt::DashLine));

    plot_->xAxis->setTicker(ticker);
    plot_->xAxis->setRange(-0.6, cp - 0.4);
    double top = 1.0 / cp;
    for (const QVector<double>* shares : {&measured_share, &predicted_share}) {
        for (double share : *shares)
            top = std::max(top, share);
    }
    plot_->yAxis->setRange(0, top * 1.3);
    plot_->replot();

    const QString sharding =
        cp_load.sharding.empty() ? tr("unknown") : QString::fromStdString(cp_load.sharding);
    // Under Ulysses attention is even whatever the sharding; the alternatives are what the
    // same documents would give under all-gather CP.
    const bool ulysses =
        run_->analysis->config.layout.context_parallelism == parallel::ContextParallelism::ulysses;
    QString text = tr("Imbalance (max/mean over the CP group, mean over micro-batches): "
                      "measured %1, predicted %2 with the run's sharding (%3). Predicted "
                      "under each sharding%5: %4.")
                       .arg(charts::format_fixed(cp_load.mean_measured_imbalance, 3))
                       .arg(charts::format_fixed(cp_load.mean_predicted_imbalance, 3))
                       .arg(sharding)
                       .arg(shardings_text(cp_load.mean_predicted_by_sharding))
                       .arg(ulysses ? tr(" with all-gather CP (Ulysses splits the heads, so its "
                                         "attention is even under any)")
                                    : QString());
    if (group >= 0) {
        const auto& g = cp_load.groups[static_cast<std::size_t>(group)];
        text += tr("\nThis micro-batch: measured %1, predicted %2; under each sharding: %3.")
                    .arg(charts::format_fixed(g.measured_imbalance, 3))
                    .arg(charts::format_fixed(g.predicted_imbalance, 3))
                    .arg(shardings_text(g.predicted_by_sharding.named()));
    }
    if (!measured_) {
        text += tr("\nNo attention time was measured (no attention ranges in the passes).");
    }
    if (!predicted_) {
        text += tr("\nNo work was predicted: the run has no workload table.");
    }
    summary_->setText(text);
}

}  // namespace fulcrum::views
