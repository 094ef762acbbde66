// Offline tuning of the WLB-LLM outlier thresholds L_i.
//
// The paper tunes them by replaying the packer on a sample of the data and does not publish
// them (WLB-LLM §3–4; docs/sources.md, "Workload balancing"). The trade-off: a low threshold sends
// more documents to the queues, which balances better, but a queue only releases once it holds N
// documents, so rare lengths wait many iterations. replay_wlb measures both sides;
// tune_wlb_thresholds picks the most balanced candidate whose tokens wait no longer than allowed on
// average.
#pragma once

#include "core/balance/packing.h"

namespace fulcrum::balance {

struct WlbReplay {
    int batches = 0;            // global batches fed, not counting the drain
    int drain_batches = 0;      // extra batches drain() needed at the end
    double mean_imbalance = 0;  // mean over fed batches of max/mean Σd²
    double max_imbalance = 0;
    double mean_delay_iterations = 0;  // token-weighted: iterations a token waited
    double max_delay_iterations = 0;
};

// Packs `batches` in order with options (balancer forced to wlb), then drains.
Result<WlbReplay> replay_wlb(std::span<const std::vector<Document>> batches,
                             const PackingOptions& options);

struct WlbTuning {
    std::vector<std::int64_t> thresholds;
    WlbReplay replay;
};

// Tries no queue and every increasing set of one to three thresholds drawn from fractions of
// the capacity (1/32 … 3/4 of S). Minimises mean imbalance subject to
// mean_delay_iterations ≤ max_mean_delay; ties go to fewer queues.
Result<WlbTuning> tune_wlb_thresholds(std::span<const std::vector<Document>> batches,
                                      const PackingOptions& options,
                                      double max_mean_delay_iterations = 1.0);

}  // namespace fulcrum::balance
