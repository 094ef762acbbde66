#include "core/analysis/cp_load.h"

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "core/analysis/imbalance_degree.h"
#include "core/balance/cp_shard.h"

namespace fulcrum::analysis {

namespace {

using RankRows = std::vector<const WorkloadEntry*>;  // one CP rank's rows, in table order

bool same_ranges(const balance::CpShard& shard, const RankRows& rows) {
    std::size_t i = 0;
    for (const WorkloadEntry* row : rows) {
        if (row->token_end <= row->token_begin) {
            continue;  // an empty row holds nothing and shard_microbatch writes none
        }
        if (i >= shard.ranges.size() ||
            shard.ranges[i] != balance::TokenRange{static_cast<std::uint64_t>(row->doc_id),
                                                   row->token_begin, row->token_end}) {
            return false;
        }
        ++i;
    }
    return i == shard.ranges.size();
}

// The packed order under zigzag sharding, when the rows are exactly what zigzag makes of it.
// Rank r holds chunk r then chunk 2·CP−1−r of the packed sequence (cut at ⌊k·T/2CP⌋), so its
// rows split at chunk r's length; reading the chunks 0 … 2CP−1 gives the packed order back.
std::optional<std::vector<balance::Document>> zigzag_order(
    const std::vector<RankRows>& ranks, const std::vector<balance::Document>& documents,
    std::int64_t total) {
    const int cp = static_cast<int>(ranks.size());
    const int chunks = 2 * cp;
    std::vector<RankRows> chunk_rows(static_cast<std::size_t>(chunks));
    for (int r = 0; r < cp; ++r) {
        const std::int64_t first = total * (r + 1) / chunks - total * r / chunks;
        std::int64_t held = 0;
        for (const WorkloadEntry* row : ranks[static_cast<std::size_t>(r)]) {
            const int chunk = held < first ? r : chunks - 1 - r;
            held += std::max(0, row->token_end - row->token_begin);
            if (chunk == r && held > first) {
                return std::nullopt;  // a row straddles the chunk boundary: not zigzag
            }
            chunk_rows[static_cast<std::size_t>(chunk)].push_back(row);
        }
    }
    std::unordered_map<std::int64_t, std::size_t> index;
    for (std::size_t i = 0; i < documents.size(); ++i) {
        index.emplace(static_cast<std::int64_t>(documents[i].id), i);
    }
    std::vector<balance::Document> order;
    std::vector<bool> placed(documents.size(), false);
    for (const RankRows& rows : chunk_rows) {
        for (const WorkloadEntry* row : rows) {
            const std::size_t i = index.at(row->doc_id);
            if (!placed[i]) {
                placed[i] = true;
                order.push_back(documents[i]);
            }
        }
    }
    balance::CpShardingState unused;
    auto plan = balance::shard_microbatch(order, cp, balance::CpSharding::zigzag, unused);
    if (!plan) {
        return std::nullopt;
    }
    for (int r = 0; r < cp; ++r) {
        if (!same_ranges(plan->ranks[static_cast<std::size_t>(r)],
                         ranks[static_cast<std::size_t>(r)])) {
            return std::nullopt;
        }
    }
    return order;
}

// A micro-batch's documents in packed order, rebuilt from what its CP ranks hold.
//
// Contiguous and per-doc sharding keep every rank's rows in packed order, so each rank's list
// of documents is a chain of "comes before" constraints; their union, read in topological order
// (ties by first appearance scanning CP ranks 0 … CP−1, each rank's rows in table order) is the
// packed order — for contiguous the ranks' pieces end to end, for per-doc the order every rank
// shares, with the short documents that skipped rank 0 put where the other ranks place them.
// Zigzag breaks the chain property (rank 0 holds the first and the last chunk), so it is
// recognised first, by re-sharding the candidate order and comparing.
std::vector<balance::Document> packed_documents(const std::vector<RankRows>& ranks) {
    std::vector<balance::Document> documents;  // by first appearance
    std::unordered_map<std::int64_t, std::size_t> index;
    std::int64_t total = 0;
    for (const RankRows& rows : ranks) {
        for (const WorkloadEntry* row : rows) {
            if (index.emplace(row->doc_id, documents.size()).second) {
                documents.push_back({static_cast<std::uint64_t>(row->doc_id), row->doc_length});
                total += row->doc_length;
            }
        }
    }
    if (ranks.size() > 1) {
        if (auto order = zigzag_order(ranks, documents, total)) {
            return std::move(*order);
        }
    }

    const std::size_t n = documents.size();
    std::vector<std::vector<std::size_t>> successors(n);
    std::vector<int> predecessors(n, 0);
    for (const RankRows& rows : ranks) {
        std::vector<bool> seen(n, false);
        std::size_t previous = n;
        for (const WorkloadEntry* row : rows) {
            const std::size_t i = index.at(row->doc_id);
            if (seen[i]) {
                continue;  // a second range of the same document (per-doc's mirror chunk)
            }
            seen[i] = true;
            if (previous != n) {
                successors[previous].push_back(i);
                ++predecessors[i];
            }
            previous = i;
        }
    }
    std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> ready;
    for (std::size_t i = 0; i < n; ++i) {
        if (predecessors[i] == 0) {
            ready.push(i);
        }
    }
    std::vector<balance::Document> order;
    order.reserve(n);
    std::vector<bool> placed(n, false);
    std::size_t next_unplaced = 0;
    while (order.size() < n) {
        if (ready.empty()) {
            // Ranks disagree on the order (a cycle): take the earliest document left.
            while (placed[next_unplaced]) {
                ++next_unplaced;
            }
            ready.push(next_unplaced);
            predecessors[next_unplaced] = 0;
        }
        const std::size_t i = ready.top();
        ready.pop();
        if (placed[i]) {
            continue;
        }
        placed[i] = true;
        order.push_back(documents[i]);
        for (std::size_t j : successors[i]) {
            if (--predecessors[j] == 0 && !placed[j]) {
                ready.push(j);
            }
        }
    }
    return order;
}

struct GroupKey {
    std::int32_t step, microbatch, dp, pp, tp;
    auto tied() const { return std::tie(step, microbatch, dp, pp, tp); }
    bool operator<(const GroupKey& other) const { return tied() < other.tied(); }
};

constexpr std::array kAlternatives = {balance::CpSharding::contiguous, balance::CpSharding::zigzag,
                                      balance::CpSharding::per_document};
static_assert(kAlternatives.size() == ShardingPrediction::kShardings);

using RankMb = MeasuredAttention::Key;

// (rank, step, micro-batch) of a pass, held work or workload row.
template <typename T>
RankMb rank_mb_of(const T& x) {
    return {x.rank, x.step, x.microbatch};
}

// The element of `sorted` (ascending by `key_of`) whose key is `key`, or null.
template <typename T, typename KeyOf>
const T* find_sorted(const std::vector<T>& sorted, const RankMb& key, KeyOf key_of) {
    const auto it = std::lower_bound(sorted.begin(), sorted.end(), key,
                                     [&](const T& x, const RankMb& k) { return key_of(x) < k; });
    return it != sorted.end() && key_of(*it) == key ? &*it : nullptr;
}

// What a run holds about its CP groups, keyed for the analysis: each group's members by cp
// coordinate, and per rank and micro-batch its measured attention time, the work it held and
// its workload rows. Sorted arrays rather than trees: a 1 B-event run has millions of
// (rank, step, micro-batch).
struct CpLoadInputs {
    int cp = 1;
    // DeepSpeed-Ulysses (run.config cp_impl): every rank attends over the whole micro-batch
    // with its cp-th of the heads, so each is predicted an equal share of the group's pairs.
    bool ulysses = false;
    // The CP groups: ranks that share dp, pp and tp, by their cp coordinate (nullptr: a CP
    // rank missing from the run).
    std::map<std::tuple<int, int, int>, std::vector<const RankInfo*>> members{};
    std::vector<GroupKey> keys{};  // every (step, micro-batch, group) with a figure, ascending
    std::vector<std::pair<RankMb, std::int64_t>> attention{};  // Σ over the passes, by key
    // WorkloadByRank's: what each (rank, step, micro-batch) held.
    const std::vector<HeldWork>& held;

    const std::int64_t* attention_of(const RankMb& at) const {
        const auto* found = find_sorted(attention, at, [](const auto& item) { return item.first; });
        return found != nullptr ? &found->second : nullptr;
    }
    const HeldWork* held_of(const RankMb& at) const {
        return find_sorted(held, at, [](const HeldWork& work) { return rank_mb_of(work); });
    }
    const std::vector<const RankInfo*>& members_of(int dp, int pp, int tp) const {
        return members.at({dp, pp, tp});
    }
};

// False where a rank's coordinates are unknown, or outside the configured grid.
bool in_grid(const RankInfo& rank, int cp) {
    return rank.cp >= 0 && rank.cp < cp;
}

// The CP groups of the run's grid: ranks that share dp, pp and tp, by their cp coordinate (a
// rank without coordinates, or outside the grid, in none).
std::map<std::tuple<int, int, int>, std::vector<const RankInfo*>> cp_members(const RunTrace& trace,
                                                                             int cp) {
    std::map<std::tuple<int, int, int>, std::vector<const RankInfo*>> members;
    for (const RankTrace& rank : trace.ranks) {
        const RankInfo& r = rank.info;
        if (!in_grid(r, cp)) {
            continue;
        }
        auto& group = members[{r.dp, r.pp, r.tp}];
        group.resize(static_cast<std::size_t>(cp), nullptr);
        group[static_cast<std::size_t>(r.cp)] = &r;
    }
    return members;
}

// The run's CP degree where it has CP groups to analyse; nothing when cp = 1 or the grid is
// unknown.
std::optional<int> cp_degree(const RunTrace& trace) {
    if (!trace.config.grid_known || trace.config.layout.grid.cp <= 1) {
        return std::nullopt;
    }
    return trace.config.layout.grid.cp;
}

CpLoadInputs gather_inputs(const RunTrace& trace, MeasuredAttention attention, int cp,
                           const WorkloadByRank& workload) {
    CpLoadInputs in{.held = workload.held};
    in.cp = cp;
    in.members = cp_members(trace, cp);
    std::unordered_map<std::int32_t, const RankInfo*> info_of;
    for (const RankTrace& rank : trace.ranks) {
        if (in_grid(rank.info, cp)) {
            info_of[rank.info.rank] = &rank.info;
        }
    }
    in.attention = std::move(attention.ns);
    // A key for every (rank, step, micro-batch) that was measured or held, then each once.
    in.keys.reserve(in.attention.size() + in.held.size());
    const auto add_key = [&](const RankMb& at) {
        const auto& [rank, step, microbatch] = at;
        if (const auto it = info_of.find(rank); it != info_of.end()) {
            in.keys.push_back({step, microbatch, it->second->dp, it->second->pp, it->second->tp});
        }
    };
    for (const auto& [at, ns] : in.attention) {
        add_key(at);
    }
    for (const HeldWork& work : in.held) {
        add_key(rank_mb_of(work));
    }
    std::sort(in.keys.begin(), in.keys.end());
    in.keys.erase(
        std::unique(in.keys.begin(), in.keys.end(),
                    [](const GroupKey& a, const GroupKey& b) { return a.tied() == b.tied(); }),
        in.keys.end());
    // A group's CP ranks each gave a key: without the duplicates' room, before the groups are
    // made beside it (tens of MB at 1 B events).
    in.keys.shrink_to_fit();
    return in;
}

// One step's workload rows, each (rank, micro-batch)'s in the order the step gives them: what
// the alternatives read, a step at a time (WorkloadByRank::step_rows).
class StepRows {
public:
    Status load(const WorkloadByRank& workload, std::int32_t step) {
        auto rows = workload.step_rows(step);
        if (!rows) {
            return rows.error();
        }
        rows_ = std::move(*rows);
        by_rank_.clear();
        by_rank_.reserve(rows_.size());
        for (const WorkloadEntry& row : rows_) {
            by_rank_.push_back(&row);
        }
        std::stable_sort(by_rank_.begin(), by_rank_.end(),
                         [](const WorkloadEntry* a, const WorkloadEntry* b) {
                             return rank_mb_of(*a) < rank_mb_of(*b);
                         });
        return {};
    }
    RankRows of(const RankMb& at) const {
        const auto [first, last] =
            std::equal_range(by_rank_.begin(), by_rank_.end(), at,
                             [](const auto& a, const auto& b) { return key_of(a) < key_of(b); });
        return RankRows(first, last);
    }

private:
    static RankMb key_of(const WorkloadEntry* row) { return rank_mb_of(*row); }
    static const RankMb& key_of(const RankMb& key) { return key; }

    std::vector<WorkloadEntry> rows_;
    std::vector<const WorkloadEntry*> by_rank_;  // by (rank, micro-batch), stably
};

// One group's ranks with what was measured and held, and the spreads of both.
struct GroupFigures {
    CpGroupLoad group;
    std::optional<SetSpread> time_spread, pair_spread;
};

GroupFigures group_figures(const CpLoadInputs& in, const GroupKey& key) {
    GroupFigures out;
    CpGroupLoad& group = out.group;
    group.step = key.step;
    group.microbatch = key.microbatch;
    group.dp = key.dp;
    group.pp = key.pp;
    group.tp = key.tp;
    std::vector<std::int64_t> times, pairs;
    group.ranks.reserve(static_cast<std::size_t>(in.cp));
    for (const RankInfo* member : in.members_of(key.dp, key.pp, key.tp)) {
        if (member == nullptr) {
            continue;
        }
        CpRankLoad load;
        load.rank = member->rank;
        load.cp_rank = member->cp;
        const RankMb at{member->rank, key.step, key.microbatch};
        if (const std::int64_t* attention = in.attention_of(at)) {
            load.attention_ns = *attention;
            times.push_back(*attention);
        }
        if (const HeldWork* held = in.held_of(at)) {
            load.tokens = held->tokens;
            load.pairs = held->pairs;
            pairs.push_back(held->pairs);
        }
        group.ranks.push_back(load);
    }
    if (in.ulysses && !pairs.empty()) {
        const std::int64_t total = std::accumulate(pairs.begin(), pairs.end(), std::int64_t{0});
        const std::int64_t share = total / static_cast<std::int64_t>(pairs.size());
        std::fill(pairs.begin(), pairs.end(), share);
        for (CpRankLoad& load : group.ranks) {
            if (load.pairs) {
                load.pairs = share;
            }
        }
    }
    out.time_spread = spread_of(times);
    out.pair_spread = spread_of(pairs);
    group.measured_imbalance =
        out.time_spread ? std::optional(out.time_spread->degree()) : std::nullopt;
    group.predicted_imbalance =
        out.pair_spread ? std::optional(out.pair_spread->degree()) : std::nullopt;
    return out;
}

// The imbalance each alternative sharding would give the group's documents, in kAlternatives'
// order; not known when the rows cannot say (a document without tokens, no attention work).
// `rotation` is per-doc's leftover rotation for the group's (pp, tp).
ShardingPrediction alternatives_for(const CpLoadInputs& in, const StepRows& step_rows,
                                    const CpGroupLoad& group, balance::CpShardingState& rotation) {
    std::vector<RankRows> by_cp_rank(static_cast<std::size_t>(in.cp));
    bool any = false;
    for (const RankInfo* member : in.members_of(group.dp, group.pp, group.tp)) {
        if (member == nullptr) {
            continue;
        }
        RankRows rows = step_rows.of({member->rank, group.step, group.microbatch});
        if (!rows.empty()) {
            by_cp_rank[static_cast<std::size_t>(member->cp)] = std::move(rows);
            any = true;
        }
    }
    if (!any) {
        return {};
    }
    const std::vector<balance::Document> documents = packed_documents(by_cp_rank);
    ShardingPrediction predicted;
    for (std::size_t i = 0; i < kAlternatives.size(); ++i) {
        const balance::CpSharding sharding = kAlternatives[i];
        balance::CpShardingState scratch;
        balance::CpShardingState& state =
            sharding == balance::CpSharding::per_document ? rotation : scratch;
        auto plan = balance::shard_microbatch(documents, in.cp, sharding, state);
        if (!plan) {
            return {};
        }
        std::vector<std::int64_t> work;
        for (const balance::CpShard& shard : plan->ranks) {
            work.push_back(shard.attention_work);
        }
        const std::optional<double> imbalance = imbalance_of(work);
        if (!imbalance) {
            return {};
        }
        predicted.imbalance[i] = *imbalance;
    }
    predicted.known = true;
    return predicted;
}

// Fills every group's alternatives in the engine's order — step, DP replica, micro-batch — so
// per-doc's leftover rotation (CpShardingState) advances as it did in the run; every (pp, tp)
// sees the same micro-batches and keeps its own copy of the rotation. A step at a time, its
// rows read once: each (pp, tp) still meets its groups in that order.
Status predict_alternatives(const CpLoadInputs& in, const WorkloadByRank& workload,
                            std::vector<CpGroupLoad>& groups,
                            const std::function<Status(double)>& steps_done) {
    std::vector<std::size_t> order(groups.size());
    for (std::size_t i = 0; i < order.size(); ++i) {
        order[i] = i;
    }
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        const CpGroupLoad& x = groups[a];
        const CpGroupLoad& y = groups[b];
        return std::tie(x.step, x.pp, x.tp, x.dp, x.microbatch) <
               std::tie(y.step, y.pp, y.tp, y.dp, y.microbatch);
    });
    std::map<std::pair<int, int>, balance::CpShardingState> rotation;
    StepRows step_rows;
    std::optional<std::int32_t> loaded;
    std::size_t steps = 0, done = 0;
    for (std::size_t i = 0; i < order.size(); ++i) {
        steps += i == 0 || groups[order[i]].step != groups[order[i - 1]].step ? 1 : 0;
    }
    const auto tell = [&]() -> Status {
        return steps_done ? steps_done(static_cast<double>(done) / static_cast<double>(steps))
                          : Status{};
    };
    for (std::size_t index : order) {
        CpGroupLoad& group = groups[index];
        if (loaded != group.step) {
            if (loaded) {
                ++done;
                if (auto status = tell(); !status) {
                    return status;
                }
            }
            if (auto status = step_rows.load(workload, group.step); !status) {
                return status;
            }
            loaded = group.step;
        }
        group.predicted_by_sharding =
            alternatives_for(in, step_rows, group, rotation[{group.pp, group.tp}]);
    }
    if (loaded) {
        ++done;
        return tell();
    }
    return {};
}

// The alternatives' headline figures. A micro-batch's total attention work does not depend
// on how it is sharded, so every alternative weighs each group by the same mean pairs.
void weigh_alternatives(const std::vector<std::optional<double>>& pair_means,
                        CpLoadAnalysis& result) {
    std::vector<double> by_sharding(kAlternatives.size(), 0.0);
    double weight = 0;
    for (std::size_t g = 0; g < result.groups.size(); ++g) {
        const CpGroupLoad& group = result.groups[g];
        if (pair_means[g] && group.predicted_by_sharding.known) {
            for (std::size_t i = 0; i < kAlternatives.size(); ++i) {
                by_sharding[i] += group.predicted_by_sharding.imbalance[i] * *pair_means[g];
            }
            weight += *pair_means[g];
        }
    }
    if (weight > 0) {
        for (std::size_t i = 0; i < kAlternatives.size(); ++i) {
            result.mean_predicted_by_sharding.emplace_back(
                balance::cp_sharding_name(kAlternatives[i]), by_sharding[i] / weight);
        }
    }
}

}  // namespace

std::vector<std::pair<std::string, double>> ShardingPrediction::named() const {
    std::vector<std::pair<std::string, double>> out;
    if (known) {
        for (std::size_t i = 0; i < kAlternatives.size(); ++i) {
            out.emplace_back(balance::cp_sharding_name(kAlternatives[i]), imbalance[i]);
        }
    }
    return out;
}

MeasuredAttention measured_attention(const RunTrace& trace, const PassTable& passes) {
    MeasuredAttention out;
    const std::optional<int> cp = cp_degree(trace);
    if (!cp) {
        return out;
    }
    std::unordered_set<std::int32_t> in_groups;
    for (const RankTrace& rank : trace.ranks) {
        if (in_grid(rank.info, *cp)) {
            in_groups.insert(rank.info.rank);
        }
    }
    auto& ns = out.ns;
    ns.reserve(passes.size());
    passes.for_each([&](std::span<const Pass> run) {
        for (const Pass& pass : run) {
            if (in_groups.contains(pass.rank)) {
                ns.emplace_back(rank_mb_of(pass), pass.attention_ns);
            }
        }
    });
    std::sort(ns.begin(), ns.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::size_t summed = 0;
    for (const auto& [key, time] : ns) {
        if (summed > 0 && ns[summed - 1].first == key) {
            ns[summed - 1].second += time;
        } else {
            ns[summed++] = {key, time};
        }
    }
    ns.resize(summed);
    ns.shrink_to_fit();
    return out;
}

CpLoadAnalysis analyze_cp_load(const RunTrace& trace, const std::vector<Pass>& passes) {
    auto result =
        analyze_cp_load(trace, measured_attention(trace, passes), WorkloadByRank::of(trace));
    // Rows in memory cannot fail to read.
    return result ? std::move(*result) : CpLoadAnalysis{};
}

Result<CpLoadAnalysis> analyze_cp_load(const RunTrace& trace, MeasuredAttention attention,
                                       const WorkloadByRank& workload,
                                       const std::function<Status(double)>& steps_done) {
    CpLoadAnalysis result;
    result.sharding = trace.config.cp_shard;
    if (trace.config.grid_known) {
        result.cp = trace.config.layout.grid.cp;
    }
    const std::optional<int> cp = cp_degree(trace);
    if (!cp) {
        return result;
    }
    CpLoadInputs in = gather_inputs(trace, std::move(attention), *cp, workload);
    in.ulysses = trace.config.layout.context_parallelism == parallel::ContextParallelism::ulysses;

    // Each group's spreads, once: its own degrees, and its weight in the headline figures
    // (Σ max / Σ mean over the groups, docs/analyses.md §5).
    WeightedImbalance measured, predicted;
    std::vector<std::optional<double>> pair_means;  // by group: its mean pairs, the weight
    pair_means.reserve(in.keys.size());
    result.groups.reserve(in.keys.size());  // a million at 1 B events: no doubling's slack
    for (const GroupKey& key : in.keys) {
        GroupFigures figures = group_figures(in, key);
        measured.add(figures.time_spread);
        predicted.add(figures.pair_spread);
        pair_means.push_back(figures.pair_spread ? std::optional(figures.pair_spread->mean)
                                                 : std::nullopt);
        result.groups.push_back(std::move(figures.group));
    }
    result.mean_measured_imbalance = measured.value();
    result.mean_predicted_imbalance = predicted.value();
    // The alternatives read the groups and the documents only: the measured times and the
    // keys (a few tens of megabytes at 1 B events) go first.
    std::vector<std::pair<RankMb, std::int64_t>>().swap(in.attention);
    std::vector<GroupKey>().swap(in.keys);
    if (auto status = predict_alternatives(in, workload, result.groups, steps_done); !status) {
        return status.error();
    }
    weigh_alternatives(pair_means, result);
    return result;
}

}  // namespace fulcrum::analysis
