#include "engine/distributed/topology.h"

namespace fulcrum::engine {

Result<Topology> Topology::create(GridShape shape, int world_size, int rank) {
    if (shape.dp < 1 || shape.pp < 1 || shape.cp < 1 || shape.tp < 1) {
        return Error{ErrorCode::invalid_input, "every parallel degree must be at least 1"};
    }
    if (shape.world() != world_size) {
        return Error{ErrorCode::invalid_input,
                     "dp × tp × pp × cp = " + std::to_string(shape.dp) + " × " +
                         std::to_string(shape.tp) + " × " + std::to_string(shape.pp) + " × " +
                         std::to_string(shape.cp) + " = " + std::to_string(shape.world()) +
                         ", but " + std::to_string(world_size) +
                         " processes were started; start that many (mpirun -np " +
                         std::to_string(shape.world()) + ") or change the degrees"};
    }
    if (rank < 0 || rank >= world_size) {
        return Error{ErrorCode::invalid_input, "rank " + std::to_string(rank) +
                                                   " is outside the world of " +
                                                   std::to_string(world_size)};
    }
    Topology topology;
    topology.shape_ = shape;
    topology.rank_ = rank;
    topology.coordinates_ = topology.coordinates_of(rank);
    topology.tp_group_ = topology.group_varying(&GridCoordinates::tp, shape.tp);
    topology.cp_group_ = topology.group_varying(&GridCoordinates::cp, shape.cp);
    topology.pp_group_ = topology.group_varying(&GridCoordinates::pp, shape.pp);
    topology.dp_group_ = topology.group_varying(&GridCoordinates::dp, shape.dp);
    for (int dp = 0; dp < shape.dp; ++dp) {
        for (int cp = 0; cp < shape.cp; ++cp) {
            GridCoordinates c = topology.coordinates_;
            c.dp = dp;
            c.cp = cp;
            topology.dp_cp_group_.push_back(topology.rank_of(c));
        }
    }
    return topology;
}

GridCoordinates Topology::coordinates_of(int rank) const {
    return parallel::coordinates_of(shape_, rank);
}

int Topology::rank_of(const GridCoordinates& c) const {
    return parallel::rank_of(shape_, c);
}

std::vector<int> Topology::group_varying(int GridCoordinates::*axis, int size) const {
    std::vector<int> group;
    for (int i = 0; i < size; ++i) {
        GridCoordinates c = coordinates_;
        c.*axis = i;
        group.push_back(rank_of(c));
    }
    return group;
}

int Topology::previous_stage_rank() const {
    return first_stage() ? -1 : pp_group_[coordinates_.pp - 1];
}

int Topology::next_stage_rank() const {
    return last_stage() ? -1 : pp_group_[coordinates_.pp + 1];
}

std::string Topology::describe() const {
    return parallel::describe(shape_);
}

std::string Topology::describe_ranks() const {
    std::string out;
    for (int r = 0; r < shape_.world(); ++r) {
        const GridCoordinates c = coordinates_of(r);
        out += "rank " + std::to_string(r) + ": dp" + std::to_string(c.dp) + " tp" +
               std::to_string(c.tp) + " pp" + std::to_string(c.pp) + " cp" + std::to_string(c.cp) +
               "\n";
    }
    return out;
}

}  // namespace fulcrum::engine
