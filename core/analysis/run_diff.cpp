#include "core/analysis/run_diff.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <unordered_map>

namespace fulcrum::analysis {

namespace {

struct Tally {
    std::int64_t count = 0, total_ns = 0;
    EventKind kind = EventKind::range;
};

// Totals by (kind, name) over the chosen steps, and how many steps they cover. Counted by
// interned name first (one hash look-up per event, no string built), then keyed by text once
// per name, since the two sides intern names apart.
std::map<std::pair<EventKind, std::string>, Tally> tally(const DiffSide& side, int& steps) {
    std::unordered_map<std::uint64_t, Tally> by_id;
    std::set<std::int32_t> seen;
    for (const RankTrace& rank : side.run->ranks) {
        for (const LaneTrace& lane : rank.lanes) {
            for (const Event& event : lane.events) {
                if (event.kind == EventKind::mark || event.category == Category::schedule)
                    continue;
                if (side.step && event.step != *side.step)
                    continue;
                if (event.step >= 0)
                    seen.insert(event.step);
                Tally& t =
                    by_id[(std::uint64_t(event.name.value) << 8) | std::uint64_t(event.kind)];
                t.kind = event.kind;
                ++t.count;
                t.total_ns += event.duration_ns();
            }
        }
    }
    std::map<std::pair<EventKind, std::string>, Tally> by_name;
    for (const auto& [id, t] : by_id) {
        Tally& named =
            by_name[{t.kind, std::string(side.run->name(StringId{std::uint32_t(id >> 8)}))}];
        named.kind = t.kind;
        named.count += t.count;
        named.total_ns += t.total_ns;
    }
    steps = std::max<int>(1, static_cast<int>(seen.size()));
    return by_name;
}

}  // namespace

RunDiff diff_runs(const DiffSide& a, const DiffSide& b) {
    RunDiff diff;
    const auto left = tally(a, diff.steps_a);
    const auto right = tally(b, diff.steps_b);
    std::set<std::pair<EventKind, std::string>> keys;
    for (const auto& [key, t] : left)
        keys.insert(key);
    for (const auto& [key, t] : right)
        keys.insert(key);
    for (const auto& key : keys) {
        NameDiff row;
        row.kind = key.first;
        row.name = key.second;
        if (auto at = left.find(key); at != left.end()) {
            row.count_a = double(at->second.count) / diff.steps_a;
            row.total_ns_a = double(at->second.total_ns) / diff.steps_a;
        }
        if (auto at = right.find(key); at != right.end()) {
            row.count_b = double(at->second.count) / diff.steps_b;
            row.total_ns_b = double(at->second.total_ns) / diff.steps_b;
        }
        diff.rows.push_back(std::move(row));
    }
    std::stable_sort(diff.rows.begin(), diff.rows.end(), [](const NameDiff& x, const NameDiff& y) {
        return std::abs(x.delta_ns()) > std::abs(y.delta_ns());
    });
    return diff;
}

}  // namespace fulcrum::analysis
