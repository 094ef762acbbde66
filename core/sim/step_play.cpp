#include "core/sim/step_play.h"

#include <algorithm>
#include <utility>

namespace fulcrum::sim {
namespace {

// A replica's passes and the replay input they make; with shared cores, each pass's work per
// CP rank too (replay.h, replay_on_shared_cores).
ReplicaPlay prepare_replica(const std::vector<balance::PlannedMicroBatch>& replica,
                            const SimulationConfig& config, const StageCosts& costs,
                            bool shared_cores, parallel::ReplayInput& input) {
    const parallel::GridShape& grid = config.layout.grid;
    const bool split = parallel::splits_backward(config.layout.schedule);
    const int m = static_cast<int>(replica.size());
    ReplicaPlay play;
    play.microbatches = m;
    if (m == 0) {
        return play;
    }
    play.groups.resize(static_cast<std::size_t>(grid.pp) * static_cast<std::size_t>(m) *
                       kPassPhases);
    play.ranks.resize(play.groups.size() * static_cast<std::size_t>(grid.cp));

    input.schedule = config.layout.schedule;
    input.stages = grid.pp;
    input.microbatches = m;
    input.virtual_stages = std::max(config.layout.virtual_stages, 1);
    input.as_engine_runs = true;
    input.forward_ns.assign(static_cast<std::size_t>(grid.pp),
                            std::vector<std::int64_t>(static_cast<std::size_t>(m)));
    input.backward_ns = input.forward_ns;
    if (split) {
        input.weight_ns = input.forward_ns;
    }
    input.p2p_latency_ns = p2p_latency_ns(config, costs);
    if (gathers_parameters_at_step_start(config) && !shared_cores) {
        for (int stage = 0; stage < grid.pp; ++stage) {
            input.parameters.push_back(parameter_arrivals(config, costs, stage));
        }
    }
    if (shared_cores) {
        input.forward_work.assign(
            static_cast<std::size_t>(grid.pp),
            std::vector<std::vector<std::int64_t>>(
                static_cast<std::size_t>(m),
                std::vector<std::int64_t>(static_cast<std::size_t>(grid.cp))));
        input.backward_work = input.forward_work;
        if (split) {
            input.weight_work = input.forward_work;
        }
        input.work_copies = grid.tp;
    }
    const std::vector<Phase> phases = phases_of(config);
    for (int stage = 0; stage < grid.pp; ++stage) {
        for (int j = 0; j < m; ++j) {
            for (Phase phase : phases) {
                const std::size_t index = group_index(stage, j, m, phase);
                RankPass* ranks = &play.ranks[index * static_cast<std::size_t>(grid.cp)];
                play.groups[index] = play_group(replica[static_cast<std::size_t>(j)], stage, phase,
                                                config, costs, ranks);
                const bool forward = phase == Phase::forward;
                const bool backward = phase == Phase::backward;
                auto& table = forward    ? input.forward_ns
                              : backward ? input.backward_ns
                                         : input.weight_ns;
                const auto s = static_cast<std::size_t>(stage);
                const auto mb = static_cast<std::size_t>(j);
                table[s][mb] = play.groups[index].duration_ns;
                if (shared_cores) {
                    // A member's compute shares the cores; its TP collectives, like the CP
                    // exchange and the sends, keep their fitted time (docs/simulate.md, "Ranks
                    // that share cores").
                    auto& work = forward    ? input.forward_work
                                 : backward ? input.backward_work
                                            : input.weight_work;
                    for (int c = 0; c < grid.cp; ++c) {
                        work[s][mb][static_cast<std::size_t>(c)] =
                            ranks[c].own_total() - ranks[c].tp_total();
                    }
                }
            }
        }
    }
    return play;
}

// A replica that runs no pass: the last global batch of an epoch with fewer documents than
// replicas (as fulcrum-train's, it only joins the DP reduction).
void play_nothing(ReplicaPlay& play, int stages) {
    play.replay.stages.resize(static_cast<std::size_t>(stages));
    play.replay.stage_end_ns.assign(static_cast<std::size_t>(stages), 0);
}

// Under ZeRO-2 and -3 the DP replicas meet in a collective inside each pass: the gradients'
// reduce-scatter at each backward's end, ZeRO-3's parameter gathers in each forward and
// backward. A replica that gets there first waits for the slowest (the wait in `dp_wait_ns`,
// inside the collective). Without a pipeline (pp = 1) a replica's passes follow each other
// in its schedule's order, so each such pass ends on every replica when the latest replica's
// own would: exact. With a pipeline, where the passes' starts depend on the neighbours too,
// each such pass lasts as long as the slowest replica's, and the replays keep their own
// starts; so on cores the ranks share. Replicas that run different numbers of micro-batches
// are left alone.
void meet_in_pass_collectives(std::vector<ReplicaPlay>& plays,
                              std::vector<parallel::ReplayInput>& inputs,
                              const SimulationConfig& config) {
    const parallel::GridShape& grid = config.layout.grid;
    std::vector<Phase> phases;
    if (gathers_parameters_per_pass(config)) {
        phases = {Phase::forward, Phase::backward};
    } else if (scatters_gradients_per_pass(config)) {
        phases = {Phase::backward};
    }
    if (phases.empty() || plays.size() < 2) {
        return;
    }
    const int m = plays.front().microbatches;
    for (const ReplicaPlay& play : plays) {
        if (play.microbatches != m || m == 0) {
            return;
        }
    }
    const auto wait = [&](std::size_t d, int stage, int j, Phase phase, std::int64_t waited) {
        GroupPass& group = plays[d].groups[group_index(stage, j, m, phase)];
        group.dp_wait_ns = waited;
        group.duration_ns += waited;
        auto& table = phase == Phase::forward ? inputs[d].forward_ns : inputs[d].backward_ns;
        table[static_cast<std::size_t>(stage)][static_cast<std::size_t>(j)] = group.duration_ns;
    };
    if (grid.pp == 1 && !core_sharing(config).shared()) {
        auto order = parallel::replay_pipeline(inputs.front());  // the passes' order
        if (!order) {
            return;
        }
        std::vector<std::int64_t> clock(plays.size(), 0);
        for (const parallel::ReplayedOp& op : order->stages.front()) {
            const std::size_t index = group_index(0, op.microbatch, m, op.kind);
            const bool meets = std::find(phases.begin(), phases.end(), op.kind) != phases.end();
            std::int64_t end = 0;
            for (std::size_t d = 0; d < plays.size(); ++d) {
                clock[d] += plays[d].groups[index].duration_ns;
                end = std::max(end, clock[d]);
            }
            for (std::size_t d = 0; meets && d < plays.size(); ++d) {
                wait(d, 0, op.microbatch, op.kind, end - clock[d]);
                clock[d] = end;
            }
        }
        return;
    }
    for (int stage = 0; stage < grid.pp; ++stage) {
        for (int j = 0; j < m; ++j) {
            for (const Phase phase : phases) {
                const std::size_t index = group_index(stage, j, m, phase);
                std::int64_t slowest = 0;
                for (const ReplicaPlay& play : plays) {
                    slowest = std::max(slowest, play.groups[index].duration_ns);
                }
                for (std::size_t d = 0; d < plays.size(); ++d) {
                    wait(d, stage, j, phase, slowest - plays[d].groups[index].duration_ns);
                }
            }
        }
    }
}

// Every replica of the step, each replayed alone, or all together on shared cores.
Result<std::vector<ReplicaPlay>> play_replicas(const balance::StepPlan& plan,
                                               const SimulationConfig& config,
                                               const StageCosts& costs,
                                               const SimulationProgress& progress) {
    const CoreSharing sharing = core_sharing(config);
    std::vector<ReplicaPlay> plays;
    std::vector<parallel::ReplayInput> inputs;
    for (const auto& replica : plan.replicas) {
        if (progress.cancel != nullptr && progress.cancel->load()) {
            return Error{ErrorCode::cancelled, "the simulation was cancelled"};
        }
        inputs.emplace_back();
        plays.push_back(prepare_replica(replica, config, costs, sharing.shared(), inputs.back()));
    }
    meet_in_pass_collectives(plays, inputs, config);
    std::vector<parallel::ReplayInput> shared;
    std::vector<std::size_t> replayed;  // the plays `shared` are for
    for (std::size_t d = 0; d < plays.size(); ++d) {
        if (plan.replicas[d].empty()) {
            play_nothing(plays[d], config.layout.grid.pp);
        } else if (sharing.shared()) {
            shared.push_back(std::move(inputs[d]));
            replayed.push_back(d);
        } else {
            auto replay = parallel::replay_pipeline(inputs[d]);
            if (!replay) {
                return replay.error();
            }
            plays[d].replay = std::move(*replay);
        }
    }
    if (!shared.empty()) {
        auto replays = parallel::replay_on_shared_cores(shared, sharing.cores);
        if (!replays) {
            return replays.error();
        }
        for (std::size_t i = 0; i < replayed.size(); ++i) {
            plays[replayed[i]].replay = std::move((*replays)[i]);
        }
    }
    return plays;
}

}  // namespace

Result<PlayedStep> play_step(const balance::StepPlan& plan, const SimulationConfig& config,
                             const StageCosts& costs, const std::vector<std::int64_t>& dp_bytes,
                             std::int64_t optimizer_ns, std::int64_t step_start,
                             const SimulationProgress& progress) {
    const parallel::GridShape& grid = config.layout.grid;
    PlayedStep played;
    SimulatedStep& step = played.step;
    step.step = plan.step;
    step.epoch = plan.epoch;
    step.start_ns = step_start;
    step.imbalance = plan.imbalance;
    auto plays = play_replicas(plan, config, costs, progress);
    if (!plays) {
        return plays.error();
    }
    played.plays = std::move(*plays);
    double fraction_sum = 0;
    int pipelines = 0;  // replicas that ran a pass
    for (std::size_t d = 0; d < plan.replicas.size(); ++d) {
        const auto& replica = plan.replicas[d];
        fraction_sum += played.plays[d].replay.bubble_fraction().value_or(0.0);
        pipelines += replica.empty() ? 0 : 1;
        for (const auto& planned : replica) {
            step.tokens += planned.packed.tokens;
        }
        step.microbatches += static_cast<int>(replica.size());
    }
    // One definition with the analysis (parallel::bubble_fraction); the mean over the step's
    // pipelines.
    step.bubble_fraction = pipelines == 0 ? 0.0 : fraction_sum / static_cast<double>(pipelines);

    // Each stage all-reduces over its DP × CP group when its slowest replica is done.
    const bool reduces = grid.dp * grid.cp > 1 && !config.accumulate_gradients;
    const std::int64_t update_ns = config.accumulate_gradients ? 0 : optimizer_ns;
    played.reduce_end.resize(static_cast<std::size_t>(grid.pp));
    played.reduce_bytes.resize(static_cast<std::size_t>(grid.pp));
    played.end_ns = step_start;
    std::vector<const parallel::ReplayResult*> replays;
    for (const auto& play : played.plays) {
        replays.push_back(&play.replay);
    }
    for (int s = 0; s < grid.pp; ++s) {
        GradientReductionInput reduction = gradient_reduction(config, s, step_start);
        reduction.stage_bytes = dp_bytes[static_cast<std::size_t>(s)];
        reduction.sm_share = nccl_sm_share(config.hardware, costs.dp_all_reduce);
        if (!reduces) {
            reduction.overlap = false;
            reduction.stage_bytes = 0;
        }
        // Under ZeRO-2 and -3 the backward passes reduce-scattered the layers' gradients:
        // what is left is the rest (embeddings, the final LayerNorm), and under ZeRO-2 the
        // updated layers' gather.
        const StepEndReduction rest = step_end_reduction(config, s, reduction.stage_bytes);
        if (rest.per_pass) {
            reduction.overlap = false;
            reduction.stage_bytes = rest.reduced_bytes;
        }
        const GradientReductionEnd reduced =
            reduces ? gradient_reduction_end(reduction, replays, costs.dp_all_reduce)
                    : gradient_reduction_end(reduction, replays, {});
        const std::int64_t end =
            reduced.end_ns + predict_moved_ns(costs.zero_all_gather, rest.gathered_bytes);
        played.reduce_end[static_cast<std::size_t>(s)] = end;
        played.reduce_bytes[static_cast<std::size_t>(s)] = reduced.exposed_bytes;
        played.end_ns = std::max(played.end_ns, end);
    }
    // An accumulating step neither sums the embedding nor updates (accumulate_gradients).
    if (!config.accumulate_gradients) {
        played.update = update_start(
            played.reduce_end, costs,
            embedding_gradient_bytes(config.model, grid, gradient_element_bytes(config)));
        played.end_ns = std::max(played.end_ns, played.update.start + update_ns);
    }
    step.duration_ns = played.end_ns - step_start;
    return played;
}

}  // namespace fulcrum::sim
