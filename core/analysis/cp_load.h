// CP attention load: within one context-parallel group, how unequal the ranks' attention is,
// measured and predicted.
//
// Per (step, micro-batch, CP group): each CP rank's measured attention time (Pass::
// attention_ns of its forward plus backward) and predicted causal pairs (held_work), and the
// imbalance max/mean of each across the group. The sharding the run used comes from its
// config; the prediction for the other shardings (contiguous, zigzag, per-doc) re-shards the
// micro-batch's documents with core/balance/cp_shard, so a user sees what switching would do.
// The documents and their packed order are rebuilt from the CP ranks' workload rows (every
// sharding keeps a rank's rows in packed order; zigzag's two chunks per rank are recognised),
// and per-doc's leftover rotation is carried over the run's micro-batches as the engine does.
// Under Ulysses (run.config cp_impl) the heads, not the tokens, are split for attention: each
// rank is predicted the group's mean pairs, so a measured spread is not the sharding's.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/analysis/pass_table.h"
#include "core/analysis/run_trace.h"
#include "core/util/packed_optional.h"
#include "core/util/result.h"

namespace fulcrum::analysis {

// A rank's part of a CP group: 32 bytes, a run of 1 B events has millions (PackedOptional).
struct CpRankLoad {
    std::int32_t rank = 0;
    int cp_rank = 0;
    // Forward + backward; absent when the rank has no pass in this micro-batch.
    PackedOptional<std::int64_t> attention_ns;
    // The work it held (held_work); absent without a workload row for it.
    PackedOptional<std::int64_t> tokens;
    PackedOptional<std::int64_t> pairs;
};

// Predicted max/mean pairs had a micro-batch been sharded each way: contiguous, zigzag and
// per-doc, in that order; all or none (the documents not known). Held inline, not as named
// pairs: a 1 B-event run has a million groups.
struct ShardingPrediction {
    static constexpr std::size_t kShardings = 3;
    std::array<double, kShardings> imbalance{};
    bool known = false;

    // (name, max/mean) in that order, as balance::cp_sharding_name spells them; empty when not
    // known.
    std::vector<std::pair<std::string, double>> named() const;
};

struct CpGroupLoad {
    std::int32_t step = 0;
    std::int32_t microbatch = 0;
    int dp = 0, tp = 0, pp = 0;     // which CP group
    std::vector<CpRankLoad> ranks;  // by cp_rank
    // max/mean attention_ns over the CP ranks that have one; absent when fewer than two
    // have, or none spent any time in attention (nothing was measured).
    PackedOptional<double> measured_imbalance;
    // max/mean pairs over the CP ranks that held work; absent when fewer than two did.
    PackedOptional<double> predicted_imbalance;
    ShardingPrediction predicted_by_sharding;
};

struct CpLoadAnalysis {
    std::string sharding;             // what the run used (config), "" when unknown
    std::optional<int> cp;            // the run's CP degree; absent when its grid is unknown
    std::vector<CpGroupLoad> groups;  // by (step, micro-batch, dp, pp, tp)
    // Σ max / Σ mean over the groups that have the figure (imbalance_degree.h): weighted by
    // each group's mean attention time or pairs; absent when none has.
    std::optional<double> mean_measured_imbalance;
    std::optional<double> mean_predicted_imbalance;
    std::vector<std::pair<std::string, double>> mean_predicted_by_sharding;
};

// All CP load measures of the passes: each (rank, step, micro-batch)'s attention time summed
// over its passes, for the ranks of the run's CP groups, ascending and each once (none when
// cp = 1 or the grid is unknown). Taken apart so that a run read a rank at a time frees its
// passes before CP load builds its groups (analyze_run_file), not holding the two side by side.
struct MeasuredAttention {
    using Key = std::tuple<std::int32_t, std::int32_t, std::int32_t>;  // rank, step, micro-batch
    std::vector<std::pair<Key, std::int64_t>> ns;
};
MeasuredAttention measured_attention(const RunTrace& trace, const PassTable& passes);

// No groups when cp = 1 or the grid is unknown. The workload from trace.workload.
CpLoadAnalysis analyze_cp_load(const RunTrace& trace, const std::vector<Pass>& passes);
// The same from the passes' measured_attention, with the workload as the caller reads it
// (WorkloadByRank: from memory, or from the run's file a step at a time); fails where reading a
// step's rows does, or with what `steps_done` — told the fraction of the steps predicted as each
// is done (ten seconds of a 1 B-event run's analysis) — returns when it fails (the caller's
// cancel).
Result<CpLoadAnalysis> analyze_cp_load(const RunTrace& trace, MeasuredAttention attention,
                                       const WorkloadByRank& workload,
                                       const std::function<Status(double)>& steps_done = {});

}  // namespace fulcrum::analysis
