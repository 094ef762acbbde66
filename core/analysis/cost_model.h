// The cost model: how long a pass and a collective take, fitted from a captured run
// (docs/simulate.md, "Costs"), and what the simulator plays with.
//
// A pass of stage s and phase φ on a rank that holds T tokens and P causal pairs:
//     t = fixed + per_token·T + per_pair·P          (least squares over the run's passes)
// Linear work (GEMMs, elementwise) grows with T, causal attention with P (WLB-LLM; docs/sources.md,
// "Workload balancing"). A collective moving B bytes:
//     t = latency + per_byte·B
// fitted on transfer times only: in a matched collective the last rank to arrive waits for
// nobody, so its duration is the transfer; for a pipeline receive, the time after the
// matching send began. Waiting is what the analyses measure, so it must not enter the model.
// When every sample moved the same B₀ bytes the two terms cannot be told apart: per_byte is
// then not fitted, the latency is the median time at B₀, and the model says so
// (fitted_bytes = B₀); the simulator scales it to other sizes with the analytic bandwidth:
//     t = latency + per_byte·(B − B₀).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/analysis/host_ranges.h"
#include "core/analysis/matched_collectives.h"
#include "core/analysis/pass_table.h"
#include "core/analysis/run_trace.h"
#include "core/parallel/nccl_model.h"
#include "core/util/result.h"

namespace fulcrum::analysis {

struct FitQuality {
    int samples = 0;
    double r_squared = 0;           // 1 − SS_res/SS_tot; 0 when every sample is equal
    double mean_abs_rel_error = 0;  // mean |predicted − measured| / measured
};

struct PassCost {
    std::int16_t stage = 0;
    Phase phase = Phase::forward;
    double fixed_ns = 0;
    double per_token_ns = 0;
    double per_pair_ns = 0;
    FitQuality fit;

    double predict(std::int64_t tokens, std::int64_t pairs) const;
};

struct CollectiveCost {
    Role role = Role::collective;  // cp_collective, tp_collective, dp_collective, pipeline_recv…
    std::string name;              // the event name it was fitted on, e.g. "cp all-gather kv"
    double latency_ns = 0;
    double per_byte_ns = 0;
    // −1 when per_byte was fitted; else the bytes every sample moved (see above).
    std::int64_t fitted_bytes = -1;
    FitQuality fit;

    // An analytic collective priced as NCCL prices it (core/parallel/nccl_model.h), by its
    // size: latency_ns and per_byte_ns then describe its large-message ring, for display.
    std::optional<parallel::NcclCall> nccl;

    bool per_byte_fitted() const { return fitted_bytes < 0; }
    double predict(std::int64_t bytes) const;
};

struct CostModel {
    std::vector<PassCost> passes;  // one per (stage, phase) seen
    std::vector<CollectiveCost> collectives;
    double optimizer_ns = 0;  // mean optimizer range per rank and step
    std::string source;       // the run it was fitted on, or "given"

    // The fit of (stage, phase); nullptr when the run had none.
    const PassCost* pass(std::int16_t stage, Phase phase) const;
    const CollectiveCost* collective(std::string_view name) const;
};

// Fits every (stage, phase) with at least 3 passes. Pairs and tokens come from the workload
// table (held_work); passes without a workload row are skipped. Errors when nothing could be
// fitted (no passes, or no workload table), saying which. `collectives` is
// matched_collectives(trace) and `ranges` rank_ranges(trace) when the caller has them already
// (matching is the costly part; a run read a rank at a time has no events to read them from);
// null: read from the trace here; `workload` likewise (WorkloadByRank::of), and `pipeline`
// (pipeline_pairs of the ranges; a run read a rank at a time pairs them as its ranks come in,
// and its ranges then hold no transfers). A collective's samples
// are fitted in the order of their (bytes, calls, time), not the run's: the fit does not depend on
// the order the matcher closed the instances in.
Result<CostModel> fit_cost_model(const RunTrace& trace, const PassTable& passes,
                                 const MatchedCollectives* collectives = nullptr,
                                 const std::vector<RankRanges>* ranges = nullptr,
                                 const WorkloadByRank* workload = nullptr,
                                 const ScratchTable<PipelinePair>* pipeline = nullptr);

// The model as JSON, the format of `fulcrum simulate --cost-model FILE` and of the
// "cost_model" member of `fulcrum analyze --json` (docs/analyses.md).
std::string cost_model_json(const CostModel& model);
Result<CostModel> parse_cost_model_json(std::string_view json);

}  // namespace fulcrum::analysis
