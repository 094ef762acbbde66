// Communication by collective: per collective name and group of ranks, how many calls, how
// many bytes, how long, and the bandwidth achieved as NCCL-tests defines it (HTA reports the
// same; docs/analyses.md, "Communication by collective").
//
//   transfer  = Σ over calls of the last participant's duration (it waited for nobody; the
//               others' earlier start is waiting, as in the cost model)
//   algbw     = Σ bytes / Σ transfer                       bytes per ns = GB/s
//   busbw     = algbw · 2(n−1)/n  all-reduce
//               algbw · (n−1)/n   all-gather, reduce-scatter, all-to-all
//               algbw             broadcast, reduce, point-to-point
// with n the group's size and bytes as the range records them: the buffer of an all-reduce,
// the gathered whole of an all-gather, the whole input of a reduce-scatter (NCCL-tests' sizes).
// The kind comes from the name ("all-reduce", "AllReduce", "allreduce", ...). Only calls
// matched across at least two ranks (core/analysis/collectives.h) are counted: a one-rank
// trace has no group to measure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/analysis/matched_collectives.h"

namespace fulcrum::analysis {

enum class CollectiveKind : std::uint8_t {
    all_reduce,
    all_gather,
    reduce_scatter,
    all_to_all,
    broadcast,
    reduce,
    point_to_point,
    other
};
std::string_view to_string(CollectiveKind kind);
CollectiveKind collective_kind_of(std::string_view name);
// NCCL-tests' bus bandwidth factor for a group of n.
double bus_bandwidth_factor(CollectiveKind kind, int n);

struct CollectiveSummary {
    std::string name;
    CollectiveKind kind = CollectiveKind::other;
    std::vector<std::int32_t> ranks;  // the group
    std::int64_t calls = 0;
    std::int64_t bytes = 0;        // Σ over calls; 0 when no call recorded its bytes
    std::int64_t transfer_ns = 0;  // Σ over calls of the last arrival's duration
    std::int64_t wait_ns = 0;      // Σ over calls of the others' wait for the last arrival
    double algbw_gb_s = 0;         // 0 when no bytes or no transfer time
    double busbw_gb_s = 0;
};

// By name, then group, in the order of the first call.
std::vector<CollectiveSummary> summarize_collectives(const RunTrace& trace,
                                                     const MatchedCollectives& collectives);

// The groups of one collective name and group size together (a 4D run has one TP group per
// DP × PP × CP coordinate: thousands of rows alike): Σ calls, bytes, transfer and wait over
// the groups, the bandwidths of those sums, and the slowest group's busbw.
struct CollectiveTotal {
    std::string name;
    CollectiveKind kind = CollectiveKind::other;
    std::int64_t groups = 0;
    std::int32_t group_size = 0;  // ranks a group
    std::int64_t calls = 0, bytes = 0, transfer_ns = 0, wait_ns = 0;
    double algbw_gb_s = 0, busbw_gb_s = 0;  // 0 when no bytes or no transfer time
    double slowest_busbw_gb_s = 0;          // the lowest of the groups that have one
};
// In the order of `rows` (each name's first group).
std::vector<CollectiveTotal> total_collectives(const std::vector<CollectiveSummary>& rows);

// The groups whose busbw falls furthest below their name's (`totals`, of the same rows): a
// group's busbw over its name and size's, the lowest first (a slow link or a late rank among
// thousands of groups alike); groups without a busbw last, in their order. With each its
// ratio (0 where it has none).
struct SlowGroup {
    CollectiveSummary group;
    double vs_name = 0;
};
std::vector<SlowGroup> slowest_first(const std::vector<CollectiveSummary>& rows,
                                     const std::vector<CollectiveTotal>& totals);

// How a table lists a run's collective groups (the CLI's, the report's): as they are while
// there are no more than `fit`; past that (folded), each name's totals, then the groups
// furthest below their name's busbw first, each with its ratio.
struct CollectiveListing {
    bool folded = false;
    std::vector<CollectiveTotal> totals;  // empty unless folded
    std::vector<SlowGroup> groups;        // ratios 0 unless folded
};
CollectiveListing list_collectives(const std::vector<CollectiveSummary>& rows, std::size_t fit);

}  // namespace fulcrum::analysis
