// CorrelationMap: a value per correlation id (a launch call and the device work it started
// share one), looked up once per event by the analyses that join host launches to kernels.
//
// CUPTI numbers a process's runtime calls 1, 2, 3, ... (importers keep the ids they read), so
// a rank's ids are dense: a table indexed by id − min answers in one load, without a hash
// table's node per entry (a hash map of a 1024-rank, 100 M-event run's launches was most of
// find_passes' and analyze_kernels' time, in malloc and cache misses; bench/README.md, issue
// 18). Ids that are not dense go to a vector sorted by id and are found by binary search.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace fulcrum::analysis {

template <typename T>
class CorrelationMap {
public:
    // `entries` in the order met; a later entry of an id already there is folded into the
    // first with merge(kept, later).
    template <typename Merge>
    CorrelationMap(std::vector<std::pair<std::int64_t, T>> entries, Merge merge) {
        if (entries.empty()) {
            return;
        }
        std::int64_t low = entries.front().first, high = low;
        for (const auto& [id, value] : entries) {
            low = std::min(low, id);
            high = std::max(high, id);
        }
        // Dense enough: at most four slots an entry (a rank's ids interleave with its other
        // threads' calls), so the table is no bigger than a few times the entries.
        const auto span = static_cast<std::uint64_t>(high) - static_cast<std::uint64_t>(low);
        if (span < 4 * static_cast<std::uint64_t>(entries.size()) + 1024) {
            base_ = low;
            slots_.resize(span + 1);
            present_.assign(span + 1, 0);
            for (auto& [id, value] : entries) {
                const auto slot = static_cast<std::size_t>(id - low);
                if (present_[slot]) {
                    merge(slots_[slot], value);
                } else {
                    slots_[slot] = std::move(value);
                    present_[slot] = 1;
                }
            }
            return;
        }
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
        for (auto& entry : entries) {
            if (!sorted_.empty() && sorted_.back().first == entry.first) {
                merge(sorted_.back().second, entry.second);
            } else {
                sorted_.push_back(std::move(entry));
            }
        }
    }

    const T* find(std::int64_t id) const {
        if (!present_.empty()) {
            if (id < base_ || static_cast<std::uint64_t>(id) - static_cast<std::uint64_t>(base_) >=
                                  present_.size()) {
                return nullptr;
            }
            const auto slot = static_cast<std::size_t>(id - base_);
            return present_[slot] ? &slots_[slot] : nullptr;
        }
        const auto it =
            std::lower_bound(sorted_.begin(), sorted_.end(), id,
                             [](const auto& entry, std::int64_t x) { return entry.first < x; });
        return it != sorted_.end() && it->first == id ? &it->second : nullptr;
    }

private:
    std::int64_t base_ = 0;
    std::vector<T> slots_;
    std::vector<std::uint8_t> present_;
    std::vector<std::pair<std::int64_t, T>> sorted_;
};

}  // namespace fulcrum::analysis
