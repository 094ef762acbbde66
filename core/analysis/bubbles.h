// Pipeline bubbles: how much of each step a stage sat idle waiting for its neighbours, against
// what the schedule costs in theory, and why.
//
// For one step of one pipeline (the ranks that share dp, cp and tp, one per stage):
//   window       = [first pass start, last pass end] over all its stages
//   busy(s)      = Σ over stage s's passes of (wall − pipeline receive time)
//   bubble(s)    = |window| − busy(s)
//   fraction(s)  = bubble(s) / busy(s)     the convention of the theory's (p−1)/m
//                                          (Megatron-LM, Narayanan et al. 2021, §2.2.1)
// The theory is the schedule's (core/parallel/schedule.h theory_bubble_fraction): (p−1)/m for
// GPipe and 1F1B, (p−1)/(v·m) for interleaved 1F1B with v virtual stages, and for ZB-H1
// (p−1)(F + B − W)/(m(F + B + W)) with the run's mean forward, input-gradient and
// weight-gradient pass times. A stage's busy time counts its passes through all its model
// chunks, W passes included.
// The bubble is split by replaying the schedule (core/parallel/replay.h) without any
// communication cost:
//   warm-up/cool-down = bubble of a replay where every micro-batch of a stage takes that
//                       stage's mean: what the schedule costs with equal micro-batches
//   unequal micro-batches = makespan(replay of the measured busy times) − makespan(that)
//                       : a stage waiting on a neighbour that is slower on some micro-batch
//   other             = the rest: transfer time, launch gaps, noise.
// When the parts exceed the measured bubble (noise), they are scaled down to fit it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/analysis/pass_table.h"
#include "core/analysis/run_trace.h"

namespace fulcrum::analysis {

struct StageBubble {
    std::optional<std::int32_t> rank;  // absent when the stage has no pass in the window
    std::int32_t step = 0;
    int stage = 0;
    int dp = 0, cp = 0, tp = 0;
    std::int64_t window_ns = 0;
    std::int64_t busy_ns = 0;
    std::int64_t bubble_ns = 0;
    std::optional<double> bubble_fraction;  // absent when the stage was never busy
    std::int64_t warmup_cooldown_ns = 0;
    std::int64_t unequal_microbatch_ns = 0;
    std::int64_t other_ns = 0;
    std::int64_t wait_on_previous_ns = 0;  // receiving activations from stage − 1
    std::int64_t wait_on_next_ns = 0;      // receiving gradients from stage + 1
};

struct PipelineBubble {
    std::int32_t step = 0;
    int dp = 0, cp = 0, tp = 0;
    int stages = 0;
    int microbatches = 0;
    std::int64_t window_ns = 0;
    double theory_fraction = 0;  // the schedule's, for this pipeline's p, m, v (and F, B, W)
    // Σ bubble / Σ busy over the stages; absent when no stage was busy.
    std::optional<double> measured_fraction;
    // The same in the replay of the measured busy times; absent as above, or when the
    // schedule cannot replay the pipeline's shape (its bubble is then all "other").
    std::optional<double> replay_fraction;
};

// Empty, with no figure, when the run has no pipeline: its grid is unknown (an imported
// trace without coordinates) or pp = 1; or when it is hot-switched (RunConfig::hot_switch: a
// pipeline per bucket layout, not one the ranks' coordinates describe). A bubble is a stage waiting
// for its neighbours; with no neighbours, the gaps between passes are something else.
struct BubbleAnalysis {
    std::string schedule;  // the schedule replayed ("1f1b" when the run does not say); ""
                           // when there is no pipeline
    // The run does not say its schedule (an imported trace whose schedule could not be told,
    // docs/import.md): `schedule` is 1F1B by assumption, and so is the theory.
    bool schedule_assumed = false;
    std::vector<StageBubble> stages;        // by (step, dp, cp, tp, stage)
    std::vector<PipelineBubble> pipelines;  // by (step, dp, cp, tp)
    // The schedule's theory for the run; absent without a pipeline or without micro-batches.
    std::optional<double> theory_fraction;
    // Mean over the pipelines and steps that have a measured fraction; absent when none has.
    std::optional<double> mean_measured_fraction;
};

BubbleAnalysis analyze_bubbles(const RunTrace& trace, const PassTable& passes);

// The theory's formula for the schedule replayed ("(p−1)/m", "(p−1)/(v·m)", ...), for labels.
const char* theory_formula(const BubbleAnalysis& bubbles);

// Each stage's bubble summed over steps and pipelines: what `fulcrum analyze`, the report and
// the GUI show per stage, from this one place.
struct StageBubbleTotal {
    std::int64_t rows = 0;  // (step, pipeline) rows added
    std::int64_t busy_ns = 0, bubble_ns = 0, warmup_cooldown_ns = 0, unequal_microbatch_ns = 0,
                 other_ns = 0, wait_on_previous_ns = 0, wait_on_next_ns = 0;
    double mean(std::int64_t sum) const { return rows > 0 ? double(sum) / double(rows) : 0.0; }
    // Σ bubble / Σ busy; absent without busy time.
    std::optional<double> fraction() const;
};
std::map<int, StageBubbleTotal> bubble_by_stage(const BubbleAnalysis& bubbles);

}  // namespace fulcrum::analysis
