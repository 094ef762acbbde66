#include "core/analysis/run_diff.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <unordered_map>

#include "core/store/trace_reader.h"
#include "core/util/ordered_pool.h"

namespace fulcrum::analysis {

namespace {

// One thread's counts of the rank being tallied, by name id × kind: an array index an event
// instead of a hash look-up (and the steps' sets touched once per run of one step, not once an
// event), put into the tally's map once per name at the rank's end. Interned ids are dense, so
// the array is the names' count × 8 slots, kept by the thread from rank to rank.
struct RankCounts {
    std::vector<std::pair<std::int64_t, std::int64_t>> slots;  // (count, total ns)
    std::vector<std::size_t> touched;
};

}  // namespace

void NameTally::add(const RankTrace& rank) {
    thread_local RankCounts counts;
    const auto count = [this](std::uint64_t name, EventKind kind, std::int64_t times,
                              std::int64_t ns) {
        Tally& t = by_id_[(name << 8) | std::uint64_t(kind)];
        t.kind = kind;
        t.count += times;
        t.total_ns += ns;
    };
    std::int32_t last_present = -1, last_counted = -1;
    for (const LaneTrace& lane : rank.lanes) {
        for (const Event& event : lane.events) {
            if (event.step >= 0 && event.step != last_present) {
                present_.insert(event.step);
                last_present = event.step;
            }
            if (event.kind == EventKind::mark || event.category == Category::schedule)
                continue;
            if (step_ && event.step != *step_)
                continue;
            if (event.step >= 0 && event.step != last_counted) {
                counted_.insert(event.step);
                last_counted = event.step;
            }
            if (std::size_t(event.kind) >= kEventKindCount) {
                // No kind the store writes (a damaged block): counted as it is, apart.
                count(event.name.value, event.kind, 1, event.duration_ns());
                continue;
            }
            const std::size_t key =
                std::size_t(event.name.value) * kEventKindCount + std::size_t(event.kind);
            if (key >= counts.slots.size()) {
                counts.slots.resize(std::max(key + 1, 2 * counts.slots.size()));
            }
            auto& slot = counts.slots[key];
            if (slot.first == 0) {
                counts.touched.push_back(key);
            }
            ++slot.first;
            slot.second += event.duration_ns();
        }
    }
    for (const std::size_t key : counts.touched) {
        auto& slot = counts.slots[key];
        count(key / kEventKindCount, static_cast<EventKind>(key % kEventKindCount), slot.first,
              slot.second);
        slot = {0, 0};
    }
    counts.touched.clear();
}

void NameTally::add(const NameTally& other) {
    for (const auto& [id, from] : other.by_id_) {
        Tally& t = by_id_[id];
        t.kind = from.kind;
        t.count += from.count;
        t.total_ns += from.total_ns;
    }
    counted_.insert(other.counted_.begin(), other.counted_.end());
    present_.insert(other.present_.begin(), other.present_.end());
}

// (count, total ns) by (kind, name) and the steps they cover: counted by interned name first
// (one hash look-up per event, no string built), then keyed by text once per name, since the
// two sides intern names apart.
TalliedRun::Named TalliedRun::named() const {
    Named out;
    for (const auto& [id, t] : tally->by_id_) {
        auto& named =
            out.totals[{t.kind, std::string(names->name(StringId{std::uint32_t(id >> 8)}))}];
        named.first += t.count;
        named.second += t.total_ns;
    }
    out.steps = std::max<int>(1, static_cast<int>(tally->counted_.size()));
    return out;
}

RunDiff diff_tallies(const TalliedRun& a, const TalliedRun& b) {
    RunDiff diff;
    const TalliedRun::Named left = a.named();
    const TalliedRun::Named right = b.named();
    diff.steps_a = left.steps;
    diff.steps_b = right.steps;
    std::set<std::pair<EventKind, std::string>> keys;
    for (const auto& [key, t] : left.totals)
        keys.insert(key);
    for (const auto& [key, t] : right.totals)
        keys.insert(key);
    for (const auto& key : keys) {
        NameDiff row;
        row.kind = key.first;
        row.name = key.second;
        if (auto at = left.totals.find(key); at != left.totals.end()) {
            row.count_a = double(at->second.first) / diff.steps_a;
            row.total_ns_a = double(at->second.second) / diff.steps_a;
        }
        if (auto at = right.totals.find(key); at != right.totals.end()) {
            row.count_b = double(at->second.first) / diff.steps_b;
            row.total_ns_b = double(at->second.second) / diff.steps_b;
        }
        diff.rows.push_back(std::move(row));
    }
    std::stable_sort(diff.rows.begin(), diff.rows.end(), [](const NameDiff& x, const NameDiff& y) {
        return std::abs(x.delta_ns()) > std::abs(y.delta_ns());
    });
    return diff;
}

RunDiff diff_runs(const DiffSide& a, const DiffSide& b) {
    NameTally left(a.step), right(b.step);
    for (const RankTrace& rank : a.run->ranks)
        left.add(rank);
    for (const RankTrace& rank : b.run->ranks)
        right.add(rank);
    return diff_tallies({&left, a.run}, {&right, b.run});
}

Result<std::vector<NameTally>> tally_run_file(const store::TraceReader& reader,
                                              const RunTrace& metadata,
                                              const std::vector<std::optional<std::int32_t>>& steps,
                                              const std::function<void(double)>& progress,
                                              const std::atomic<bool>* cancel) {
    const auto tallies = [&steps] {
        std::vector<NameTally> out;
        for (const std::optional<std::int32_t>& step : steps) {
            out.emplace_back(step);
        }
        return out;
    };
    const int workers = worker_threads();
    RankLoader loader(reader, metadata, workers);
    std::vector<NameTally> total = tallies();
    const std::size_t ranks = metadata.ranks.size();
    auto status = produce_in_order<std::vector<NameTally>>(
        ranks, workers, 2 * static_cast<std::size_t>(workers),
        [&](int worker, std::size_t index) -> Result<std::vector<NameTally>> {
            auto rank = loader.load(worker, index);
            if (!rank) {
                return rank.error();
            }
            std::vector<NameTally> parts = tallies();
            for (NameTally& part : parts) {
                part.add(**rank);
            }
            return parts;
        },
        [&](std::size_t index, std::vector<NameTally>&& parts) -> Status {
            for (std::size_t i = 0; i < parts.size(); ++i) {
                total[i].add(parts[i]);
            }
            if (progress) {
                progress(double(index + 1) / double(ranks));
            }
            return {};
        },
        cancel);
    if (!status) {
        return status.error();
    }
    return total;
}

}  // namespace fulcrum::analysis
