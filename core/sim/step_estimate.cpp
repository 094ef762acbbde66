#include "core/sim/step_estimate.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/sim/pass_pricing.h"

namespace fulcrum::sim {
namespace {

// When a stage's gradients are reduced after its pipeline ends at `pipeline_ns`
// (grad_reduction.h, for alike micro-batches): at once, or with overlap layer by layer during
// the last backward pass (`last_backward_ns`), then what no layer holds.
double estimate_reduction_end(const SimulationConfig& config, const StageCosts& costs, int stage,
                              double pipeline_ns, double last_backward_ns) {
    const parallel::GridShape& grid = config.layout.grid;
    const std::int64_t element = reduction_element_bytes(config);
    const std::int64_t bytes =
        stage_parameters(config.model, grid, stage, config.layout.stage_layers,
                         config.layout.virtual_stages) *
        element;
    if (grid.dp * grid.cp <= 1) {
        return pipeline_ns;
    }
    // Under ZeRO-2 and -3 the backward passes reduce-scattered the layers' gradients.
    if (const StepEndReduction rest = step_end_reduction(config, stage, bytes); rest.per_pass) {
        return pipeline_ns +
               static_cast<double>(predict_moved_ns(costs.dp_all_reduce, rest.reduced_bytes) +
                                   predict_moved_ns(costs.zero_all_gather, rest.gathered_bytes));
    }
    if (!config.overlap_grad_reduce) {
        return pipeline_ns + static_cast<double>(predict_collective_ns(costs.dp_all_reduce, bytes));
    }
    const std::int64_t bucket = layer_reduction_bytes(config);
    const std::int64_t layers = layers_of(stage, config);
    const auto bucket_ns = static_cast<double>(predict_collective_ns(costs.dp_all_reduce, bucket));
    double end = std::max(pipeline_ns + bucket_ns,
                          pipeline_ns - last_backward_ns + static_cast<double>(layers) * bucket_ns);
    if (bytes > layers * bucket) {
        end += static_cast<double>(
            predict_collective_ns(costs.dp_all_reduce, bytes - layers * bucket));
    }
    return end;
}

}  // namespace

StepEstimate estimate_step(const SimulationConfig& config, const StageCosts& costs,
                           std::int64_t tokens, std::int64_t pairs) {
    const parallel::GridShape& grid = config.layout.grid;
    balance::PlannedMicroBatch mean;
    mean.packed.tokens = tokens;
    mean.cp.ranks.resize(static_cast<std::size_t>(grid.cp));
    for (int c = 0; c < grid.cp; ++c) {
        balance::CpShard& shard = mean.cp.ranks[static_cast<std::size_t>(c)];
        shard.tokens = tokens / grid.cp + (c < tokens % grid.cp ? 1 : 0);
        shard.attention_work = 2 * pairs / grid.cp;
    }
    std::vector<RankPass> ranks(static_cast<std::size_t>(grid.cp));
    const double v = std::max(config.layout.virtual_stages, 1);
    const double m = std::max(config.layout.microbatches, 1);
    const bool split = parallel::splits_backward(config.layout.schedule);
    StepEstimate estimate;
    estimate.stage_ns.resize(static_cast<std::size_t>(grid.pp));
    estimate.phase_ns.resize(static_cast<std::size_t>(grid.pp));
    std::vector<double> busy(static_cast<std::size_t>(grid.pp));
    std::vector<double> last_backward(static_cast<std::size_t>(grid.pp));
    double slowest = 0, ramp_sum = 0, slowest_ramp = 0;
    double core_ns = 0;  // what every rank computes, at a whole core
    for (int stage = 0; stage < grid.pp; ++stage) {
        std::array<double, kPassPhases> ns{};
        for (Phase phase : phases_of(config)) {
            const GroupPass group = play_group(mean, stage, phase, config, costs, ranks.data());
            ns[static_cast<std::size_t>(phase)] = static_cast<double>(group.duration_ns);
            for (const RankPass& rank : ranks) {
                core_ns +=
                    m * grid.dp * grid.tp * static_cast<double>(rank.own_total() - rank.tp_total());
            }
        }
        const double per_microbatch = ns[0] + ns[1] + ns[2];
        // What the stage adds to the pipeline's warm-up and cool-down: a chunk's F + B (a
        // ZB-H1 stage fills its bubble with W: F + B − W; Qi et al., "Zero Bubble Pipeline
        // Parallelism", 2024, §3).
        const double ramp = (split ? ns[0] + ns[1] - ns[2] : per_microbatch) / v;
        estimate.stage_ns[static_cast<std::size_t>(stage)] = per_microbatch;
        estimate.phase_ns[static_cast<std::size_t>(stage)] = ns;
        busy[static_cast<std::size_t>(stage)] = m * per_microbatch;
        last_backward[static_cast<std::size_t>(stage)] = ns[1] + ns[2];
        ramp_sum += ramp;
        if (per_microbatch > slowest) {
            slowest = per_microbatch;
            slowest_ramp = ramp;
        }
    }
    estimate.pipeline_ns = m * slowest + (ramp_sum - slowest_ramp) +
                           2.0 * (grid.pp - 1) * static_cast<double>(p2p_latency_ns(config, costs));
    // Where the step starts by gathering the parameters (parameter_arrivals), the first
    // stage's first forward waits for those not there yet, and the pipeline behind it (the
    // later stages' arrive before their first forward does).
    // A chunk's pass in whole ns, as the replay takes it.
    if (const auto arrivals = parameter_arrivals(config, costs, 0); !arrivals.empty()) {
        const auto forward =
            static_cast<std::int64_t>(estimate.phase_ns.front()[0]) / static_cast<std::int64_t>(v);
        estimate.pipeline_ns +=
            static_cast<double>(arrivals.front().pass_end(0, forward) - forward);
    }
    // On shared cores the passes take at least their work over the cores.
    if (const CoreSharing sharing = core_sharing(config); sharing.shared()) {
        estimate.pipeline_ns = std::max(estimate.pipeline_ns, core_ns / sharing.cores);
    }
    double busy_sum = 0;
    std::vector<std::int64_t> reduce_end(static_cast<std::size_t>(grid.pp));
    for (int stage = 0; stage < grid.pp; ++stage) {
        busy_sum += busy[static_cast<std::size_t>(stage)];
        reduce_end[static_cast<std::size_t>(stage)] =
            std::llround(estimate_reduction_end(config, costs, stage, estimate.pipeline_ns,
                                                last_backward[static_cast<std::size_t>(stage)]));
    }
    estimate.bubble_fraction =
        parallel::bubble_fraction(estimate.pipeline_ns * grid.pp - busy_sum, busy_sum)
            .value_or(0.0);
    const UpdateStart update =
        update_start(reduce_end, costs,
                     embedding_gradient_bytes(config.model, grid, gradient_element_bytes(config)));
    estimate.step_ns = static_cast<double>(update.start) + std::max(costs.optimizer_ns, 0.0);
    return estimate;
}

}  // namespace fulcrum::sim
