// What a rank is doing at each moment: its lanes' time cut into compute, communication,
// copies and other work, from the innermost event at each instant.
//
// Ranges nest on a host lane (step ⊃ forward ⊃ attention ⊃ cp all-gather), so the class of
// an instant is the class of the innermost event covering it: inside a forward pass but in
// its pipeline receive, the rank is communicating, not computing. Schedule containers
// (`step`, micro-batch ranges) are transparent: an instant covered only by them is idle. A
// range that overlaps another without nesting keeps its whole duration.
// A rank with GPU streams is judged by its streams alone (kernels are the work; host ranges
// only launch it); a CPU rank by its host threads. On a stream every kernel, copy and
// collective counts whole, even where two overlap (the sets are unions, as HTA defines them);
// synchronisation records are not work. Overlap between lanes (a copy stream beside the
// compute stream) is what the sets' intersections measure.
#pragma once

#include "core/analysis/intervals.h"
#include "core/analysis/run_trace.h"

namespace fulcrum::analysis {

enum class Activity : std::uint8_t { none, compute, communication, copy, other };

// The class of one event by itself (before nesting is considered), from its kind and category.
Activity activity_of(const Event& event);

struct RankActivity {
    IntervalSet compute;
    IntervalSet communication;
    IntervalSet copy;
    IntervalSet other;
};

RankActivity rank_activity(const RankTrace& rank);

}  // namespace fulcrum::analysis
