// What every rank trains at every step: the documents of a run, cut into global batches,
// packed into micro-batches by a balancer, dealt to the DP replicas and sharded across the CP
// group. Only document lengths matter here, so the training engine (which places data with
// it) and the simulator (which predicts with it) make the same plans from the same lengths
// and seed.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/balance/cp_shard.h"
#include "core/balance/packing.h"
#include "core/balance/wlb_tuning.h"
#include "core/util/result.h"

namespace fulcrum::balance {

struct PlannerOptions {
    PackingOptions packing;  // microbatches = N per DP replica, capacity = context
    int dp = 1;
    int cp = 1;
    CpSharding sharding = CpSharding::per_document;
    std::int64_t cp_chunk = 0;  // chunked sharding's chunk, tokens (cp_shard.h)
    std::uint64_t seed = 1;
    // ilp packs this many global batches jointly (pack_ilp_window); 1: one at a time.
    int ilp_window = 4;
    // > 0: the run is this many epochs, and finished() says when the last one is planned.
    // 0: the caller decides how many steps; epochs follow one another without end.
    int epochs = 0;
    // wlb with no thresholds given (packing.wlb_thresholds unset): true tunes them on the
    // first epoch's global batches before packing any (tune_wlb_thresholds, mean delay at
    // most 1 step), as WLB-LLM tunes them offline on a sample; false takes
    // default_wlb_thresholds.
    bool tune_wlb_thresholds = false;
    // What adaptive CP sharding weighs (cp_shard.h); ideal: attention work alone.
    AttentionKernelModel attention_kernel;
};

struct PlannedMicroBatch {
    MicroBatch packed;  // documents, Σd, Σd², predicted cost
    CpPlan cp;          // which token ranges each CP rank holds
};

struct StepPlan {
    int step = 0;
    int epoch = 0;
    // [dp replica][micro-batch]; every replica has the same number of micro-batches.
    std::vector<std::vector<PlannedMicroBatch>> replicas;
    std::int64_t target_tokens = 0;  // Σ (d − 1) over every document of the step
    double imbalance = 1.0;          // max / mean Σd² over all the step's micro-batches
    std::int64_t tokens = 0;         // Σd over every document of the step
    std::int64_t documents = 0;
    // Σ d · waited over the step's documents (Document::waited: global batches held back),
    // for a token-weighted mean delay; and the longest wait of any of them.
    double delayed_token_steps = 0;
    int max_delay_steps = 0;
    // The planner had planned every step of its epochs (PlannerOptions::epochs) after this.
    bool last = false;
};

// What a run trained: its steps' documents and tokens, and how long documents waited.
struct TrainedTotals {
    int steps = 0;
    std::int64_t tokens = 0;
    std::int64_t documents = 0;
    double delayed_token_steps = 0;
    int max_delay_steps = 0;
    // Micro-batches sharded per document and per sequence (zigzag): adaptive's choices.
    std::int64_t per_document_microbatches = 0;
    std::int64_t zigzag_microbatches = 0;

    void add(const StepPlan& plan);
    // Token-weighted, in steps (global batches): WLB-LLM §4 reports 0.5 for its packer.
    double mean_delay_steps() const;
};

// Deterministic for its seed. Each epoch visits the documents in a new shuffled order; at
// its end the balancer's delayed documents are drained into extra steps, so every document
// is trained exactly once per epoch.
class StepPlanner {
public:
    // lengths[id] is document id's length in tokens; an empty document is skipped.
    static Result<StepPlanner> create(std::vector<std::int64_t> lengths, PlannerOptions options);

    // The next step's packing (replicas, without CP plans), on the planning rank.
    Result<std::vector<std::vector<MicroBatch>>> pack_next();
    // Adds CP plans and totals to a packing; every rank runs this identically.
    Result<StepPlan> complete(std::vector<std::vector<MicroBatch>> replicas);
    // pack_next and complete in one, where one process plans every rank (the simulator and
    // the planners).
    Result<StepPlan> next();

    int epoch() const { return epoch_; }
    // With PlannerOptions::epochs > 0: every step of the last epoch, its drain included, has
    // been packed; pack_next must not be called again.
    bool finished() const;
    // The packing options in force: wlb's thresholds resolved (tuned, given or default).
    const PackingOptions& packing() const { return options_.packing; }
    // How the thresholds were tuned, when they were.
    const std::optional<WlbTuning>& wlb_tuning() const { return wlb_tuning_; }

private:
    StepPlanner(std::vector<std::int64_t> lengths, PlannerOptions options);
    Status start_epoch();
    Result<std::vector<std::vector<MicroBatch>>> pack_one();
    std::vector<std::vector<MicroBatch>> deal_to_replicas(
        std::vector<MicroBatch> microbatches) const;

    std::vector<std::int64_t> lengths_;
    PlannerOptions options_;
    PackingOptions global_;  // N·dp micro-batches per global batch
    PackingState state_;
    CpShardingState cp_state_;
    std::vector<std::vector<Document>> batches_;  // this epoch's global batches
    std::size_t next_batch_ = 0;
    std::vector<PackedBatch> window_;  // ilp: packed batches not yet trained
    std::size_t next_window_ = 0;
    std::vector<PackedBatch> drained_;
    std::size_t next_drained_ = 0;
    int epoch_ = -1;
    int step_ = 0;
    std::optional<WlbTuning> wlb_tuning_;
};

}  // namespace fulcrum::balance
