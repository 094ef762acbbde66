#include "core/balance/wlb_tuning.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <unordered_map>

namespace fulcrum::balance {

Result<WlbReplay> replay_wlb(std::span<const std::vector<Document>> batches,
                             const PackingOptions& options) {
    PackingOptions wlb = options;
    wlb.balancer = Balancer::wlb;
    PackingState state;
    std::unordered_map<std::uint64_t, int> arrival;
    WlbReplay replay;
    double waited_tokens = 0;
    double total_tokens = 0;

    const auto account = [&](const PackedBatch& packed, int iteration) {
        for (const auto& microbatch : packed.microbatches) {
            for (const auto& document : microbatch.documents) {
                const auto delay = static_cast<double>(iteration - arrival.at(document.id));
                waited_tokens += delay * static_cast<double>(document.length);
                total_tokens += static_cast<double>(document.length);
                replay.max_delay_iterations = std::max(replay.max_delay_iterations, delay);
            }
        }
    };

    int iteration = 0;
    for (const auto& batch : batches) {
        for (const auto& document : batch) {
            arrival[document.id] = iteration;
        }
        auto packed = pack_global_batch(batch, wlb, state);
        if (!packed) {
            return packed.error();
        }
        const double imbalance = imbalance_degree(packed->microbatches);
        replay.mean_imbalance += imbalance;
        replay.max_imbalance = std::max(replay.max_imbalance, imbalance);
        account(*packed, iteration++);
    }
    replay.batches = iteration;
    if (replay.batches > 0) {
        replay.mean_imbalance /= replay.batches;
    }
    auto drained = drain(wlb, state);
    if (!drained) {
        return drained.error();
    }
    replay.drain_batches = static_cast<int>(drained->size());
    for (const auto& packed : *drained) {
        account(packed, iteration++);
    }
    if (total_tokens > 0) {
        replay.mean_delay_iterations = waited_tokens / total_tokens;
    }
    return replay;
}

Result<WlbTuning> tune_wlb_thresholds(std::span<const std::vector<Document>> batches,
                                      const PackingOptions& options,
                                      double max_mean_delay_iterations) {
    const std::int64_t s = options.capacity;
    // Eighths of S, plus finer steps below S/8 where the lognormal body's upper tail lives.
    const std::vector<std::int64_t> grid{s / 32, s / 16,    3 * s / 32, s / 8,     3 * s / 16,
                                         s / 4,  3 * s / 8, s / 2,      5 * s / 8, 3 * s / 4};
    std::vector<std::vector<std::int64_t>> candidates{{}};
    for (std::size_t a = 0; a < grid.size(); ++a) {
        candidates.push_back({grid[a]});
        for (std::size_t b = a + 1; b < grid.size(); ++b) {
            candidates.push_back({grid[a], grid[b]});
            for (std::size_t c = b + 1; c < grid.size(); ++c) {
                candidates.push_back({grid[a], grid[b], grid[c]});
            }
        }
    }

    std::optional<WlbTuning> best;
    for (auto& thresholds : candidates) {
        if (std::adjacent_find(thresholds.begin(), thresholds.end(), std::greater_equal<>()) !=
                thresholds.end() ||
            (!thresholds.empty() && thresholds.front() < 1)) {
            continue;  // a tiny S collapses grid points
        }
        PackingOptions trial = options;
        trial.wlb_thresholds = thresholds;
        auto replay = replay_wlb(batches, trial);
        if (!replay) {
            return replay.error();
        }
        if (replay->mean_delay_iterations > max_mean_delay_iterations) {
            continue;
        }
        if (!best || replay->mean_imbalance < best->replay.mean_imbalance - 1e-9 ||
            (replay->mean_imbalance <= best->replay.mean_imbalance + 1e-9 &&
             thresholds.size() < best->thresholds.size())) {
            best = WlbTuning{std::move(thresholds), *replay};
        }
    }
    if (!best) {
        return Error{ErrorCode::invalid_input,
                     "no WLB threshold setting keeps the mean delay under " +
                         std::to_string(max_mean_delay_iterations) +
                         " iterations on this sample; allow more delay or pass a larger sample"};
    }
    return *best;
}

}  // namespace fulcrum::balance
