// `fulcrum plan --hot-switch auto`: HotSPa's layouts per length bucket chosen for the user
// (HotSPa, SOSP'24, leaves the choice of buckets and layouts to them). From a plan of the
// static layouts:
//   1. the cut points: powers of two between the shortest and the longest document, below the
//      context; every set of at most max_buckets − 1 of them whose every bucket holds at least
//      2% of the tokens;
//   2. the layouts: every grid of the world the plan enumerated that a spec may name, kept for
//      a bucket when it fits in memory with the bucket's upper bound as the sequence
//      (activations only shrink with shorter sequences, so a layout that does not fit the
//      context may fit a short bucket: HotSPa's point);
//   3. each (bucket, layout) priced by the simulator's closed-form step (sim::estimate_step) on
//      the bucket's documents of every step, each switch by sim::switch_cost; per cut set the
//      best layouts (the few best per bucket, every combination);
//   4. the best specs by that estimate played in full (sim::simulate with the spec, as
//      `fulcrum simulate --hot-switch` plays it) on the static best's settings and documents,
//      at its recomputation and each level above, with its sequence parallelism and without.
// docs/plan.md, "Choosing a hot-switch spec", says what is searched and what is not.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/parallel/hot_switch_spec.h"
#include "core/plan/planner.h"

namespace fulcrum::plan {

struct HotSwitchSearchOptions {
    int max_buckets = 3;         // 2 to 4
    int layouts_per_bucket = 3;  // the best by estimate, combined over the buckets
    int played = 6;              // specs played in full, best estimate first
};

// Says which option is out of range (--hot-switch-buckets, --hot-switch-play).
Status validate(const HotSwitchSearchOptions& options);

struct HotSwitchChoice {
    parallel::HotSwitchSpec spec;
    parallel::Recompute recompute =
        parallel::Recompute::none;  // of every bucket (the static best's, or more)
    // Where a bucket's layout has TP; fulcrum-train --hot-switch does not take it.
    bool sequence_parallel = false;
    double estimated_step_ns = 0;  // buckets' pipelines and switches, summed over the steps
    // Played in full.
    double step_ns = 0;
    double tokens_per_second = 0;
    double switching_share = 0;  // of the time played
};

struct HotSwitchSearch {
    int world = 0;
    // The best static layout of the world (PlanResult::candidates index), its tokens/s as the
    // plan played it, and the settings every spec is played with (its balancer, micro-batches,
    // recomputation, documents; one model chunk a stage, no sequence parallelism, an even
    // layer split, as fulcrum-train --hot-switch runs).
    std::size_t static_candidate = 0;
    double static_tokens_per_second = 0;
    std::vector<std::int64_t> cut_points;
    std::vector<std::string> layouts;  // tried, in the spec's notation
    std::int64_t specs_estimated = 0;
    std::vector<HotSwitchChoice> played;  // best tokens/s first
    // Of the best spec, and of the best without sequence parallelism (what fulcrum-train
    // --hot-switch runs; "" when none was played): written outside core by
    // app/launch/command_line.h (write_commands); empty from search_hot_switch alone.
    std::string simulate_command;
    std::string train_command;

    bool found() const { return !played.empty(); }
    const HotSwitchChoice& best() const { return played.front(); }
    const HotSwitchChoice* best_runnable() const {
        for (const HotSwitchChoice& choice : played) {
            if (!choice.sequence_parallel) {
                return &choice;
            }
        }
        return nullptr;
    }
    double speedup() const {
        return found() && static_tokens_per_second > 0
                   ? best().tokens_per_second / static_tokens_per_second
                   : 0.0;
    }
};

struct HotSwitchSearchProgress {
    std::function<void(double)> progress;  // fraction done; may be empty
    const std::atomic<bool>* cancel = nullptr;
};

// One search per world size of the plan that ranked a layout, in the plan's order. Errors
// name --hot-switch; a world where nothing was ranked is left out.
Result<std::vector<HotSwitchSearch>> search_hot_switch(
    const PlanRequest& request, const PlanResult& result,
    const HotSwitchSearchOptions& options = {}, const HotSwitchSearchProgress& progress = {});

// The "hot_switch" member of `fulcrum plan --json` (docs/plan.md).
std::string hot_switch_search_json(const PlanResult& result,
                                   const std::vector<HotSwitchSearch>& searches);

}  // namespace fulcrum::plan
