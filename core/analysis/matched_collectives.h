// What the analyses keep of a run's collectives. The matcher (collectives.h) hands over each
// instance once the last rank of its communicator has been read; it is folded here into what
// the collectives' summary, the stragglers and the cost model report, and dropped, so that
// memory does not grow with the instances' participants (docs/analyses.md, "Runs larger than
// memory"). Only the DP all-reduces, which the critical path walks back through, are kept
// whole: a few per step. The cost model keeps one transfer time an instance.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/analysis/collectives.h"
#include "core/analysis/scratch_table.h"

namespace fulcrum::analysis {

class MatchedCollectives {
public:
    // The transfer times may hold `memory_bytes` before they go to a temporary file.
    explicit MatchedCollectives(
        const RunTrace& trace,
        std::int64_t memory_bytes = ScratchTable<std::int64_t>::kDefaultMemoryBytes);
    // Folds these instances (any order) and finishes: for tests and small runs.
    MatchedCollectives(const RunTrace& trace, std::vector<CollectiveInstance> instances);

    void add(CollectiveInstance&& instance);
    // Puts what was kept in run order (in_run_order); add nothing after. Fails where the
    // transfer times could not be written to their file (the first failure, kept by add).
    Status finish();

    // One collective name on one group of ranks.
    struct Group {
        StringId name;
        std::vector<std::int32_t> ranks;  // ascending
        std::int64_t calls = 0;
        std::int64_t bytes = 0;        // Σ of the last arrival's bytes, where recorded
        std::int64_t transfer_ns = 0;  // Σ of the last arrival's duration
        std::int64_t wait_ns = 0;      // Σ of the others' wait for the last arrival
        CollectiveInstance first;      // the order fields only (step, first start, sequence)
    };
    // In the order of each group's first call.
    const std::vector<Group>& groups() const { return groups_; }

    // A rank's arrivals, over the instances matched across two ranks or more.
    struct Arrivals {
        int last_arrivals = 0;  // where it started last and someone waited
        int instances = 0;
        std::int64_t caused_wait_ns = 0;
    };
    const std::map<std::int32_t, Arrivals>& arrivals() const { return arrivals_; }

    // The DP all-reduces whole, in run order.
    const std::vector<CollectiveInstance>& dp_instances() const { return dp_; }

    // Each instance's transfer time, by name: the last arrival's duration, or where ranks
    // shared cores the members' mean for a collective inside a pass (cost_model.h says why).
    // Kept by (bytes, args) — a name has one or a few — so an instance costs 4 bytes (in
    // blocks, not a vector grown by doubling; 8 for a list with a time beyond 2^31 ns) until
    // every list's together pass the memory budget: then each list's are sorted and go to a
    // temporary file as a run (scratch_table.h), and a reader merges its runs back in
    // ascending order. A run of many steps has tens of millions (issue 37, docs/analyses.md,
    // "Runs larger than memory").
    class Times {
    public:
        std::size_t size() const { return spilled_ + pending(); }
        bool empty() const { return size() == 0; }
        // Every time in ascending order, a span at a time, until `visit` returns false; fails
        // where the file could not be read.
        Status for_each(const std::function<bool(std::span<const std::int64_t>)>& visit) const;

    private:
        friend class MatchedCollectives;
        // The bytes it took in memory (4 or 8).
        std::size_t push_back(std::int64_t ns);
        std::size_t pending() const { return wide_.empty() ? narrow_.size() : wide_.size(); }
        // The i-th of those held in memory.
        std::int64_t held(std::size_t i) const {
            return wide_.empty() ? std::int64_t{narrow_[i]} : wide_[i];
        }
        void sort();
        // Sorts what it holds and appends it to `file` as one run.
        Status spill(ScratchTable<std::int64_t>& file);

        std::deque<std::int32_t> narrow_;  // while every time fits
        std::deque<std::int64_t> wide_;    // every time, once one does not
        struct Run {
            std::size_t begin = 0, size = 0;  // rows of the file
        };
        std::vector<Run> runs_;
        std::size_t spilled_ = 0;
        const ScratchTable<std::int64_t>* file_ = nullptr;
    };
    struct Transfers {
        Role role = Role::collective;  // of the name's first instance in run order
        CollectiveInstance first;      // its order fields
        std::map<std::pair<std::int64_t, std::uint32_t>, Times> by_bytes;
    };
    const std::unordered_map<std::uint32_t, Transfers>& transfers() const { return transfers_; }
    // Frees them once the cost model, their one reader, is fitted: 4 bytes an instance, tens of
    // millions at 1 B events.
    void drop_transfers() {
        std::unordered_map<std::uint32_t, Transfers>().swap(transfers_);
        spilled_times_.reset();
    }

private:
    bool members_mean_ = false;
    std::vector<Group> groups_;
    // groups_ by a hash of (name, ranks); ranks_ holds the instance's being added.
    std::unordered_map<std::uint64_t, std::vector<std::size_t>> group_index_;
    std::vector<std::int32_t> ranks_;
    std::map<std::int32_t, Arrivals> arrivals_;
    std::vector<CollectiveInstance> dp_;
    std::unordered_map<std::uint32_t, Transfers> transfers_;
    std::int64_t times_memory_bytes_ = 0;
    std::int64_t times_held_bytes_ = 0;  // the lists' in memory together
    // On the heap: the lists point to it, and a MatchedCollectives moves.
    std::unique_ptr<ScratchTable<std::int64_t>> spilled_times_;
    Status times_written_;
};

// A run held in memory, matched and folded.
MatchedCollectives matched_collectives(const RunTrace& trace);

}  // namespace fulcrum::analysis
