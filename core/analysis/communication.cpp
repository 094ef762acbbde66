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

std::vector<CollectiveTotal> total_collectives(const std::vector<CollectiveSummary>& rows) {
    std::vector<CollectiveTotal> totals;
    std::map<std::pair<std::string, std::size_t>, std::size_t> index;
    for (const CollectiveSummary& row : rows) {
        const auto [at, added] = index.try_emplace({row.name, row.ranks.size()}, totals.size());
        if (added) {
            CollectiveTotal total;
            total.name = row.name;
            total.kind = row.kind;
            total.group_size = static_cast<std::int32_t>(row.ranks.size());
            totals.push_back(std::move(total));
        }
        CollectiveTotal& total = totals[at->second];
        ++total.groups;
        total.calls += row.calls;
        total.bytes += row.bytes;
        total.transfer_ns += row.transfer_ns;
        total.wait_ns += row.wait_ns;
        if (row.busbw_gb_s > 0 &&
            (total.slowest_busbw_gb_s == 0 || row.busbw_gb_s < total.slowest_busbw_gb_s)) {
            total.slowest_busbw_gb_s = row.busbw_gb_s;
        }
    }
    for (CollectiveTotal& total : totals) {
        if (total.bytes > 0 && total.transfer_ns > 0) {
            total.algbw_gb_s = double(total.bytes) / double(total.transfer_ns);
            total.busbw_gb_s =
                total.algbw_gb_s * bus_bandwidth_factor(total.kind, total.group_size);
        }
    }
    return totals;
}

CollectiveListing list_collectives(const std::vector<CollectiveSummary>& rows, std::size_t fit) {
    CollectiveListing listing;
    listing.folded = rows.size() > fit;
    if (listing.folded) {
        listing.totals = total_collectives(rows);
        listing.groups = slowest_first(rows, listing.totals);
        return listing;
    }
    listing.groups.reserve(rows.size());
    for (const CollectiveSummary& row : rows) {
        listing.groups.push_back({row, 0});
    }
    return listing;
}

std::vector<SlowGroup> slowest_first(const std::vector<CollectiveSummary>& rows,
                                     const std::vector<CollectiveTotal>& totals) {
    std::map<std::pair<std::string, std::size_t>, double> name_busbw;
    for (const CollectiveTotal& total : totals) {
        name_busbw[{total.name, static_cast<std::size_t>(total.group_size)}] = total.busbw_gb_s;
    }
    std::vector<SlowGroup> slow;
    slow.reserve(rows.size());
    for (const CollectiveSummary& row : rows) {
        const auto found = name_busbw.find({row.name, row.ranks.size()});
        const double all = found == name_busbw.end() ? 0 : found->second;
        slow.push_back({row, row.busbw_gb_s > 0 && all > 0 ? row.busbw_gb_s / all : 0});
    }
    std::stable_sort(slow.begin(), slow.end(), [](const SlowGroup& a, const SlowGroup& b) {
        const bool a_measured = a.vs_name > 0, b_measured = b.vs_name > 0;
        if (a_measured != b_measured) {
            return a_measured;
        }
        return a_measured && a.vs_name < b.vs_name;
    });
    return slow;
}

}  // namespace fulcrum::analysis
