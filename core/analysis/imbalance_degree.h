// The imbalance degree, one definition for every analysis: max / mean of a set of values
// (WLB-LLM §3.3), 1 for perfect balance (docs/analyses.md §5).
//
// Over fewer than two values it is 1 by definition and says nothing, and with a mean of 0 there
// is nothing to compare: both have no degree. Over many sets (steps, micro-batches, CP groups)
// the headline figure is weighted by the sets' size: Σ max / Σ mean. Where the values are
// times, that is the time the slowest member took over the time an even split would have
// taken, summed over the sets, so a long step counts for what it costs and a short one for
// little; a plain mean of the ratios would weigh them alike.
#pragma once

#include <algorithm>
#include <optional>
#include <vector>

namespace fulcrum::analysis {

// The largest and the mean of one set of values; none when the set has no degree.
struct SetSpread {
    double largest = 0;
    double mean = 0;
    double degree() const { return largest / mean; }
};

template <typename T>
std::optional<SetSpread> spread_of(const std::vector<T>& values) {
    if (values.size() < 2) {
        return std::nullopt;
    }
    double sum = 0, largest = 0;
    for (const T& v : values) {
        sum += static_cast<double>(v);
        largest = std::max(largest, static_cast<double>(v));
    }
    const double mean = sum / static_cast<double>(values.size());
    if (!(mean > 0)) {
        return std::nullopt;
    }
    return SetSpread{largest, mean};
}

template <typename T>
std::optional<double> imbalance_of(const std::vector<T>& values) {
    const auto spread = spread_of(values);
    return spread ? std::optional<double>(spread->degree()) : std::nullopt;
}

// Σ max / Σ mean over the sets added; none until a set with a degree is added.
class WeightedImbalance {
public:
    void add(const std::optional<SetSpread>& spread) {
        if (spread) {
            largest_ += spread->largest;
            mean_ += spread->mean;
            any_ = true;
        }
    }
    std::optional<double> value() const {
        return any_ ? std::optional<double>(largest_ / mean_) : std::nullopt;
    }

private:
    double largest_ = 0, mean_ = 0;
    bool any_ = false;
};

}  // namespace fulcrum::analysis
