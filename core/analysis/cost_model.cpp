#include "core/analysis/cost_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <tuple>
#include <unordered_map>

#include "core/analysis/core_shares.h"

#include <nlohmann/json.hpp>

namespace fulcrum::analysis {

namespace {

// ---- Non-negative least squares over at most three columns ----------------------------------
//
// A time cannot have a negative component, so the fit is non-negative least squares: minimise
// Σ (y − Xβ)² subject to β ≥ 0. Its optimum is the unconstrained least-squares fit on its own
// support (the columns with β > 0), so with three columns it is found exactly by fitting every
// one of the seven supports, dropping those whose design is rank-deficient or whose fit has a
// negative coefficient, and keeping the smallest residual. The intercept-only support is
// always feasible for non-negative times, so a fit always exists and is never NaN.
//
// Rank deficiency is what makes a column unidentifiable: all micro-batches of equal length make
// the token column a multiple of the intercept, one document per micro-batch of equal length
// makes all three proportional. Ties (equal residuals, up to rounding) go to the earlier support
// in the caller's list, which prefers work terms over the fixed term: with the token count the
// same in every sample, "every token costs t/T" predicts a run of other lengths better than
// "every pass costs t".

constexpr int kMaxColumns = 3;
using Row = std::array<double, kMaxColumns>;
using Support = std::array<bool, kMaxColumns>;

struct LinearFit {
    Row coefficients = {0, 0, 0};
    double ss_res = 0;
};

// Least squares on `support`; false when its design is rank-deficient. The columns are scaled
// to unit root-mean-square so that one pivot threshold serves tokens (~10⁴) and pairs (~10⁹).
bool solve_support(const std::vector<Row>& x, const std::vector<double>& y, const Support& support,
                   LinearFit& fit) {
    std::array<int, kMaxColumns> columns{};
    int k = 0;
    for (int c = 0; c < kMaxColumns; ++c) {
        if (support[c]) {
            columns[k++] = c;
        }
    }
    const double n = static_cast<double>(x.size());
    std::array<long double, kMaxColumns> scale{};
    for (int a = 0; a < k; ++a) {
        long double sum = 0;
        for (const Row& row : x) {
            sum += static_cast<long double>(row[columns[a]]) * row[columns[a]];
        }
        scale[a] = std::sqrt(sum / n);
        if (!(scale[a] > 0)) {
            return false;  // an all-zero column
        }
    }
    // Normal equations (XᵀX/n) β' = Xᵀy/n in the scaled columns, solved by Gaussian elimination
    // with partial pivoting.
    long double m[kMaxColumns][kMaxColumns + 1] = {};
    for (std::size_t i = 0; i < x.size(); ++i) {
        for (int a = 0; a < k; ++a) {
            const long double xa = x[i][columns[a]] / scale[a];
            for (int b = 0; b < k; ++b) {
                m[a][b] += xa * (x[i][columns[b]] / scale[b]);
            }
            m[a][k] += xa * y[i];
        }
    }
    for (int a = 0; a < k; ++a) {
        for (int b = 0; b <= k; ++b) {
            m[a][b] /= n;
        }
    }
    constexpr long double kSingular = 1e-10L;  // relative to the unit diagonal
    for (int p = 0; p < k; ++p) {
        int best = p;
        for (int r = p + 1; r < k; ++r) {
            if (std::fabs(m[r][p]) > std::fabs(m[best][p])) {
                best = r;
            }
        }
        if (std::fabs(m[best][p]) < kSingular) {
            return false;
        }
        for (int c = 0; c <= k; ++c) {
            std::swap(m[p][c], m[best][c]);
        }
        for (int r = p + 1; r < k; ++r) {
            const long double factor = m[r][p] / m[p][p];
            for (int c = p; c <= k; ++c) {
                m[r][c] -= factor * m[p][c];
            }
        }
    }
    std::array<long double, kMaxColumns> beta{};
    for (int p = k - 1; p >= 0; --p) {
        long double value = m[p][k];
        for (int c = p + 1; c < k; ++c) {
            value -= m[p][c] * beta[c];
        }
        beta[p] = value / m[p][p];
    }
    fit = LinearFit{};
    for (int a = 0; a < k; ++a) {
        fit.coefficients[columns[a]] = static_cast<double>(beta[a] / scale[a]);
    }
    long double ss = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
        long double predicted = 0;
        for (int c = 0; c < kMaxColumns; ++c) {
            predicted += static_cast<long double>(fit.coefficients[c]) * x[i][c];
        }
        ss += (y[i] - predicted) * (y[i] - predicted);
    }
    fit.ss_res = static_cast<double>(ss);
    return std::isfinite(fit.ss_res);
}

LinearFit non_negative_fit(const std::vector<Row>& x, const std::vector<double>& y,
                           std::span<const Support> supports) {
    long double sum_y2 = 0;
    for (double v : y) {
        sum_y2 += static_cast<long double>(v) * v;
    }
    // Residuals closer than this are equal: the later support must beat the earlier by more
    // than rounding.
    const double tie = 1e-12 * static_cast<double>(sum_y2);
    LinearFit best;
    bool found = false;
    for (const Support& support : supports) {
        LinearFit fit;
        if (!solve_support(x, y, support, fit)) {
            continue;
        }
        if (std::any_of(fit.coefficients.begin(), fit.coefficients.end(),
                        [](double c) { return c < 0 || !std::isfinite(c); })) {
            continue;
        }
        if (!found || fit.ss_res < best.ss_res - tie) {
            best = fit;
            found = true;
        }
    }
    return best;  // all zero when nothing was feasible (only for negative times)
}

// The samples as `for_each(visit)` hands them over, visit(measured, predicted) in the same order
// each time: it is called twice.
template <typename ForEach>
FitQuality quality_of(std::size_t n, const ForEach& for_each) {
    FitQuality q;
    q.samples = static_cast<int>(n);
    if (n == 0) {
        return q;
    }
    long double mean = 0;
    for_each([&](double m, double) { mean += m; });
    mean /= static_cast<long double>(n);
    long double ss_tot = 0, ss_res = 0, rel = 0;
    int rel_samples = 0;
    for_each([&](double m, double p) {
        ss_tot += (m - mean) * (m - mean);
        ss_res += (m - p) * (m - p);
        if (m > 0) {
            rel += std::fabs(p - m) / m;
            ++rel_samples;
        }
    });
    q.r_squared = ss_tot > 0 ? static_cast<double>(1 - ss_res / ss_tot) : 0.0;
    q.mean_abs_rel_error = rel_samples > 0 ? static_cast<double>(rel / rel_samples) : 0.0;
    return q;
}

FitQuality quality(const std::vector<double>& measured, const std::vector<double>& predicted) {
    return quality_of(measured.size(), [&](const auto& visit) {
        for (std::size_t i = 0; i < measured.size(); ++i) {
            visit(measured[i], predicted[i]);
        }
    });
}

// Columns: 1, tokens, pairs. Preference on ties: work terms before the fixed term.
constexpr std::array<Support, 7> kPassSupports = {{
    {true, true, true},
    {false, true, true},
    {true, true, false},
    {true, false, true},
    {false, true, false},
    {false, false, true},
    {true, false, false},
}};

// Columns: calls (1 for a captured range), bytes (the third unused).
constexpr std::array<Support, 3> kCollectiveSupports = {{
    {true, true, false},
    {false, true, false},
    {true, false, false},
}};

PassCost fit_pass(std::int16_t stage, Phase phase, const std::vector<Row>& x,
                  const std::vector<double>& y) {
    const LinearFit fit = non_negative_fit(x, y, kPassSupports);
    PassCost cost;
    cost.stage = stage;
    cost.phase = phase;
    cost.fixed_ns = fit.coefficients[0];
    cost.per_token_ns = fit.coefficients[1];
    cost.per_pair_ns = fit.coefficients[2];
    std::vector<double> predicted(y.size());
    for (std::size_t i = 0; i < y.size(); ++i) {
        predicted[i] =
            cost.predict(static_cast<std::int64_t>(x[i][1]), static_cast<std::int64_t>(x[i][2]));
    }
    cost.fit = quality(y, predicted);
    return cost;
}

double median(std::vector<double> values) {
    if (values.empty()) {
        return 0;
    }
    const std::size_t mid = values.size() / 2;
    std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid),
                     values.end());
    const double upper = values[mid];
    if (values.size() % 2 == 1) {
        return upper;
    }
    const double lower =
        *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
    return (lower + upper) / 2;
}

struct TransferSample {
    std::int64_t bytes = -1;
    std::int64_t transfer_ns = 0;
    // Calls the range stands for: the simulator writes one range per stage for all of a
    // pass's per-layer calls, with args {"calls":"N"}; a captured range is one call.
    std::int64_t calls = 1;
};

// The "calls" member of an event's args, 1 when absent; cached per interned args text.
std::int64_t calls_of(const RunTrace& trace, StringId args,
                      std::unordered_map<std::uint32_t, std::int64_t>& cache) {
    if (!args.valid()) {
        return 1;
    }
    const auto [it, inserted] = cache.try_emplace(args.value, 1);
    if (inserted) {
        const auto json = nlohmann::json::parse(trace.name(args), nullptr, false);
        if (json.is_object() && json.contains("calls")) {
            const auto& calls = json["calls"];
            std::int64_t value = 1;
            if (calls.is_number_integer()) {
                value = calls.get<std::int64_t>();
            } else if (calls.is_string()) {
                value = std::atoll(calls.get<std::string>().c_str());
            }
            it->second = std::max<std::int64_t>(value, 1);
        }
    }
    return it->second;
}

// latency + per_byte·B. When every sample moved the same bytes the two cannot be told apart;
// the median is then the latency, robust to the odd slow transfer.
CollectiveCost fit_collective(std::string name, Role role,
                              const std::vector<TransferSample>& samples) {
    CollectiveCost cost;
    cost.name = std::move(name);
    cost.role = role;
    // Samples without a byte count join only when none has one (a latency-only fit).
    const bool any_bytes = std::any_of(samples.begin(), samples.end(),
                                       [](const TransferSample& s) { return s.bytes >= 0; });
    std::vector<Row> x;
    std::vector<double> y;
    for (const TransferSample& s : samples) {
        if (any_bytes && s.bytes < 0) {
            continue;
        }
        x.push_back({static_cast<double>(s.calls),
                     static_cast<double>(std::max<std::int64_t>(s.bytes, 0)), 0.0});
        y.push_back(static_cast<double>(s.transfer_ns));
    }
    if (y.empty()) {
        return cost;
    }
    const bool same_bytes =
        std::all_of(x.begin(), x.end(), [&](const Row& row) { return row[1] == x.front()[1]; });
    const bool single_calls =
        std::all_of(x.begin(), x.end(), [&](const Row& row) { return row[0] == 1.0; });
    if (same_bytes && single_calls) {
        cost.latency_ns = std::max(0.0, median(y));
        cost.fitted_bytes = static_cast<std::int64_t>(x.front()[1]);
    } else {
        const LinearFit fit = non_negative_fit(x, y, kCollectiveSupports);
        cost.latency_ns = fit.coefficients[0];
        cost.per_byte_ns = fit.coefficients[1];
    }
    std::vector<double> predicted(y.size());
    for (std::size_t i = 0; i < y.size(); ++i) {
        predicted[i] = x[i][0] * cost.latency_ns + cost.per_byte_ns * x[i][1];
    }
    cost.fit = quality(y, predicted);
    return cost;
}

// What fit_collective finds for samples that all moved `bytes` in one call each, from their
// times in ascending order, without unpacking them: a 1 B-event run has millions, perhaps in a
// temporary file (matched_collectives.h).
Result<CollectiveCost> fit_collective_of_one_size(std::string name, Role role, std::int64_t bytes,
                                                  const MatchedCollectives::Times& times) {
    CollectiveCost cost;
    cost.name = std::move(name);
    cost.role = role;
    if (times.empty()) {
        return cost;
    }
    // The median: the middle one, or the two middle ones' mean.
    const std::size_t mid = times.size() / 2;
    std::size_t seen = 0;
    double lower = 0, upper = 0;
    Status read = times.for_each([&](std::span<const std::int64_t> run) {
        for (const std::int64_t ns : run) {
            if (seen + 1 == mid) {
                lower = static_cast<double>(ns);
            } else if (seen == mid) {
                upper = static_cast<double>(ns);
                return false;
            }
            ++seen;
        }
        return true;
    });
    const double median = times.size() % 2 == 1 ? upper : (lower + upper) / 2;
    const double moved = static_cast<double>(std::max<std::int64_t>(bytes, 0));
    cost.latency_ns = std::max(0.0, median);
    cost.fitted_bytes = static_cast<std::int64_t>(moved);
    const double predicted = 1.0 * cost.latency_ns + cost.per_byte_ns * moved;
    cost.fit = quality_of(times.size(), [&](const auto& visit) {
        if (!read) {
            return;
        }
        read = times.for_each([&](std::span<const std::int64_t> run) {
            for (const std::int64_t ns : run) {
                visit(static_cast<double>(ns), predicted);
            }
            return true;
        });
    });
    if (!read) {
        return read.error();
    }
    return cost;
}

// A pipeline receive waits for its sender; only the time after the matching send began is the
// transfer (the pairs: PipelineMatcher, host_ranges.h).
void pipeline_samples(const RunTrace& trace, const ScratchTable<PipelinePair>& pairs,
                      const CoreShares& shares,
                      std::map<std::string, std::vector<TransferSample>>& by_name) {
    // Each name's samples counted first: millions at 1 B events, which growth by doubling
    // would hold with up to as much again unused while the cost model is fitted beside the
    // other analyses.
    std::map<StringId, std::size_t> count;
    pairs.for_each([&](std::span<const PipelinePair> run) {
        for (const PipelinePair& pair : run) {
            ++count[pair.name];
        }
    });
    for (const auto& [id, n] : count) {
        by_name[std::string(trace.name(id))].reserve(n);
    }
    pairs.for_each([&](std::span<const PipelinePair> run) {
        for (const PipelinePair& recv : run) {
            const std::int64_t began = recv.send_start_ns;
            std::int64_t transfer = recv.recv_end_ns - began;
            if (!shares.shared()) {
                // Only a receive that was waiting when the send began saw the whole transfer; one
                // that started later found part or all of it done (posted sends are buffered).
                if (recv.recv_start_ns > began || began > recv.recv_end_ns) {
                    continue;
                }
            } else {
                // On shared cores a receiver that waited wakes up when it gets a core, which is the
                // replay's sharing, not the transfer (core_shares.h); one that came after the send
                // times the copy itself, which the receiver makes (a posted send waits in the
                // sender's buffer).
                if (recv.recv_start_ns < began) {
                    continue;
                }
                transfer = recv.recv_end_ns - recv.recv_start_ns;
            }
            by_name[std::string(trace.name(recv.name))].push_back({recv.bytes, transfer});
        }
    });
    std::erase_if(by_name, [](const auto& named) { return named.second.empty(); });
}

// The update as the simulator plays it (core/sim/stage_costs.h, update_start): from the last
// rank's arrival at the step's optimizer (the gradient norm's all-reduce waits for it) to the
// last rank's end, a whole core's time where ranks shared cores (the CPU the last rank's
// update used, where the engine marked it, else that time × its share); the mean over steps.
// The mean of every rank's range would count the earlier ranks' wait for the last as update.
double optimizer_ns(const std::vector<RankRanges>& ranges, const CoreShares& shares) {
    struct Arrivals {
        std::int64_t last_start = 0, last_end = 0;
        std::int64_t last_cpu = -1;
        std::int32_t last_rank = 0;
        bool any = false;
    };
    std::map<std::int64_t, Arrivals> steps;  // by step; a range without one alone
    std::int64_t unnamed = -1;
    for (const RankRanges& rank : ranges) {
        for (const RankRanges::Range& event : rank.optimizers) {
            Arrivals& step = steps[event.step >= 0 ? event.step : unnamed--];
            if (!step.any || event.start_ns > step.last_start) {
                step.last_start = event.start_ns;
                step.last_rank = rank.rank;
                step.last_cpu = shares.shared() ? event.cpu_ns : -1;
            }
            step.last_end = step.any ? std::max(step.last_end, event.end_ns) : event.end_ns;
            step.any = true;
        }
    }
    long double total = 0;
    for (const auto& [key, step] : steps) {
        total += step.last_cpu >= 0
                     ? static_cast<long double>(step.last_cpu)
                     : static_cast<long double>(step.last_end - step.last_start) *
                           shares.share(step.last_rank, step.last_start, step.last_end);
    }
    return steps.empty() ? 0.0 : static_cast<double>(total / steps.size());
}

}  // namespace

double PassCost::predict(std::int64_t tokens, std::int64_t pairs) const {
    return fixed_ns + per_token_ns * static_cast<double>(tokens) +
           per_pair_ns * static_cast<double>(pairs);
}

double CollectiveCost::predict(std::int64_t bytes) const {
    if (nccl) {
        return 1e3 * parallel::nccl_call_time(*nccl,
                                              static_cast<double>(std::max<std::int64_t>(bytes, 0)))
                         .time_us;
    }
    const std::int64_t moved =
        std::max<std::int64_t>(bytes, 0) - std::max<std::int64_t>(fitted_bytes, 0);
    return std::max(0.0, latency_ns + per_byte_ns * static_cast<double>(moved));
}

const PassCost* CostModel::pass(std::int16_t stage, Phase phase) const {
    for (const PassCost& cost : passes) {
        if (cost.stage == stage && cost.phase == phase) {
            return &cost;
        }
    }
    return nullptr;
}

const CollectiveCost* CostModel::collective(std::string_view name) const {
    for (const CollectiveCost& cost : collectives) {
        if (cost.name == name) {
            return &cost;
        }
    }
    return nullptr;
}

Result<CostModel> fit_cost_model(const RunTrace& trace, const PassTable& passes,
                                 const MatchedCollectives* collectives,
                                 const std::vector<RankRanges>* ranges,
                                 const WorkloadByRank* workload,
                                 const ScratchTable<PipelinePair>* pipeline) {
    const std::string run = "run '" + trace.run.name + "'";
    if (passes.empty()) {
        return Error{ErrorCode::invalid_input,
                     "cannot fit a cost model: " + run +
                         " has no forward or backward ranges (docs/annotations.md)"};
    }
    std::vector<HeldWork> own_held;
    if (workload == nullptr) {
        own_held = held_work(trace);
    }
    const std::vector<HeldWork>& held = workload != nullptr ? workload->held : own_held;
    if (held.empty()) {
        return Error{ErrorCode::invalid_input,
                     "cannot fit a cost model: " + run +
                         " has no workload table (the fulcrum.workload marks), so the tokens "
                         "and pairs of its passes are unknown"};
    }

    CostModel model;
    model.source = trace.run.name;

    std::vector<RankRanges> read;
    if (ranges == nullptr) {
        read = rank_ranges(trace);
        ranges = &read;
    }
    const CoreShares shares = CoreShares::of(trace, passes, *ranges);
    const auto held_of = [&](const Pass& pass) -> const HeldWork* {
        const auto it = std::lower_bound(held.begin(), held.end(),
                                         std::tie(pass.rank, pass.step, pass.microbatch),
                                         [](const HeldWork& w, const auto& key) {
                                             return std::tie(w.rank, w.step, w.microbatch) < key;
                                         });
        return it != held.end() && it->rank == pass.rank && it->step == pass.step &&
                       it->microbatch == pass.microbatch
                   ? &*it
                   : nullptr;
    };
    // A pass without a stage (a foreign trace) is fitted under its rank's pipeline
    // coordinate, or stage 0: the JSON format and the simulator know stages ≥ 0 only.
    const auto fitted_as = [&](const Pass& pass) {
        std::int16_t stage = pass.stage;
        if (stage < 0) {
            const RankTrace* rank = trace.find_rank(pass.rank);
            stage = static_cast<std::int16_t>(rank != nullptr ? std::max(rank->info.pp, 0) : 0);
        }
        return std::pair(stage, pass.phase);
    };
    using FitKey = std::pair<std::int16_t, Phase>;
    std::map<FitKey, std::size_t> fits;  // passes of each (stage, phase)
    passes.for_each([&](std::span<const Pass> run) {
        for (const Pass& pass : run) {
            ++fits[fitted_as(pass)];
        }
    });
    // A few (stage, phase)s at a time, as many as kFitSamples samples hold, each's samples in
    // run order: a 1 B-event run has millions, and a table in a temporary file is read once a
    // batch (pass_table.h), not once a (stage, phase).
    constexpr std::size_t kFitSamples = 1 << 21;  // 64 MiB of rows and times
    struct Samples {
        std::vector<Row> x;
        std::vector<double> y;
    };
    for (auto first = fits.begin(); first != fits.end();) {
        std::size_t held_samples = 0;
        const auto last = batch_end(first, fits.end(), kFitSamples, held_samples);
        std::map<FitKey, Samples> batch;
        for (auto fit = first; fit != last; ++fit) {
            Samples& samples = batch[fit->first];
            samples.x.reserve(fit->second);
            samples.y.reserve(fit->second);
        }
        passes.for_each([&](std::span<const Pass> run) {
            for (const Pass& pass : run) {
                const auto in_batch = batch.find(fitted_as(pass));
                if (in_batch == batch.end()) {
                    continue;
                }
                const HeldWork* work = held_of(pass);
                if (work == nullptr) {
                    continue;
                }
                Samples& samples = in_batch->second;
                samples.x.push_back(
                    {1.0, static_cast<double>(work->tokens), static_cast<double>(work->pairs)});
                // Its time at a whole core where its rank shared one: the CPU it used where the
                // run says (the engine's `fulcrum.cpu` marks), else its compute time × the share
                // of a core it had (core_shares.h).
                if (shares.shared() && pass.cpu_ns >= 0) {
                    samples.y.push_back(static_cast<double>(pass.cpu_ns));
                } else {
                    const auto [start, end] = CoreShares::computing(pass);
                    samples.y.push_back(static_cast<double>(pass.compute_ns) *
                                        shares.share(pass.rank, start, end));
                }
            }
        });
        for (auto& [fit, samples] : batch) {
            if (samples.y.size() >= 3) {
                model.passes.push_back(fit_pass(fit.first, fit.second, samples.x, samples.y));
            }
            samples = Samples{};  // freed as soon as fitted
        }
        first = last;
    }
    if (model.passes.empty()) {
        return Error{ErrorCode::invalid_input,
                     "cannot fit a cost model: no pipeline stage and phase of " + run +
                         " has 3 passes with a workload row (rank, step, micro-batch)"};
    }

    std::optional<MatchedCollectives> matched;
    if (collectives == nullptr) {
        matched = matched_collectives(trace);
        collectives = &*matched;
    }
    // Each instance's time is its last member's: the others' wait for it is the imbalance the
    // replay plays. Where ranks shared cores, the members of a TP or CP collective, which syncs
    // every layer, reach it a time slice apart (the scheduler runs some to the collective while
    // the others wait for a core), which the fluid replay of the passes does not play
    // (core_shares.h): such a collective keeps its members' mean (matched_collectives.h).
    // One name at a time, in the order of the names (a pipeline receive's own rule wins over
    // a collective of the same name): a 1 B-event run has millions of instances of one name,
    // unpacked only while that name is fitted.
    const std::vector<PipelinePair> paired =
        pipeline == nullptr ? pipeline_pairs(trace, *ranges) : std::vector<PipelinePair>{};
    const ScratchTable<PipelinePair> paired_view(paired);
    if (pipeline == nullptr) {
        pipeline = &paired_view;
    }
    std::map<std::string, std::vector<TransferSample>> receives;
    pipeline_samples(trace, *pipeline, shares, receives);
    std::map<std::string, const MatchedCollectives::Transfers*> kept_by_name;
    for (const auto& [id, kept] : collectives->transfers()) {
        kept_by_name.emplace(trace.name(StringId{id}), &kept);
    }
    for (auto& [name, list] : receives) {
        kept_by_name.emplace(name, nullptr);
    }
    std::unordered_map<std::uint32_t, std::int64_t> calls_cache;
    for (const auto& [name, kept] : kept_by_name) {
        if (const auto receive = receives.find(name); receive != receives.end()) {
            model.collectives.push_back(fit_collective(name, Role::pipeline_recv, receive->second));
            continue;
        }
        // Samples without a byte count join only when none has one (fit_collective).
        const bool any_bytes =
            std::any_of(kept->by_bytes.begin(), kept->by_bytes.end(),
                        [](const auto& group) { return group.first.first >= 0; });
        const auto joins = [&](const auto& group) { return !any_bytes || group.first.first >= 0; };
        if (std::count_if(kept->by_bytes.begin(), kept->by_bytes.end(), joins) == 1) {
            const auto& group = *std::find_if(kept->by_bytes.begin(), kept->by_bytes.end(), joins);
            if (calls_of(trace, StringId{group.first.second}, calls_cache) == 1) {
                auto cost =
                    fit_collective_of_one_size(name, kept->role, group.first.first, group.second);
                if (!cost) {
                    return cost.error();
                }
                model.collectives.push_back(std::move(*cost));
                continue;
            }
        }
        std::vector<TransferSample> samples;
        for (const auto& [bytes_args, times] : kept->by_bytes) {
            const std::int64_t bytes = bytes_args.first;
            const std::int64_t calls = calls_of(trace, StringId{bytes_args.second}, calls_cache);
            const Status read = times.for_each([&](std::span<const std::int64_t> run) {
                for (const std::int64_t ns : run) {
                    samples.push_back({bytes, ns, calls});
                }
                return true;
            });
            if (!read) {
                return read.error();
            }
        }
        std::sort(samples.begin(), samples.end(),
                  [](const TransferSample& a, const TransferSample& b) {
                      return std::tie(a.bytes, a.calls, a.transfer_ns) <
                             std::tie(b.bytes, b.calls, b.transfer_ns);
                  });
        model.collectives.push_back(fit_collective(name, kept->role, samples));
    }

    model.optimizer_ns = optimizer_ns(*ranges, shares);
    return model;
}

}  // namespace fulcrum::analysis
