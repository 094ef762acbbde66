// What every rank trains at every step: the documents of the run, cut into global batches,
// packed into micro-batches by a balancer (core/balance), dealt to the DP replicas, and
// sharded across the CP group.
//
// The plan of a step is made once, on rank 0, and broadcast (plan_step): the ILP balancer
// stops at a wall-clock limit, so two ranks planning on their own could disagree. Packing
// time is then part of the step, as it is in a real job.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/balance/cp_shard.h"
#include "core/balance/lengths.h"
#include "core/balance/packing.h"
#include "core/util/result.h"
#include "engine/data/corpus.h"

namespace fulcrum::engine {

class Communicator;

// The documents a run trains on; a document's id is its index.
struct TrainingDocuments {
    std::vector<std::string> texts;
    std::string description;  // for the run's config and the summary line

    std::int64_t total_tokens() const;
};

struct DataOptions {
    std::string data_dir;  // text files; empty: the built-in corpus (Debian's licence texts)
    DocumentSplit split = DocumentSplit::blank_line;
    // Empty: the text's own documents. Otherwise a length spec (balance/lengths.h) for
    // synthetic documents whose bytes are drawn from the text.
    std::string lengths_spec;
    std::int64_t synthetic_documents = 4096;
    std::int64_t max_length = 1024;  // the context: no micro-batch holds more
    std::uint64_t seed = 1;
};

// The corpus every machine has: /usr/share/common-licenses (Debian's base-files).
inline constexpr const char* kBuiltinCorpus = "/usr/share/common-licenses";

// Text documents longer than the context are cut into context-long pieces (as every
// LLM data pipeline does); a length file that asks for a longer document is an error,
// since it stands for real data that would not fit.
Result<TrainingDocuments> load_training_documents(const DataOptions& options);

struct PlannerOptions {
    balance::PackingOptions packing;  // microbatches = N per DP replica, capacity = context
    int dp = 1;
    int cp = 1;
    balance::CpSharding sharding = balance::CpSharding::per_document;
    std::uint64_t seed = 1;
    // ilp packs this many global batches jointly (balance::pack_ilp_window); 1: one at a time.
    int ilp_window = 4;
};

struct PlannedMicroBatch {
    balance::MicroBatch packed;  // documents, Σd, Σd², predicted cost
    balance::CpPlan cp;          // which token ranges each CP rank holds
};

struct StepPlan {
    int step = 0;
    int epoch = 0;
    // [dp replica][micro-batch]; every replica has the same number of micro-batches.
    std::vector<std::vector<PlannedMicroBatch>> replicas;
    std::int64_t target_tokens = 0;  // Σ (d − 1) over every document of the step
    double imbalance = 1.0;          // max / mean Σd² over all the step's micro-batches
};

// Deterministic for its seed. Each epoch visits the documents in a new shuffled order; at
// its end the balancer's delayed documents are drained into extra steps, so every document
// is trained exactly once per epoch.
class StepPlanner {
public:
    static Result<StepPlanner> create(const TrainingDocuments& documents, PlannerOptions options);

    // The next step's packing (replicas, without CP plans), on the planning rank.
    Result<std::vector<std::vector<balance::MicroBatch>>> pack_next();
    // Adds CP plans and totals to a packing; every rank runs this identically.
    Result<StepPlan> complete(std::vector<std::vector<balance::MicroBatch>> replicas);

    int epoch() const { return epoch_; }

private:
    StepPlanner(const TrainingDocuments& documents, PlannerOptions options);
    Status start_epoch();
    Result<std::vector<std::vector<balance::MicroBatch>>> pack_one();
    std::vector<std::vector<balance::MicroBatch>> deal_to_replicas(
        std::vector<balance::MicroBatch> microbatches) const;

    const TrainingDocuments* documents_;
    PlannerOptions options_;
    balance::PackingOptions global_;  // N·dp micro-batches per global batch
    balance::PackingState state_;
    balance::CpShardingState cp_state_;
    std::vector<std::vector<balance::Document>> batches_;  // this epoch's global batches
    std::size_t next_batch_ = 0;
    std::vector<balance::PackedBatch> window_;  // ilp: packed batches not yet trained
    std::size_t next_window_ = 0;
    std::vector<balance::PackedBatch> drained_;
    std::size_t next_drained_ = 0;
    int epoch_ = -1;
    int step_ = 0;
};

// Plans a step on rank 0 of `world` and broadcasts it; every rank returns the same plan.
Result<StepPlan> plan_step(StepPlanner& planner, Communicator& world);

// The documents of a micro-batch as byte strings, in packed order.
std::vector<std::string_view> document_bytes(const TrainingDocuments& documents,
                                             const balance::MicroBatch& microbatch);

}  // namespace fulcrum::engine
