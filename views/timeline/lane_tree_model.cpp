#include "views/timeline/lane_tree_model.h"

#include <map>

#include "views/timeline/timeline_layout.h"

namespace fulcrum::views::timeline {

namespace {

std::int32_t coordinate_of(const RankInfo& info, Grouping grouping) {
    switch (grouping) {
        case Grouping::dp:
            return info.dp;
        case Grouping::pp:
            return info.pp;
        case Grouping::cp:
            return info.cp;
        case Grouping::tp:
            return info.tp;
        case Grouping::none:
            break;
    }
    return -1;
}

QString coordinate_text(std::int32_t value) {
    return value < 0 ? QStringLiteral("?") : QString::number(value);
}

}  // namespace

QString grouping_label(Grouping grouping) {
    switch (grouping) {
        case Grouping::dp:
            return QStringLiteral("DP replica");
        case Grouping::pp:
            return QStringLiteral("PP stage");
        case Grouping::cp:
            return QStringLiteral("CP rank");
        case Grouping::tp:
            return QStringLiteral("TP rank");
        case Grouping::none:
            break;
    }
    return QStringLiteral("none");
}

LaneTreeModel::LaneTreeModel(QObject* parent) : QAbstractItemModel(parent) {}

void LaneTreeModel::set_run(const analysis::RunTrace* trace, const Layout* layout) {
    beginResetModel();
    trace_ = trace;
    layout_ = layout;
    rebuild();
    endResetModel();
}

void LaneTreeModel::set_grouping(Grouping grouping) {
    if (grouping == grouping_) {
        return;
    }
    beginResetModel();
    grouping_ = grouping;
    collapsed_groups_.clear();
    rebuild();
    endResetModel();
}

void LaneTreeModel::rebuild() {
    nodes_.clear();
    top_.clear();
    if (trace_ == nullptr || layout_ == nullptr) {
        return;
    }
    auto add = [&](Node node, int parent) {
        const int id = static_cast<int>(nodes_.size());
        node.parent = parent;
        std::vector<int>& siblings = parent < 0 ? top_ : nodes_[parent].children;
        node.row = static_cast<int>(siblings.size());
        siblings.push_back(id);
        nodes_.push_back(std::move(node));
        return id;
    };
    // Groups in coordinate order; unknown (-1) first, as the map sorts it.
    std::map<std::int32_t, int> group_of;
    if (grouping_ != Grouping::none) {
        std::map<std::int32_t, int> sizes;
        for (const analysis::RankTrace& rank : trace_->ranks) {
            ++sizes[coordinate_of(rank.info, grouping_)];
        }
        for (const auto& [value, size] : sizes) {
            Node group;
            group.kind = NodeKind::group;
            group.coordinate = value;
            group.label = QStringLiteral("%1 %2  (%3 rank%4)")
                              .arg(grouping_label(grouping_), coordinate_text(value))
                              .arg(size)
                              .arg(size == 1 ? QString() : QStringLiteral("s"));
            group.expanded = collapsed_groups_.count(value) == 0;
            group_of[value] = add(std::move(group), -1);
        }
    }
    std::size_t row = 0;
    for (const analysis::RankTrace& rank : trace_->ranks) {
        const RankInfo& info = rank.info;
        Node node;
        node.kind = NodeKind::rank;
        node.rank = info.rank;
        node.label = QStringLiteral("rank %1  dp%2 pp%3 cp%4 tp%5")
                         .arg(info.rank)
                         .arg(coordinate_text(info.dp), coordinate_text(info.pp),
                              coordinate_text(info.cp), coordinate_text(info.tp));
        node.expanded = collapsed_ranks_.count(info.rank) == 0;
        const int parent =
            grouping_ == Grouping::none ? -1 : group_of[coordinate_of(info, grouping_)];
        const int rank_node = add(std::move(node), parent);
        for (const analysis::LaneTrace& lane : rank.lanes) {
            // Layout rows are in the same rank-then-lane order as the trace.
            Node leaf;
            leaf.kind = NodeKind::lane;
            leaf.rank = info.rank;
            leaf.lane_row = static_cast<int>(row++);
            leaf.label = QStringLiteral("%1 (%2)").arg(QString::fromStdString(lane.info.name),
                                                       lane.info.kind == LaneKind::gpu_stream
                                                           ? QStringLiteral("stream")
                                                           : QStringLiteral("thread"));
            leaf.expanded = false;
            add(std::move(leaf), rank_node);
        }
    }
}

const LaneTreeModel::Node* LaneTreeModel::node(const QModelIndex& index) const {
    if (!index.isValid() || index.internalId() >= nodes_.size()) {
        return nullptr;
    }
    return &nodes_[index.internalId()];
}

QModelIndex LaneTreeModel::index(int row, int column, const QModelIndex& parent) const {
    if (column != 0 || row < 0 || (parent.isValid() && parent.column() != 0)) {
        return {};
    }
    const std::vector<int>& children = parent.isValid() ? node(parent)->children : top_;
    if (row >= static_cast<int>(children.size())) {
        return {};
    }
    return createIndex(row, 0, static_cast<quintptr>(children[row]));
}

QModelIndex LaneTreeModel::parent(const QModelIndex& child) const {
    const Node* n = node(child);
    if (n == nullptr || n->parent < 0) {
        return {};
    }
    return createIndex(nodes_[n->parent].row, 0, static_cast<quintptr>(n->parent));
}

int LaneTreeModel::rowCount(const QModelIndex& parent) const {
    if (!parent.isValid()) {
        return static_cast<int>(top_.size());
    }
    if (parent.column() != 0) {
        return 0;
    }
    return static_cast<int>(node(parent)->children.size());
}

int LaneTreeModel::columnCount(const QModelIndex&) const {
    return 1;
}

QVariant LaneTreeModel::data(const QModelIndex& index, int role) const {
    const Node* n = node(index);
    if (n == nullptr) {
        return {};
    }
    switch (role) {
        case Qt::DisplayRole:
            return n->label;
        case NodeKindRole:
            return static_cast<int>(n->kind);
        case RankRole:
            return n->rank;
        case LaneRowRole:
            return n->lane_row;
        case ExpandedRole:
            return n->expanded;
        case CoordinateRole:
            return n->coordinate;
        default:
            break;
    }
    return {};
}

bool LaneTreeModel::setData(const QModelIndex& index, const QVariant& value, int role) {
    const Node* n = node(index);
    if (n == nullptr || role != ExpandedRole || n->kind == NodeKind::lane) {
        return false;
    }
    Node& target = nodes_[index.internalId()];
    target.expanded = value.toBool();
    if (target.kind == NodeKind::rank) {
        if (target.expanded) {
            collapsed_ranks_.erase(target.rank);
        } else {
            collapsed_ranks_.insert(target.rank);
        }
    } else if (target.expanded) {
        collapsed_groups_.erase(target.coordinate);
    } else {
        collapsed_groups_.insert(target.coordinate);
    }
    emit dataChanged(index, index, {ExpandedRole});
    return true;
}

Qt::ItemFlags LaneTreeModel::flags(const QModelIndex& index) const {
    if (!index.isValid()) {
        return Qt::NoItemFlags;
    }
    Qt::ItemFlags result = Qt::ItemIsEnabled | Qt::ItemIsSelectable;
    if (node(index)->kind == NodeKind::lane) {
        result |= Qt::ItemNeverHasChildren;
    }
    return result;
}

QVariant LaneTreeModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (section == 0 && orientation == Qt::Horizontal && role == Qt::DisplayRole) {
        return QStringLiteral("Rank / lane");
    }
    return {};
}

QModelIndex LaneTreeModel::rank_index(std::int32_t rank) const {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
        if (nodes_[i].kind == NodeKind::rank && nodes_[i].rank == rank) {
            return createIndex(nodes_[i].row, 0, static_cast<quintptr>(i));
        }
    }
    return {};
}

void LaneTreeModel::reveal_rank(std::int32_t rank) {
    const QModelIndex index = rank_index(rank);
    if (!index.isValid()) {
        return;
    }
    if (!index.data(ExpandedRole).toBool()) {
        setData(index, true, ExpandedRole);
    }
    const QModelIndex group = index.parent();
    if (group.isValid() && !group.data(ExpandedRole).toBool()) {
        setData(group, true, ExpandedRole);
    }
}

}  // namespace fulcrum::views::timeline
