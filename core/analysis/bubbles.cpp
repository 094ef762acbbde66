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

}  // namespace

BubbleAnalysis analyze_bubbles(const RunTrace& trace, const std::vector<Pass>& passes) {
    BubbleAnalysis result;
    if (!trace.config.grid_known || trace.config.pp <= 1) {
        return result;
    }
    const int p = trace.config.pp;
    auto schedule = parallel::parse_schedule(trace.config.schedule.empty() ? "1f1b" : trace.config.schedule);
    const parallel::PipelineSchedule replayed =
        schedule ? *schedule : parallel::PipelineSchedule::one_f_one_b;
    result.schedule = parallel::schedule_name(replayed);

    // Passes of each pipeline and step, by stage.
    std::map<PipelineKey, std::vector<std::vector<const Pass*>>> pipelines;
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

    double fraction_sum = 0;
    int measured_pipelines = 0;
    int microbatches_seen = 0;
    for (const auto& [key, stages] : pipelines) {
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

        parallel::ReplayInput measured;
        measured.schedule = replayed;
        measured.stages = p;
        measured.microbatches = m;
        measured.forward_ns.assign(p, std::vector<std::int64_t>(m, 0));
        measured.backward_ns.assign(p, std::vector<std::int64_t>(m, 0));
        std::vector<std::int64_t> busy(p, 0), wait_previous(p, 0), wait_next(p, 0);
        for (int s = 0; s < p; ++s) {
            for (const Pass* pass : stages[s]) {
                const bool forward = pass->phase == Phase::forward;
                if (pass->microbatch >= 0) {
                    (forward ? measured.forward_ns : measured.backward_ns)[s][pass->microbatch] +=
                        busy_of(*pass);
                }
                busy[s] += busy_of(*pass);
                (forward ? wait_previous : wait_next)[s] += pass->pipeline_wait_ns;
            }
        }
        parallel::ReplayInput uniform = measured;
        for (int s = 0; s < p; ++s) {
            for (auto* durations : {&uniform.forward_ns[s], &uniform.backward_ns[s]}) {
                std::int64_t sum = 0;
                for (std::int64_t d : *durations) {
                    sum += d;
                }
                // Integer means that keep the stage's total: the first (sum mod m) get one more.
                for (int j = 0; j < m; ++j) {
                    (*durations)[j] = sum / m + (j < sum % m ? 1 : 0);
                }
            }
        }
        // A shape the schedule cannot replay (micro-batches missing from a truncated run)
        // leaves the bubble unsplit: all of it "other".
        auto replayed_measured = parallel::replay_pipeline(measured);
        auto replayed_uniform = parallel::replay_pipeline(uniform);
        const bool split = replayed_measured.ok() && replayed_uniform.ok();
        const parallel::ReplayResult replay_measured = split ? *replayed_measured : parallel::ReplayResult{};
        const parallel::ReplayResult replay_uniform = split ? *replayed_uniform : parallel::ReplayResult{};
        const std::int64_t unequal =
            split ? std::max<std::int64_t>(0, replay_measured.makespan_ns - replay_uniform.makespan_ns) : 0;

        PipelineBubble pipeline;
        pipeline.step = key.step;
        pipeline.dp = key.dp;
        pipeline.cp = key.cp;
        pipeline.tp = key.tp;
        pipeline.stages = p;
        pipeline.microbatches = m;
        pipeline.window_ns = window;
        pipeline.theory_fraction = double(p - 1) / double(m);
        std::int64_t bubble_sum = 0, busy_sum = 0, replay_bubble_sum = 0;
        for (int s = 0; s < p; ++s) {
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
            row.busy_ns = busy[s];
            row.bubble_ns = std::max<std::int64_t>(0, window - busy[s]);
            if (busy[s] > 0) {
                row.bubble_fraction = double(row.bubble_ns) / double(busy[s]);
            }
            std::int64_t schedule_part = split ? std::max<std::int64_t>(0, replay_uniform.bubble_ns(s)) : 0;
            std::int64_t unequal_part = unequal;
            if (schedule_part + unequal_part > row.bubble_ns) {
                const double scale = row.bubble_ns > 0
                                         ? double(row.bubble_ns) / double(schedule_part + unequal_part)
                                         : 0.0;
                schedule_part = std::int64_t(double(schedule_part) * scale);
                unequal_part = row.bubble_ns - schedule_part;
            }
            row.warmup_cooldown_ns = schedule_part;
            row.unequal_microbatch_ns = unequal_part;
            row.other_ns = row.bubble_ns - schedule_part - unequal_part;
            row.wait_on_previous_ns = wait_previous[s];
            row.wait_on_next_ns = wait_next[s];
            bubble_sum += row.bubble_ns;
            busy_sum += row.busy_ns;
            replay_bubble_sum += split ? replay_measured.bubble_ns(s) : 0;
            result.stages.push_back(row);
        }
        if (busy_sum > 0) {
            pipeline.measured_fraction = double(bubble_sum) / double(busy_sum);
            fraction_sum += *pipeline.measured_fraction;
            ++measured_pipelines;
            if (split) {
                pipeline.replay_fraction = double(replay_bubble_sum) / double(busy_sum);
            }
        }
        microbatches_seen = std::max(microbatches_seen, m);
        result.pipelines.push_back(pipeline);
    }
    const int m = trace.config.microbatches > 0 ? trace.config.microbatches : microbatches_seen;
    if (m > 0) {
        result.theory_fraction = double(p - 1) / double(m);
    }
    if (measured_pipelines > 0) {
        result.mean_measured_fraction = fraction_sum / double(measured_pipelines);
    }
    return result;
}

std::optional<double> StageBubbleTotal::fraction() const {
    if (busy_ns <= 0) return std::nullopt;
    return double(bubble_ns) / double(busy_ns);
}

std::map<int, StageBubbleTotal> bubble_by_stage(const BubbleAnalysis& bubbles) {
    std::map<int, StageBubbleTotal> by_stage;
    for (const StageBubble& row : bubbles.stages) {
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
