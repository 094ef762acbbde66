// Switching the parallel layout between length buckets inside a step (HotSPa, SOSP'24): the
// parameters (and gradient accumulators) held under one DP × PP × CP × TP layout are moved,
// point to point, to where the next layout needs them. This plans the moves with HotSPa's
// heuristic (its Algorithm 1): for every slice, every destination that does not hold it yet
// gets it from the owner that has sent the least so far, an owner on the destination's node
// (NVLink) before any other. Links are full duplex, so the aim is the smallest largest
// volume any one device sends.
//
// What a rank holds under a layout: the layers of its pipeline stage (split as the engine
// splits them, core/parallel/schedule.h stage_layers), of each its TP slice [t/T, (t+1)/T)
// (every tensor of the layer cut into T equal parts), whatever its DP and CP coordinates;
// the token embedding sits with the first stage and, tied, a copy with the last.
#pragma once

#include <cstdint>
#include <vector>

#include "core/parallel/grid.h"

namespace fulcrum::parallel {

struct SwitchModel {
    int layers = 1;
    double layer_bytes = 0;      // what one layer's parameters (and accumulators) take
    double embedding_bytes = 0;  // the token embedding; 0 to leave it out
    bool tied_head = true;       // the last stage holds a copy of the embedding when pp > 1
};

struct SwitchTransfer {
    int unit = 0;               // layer index; −1 the embedding, `layers` the head's copy of it
    double begin = 0, end = 0;  // the slice of the unit, as fractions of it
    int source = 0, destination = 0;
    double bytes = 0;
};

struct SwitchPlan {
    std::vector<SwitchTransfer> transfers;
    std::vector<double> sent, received;  // bytes by rank
    double total_bytes = 0;
    double largest_send_bytes = 0;  // the figure the heuristic keeps small
    double intra_node_bytes = 0, inter_node_bytes = 0;
};

// The moves from layout `from` to layout `to` over the same world; `gpus_per_node` ranks in
// rank order share a node.
SwitchPlan plan_switch(const SwitchModel& model, const parallel::GridShape& from,
                       const parallel::GridShape& to, int gpus_per_node);

}  // namespace fulcrum::parallel
