// Where a layout's ranks sit on a cluster's nodes, and what follows for its collectives: which
// groups leave their node, over how many nodes, and how many groups leave one node at the same
// time (they share its network links). A framework numbers ranks in an order of the grid's
// dimensions, fastest-varying first, and a node holds `gpus_per_node` consecutive ranks.
// Megatron-LM numbers TP fastest, then CP, DP and PP (its default order "tp-cp-ep-dp-pp",
// megatron/core/parallel_state.py, without experts); fulcrum-train numbers TP, CP, PP, DP
// (grid.h, as picotron does). docs/simulate.md, "Ranks on nodes".
#pragma once

#include <array>
#include <initializer_list>
#include <string>
#include <string_view>

#include "core/parallel/grid.h"
#include "core/util/result.h"

namespace fulcrum::parallel {

enum class Dimension { tp, cp, dp, pp };
const char* dimension_name(Dimension dimension);  // "tp", "cp", "dp", "pp"

// The grid's dimensions in the order ranks are numbered, fastest-varying first.
struct RankOrder {
    std::array<Dimension, 4> fastest_first{Dimension::tp, Dimension::cp, Dimension::dp,
                                           Dimension::pp};
    friend bool operator==(const RankOrder&, const RankOrder&) = default;
};

// Megatron-LM's default: TP, CP, DP, PP. What the simulator and the planner assume of a
// cluster run unless told otherwise.
inline constexpr RankOrder kMegatronOrder{};
// fulcrum-train's engine/distributed/topology (grid.h's rank_of): TP, CP, PP, DP.
inline constexpr RankOrder kFulcrumOrder{
    {Dimension::tp, Dimension::cp, Dimension::pp, Dimension::dp}};

inline constexpr std::string_view kRankOrderHelp =
    "the grid's dimensions fastest-varying first, each once: tp-cp-dp-pp (Megatron-LM's), "
    "tp-cp-pp-dp (fulcrum-train's), or another order of the four";

// "tp-cp-dp-pp": the four dimensions, each once, joined by '-'.
Result<RankOrder> parse_rank_order(std::string_view text);
std::string rank_order_name(const RankOrder& order);

// The rank of `coordinates` when ranks are numbered in `order`.
int rank_in_order(const GridShape& grid, const RankOrder& order, const GridCoordinates& c);

// One communication group (the ranks that differ only in some dimensions) on the nodes.
struct GroupPlacement {
    int ranks = 1;           // members of the group
    int nodes = 1;           // nodes the group has members on
    int ranks_per_node = 1;  // the group's members on one of its nodes (the most on any)
    // Groups of the same dimensions with members on one node (the most on any node): they run
    // their collectives at the same time (every rank reaches a layer's, a step's, together),
    // so those that leave the node share its network links.
    int groups_per_node = 1;
    bool leaves_node() const { return nodes > 1; }
    friend bool operator==(const GroupPlacement&, const GroupPlacement&) = default;
};

// The groups of `dimensions` (for instance {dp, cp}: the gradient reduction over both) under
// `order`, on nodes of `gpus_per_node` ranks. Every group of them is laid out alike; this
// describes the one of rank 0, and counts the groups on rank 0's node.
GroupPlacement place_group(const GridShape& grid, const RankOrder& order,
                           std::initializer_list<Dimension> dimensions, int gpus_per_node);

// Two ranks `stages_apart` pipeline stages apart, stage 0's and its partner's: a pipeline
// boundary's sends (1: every boundary is laid out alike when pp divides evenly), or the tied
// embedding's all-reduce between the first and the last stage (pp − 1); and how many such
// pairs leave one node at once (every rank of a stage sends at the same time).
GroupPlacement place_pipeline_pair(const GridShape& grid, const RankOrder& order, int gpus_per_node,
                                   int stages_apart = 1);

// Every kind of group a layout's collectives run over, placed under `order`: what the
// simulator prices (core/sim/stage_costs.cpp) and the planner compares orders by.
struct LayoutPlacement {
    GroupPlacement tp, cp;
    GroupPlacement dp_cp;           // the gradient reduction's DP × CP group
    GroupPlacement pipeline_pair;   // a pipeline boundary's sends
    GroupPlacement embedding_pair;  // the tied embedding's all-reduce, first and last stage
    friend bool operator==(const LayoutPlacement&, const LayoutPlacement&) = default;
};
LayoutPlacement place_layout(const GridShape& grid, const RankOrder& order, int gpus_per_node);

}  // namespace fulcrum::parallel
