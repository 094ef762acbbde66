// Sets of half-open time intervals [start, end), kept sorted and disjoint: the arithmetic of
// "how much of this overlaps that" behind the step breakdown and the overlap analyses.
#pragma once

#include <cstdint>
#include <vector>

namespace fulcrum::analysis {

struct Interval {
    std::int64_t start = 0;
    std::int64_t end = 0;
    std::int64_t length() const { return end - start; }
    friend bool operator==(const Interval&, const Interval&) = default;
};

class IntervalSet {
public:
    IntervalSet() = default;
    // Any intervals, in any order, overlapping or not; empty ones are dropped.
    explicit IntervalSet(std::vector<Interval> intervals);

    void add(std::int64_t start, std::int64_t end);  // amortised O(1) when added in order
    const std::vector<Interval>& intervals() const;
    std::int64_t total() const;  // Σ lengths
    bool empty() const { return intervals().empty(); }

    IntervalSet united(const IntervalSet& other) const;
    IntervalSet intersected(const IntervalSet& other) const;
    IntervalSet subtracted(const IntervalSet& other) const;
    IntervalSet clipped(std::int64_t start, std::int64_t end) const;
    // Length of the intersection, without building it.
    std::int64_t overlap(const IntervalSet& other) const;
    std::int64_t overlap(std::int64_t start, std::int64_t end) const;

private:
    void normalize() const;
    mutable std::vector<Interval> intervals_;
    mutable bool sorted_ = true;
};

}  // namespace fulcrum::analysis
