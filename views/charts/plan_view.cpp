#include "views/charts/plan_view.h"

#include <qcustomplot.h>

#include <QHeaderView>
#include <QHelpEvent>
#include <QLabel>
#include <QPushButton>
#include <QSplitter>
#include <QTableView>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "core/report/plan_section.h"
#include "views/charts/chart_common.h"
#include "views/common/palette.h"

namespace fulcrum::views {

namespace {

using plan::Candidate;
using plan::CandidateStatus;

// Infeasible candidates: grey, as in the report (core/report/plan_section.cpp).
const QColor kInfeasible(0xb5, 0xb5, 0xb5);

// Where a candidate is drawn: its peak memory (GiB; those beyond twice the GPU's memory at that
// edge, the tooltip has the figure) and tokens/s (0 when it has no estimate). Candidates without
// memory figures (invalid layouts) are not drawn.
std::optional<QPointF> drawn_at(const Candidate& c, const plan::PlanRequest& request) {
    if (!(c.memory.total_gib > 0)) {
        return std::nullopt;
    }
    return QPointF(std::min(c.memory.total_gib, 2 * request.gpu_memory_gib),
                   std::max(c.tokens_per_second, 0.0));
}

int schedule_index(const plan::PlanRequest& request, parallel::PipelineSchedule schedule) {
    const auto& all = request.space.schedules;
    return static_cast<int>(std::find(all.begin(), all.end(), schedule) - all.begin());
}

QString tip(const Candidate& c, int rank) {
    QString text =
        QStringLiteral("dp×tp×pp×cp %1, m %2, %3, %4, %5")
            .arg(QString::fromStdString(report::layout_text(c)))
            .arg(c.layout.microbatches)
            .arg(QString::fromStdString(report::schedule_text(c)),
                 QString::fromStdString(report::knobs_text(c)), balance::balancer_name(c.balancer));
    text += QStringLiteral("\n%1").arg(plan::candidate_status_name(c.status));
    if (rank > 0)
        text += QStringLiteral(" #%1").arg(rank);
    text += QStringLiteral(": %1 GiB peak").arg(c.memory.total_gib, 0, 'f', 1);
    if (c.tokens_per_second > 0)
        text += QStringLiteral(", %1 tokens/s, MFU %2")
                    .arg(c.tokens_per_second, 0, 'f', 0)
                    .arg(charts::format_percent(c.mfu));
    if (!c.reason.empty())
        text += QStringLiteral("\n%1").arg(QString::fromStdString(c.reason));
    return text;
}

}  // namespace

// ---- A plan read back from `fulcrum plan --json` ----

// The one reader of the plan's JSON (core/plan/planner.h), as `fulcrum report --plan` reads it.
Result<PlanData> read_plan_json(const QByteArray& json) {
    auto file = plan::parse_plan_json(std::string_view(json.constData(), json.size()));
    if (!file) {
        return file.error();
    }
    return PlanData{std::move(file->request), std::move(file->result)};
}

// ---- The table of the top k ----

void PlanTableModel::set_plan(PlanPtr plan) {
    beginResetModel();
    plan_ = std::move(plan);
    rows_ = plan_ ? static_cast<int>(std::min<std::size_t>(
                        plan_->result.ranked.size(),
                        static_cast<std::size_t>(std::max(plan_->request.top_k, 0))))
                  : 0;
    endResetModel();
}

const Candidate* PlanTableModel::candidate(int row) const {
    if (!plan_ || row < 0 || row >= rows_)
        return nullptr;
    return &plan_->result.candidates[plan_->result.ranked[static_cast<std::size_t>(row)]];
}

int PlanTableModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : rows_;
}
int PlanTableModel::columnCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : column_count;
}

QVariant PlanTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
    static const char* const kHeaders[] = {
        "rank", "dp×tp×pp×cp", "m",   "schedule", "recompute / SP", "balancer", "sharding",
        "step", "tokens/s",    "MFU", "peak GiB", "bubble",         "imbalance"};
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole || section < 0 ||
        section >= column_count)
        return {};
    return tr(kHeaders[section]);
}

QVariant PlanTableModel::data(const QModelIndex& index, int role) const {
    const Candidate* c = candidate(index.row());
    if (c == nullptr || (role != Qt::DisplayRole && role != ValueRole && role != Qt::ToolTipRole &&
                         role != Qt::TextAlignmentRole))
        return {};
    if (role == Qt::ToolTipRole)
        return tip(*c, index.row() + 1);
    const int column = index.column();
    if (role == Qt::TextAlignmentRole) {
        const bool text = column >= layout && column <= sharding && column != microbatches;
        return QVariant::fromValue(Qt::AlignVCenter | (text ? Qt::AlignLeft : Qt::AlignRight));
    }
    const bool value = role == ValueRole;
    switch (column) {
        case rank:
            return index.row() + 1;
        case layout:
            return QString::fromStdString(report::layout_text(*c));
        case microbatches:
            return c->layout.microbatches;
        case schedule:
            return QString::fromStdString(report::schedule_text(*c));
        case knobs:
            return QString::fromStdString(report::knobs_text(*c));
        case balancer:
            return QString(balance::balancer_name(c->balancer));
        case sharding:
            return c->layout.grid.cp > 1 ? QString(balance::cp_sharding_name(c->sharding))
                                         : QString("-");
        case step:
            return value ? QVariant(c->step_ns) : QVariant(charts::format_ms(c->step_ns));
        case tokens_per_second:
            return value ? QVariant(c->tokens_per_second)
                         : QVariant(QString::number(c->tokens_per_second, 'f', 0));
        case mfu:
            return value ? QVariant(c->mfu) : QVariant(charts::format_percent(c->mfu));
        case peak_gib:
            return value ? QVariant(c->memory.total_gib)
                         : QVariant(QString::number(c->memory.total_gib, 'f', 1));
        case bubble:
            return value ? QVariant(c->bubble_fraction)
                         : QVariant(charts::format_percent(c->bubble_fraction));
        case imbalance:
            return value ? QVariant(c->imbalance) : QVariant(QString::number(c->imbalance, 'f', 2));
        default:
            return {};
    }
}

// ---- The view ----

PlanView::PlanView(QWidget* parent)
    : QWidget(parent),
      plot_(new QCustomPlot),
      summary_(new QLabel),
      reasons_(new QLabel),
      table_(new QTableView),
      model_(new PlanTableModel(this)),
      rerun_(new QPushButton(tr("Re-run this layout…"))) {
    plot_->xAxis->setLabel(tr("peak memory of the fullest rank (GiB)"));
    plot_->yAxis->setLabel(tr("predicted tokens/s"));
    plot_->setMinimumHeight(260);
    plot_->setMouseTracking(true);
    connect(plot_, &QCustomPlot::mouseMove, this, &PlanView::hover);
    connect(plot_, &QCustomPlot::mousePress, this, &PlanView::click);
    summary_->setWordWrap(true);
    reasons_->setWordWrap(true);
    reasons_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    table_->setModel(model_);
    table_->setSelectionBehavior(QAbstractItemView::SelectRows);
    table_->setSelectionMode(QAbstractItemView::SingleSelection);
    table_->verticalHeader()->hide();
    table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    connect(table_->selectionModel(), &QItemSelectionModel::selectionChanged, this, [this] {
        highlight(selected_candidate());
        rerun_->setEnabled(selected_candidate() != nullptr);
    });
    connect(table_, &QTableView::doubleClicked, this, [this] { rerun_->click(); });
    rerun_->setEnabled(false);
    rerun_->setToolTip(
        tr("Open the re-run dialog with this layout, when its world fits this "
           "machine; otherwise copy its fulcrum-train command"));
    connect(rerun_, &QPushButton::clicked, this, [this] {
        if (const Candidate* c = selected_candidate())
            emit rerun_requested(*c);
    });

    auto* below = new QWidget;
    auto* below_layout = new QVBoxLayout(below);
    below_layout->setContentsMargins(0, 0, 0, 0);
    below_layout->addWidget(table_, 1);
    auto* buttons = new QHBoxLayout;
    buttons->addWidget(reasons_, 1);
    buttons->addWidget(rerun_, 0, Qt::AlignTop);
    below_layout->addLayout(buttons);
    auto* split = new QSplitter(Qt::Vertical);
    split->addWidget(plot_);
    split->addWidget(below);
    auto* content = new QWidget;
    auto* layout = new QVBoxLayout(content);
    layout->addWidget(summary_);
    layout->addWidget(split, 1);
    stack_ = new charts::MessageStack(content, this);
    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(0, 0, 0, 0);
    outer->addWidget(stack_);
    set_plan(nullptr);
}

PlanView::~PlanView() = default;

void PlanView::set_plan(PlanPtr plan) {
    plan_ = std::move(plan);
    model_->set_plan(plan_);
    rerun_->setEnabled(false);
    draw();
    if (!plan_) {
        stack_->show_message(
            tr("No plan yet.\nRun ▸ Plan Layouts… searches the layouts of a world of GPUs for "
               "the open run's model (or one you describe); File ▸ Open Plan… reads what "
               "`fulcrum plan --json` wrote."));
        return;
    }
    stack_->show_content();
    if (model_->rowCount() > 0)
        select_row(0);
}

QString PlanView::message() const {
    return stack_->message();
}

void PlanView::draw() {
    plot_->clearGraphs();
    plot_->clearItems();
    graphs_.clear();
    highlight_ = nullptr;
    if (!plan_) {
        plot_->replot();
        return;
    }
    const plan::PlanRequest& request = plan_->request;
    const plan::PlanResult& result = plan_->result;
    const int schedules = static_cast<int>(request.space.schedules.size());
    // Per status and schedule: infeasible first, ranked last, so the answer is drawn on top.
    auto add = [&](CandidateStatus status, const QColor& color, int alpha, double size) {
        QColor fill = color;
        fill.setAlpha(alpha);
        auto* graph = plot_->addGraph();
        graph->setLineStyle(QCPGraph::lsNone);
        graph->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, fill, fill, size));
        graphs_.emplace_back(status, graph);
        return graph;
    };
    auto* infeasible = add(CandidateStatus::infeasible, kInfeasible, 200, 5);
    std::vector<QCPGraph*> estimated, dominated, ranked, top;
    for (int s = 0; s <= schedules; ++s) {
        dominated.push_back(add(CandidateStatus::dominated, palette::run(s), 50, 4));
        estimated.push_back(add(CandidateStatus::estimated, palette::run(s), 90, 5));
    }
    for (int s = 0; s <= schedules; ++s)
        ranked.push_back(add(CandidateStatus::ranked, palette::run(s), 170, 7));
    for (int s = 0; s <= schedules; ++s) {
        top.push_back(add(CandidateStatus::ranked, palette::run(s), 255, 11));
        top.back()->setName(QString(parallel::schedule_name(
            s < schedules ? request.space.schedules[static_cast<std::size_t>(s)]
                          : parallel::PipelineSchedule::one_f_one_b)));
    }
    std::vector<int> rank_of(result.candidates.size(), 0);
    for (std::size_t i = 0; i < result.ranked.size(); ++i)
        rank_of[result.ranked[i]] = static_cast<int>(i) + 1;
    double x_top = request.gpu_memory_gib, y_top = 0;
    for (std::size_t i = 0; i < result.candidates.size(); ++i) {
        const Candidate& c = result.candidates[i];
        const auto at = drawn_at(c, request);
        if (!at)
            continue;
        const auto s = static_cast<std::size_t>(schedule_index(request, c.layout.schedule));
        QCPGraph* graph = c.status == CandidateStatus::infeasible  ? infeasible
                          : c.status == CandidateStatus::dominated ? dominated[s]
                          : c.status == CandidateStatus::estimated ? estimated[s]
                          : rank_of[i] <= request.top_k            ? top[s]
                                                                   : ranked[s];
        graph->addData(at->x(), at->y());
        x_top = std::max(x_top, at->x());
        y_top = std::max(y_top, at->y());
    }
    highlight_ = plot_->addGraph();
    highlight_->setLineStyle(QCPGraph::lsNone);
    highlight_->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle,
                                                QPen(palette::highlight(), 2.5), Qt::NoBrush, 18));
    auto* budget = new QCPItemStraightLine(plot_);
    budget->setPen(QPen(palette::slower(), 1.5, Qt::DashLine));
    budget->point1->setCoords(budget_gib(), 0);
    budget->point2->setCoords(budget_gib(), 1);
    plot_->xAxis->setRange(0, x_top * 1.05);
    // A little below 0, so that candidates without an estimate (on the axis) show whole.
    plot_->yAxis->setRange(-0.04 * std::max(y_top, 1.0), std::max(y_top, 1.0) * 1.1);
    const plan::PlanCounts& counts = result.counts;
    summary_->setText(
        tr("%1 candidates in %2 s (%3): %4 do not fit, %5 fit with less recomputation, %6 "
           "estimated, %7 simulated. Coloured by schedule, the top %8 large; light: estimated "
           "only; grey: does not fit (hover for the reason). Dashed: the memory budget, %9 GiB.")
            .arg(counts.enumerated)
            .arg(result.elapsed_s, 0, 'f', 1)
            .arg(QString::fromStdString(result.cost_source))
            .arg(counts.infeasible)
            .arg(counts.dominated)
            .arg(counts.estimated + counts.simulated)
            .arg(counts.simulated)
            .arg(request.top_k)
            .arg(budget_gib(), 0, 'f', 0));
    reasons_->setText(reasons_text());
    plot_->replot();
}

double PlanView::budget_gib() const {
    return plan_ ? plan_->request.gpu_memory_gib * plan_->request.usable_memory_fraction : 0;
}

QString PlanView::reasons_text() const {
    if (!plan_ || plan_->result.counts.infeasible_by_reason.empty())
        return {};
    QStringList lines;
    for (const auto& [kind, n] : plan_->result.counts.infeasible_by_reason)
        lines << tr("%1 × %2").arg(n).arg(QString::fromStdString(kind));
    return tr("Do not fit: %1").arg(lines.join(QStringLiteral("; ")));
}

int PlanView::point_count(CandidateStatus status) const {
    int n = 0;
    for (const auto& [graph_status, graph] : graphs_)
        n += graph_status == status ? graph->dataCount() : 0;
    return n;
}

QColor PlanView::point_color(CandidateStatus status) const {
    for (const auto& [graph_status, graph] : graphs_) {
        if (graph_status == status && graph->dataCount() > 0)
            return graph->scatterStyle().brush().color();
    }
    return {};
}

void PlanView::highlight(const Candidate* candidate) {
    if (highlight_ == nullptr)
        return;
    highlight_->data()->clear();
    if (candidate != nullptr) {
        if (const auto at = drawn_at(*candidate, plan_->request))
            highlight_->addData(at->x(), at->y());
    }
    plot_->replot();
}

QPointF PlanView::highlighted_point() const {
    if (highlight_ == nullptr || highlight_->dataCount() == 0)
        return {std::nan(""), std::nan("")};
    const auto point = highlight_->data()->at(0);
    return {point->key, point->value};
}

void PlanView::select_row(int row) {
    if (row < 0 || row >= model_->rowCount()) {
        table_->clearSelection();
        return;
    }
    table_->selectRow(row);
}

int PlanView::selected_row() const {
    const auto rows = table_->selectionModel()->selectedRows();
    return rows.isEmpty() ? -1 : rows.front().row();
}

const Candidate* PlanView::selected_candidate() const {
    return model_->candidate(selected_row());
}

const Candidate* PlanView::candidate_near(const QPointF& pixel) const {
    if (!plan_)
        return nullptr;
    const Candidate* best = nullptr;
    double best_distance = 8 * 8;
    for (const Candidate& c : plan_->result.candidates) {
        const auto at = drawn_at(c, plan_->request);
        if (!at)
            continue;
        const double dx = plot_->xAxis->coordToPixel(at->x()) - pixel.x();
        const double dy = plot_->yAxis->coordToPixel(at->y()) - pixel.y();
        // Ties go to the better status: the ranked point drawn on top of an infeasible one.
        if (dx * dx + dy * dy < best_distance ||
            (best != nullptr && dx * dx + dy * dy == best_distance && c.status < best->status)) {
            best_distance = dx * dx + dy * dy;
            best = &c;
        }
    }
    return best;
}

QString PlanView::tooltip_at(double gib, double tokens_per_second) const {
    const Candidate* c = candidate_near(
        {plot_->xAxis->coordToPixel(gib), plot_->yAxis->coordToPixel(tokens_per_second)});
    if (c == nullptr)
        return {};
    const auto& ranked = plan_->result.ranked;
    const auto index = static_cast<std::size_t>(c - plan_->result.candidates.data());
    const auto found = std::find(ranked.begin(), ranked.end(), index);
    return tip(*c, found == ranked.end() ? 0 : static_cast<int>(found - ranked.begin()) + 1);
}

void PlanView::hover(QMouseEvent* event) {
    const QPointF pixel = event->position();
    const QString text =
        tooltip_at(plot_->xAxis->pixelToCoord(pixel.x()), plot_->yAxis->pixelToCoord(pixel.y()));
    if (text.isEmpty())
        QToolTip::hideText();
    else
        QToolTip::showText(event->globalPosition().toPoint(), text, plot_);
}

// A click on one of the top k selects its row; on another point, highlights it alone.
void PlanView::click(QMouseEvent* event) {
    const Candidate* c = candidate_near(event->position());
    if (c == nullptr)
        return;
    for (int row = 0; row < model_->rowCount(); ++row) {
        if (model_->candidate(row) == c) {
            select_row(row);
            return;
        }
    }
    table_->clearSelection();
    highlight(c);
}

}  // namespace fulcrum::views
