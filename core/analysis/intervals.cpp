#include "core/analysis/intervals.h"

#include <algorithm>

namespace fulcrum::analysis {

IntervalSet::IntervalSet(std::vector<Interval> intervals) : intervals_(std::move(intervals)) {
    sorted_ = false;
    normalize();
}

void IntervalSet::add(std::int64_t start, std::int64_t end) {
    if (end <= start) {
        return;
    }
    if (sorted_ && !intervals_.empty()) {
        Interval& last = intervals_.back();
        if (start >= last.start) {
            if (start <= last.end) {
                last.end = std::max(last.end, end);
            } else {
                intervals_.push_back({start, end});
            }
            return;
        }
        sorted_ = false;
    }
    intervals_.push_back({start, end});
}

void IntervalSet::normalize() const {
    if (sorted_) {
        return;
    }
    std::erase_if(intervals_, [](const Interval& i) { return i.end <= i.start; });
    const auto by_start = [](const Interval& a, const Interval& b) { return a.start < b.start; };
    // They mostly come as a few runs in start order (a lane's, then another lane's): those are
    // merged, a pair of runs at a time; many runs are sorted. Intervals of one start may end
    // up in another order, which the union below does not see.
    constexpr std::size_t kMergedRuns = 64;
    std::vector<std::size_t> runs = {0};
    for (std::size_t i = 1; i < intervals_.size() && runs.size() <= kMergedRuns; ++i) {
        if (intervals_[i].start < intervals_[i - 1].start) {
            runs.push_back(i);
        }
    }
    if (runs.size() > kMergedRuns) {
        std::sort(intervals_.begin(), intervals_.end(), by_start);
    }
    const auto at = [&](std::size_t i) {
        return intervals_.begin() + static_cast<std::ptrdiff_t>(i);
    };
    while (runs.size() > 1 && runs.size() <= kMergedRuns) {
        std::vector<std::size_t> merged_runs;
        for (std::size_t k = 0; k < runs.size(); k += 2) {
            merged_runs.push_back(runs[k]);
            if (k + 1 < runs.size()) {
                const std::size_t end = k + 2 < runs.size() ? runs[k + 2] : intervals_.size();
                std::inplace_merge(at(runs[k]), at(runs[k + 1]), at(end), by_start);
            }
        }
        runs = std::move(merged_runs);
    }
    std::vector<Interval> merged;
    merged.reserve(intervals_.size());
    for (const Interval& i : intervals_) {
        if (!merged.empty() && i.start <= merged.back().end) {
            merged.back().end = std::max(merged.back().end, i.end);
        } else {
            merged.push_back(i);
        }
    }
    intervals_ = std::move(merged);
    sorted_ = true;
}

const std::vector<Interval>& IntervalSet::intervals() const {
    normalize();
    return intervals_;
}

std::int64_t IntervalSet::total() const {
    std::int64_t sum = 0;
    for (const Interval& i : intervals()) {
        sum += i.length();
    }
    return sum;
}

IntervalSet IntervalSet::united(const IntervalSet& other) const {
    std::vector<Interval> all = intervals();
    all.insert(all.end(), other.intervals().begin(), other.intervals().end());
    return IntervalSet(std::move(all));
}

IntervalSet IntervalSet::intersected(const IntervalSet& other) const {
    IntervalSet result;
    const auto& a = intervals();
    const auto& b = other.intervals();
    std::size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
        const std::int64_t start = std::max(a[i].start, b[j].start);
        const std::int64_t end = std::min(a[i].end, b[j].end);
        result.add(start, end);
        (a[i].end < b[j].end) ? ++i : ++j;
    }
    return result;
}

IntervalSet IntervalSet::subtracted(const IntervalSet& other) const {
    IntervalSet result;
    const auto& b = other.intervals();
    std::size_t j = 0;
    for (const Interval& i : intervals()) {
        std::int64_t at = i.start;
        while (j < b.size() && b[j].end <= at) {
            ++j;
        }
        std::size_t k = j;
        while (k < b.size() && b[k].start < i.end) {
            result.add(at, b[k].start);
            at = std::max(at, b[k].end);
            ++k;
        }
        result.add(at, i.end);
    }
    return result;
}

IntervalSet IntervalSet::clipped(std::int64_t start, std::int64_t end) const {
    IntervalSet result;
    const auto& a = intervals();
    auto it = std::lower_bound(a.begin(), a.end(), start,
                               [](const Interval& i, std::int64_t t) { return i.end <= t; });
    for (; it != a.end() && it->start < end; ++it) {
        result.add(std::max(it->start, start), std::min(it->end, end));
    }
    return result;
}

std::int64_t IntervalSet::overlap(const IntervalSet& other) const {
    std::int64_t sum = 0;
    const auto& a = intervals();
    const auto& b = other.intervals();
    std::size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
        sum += std::max<std::int64_t>(
            0, std::min(a[i].end, b[j].end) - std::max(a[i].start, b[j].start));
        (a[i].end < b[j].end) ? ++i : ++j;
    }
    return sum;
}

std::int64_t IntervalSet::overlap(std::int64_t start, std::int64_t end) const {
    const auto& a = intervals();
    auto it = std::lower_bound(a.begin(), a.end(), start,
                               [](const Interval& i, std::int64_t t) { return i.end <= t; });
    std::int64_t sum = 0;
    for (; it != a.end() && it->start < end; ++it) {
        sum += std::min(it->end, end) - std::max(it->start, start);
    }
    return sum;
}

}  // namespace fulcrum::analysis
