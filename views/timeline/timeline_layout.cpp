#include "views/timeline/timeline_layout.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <thread>
#include <unordered_map>

namespace fulcrum::views::timeline {

namespace {

// Depths by one stack of open ranges. An event pops every open range that ended at or before
// its start; what is left encloses it. Every event earlier at the same depth was popped, so
// ended at or before this start: a depth never overlaps itself, even when a child outlives its
// parent in a broken trace (it only sits one deeper than it should).
void index_lane(LaneRow& row, std::vector<WorkSpan>& spans, std::uint32_t& max_name) {
    const std::vector<Event>& events = row.lane->events;
    row.depth.resize(events.size());
    std::vector<std::int64_t> open_ends;
    open_ends.reserve(64);
    std::unordered_map<std::uint64_t, std::size_t> span_of;
    std::uint64_t last_key = ~0ull;
    std::size_t last_span = 0;
    for (std::uint32_t i = 0; i < events.size(); ++i) {
        const Event& event = events[i];
        while (!open_ends.empty() && open_ends.back() <= event.start_ns) {
            open_ends.pop_back();
        }
        max_name = std::max(max_name, event.name.value);
        if (open_ends.size() >= static_cast<std::size_t>(kMaxDepth)) {
            // Nesting this deep is a broken trace; the event stays reachable through search.
            row.depth[i] = static_cast<std::uint8_t>(kMaxDepth);
            continue;
        }
        const int depth = static_cast<int>(open_ends.size());
        open_ends.push_back(event.end_ns);
        if (static_cast<int>(row.by_depth.size()) <= depth) {
            row.by_depth.resize(depth + 1);
        }
        row.by_depth[depth].push_back(i);
        row.depth[i] = static_cast<std::uint8_t>(depth);

        if (event.step >= 0) {
            // Consecutive events mostly share a (step, micro-batch): one hash look-up per change.
            const std::uint64_t key =
                (static_cast<std::uint64_t>(static_cast<std::uint32_t>(event.step)) << 32) |
                static_cast<std::uint32_t>(event.microbatch);
            if (key != last_key) {
                auto [it, inserted] = span_of.try_emplace(key, spans.size());
                if (inserted) {
                    spans.push_back({event.step, event.microbatch, event.start_ns, event.end_ns});
                }
                last_key = key;
                last_span = it->second;
            }
            WorkSpan& span = spans[last_span];
            span.start_ns = std::min(span.start_ns, event.start_ns);
            span.end_ns = std::max(span.end_ns, event.end_ns);
        }
    }
    std::sort(spans.begin(), spans.end(),
              [](const WorkSpan& a, const WorkSpan& b) { return a.start_ns < b.start_ns; });
}

void link_flows(const analysis::RunTrace& trace, Layout& layout) {
    struct End {
        std::int64_t correlation;
        std::uint32_t row, event;
        bool device;
    };
    std::vector<End> ends;
    for (std::uint32_t r = 0; r < layout.rows.size(); ++r) {
        const analysis::LaneTrace& lane = *layout.rows[r].lane;
        const bool device = lane.info.kind == LaneKind::gpu_stream;
        for (std::uint32_t i = 0; i < lane.events.size(); ++i) {
            if (lane.events[i].correlation >= 0) {
                ends.push_back({lane.events[i].correlation, r, i, device});
            }
        }
    }
    if (ends.empty()) {
        return;
    }
    // Host ends first within a correlation id, so a launch meets its kernels right after it.
    std::sort(ends.begin(), ends.end(), [](const End& a, const End& b) {
        return a.correlation != b.correlation ? a.correlation < b.correlation : a.device < b.device;
    });
    (void)trace;
    for (std::size_t i = 0; i < ends.size();) {
        std::size_t j = i;
        while (j < ends.size() && ends[j].correlation == ends[i].correlation) {
            ++j;
        }
        // A correlation id is only unique within a rank (CUPTI counts per process).
        for (std::size_t h = i; h < j && !ends[h].device; ++h) {
            for (std::size_t d = i; d < j; ++d) {
                if (!ends[d].device ||
                    layout.rows[ends[d].row].rank != layout.rows[ends[h].row].rank) {
                    continue;
                }
                Flow flow;
                flow.host_row = ends[h].row;
                flow.host_event = ends[h].event;
                flow.device_row = ends[d].row;
                flow.device_event = ends[d].event;
                flow.launch_ns = layout.rows[flow.host_row].lane->events[flow.host_event].start_ns;
                flow.kernel_ns =
                    layout.rows[flow.device_row].lane->events[flow.device_event].start_ns;
                layout.flows.push_back(flow);
            }
        }
        i = j;
    }
    std::sort(layout.flows.begin(), layout.flows.end(),
              [](const Flow& a, const Flow& b) { return a.kernel_ns < b.kernel_ns; });
}

}  // namespace

Layout build_layout(const analysis::RunTrace& trace, unsigned threads) {
    Layout layout;
    for (std::uint32_t r = 0; r < trace.ranks.size(); ++r) {
        const analysis::RankTrace& rank = trace.ranks[r];
        for (std::uint32_t l = 0; l < rank.lanes.size(); ++l) {
            LaneRow row;
            row.rank = rank.info.rank;
            row.rank_index = r;
            row.lane_index = l;
            row.lane = &rank.lanes[l];
            layout.rows.push_back(std::move(row));
        }
    }
    layout.spans.resize(layout.rows.size());
    std::vector<std::uint32_t> max_names(layout.rows.size(), 0);
    std::atomic<std::size_t> next{0};
    auto work = [&] {
        for (std::size_t r = next++; r < layout.rows.size(); r = next++) {
            index_lane(layout.rows[r], layout.spans[r], max_names[r]);
        }
    };
    if (threads == 0) {
        threads = std::max(1u, std::thread::hardware_concurrency());
    }
    threads = std::min<unsigned>(
        threads, static_cast<unsigned>(std::max<std::size_t>(1, layout.rows.size())));
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < threads; ++t) {
        pool.emplace_back(work);
    }
    work();
    for (std::thread& thread : pool) {
        thread.join();
    }

    bool any = false;
    for (std::size_t r = 0; r < layout.rows.size(); ++r) {
        const auto& events = layout.rows[r].lane->events;
        layout.max_name_id = std::max(layout.max_name_id, max_names[r]);
        layout.events += static_cast<std::int64_t>(events.size());
        if (events.empty()) {
            continue;
        }
        // Starts are sorted; the last end is on some depth's last event.
        std::int64_t last_end = events.back().end_ns;
        for (const auto& depth : layout.rows[r].by_depth) {
            if (!depth.empty()) {
                last_end = std::max(last_end, events[depth.back()].end_ns);
            }
        }
        layout.start_ns =
            any ? std::min(layout.start_ns, events.front().start_ns) : events.front().start_ns;
        layout.end_ns = any ? std::max(layout.end_ns, last_end) : last_end;
        any = true;
    }
    link_flows(trace, layout);
    return layout;
}

void plan_row(const std::vector<Event>& events, const std::vector<std::uint32_t>& depth_index,
              std::int64_t start_ns, std::int64_t end_ns, double width_px, double min_px,
              std::vector<PlanItem>& out) {
    if (end_ns <= start_ns || width_px <= 0 || depth_index.empty()) {
        return;
    }
    const double ns_per_px = static_cast<double>(end_ns - start_ns) / width_px;
    const auto fold_ns = static_cast<std::int64_t>(min_px * ns_per_px);
    const auto begin = depth_index.begin();
    const auto end = depth_index.end();
    const std::size_t n = depth_index.size();
    auto start_of = [&](std::size_t i) { return events[depth_index[i]].start_ns; };
    auto end_of = [&](std::size_t i) { return events[depth_index[i]].end_ns; };

    // Ends increase within a depth, so the first visible event is a binary search away.
    std::size_t i = static_cast<std::size_t>(
        std::partition_point(begin, end,
                             [&](std::uint32_t e) { return events[e].end_ns <= start_ns; }) -
        begin);
    while (i < n && start_of(i) < end_ns) {
        if (end_of(i) - start_of(i) >= fold_ns) {
            out.push_back({start_of(i), end_of(i), depth_index[i], 1});
            ++i;
            continue;
        }
        // Fold: take every event that starts within `min_px` of the block's end, skipping them
        // with one binary search each. Each round either stops or moves the end by at least
        // `min_px`, so a block costs O(its pixels / min_px · log n).
        std::int64_t block_end = end_of(i);
        std::uint32_t count = 1;
        std::size_t j = i + 1;
        while (j < n && block_end < end_ns) {
            const std::int64_t limit = block_end + std::max<std::int64_t>(fold_ns, 1);
            const std::size_t k = static_cast<std::size_t>(
                std::partition_point(begin + static_cast<std::ptrdiff_t>(j), end,
                                     [&](std::uint32_t e) { return events[e].start_ns < limit; }) -
                begin);
            if (k == j) {
                break;  // a visible gap follows
            }
            if (end_of(k - 1) - start_of(k - 1) < fold_ns) {
                block_end = std::max(block_end, end_of(k - 1));
                count += static_cast<std::uint32_t>(k - j);
                j = k;
                continue;
            }
            // The last one near the block is wide enough to see on its own: it ends the block,
            // and the ones before it (all between the block's end and it) join the block.
            if (k - 1 > j) {
                block_end = std::max(block_end, end_of(k - 2));
                count += static_cast<std::uint32_t>(k - 1 - j);
            }
            j = k - 1;
            break;
        }
        out.push_back({start_of(i), block_end, depth_index[i], count});
        i = j;
    }
}

std::int64_t event_at(const std::vector<Event>& events,
                      const std::vector<std::uint32_t>& depth_index, std::int64_t time_ns,
                      std::int64_t tolerance_ns) {
    const auto p = static_cast<std::int64_t>(
        std::partition_point(depth_index.begin(), depth_index.end(),
                             [&](std::uint32_t e) { return events[e].end_ns <= time_ns; }) -
        depth_index.begin());
    const auto n = static_cast<std::int64_t>(depth_index.size());
    if (p < n && events[depth_index[p]].start_ns <= time_ns) {
        return p;
    }
    std::int64_t best = -1;
    std::int64_t best_distance = tolerance_ns + 1;
    if (p > 0) {
        const std::int64_t distance = time_ns - events[depth_index[p - 1]].end_ns;
        if (distance < best_distance) {
            best = p - 1;
            best_distance = distance;
        }
    }
    if (p < n) {
        const std::int64_t distance = events[depth_index[p]].start_ns - time_ns;
        if (distance < best_distance) {
            best = p;
        }
    }
    return best;
}

std::vector<EventRef> find_by_name(const analysis::RunTrace& trace, const Layout& layout,
                                   std::string_view needle) {
    std::vector<EventRef> hits;
    if (needle.empty()) {
        return hits;
    }
    auto lower = [](char c) {
        return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    };
    // Match each distinct name once, then scan events comparing ids only.
    std::vector<char> matches(layout.max_name_id + 1, 0);
    for (std::uint32_t id = 1; id <= layout.max_name_id; ++id) {
        const std::string_view name = trace.name(StringId{id});
        matches[id] =
            std::search(name.begin(), name.end(), needle.begin(), needle.end(),
                        [&](char a, char b) { return lower(a) == lower(b); }) != name.end();
    }
    for (std::uint32_t r = 0; r < layout.rows.size(); ++r) {
        const auto& events = layout.rows[r].lane->events;
        for (std::uint32_t i = 0; i < events.size(); ++i) {
            const std::uint32_t name = events[i].name.value;
            if (name < matches.size() && matches[name]) {
                hits.push_back({r, i});
            }
        }
    }
    std::stable_sort(hits.begin(), hits.end(), [&](const EventRef& a, const EventRef& b) {
        return layout.rows[a.row].lane->events[a.event].start_ns <
               layout.rows[b.row].lane->events[b.event].start_ns;
    });
    return hits;
}

}  // namespace fulcrum::views::timeline
