#include "core/analysis/matched_collectives.h"

#include <algorithm>
#include <limits>

#include "core/analysis/core_shares.h"

namespace fulcrum::analysis {

namespace {

// An instance's place in run order, without its participants.
CollectiveInstance order_of(const CollectiveInstance& instance) {
    CollectiveInstance order;
    order.step = instance.step;
    order.first_start_ns = instance.first_start_ns;
    order.sequence = instance.sequence;
    return order;
}

// A rank cannot wait for itself: an instance counts towards stragglers only when two ranks or
// more took part.
bool matched_across_ranks(const CollectiveInstance& instance) {
    const auto& all = instance.participants;
    return std::any_of(all.begin(), all.end(),
                       [&](const CollectiveParticipant& p) { return p.rank != all.front().rank; });
}

}  // namespace

MatchedCollectives::MatchedCollectives(const RunTrace& trace)
    : members_mean_(CoreShares::any_shared(trace)) {}

MatchedCollectives::MatchedCollectives(const RunTrace& trace,
                                       std::vector<CollectiveInstance> instances)
    : MatchedCollectives(trace) {
    for (CollectiveInstance& instance : instances) {
        add(std::move(instance));
    }
    finish();
}

void MatchedCollectives::add(CollectiveInstance&& instance) {
    if (instance.participants.empty()) {
        return;
    }
    const CollectiveParticipant& last = instance.last_arrival();
    const std::int64_t wait = instance.total_wait_ns();

    // The summary, by name and group.
    std::vector<std::int32_t> ranks;
    ranks.reserve(instance.participants.size());
    for (const CollectiveParticipant& p : instance.participants) {
        ranks.push_back(p.rank);
    }
    std::sort(ranks.begin(), ranks.end());
    const auto [at, added] =
        group_index_.try_emplace({instance.name.value, std::move(ranks)}, groups_.size());
    if (added) {
        Group group;
        group.name = instance.name;
        group.ranks = at->first.second;
        group.first = order_of(instance);
        groups_.push_back(std::move(group));
    }
    Group& group = groups_[at->second];
    if (in_run_order(instance, group.first)) {
        group.first = order_of(instance);
    }
    ++group.calls;
    group.bytes += std::max<std::int64_t>(last.bytes, 0);
    group.transfer_ns += last.end_ns - last.start_ns;
    group.wait_ns += wait;

    // Stragglers. An instance where everyone started together (no one waited) has no last
    // arrival worth the name, so it counts only towards `instances`.
    if (matched_across_ranks(instance)) {
        for (const CollectiveParticipant& p : instance.participants) {
            ++arrivals_[p.rank].instances;
        }
        if (wait > 0) {
            Arrivals& a = arrivals_[last.rank];
            ++a.last_arrivals;
            a.caused_wait_ns += wait;
        }
    }

    // The cost model's sample.
    std::int64_t transfer = last.end_ns - last.start_ns;
    const bool in_pass =
        instance.role == Role::tp_collective || instance.role == Role::cp_collective;
    if (members_mean_ && in_pass) {
        std::int64_t total = 0;
        for (const CollectiveParticipant& member : instance.participants) {
            total += member.end_ns - member.start_ns;
        }
        transfer = total / static_cast<std::int64_t>(instance.participants.size());
    }
    const auto [samples, first_of_name] = transfers_.try_emplace(instance.name.value);
    if (first_of_name || in_run_order(instance, samples->second.first)) {
        samples->second.role = instance.role;
        samples->second.first = order_of(instance);
    }
    samples->second.by_bytes[{last.bytes, last.args.value}].push_back(transfer);

    if (instance.role == Role::dp_collective) {
        dp_.push_back(std::move(instance));
    }
}

void MatchedCollectives::Times::push_back(std::int64_t ns) {
    const bool fits = ns >= std::numeric_limits<std::int32_t>::min() &&
                      ns <= std::numeric_limits<std::int32_t>::max();
    if (wide_.empty() && fits) {
        narrow_.push_back(static_cast<std::int32_t>(ns));
        return;
    }
    if (wide_.empty()) {
        wide_.assign(narrow_.begin(), narrow_.end());
        narrow_ = {};
    }
    wide_.push_back(ns);
}

void MatchedCollectives::Times::sort() {
    std::sort(narrow_.begin(), narrow_.end());
    std::sort(wide_.begin(), wide_.end());
}

void MatchedCollectives::finish() {
    std::sort(groups_.begin(), groups_.end(),
              [](const Group& a, const Group& b) { return in_run_order(a.first, b.first); });
    group_index_.clear();
    std::sort(dp_.begin(), dp_.end(), in_run_order);
    for (auto& [id, kept] : transfers_) {
        for (auto& [bytes_args, times] : kept.by_bytes) {
            times.sort();
        }
    }
}

MatchedCollectives matched_collectives(const RunTrace& trace) {
    MatchedCollectives kept(trace);
    CollectiveMatcher(trace, [&](CollectiveInstance&& instance) {
        kept.add(std::move(instance));
    }).add_run(trace);
    kept.finish();
    return kept;
}

}  // namespace fulcrum::analysis
