#include "core/analysis/matched_collectives.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <queue>

#include "core/analysis/core_shares.h"
#include "core/util/random.h"

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

MatchedCollectives::MatchedCollectives(const RunTrace& trace, std::int64_t memory_bytes)
    : members_mean_(CoreShares::any_shared(trace)),
      times_memory_bytes_(memory_bytes),
      spilled_times_(std::make_unique<ScratchTable<std::int64_t>>(0, "collective times")) {}

MatchedCollectives::MatchedCollectives(const RunTrace& trace,
                                       std::vector<CollectiveInstance> instances)
    : MatchedCollectives(trace, std::numeric_limits<std::int64_t>::max()) {
    for (CollectiveInstance& instance : instances) {
        add(std::move(instance));
    }
    (void)finish();  // held in memory: nothing was written
}

void MatchedCollectives::add(CollectiveInstance&& instance) {
    if (instance.participants.empty()) {
        return;
    }
    const CollectiveParticipant& last = instance.last_arrival();
    const std::int64_t wait = instance.total_wait_ns();

    // The summary, by name and group: found by a hash of both, without a key made for each of
    // millions of instances.
    ranks_.clear();
    for (const CollectiveParticipant& p : instance.participants) {
        ranks_.push_back(p.rank);
    }
    std::sort(ranks_.begin(), ranks_.end());  // by rank already, from the matcher
    std::uint64_t hash = splitmix64(instance.name.value);
    for (const std::int32_t rank : ranks_) {
        hash = splitmix64(hash ^ static_cast<std::uint32_t>(rank));
    }
    std::vector<std::size_t>& same_hash = group_index_[hash];
    const auto found = std::find_if(same_hash.begin(), same_hash.end(), [&](std::size_t index) {
        return groups_[index].name.value == instance.name.value && groups_[index].ranks == ranks_;
    });
    const std::size_t index = found != same_hash.end() ? *found : groups_.size();
    if (index == groups_.size()) {
        Group group;
        group.name = instance.name;
        group.ranks = ranks_;
        group.first = order_of(instance);
        same_hash.push_back(index);
        groups_.push_back(std::move(group));
    }
    Group& group = groups_[index];
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
    times_held_bytes_ += static_cast<std::int64_t>(
        samples->second.by_bytes[{last.bytes, last.args.value}].push_back(transfer));
    if (times_held_bytes_ > times_memory_bytes_ && times_written_) {
        for (auto& [id, kept] : transfers_) {
            for (auto& [bytes_args, times] : kept.by_bytes) {
                if (auto spilled = times.spill(*spilled_times_); !spilled) {
                    times_written_ = spilled;
                }
            }
        }
        times_held_bytes_ = 0;
    }

    if (instance.role == Role::dp_collective) {
        dp_.push_back(std::move(instance));
    }
}

std::size_t MatchedCollectives::Times::push_back(std::int64_t ns) {
    const bool fits = ns >= std::numeric_limits<std::int32_t>::min() &&
                      ns <= std::numeric_limits<std::int32_t>::max();
    if (wide_.empty() && fits) {
        narrow_.push_back(static_cast<std::int32_t>(ns));
        return sizeof(std::int32_t);
    }
    if (wide_.empty()) {
        wide_.assign(narrow_.begin(), narrow_.end());
        narrow_ = {};
    }
    wide_.push_back(ns);
    return sizeof(std::int64_t);
}

void MatchedCollectives::Times::sort() {
    std::sort(narrow_.begin(), narrow_.end());
    std::sort(wide_.begin(), wide_.end());
}

Status MatchedCollectives::Times::spill(ScratchTable<std::int64_t>& file) {
    if (pending() == 0) {
        return {};
    }
    std::vector<std::int64_t> run;
    run.reserve(pending());
    run.insert(run.end(), narrow_.begin(), narrow_.end());
    run.insert(run.end(), wide_.begin(), wide_.end());
    std::sort(run.begin(), run.end());  // here rather than in the deques: a vector sorts faster
    std::deque<std::int32_t>().swap(narrow_);
    std::deque<std::int64_t>().swap(wide_);
    runs_.push_back({file.size(), run.size()});
    spilled_ += run.size();
    file_ = &file;
    return file.append(run);
}

Status MatchedCollectives::Times::for_each(
    const std::function<bool(std::span<const std::int64_t>)>& visit) const {
    constexpr std::size_t kBlock = 8192;  // values of a run read at once, and handed over
    if (runs_.empty()) {                  // sorted in memory (finish): no merge
        std::vector<std::int64_t> block;
        block.reserve(std::min(kBlock, pending()));
        for (std::size_t i = 0; i < pending(); ++i) {
            block.push_back(held(i));
            if (block.size() == kBlock || i + 1 == pending()) {
                if (!visit(block)) {
                    return {};
                }
                block.clear();
            }
        }
        return {};
    }
    // A k-way merge of the runs and what is still in memory (the last source), a block of
    // each at a time.
    struct Source {
        std::size_t next = 0, end = 0;  // rows of the file, or of the memory's
        std::vector<std::int64_t> block;
        std::size_t at = 0;
    };
    std::vector<Source> sources;
    for (const Run& run : runs_) {
        sources.push_back({run.begin, run.begin + run.size, {}, 0});
    }
    sources.push_back({0, pending(), {}, 0});
    const std::size_t memory = sources.size() - 1;
    const auto refill = [&](std::size_t index) {
        Source& source = sources[index];
        source.block.clear();
        source.at = 0;
        const std::size_t end = std::min(source.end, source.next + kBlock);
        if (index == memory) {
            for (std::size_t i = source.next; i < end; ++i) {
                source.block.push_back(held(i));
            }
        } else if (source.next < end) {
            file_->read(source.next, end, source.block);
            if (source.block.size() != end - source.next) {
                return false;
            }
        }
        source.next = end;
        return true;
    };
    // (value, source) smallest first.
    using Head = std::pair<std::int64_t, std::size_t>;
    std::priority_queue<Head, std::vector<Head>, std::greater<>> heads;
    for (std::size_t i = 0; i < sources.size(); ++i) {
        if (!refill(i)) {
            return file_->read_status();
        }
        if (!sources[i].block.empty()) {
            heads.push({sources[i].block.front(), i});
        }
    }
    std::vector<std::int64_t> out;
    out.reserve(kBlock);
    while (!heads.empty()) {
        const auto [value, index] = heads.top();
        heads.pop();
        out.push_back(value);
        Source& source = sources[index];
        if (++source.at == source.block.size()) {
            if (!refill(index)) {
                return file_->read_status();
            }
        }
        if (source.at < source.block.size()) {
            heads.push({source.block[source.at], index});
        }
        if (out.size() == kBlock || heads.empty()) {
            if (!visit(out)) {
                return {};
            }
            out.clear();
        }
    }
    return {};
}

Status MatchedCollectives::finish() {
    std::sort(groups_.begin(), groups_.end(),
              [](const Group& a, const Group& b) { return in_run_order(a.first, b.first); });
    group_index_.clear();
    std::sort(dp_.begin(), dp_.end(), in_run_order);
    for (auto& [id, kept] : transfers_) {
        for (auto& [bytes_args, times] : kept.by_bytes) {
            times.sort();
        }
    }
    return times_written_;
}

MatchedCollectives matched_collectives(const RunTrace& trace) {
    MatchedCollectives kept(trace, std::numeric_limits<std::int64_t>::max());  // as the run is
    CollectiveMatcher(trace, [&](CollectiveInstance&& instance) {
        kept.add(std::move(instance));
    }).add_run(trace);
    (void)kept.finish();  // held in memory: nothing was written
    return kept;
}

}  // namespace fulcrum::analysis
