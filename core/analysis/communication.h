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

}  // namespace fulcrum::analysis
