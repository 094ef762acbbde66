#include "core/analysis/bubbles.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "core/parallel/replay.h"

namespace fulcrum::analysis {

namespace {

struct PipelineKey {
    std::int32_t step;
    int dp, cp, tp;
    friend auto operator<=>(const PipelineKey&, const PipelineKey&) = default;
};

std::int64_t busy_of(const Pass& pass) {
    return std::max<std::int64_t>(0, pass.wall_ns() - pass.pipeline_wait_ns);
}

// Busy time by pass kind, for the theory of a schedule whose bubble depends on the pass times
// (ZB-H1's): the mean F, B and W pass.
struct PassSums {
    std::int64_t forward_ns = 0, backward_ns = 0, weight_ns = 0;
    std::int64_t forwards = 0, backwards = 0, weights = 0;

    void add(const Pass& pass, std::int64_t busy) {
        switch (pass.phase) {
            case Phase::forward:
                forward_ns += busy, ++forwards;
                break;
            case Phase::weight_grad:
                weight_ns += busy, ++weights;
                break;
            default:
                backward_ns += busy, ++backwards;
                break;
        }
    }
    void merge(const PassSums& other) {
        forward_ns += other.forward_ns, backward_ns += other.backward_ns,
            weight_ns += other.weight_ns;
        forwards += other.forwards, backwards += other.backwards, weights += other.weights;
    }
    // The schedule's default (all alike) when a kind has no pass.
    parallel::PassTimes times() const {
        if (forwards == 0 || backwards == 0 || weights == 0) {
            return {};
        }
        return {double(forward_ns) / double(forwards), double(backward_ns) / double(backwards),
                double(weight_ns) / double(weights)};
    }
};

using StagePasses = std::vector<std::vector<const Pass*>>;  // [stage] → its passes

// The schedule a run's bubbles are replayed with: the run's, 1F1B when it does not say.
struct ReplayedSchedule {
    parallel::PipelineSchedule schedule = parallel::PipelineSchedule::one_f_one_b;
    int virtual_stages = 1;
    bool split_backward = false;
};

ReplayedSchedule replayed_schedule(const RunConfig& config) {
    ReplayedSchedule replayed;
    replayed.schedule = config.layout.schedule;  // 1F1B when the run does not say
    if (replayed.schedule == parallel::PipelineSchedule::interleaved) {
        replayed.virtual_stages = std::max(1, config.layout.virtual_stages);
    }
    replayed.split_backward = parallel::splits_backward(replayed.schedule);
    return replayed;
}

// Passes of each pipeline and step, by stage.
std::map<PipelineKey, StagePasses> passes_by_pipeline(const RunTrace& trace,
                                                      const std::vector<Pass>& passes) {
    const int p = trace.config.layout.grid.pp;
    std::map<PipelineKey, StagePasses> pipelines;
    for (const Pass& pass : passes) {
        const RankTrace* rank = trace.find_rank(pass.rank);
        if (rank == nullptr || pass.step < 0) {
            continue;
        }
        const RankInfo& info = rank->info;
        const int stage = info.pp >= 0 ? info.pp : std::max<int>(pass.stage, 0);
        if (stage >= p) {
            continue;
        }
        auto& stages = pipelines[{pass.step, std::max(info.dp, 0), std::max(info.cp, 0),
                                  std::max(info.tp, 0)}];
        stages.resize(static_cast<std::size_t>(p));
        stages[static_cast<std::size_t>(stage)].push_back(&pass);
    }
    return pipelines;
}

// One pipeline's measured passes as the replay wants them, with each stage's busy time and
// waits.
struct MeasuredPipeline {
    parallel::ReplayInput input;
    std::vector<std::int64_t> busy, wait_previous, wait_next;  // [stage]
    PassSums sums;
};

MeasuredPipeline measure_pipeline(const StagePasses& stages, const ReplayedSchedule& replayed,
                                  int m) {
    const int p = static_cast<int>(stages.size());
    MeasuredPipeline measured;
    parallel::ReplayInput& input = measured.input;
    input.schedule = replayed.schedule;
    input.stages = p;
    input.microbatches = m;
    input.virtual_stages = replayed.virtual_stages;
    input.forward_ns.assign(p, std::vector<std::int64_t>(m, 0));
    input.backward_ns.assign(p, std::vector<std::int64_t>(m, 0));
    if (replayed.split_backward) {
        input.weight_ns.assign(p, std::vector<std::int64_t>(m, 0));
    }
    measured.busy.assign(p, 0);
    measured.wait_previous.assign(p, 0);
    measured.wait_next.assign(p, 0);
    for (int s = 0; s < p; ++s) {
        for (const Pass* pass : stages[s]) {
            const bool forward = pass->phase == Phase::forward;
            // Each micro-batch's passes through the stage's v chunks add up to the stage's
            // share, as the replay wants them; a W pass is its own share under ZB-H1 and part
            // of the backward under a schedule that does not split it.
            const bool weight = pass->phase == Phase::weight_grad && replayed.split_backward;
            auto& durations = forward  ? input.forward_ns
                              : weight ? input.weight_ns
                                       : input.backward_ns;
            if (pass->microbatch >= 0) {
                durations[s][pass->microbatch] += busy_of(*pass);
            }
            measured.sums.add(*pass, busy_of(*pass));
            measured.busy[s] += busy_of(*pass);
            (forward ? measured.wait_previous : measured.wait_next)[s] += pass->pipeline_wait_ns;
        }
    }
    return measured;
}

// The same passes with every micro-batch of a stage taking that stage's mean, in integer means
// that keep the stage's total: the first (sum mod m) get one more.
parallel::ReplayInput uniform_microbatches(parallel::ReplayInput input) {
    const int m = input.microbatches;
    for (auto* kind : {&input.forward_ns, &input.backward_ns, &input.weight_ns}) {
        for (std::vector<std::int64_t>& durations : *kind) {
            std::int64_t sum = 0;
            for (std::int64_t d : durations) {
                sum += d;
            }
            for (int j = 0; j < m; ++j) {
                durations[j] = sum / m + (j < sum % m ? 1 : 0);
            }
        }
    }
    return input;
}

// The two replays that split a pipeline's bubble; `split` false when the schedule cannot replay
// the pipeline's shape (micro-batches missing from a truncated run): the bubble is then all
// "other".
struct BubbleSplit {
    bool split = false;
    parallel::ReplayResult measured, uniform;
    std::int64_t unequal_ns = 0;  // makespan(measured) − makespan(uniform)
};

BubbleSplit split_bubble(const parallel::ReplayInput& measured) {
    auto replay_measured = parallel::replay_pipeline(measured);
    auto replay_uniform = parallel::replay_pipeline(uniform_microbatches(measured));
    BubbleSplit result;
    if (!replay_measured.ok() || !replay_uniform.ok()) {
        return result;
    }
    result.split = true;
    result.measured = *replay_measured;
    result.uniform = *replay_uniform;
    result.unequal_ns =
        std::max<std::int64_t>(0, result.measured.makespan_ns - result.uniform.makespan_ns);
    return result;
}

StageBubble stage_row(const PipelineKey& key, int s, const StagePasses& stages, std::int64_t window,
                      const MeasuredPipeline& measured, const BubbleSplit& split) {
    StageBubble row;
    row.step = key.step;
    row.stage = s;
    row.dp = key.dp;
    row.cp = key.cp;
    row.tp = key.tp;
    if (!stages[s].empty()) {
        row.rank = stages[s].front()->rank;
    }
    row.window_ns = window;
    row.busy_ns = measured.busy[s];
    row.bubble_ns = std::max<std::int64_t>(0, window - row.busy_ns);
    row.bubble_fraction = parallel::bubble_fraction(double(row.bubble_ns), double(row.busy_ns));
    std::int64_t schedule_part =
        split.split ? std::max<std::int64_t>(0, split.uniform.bubble_ns(s)) : 0;
    std::int64_t unequal_part = split.unequal_ns;
    if (schedule_part + unequal_part > row.bubble_ns) {
        // Noise: the parts exceed the measured bubble; scale them down to fit it.
        const double scale =
            row.bubble_ns > 0 ? double(row.bubble_ns) / double(schedule_part + unequal_part) : 0.0;
        schedule_part = std::int64_t(double(schedule_part) * scale);
        unequal_part = row.bubble_ns - schedule_part;
    }
    row.warmup_cooldown_ns = schedule_part;
    row.unequal_microbatch_ns = unequal_part;
    row.other_ns = row.bubble_ns - schedule_part - unequal_part;
    row.wait_on_previous_ns = measured.wait_previous[s];
    row.wait_on_next_ns = measured.wait_next[s];
    return row;
}

}  // namespace

BubbleAnalysis analyze_bubbles(const RunTrace& trace, const PassTable& passes) {
    BubbleAnalysis result;
    // A hot-switched step's buckets run pipelines of different shapes on the same ranks, which
    // the ranks' one set of coordinates does not describe (run_analysis.cpp notes it).
    if (!trace.config.grid_known || trace.config.layout.grid.pp <= 1 ||
        !trace.config.hot_switch.empty()) {
        return result;
    }
    const int p = trace.config.layout.grid.pp;
    const ReplayedSchedule replayed = replayed_schedule(trace.config);
    result.schedule = parallel::schedule_name(replayed.schedule);
    result.schedule_assumed = !trace.config.says("schedule");
    PassSums run_sums;  // ZB-H1's theory depends on the pass times: the run's mean F, B and W
    double fraction_sum = 0;
    int measured_pipelines = 0;
    int microbatches_seen = 0;
    // Pipelines come by (step, dp, cp, tp): a window of steps at a time, in order.
    passes.for_each_step_window([&](const std::vector<Pass>& steps) {
        for (const auto& [key, stages] : passes_by_pipeline(trace, steps)) {
            std::int64_t window_start = INT64_MAX, window_end = INT64_MIN;
            int m = 0;
            for (const auto& list : stages) {
                for (const Pass* pass : list) {
                    window_start = std::min(window_start, pass->start_ns);
                    window_end = std::max(window_end, pass->end_ns);
                    m = std::max(m, pass->microbatch + 1);
                }
            }
            if (m == 0 || window_end <= window_start) {
                continue;
            }
            const std::int64_t window = window_end - window_start;
            const MeasuredPipeline measured = measure_pipeline(stages, replayed, m);
            run_sums.merge(measured.sums);
            // The replay needs every stage: one without passes would play as taking no time.
            const bool whole = std::all_of(stages.begin(), stages.end(),
                                           [](const auto& list) { return !list.empty(); });
            const BubbleSplit split = whole ? split_bubble(measured.input) : BubbleSplit{};

            PipelineBubble pipeline;
            pipeline.step = key.step;
            pipeline.dp = key.dp;
            pipeline.cp = key.cp;
            pipeline.tp = key.tp;
            pipeline.stages = p;
            pipeline.microbatches = m;
            pipeline.window_ns = window;
            pipeline.theory_fraction = parallel::theory_bubble_fraction(
                replayed.schedule, {p, m, replayed.virtual_stages}, measured.sums.times());
            std::int64_t bubble_sum = 0, busy_sum = 0, replay_bubble_sum = 0;
            for (int s = 0; s < p; ++s) {
                const StageBubble row = stage_row(key, s, stages, window, measured, split);
                // A stage without a pass (a rank's file not given, a recording cut) measured
                // nothing: its row says so, and it counts in no sum.
                if (row.rank) {
                    bubble_sum += row.bubble_ns;
                    busy_sum += row.busy_ns;
                    replay_bubble_sum += split.split ? split.measured.bubble_ns(s) : 0;
                }
                result.stages.push_back(row);
            }
            pipeline.measured_fraction =
                parallel::bubble_fraction(double(bubble_sum), double(busy_sum));
            if (pipeline.measured_fraction) {
                fraction_sum += *pipeline.measured_fraction;
                ++measured_pipelines;
                if (split.split) {
                    pipeline.replay_fraction =
                        parallel::bubble_fraction(double(replay_bubble_sum), double(busy_sum));
                }
            }
            microbatches_seen = std::max(microbatches_seen, m);
            result.pipelines.push_back(pipeline);
        }
    });
    const int m =
        trace.config.layout.microbatches > 0 ? trace.config.layout.microbatches : microbatches_seen;
    if (m > 0) {
        result.theory_fraction = parallel::theory_bubble_fraction(
            replayed.schedule, {p, m, replayed.virtual_stages}, run_sums.times());
    }
    if (measured_pipelines > 0) {
        result.mean_measured_fraction = fraction_sum / double(measured_pipelines);
    }
    return result;
}

const char* theory_formula(const BubbleAnalysis& bubbles) {
    if (bubbles.schedule == parallel::schedule_name(parallel::PipelineSchedule::interleaved)) {
        return "(p−1)/(v·m)";
    }
    if (bubbles.schedule == parallel::schedule_name(parallel::PipelineSchedule::zero_bubble_h1)) {
        return "(p−1)(F+B−W)/(m(F+B+W))";
    }
    return "(p−1)/m";
}

std::optional<double> StageBubbleTotal::fraction() const {
    if (busy_ns <= 0)
        return std::nullopt;
    return double(bubble_ns) / double(busy_ns);
}

std::map<int, StageBubbleTotal> bubble_by_stage(const BubbleAnalysis& bubbles) {
    std::map<int, StageBubbleTotal> by_stage;
    for (const StageBubble& row : bubbles.stages) {
        if (!row.rank) {
            continue;  // measured nothing
        }
        StageBubbleTotal& total = by_stage[row.stage];
        ++total.rows;
        total.busy_ns += row.busy_ns;
        total.bubble_ns += row.bubble_ns;
        total.warmup_cooldown_ns += row.warmup_cooldown_ns;
        total.unequal_microbatch_ns += row.unequal_microbatch_ns;
        total.other_ns += row.other_ns;
        total.wait_on_previous_ns += row.wait_on_previous_ns;
        total.wait_on_next_ns += row.wait_on_next_ns;
    }
    return by_stage;
}

}  // namespace fulcrum::analysis
