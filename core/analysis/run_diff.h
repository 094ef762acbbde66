// What changed between two runs, or two steps of one (HTA's trace diff, by name): for every
// range and kernel name, how many times it ran and how long in all, per step, on each side.
// Names only one side has are added or removed; the others changed by their counts and times.
// docs/analyses.md, "Diff of two runs".
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
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

// What a diff counts of one side, added a rank at a time: events of every kind but marks and
// schedule containers, by (name, kind), over every step or one. Counts and times are integers,
// so the order the ranks come in does not matter.
class NameTally {
public:
    explicit NameTally(std::optional<std::int32_t> step = std::nullopt) : step_(step) {}
    void add(const RankTrace& rank);
    void add(const NameTally& other);  // another part of the same run, the same step
    // Every step number the run's events carry, counted or not (to refuse a step it lacks).
    const std::set<std::int32_t>& steps_present() const { return present_; }

private:
    friend struct TalliedRun;
    struct Tally {
        std::int64_t count = 0, total_ns = 0;
        EventKind kind = EventKind::range;
    };
    std::optional<std::int32_t> step_;
    std::unordered_map<std::uint64_t, Tally> by_id_;  // (name id << 8) | kind
    std::set<std::int32_t> counted_, present_;
};

// A tally and the run whose names it counted by id (a run read without its events will do).
struct TalliedRun {
    const NameTally* tally = nullptr;
    const RunTrace* names = nullptr;

    struct Named;
    Named named() const;
};
struct TalliedRun::Named {
    std::map<std::pair<EventKind, std::string>, std::pair<std::int64_t, std::int64_t>>
        totals;     // (count, total ns) by (kind, name)
    int steps = 1;  // the steps they cover, at least one
};

// Which part of a run in memory to compare: every step, or one.
struct DiffSide {
    const RunTrace* run = nullptr;
    std::optional<std::int32_t> step;
};

// A run without step numbers counts as one step.
RunDiff diff_tallies(const TalliedRun& a, const TalliedRun& b);
RunDiff diff_runs(const DiffSide& a, const DiffSide& b);

// The tallies of a run file read a rank at a time on every core, as analyze_run_file reads it:
// memory is one rank a worker, never the run. One tally per entry of `steps` (every step, or
// one), all from one read, so two steps of one run cost one pass over it. `metadata` is the run
// loaded without events.
Result<std::vector<NameTally>> tally_run_file(const store::TraceReader& reader,
                                              const RunTrace& metadata,
                                              const std::vector<std::optional<std::int32_t>>& steps,
                                              const std::function<void(double)>& progress = {},
                                              const std::atomic<bool>* cancel = nullptr);

}  // namespace fulcrum::analysis
