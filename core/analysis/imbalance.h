// Imbalance matrices and stragglers: which ranks carry more work than others, per micro-batch
// and per step, measured and predicted, and who arrives last at collectives.
//
// Imbalance degree of a set of values is max/mean (WLB-LLM §3.3), 1 for perfect balance
// (core/analysis/imbalance_degree.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/analysis/cost_model.h"
#include "core/analysis/imbalance_degree.h"
#include "core/analysis/matched_collectives.h"
#include "core/analysis/pass_table.h"
#include "core/analysis/run_trace.h"

namespace fulcrum::analysis {

// A dense rank × column matrix; NaN where a rank has no value (e.g. no such micro-batch).
struct Matrix {
    std::vector<std::int32_t> rows;     // rank numbers
    std::vector<std::int32_t> columns;  // micro-batch or step numbers
    std::vector<double> values;         // row-major
    double at(std::size_t row, std::size_t column) const {
        return values[row * columns.size() + column];
    }
    // max/mean over the rows of each column (NaNs skipped), one per column: NaN for a column
    // with fewer than two values (over one rank max/mean is 1 by definition and says
    // nothing), 1 when its mean is 0.
    std::vector<double> column_imbalance() const;
    // The column's max and mean over its values; none as above, and when its mean is 0.
    std::optional<SetSpread> column_spread(std::size_t column) const;
    std::vector<double> column_values(std::size_t column) const;  // the column's non-NaN values
};

struct StepMatrices {
    std::int32_t step = 0;
    Matrix compute_ns;  // rank × micro-batch: Pass::compute_ns, forward + backward
    Matrix predicted;   // rank × micro-batch: cost model of held work (ns), or pairs without one
};

struct Straggler {
    std::int32_t rank = 0;
    int last_arrivals = 0;            // instances where this rank started last and someone waited
    int instances = 0;                // instances it took part in
    std::int64_t caused_wait_ns = 0;  // Σ over those instances of the others' wait
};

struct ImbalanceAnalysis {
    std::vector<StepMatrices> by_microbatch;  // one per step
    Matrix compute_by_step;                   // rank × step: Σ compute_ns of the rank's passes
    Matrix predicted_by_step;                 // rank × step: Σ predicted
    bool predicted_is_time = false;           // true: ns from the cost model; false: causal pairs
    // True when any work was predicted (the run has a workload table); the predicted
    // matrices are otherwise empty and predicted_is_time means nothing.
    bool has_prediction = false;
    // Σ over steps of the slowest rank / Σ over steps of the mean rank (by step; time-weighted,
    // imbalance_degree.h), over the steps where at least two ranks have a value; absent when
    // no step has (one rank, or no passes).
    std::optional<double> compute_imbalance;
    // The same of the predicted work; absent also when nothing was predicted.
    std::optional<double> predicted_imbalance;
    // Most last arrivals first; ranks never last omitted. Only instances matched across at
    // least two ranks count: a collective seen on one rank has no one to wait for.
    std::vector<Straggler> stragglers;
};

// How the headlines are taken over steps, for labels (imbalance_degree.h).
inline constexpr const char* kImbalanceOverSteps = "Σ max / Σ mean over steps";

// `cost` may be null: the predicted matrices are then causal pairs. `workload` is
// WorkloadByRank::of(trace) when the caller has it; null: made here.
ImbalanceAnalysis analyze_imbalance(const RunTrace& trace, const PassTable& passes,
                                    const MatchedCollectives& collectives, const CostModel* cost,
                                    const WorkloadByRank* workload = nullptr);

}  // namespace fulcrum::analysis
