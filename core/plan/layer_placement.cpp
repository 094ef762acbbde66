// Where a candidate's layers go (docs/plan.md, "The exact layer split"): the split that
// minimises the slowest stage with every stage in memory, and the memory figures of the
// placement. Declared in planner.h.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/parallel/memory_model.h"
#include "core/plan/planner.h"
#include "core/util/text_table.h"

namespace fulcrum::plan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

MemoryBreakdown breakdown(const parallel::StageMemory& memory) {
    MemoryBreakdown out;
    out.stage = memory.stage;
    out.weights_gib = memory.weights_bytes / kGiB;
    out.gradients_gib = memory.gradients_bytes / kGiB;
    out.optimizer_gib = memory.optimizer_bytes / kGiB;
    out.activations_gib = memory.activations_bytes / kGiB;
    out.total_gib = memory.total_bytes() / kGiB;
    return out;
}

// The memory a stage needs with `layers` layers on it, memoised per (stage, layers).
class StageMemoryTable {
public:
    StageMemoryTable(const parallel::MemoryShape& shape) : shape_(shape) {
        table_.resize(static_cast<std::size_t>(std::max(shape.layout.grid.pp, 1)) *
                      static_cast<std::size_t>(shape.model.layers + 1));
    }
    const parallel::StageMemory& at(int stage, int layers) {
        auto& cell = table_[static_cast<std::size_t>(stage) *
                                static_cast<std::size_t>(shape_.model.layers + 1) +
                            static_cast<std::size_t>(layers)];
        if (!cell) {
            // A whole split that gives `stage` its layers and the rest to the other stages
            // (as evenly as they go, each at least one: the DP asks for no more), so the
            // shape stays valid; a stage's memory depends on its own layers alone.
            parallel::MemoryShape shape = shape_;
            const int p = shape.layout.grid.pp, rest = shape.model.layers - layers;
            shape.layout.stage_layers.assign(static_cast<std::size_t>(p), 0);
            for (int s = 0, other = 0; s < p; ++s) {
                if (s == stage) {
                    shape.layout.stage_layers[static_cast<std::size_t>(s)] = layers;
                    continue;
                }
                shape.layout.stage_layers[static_cast<std::size_t>(s)] =
                    rest / (p - 1) + (other < rest % (p - 1) ? 1 : 0);
                ++other;
            }
            cell = parallel::stage_memory(shape, stage);
        }
        return *cell;
    }

private:
    parallel::MemoryShape shape_;
    std::vector<std::optional<parallel::StageMemory>> table_;
};

std::string memory_reason(const parallel::StageMemory& peak, double usable) {
    return "needs " + format_bytes(std::llround(peak.total_bytes())) + " on stage " +
           std::to_string(peak.stage) + " (model state " +
           format_bytes(std::llround(peak.model_state_bytes())) + " + activations " +
           format_bytes(std::llround(peak.activations_bytes)) + ") of " +
           format_bytes(std::llround(usable)) + " usable";
}

}  // namespace

std::vector<int> split_layers(int layers, int stages, double layer_ns, double first_ns,
                              double last_ns, const std::function<bool(int, int)>& fits) {
    if (stages < 1 || layers < stages) {
        return {};
    }
    constexpr double kNever = std::numeric_limits<double>::infinity();
    const auto n = static_cast<std::size_t>(layers);
    // best[s][i]: the least bottleneck of the first i layers on stages 0..s-1; from[s][i] the
    // layers before stage s-1's (the argmin), to read the split back.
    std::vector<std::vector<double>> best(static_cast<std::size_t>(stages) + 1,
                                          std::vector<double>(n + 1, kNever));
    std::vector<std::vector<int>> from(best.size(), std::vector<int>(n + 1, -1));
    best[0][0] = 0;
    for (int s = 1; s <= stages; ++s) {
        const int stage = s - 1;
        const double extra = (stage == 0 ? first_ns : 0.0) + (stage == stages - 1 ? last_ns : 0.0);
        // Every stage after this one needs a layer.
        for (int i = s; i <= layers - (stages - s); ++i) {
            for (int j = s - 1; j < i; ++j) {
                const double before =
                    best[static_cast<std::size_t>(s - 1)][static_cast<std::size_t>(j)];
                if (before == kNever || !fits(stage, i - j)) {
                    continue;
                }
                const double bottleneck = std::max(before, (i - j) * layer_ns + extra);
                auto& cell = best[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)];
                if (bottleneck < cell) {
                    cell = bottleneck;
                    from[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)] = j;
                }
            }
        }
    }
    if (best[static_cast<std::size_t>(stages)][n] == kNever) {
        return {};
    }
    std::vector<int> split(static_cast<std::size_t>(stages));
    int i = layers;
    for (int s = stages; s >= 1; --s) {
        const int j = from[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)];
        split[static_cast<std::size_t>(s - 1)] = i - j;
        i = j;
    }
    return split;
}

bool place_layers(const PlanRequest& request, Candidate& candidate,
                  const sim::StepEstimate& equal) {
    const parallel::MemoryShape shape = memory_shape(request, candidate);
    const double usable = usable_bytes(request);
    const int p = candidate.layout.grid.pp;
    const parallel::StageMemory equal_peak = parallel::peak_stage_memory(shape);
    double host_peak = 0;
    for (int stage = 0; stage < p; ++stage) {
        host_peak = std::max(host_peak, parallel::stage_memory(shape, stage).host_bytes);
    }
    if (host_peak * request.gpus_per_node > request.host_memory_gib * kGiB) {
        candidate.memory = breakdown(equal_peak);
        candidate.reason =
            "offloads " + format_bytes(std::llround(host_peak)) + " a GPU to host memory, " +
            format_bytes(std::llround(host_peak * request.gpus_per_node)) + " a node of " +
            format_bytes(std::llround(request.host_memory_gib * kGiB));
        candidate.reason_kind = "offloads exceed host memory";
        return false;
    }
    if (p > 1 && candidate.layout.virtual_stages == 1 && request.space.exact_layer_split) {
        StageMemoryTable table(shape);
        const int first_layers = request.model.layers / p + (request.model.layers % p > 0);
        const double layer_ns = equal.stage_ns.front() / first_layers;
        const int last_layers = request.model.layers / p;
        const double last_ns = std::max(0.0, equal.stage_ns.back() - last_layers * layer_ns);
        const auto fits = [&](int stage, int n) {
            return table.at(stage, n).total_bytes() <= usable;
        };
        std::vector<int> split =
            split_layers(request.model.layers, p, layer_ns, 0.0, last_ns, fits);
        if (!split.empty()) {
            // fulcrum-train's default split when it fits and is as good: no flag needed.
            std::vector<int> equal_split(static_cast<std::size_t>(p));
            bool equal_fits = true;
            double equal_worst = 0, worst = 0;
            for (int s = 0; s < p; ++s) {
                const auto range = parallel::stage_layers(s, p, request.model.layers);
                const int n = range.last - range.first;
                const double extra = s == p - 1 ? last_ns : 0.0;
                equal_split[static_cast<std::size_t>(s)] = n;
                equal_fits = equal_fits && fits(s, n);
                equal_worst = std::max(equal_worst, n * layer_ns + extra);
                worst = std::max(worst, split[static_cast<std::size_t>(s)] * layer_ns + extra);
            }
            if (equal_fits && equal_worst <= worst * (1 + 1e-12)) {
                split = equal_split;
            }
            parallel::StageMemory peak = table.at(0, split[0]);
            for (int s = 1; s < p; ++s) {
                const parallel::StageMemory& memory =
                    table.at(s, split[static_cast<std::size_t>(s)]);
                if (memory.total_bytes() > peak.total_bytes()) {
                    peak = memory;
                }
            }
            if (split != equal_split) {
                candidate.layout.stage_layers = std::move(split);
            }
            candidate.memory = breakdown(peak);
            return true;
        }
    } else if (equal_peak.total_bytes() <= usable) {
        candidate.memory = breakdown(equal_peak);
        return true;
    }
    candidate.memory = breakdown(equal_peak);
    candidate.reason = memory_reason(equal_peak, usable);
    candidate.reason_kind = equal_peak.model_state_bytes() > usable ? "model state exceeds memory"
                                                                    : "activations exceed memory";
    return false;
}

}  // namespace fulcrum::plan
