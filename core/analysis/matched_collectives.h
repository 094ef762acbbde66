// What the analyses keep of a run's collectives. The matcher (collectives.h) hands over each
// instance once the last rank of its communicator has been read; it is folded here into what
// the collectives' summary, the stragglers and the cost model report, and dropped, so that
// memory does not grow with the instances' participants (docs/analyses.md, "Runs larger than
// memory"). Only the DP all-reduces, which the critical path walks back through, are kept
// whole: a few per step. The cost model keeps one transfer time an instance.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/analysis/collectives.h"

namespace fulcrum::analysis {

class MatchedCollectives {
public:
    explicit MatchedCollectives(const RunTrace& trace);
    // Folds these instances (any order) and finishes: for tests and small runs.
    MatchedCollectives(const RunTrace& trace, std::vector<CollectiveInstance> instances);

    void add(CollectiveInstance&& instance);
    // Puts what was kept in run order (in_run_order); add nothing after.
    void finish();

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
    // blocks, not a vector grown by doubling; 8 for a list with a time beyond 2^31 ns); each
    // list ascending after finish().
    class Times {
    public:
        void push_back(std::int64_t ns);
        void sort();
        std::size_t size() const { return wide_.empty() ? narrow_.size() : wide_.size(); }
        bool empty() const { return size() == 0; }
        std::int64_t operator[](std::size_t i) const {
            return wide_.empty() ? std::int64_t{narrow_[i]} : wide_[i];
        }

    private:
        std::deque<std::int32_t> narrow_;  // while every time fits
        std::deque<std::int64_t> wide_;    // every time, once one does not
    };
    struct Transfers {
        Role role = Role::collective;  // of the name's first instance in run order
        CollectiveInstance first;      // its order fields
        std::map<std::pair<std::int64_t, std::uint32_t>, Times> by_bytes;
    };
    const std::unordered_map<std::uint32_t, Transfers>& transfers() const { return transfers_; }
    // Frees them once the cost model, their one reader, is fitted: 4 bytes an instance, tens of
    // millions at 1 B events.
    void drop_transfers() { std::unordered_map<std::uint32_t, Transfers>().swap(transfers_); }

private:
    bool members_mean_ = false;
    std::vector<Group> groups_;
    std::map<std::pair<std::uint32_t, std::vector<std::int32_t>>, std::size_t> group_index_;
    std::map<std::int32_t, Arrivals> arrivals_;
    std::vector<CollectiveInstance> dp_;
    std::unordered_map<std::uint32_t, Transfers> transfers_;
};

// A run held in memory, matched and folded.
MatchedCollectives matched_collectives(const RunTrace& trace);

}  // namespace fulcrum::analysis
