#include "core/parallel/placement.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

namespace fulcrum::parallel {
namespace {

int size_of(const GridShape& grid, Dimension dimension) {
    switch (dimension) {
        case Dimension::tp:
            return grid.tp;
        case Dimension::cp:
            return grid.cp;
        case Dimension::dp:
            return grid.dp;
        case Dimension::pp:
            return grid.pp;
    }
    return 1;
}

int& coordinate(GridCoordinates& c, Dimension dimension) {
    switch (dimension) {
        case Dimension::tp:
            return c.tp;
        case Dimension::cp:
            return c.cp;
        case Dimension::dp:
            return c.dp;
        case Dimension::pp:
            break;
    }
    return c.pp;
}

GridCoordinates coordinates_in_order(const GridShape& grid, const RankOrder& order, int rank) {
    GridCoordinates c;
    for (Dimension dimension : order.fastest_first) {
        const int size = std::max(size_of(grid, dimension), 1);
        coordinate(c, dimension) = rank % size;
        rank /= size;
    }
    return c;
}

bool in(std::initializer_list<Dimension> dimensions, Dimension dimension) {
    return std::find(dimensions.begin(), dimensions.end(), dimension) != dimensions.end();
}

// The coordinates outside `dimensions`: which group of them a rank is in.
std::array<int, 4> group_key(GridCoordinates c, std::initializer_list<Dimension> dimensions) {
    for (Dimension dimension : dimensions) {
        coordinate(c, dimension) = 0;
    }
    return {c.tp, c.cp, c.dp, c.pp};
}

}  // namespace

const char* dimension_name(Dimension dimension) {
    switch (dimension) {
        case Dimension::tp:
            return "tp";
        case Dimension::cp:
            return "cp";
        case Dimension::dp:
            return "dp";
        case Dimension::pp:
            return "pp";
    }
    return "?";
}

Result<RankOrder> parse_rank_order(std::string_view text) {
    const auto invalid = [&] {
        return Error{ErrorCode::invalid_input, "--rank-order '" + std::string(text) +
                                                   "' is not an order of tp, cp, dp and pp (" +
                                                   std::string(kRankOrderHelp) + ")"};
    };
    RankOrder order;
    std::set<Dimension> seen;
    std::size_t start = 0;
    for (std::size_t i = 0; i < 4; ++i) {
        const std::size_t end = std::min(text.find('-', start), text.size());
        const std::string_view word = text.substr(start, end - start);
        bool known = false;
        for (Dimension dimension : {Dimension::tp, Dimension::cp, Dimension::dp, Dimension::pp}) {
            if (word == dimension_name(dimension)) {
                order.fastest_first[i] = dimension;
                known = seen.insert(dimension).second;
            }
        }
        if (!known || (i < 3 && end == text.size()) || (i == 3 && end != text.size())) {
            return invalid();
        }
        start = end + 1;
    }
    return order;
}

std::string rank_order_name(const RankOrder& order) {
    std::string name;
    for (Dimension dimension : order.fastest_first) {
        name += (name.empty() ? "" : "-") + std::string(dimension_name(dimension));
    }
    return name;
}

int rank_in_order(const GridShape& grid, const RankOrder& order, const GridCoordinates& c) {
    int rank = 0, stride = 1;
    GridCoordinates coordinates = c;
    for (Dimension dimension : order.fastest_first) {
        rank += coordinate(coordinates, dimension) * stride;
        stride *= std::max(size_of(grid, dimension), 1);
    }
    return rank;
}

GroupPlacement place_group(const GridShape& grid, const RankOrder& order,
                           std::initializer_list<Dimension> dimensions, int gpus_per_node) {
    const int per_node = std::max(gpus_per_node, 1);
    // The members of rank 0's group: every combination of the group's coordinates.
    std::vector<int> members{0};
    for (Dimension dimension : order.fastest_first) {
        if (!in(dimensions, dimension)) {
            continue;
        }
        GridCoordinates unit;
        coordinate(unit, dimension) = 1;
        const int stride = rank_in_order(grid, order, unit);
        std::vector<int> grown;
        for (int i = 0; i < std::max(size_of(grid, dimension), 1); ++i) {
            for (int member : members) {
                grown.push_back(member + i * stride);
            }
        }
        members = std::move(grown);
    }
    std::map<int, int> on_node;
    for (int member : members) {
        ++on_node[member / per_node];
    }
    GroupPlacement placement;
    placement.ranks = static_cast<int>(members.size());
    placement.nodes = static_cast<int>(on_node.size());
    for (const auto& [node, count] : on_node) {
        placement.ranks_per_node = std::max(placement.ranks_per_node, count);
    }
    std::set<std::array<int, 4>> groups;
    for (int rank = 0; rank < std::min(per_node, grid.world()); ++rank) {
        groups.insert(group_key(coordinates_in_order(grid, order, rank), dimensions));
    }
    placement.groups_per_node = static_cast<int>(groups.size());
    return placement;
}

LayoutPlacement place_layout(const GridShape& grid, const RankOrder& order, int gpus_per_node) {
    return {.tp = place_group(grid, order, {Dimension::tp}, gpus_per_node),
            .cp = place_group(grid, order, {Dimension::cp}, gpus_per_node),
            .dp_cp = place_group(grid, order, {Dimension::dp, Dimension::cp}, gpus_per_node),
            .pipeline_pair = place_pipeline_pair(grid, order, gpus_per_node),
            .embedding_pair = place_pipeline_pair(grid, order, gpus_per_node, grid.pp - 1)};
}

GroupPlacement place_pipeline_pair(const GridShape& grid, const RankOrder& order, int gpus_per_node,
                                   int stages_apart) {
    GroupPlacement pair;
    if (grid.pp < 2 || stages_apart < 1 || stages_apart >= grid.pp) {
        return pair;
    }
    const int per_node = std::max(gpus_per_node, 1);
    pair.ranks = 2;
    // The sends from rank 0's node to the next stage that leave the node, all at once.
    int leaving = 0;
    for (int rank = 0; rank < std::min(per_node, grid.world()); ++rank) {
        GridCoordinates c = coordinates_in_order(grid, order, rank);
        if (c.pp + stages_apart >= grid.pp) {
            continue;
        }
        c.pp += stages_apart;
        if (rank_in_order(grid, order, c) / per_node != rank / per_node) {
            ++leaving;
        }
    }
    GridCoordinates next;
    next.pp = stages_apart;
    const bool crosses = rank_in_order(grid, order, next) / per_node != 0;
    pair.nodes = crosses ? 2 : 1;
    pair.ranks_per_node = crosses ? 1 : 2;
    pair.groups_per_node = std::max(leaving, 1);
    return pair;
}

}  // namespace fulcrum::parallel
