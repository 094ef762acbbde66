// Memory per rank (FPDT's question, issue 38: what each technique costs a rank): each rank's
// peak of counted allocations, device and pinned host, from the `fulcrum.memory` mark
// fulcrum-train writes at its end (core/trace/annotations.h), beside the memory model's
// prediction for its pipeline stage under the run's layout and techniques — fulcrum-train's own
// count (core/parallel/memory_model.h, engine_stage_memory), for runs on the CPU backend, whose
// counted allocations are what it counts — in parts: model state, workspace, activations.
//
// The prediction is for micro-batches that all hold the full context (docs/plan.md, "The
// engine's own count"; test_train_memory holds it there to the KiB). Where micro-batches vary,
// shorter ones need less, but a buffer that grows for a longer one is held twice for a moment
// (the new allocation before the old is freed), so such a run can measure more or less than
// the prediction. A run without the mark (an import, a
// simulated run, one captured before the mark existed) has no measurement; a GPU run, a
// hot-switching one or a foreign one has no prediction, and `note` says why.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/analysis/run_trace.h"

namespace fulcrum::analysis {

struct RankMemory {
    std::int32_t rank = 0;
    std::int32_t stage = -1;  // the rank's pipeline stage; -1 when the run does not say
    std::optional<std::int64_t> peak_bytes, peak_pinned_bytes;  // measured
    // The memory model's, for the rank's stage.
    std::optional<double> predicted_bytes, predicted_pinned_bytes;
    double model_state_bytes = 0, workspace_bytes = 0, activations_bytes = 0;
};

struct MemoryAnalysis {
    std::vector<RankMemory> ranks;  // ranks with a measurement or a prediction, by rank
    // The run's memory techniques in words: "recompute full, ZeRO-1, Ulysses, offloaded
    // checkpoints, chunks of 128 (Q, K, V offloaded)", or "none".
    std::string techniques;
    std::string note;  // why something is missing; empty when every rank has both
};

MemoryAnalysis analyze_memory(const RunTrace& trace);

// The same a rank at a time (run_analysis.h): each rank's measured peak, then the analysis
// from every rank's, in rank order.
struct MeasuredMemory {
    RankMemory row;  // rank, stage and the measured peaks
    bool measured = false;
};
MeasuredMemory measured_memory(const RunTrace& trace, const RankTrace& rank);
MemoryAnalysis analyze_memory(const RunTrace& trace, std::vector<MeasuredMemory> ranks);

// One row per pipeline stage, for tables that must stay short at a thousand ranks: the
// stage's fullest rank (its measured peak, or the first rank where none is measured) with
// the stage's prediction, and how many ranks the stage has.
struct StageMemoryRow {
    std::int32_t stage = -1;
    int ranks = 0;
    RankMemory fullest;
};
std::vector<StageMemoryRow> memory_by_stage(const MemoryAnalysis& memory);

// The techniques of `config`'s layout in the words above.
std::string memory_techniques(const RunConfig& config);

}  // namespace fulcrum::analysis
