#include "core/sim/run_play.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <utility>

#include "core/sim/sim_trace.h"
#include "core/sim/step_play.h"

namespace fulcrum::sim {

Status attend_across_documents(balance::StepPlan& plan, const SimulationConfig& config) {
    if (!config.packed_attention) {
        return {};
    }
    for (auto& replica : plan.replicas) {
        for (balance::PlannedMicroBatch& planned : replica) {
            const balance::Document whole{.id = 0, .length = planned.packed.tokens};
            balance::CpShardingState state;
            auto shards = balance::shard_microbatch(std::span(&whole, 1),
                                                    static_cast<int>(planned.cp.ranks.size()),
                                                    planned.cp.sharding, state);
            if (!shards) {
                return shards.error();
            }
            for (std::size_t c = 0; c < planned.cp.ranks.size(); ++c) {
                planned.cp.ranks[c].tokens = shards->ranks[c].tokens;
                planned.cp.ranks[c].attention_work = shards->ranks[c].attention_work;
            }
        }
    }
    return {};
}

void summarize(SimulationResult& result, const balance::TrainedTotals& trained, std::int64_t end_ns,
               int epochs) {
    double imbalance = 0;
    double bubble = 0;
    for (const SimulatedStep& step : result.steps) {
        imbalance += step.imbalance;
        bubble += step.bubble_fraction;
    }
    const auto count = static_cast<double>(result.steps.size());
    result.mean_step_ns = static_cast<double>(end_ns) / count;
    result.mean_imbalance = imbalance / count;
    result.mean_bubble_fraction = bubble / count;
    result.tokens_per_second =
        end_ns > 0 ? static_cast<double>(trained.tokens) / (static_cast<double>(end_ns) * 1e-9)
                   : 0.0;
    result.tokens = trained.tokens;
    result.documents = trained.documents;
    result.epochs = epochs;
    result.mean_delay_steps = trained.mean_delay_steps();
    result.max_delay_steps = trained.max_delay_steps;
    result.per_document_microbatches = trained.per_document_microbatches;
    result.zigzag_microbatches = trained.zigzag_microbatches;
}

namespace {

// simulate() from `start_ns` into `output` (empty: figures only).
Result<SimulationResult> play_into(const SimulationConfig& config, RunOutput& output,
                                   std::int64_t start_ns, const SimulationProgress& progress) {
    store::TraceWriter* out = output.writer;
    auto lengths = training_lengths(config);
    if (!lengths) {
        return lengths.error();
    }
    double epoch_tokens = 0;  // for progress by epochs
    for (std::int64_t length : *lengths) {
        epoch_tokens += static_cast<double>(length);
    }
    auto planner = balance::StepPlanner::create(std::move(*lengths), planner_options(config));
    if (!planner) {
        return planner.error();
    }
    const parallel::GridShape& grid = config.layout.grid;
    const StageCosts costs = config_costs(config);

    SimulationResult result;
    result.packing = planner->packing();
    result.wlb_tuning = planner->wlb_tuning();
    result.ranks = grid.world();
    result.cost_source = costs.source;
    result.notes = costs.notes;

    std::vector<std::int64_t> dp_bytes(static_cast<std::size_t>(grid.pp));
    for (int s = 0; s < grid.pp; ++s) {
        dp_bytes[static_cast<std::size_t>(s)] =
            stage_parameters(config.model, grid, s, config.layout.stage_layers,
                             config.layout.virtual_stages) *
            reduction_element_bytes(config);
    }
    const std::int64_t optimizer_ns = std::llround(std::max(costs.optimizer_ns, 0.0));
    const std::string balancer = balance::balancer_name(config.balancer);

    std::int64_t step_start = start_ns;
    balance::TrainedTotals trained;
    // The fraction done: by steps, or by tokens of all the epochs.
    const auto done = [&](double step_fraction) {
        if (config.epochs > 0) {
            return std::min(1.0, static_cast<double>(trained.tokens) /
                                     std::max(1.0, epoch_tokens * config.epochs));
        }
        return (static_cast<double>(trained.steps) + step_fraction) / config.steps;
    };
    for (int k = 0; config.epochs > 0 ? !planner->finished() : k < config.steps; ++k) {
        auto plan = planner->next();
        if (!plan) {
            return plan.error();
        }
        if (auto status = attend_across_documents(*plan, config); !status) {
            return status.error();
        }
        auto played = play_step(*plan, config, costs, dp_bytes, optimizer_ns, step_start, progress);
        if (!played) {
            return played.error();
        }
        for (int d = 0; out != nullptr && d < grid.dp; ++d) {
            if (progress.cancel != nullptr && progress.cancel->load()) {
                return Error{ErrorCode::cancelled, "the simulation was cancelled"};
            }
            for (int c = 0; c < grid.cp; ++c) {
                const std::vector<WorkloadEntry> workload = cp_rank_workload(
                    plan->replicas[static_cast<std::size_t>(d)], c, plan->step, balancer);
                for (int s = 0; s < grid.pp; ++s) {
                    write_stage(output, *plan, *played, d, c, s, workload, config, optimizer_ns,
                                result);
                }
            }
            if (progress.progress) {
                progress.progress(done(static_cast<double>(d + 1) / grid.dp));
            }
        }
        trained.add(*plan);
        if (progress.progress) {
            progress.progress(done(0));
        }
        result.steps.push_back(played->step);
        step_start = played->end_ns;
        output.first_microbatch += static_cast<int>(plan->replicas.front().size());
    }
    summarize(result, trained, step_start - start_ns, config.epochs);
    return result;
}

}  // namespace

Result<SimulationResult> play_run(const SimulationConfig& config, store::TraceWriter* out,
                                  const SimulationProgress& progress) {
    RunOutput output = open_output(out, config);
    return play_into(config, output, 0, progress);
}

Result<SimulationResult> simulate_bucket(const SimulationConfig& config, BucketOutput& out,
                                         const SimulationProgress& progress) {
    if (auto status = validate(config); !status) {
        return status.error();
    }
    RunOutput output;
    output.writer = out.writer;
    if (out.writer != nullptr) {
        output.lanes = out.lanes;
        intern_names(output);
    }
    output.bucket_step = out.step;
    output.first_microbatch = out.first_microbatch;
    auto result = play_into(config, output, out.start_ns, progress);
    out.first_microbatch = output.first_microbatch;
    return result;
}

}  // namespace fulcrum::sim
