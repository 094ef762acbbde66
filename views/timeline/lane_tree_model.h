// The timeline's rows as a tree: group (one 4D coordinate) → rank → lane. The canvas draws
// its row headers from this model and collapses what it says is collapsed, so the tree is the
// one source of truth for what rows are shown (hotspot: one model per view, a role enum).
#pragma once

#include <QAbstractItemModel>
#include <cstdint>
#include <set>
#include <vector>

#include "core/analysis/run_trace.h"

namespace fulcrum::views::timeline {

struct Layout;

enum class Grouping { none = 0, dp, pp, cp, tp };
QString grouping_label(Grouping grouping);  // "DP replica", "PP stage", ...

class LaneTreeModel : public QAbstractItemModel {
    Q_OBJECT
public:
    enum class NodeKind { group = 0, rank = 1, lane = 2 };
    enum Role {
        NodeKindRole = Qt::UserRole + 1,  // NodeKind as int
        RankRole,                         // the rank number (group nodes: -1)
        LaneRowRole,                      // lane nodes: the row in Layout::rows; else -1
        ExpandedRole,                     // bool; settable on groups and ranks
        CoordinateRole,                   // group nodes: the coordinate's value (-1 unknown)
    };

    explicit LaneTreeModel(QObject* parent = nullptr);

    // Rebuilds the tree; collapsed ranks stay collapsed across runs' regroupings.
    void set_run(const analysis::RunTrace* trace, const Layout* layout);
    void set_grouping(Grouping grouping);
    Grouping grouping() const { return grouping_; }

    QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
    QModelIndex parent(const QModelIndex& child) const override;
    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    bool setData(const QModelIndex& index, const QVariant& value, int role) override;
    Qt::ItemFlags flags(const QModelIndex& index) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

    // Expands the rank's node and its group so its rows are shown.
    void reveal_rank(std::int32_t rank);
    QModelIndex rank_index(std::int32_t rank) const;

private:
    struct Node {
        NodeKind kind = NodeKind::group;
        int parent = -1;  // node index; -1 for top-level nodes
        int row = 0;      // position among its parent's children
        std::vector<int> children;
        QString label;
        std::int32_t rank = -1;
        int lane_row = -1;
        std::int32_t coordinate = -1;
        bool expanded = true;
    };
    void rebuild();
    const Node* node(const QModelIndex& index) const;

    const analysis::RunTrace* trace_ = nullptr;
    const Layout* layout_ = nullptr;
    Grouping grouping_ = Grouping::pp;
    std::vector<Node> nodes_;
    std::vector<int> top_;  // top-level node indices
    std::set<std::int32_t> collapsed_ranks_;
    std::set<std::int32_t> collapsed_groups_;  // by coordinate value, for the current grouping
};

}  // namespace fulcrum::views::timeline
