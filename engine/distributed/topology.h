// The 4D process grid, built once (picotron's `arange(world).view(dp, pp, cp, tp)`): TP is the
// fastest-varying coordinate, so TP peers are neighbouring ranks (one node), then CP, PP, DP.
// Every group and pipeline neighbour is derived here, up front; the trace gets the same
// coordinates, so the GUI labels rows from the source the engine used.
#pragma once

#include <string>
#include <vector>

#include "core/parallel/grid.h"
#include "core/util/result.h"

namespace fulcrum::engine {

// The grid's shape and numbering are core's (core/parallel/grid.h), shared with the simulator
// and the planner.
using parallel::GridCoordinates;
using parallel::GridShape;

class Topology {
public:
    // Fails, with a message naming the degrees, when their product is not the world size.
    static Result<Topology> create(GridShape shape, int world_size, int rank);

    const GridShape& shape() const { return shape_; }
    int rank() const { return rank_; }
    const GridCoordinates& coordinates() const { return coordinates_; }
    GridCoordinates coordinates_of(int rank) const;
    int rank_of(const GridCoordinates& coordinates) const;

    // Ranks of this rank's groups, in coordinate order (so index == coordinate).
    const std::vector<int>& tp_group() const { return tp_group_; }
    const std::vector<int>& cp_group() const { return cp_group_; }
    const std::vector<int>& pp_group() const { return pp_group_; }
    const std::vector<int>& dp_group() const { return dp_group_; }
    // Ranks that hold the same parameters and different tokens: gradients are summed here.
    const std::vector<int>& dp_cp_group() const { return dp_cp_group_; }

    bool first_stage() const { return coordinates_.pp == 0; }
    bool last_stage() const { return coordinates_.pp == shape_.pp - 1; }
    int previous_stage_rank() const;  // -1 on the first stage
    int next_stage_rank() const;      // -1 on the last stage

    // "dp 1 × tp 2 × pp 2 × cp 2"
    std::string describe() const;
    // One line per rank: "rank 5: dp0 tp1 pp1 cp0".
    std::string describe_ranks() const;

private:
    Topology() = default;
    std::vector<int> group_varying(int GridCoordinates::*axis, int size) const;

    GridShape shape_;
    int rank_ = 0;
    GridCoordinates coordinates_;
    std::vector<int> tp_group_, cp_group_, pp_group_, dp_group_, dp_cp_group_;
};

}  // namespace fulcrum::engine
