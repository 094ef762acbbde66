// What changed between two runs, or two steps of one (HTA's trace diff, by name): for every
// range and kernel name, how many times it ran and how long in all, per step, on each side.
// Names only one side has are added or removed; the others changed by their counts and times.
// docs/analyses.md, "Diff of two runs".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/analysis/run_trace.h"

namespace fulcrum::analysis {

struct NameDiff {
    std::string name;
    EventKind kind = EventKind::range;
    // Per step on each side (the totals over its steps, divided by their number), so runs of
    // different lengths compare.
    double count_a = 0, count_b = 0;
    double total_ns_a = 0, total_ns_b = 0;
    bool added() const { return count_a == 0 && count_b > 0; }
    bool removed() const { return count_a > 0 && count_b == 0; }
    double delta_ns() const { return total_ns_b - total_ns_a; }
};

struct RunDiff {
    int steps_a = 0, steps_b = 0;  // the steps each side's figures are per
    std::vector<NameDiff> rows;    // by |delta| descending
};

// Which part of a run to compare: every step, or one.
struct DiffSide {
    const RunTrace* run = nullptr;
    std::optional<std::int32_t> step;
};

// Events of every kind but marks and schedule containers, over every rank. A run without step
// numbers counts as one step.
RunDiff diff_runs(const DiffSide& a, const DiffSide& b);

}  // namespace fulcrum::analysis
