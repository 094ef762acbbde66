#include "core/analysis/imbalance.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

namespace fulcrum::analysis {

namespace {

constexpr double kMissing = std::numeric_limits<double>::quiet_NaN();

using RankColumn = std::pair<std::int32_t, std::int32_t>;

Matrix build(const std::vector<std::int32_t>& rows, const std::vector<std::int32_t>& columns,
             const std::map<RankColumn, double>& cells) {
    Matrix m;
    m.rows = rows;
    m.columns = columns;
    m.values.assign(rows.size() * columns.size(), kMissing);
    for (std::size_t r = 0; r < rows.size(); ++r) {
        for (std::size_t c = 0; c < columns.size(); ++c) {
            if (const auto it = cells.find({rows[r], columns[c]}); it != cells.end()) {
                m.values[r * columns.size() + c] = it->second;
            }
        }
    }
    return m;
}

// Σ max / Σ mean over the columns that have a degree (two values or more; docs/analyses.md
// §5); none when no column has.
std::optional<double> weighted_imbalance(const Matrix& m) {
    WeightedImbalance result;
    for (std::size_t c = 0; c < m.columns.size(); ++c) {
        result.add(m.column_spread(c));
    }
    return result.value();
}

}  // namespace

std::vector<double> Matrix::column_values(std::size_t column) const {
    std::vector<double> present;
    for (std::size_t r = 0; r < rows.size(); ++r) {
        if (const double v = at(r, column); !std::isnan(v)) {
            present.push_back(v);
        }
    }
    return present;
}

std::optional<SetSpread> Matrix::column_spread(std::size_t column) const {
    return spread_of(column_values(column));
}

std::vector<double> Matrix::column_imbalance() const {
    std::vector<double> result(columns.size(), kMissing);
    for (std::size_t c = 0; c < columns.size(); ++c) {
        // Two values or more whose mean is 0 are alike: 1, not "no degree".
        if (const std::vector<double> values = column_values(c); values.size() >= 2) {
            result[c] = imbalance_of(values).value_or(1.0);
        }
    }
    return result;
}

ImbalanceAnalysis analyze_imbalance(const RunTrace& trace, const std::vector<Pass>& passes,
                                    const MatchedCollectives& collectives, const CostModel* cost) {
    ImbalanceAnalysis result;
    result.predicted_is_time = cost != nullptr;

    using Cell = std::tuple<std::int32_t, std::int32_t, std::int32_t>;  // rank, step, mb
    std::set<std::int32_t> ranks;
    std::map<std::int32_t, std::set<std::int32_t>> microbatches_of_step;
    std::map<Cell, double> compute;
    std::map<Cell, std::int16_t> stage_of;
    for (const Pass& pass : passes) {
        ranks.insert(pass.rank);
        microbatches_of_step[pass.step].insert(pass.microbatch);
        compute[{pass.rank, pass.step, pass.microbatch}] += static_cast<double>(pass.compute_ns);
        stage_of.emplace(Cell{pass.rank, pass.step, pass.microbatch}, pass.stage);
    }

    // Held work predicted as time: the forward and backward fits of the stage that ran it (the
    // pass's stage, or the rank's pp coordinate when it has no pass there).
    std::map<Cell, double> predicted;
    for (const HeldWork& work : held_work(trace)) {
        ranks.insert(work.rank);
        microbatches_of_step[work.step].insert(work.microbatch);
        const Cell cell{work.rank, work.step, work.microbatch};
        if (cost == nullptr) {
            predicted[cell] = static_cast<double>(work.pairs);
            continue;
        }
        std::int16_t stage = 0;  // as fit_cost_model files a pass without one
        if (const auto it = stage_of.find(cell); it != stage_of.end() && it->second >= 0) {
            stage = it->second;
        } else if (const RankTrace* rank = trace.find_rank(work.rank);
                   rank != nullptr && rank->info.pp >= 0) {
            stage = static_cast<std::int16_t>(rank->info.pp);
        }
        double time = 0;
        bool fitted = false;
        // The measured compute above sums every pass of the cell, W passes included.
        for (const Phase phase : {Phase::forward, Phase::backward, Phase::weight_grad}) {
            if (const PassCost* fit = cost->pass(stage, phase)) {
                time += fit->predict(work.tokens, work.pairs);
                fitted = true;
            }
        }
        if (fitted) {
            predicted[cell] = time;
        }
    }

    const std::vector<std::int32_t> rows(ranks.begin(), ranks.end());
    std::vector<std::int32_t> steps;
    std::map<RankColumn, double> compute_by_step, predicted_by_step;
    for (const auto& [step, microbatch_set] : microbatches_of_step) {
        steps.push_back(step);
        const std::vector<std::int32_t> columns(microbatch_set.begin(), microbatch_set.end());
        std::map<RankColumn, double> compute_cells, predicted_cells;
        for (const std::int32_t rank : rows) {
            for (const std::int32_t mb : columns) {
                if (const auto it = compute.find({rank, step, mb}); it != compute.end()) {
                    compute_cells[{rank, mb}] = it->second;
                    compute_by_step[{rank, step}] += it->second;
                }
                if (const auto it = predicted.find({rank, step, mb}); it != predicted.end()) {
                    predicted_cells[{rank, mb}] = it->second;
                    predicted_by_step[{rank, step}] += it->second;
                }
            }
        }
        StepMatrices matrices;
        matrices.step = step;
        matrices.compute_ns = build(rows, columns, compute_cells);
        matrices.predicted = build(rows, columns, predicted_cells);
        result.by_microbatch.push_back(std::move(matrices));
    }
    result.compute_by_step = build(rows, steps, compute_by_step);
    result.predicted_by_step = build(rows, steps, predicted_by_step);
    result.has_prediction = !predicted.empty();
    result.compute_imbalance = weighted_imbalance(result.compute_by_step);
    result.predicted_imbalance = weighted_imbalance(result.predicted_by_step);

    // Stragglers (matched_collectives.h counts each rank's arrivals).
    for (const auto& [rank, arrivals] : collectives.arrivals()) {
        if (arrivals.last_arrivals > 0) {
            result.stragglers.push_back(
                {rank, arrivals.last_arrivals, arrivals.instances, arrivals.caused_wait_ns});
        }
    }
    std::sort(result.stragglers.begin(), result.stragglers.end(),
              [](const Straggler& a, const Straggler& b) {
                  return std::tie(b.last_arrivals, b.caused_wait_ns, a.rank) <
                         std::tie(a.last_arrivals, a.caused_wait_ns, b.rank);
              });
    return result;
}

}  // namespace fulcrum::analysis
