#include "views/charts/bubble_view.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>
#include <algorithm>
#include <limits>
#include <set>
#include <tuple>

#include "views/charts/bubble_stage_model.h"
#include "views/charts/chart_common.h"
#include "views/common/palette.h"
#include "views/common/pass_marks.h"

namespace fulcrum::views {

namespace {

// Bars fill this much of a stage's row; the rest separates the rows.
constexpr double kBarHalfHeight = 0.4;

using PipelineKey = std::tuple<int, int, int>;  // dp, cp, tp

PipelineKey key_of(const analysis::PipelineBubble& p) {
    return {p.dp, p.cp, p.tp};
}

QString pipeline_label(const PipelineKey& key) {
    return QStringLiteral("dp %1 · cp %2 · tp %3")
        .arg(std::get<0>(key))
        .arg(std::get<1>(key))
        .arg(std::get<2>(key));
}

}  // namespace

BubbleView::BubbleView(QWidget* parent)
    : QWidget(parent),
      step_box_(new QComboBox),
      pipeline_box_(new QComboBox),
      summary_(new QLabel),
      gantt_(new QCustomPlot),
      fractions_(new QCustomPlot),
      table_(new QTableView),
      model_(new BubbleStageModel(this)) {
    auto* content = new QWidget;
    auto* controls = new QHBoxLayout;
    controls->addWidget(new QLabel(tr("Step")));
    controls->addWidget(step_box_);
    controls->addWidget(new QLabel(tr("Pipeline")));
    controls->addWidget(pipeline_box_);
    controls->addWidget(summary_, 1);

    gantt_->xAxis->setLabel(tr("time in the step (ms)"));
    gantt_->yAxis->setRangeReversed(true);  // stage 0 on top, as in schedule diagrams
    gantt_->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    gantt_->axisRect()->setRangeDrag(Qt::Horizontal);
    gantt_->axisRect()->setRangeZoom(Qt::Horizontal);

    fractions_->xAxis->setLabel(tr("stage"));
    fractions_->yAxis->setLabel(tr("bubble / busy"));
    fractions_->legend->setVisible(true);
    QFont legend_font = fractions_->legend->font();
    legend_font.setPointSizeF(legend_font.pointSizeF() * 0.85);
    fractions_->legend->setFont(legend_font);
    // The side chart is narrow: its legend goes in a row of its own under the axes, where it
    // cannot cover the bars.
    fractions_->plotLayout()->addElement(1, 0, fractions_->legend);
    fractions_->plotLayout()->setRowStretchFactor(1, 0.001);
    fractions_->legend->setBorderPen(Qt::NoPen);

    table_->setModel(model_);
    table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    table_->verticalHeader()->hide();

    auto* bottom = new QSplitter(Qt::Horizontal);
    bottom->addWidget(fractions_);
    bottom->addWidget(table_);
    bottom->setStretchFactor(0, 1);
    bottom->setStretchFactor(1, 2);
    auto* split = new QSplitter(Qt::Vertical);
    split->addWidget(gantt_);
    split->addWidget(bottom);
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 2);

    auto* layout = new QVBoxLayout(content);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addLayout(controls);
    layout->addWidget(split, 1);

    stack_ = new charts::MessageStack(content, this);
    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(0, 0, 0, 0);
    outer->addWidget(stack_);

    connect(step_box_, &QComboBox::currentIndexChanged, this, [this] {
        if (!filling_)
            draw();
    });
    connect(pipeline_box_, &QComboBox::currentIndexChanged, this, [this] {
        if (!filling_)
            draw();
    });
    set_run(nullptr);
}

BubbleView::~BubbleView() = default;

QString BubbleView::message() const {
    return stack_->message();
}

double BubbleView::time_coord(std::int64_t ns) const {
    return static_cast<double>(ns - window_start_ns_) / 1e6;
}

void BubbleView::set_run(RunPtr run) {
    run_ = std::move(run);
    passes_.clear();
    shown_.clear();
    model_->set_stages({}, std::nullopt);
    const QString missing = charts::missing_analysis(run_);
    if (!missing.isEmpty()) {
        stack_->show_message(missing);
        return;
    }
    if (run_->analysis->bubbles.pipelines.empty()) {
        const auto& config = run_->analysis->config;
        stack_->show_message(
            !config.grid_known
                ? tr("This run has no pipeline to chart. %1").arg(charts::no_grid_reason())
            : !config.hot_switch.empty()
                ? tr("This run is hot-switched: each length bucket ran its own pipeline shape, "
                     "which the ranks' coordinates do not describe. The Hot switch tab has each "
                     "bucket's time; the Timeline has its passes.")
            : config.layout.grid.pp <= 1
                ? tr("This run has no pipeline (pp = 1): there are no pipeline bubbles.")
                : tr("This run has no pipeline passes to chart (no forward/backward ranges "
                     "with a step and a stage)."));
        return;
    }
    // The bars are the passes the bubble analysis was computed from (the same function).
    if (run_->trace)
        passes_ = analysis::find_passes(*run_->trace);
    fill_selectors();
    const auto& pipelines = run_->analysis->bubbles.pipelines;
    const auto worst = std::max_element(
        pipelines.begin(), pipelines.end(),
        [](const auto& a, const auto& b) { return a.measured_fraction < b.measured_fraction; });
    stack_->show_content();
    select_pipeline(worst->step, worst->dp, worst->cp, worst->tp);
}

void BubbleView::fill_selectors() {
    filling_ = true;
    step_box_->clear();
    pipeline_box_->clear();
    std::set<int> steps;
    std::set<PipelineKey> keys;
    for (const auto& p : run_->analysis->bubbles.pipelines) {
        steps.insert(p.step);
        keys.insert(key_of(p));
    }
    for (int step : steps)
        step_box_->addItem(tr("step %1").arg(step), step);
    for (const auto& key : keys) {
        pipeline_box_->addItem(pipeline_label(key),
                               QVariantList{std::get<0>(key), std::get<1>(key), std::get<2>(key)});
    }
    filling_ = false;
}

bool BubbleView::select_pipeline(int step, int dp, int cp, int tp) {
    if (!run_ || !run_->analysis)
        return false;
    const int step_index = step_box_->findData(step);
    const int pipeline_index = pipeline_box_->findData(QVariantList{dp, cp, tp});
    if (step_index < 0 || pipeline_index < 0)
        return false;
    filling_ = true;
    step_box_->setCurrentIndex(step_index);
    pipeline_box_->setCurrentIndex(pipeline_index);
    filling_ = false;
    draw();
    return true;
}

void BubbleView::draw() {
    gantt_->clearItems();
    gantt_->clearPlottables();
    fractions_->clearItems();
    fractions_->clearPlottables();
    shown_.clear();
    shown_waits_.clear();
    shown_critical_.clear();
    if (!run_ || !run_->analysis || step_box_->currentIndex() < 0 ||
        pipeline_box_->currentIndex() < 0) {
        return;
    }
    const auto& bubbles = run_->analysis->bubbles;
    const int step = step_box_->currentData().toInt();
    const QVariantList key = pipeline_box_->currentData().toList();
    const int dp = key.value(0).toInt(), cp = key.value(1).toInt(), tp = key.value(2).toInt();

    const analysis::PipelineBubble* pipeline = nullptr;
    for (const auto& p : bubbles.pipelines) {
        if (p.step == step && p.dp == dp && p.cp == cp && p.tp == tp)
            pipeline = &p;
    }
    std::vector<analysis::StageBubble> stages;
    for (const auto& s : bubbles.stages) {
        if (s.step == step && s.dp == dp && s.cp == cp && s.tp == tp)
            stages.push_back(s);
    }
    std::sort(stages.begin(), stages.end(),
              [](const auto& a, const auto& b) { return a.stage < b.stage; });
    model_->set_stages(
        stages, pipeline ? std::optional(pipeline->theory_fraction) : bubbles.theory_fraction,
        QString::fromUtf8(analysis::theory_formula(bubbles)));
    if (!pipeline) {
        summary_->setText(
            tr("No pipeline of step %1 at %2.").arg(step).arg(pipeline_label({dp, cp, tp})));
        gantt_->replot();
        fractions_->replot();
        return;
    }
    summary_->setText(tr("%1 stages × %2 micro-batches, %3 schedule: bubble %4 measured, "
                         "%5 in theory (%6)")
                          .arg(pipeline->stages)
                          .arg(pipeline->microbatches)
                          .arg(QString::fromStdString(bubbles.schedule) +
                               (bubbles.schedule_assumed ? tr(" (assumed)") : QString()))
                          .arg(charts::format_percent(pipeline->measured_fraction))
                          .arg(charts::format_percent(pipeline->theory_fraction))
                          .arg(QString::fromUtf8(analysis::theory_formula(bubbles))));

    // The window is [first pass start, last pass end] over the stages, as the analysis has it.
    std::int64_t start = std::numeric_limits<std::int64_t>::max();
    std::int64_t end = std::numeric_limits<std::int64_t>::min();
    for (const auto& s : stages) {
        for (const auto& pass : passes_) {
            if (s.rank && pass.rank == *s.rank && pass.step == step) {
                shown_.push_back(pass);
                start = std::min(start, pass.start_ns);
                end = std::max(end, pass.end_ns);
            }
        }
    }
    window_start_ns_ = shown_.empty() ? 0 : start;

    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    QFont label_font = gantt_->font();
    label_font.setPointSizeF(label_font.pointSizeF() * 0.85);
    for (const auto& s : stages) {
        ticker->addTick(s.stage, tr("stage %1\nrank %2")
                                     .arg(s.stage)
                                     .arg(s.rank ? QString::number(*s.rank) : charts::kUnknown));
        if (shown_.empty())
            continue;
        // The whole window in the bubble colour behind the bars: what shows between them is idle.
        auto* idle = new QCPItemRect(gantt_);
        idle->topLeft->setCoords(time_coord(start), s.stage - kBarHalfHeight);
        idle->bottomRight->setCoords(time_coord(end), s.stage + kBarHalfHeight);
        idle->setPen(Qt::NoPen);
        idle->setBrush(palette::bubble());
    }
    const std::set<PassKey> critical = critical_pass_keys(*run_->analysis);
    for (const auto& pass : shown_) {
        auto* bar = new QCPItemRect(gantt_);
        bar->topLeft->setCoords(time_coord(pass.start_ns), pass.stage - kBarHalfHeight);
        bar->bottomRight->setCoords(time_coord(pass.end_ns), pass.stage + kBarHalfHeight);
        bar->setBrush(palette::phase(pass.phase));
        const PassKey key{pass.rank, pass.step, pass.microbatch, pass.phase};
        if (critical.count(key) > 0) {
            shown_critical_.push_back(key);
            bar->setPen(QPen(palette::critical(), 2.5));
        } else {
            bar->setPen(QPen(Qt::white, 1));
        }
    }
    // Inside a pass, the pipeline receives are the stage waiting on its neighbour: bubble too
    // (busy = wall − pipeline receive time), so they are shaded over the bar, where they were.
    for (const auto& s : stages) {
        const analysis::RankTrace* rank =
            run_->trace && s.rank ? run_->trace->find_rank(*s.rank) : nullptr;
        if (!rank || shown_.empty())
            continue;
        for (const auto& lane : rank->lanes) {
            for (const auto& event : lane.events) {
                if (event.start_ns < start || event.end_ns > end ||
                    event.end_ns <= event.start_ns ||
                    run_->trace->role(event) != analysis::Role::pipeline_recv) {
                    continue;
                }
                shown_waits_.push_back({s.stage, event.start_ns, event.end_ns});
                auto* wait = new QCPItemRect(gantt_);
                wait->topLeft->setCoords(time_coord(event.start_ns), s.stage - kBarHalfHeight);
                wait->bottomRight->setCoords(time_coord(event.end_ns), s.stage + kBarHalfHeight);
                wait->setPen(Qt::NoPen);
                wait->setBrush(palette::bubble());
            }
        }
    }
    // The kind, micro-batch and virtual stage (F3 v1) sit in the bar's upper part, leaving its
    // middle to its colour. Without interleaving every pass is chunk 0, which says nothing.
    const bool interleaved = std::any_of(shown_.begin(), shown_.end(),
                                         [](const analysis::Pass& pass) { return pass.chunk > 0; });
    for (const auto& pass : shown_) {
        auto* label = new QCPItemText(gantt_);
        label->position->setCoords(time_coord((pass.start_ns + pass.end_ns) / 2),
                                   pass.stage - kBarHalfHeight * 0.6);
        label->setText(pass_label(pass.phase, pass.microbatch, interleaved ? pass.chunk : -1));
        label->setFont(label_font);
        label->setColor(Qt::white);
        label->setClipToAxisRect(true);
    }
    gantt_->yAxis->setTicker(ticker);
    gantt_->yAxis->setRange(-0.6, std::max<double>(0, pipeline->stages - 1) + 0.6);
    if (!shown_.empty()) {
        const double span = time_coord(end);
        gantt_->xAxis->setRange(-0.02 * span, span * 1.02 + 1e-9);
    }
    gantt_->replot();

    // The measured fraction of each stage, stacked from its causes, against (p−1)/m.
    QVector<double> keys, warmup, unequal, other;
    auto stage_ticker = QSharedPointer<QCPAxisTickerText>::create();
    for (const auto& s : stages) {
        stage_ticker->addTick(s.stage, QString::number(s.stage));
        if (s.busy_ns <= 0)
            continue;  // never busy: no fraction, no bar
        const double busy = static_cast<double>(s.busy_ns);
        keys << s.stage;
        warmup << static_cast<double>(s.warmup_cooldown_ns) / busy;
        unequal << static_cast<double>(s.unequal_microbatch_ns) / busy;
        other << static_cast<double>(s.other_ns) / busy;
    }
    auto make_bars = [&](const QString& name, const QVector<double>& values, const QColor& colour,
                         QCPBars* below) {
        auto* bars = new QCPBars(fractions_->xAxis, fractions_->yAxis);
        bars->setName(name);
        bars->setData(keys, values, true);
        bars->setBrush(colour);
        bars->setPen(QPen(colour.darker(130)));
        bars->setWidth(0.6);
        if (below)
            bars->moveAbove(below);
        return bars;
    };
    auto* warmup_bars = make_bars(tr("warm-up/cool-down"), warmup, palette::bubble(), nullptr);
    auto* unequal_bars =
        make_bars(tr("unequal micro-batches"), unequal, palette::predicted(), warmup_bars);
    make_bars(tr("other"), other, palette::category(Category::other), unequal_bars);
    auto* theory = new QCPItemStraightLine(fractions_);
    theory->point1->setCoords(0, pipeline->theory_fraction);
    theory->point2->setCoords(1, pipeline->theory_fraction);
    theory->setPen(QPen(palette::theory(), 2, Qt::DashLine));
    auto* theory_label = new QCPItemText(fractions_);
    theory_label->position->setType(QCPItemPosition::ptAxisRectRatio);
    theory_label->position->setCoords(0.02, 0.01);
    theory_label->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
    theory_label->setText(tr("- - theory\n%1 = %2")
                              .arg(QString::fromUtf8(analysis::theory_formula(bubbles)))
                              .arg(charts::format_percent(pipeline->theory_fraction)));
    theory_label->setColor(palette::theory());
    fractions_->xAxis->setTicker(stage_ticker);
    fractions_->xAxis->setRange(-0.6, std::max<double>(0, pipeline->stages - 1) + 0.6);
    double top = pipeline->theory_fraction;
    for (const auto& s : stages)
        top = std::max(top, s.bubble_fraction.value_or(0.0));
    for (int i = 0; i < keys.size(); ++i)
        top = std::max(top, warmup[i] + unequal[i] + other[i]);
    fractions_->yAxis->setRange(0, top * 1.25 + 1e-9);
    fractions_->replot();
}

}  // namespace fulcrum::views
