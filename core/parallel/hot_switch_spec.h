// The hot-switch spec: which layout each length bucket of a step runs under (HotSPa, SOSP'24,
// §4: sequences grouped by length, each group under its own parallel layout on the same
// GPUs). `fulcrum simulate --hot-switch` and `fulcrum-train --hot-switch` read it; docs/plan.md,
// "The hot-switch spec", has the grammar.
//
//   spec    = bucket { ";" bucket }
//   bucket  = LO "-" [ HI ] ":" layout      documents with LO <= length < HI (no HI: no bound)
//   layout  = degree { "," degree }         degree = ("dp" | "tp" | "pp" | "cp") N
//
// e.g. `0-2048:dp4;2048-8192:dp2,tp2;8192-:cp2,pp2` on 4 ranks; a degree not named is 1.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/parallel/grid.h"
#include "core/util/result.h"

namespace fulcrum::parallel {

struct HotSwitchBucket {
    std::int64_t min_length = 0;   // inclusive
    std::int64_t max_length = -1;  // exclusive; −1: no bound (the last bucket)
    parallel::GridShape layout;

    bool contains(std::int64_t length) const {
        return length >= min_length && (max_length < 0 || length < max_length);
    }
};

struct HotSwitchSpec {
    std::vector<HotSwitchBucket> buckets;  // in order of length, as they run in a step
};

// What a spec is checked against; 0 leaves a check out.
struct HotSwitchLimits {
    int world = 0;   // every layout's product
    int heads = 0;   // TP must divide them
    int layers = 0;  // PP must not exceed the layers
};

// Parses and checks a spec: buckets contiguous from 0 with no gap or overlap, the last one
// open-ended, every layout over `limits.world` ranks. The error names the bucket and the
// problem.
Result<HotSwitchSpec> parse_hot_switch_spec(std::string_view spec, const HotSwitchLimits& limits);

// The spec string that parse_hot_switch_spec reads back to `spec`.
std::string hot_switch_spec_string(const HotSwitchSpec& spec);

// A layout as the spec writes it: "dp2,tp2" (degrees of 1 left out; "dp1" for one rank).
std::string layout_string(const parallel::GridShape& layout);

// "0-2048", "8192-".
std::string bucket_bounds_string(const HotSwitchBucket& bucket);

// The bucket a document of `length` tokens falls in; −1 when none does.
int bucket_of(const HotSwitchSpec& spec, std::int64_t length);

}  // namespace fulcrum::parallel
