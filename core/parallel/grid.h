// The 4D process grid: its degrees and a rank's coordinates, always declared and printed in
// the order DP × TP × PP × CP (the product users write; docs/code-map.md). Ranks are numbered
// as picotron numbers them (`arange(world).view(dp, pp, cp, tp)`): TP is the fastest-varying
// coordinate, so TP peers are neighbouring ranks (one node), then CP, PP, DP. The engine's
// topology, the simulator and the planner number ranks this one way. Initialise by name
// (`GridShape{.dp = 2, .pp = 2}`): a positional list reads in declaration order.
#pragma once

#include <string>

namespace fulcrum::parallel {

struct GridShape {
    int dp = 1, tp = 1, pp = 1, cp = 1;
    int world() const { return dp * tp * pp * cp; }
    friend bool operator==(const GridShape&, const GridShape&) = default;
};

struct GridCoordinates {
    int dp = 0, tp = 0, pp = 0, cp = 0;
    friend bool operator==(const GridCoordinates&, const GridCoordinates&) = default;
};

constexpr int rank_of(const GridShape& shape, const GridCoordinates& c) {
    return ((c.dp * shape.pp + c.pp) * shape.cp + c.cp) * shape.tp + c.tp;
}

constexpr GridCoordinates coordinates_of(const GridShape& shape, int rank) {
    GridCoordinates c;
    c.tp = rank % shape.tp;
    rank /= shape.tp;
    c.cp = rank % shape.cp;
    rank /= shape.cp;
    c.pp = rank % shape.pp;
    c.dp = rank / shape.pp;
    return c;
}

// "dp 2 × tp 2 × pp 2 × cp 1"
inline std::string describe(const GridShape& shape) {
    return "dp " + std::to_string(shape.dp) + " × tp " + std::to_string(shape.tp) + " × pp " +
           std::to_string(shape.pp) + " × cp " + std::to_string(shape.cp);
}

}  // namespace fulcrum::parallel
