#include "views/charts/hot_switch_view.h"

#include <QHeaderView>
#include <QLabel>
#include <QTableView>
#include <QVBoxLayout>
#include <cmath>

#include "core/util/text_table.h"
#include "views/charts/chart_common.h"

namespace fulcrum::views {

namespace {

QString qt(const std::string& text) {
    return QString::fromStdString(text);
}

QString bytes_text(double bytes) {
    return qt(format_bytes(std::llround(bytes)));
}

}  // namespace

HotSwitchModel::HotSwitchModel(Table table, QObject* parent)
    : QAbstractTableModel(parent), table_(table) {}

void HotSwitchModel::set_analysis(const analysis::HotSwitchAnalysis* analysis) {
    beginResetModel();
    headers_.clear();
    row_headers_.clear();
    rows_.clear();
    if (analysis != nullptr && !analysis->empty() && table_ == Table::breakdown) {
        headers_ = {tr("bucket"),        tr("layout"), tr("documents"), tr("tokens"),
                    tr("micro-batches"), tr("time"),   tr("share")};
        for (const analysis::HotSwitchBreakdownRow& row : analysis::breakdown_rows(*analysis)) {
            const bool bucket = row.kind == analysis::HotSwitchBreakdownRow::Kind::bucket;
            const auto count = [&](std::int64_t n) {
                return bucket ? Cell{QString::number(n), qlonglong(n), {}, {}} : Cell{};
            };
            rows_.push_back({{qt(row.label), {}, {}, {}},
                             {qt(row.layout), {}, {}, {}},
                             count(row.documents),
                             count(row.tokens),
                             count(row.microbatches),
                             {qt(format_duration(row.ns)), qlonglong(row.ns), {}, {}},
                             {charts::format_percent(row.share), row.share, {}, {}}});
        }
    } else if (analysis != nullptr && !analysis->empty()) {
        for (const std::string& layout : analysis->layouts) {
            headers_ << qt(layout);
            row_headers_ << qt(layout);
        }
        for (const std::string& from : analysis->layouts) {
            std::vector<Cell> row;
            for (const std::string& to : analysis->layouts) {
                const analysis::HotSwitchCost* cell = analysis->cost(from, to);
                if (cell == nullptr || cell->count == 0) {
                    // The diagonal is no switch; elsewhere none was made.
                    row.push_back({from == to ? QString() : charts::kUnknown, {}, {}, {}});
                    continue;
                }
                const double ns = static_cast<double>(cell->ns) / cell->count;
                const double bytes = cell->bytes / cell->count;
                row.push_back(
                    {QStringLiteral("%1 / %2").arg(qt(format_duration(std::llround(ns))),
                                                   bytes_text(bytes)),
                     ns, bytes,
                     tr("%1 → %2: %3 switches; per switch %4, %5 sent by all ranks, at most %6 by "
                        "one, %7 between nodes")
                         .arg(qt(from), qt(to))
                         .arg(cell->count)
                         .arg(qt(format_duration(std::llround(ns))), bytes_text(bytes),
                              bytes_text(cell->largest_send_bytes),
                              bytes_text(cell->inter_node_bytes / cell->count))});
            }
            rows_.push_back(std::move(row));
        }
    }
    endResetModel();
}

int HotSwitchModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : static_cast<int>(rows_.size());
}

int HotSwitchModel::columnCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : static_cast<int>(headers_.size());
}

QVariant HotSwitchModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || index.row() >= rowCount() || index.column() >= columnCount()) {
        return {};
    }
    const Cell& cell =
        rows_[static_cast<std::size_t>(index.row())][static_cast<std::size_t>(index.column())];
    switch (role) {
        case Qt::DisplayRole:
            return cell.text;
        case Qt::ToolTipRole:
            return cell.tip.isEmpty() ? QVariant() : QVariant(cell.tip);
        case Qt::TextAlignmentRole:
            return table_ == Table::breakdown && index.column() < 2
                       ? QVariant(Qt::AlignLeft | Qt::AlignVCenter)
                       : QVariant(Qt::AlignRight | Qt::AlignVCenter);
        case ValueRole:
            return cell.value;
        case BytesRole:
            return cell.bytes;
        default:
            return {};
    }
}

QVariant HotSwitchModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (role != Qt::DisplayRole) {
        return {};
    }
    const QStringList& headers = orientation == Qt::Horizontal ? headers_ : row_headers_;
    return section >= 0 && section < headers.size() ? QVariant(headers[section]) : QVariant();
}

HotSwitchView::HotSwitchView(QWidget* parent)
    : QWidget(parent),
      summary_(new QLabel),
      breakdown_(new HotSwitchModel(HotSwitchModel::Table::breakdown, this)),
      matrix_(new HotSwitchModel(HotSwitchModel::Table::matrix, this)),
      breakdown_view_(new QTableView),
      matrix_view_(new QTableView) {
    auto* content = new QWidget;
    auto* layout = new QVBoxLayout(content);
    summary_->setWordWrap(true);
    layout->addWidget(summary_);
    const auto add = [&](const QString& text, QTableView* view, HotSwitchModel* model) {
        auto* title = new QLabel(text);
        QFont bold = title->font();
        bold.setBold(true);
        title->setFont(bold);
        title->setWordWrap(true);
        view->setModel(model);
        view->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
        layout->addWidget(title);
        layout->addWidget(view, 1);
    };
    add(tr("Time per length bucket under its layout (HotSPa's breakdown; 'others' is the "
           "switching), summed over the steps"),
        breakdown_view_, breakdown_);
    breakdown_view_->verticalHeader()->hide();
    add(tr("Switch cost, layout i (row) → j (column): mean time and bytes sent by all ranks per "
           "switch; the tooltip has the count, the largest send and the bytes between nodes"),
        matrix_view_, matrix_);
    stack_ = new charts::MessageStack(content, this);
    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(0, 0, 0, 0);
    outer->addWidget(stack_);
    set_run(nullptr);
}

HotSwitchView::~HotSwitchView() = default;

bool HotSwitchView::applies(const RunPtr& run) {
    return run && run->analysis && !run->analysis->hot_switch.empty();
}

void HotSwitchView::set_run(RunPtr run) {
    run_ = std::move(run);
    const analysis::HotSwitchAnalysis* hot = applies(run_) ? &run_->analysis->hot_switch : nullptr;
    breakdown_->set_analysis(hot);
    matrix_->set_analysis(hot);
    if (const QString missing = charts::missing_analysis(run_); !missing.isEmpty()) {
        stack_->show_message(missing);
        return;
    }
    if (hot == nullptr) {
        stack_->show_message(
            tr("This run did not switch layouts: hot switching runs each length bucket of a step "
               "under its own layout (fulcrum-train or fulcrum simulate --hot-switch SPEC)."));
        return;
    }
    summary_->setText(tr("%1 steps, %2 in all: %3 switching, %4 in the rest (the optimizer step; "
                         "each bucket holds its own gradient reduction). Spec: %5")
                          .arg(hot->steps)
                          .arg(qt(format_duration(hot->step_ns)))
                          .arg(charts::format_percent(hot->switching_share))
                          .arg(qt(format_duration(hot->rest_ns)))
                          .arg(run_->trace ? qt(run_->trace->config.hot_switch) : QString()));
    stack_->show_content();
}

QString HotSwitchView::message() const {
    return stack_->message();
}

QString HotSwitchView::summary() const {
    return summary_->text();
}

HotSwitchModel* HotSwitchView::model(HotSwitchModel::Table table) const {
    return table == HotSwitchModel::Table::breakdown ? breakdown_ : matrix_;
}

QTableView* HotSwitchView::view(HotSwitchModel::Table table) const {
    return table == HotSwitchModel::Table::breakdown ? breakdown_view_ : matrix_view_;
}

}  // namespace fulcrum::views
