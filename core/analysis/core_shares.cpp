#include "core/analysis/core_shares.h"

#include <algorithm>

namespace fulcrum::analysis {

CoreShares CoreShares::of(const RunTrace& trace, const PassTable& passes) {
    const int cores = trace.config.host_cores;
    return of(trace, passes, cores > 0 ? rank_ranges(trace) : std::vector<RankRanges>{});
}

namespace {

std::map<std::string, std::vector<std::int32_t>> ranks_by_host(const RunTrace& trace) {
    std::map<std::string, std::vector<std::int32_t>> ranks;
    for (const RankTrace& rank : trace.ranks) {
        ranks[rank.info.host].push_back(rank.info.rank);
    }
    return ranks;
}

}  // namespace

bool CoreShares::any_shared(const RunTrace& trace) {
    const int cores = trace.config.host_cores;
    if (cores <= 0) {
        return false;
    }
    for (const auto& [host, ranks] : ranks_by_host(trace)) {
        if (static_cast<int>(ranks.size()) > cores) {
            return true;
        }
    }
    return false;
}

CoreShares CoreShares::of(const RunTrace& trace, const PassTable& passes,
                          const std::vector<RankRanges>& ranges) {
    CoreShares shares;
    const int cores = trace.config.host_cores;
    if (cores <= 0) {
        return shares;
    }
    std::map<std::string, std::size_t> host_index;
    for (const auto& [host, ranks] : ranks_by_host(trace)) {
        if (static_cast<int>(ranks.size()) <= cores) {
            continue;  // a core a rank: every share is 1
        }
        host_index[host] = shares.hosts_.size();
        shares.hosts_.emplace_back();
        for (std::int32_t rank : ranks) {
            shares.host_of_[rank] = host_index[host];
        }
    }
    if (shares.hosts_.empty()) {
        return shares;
    }
    std::vector<std::vector<std::pair<std::int64_t, int>>> host_edges(shares.hosts_.size());
    const auto add = [&](std::int32_t rank, std::int64_t start, std::int64_t end) {
        const auto host = shares.host_of_.find(rank);
        if (host != shares.host_of_.end() && end > start) {
            host_edges[host->second].push_back({start, +1});
            host_edges[host->second].push_back({end, -1});
        }
    };
    passes.for_each([&](std::span<const Pass> run) {
        for (const Pass& pass : run) {
            const auto [start, end] = computing(pass);
            add(pass.rank, start, end);
        }
    });
    for (const RankRanges& rank : ranges) {
        for (const RankRanges::Range& optimizer : rank.optimizers) {
            add(rank.rank, optimizer.start_ns, optimizer.end_ns);
        }
    }
    for (std::size_t h = 0; h < shares.hosts_.size(); ++h) {
        auto& list = host_edges[h];
        std::sort(list.begin(), list.end());
        Host& host = shares.hosts_[h];
        int computing = 0;
        double integral = 0;
        for (std::size_t i = 0; i < list.size();) {
            const std::int64_t t = list[i].first;
            if (!host.at.empty()) {
                integral += host.share.back() * static_cast<double>(t - host.at.back());
            }
            for (; i < list.size() && list[i].first == t; ++i) {
                computing += list[i].second;  // every edge at t, then one breakpoint
            }
            host.at.push_back(t);
            host.integral.push_back(integral);
            host.share.push_back(computing > cores ? static_cast<double>(cores) / computing : 1.0);
        }
    }
    return shares;
}

double CoreShares::share(std::int32_t rank, std::int64_t start, std::int64_t end) const {
    const auto found = host_of_.find(rank);
    if (found == host_of_.end() || end <= start) {
        return 1.0;
    }
    const Host& host = hosts_[found->second];
    // ∫ share from at[0] to t; 1 a ns outside the breakpoints.
    const auto integral = [&](std::int64_t t) {
        if (host.at.empty() || t <= host.at.front()) {
            return static_cast<double>(t);
        }
        const auto i = static_cast<std::size_t>(
            std::upper_bound(host.at.begin(), host.at.end(), t) - host.at.begin() - 1);
        return static_cast<double>(host.at.front()) + host.integral[i] +
               host.share[i] * static_cast<double>(t - host.at[i]);
    };
    return (integral(end) - integral(start)) / static_cast<double>(end - start);
}

}  // namespace fulcrum::analysis
