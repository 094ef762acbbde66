// How the timeline and the bubble view mark passes: the kind of pass (forward, backward, the
// weight-gradient W pass of a split backward, as zb-h1 runs it) and its virtual stage (`chunk=`,
// core/trace/annotations.h), and whether the step's critical path (core/analysis/critical_path.h)
// runs through it. The sets come from the analysis, never recomputed here.
#pragma once

#include <QString>
#include <compare>
#include <cstdint>
#include <set>

#include "core/analysis/run_analysis.h"

namespace fulcrum::views {

// A pass as the critical path names it and as its range carries it.
struct PassKey {
    std::int32_t rank = 0;
    std::int32_t step = -1;
    std::int32_t microbatch = -1;
    Phase phase = Phase::forward;
    auto operator<=>(const PassKey&) const = default;
};

// The passes the critical paths of every step run through.
std::set<PassKey> critical_pass_keys(const analysis::RunAnalysis& analysis);

// The kind of pass a range is (forward, backward, weight_grad), or Phase::none for a range
// that is no pass; as find_passes tells them apart (core/analysis/passes.cpp).
Phase pass_kind(const analysis::RunTrace& trace, const Event& event);

// "F3", "B3", "W3" (kind and micro-batch), with the virtual stage when the range has one
// ("F3 v1"): a bar's label.
QString pass_label(Phase kind, std::int32_t microbatch, std::int32_t chunk);

}  // namespace fulcrum::views
