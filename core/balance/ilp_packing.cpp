// The ilp balancer: attention-aware fixed-length packing (WLB-LLM's ILP baseline, §3–4;
// docs/sources.md, "Workload balancing"), solved with CBC through its C API.
//
// Model. M identical micro-batches of S tokens; x_ij = 1 when document i goes to micro-batch
// j. The min-max objective is linearised with one auxiliary variable z:
//
//     minimise z
//     s.t.  Σ_j x_ij = 1                          every document placed once
//           Σ_i d_i·x_ij + y_j ≤ S                capacity of micro-batch j
//           Σ_i d_i²·x_ij + ρ·y_j − z ≤ 0         z ≥ attention work of every micro-batch
//           Σ_j y_j = Σ_small d
//           x binary, y_j ≥ 0, z ≥ max(d_max², Σd²/M)
//
// Tractability. A batch of a few hundred documents over 32–64 micro-batches is >10^4 binaries
// and CBC would not close it in a second. Σd² is carried by the few longest documents
// (docs/sources.md, "Document lengths"), so only the K longest get binary columns (K·M ≲
// ilp_max_binaries); the short ones enter as a fluid y_j whose attention work is ρ per token, ρ =
// Σ_small d² / Σ_small d, which is exact in aggregate and linear. After the solve they are placed
// one by one, longest first, into the micro-batch with the least Σd² that still has room.
//
// Symmetry. Micro-batches are interchangeable, so the i-th longest document (0-based) only
// gets columns for micro-batches 0..i: any packing can be relabelled so that micro-batches
// are numbered in the order their longest member appears. This removes the M! copies of every
// solution CBC would otherwise branch through, and shrinks the model.
//
// Never worse than greedy. The incumbent is the better of arrival-order next-fit (the fixed
// balancer) and longest-first least-Σd² greedy; it is the MIP start, and it is returned
// whenever CBC times out without beating it or the short documents cannot be re-placed.
#include "core/balance/ilp_packing.h"

#include <Cbc_C_Interface.h>

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <memory>
#include <numeric>
#include <optional>
#include <string>

namespace fulcrum::balance::detail {
namespace {

using Clock = std::chrono::steady_clock;

// Micro-batch index of every document, by position in the input.
using Assignment = std::vector<int>;

struct Loads {
    std::vector<std::int64_t> tokens;
    std::vector<std::int64_t> work;  // Σd²
    explicit Loads(std::size_t microbatches) : tokens(microbatches, 0), work(microbatches, 0) {}
    void add(int j, std::int64_t length) {
        tokens[j] += length;
        work[j] += length * length;
    }
};

enum class PlacementRule {
    least_attention,  // balances Σd²: the rule the model assumes for the short documents
    best_fit,         // tightest room left: packs best when the batch is nearly full
};

// Places `order` (indices into documents) one by one; false when one fits nowhere.
bool place(std::span<const Document> documents, std::span<const std::size_t> order,
           std::int64_t capacity, PlacementRule rule, Loads& loads, Assignment& assignment) {
    const int m = static_cast<int>(loads.tokens.size());
    for (const auto i : order) {
        const std::int64_t d = documents[i].length;
        int chosen = -1;
        for (int j = 0; j < m; ++j) {
            if (loads.tokens[j] + d > capacity) {
                continue;
            }
            if (chosen < 0) {
                chosen = j;
                continue;
            }
            const bool better = rule == PlacementRule::least_attention
                                    ? (loads.work[j] < loads.work[chosen] ||
                                       (loads.work[j] == loads.work[chosen] &&
                                        loads.tokens[j] < loads.tokens[chosen]))
                                    : loads.tokens[j] > loads.tokens[chosen];
            if (better) {
                chosen = j;
            }
        }
        if (chosen < 0) {
            return false;
        }
        loads.add(chosen, d);
        assignment[i] = chosen;
    }
    return true;
}

std::int64_t largest_work(std::span<const Document> documents, const Assignment& assignment,
                          std::size_t microbatches) {
    Loads loads(microbatches);
    for (std::size_t i = 0; i < documents.size(); ++i) {
        loads.add(assignment[i], documents[i].length);
    }
    return *std::max_element(loads.work.begin(), loads.work.end());
}

struct CbcModelDeleter {
    void operator()(Cbc_Model* model) const { Cbc_deleteModel(model); }
};

// The model above over documents order[0..k) with the rest as fluid, in CBC's column-major
// form. Lengths are in units of S, which keeps every coefficient in [0, 1], where CBC's
// tolerances are meant.
struct MinMaxModel {
    double scale = 1;
    double rho = 0;  // the fluid's work per token
    bool fluid = false;
    int rows = 0;
    std::vector<CoinBigIndex> starts{0};
    std::vector<int> indices;
    std::vector<double> values, lower, upper, objective, row_lower, row_upper;
    // The first assignment column of each long document; first_column[k] = the binaries' count.
    std::vector<int> first_column;
    int fluid_column = 0, z_column = 0;

    int columns() const { return static_cast<int>(lower.size()); }
    void add_column(const std::vector<int>& at_rows, const std::vector<double>& coefficients,
                    double low, double high, double cost) {
        indices.insert(indices.end(), at_rows.begin(), at_rows.end());
        values.insert(values.end(), coefficients.begin(), coefficients.end());
        starts.push_back(static_cast<CoinBigIndex>(indices.size()));
        lower.push_back(low);
        upper.push_back(high);
        objective.push_back(cost);
    }
};

MinMaxModel min_max_model(std::span<const Document> documents, std::span<const std::size_t> order,
                          std::size_t k, int m, std::int64_t capacity, std::int64_t lower_bound) {
    MinMaxModel model;
    model.scale = static_cast<double>(capacity);
    const double scale = model.scale;
    double short_tokens = 0;
    double short_work = 0;
    for (std::size_t r = k; r < order.size(); ++r) {
        const double d = static_cast<double>(documents[order[r]].length);
        short_tokens += d;
        short_work += d * d;
    }
    model.fluid = short_tokens > 0;
    model.rho = model.fluid ? short_work / short_tokens / scale : 0.0;

    const int assign_row = 0;
    const int capacity_row = static_cast<int>(k);
    const int work_row = capacity_row + m;
    const int fluid_row = work_row + m;
    model.rows = fluid_row + (model.fluid ? 1 : 0);

    model.first_column.assign(k + 1, 0);
    for (std::size_t r = 0; r < k; ++r) {
        model.first_column[r] = model.columns();
        const double d = static_cast<double>(documents[order[r]].length) / scale;
        const int reachable = std::min<int>(static_cast<int>(r) + 1, m);
        for (int j = 0; j < reachable; ++j) {
            model.add_column({assign_row + static_cast<int>(r), capacity_row + j, work_row + j},
                             {1.0, d, d * d}, 0.0, 1.0, 0.0);
        }
    }
    model.first_column[k] = model.columns();
    model.fluid_column = model.columns();
    if (model.fluid) {
        for (int j = 0; j < m; ++j) {
            model.add_column({capacity_row + j, work_row + j, fluid_row}, {1.0, model.rho, 1.0},
                             0.0, 1.0, 0.0);
        }
    }
    model.z_column = model.columns();
    std::vector<int> work_rows(m);
    std::iota(work_rows.begin(), work_rows.end(), work_row);
    model.add_column(work_rows, std::vector<double>(m, -1.0),
                     static_cast<double>(lower_bound) / (scale * scale), DBL_MAX, 1.0);

    model.row_lower.assign(model.rows, -DBL_MAX);
    model.row_upper.assign(model.rows, 0.0);
    for (std::size_t r = 0; r < k; ++r) {
        model.row_lower[assign_row + r] = model.row_upper[assign_row + r] = 1.0;
    }
    for (int j = 0; j < m; ++j) {
        model.row_upper[capacity_row + j] = 1.0;
    }
    if (model.fluid) {
        model.row_lower[fluid_row] = model.row_upper[fluid_row] = short_tokens / scale;
    }
    return model;
}

// MIP start: the incumbent relabelled so that micro-batches are numbered in the order their
// longest member appears, which is what the symmetry-reduced columns allow.
std::vector<double> min_max_start(const MinMaxModel& model, std::span<const Document> documents,
                                  std::span<const std::size_t> order, std::size_t k, int m,
                                  std::int64_t lower_bound, const Assignment& incumbent) {
    const double scale = model.scale;
    std::vector<int> label(m, -1);
    int next_label = 0;
    std::vector<double> start(model.columns(), 0.0);
    std::vector<double> start_tokens(m, 0.0), start_work(m, 0.0);
    for (std::size_t r = 0; r < k; ++r) {
        const int j = incumbent[order[r]];
        if (label[j] < 0) {
            label[j] = next_label++;
        }
        start[model.first_column[r] + label[j]] = 1.0;
        const double d = static_cast<double>(documents[order[r]].length) / scale;
        start_work[label[j]] += d * d;
    }
    for (int j = 0; j < m; ++j) {
        if (label[j] < 0) {
            label[j] = next_label++;
        }
    }
    for (std::size_t r = k; r < order.size(); ++r) {
        start_tokens[label[incumbent[order[r]]]] +=
            static_cast<double>(documents[order[r]].length) / scale;
    }
    double start_z = static_cast<double>(lower_bound) / (scale * scale);
    for (int j = 0; j < m; ++j) {
        if (model.fluid) {
            start[model.fluid_column + j] = start_tokens[j];
        }
        start_z = std::max(start_z, start_work[j] + model.rho * start_tokens[j]);
    }
    start[model.z_column] = start_z;
    return start;
}

// Solves the model above over documents order[0..k) with the rest as fluid. Returns the
// micro-batch of each of the k documents, or nullopt when CBC has no integer solution.
std::optional<std::vector<int>> solve_min_max(std::span<const Document> documents,
                                              std::span<const std::size_t> order, std::size_t k,
                                              int m, std::int64_t capacity,
                                              std::int64_t lower_bound, const Assignment& incumbent,
                                              double seconds, double relative_gap) {
    MinMaxModel problem = min_max_model(documents, order, k, m, capacity, lower_bound);
    std::unique_ptr<Cbc_Model, CbcModelDeleter> model(Cbc_newModel());
    const int columns = problem.columns();
    Cbc_loadProblem(model.get(), columns, problem.rows, problem.starts.data(),
                    problem.indices.data(), problem.values.data(), problem.lower.data(),
                    problem.upper.data(), problem.objective.data(), problem.row_lower.data(),
                    problem.row_upper.data());
    for (int c = 0; c < problem.first_column[k]; ++c) {
        Cbc_setInteger(model.get(), c);
    }
    Cbc_setObjSense(model.get(), 1.0);
    Cbc_setLogLevel(model.get(), 0);
    // Wall-clock, not CPU time (CBC's default): the limit is a latency budget for the data
    // loader. CBC looks at the clock only between nodes and cut passes, so it gets 80% of what
    // is left. Measured on a 2-core box shared with other builds: 1.62 s worst at a 2 s limit
    // over 283 lognormal batches (bench_balance), but up to 1.6 s at a 1 s limit on a mix of
    // mid-length documents where CBC always runs to the limit.
    Cbc_setParameter(model.get(), "timeMode", "elapsed");
    Cbc_setMaximumSeconds(model.get(), 0.8 * seconds);
    Cbc_setAllowableFractionGap(model.get(), relative_gap);

    std::vector<double> start =
        min_max_start(problem, documents, order, k, m, lower_bound, incumbent);
    std::vector<int> all_columns(columns);
    std::iota(all_columns.begin(), all_columns.end(), 0);
    Cbc_setMIPStartI(model.get(), columns, all_columns.data(), start.data());

    Cbc_solve(model.get());
    const double* solution = Cbc_bestSolution(model.get());
    if (solution == nullptr) {
        return std::nullopt;
    }
    std::vector<int> microbatch(k, 0);
    for (std::size_t r = 0; r < k; ++r) {
        const int first = problem.first_column[r];
        int best = 0;
        for (int c = first; c < problem.first_column[r + 1]; ++c) {
            if (solution[c] > solution[first + best]) {
                best = c - first;
            }
        }
        microbatch[r] = best;
    }
    return microbatch;
}

std::vector<MicroBatch> build(std::span<const Document> documents, const Assignment& assignment,
                              std::size_t microbatches, const PackingCost& cost) {
    std::vector<MicroBatch> packed(microbatches);
    for (std::size_t i = 0; i < documents.size(); ++i) {
        packed[assignment[i]].add(documents[i], cost);
    }
    return packed;
}

}  // namespace

PackedBatch pack_ilp(std::span<const Document> documents, const PackingOptions& options) {
    const auto started = Clock::now();
    const auto elapsed = [&] {
        return std::chrono::duration<double>(Clock::now() - started).count();
    };
    PackedBatch packed;
    packed.microbatches = next_fit(documents, options.microbatches, options.capacity, options.cost);
    if (documents.empty()) {
        return packed;
    }
    const std::size_t m = packed.microbatches.size();
    const std::int64_t capacity = options.capacity;

    Assignment incumbent(documents.size());
    {
        std::size_t i = 0;
        for (std::size_t j = 0; j < m; ++j) {
            for (std::size_t n = 0; n < packed.microbatches[j].documents.size(); ++n) {
                incumbent[i++] = static_cast<int>(j);
            }
        }
    }
    std::int64_t incumbent_work = largest_work(documents, incumbent, m);

    std::vector<std::size_t> order(documents.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return documents[a].length > documents[b].length;
    });
    {
        Loads loads(m);
        Assignment greedy(documents.size());
        if (place(documents, order, capacity, PlacementRule::least_attention, loads, greedy)) {
            const auto work = *std::max_element(loads.work.begin(), loads.work.end());
            if (work < incumbent_work) {
                incumbent = std::move(greedy);
                incumbent_work = work;
            }
        }
    }

    std::int64_t total_work = 0;
    for (const auto& document : documents) {
        total_work += document.length * document.length;
    }
    const std::int64_t longest = documents[order.front()].length;
    const auto mm = static_cast<std::int64_t>(m);
    const std::int64_t lower_bound = std::max(longest * longest, (total_work + mm - 1) / mm);
    packed.ilp.lower_bound = lower_bound;

    const auto finish = [&](IlpSolve::Outcome outcome, const Assignment& assignment) {
        packed.microbatches = build(documents, assignment, m, options.cost);
        packed.ilp.outcome = outcome;
        packed.ilp.seconds = elapsed();
        return packed;
    };
    if (static_cast<double>(incumbent_work) <=
        (1.0 + options.ilp_relative_gap) * static_cast<double>(lower_bound)) {
        return finish(IlpSolve::Outcome::greedy_within_gap, incumbent);
    }
    const double remaining = options.ilp_time_limit_s - elapsed();
    if (remaining < 1e-3) {
        return finish(IlpSolve::Outcome::no_time_left, incumbent);
    }

    std::size_t k = 0;
    for (std::size_t columns = 0; k < order.size(); ++k) {
        columns += std::min<std::size_t>(k + 1, m);
        if (columns > static_cast<std::size_t>(options.ilp_max_binaries)) {
            break;
        }
    }
    packed.ilp.model_documents = static_cast<int>(k);
    const auto solved = solve_min_max(documents, order, k, static_cast<int>(m), capacity,
                                      lower_bound, incumbent, remaining, options.ilp_relative_gap);
    if (!solved) {
        return finish(IlpSolve::Outcome::solver_no_better, incumbent);
    }

    const std::span<const std::size_t> short_documents(order.begin() + k, order.end());
    for (const auto rule : {PlacementRule::least_attention, PlacementRule::best_fit}) {
        Loads loads(m);
        Assignment candidate(documents.size());
        for (std::size_t r = 0; r < k; ++r) {
            candidate[order[r]] = (*solved)[r];
            loads.add((*solved)[r], documents[order[r]].length);
        }
        bool fits = true;
        for (std::size_t j = 0; j < m; ++j) {
            fits = fits && loads.tokens[j] <= capacity;
        }
        if (!fits || !place(documents, short_documents, capacity, rule, loads, candidate)) {
            continue;
        }
        if (*std::max_element(loads.work.begin(), loads.work.end()) < incumbent_work) {
            return finish(IlpSolve::Outcome::solver_improved, candidate);
        }
        break;
    }
    return finish(IlpSolve::Outcome::solver_no_better, incumbent);
}

std::vector<MicroBatch> next_fit(std::span<const Document> documents, int min_microbatches,
                                 std::int64_t capacity, const PackingCost& cost) {
    std::vector<MicroBatch> microbatches(1);
    for (const auto& document : documents) {
        if (microbatches.back().tokens + document.length > capacity) {
            microbatches.emplace_back();
        }
        microbatches.back().add(document, cost);
    }
    if (microbatches.size() < static_cast<std::size_t>(min_microbatches)) {
        microbatches.resize(min_microbatches);
    }
    return microbatches;
}

}  // namespace fulcrum::balance::detail
