#include "core/analysis/kernels.h"

#include "core/analysis/correlation_map.h"
#include "core/analysis/intervals.h"

#include <algorithm>
#include <unordered_map>

namespace fulcrum::analysis {

std::string_view to_string(KernelType type) {
    switch (type) {
        case KernelType::computation:
            return "computation";
        case KernelType::communication:
            return "communication";
        case KernelType::memory:
            return "memory";
    }
    return "computation";
}

std::int64_t KernelTimeByType::busy_ns() const {
    std::int64_t total = 0;
    for (int mask = 1; mask < 8; ++mask)
        total += ns[mask];
    return total;
}

namespace {

struct Launch {
    std::int64_t start_ns, duration_ns;
};

// The rank's launch calls by correlation id (the first call of an id, should one repeat).
CorrelationMap<Launch> launches_of(const RankTrace& rank) {
    std::vector<std::pair<std::int64_t, Launch>> launches;
    for (const LaneTrace& lane : rank.lanes) {
        if (lane.info.kind != LaneKind::host_thread)
            continue;
        for (const Event& event : lane.events) {
            if (event.kind == EventKind::api && event.correlation >= 0) {
                launches.emplace_back(event.correlation,
                                      Launch{event.start_ns, event.duration_ns()});
            }
        }
    }
    return CorrelationMap<Launch>(std::move(launches), [](Launch&, const Launch&) {});
}

// The rank's kernels as one union per type, then every combination by inclusion–exclusion:
// linear in the kernels once each lane's events are in start order.
KernelTimeByType time_by_type(const RankTrace& rank) {
    IntervalSet sets[kKernelTypeCount];
    std::int64_t first = INT64_MAX, last = INT64_MIN;
    for (const LaneTrace& lane : rank.lanes) {
        if (lane.info.kind != LaneKind::gpu_stream)
            continue;
        for (const Event& event : lane.events) {
            KernelType type;
            if (!kernel_type_of(event, type) || event.end_ns <= event.start_ns)
                continue;
            sets[static_cast<int>(type)].add(event.start_ns, event.end_ns);
            first = std::min(first, event.start_ns);
            last = std::max(last, event.end_ns);
        }
    }
    KernelTimeByType row;
    row.rank = rank.info.rank;
    if (first > last)
        return row;
    const IntervalSet& c = sets[0];
    const IntervalSet& m = sets[1];
    const IntervalSet& y = sets[2];
    const IntervalSet cm = c.intersected(m);
    const std::int64_t both_cm = cm.total(), both_cy = c.overlap(y), both_my = m.overlap(y);
    const std::int64_t all = cm.overlap(y);
    row.ns[0b001] = c.total() - both_cm - both_cy + all;
    row.ns[0b010] = m.total() - both_cm - both_my + all;
    row.ns[0b100] = y.total() - both_cy - both_my + all;
    row.ns[0b011] = both_cm - all;
    row.ns[0b101] = both_cy - all;
    row.ns[0b110] = both_my - all;
    row.ns[0b111] = all;
    row.kernel_span_ns = last - first;
    row.idle_ns = row.kernel_span_ns - row.busy_ns();
    return row;
}

// Gaps before each kernel of one stream, by cause, and its queue length.
StreamIdle stream_idle(const RankTrace& rank, const LaneTrace& lane,
                       const CorrelationMap<Launch>& launches, const KernelOptions& options) {
    StreamIdle idle;
    idle.rank = rank.info.rank;
    idle.lane = lane.info.name;
    std::int64_t previous_end = INT64_MIN;
    std::vector<std::int64_t> queued, finished;  // launch (or kernel start) and end times
    for (const Event& event : lane.events) {
        KernelType type;
        if (!kernel_type_of(event, type))
            continue;
        ++idle.kernels;
        const Launch* launch = event.correlation >= 0 ? launches.find(event.correlation) : nullptr;
        queued.push_back(launch != nullptr ? std::min(launch->start_ns, event.start_ns)
                                           : event.start_ns);
        finished.push_back(event.end_ns);
        if (previous_end != INT64_MIN && event.start_ns > previous_end) {
            const std::int64_t gap = event.start_ns - previous_end;
            if (launch != nullptr && launch->start_ns > previous_end) {
                idle.host_wait_ns += gap;
            } else if (gap < options.kernel_wait_threshold_ns) {
                idle.kernel_wait_ns += gap;
            } else {
                idle.other_ns += gap;
            }
        }
        previous_end = std::max(previous_end, event.end_ns);
    }
    if (!queued.empty()) {
        // Both lists come nearly in order (one stream, one launching thread): sort only when
        // not, then merge, ends before launches at one instant so that a kernel that ends as
        // the next is launched does not count twice.
        if (!std::is_sorted(queued.begin(), queued.end()))
            std::sort(queued.begin(), queued.end());
        if (!std::is_sorted(finished.begin(), finished.end()))
            std::sort(finished.begin(), finished.end());
        std::int64_t length = 0, weighted = 0;
        const std::int64_t first = std::min(queued.front(), finished.front());
        std::int64_t previous = first;
        std::size_t i = 0, j = 0;
        while (i < queued.size() || j < finished.size()) {
            const bool end =
                j < finished.size() && (i == queued.size() || finished[j] <= queued[i]);
            const std::int64_t at = end ? finished[j++] : queued[i++];
            weighted += length * (at - previous);
            length += end ? -1 : +1;
            idle.max_queue_length = std::max(idle.max_queue_length, length);
            previous = at;
        }
        const std::int64_t span = previous - first;
        idle.mean_queue_length = span > 0 ? double(weighted) / double(span) : 0.0;
    }
    return idle;
}

}  // namespace

void RankKernels::add(const RankTrace& rank, const KernelOptions& options) {
    rank_ = rank.info.rank;
    if (!rank.has_device_lanes())
        return;
    const auto launches = launches_of(rank);
    KernelTimeByType by_type = time_by_type(rank);
    if (by_type.kernel_span_ns > 0 || by_type.busy_ns() > 0)
        time_by_type_ = by_type;
    LaunchStats launch_stats;
    launch_stats.rank = rank.info.rank;
    for (const LaneTrace& lane : rank.lanes) {
        if (lane.info.kind != LaneKind::gpu_stream)
            continue;
        StreamIdle idle = stream_idle(rank, lane, launches, options);
        if (idle.kernels > 0)
            idle_.push_back(std::move(idle));
        std::uint32_t cached_name = 0;
        NameTotal* cached = nullptr;
        for (const Event& event : lane.events) {
            KernelType type;
            if (!kernel_type_of(event, type))
                continue;
            if (cached == nullptr || event.name.value != cached_name) {
                // Kernels of one name come in runs; one look-up per run.
                cached_name = event.name.value;
                cached = &by_name_[cached_name];
            }
            NameTotal& total = *cached;
            total.type = type;
            ++total.count;
            total.total += event.duration_ns();
            total.min = std::min(total.min, event.duration_ns());
            total.max = std::max(total.max, event.duration_ns());
            if (event.correlation < 0)
                continue;
            const Launch* launch = launches.find(event.correlation);
            if (launch == nullptr)
                continue;
            const std::int64_t cpu = launch->duration_ns, gpu = event.duration_ns();
            const std::int64_t delay =
                std::max<std::int64_t>(0, event.start_ns - (launch->start_ns + cpu));
            ++launch_stats.launches;
            launch_stats.cpu_total_ns += cpu;
            launch_stats.gpu_total_ns += gpu;
            launch_stats.delay_total_ns += delay;
            launch_stats.delay_max_ns = std::max(launch_stats.delay_max_ns, delay);
            launch_stats.short_kernels += cpu <= options.runtime_cutoff_ns && gpu < cpu;
            launch_stats.slow_calls += cpu > options.runtime_cutoff_ns;
            launch_stats.delay_outliers += delay > options.launch_delay_cutoff_ns;
        }
    }
    if (launch_stats.launches > 0)
        launches_ = launch_stats;
}

void KernelTotals::add(RankKernels&& rank) {
    if (rank.time_by_type_)
        result_.time_by_type.push_back(*rank.time_by_type_);
    for (StreamIdle& idle : rank.idle_)
        result_.idle.push_back(std::move(idle));
    if (rank.launches_)
        result_.launches.push_back(*rank.launches_);
    for (const auto& [name, from] : rank.by_name_) {
        Total& total = by_name_[name];
        // The last rank's type of a name, as one walk over every rank's kernels gives it.
        total.sum.type = from.type;
        total.sum.count += from.count;
        total.sum.total += from.total;
        total.sum.min = std::min(total.sum.min, from.min);
        total.sum.max = std::max(total.sum.max, from.max);
        total.by_rank[rank.rank_] += from.total;
    }
}

KernelAnalysis KernelTotals::finish(const RunTrace& trace, const KernelOptions& options) && {
    KernelAnalysis result = std::move(result_);
    for (auto& [name, total] : by_name_) {
        KernelStats stats;
        stats.name = std::string(trace.name(StringId{name}));
        stats.type = total.sum.type;
        stats.count = total.sum.count;
        stats.total_ns = total.sum.total;
        stats.min_ns = total.sum.min;
        stats.max_ns = total.sum.max;
        stats.ranks = static_cast<int>(total.by_rank.size());
        stats.rank_total_min_ns = INT64_MAX;
        for (const auto& [rank, ns] : total.by_rank) {
            stats.rank_total_min_ns = std::min(stats.rank_total_min_ns, ns);
            if (ns > stats.rank_total_max_ns ||
                (ns == stats.rank_total_max_ns && rank < stats.slowest_rank)) {
                stats.rank_total_max_ns = ns;
                stats.slowest_rank = rank;
            }
        }
        result.top_kernels.push_back(std::move(stats));
    }
    std::sort(result.top_kernels.begin(), result.top_kernels.end(),
              [](const KernelStats& a, const KernelStats& b) {
                  return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.name < b.name;
              });
    if (result.top_kernels.size() > options.top)
        result.top_kernels.resize(options.top);
    return result;
}

KernelAnalysis analyze_kernels(const RunTrace& trace, const KernelOptions& options) {
    KernelTotals totals;
    for (const RankTrace& rank : trace.ranks) {
        RankKernels kernels;
        kernels.add(rank, options);
        totals.add(std::move(kernels));
    }
    return std::move(totals).finish(trace, options);
}

}  // namespace fulcrum::analysis
