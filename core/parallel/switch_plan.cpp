#include "core/parallel/switch_plan.h"

#include <algorithm>
#include <numeric>

#include "core/parallel/schedule.h"

namespace fulcrum::parallel {

namespace {

// The pipeline stage a unit sits on under a layout; the head's copy of the embedding sits on
// the last stage, the embedding on the first.
int stage_of(const SwitchModel& model, const parallel::GridShape& grid, int unit) {
    if (unit < 0)
        return 0;
    if (unit >= model.layers)
        return grid.pp - 1;
    for (int s = 0; s < grid.pp; ++s) {
        const parallel::LayerRange range = parallel::stage_layers(s, grid.pp, model.layers);
        if (unit >= range.first && unit < range.last)
            return s;
    }
    return grid.pp - 1;
}

// Ranks holding [begin, end) of a unit: its stage, the TP slice that contains it, any DP and CP.
std::vector<int> holders(const SwitchModel& model, const parallel::GridShape& grid, int unit,
                         double begin) {
    const int stage = stage_of(model, grid, unit);
    const int slice = std::min(grid.tp - 1, static_cast<int>(begin * grid.tp + 1e-9));
    std::vector<int> ranks;
    for (int dp = 0; dp < grid.dp; ++dp) {
        for (int cp = 0; cp < grid.cp; ++cp) {
            ranks.push_back(
                parallel::rank_of(grid, {.dp = dp, .tp = slice, .pp = stage, .cp = cp}));
        }
    }
    return ranks;
}

}  // namespace

SwitchPlan plan_switch(const SwitchModel& model, const parallel::GridShape& from,
                       const parallel::GridShape& to, int gpus_per_node) {
    SwitchPlan plan;
    const int world = from.world();
    plan.sent.assign(world, 0.0);
    plan.received.assign(world, 0.0);
    const int per_node = std::max(gpus_per_node, 1);
    const int pieces = std::lcm(from.tp, to.tp);
    std::vector<int> units;
    if (model.embedding_bytes > 0)
        units.push_back(-1);
    for (int l = 0; l < model.layers; ++l)
        units.push_back(l);
    if (model.embedding_bytes > 0 && model.tied_head)
        units.push_back(model.layers);
    for (int unit : units) {
        const double unit_bytes =
            unit >= 0 && unit < model.layers ? model.layer_bytes : model.embedding_bytes;
        for (int k = 0; k < pieces; ++k) {
            const double begin = double(k) / pieces, end = double(k + 1) / pieces;
            // The head's copy only exists with more than one stage.
            const bool head = unit >= model.layers;
            if (head && from.pp == 1 && to.pp == 1)
                continue;
            std::vector<int> owners = holders(model, from, unit, begin);
            if (head && from.pp == 1)
                owners = holders(model, from, -1, begin);  // from the embedding
            if (head && to.pp == 1)
                continue;  // nobody needs a second copy
            for (int destination : holders(model, to, unit, begin)) {
                if (std::find(owners.begin(), owners.end(), destination) != owners.end())
                    continue;
                // The owner that has sent least, one on the destination's node first.
                int source = -1;
                bool source_local = false;
                for (int owner : owners) {
                    const bool local = owner / per_node == destination / per_node;
                    if (source < 0 || (local && !source_local) ||
                        (local == source_local && plan.sent[owner] < plan.sent[source])) {
                        source = owner;
                        source_local = local;
                    }
                }
                const double bytes = unit_bytes * (end - begin);
                plan.transfers.push_back({unit, begin, end, source, destination, bytes});
                plan.sent[source] += bytes;
                plan.received[destination] += bytes;
                plan.total_bytes += bytes;
                (source_local ? plan.intra_node_bytes : plan.inter_node_bytes) += bytes;
            }
        }
    }
    plan.largest_send_bytes =
        plan.sent.empty() ? 0.0 : *std::max_element(plan.sent.begin(), plan.sent.end());
    return plan;
}

}  // namespace fulcrum::parallel
