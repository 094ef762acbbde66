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

std::vector<CollectiveSummary> summarize_collectives(
    const RunTrace& trace, const std::vector<CollectiveInstance>& instances) {
    std::vector<CollectiveSummary> rows;
    std::map<std::pair<std::uint32_t, std::vector<std::int32_t>>, std::size_t> index;
    for (const CollectiveInstance& instance : instances) {
        std::vector<std::int32_t> ranks;
        for (const CollectiveParticipant& p : instance.participants)
            ranks.push_back(p.rank);
        std::sort(ranks.begin(), ranks.end());
        auto [at, added] = index.try_emplace({instance.name.value, ranks}, rows.size());
        if (added) {
            CollectiveSummary row;
            row.name = std::string(trace.name(instance.name));
            row.kind = collective_kind_of(row.name);
            row.ranks = ranks;
            rows.push_back(std::move(row));
        }
        CollectiveSummary& row = rows[at->second];
        const CollectiveParticipant& last = instance.last_arrival();
        ++row.calls;
        row.bytes += std::max<std::int64_t>(last.bytes, 0);
        row.transfer_ns += last.end_ns - last.start_ns;
        row.wait_ns += instance.total_wait_ns();
    }
    for (CollectiveSummary& row : rows) {
        if (row.bytes > 0 && row.transfer_ns > 0) {
            row.algbw_gb_s = double(row.bytes) / double(row.transfer_ns);
            row.busbw_gb_s =
                row.algbw_gb_s * bus_bandwidth_factor(row.kind, static_cast<int>(row.ranks.size()));
        }
    }
    return rows;
}

}  // namespace fulcrum::analysis
