#include "core/analysis/imbalance.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

namespace fulcrum::analysis {

namespace {

constexpr double kMissing = std::numeric_limits<double>::quiet_NaN();

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

ImbalanceAnalysis analyze_imbalance(const RunTrace& trace, const PassTable& passes,
                                    const MatchedCollectives& collectives, const CostModel* cost,
                                    const WorkloadByRank* workload) {
    ImbalanceAnalysis result;
    result.predicted_is_time = cost != nullptr;

    // One cell per (rank, step, micro-batch) with a pass or held work, in that order: a sorted
    // array, not trees, for a 1 B-event run's millions of cells. A cell's compute sums its
    // passes in run order.
    struct Cell {
        std::int32_t rank = 0, step = 0, microbatch = 0;
        std::int16_t stage = -1;  // its first pass's
        bool measured = false, predicted_known = false;
        double compute = 0, predicted = 0;
        auto key() const { return std::tie(rank, step, microbatch); }
    };
    const auto by_key = [](const Cell& a, const Cell& b) { return a.key() < b.key(); };
    std::vector<Cell> cells;
    {
        // The passes come by (rank, step) (find_passes; a run read a rank at a time appends its
        // ranks in order), so each (rank, step)'s few passes are sorted by micro-batch on their
        // own and folded, a rank at a time: the cells, sized exactly, are all that is held, not a
        // cell a pass and a sort's buffer beside it (a tenth of a 90-step, 100 M-event run's
        // peak). Passes in another order are gathered and sorted as one.
        const auto by_step = [](const Pass& a, const Pass& b) {
            return std::tie(a.rank, a.step) < std::tie(b.rank, b.step);
        };
        const bool by_rank_and_step = passes.sorted_by_rank_and_step();
        std::vector<Pass> gathered;
        if (!by_rank_and_step) {
            gathered = passes.all();
        }
        const PassTable unordered(gathered);
        const PassTable& table = by_rank_and_step ? passes : unordered;
        std::vector<Cell> chunk;
        // Folds each (rank, step)'s passes, in run order within a cell, and hands its cells on.
        const auto fold = [&](const auto& take) {
            table.for_each_rank([&](std::span<const Pass> rank) {
                for (auto first = rank.begin(); first != rank.end();) {
                    const auto last = by_rank_and_step
                                          ? std::upper_bound(first, rank.end(), *first, by_step)
                                          : rank.end();
                    chunk.clear();
                    for (auto pass = first; pass != last; ++pass) {
                        chunk.push_back({pass->rank, pass->step, pass->microbatch, pass->stage,
                                         true, false, static_cast<double>(pass->compute_ns), 0.0});
                    }
                    std::stable_sort(chunk.begin(), chunk.end(), by_key);
                    for (std::size_t i = 0; i < chunk.size(); ++i) {
                        if (i > 0 && chunk[i - 1].key() == chunk[i].key()) {
                            continue;
                        }
                        Cell cell = chunk[i];
                        for (std::size_t j = i + 1;
                             j < chunk.size() && chunk[j].key() == cell.key(); ++j) {
                            cell.compute += chunk[j].compute;
                        }
                        take(cell);
                    }
                    first = last;
                }
            });
        };
        std::size_t count = 0;
        fold([&](const Cell&) { ++count; });
        cells.reserve(count);
        fold([&](const Cell& cell) { cells.push_back(cell); });
    }
    const std::size_t folded = cells.size();

    // Held work predicted as time: the forward and backward fits of the stage that ran it (the
    // pass's stage, or the rank's pp coordinate when it has no pass there).
    WorkloadByRank own;
    if (workload == nullptr) {
        own.held = held_work(trace);
    }
    const std::vector<HeldWork>& held = workload != nullptr ? workload->held : own.held;
    std::vector<Cell> unmeasured;  // held work without a pass
    for (const HeldWork& work : held) {
        const Cell probe{work.rank, work.step, work.microbatch};
        const auto found = std::lower_bound(cells.begin(), cells.begin() + folded, probe, by_key);
        Cell* cell = found != cells.begin() + folded && found->key() == probe.key()
                         ? &*found
                         : &unmeasured.emplace_back(probe);
        if (cost == nullptr) {
            cell->predicted = static_cast<double>(work.pairs);
            cell->predicted_known = true;
            continue;
        }
        std::int16_t stage = 0;  // as fit_cost_model files a pass without one
        if (cell->stage >= 0) {
            stage = cell->stage;
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
            cell->predicted = time;
            cell->predicted_known = true;
        }
    }
    cells.insert(cells.end(), unmeasured.begin(), unmeasured.end());
    std::inplace_merge(cells.begin(), cells.begin() + static_cast<std::ptrdiff_t>(folded),
                       cells.end(), by_key);
    unmeasured = {};

    // Rows: every rank with a cell; columns: each step's micro-batches with a cell.
    std::vector<std::int32_t> rows;
    std::vector<std::pair<std::int32_t, std::int32_t>> step_microbatches;
    step_microbatches.reserve(cells.size());
    for (const Cell& cell : cells) {
        if (rows.empty() || rows.back() != cell.rank) {
            rows.push_back(cell.rank);
        }
        step_microbatches.emplace_back(cell.step, cell.microbatch);
        result.has_prediction = result.has_prediction || cell.predicted_known;
    }
    std::sort(step_microbatches.begin(), step_microbatches.end());
    step_microbatches.erase(std::unique(step_microbatches.begin(), step_microbatches.end()),
                            step_microbatches.end());
    std::vector<std::int32_t> steps;
    for (const auto& [step, microbatch] : step_microbatches) {
        if (steps.empty() || steps.back() != step) {
            steps.push_back(step);
            result.by_microbatch.push_back({});
            StepMatrices& matrices = result.by_microbatch.back();
            matrices.step = step;
            for (Matrix* m : {&matrices.compute_ns, &matrices.predicted}) {
                m->rows = rows;
            }
        }
        for (Matrix* m :
             {&result.by_microbatch.back().compute_ns, &result.by_microbatch.back().predicted}) {
            m->columns.push_back(microbatch);
        }
    }
    step_microbatches = {};
    for (StepMatrices& matrices : result.by_microbatch) {
        for (Matrix* m : {&matrices.compute_ns, &matrices.predicted}) {
            m->values.assign(rows.size() * m->columns.size(), kMissing);
        }
    }
    for (Matrix* m : {&result.compute_by_step, &result.predicted_by_step}) {
        m->rows = rows;
        m->columns = steps;
        m->values.assign(rows.size() * steps.size(), kMissing);
    }
    const auto index_of = [](const std::vector<std::int32_t>& sorted, std::int32_t value) {
        return static_cast<std::size_t>(std::lower_bound(sorted.begin(), sorted.end(), value) -
                                        sorted.begin());
    };
    // A (rank, step)'s sums run over its micro-batches in ascending order.
    std::size_t row = 0;
    for (std::size_t i = 0; i < cells.size();) {
        const Cell& first = cells[i];
        if (rows[row] != first.rank) {
            ++row;
        }
        const std::size_t s = index_of(steps, first.step);
        StepMatrices& matrices = result.by_microbatch[s];
        double compute_sum = 0, predicted_sum = 0;
        bool any_measured = false, any_predicted = false;
        for (; i < cells.size() && cells[i].rank == first.rank && cells[i].step == first.step;
             ++i) {
            const Cell& cell = cells[i];
            const std::size_t column = index_of(matrices.compute_ns.columns, cell.microbatch);
            const std::size_t at = row * matrices.compute_ns.columns.size() + column;
            if (cell.measured) {
                matrices.compute_ns.values[at] = cell.compute;
                compute_sum += cell.compute;
                any_measured = true;
            }
            if (cell.predicted_known) {
                matrices.predicted.values[at] = cell.predicted;
                predicted_sum += cell.predicted;
                any_predicted = true;
            }
        }
        if (any_measured) {
            result.compute_by_step.values[row * steps.size() + s] = compute_sum;
        }
        if (any_predicted) {
            result.predicted_by_step.values[row * steps.size() + s] = predicted_sum;
        }
    }
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
