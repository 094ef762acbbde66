#include "core/analysis/communication.h"

#include <algorithm>
#include <cctype>
#include <map>

namespace fulcrum::analysis {

std::string_view to_string(CollectiveKind kind) {
    switch (kind) {
        case CollectiveKind::all_reduce:
            return "all-reduce";
        case CollectiveKind::all_gather:
            return "all-gather";
        case CollectiveKind::reduce_scatter:
            return "reduce-scatter";
        case CollectiveKind::all_to_all:
            return "all-to-all";
        case CollectiveKind::broadcast:
            return "broadcast";
        case CollectiveKind::reduce:
            return "reduce";
        case CollectiveKind::point_to_point:
            return "point-to-point";
        case CollectiveKind::other:
            return "other";
    }
    return "other";
}

CollectiveKind collective_kind_of(std::string_view name) {
    // Lower case without separators: "all-reduce", "AllReduce" and "all_reduce" all read
    // "allreduce".
    std::string flat;
    for (char c : name) {
        if (std::isalnum(static_cast<unsigned char>(c)))
            flat += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    auto has = [&](std::string_view word) { return flat.find(word) != std::string::npos; };
    if (has("allreduce"))
        return CollectiveKind::all_reduce;
    if (has("allgather"))
        return CollectiveKind::all_gather;
    if (has("reducescatter"))
        return CollectiveKind::reduce_scatter;
    if (has("alltoall"))
        return CollectiveKind::all_to_all;
    if (has("broadcast"))
        return CollectiveKind::broadcast;
    if (has("sendrecv") || has("send") || has("recv"))
        return CollectiveKind::point_to_point;
    if (has("reduce"))
        return CollectiveKind::reduce;
    return CollectiveKind::other;
}

double bus_bandwidth_factor(CollectiveKind kind, int n) {
    if (n < 1)
        return 1.0;
    switch (kind) {
        case CollectiveKind::all_reduce:
            return 2.0 * (n - 1) / n;
        case CollectiveKind::all_gather:
        case CollectiveKind::reduce_scatter:
        case CollectiveKind::all_to_all:
            return double(n - 1) / n;
        default:
            return 1.0;
    }
}

std::vector<CollectiveSummary> summarize_collectives(const RunTrace& trace,
                                                     const MatchedCollectives& collectives) {
    std::vector<CollectiveSummary> rows;
    for (const MatchedCollectives::Group& group : collectives.groups()) {
        CollectiveSummary row;
        row.name = std::string(trace.name(group.name));
        row.kind = collective_kind_of(row.name);
        row.ranks = group.ranks;
        row.calls = group.calls;
        row.bytes = group.bytes;
        row.transfer_ns = group.transfer_ns;
        row.wait_ns = group.wait_ns;
        if (row.bytes > 0 && row.transfer_ns > 0) {
            row.algbw_gb_s = double(row.bytes) / double(row.transfer_ns);
            row.busbw_gb_s =
                row.algbw_gb_s * bus_bandwidth_factor(row.kind, static_cast<int>(row.ranks.size()));
        }
        rows.push_back(std::move(row));
    }
    return rows;
}

}  // namespace fulcrum::analysis
