#include "views/charts/bubble_stage_model.h"

#include "views/charts/chart_common.h"

namespace fulcrum::views {

BubbleStageModel::BubbleStageModel(QObject* parent) : QAbstractTableModel(parent) {}

void BubbleStageModel::set_stages(std::vector<analysis::StageBubble> stages,
                                  std::optional<double> theory, QString formula) {
    beginResetModel();
    stages_ = std::move(stages);
    theory_ = theory;
    formula_ = std::move(formula);
    endResetModel();
    emit headerDataChanged(Qt::Horizontal, theory_fraction, theory_fraction);
}

int BubbleStageModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : static_cast<int>(stages_.size());
}

int BubbleStageModel::columnCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : column_count;
}

QVariant BubbleStageModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || index.row() >= rowCount() || index.column() >= column_count) {
        return {};
    }
    const auto& s = stages_[static_cast<std::size_t>(index.row())];
    // Absent: a stage without passes has no rank and no fraction.
    std::optional<double> value;
    bool is_time = true;
    switch (static_cast<Column>(index.column())) {
        case stage:
            value = s.stage;
            is_time = false;
            break;
        case rank:
            if (s.rank)
                value = *s.rank;
            is_time = false;
            break;
        case measured_fraction:
            value = s.bubble_fraction;
            is_time = false;
            break;
        case theory_fraction:
            value = theory_;
            is_time = false;
            break;
        case bubble:
            value = static_cast<double>(s.bubble_ns);
            break;
        case warmup_cooldown:
            value = static_cast<double>(s.warmup_cooldown_ns);
            break;
        case unequal_microbatches:
            value = static_cast<double>(s.unequal_microbatch_ns);
            break;
        case other:
            value = static_cast<double>(s.other_ns);
            break;
        case wait_on_previous:
            value = static_cast<double>(s.wait_on_previous_ns);
            break;
        case wait_on_next:
            value = static_cast<double>(s.wait_on_next_ns);
            break;
        case column_count:
            return {};
    }
    if (role == ValueRole)
        return value ? QVariant(*value) : QVariant();
    if (role == Qt::TextAlignmentRole) {
        return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
    }
    if (role != Qt::DisplayRole && role != Qt::ToolTipRole)
        return {};
    if (!value)
        return charts::kUnknown;
    if (index.column() == stage || index.column() == rank)
        return QString::number(*value);
    if (!is_time)
        return charts::format_percent(*value);
    return charts::format_ms(*value);
}

QVariant BubbleStageModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
        case stage:
            return tr("Stage");
        case rank:
            return tr("Rank");
        case measured_fraction:
            return tr("Bubble (measured)");
        case theory_fraction:
            return tr("Theory %1").arg(formula_);
        case bubble:
            return tr("Bubble time");
        case warmup_cooldown:
            return tr("Warm-up/cool-down");
        case unequal_microbatches:
            return tr("Unequal micro-batches");
        case other:
            return tr("Other");
        case wait_on_previous:
            return tr("Wait on previous");
        case wait_on_next:
            return tr("Wait on next");
        default:
            return {};
    }
}

}  // namespace fulcrum::views
