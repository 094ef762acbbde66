// Matching a collective's instances across the ranks that took part in it, and who arrived
// last: the straggler that everyone else waited for.
//
// Instances are matched by (name, step, micro-batch, phase, k): the k-th event of that key on
// each rank, among the ranks of one communicator, found from the 4D coordinates and the
// collective's dimension ("dp all-reduce gradients": ranks with the same pp and tp, any dp
// and cp; "cp …": same dp, pp, tp; "tp …": same dp, pp, cp; "pp all-reduce embedding": same
// dp, cp, tp, which only the first and last stage emit; anything else: all ranks). k counts a
// rank's events of one key in start order over all its lanes.
// On a rank with device work an engine range takes the times of the collective kernels it
// launched (joined by correlation id): the range timed only the host call that enqueued them.
// Those kernels, and the ones a pipeline send or receive launched, are not matched on their
// own. fulcrum-train's "dp all-reduce start" (runtime work, Role::reduction_start) is no
// collective on a CPU rank; on a GPU rank the kernel it launched is one layer's DP
// collective, matched over the DP group (a start that launched nothing is dropped). A kernel no
// engine range launched (a foreign program) is, within the process group its args name (Kineto's
// "Process Group Name"), else across all ranks: its name
// ("ncclDevKernel_AllReduce_…") says the algorithm, not the communicator.
// Pipeline point-to-point is not a collective; a receive is matched to its send by
// passes/bubbles.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/analysis/run_trace.h"

namespace fulcrum::analysis {

struct CollectiveParticipant {
    std::int32_t rank = 0;
    std::int64_t start_ns = 0;
    std::int64_t end_ns = 0;
    std::int64_t bytes = -1;
    StringId args;  // the event's args; the simulator's ranges say {"calls":"N"} there
};

struct CollectiveInstance {
    StringId name;
    Role role = Role::collective;
    std::int32_t step = -1;
    std::int32_t microbatch = -1;
    Phase phase = Phase::none;
    std::int32_t occurrence = 0;                      // k
    std::vector<CollectiveParticipant> participants;  // by rank
    // Where it falls among the run's instances: (step, first start, sequence), the sequence
    // numbering instances as the matcher first met them.
    std::int64_t first_start_ns = 0;
    std::uint32_t sequence = 0;

    // The participant with the latest start (the lowest rank on ties); its duration is the
    // transfer time.
    const CollectiveParticipant& last_arrival() const;
    // Σ over participants of (last start − own start): time spent waiting for the last one.
    std::int64_t total_wait_ns() const;
};

inline bool in_run_order(const CollectiveInstance& a, const CollectiveInstance& b) {
    return std::tie(a.step, a.first_start_ns, a.sequence) <
           std::tie(b.step, b.first_start_ns, b.sequence);
}

// Instances with at least two participants, in run order (in_run_order), held whole: for tests
// and tools that look at single instances. The analyses fold them as they close
// (matched_collectives.h).
std::vector<CollectiveInstance> match_collectives(const RunTrace& trace);

// The matching a rank at a time (run_analysis.h): each rank's calls, in the order it issued
// them, with the communicator each ran on; then the matcher, fed ranks in ascending order.
struct CollectiveCall {
    std::uint64_t communicator = 0;
    StringId name;
    StringId args;
    std::int32_t step = -1;
    std::int32_t microbatch = -1;
    Phase phase = Phase::none;
    Role role = Role::collective;
    std::int64_t start_ns = 0;
    std::int64_t end_ns = 0;
    std::int64_t bytes = -1;
};
std::vector<CollectiveCall> collective_calls(const RunTrace& trace, const RankTrace& rank);

// An instance is complete once the last rank of its communicator has been added: the matcher
// then hands it to `closed` (when it has two participants or more) and forgets it, so what it
// holds is the instances still open, not the run's. The members of the engine's communicators
// follow from the ranks' coordinates; a process group a foreign trace names, or one of all
// ranks, closes at finish().
class CollectiveMatcher {
public:
    using Closed = std::function<void(CollectiveInstance&&)>;
    CollectiveMatcher(const RunTrace& trace, Closed closed);

    void add(std::int32_t rank, std::span<const CollectiveCall> calls);
    void finish();
    // Every rank of a run held whole, then finish().
    void add_run(const RunTrace& trace);

private:
    // What identifies a collective on each of its ranks, except the occurrence k.
    struct Key {
        std::uint64_t communicator = 0;
        StringId name;
        std::int32_t step = -1;
        std::int32_t microbatch = -1;
        Phase phase = Phase::none;

        friend bool operator==(const Key&, const Key&) = default;
    };
    struct KeyHash {
        std::size_t operator()(const Key& key) const {
            std::uint64_t h = key.communicator * 0x9e3779b97f4a7c15ULL;
            h ^= (static_cast<std::uint64_t>(key.name.value) << 32 |
                  static_cast<std::uint32_t>(key.step)) +
                 0xbf58476d1ce4e5b9ULL + (h << 6) + (h >> 2);
            h ^= (static_cast<std::uint64_t>(static_cast<std::uint32_t>(key.microbatch)) << 8 |
                  static_cast<std::uint8_t>(key.phase)) +
                 0x94d049bb133111ebULL + (h << 6) + (h >> 2);
            h ^= h >> 31;
            return static_cast<std::size_t>(h);
        }
    };
    // A key's instances, by k.
    struct Open {
        std::vector<CollectiveInstance> by_k;
        std::int32_t next_k = 0;  // the current rank's
    };
    void close(std::uint64_t communicator);

    Closed closed_;
    std::unordered_map<Key, Open, KeyHash> open_;
    std::unordered_map<std::uint64_t, std::vector<Key>> keys_of_;  // by communicator
    // The engine's communicators' members, by communicator.
    std::unordered_map<std::uint64_t, std::int32_t> members_;
    // The communicators whose last member each rank is.
    std::unordered_map<std::int32_t, std::vector<std::uint64_t>> closing_at_;
    // The keys the current rank used, to reset their next_k: a 1024-rank run has hundreds of
    // thousands of keys (communicators × steps × micro-batches), each rank a few thousand.
    std::vector<Open*> used_;
    std::uint32_t sequence_ = 0;
};

}  // namespace fulcrum::analysis
