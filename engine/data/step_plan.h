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
#include "core/balance/step_planner.h"
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

using balance::PlannedMicroBatch;
using balance::PlannerOptions;
using balance::StepPlan;
using balance::StepPlanner;

// Bytes are tokens: the planner sees each document's text length.
std::vector<std::int64_t> document_lengths(const TrainingDocuments& documents);

// Plans a step on rank 0 of `world` and broadcasts it; every rank returns the same plan.
Result<StepPlan> plan_step(StepPlanner& planner, Communicator& world);

// The documents of a micro-batch as byte strings, in packed order.
std::vector<std::string_view> document_bytes(const TrainingDocuments& documents,
                                             const balance::MicroBatch& microbatch);

}  // namespace fulcrum::engine
