#include "core/sim/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <utility>
#include <variant>

#include "core/balance/lengths.h"
#include "core/balance/step_planner.h"
#include "core/parallel/replay.h"
#include "core/plan/memory_model.h"
#include "core/sim/grad_reduction.h"
#include "core/sim/hot_switch_play.h"
#include "core/store/trace_writer.h"
#include "core/trace/run_config.h"
#include "core/util/output_file.h"

namespace fulcrum::sim {
namespace {

using analysis::CollectiveCost;
using analysis::PassCost;

std::string cost_source(const SimulationConfig& config) {
    if (!config.cost_model) {
        return describe(config.hardware);
    }
    return config.cost_model->source.empty() ? "given" : config.cost_model->source;
}

// One pass (one micro-batch, one phase) of one replica's stage, for the whole CP group:
// what the pipeline replay sees. For a stage of v model chunks, the whole stage's share of
// the model (the replay gives each chunk's pass 1/v of it).
struct GroupPass {
    std::int64_t duration_ns = 0;  // slowest member's compute + CP exchange + sends
    std::int64_t exchange_ns = 0;  // the CP collective's transfer, every layer together
    std::int64_t exchange_bytes = 0;
    std::int64_t send_ns = 0;  // one send of one chunk's boundary activation
    // Full recomputation's second K/V all-gather in the backward pass, every layer together.
    std::int64_t regather_ns = 0;
    std::int64_t regather_bytes = 0;
    // With Megatron-LM's scatter/gather sends, the receiver's all-gather of the activation
    // over TP, one receive.
    std::int64_t gather_ns = 0;
};

// TP collectives by kind: all-reduce, all-gather, reduce-scatter (layer_costs.h).
using TpByKind = std::array<std::int64_t, 3>;

// The same pass as one CP rank spends it.
struct RankPass {
    std::int64_t attention_ns = 0;  // its attention blocks: per_pair · pairs + a third of the rest
    std::int64_t mlp_ns = 0;        // its other compute: the rest of fixed + per_token · tokens
    std::int64_t recompute_ns = 0;  // recomputation before it (not in the two above)
    TpByKind tp_ns{};               // its TP collectives, every layer, by kind
    TpByKind tp_calls{};            // how many, every layer
    TpByKind recompute_tp_ns{};     // those recomputation re-runs
    TpByKind recompute_tp_calls{};
    std::int64_t wait_ns = 0;  // for the CP group's slowest rank
    std::int64_t tokens = 0;

    std::int64_t tp_total() const {
        return tp_ns[0] + tp_ns[1] + tp_ns[2] + recompute_tp_ns[0] + recompute_tp_ns[1] +
               recompute_tp_ns[2];
    }
    std::int64_t own_total() const { return attention_ns + mlp_ns + recompute_ns + tp_total(); }
};

struct ReplicaPlay {
    int microbatches = 0;
    std::vector<GroupPass> groups;  // [(stage · m + j) · kPassPhases + phase]
    std::vector<RankPass> ranks;    // [group index · cp + cp rank]
    parallel::ReplayResult replay;  // times from 0, the step's start
};

std::size_t group_index(int stage, int microbatch, int microbatches, PassPhase phase) {
    return (static_cast<std::size_t>(stage) * static_cast<std::size_t>(microbatches) +
            static_cast<std::size_t>(microbatch)) *
               kPassPhases +
           static_cast<std::size_t>(phase);
}

PassPhase pass_phase(parallel::PassKind kind) {
    switch (kind) {
        case parallel::PassKind::forward:
            return PassPhase::forward;
        case parallel::PassKind::backward:
            return PassPhase::backward;
        case parallel::PassKind::weight:
            return PassPhase::weight;
    }
    return PassPhase::forward;
}

int layers_of(int stage, const SimulationConfig& config) {
    return parallel::stage_layer_total(stage, config.grid.pp, config.virtual_stages,
                                       config.model.layers, config.stage_layers);
}

// Bytes of one pipeline send of a rank holding `tokens`: the [T, h] boundary activation, its
// rows' share under sequence parallelism or with Megatron-LM's scatter/gather.
std::int64_t p2p_bytes(const SimulationConfig& config, std::int64_t tokens) {
    const bool split = config.sequence_parallel || config.pipeline_scatter_gather;
    return tokens * config.model.hidden * element_bytes(config.dtype) /
           (split ? config.grid.tp : 1);
}

// Sends of a stage's passes in one phase over its v chunks: a forward sends unless its model
// chunk is the last, a backward unless it is the first; W sends nothing.
int sends_of(int stage, PassPhase phase, const SimulationConfig& config) {
    const int p = config.grid.pp, v = std::max(config.virtual_stages, 1);
    if (phase == PassPhase::weight || p == 1) {
        return 0;
    }
    const bool forward = phase == PassPhase::forward;
    return v - ((forward ? stage == p - 1 : stage == 0) ? 1 : 0);
}

// Receives of a stage's passes in one phase: a forward receives unless its model chunk is the
// first, a backward unless it is the last; W receives nothing.
int receives_of(int stage, PassPhase phase, const SimulationConfig& config) {
    const int p = config.grid.pp, v = std::max(config.virtual_stages, 1);
    if (phase == PassPhase::weight || p == 1) {
        return 0;
    }
    const bool forward = phase == PassPhase::forward;
    return v - ((forward ? stage == 0 : stage == p - 1) ? 1 : 0);
}

// Whether a receiver all-gathers what it received over TP: Megatron-LM's scatter/gather of
// pipeline sends, when the next stage needs the whole activation (not under sequence
// parallelism, whose layers start from a rank's rows).
bool gathers_received(const SimulationConfig& config) {
    return config.pipeline_scatter_gather && !config.sequence_parallel && config.grid.tp > 1;
}

// The attention block's share of a layer's linear work: QKV (6h²) and the output projection
// (2h²) of 24h² FLOPs per token (the MLP's two 4h GEMMs are the other 16h²).
constexpr std::pair<std::int64_t, std::int64_t> kAttentionBlockLinearShare = {8, 24};

// One CP rank's compute and TP collectives of one pass (docs/simulate.md, "One pass").
RankPass rank_pass(const analysis::PassCost& cost, const analysis::PassCost& recompute,
                   const StageCosts& costs, const SimulationConfig& config, PassPhase phase,
                   std::int64_t layers, std::int64_t tokens, std::int64_t pairs) {
    RankPass rank;
    rank.tokens = tokens;
    const std::int64_t own = predict_pass_ns(cost, tokens, pairs);
    const bool recomputing = recomputes(phase, config.recompute);
    rank.recompute_ns = recomputing ? std::min(own, predict_pass_ns(recompute, tokens, pairs)) : 0;
    const double per_pair = cost.per_pair_ns - (recomputing ? recompute.per_pair_ns : 0.0);
    const std::int64_t rest = own - rank.recompute_ns;
    // The `attention` range is the engine's: a layer's whole attention block (docs/analyses.md,
    // "Attention time"), so besides the core (per_pair · pairs) it holds the block's GEMMs, QKV
    // and the output projection: 8h² of a layer's 24h² linear FLOPs per token.
    const std::int64_t core = std::clamp<std::int64_t>(
        std::llround(std::max(per_pair * static_cast<double>(pairs), 0.0)), 0, rest);
    rank.attention_ns =
        core + (rest - core) * kAttentionBlockLinearShare.first / kAttentionBlockLinearShare.second;
    rank.mlp_ns = rest - rank.attention_ns;
    if (config.grid.tp > 1) {
        const bool sp = config.sequence_parallel;
        const std::int64_t bytes = tokens * config.model.hidden * element_bytes(config.dtype);
        const std::array<const CollectiveCost*, 3> kind_costs = {
            &costs.tp_all_reduce, &costs.tp_all_gather, &costs.tp_reduce_scatter};
        const auto fill = [&](const TpCollectives& per_layer, TpByKind& ns, TpByKind& calls) {
            const std::array<int, 3> counts = {per_layer.all_reduce, per_layer.all_gather,
                                               per_layer.reduce_scatter};
            for (std::size_t k = 0; k < 3; ++k) {
                calls[k] = counts[k] * layers;
                ns[k] = calls[k] * predict_collective_ns(*kind_costs[k], bytes);
            }
        };
        fill(tp_collectives_per_layer(phase, parallel::splits_backward(config.schedule), sp),
             rank.tp_ns, rank.tp_calls);
        if (recomputing) {
            fill(tp_recompute_collectives_per_layer(config.recompute, sp), rank.recompute_tp_ns,
                 rank.recompute_tp_calls);
        }
    }
    return rank;
}

// One pass of one micro-batch on one stage for the whole CP group (docs/simulate.md, "One
// pass"); fills the group's cp RankPasses.
GroupPass play_group(const balance::PlannedMicroBatch& planned, int stage, PassPhase phase,
                     const SimulationConfig& config, const StageCosts& costs, RankPass* ranks) {
    const parallel::GridShape& grid = config.grid;
    const std::int64_t hidden = config.model.hidden;
    const std::int64_t element = element_bytes(config.dtype);
    const std::int64_t layers = layers_of(stage, config);
    const auto& stage_passes = costs.passes[static_cast<std::size_t>(stage)];
    const PassCost& recompute = costs.recompute[static_cast<std::size_t>(stage)];
    const bool forward = phase == PassPhase::forward;
    const CollectiveCost& p2p = forward ? costs.recv_activations : costs.recv_gradients;
    GroupPass group;
    std::int64_t slowest = 0;
    std::int64_t largest_send = 0;
    std::int64_t largest_gather = 0;
    for (int c = 0; c < grid.cp; ++c) {
        const balance::CpShard& shard = planned.cp.ranks[static_cast<std::size_t>(c)];
        // attention_work is Σ causal_pair_work, twice the pairs; always even.
        ranks[c] = rank_pass(stage_passes[static_cast<std::size_t>(phase)], recompute, costs,
                             config, phase, layers, shard.tokens, shard.attention_work / 2);
        slowest = std::max(slowest, ranks[c].own_total());
        const double send =
            std::max(p2p.per_byte_ns, 0.0) * static_cast<double>(p2p_bytes(config, shard.tokens));
        largest_send = std::max<std::int64_t>(largest_send, std::llround(send));
        if (gathers_received(config)) {
            largest_gather = std::max(
                largest_gather,
                predict_collective_ns(costs.tp_all_gather, shard.tokens * hidden * element));
        }
    }
    for (int c = 0; c < grid.cp; ++c) {
        ranks[c].wait_ns = slowest - ranks[c].own_total();
    }
    if (grid.cp > 1 && phase != PassPhase::weight) {
        // K and V of every token of the micro-batch, this rank's heads (h/tp); full
        // recomputation gathers them again in the backward pass.
        const std::int64_t bytes_per_layer =
            planned.packed.tokens * 2 * (hidden / grid.tp) * element;
        group.exchange_bytes = bytes_per_layer * layers;
        group.exchange_ns =
            layers * predict_collective_ns(forward ? costs.cp_all_gather : costs.cp_reduce_scatter,
                                           bytes_per_layer);
        if (phase == PassPhase::backward && config.recompute == plan::Recompute::full) {
            group.regather_bytes = bytes_per_layer * layers;
            group.regather_ns =
                layers * predict_collective_ns(costs.cp_all_gather, bytes_per_layer);
        }
    }
    group.send_ns = largest_send;
    group.gather_ns = largest_gather;
    group.duration_ns = slowest + group.exchange_ns + group.regather_ns +
                        sends_of(stage, phase, config) * group.send_ns +
                        receives_of(stage, phase, config) * group.gather_ns;
    return group;
}

std::vector<PassPhase> phases_of(const SimulationConfig& config) {
    std::vector<PassPhase> phases = {PassPhase::forward, PassPhase::backward};
    if (parallel::splits_backward(config.schedule)) {
        phases.push_back(PassPhase::weight);
    }
    return phases;
}

// One latency for both pipeline directions (replay_pipeline takes one): their mean.
std::int64_t p2p_latency_ns(const SimulationConfig& config, const StageCosts& costs) {
    return config.grid.pp > 1 ? std::llround((std::max(costs.recv_activations.latency_ns, 0.0) +
                                              std::max(costs.recv_gradients.latency_ns, 0.0)) /
                                             2)
                              : 0;
}

// A replica's passes and the replay input they make; with shared cores, each pass's work per
// CP rank too (replay.h, replay_on_shared_cores).
ReplicaPlay prepare_replica(const std::vector<balance::PlannedMicroBatch>& replica,
                            const SimulationConfig& config, const StageCosts& costs,
                            bool shared_cores, parallel::ReplayInput& input) {
    const parallel::GridShape& grid = config.grid;
    const bool split = parallel::splits_backward(config.schedule);
    const int m = static_cast<int>(replica.size());
    ReplicaPlay play;
    play.microbatches = m;
    if (m == 0) {
        return play;
    }
    play.groups.resize(static_cast<std::size_t>(grid.pp) * static_cast<std::size_t>(m) *
                       kPassPhases);
    play.ranks.resize(play.groups.size() * static_cast<std::size_t>(grid.cp));

    input.schedule = config.schedule;
    input.stages = grid.pp;
    input.microbatches = m;
    input.virtual_stages = std::max(config.virtual_stages, 1);
    input.as_engine_runs = true;
    input.forward_ns.assign(static_cast<std::size_t>(grid.pp),
                            std::vector<std::int64_t>(static_cast<std::size_t>(m)));
    input.backward_ns = input.forward_ns;
    if (split) {
        input.weight_ns = input.forward_ns;
    }
    input.p2p_latency_ns = p2p_latency_ns(config, costs);
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
    const std::vector<PassPhase> phases = phases_of(config);
    for (int stage = 0; stage < grid.pp; ++stage) {
        for (int j = 0; j < m; ++j) {
            for (PassPhase phase : phases) {
                const std::size_t index = group_index(stage, j, m, phase);
                RankPass* ranks = &play.ranks[index * static_cast<std::size_t>(grid.cp)];
                play.groups[index] = play_group(replica[static_cast<std::size_t>(j)], stage, phase,
                                                config, costs, ranks);
                const bool forward = phase == PassPhase::forward;
                const bool backward = phase == PassPhase::backward;
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

// Every replica of the step, each replayed alone, or all together on shared cores.
Result<std::vector<ReplicaPlay>> play_replicas(const balance::StepPlan& plan,
                                               const SimulationConfig& config,
                                               const StageCosts& costs,
                                               const SimulationProgress& progress) {
    const CoreSharing sharing = core_sharing(config);
    std::vector<ReplicaPlay> plays;
    std::vector<parallel::ReplayInput> inputs;
    std::vector<std::size_t> replayed;  // the plays `inputs` are for
    for (const auto& replica : plan.replicas) {
        if (progress.cancel != nullptr && progress.cancel->load()) {
            return Error{ErrorCode::cancelled, "the simulation was cancelled"};
        }
        parallel::ReplayInput input;
        plays.push_back(prepare_replica(replica, config, costs, sharing.shared(), input));
        if (replica.empty()) {
            play_nothing(plays.back(), config.grid.pp);
        } else if (sharing.shared()) {
            inputs.push_back(std::move(input));
            replayed.push_back(plays.size() - 1);
        } else {
            auto replay = parallel::replay_pipeline(input);
            if (!replay) {
                return replay.error();
            }
            plays.back().replay = std::move(*replay);
        }
    }
    if (!inputs.empty()) {
        auto replays = parallel::replay_on_shared_cores(inputs, sharing.cores);
        if (!replays) {
            return replays.error();
        }
        for (std::size_t i = 0; i < replayed.size(); ++i) {
            plays[replayed[i]].replay = std::move((*replays)[i]);
        }
    }
    return plays;
}

struct EventNames {
    StringId step, forward, backward, weight_gradients, recompute, attention, mlp;
    StringId tp_all_gather, tp_reduce_scatter;
    StringId recv_activations, send_activations, recv_gradients, send_gradients;
    StringId cp_all_gather, cp_reduce_scatter, tp_all_reduce, dp_all_reduce, optimizer;
    StringId embedding_all_reduce;
};

// Writes one CP rank's events of one replica's stage for one step; TP peers get copies.
class RankEvents {
public:
    RankEvents(const EventNames& names, store::TraceWriter& writer)
        : names_(names), writer_(writer) {}

    std::vector<Event> events;

    void range(StringId name, Category category, std::int64_t start, std::int64_t end,
               std::int32_t step, std::int32_t microbatch, std::int16_t stage, Phase phase,
               std::int64_t bytes = -1, StringId args = {}) {
        // A range of no length (a receive whose data had already arrived, a free collective)
        // is left out: at the edge of its parent, the store's order (start, then longest
        // first) could not tell which range it belongs to. Steps and passes always last.
        if (end == start && name != names_.step && name != names_.forward &&
            name != names_.backward && name != names_.weight_gradients) {
            return;
        }
        events.push_back(simulated_range(name, category, start, end, step, microbatch, stage, phase,
                                         bytes, args));
    }

    // `{"calls":"N"}`: how many engine ranges one simulated range stands for.
    StringId calls(std::int64_t count) {
        auto found = calls_.find(count);
        if (found == calls_.end()) {
            found =
                calls_
                    .emplace(count, writer_.intern("{\"calls\":\"" + std::to_string(count) + "\"}"))
                    .first;
        }
        return found->second;
    }

    // `{"chunk":c}`: the model chunk a pass runs (its virtual stage; 0 without interleaving),
    // as the engine's `chunk=` key stores it (core/trace/annotations.h).
    StringId chunk(int chunk) {
        auto found = chunks_.find(chunk);
        if (found == chunks_.end()) {
            found =
                chunks_.emplace(chunk, writer_.intern("{\"chunk\":" + std::to_string(chunk) + "}"))
                    .first;
        }
        return found->second;
    }

    const EventNames& names() const { return names_; }

private:
    const EventNames& names_;
    store::TraceWriter& writer_;
    std::map<std::int64_t, StringId> calls_;
    std::map<int, StringId> chunks_;
};

// Writes the ranges of one chunk's pass: its share (1/v) of the stage's times, the calls of
// the chunk's layers.
struct ChunkRanges {
    RankEvents& out;
    std::int32_t step, microbatch;
    std::int16_t stage;
    Phase phase;
    int v;
    std::int64_t chunk_layers, stage_layers;
    std::int64_t tp_call_bytes;
    std::array<StringId, 3> tp_names;

    std::int64_t share(std::int64_t ns) const { return ns / v; }
    std::int64_t calls(std::int64_t all) const { return all * chunk_layers / stage_layers; }
    void range(StringId name, Category category, std::int64_t begin, std::int64_t end,
               std::int64_t bytes = -1, StringId args = {}) {
        out.range(name, category, begin, end, step, microbatch, stage, phase, bytes, args);
    }
    // Half 0 or 1 of the TP collectives `ns`, `all_calls` by kind, back to back from t.
    std::int64_t tp_half_ns(const TpByKind& ns, int half) const {
        std::int64_t total = 0;
        for (std::size_t k = 0; k < 3; ++k) {
            total += half == 0 ? share(ns[k]) / 2 : share(ns[k]) - share(ns[k]) / 2;
        }
        return total;
    }
    std::int64_t tp_ranges(std::int64_t t, const TpByKind& ns, const TpByKind& all_calls,
                           int half) {
        for (std::size_t k = 0; k < 3; ++k) {
            const std::int64_t chunk_calls = calls(all_calls[k]);
            const std::int64_t count = half == 0 ? chunk_calls / 2 : chunk_calls - chunk_calls / 2;
            const std::int64_t first_ns = share(ns[k]) / 2;
            const std::int64_t length = half == 0 ? first_ns : share(ns[k]) - first_ns;
            if (count > 0) {
                range(tp_names[k], Category::communication, t, t + length, count * tp_call_bytes,
                      out.calls(count));
            }
            t += length;
        }
        return t;
    }
    // The recomputation a backward or W pass starts with, from t; its end.
    std::int64_t recompute(std::int64_t t, const RankPass& rank, const GroupPass& group,
                           bool backward) {
        const TpByKind& ns = rank.recompute_tp_ns;
        if (rank.recompute_ns + ns[0] + ns[1] + ns[2] == 0) {
            return t;
        }
        const std::int64_t regather = backward ? share(group.regather_ns) : 0;
        const std::int64_t compute_end = t + share(rank.recompute_ns);
        const std::int64_t end = compute_end + tp_half_ns(ns, 0) + tp_half_ns(ns, 1) + regather;
        range(out.names().recompute, Category::compute, t, end);
        std::int64_t u = tp_ranges(compute_end, ns, rank.recompute_tp_calls, 0);
        u = tp_ranges(u, ns, rank.recompute_tp_calls, 1);
        if (regather > 0) {
            range(out.names().cp_all_gather, Category::communication, u, u + regather,
                  calls(group.regather_bytes), out.calls(chunk_layers));
        }
        return end;
    }
};

// The ranges of one pass on one CP rank, nested as the engine nests them
// (engine/distributed/parallel_trainer.cpp, engine/model/gpt.cpp):
//   forward:  [recv activations] attention{cp all-gather kv, tp ...} mlp{tp ...}
//             [send activations]
//   backward: [recv gradients] [recompute{tp ..., cp all-gather kv}] mlp{tp ...}
//             attention{tp ..., cp reduce-scatter dkv} [send gradients]
//   weight gradients (W of a split backward): [recompute{...}] mlp{tp all-gather}
// where "tp ..." is a tp all-reduce, or under sequence parallelism a tp all-gather and a tp
// reduce-scatter; a pass's TP collectives are split evenly between its attention and mlp.
// One range stands for every layer of the chunk; the collectives in them carry the bytes of
// all their calls and args {"calls": N}; passes carry {"chunk": c}. The wait for the CP
// group's slowest rank is inside the CP collective, as a blocking collective would show it.
// Under interleaving a chunk's pass takes 1/v of the stage's times.
void add_pass_events(RankEvents& out, const parallel::ReplayedOp& op, std::int64_t offset,
                     const GroupPass& group, const RankPass& rank, const SimulationConfig& config,
                     int step, int stage) {
    const EventNames& n = out.names();
    const parallel::GridShape& grid = config.grid;
    const int v = std::max(config.virtual_stages, 1);
    const PassPhase kind = pass_phase(op.kind);
    const bool forward = kind == PassPhase::forward;
    const Phase phase = forward                       ? Phase::forward
                        : kind == PassPhase::backward ? Phase::backward
                                                      : Phase::weight_grad;
    const int model_chunk = op.chunk * grid.pp + stage;
    const parallel::LayerRange chunk_range = parallel::model_chunk_layers(
        model_chunk, grid.pp * v, config.model.layers, config.stage_layers);
    ChunkRanges r{out,
                  step,
                  op.microbatch,
                  static_cast<std::int16_t>(stage),
                  phase,
                  v,
                  chunk_range.last - chunk_range.first,
                  std::max(layers_of(stage, config), 1),
                  rank.tokens * config.model.hidden * element_bytes(config.dtype),
                  {n.tp_all_reduce, n.tp_all_gather, n.tp_reduce_scatter}};
    const std::int64_t start = offset + op.start_ns;
    const std::int64_t end = offset + op.end_ns;
    const bool receives =
        forward ? model_chunk > 0 : kind == PassPhase::backward && model_chunk < grid.pp * v - 1;
    const bool sends =
        forward ? model_chunk < grid.pp * v - 1 : kind == PassPhase::backward && model_chunk > 0;
    const std::int64_t begin = receives ? start - op.wait_ns : start;
    const std::int64_t exchange = grid.cp > 1 ? r.share(rank.wait_ns + group.exchange_ns) : 0;

    r.range(forward                       ? n.forward
            : kind == PassPhase::backward ? n.backward
                                          : n.weight_gradients,
            Category::compute, begin, end, -1, out.chunk(op.chunk));
    if (receives) {
        r.range(forward ? n.recv_activations : n.recv_gradients, Category::communication, begin,
                start, p2p_bytes(config, rank.tokens));
    }
    std::int64_t t = start;
    if (receives && group.gather_ns > 0) {
        // The scatter/gather send's other half: the whole activation from the TP ranks' parts.
        r.range(n.tp_all_gather, Category::communication, t, t + group.gather_ns, r.tp_call_bytes,
                out.calls(1));
        t += group.gather_ns;
    }
    if (!forward) {
        t = r.recompute(t, rank, group, kind == PassPhase::backward);
    }
    if (forward) {
        const std::int64_t compute_end = t + exchange + r.share(rank.attention_ns);
        const std::int64_t attention_end = compute_end + r.tp_half_ns(rank.tp_ns, 0);
        r.range(n.attention, Category::attention, t, attention_end);
        if (grid.cp > 1) {
            r.range(n.cp_all_gather, Category::communication, t, t + exchange,
                    r.calls(group.exchange_bytes), out.calls(r.chunk_layers));
        }
        r.tp_ranges(compute_end, rank.tp_ns, rank.tp_calls, 0);
        const std::int64_t mlp_compute_end = attention_end + r.share(rank.mlp_ns);
        const std::int64_t mlp_end = mlp_compute_end + r.tp_half_ns(rank.tp_ns, 1);
        r.range(n.mlp, Category::compute, attention_end, mlp_end);
        r.tp_ranges(mlp_compute_end, rank.tp_ns, rank.tp_calls, 1);
        t = mlp_end;
    } else if (kind == PassPhase::backward) {
        const std::int64_t mlp_compute_end = t + r.share(rank.mlp_ns);
        const std::int64_t mlp_end = mlp_compute_end + r.tp_half_ns(rank.tp_ns, 0);
        r.range(n.mlp, Category::compute, t, mlp_end);
        r.tp_ranges(mlp_compute_end, rank.tp_ns, rank.tp_calls, 0);
        const std::int64_t compute_end = mlp_end + r.share(rank.attention_ns);
        const std::int64_t tp_end = compute_end + r.tp_half_ns(rank.tp_ns, 1);
        const std::int64_t attention_end = tp_end + exchange;
        r.range(n.attention, Category::attention, mlp_end, attention_end);
        r.tp_ranges(compute_end, rank.tp_ns, rank.tp_calls, 1);
        if (grid.cp > 1) {
            r.range(n.cp_reduce_scatter, Category::communication, tp_end, attention_end,
                    r.calls(group.exchange_bytes), out.calls(r.chunk_layers));
        }
        t = attention_end;
    } else {
        // W: the weight gradients of every GEMM (the attention core has none); a faster CP
        // rank, which nothing synchronises here, is done early.
        const std::int64_t compute_end = t + r.share(rank.mlp_ns + rank.attention_ns);
        const std::int64_t mlp_end =
            compute_end + r.tp_half_ns(rank.tp_ns, 0) + r.tp_half_ns(rank.tp_ns, 1);
        r.range(n.mlp, Category::compute, t, mlp_end);
        r.tp_ranges(r.tp_ranges(compute_end, rank.tp_ns, rank.tp_calls, 0), rank.tp_ns,
                    rank.tp_calls, 1);
        t = mlp_end;
    }
    if (sends) {
        r.range(forward ? n.send_activations : n.send_gradients, Category::communication, t,
                std::max(t, end), p2p_bytes(config, rank.tokens));
    }
}

// The reduction of `stage`'s gradients (grad_reduction.h): one layer's gradients,
// (12h² + 13h)/tp elements, as a bucket.
GradientReductionInput gradient_reduction(const SimulationConfig& config, int stage,
                                          std::int64_t step_start) {
    const std::int64_t h = config.model.hidden;
    GradientReductionInput input;
    input.stage = stage;
    input.stages = config.grid.pp;
    input.virtual_stages = std::max(config.virtual_stages, 1);
    input.layers = config.model.layers;
    input.stage_layers = config.stage_layers;
    input.overlap = config.overlap_grad_reduce;
    input.writes_weights = parallel::splits_backward(config.schedule)
                               ? parallel::PassKind::weight
                               : parallel::PassKind::backward;
    input.layer_bytes = (12 * h * h + 13 * h) / config.grid.tp * element_bytes(config.dtype);
    input.step_start_ns = step_start;
    return input;
}

}  // namespace

namespace {

// When a stage's gradients are reduced after its pipeline ends at `pipeline_ns`
// (grad_reduction.h, for alike micro-batches): at once, or with overlap layer by layer during
// the last backward pass (`last_backward_ns`), then what no layer holds.
double estimate_reduction_end(const SimulationConfig& config, const StageCosts& costs, int stage,
                              double pipeline_ns, double last_backward_ns) {
    const parallel::GridShape& grid = config.grid;
    const std::int64_t element = element_bytes(config.dtype);
    const std::int64_t bytes =
        stage_parameters(config.model, grid, stage, config.stage_layers, config.virtual_stages) *
        element;
    if (grid.dp * grid.cp <= 1) {
        return pipeline_ns;
    }
    if (!config.overlap_grad_reduce) {
        return pipeline_ns + static_cast<double>(predict_collective_ns(costs.dp_all_reduce, bytes));
    }
    const std::int64_t h = config.model.hidden;
    const std::int64_t bucket = (12 * h * h + 13 * h) / grid.tp * element;
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
    const parallel::GridShape& grid = config.grid;
    balance::PlannedMicroBatch mean;
    mean.packed.tokens = tokens;
    mean.cp.ranks.resize(static_cast<std::size_t>(grid.cp));
    for (int c = 0; c < grid.cp; ++c) {
        balance::CpShard& shard = mean.cp.ranks[static_cast<std::size_t>(c)];
        shard.tokens = tokens / grid.cp + (c < tokens % grid.cp ? 1 : 0);
        shard.attention_work = 2 * pairs / grid.cp;
    }
    std::vector<RankPass> ranks(static_cast<std::size_t>(grid.cp));
    const double v = std::max(config.virtual_stages, 1);
    const double m = std::max(config.microbatches, 1);
    const bool split = parallel::splits_backward(config.schedule);
    StepEstimate estimate;
    estimate.stage_ns.resize(static_cast<std::size_t>(grid.pp));
    std::vector<double> busy(static_cast<std::size_t>(grid.pp));
    std::vector<double> last_backward(static_cast<std::size_t>(grid.pp));
    double slowest = 0, ramp_sum = 0, slowest_ramp = 0;
    double core_ns = 0;  // what every rank computes, at a whole core
    for (int stage = 0; stage < grid.pp; ++stage) {
        std::array<double, kPassPhases> ns{};
        for (PassPhase phase : phases_of(config)) {
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
        busy_sum > 0 ? (estimate.pipeline_ns * grid.pp - busy_sum) / busy_sum : 0.0;
    const UpdateStart update =
        update_start(reduce_end, costs,
                     embedding_gradient_bytes(config.model, grid, element_bytes(config.dtype)));
    estimate.step_ns = static_cast<double>(update.start) + std::max(costs.optimizer_ns, 0.0);
    return estimate;
}

namespace {

// Where a simulation writes: every rank of the grid with its lane, the names interned once,
// and the event buffer of one CP rank's stage. Empty (no writer) when only figures are asked.
// A hot-switched step's bucket (hot_switch_play.h) goes into the run's step `step` as its
// passes only: no step range, no (empty) DP reduction, micro-batches numbered on from the
// step's earlier buckets', workload rows alike.
struct RunOutput {
    store::TraceWriter* writer = nullptr;
    std::vector<LaneId> lanes;  // by rank
    EventNames names;
    std::unique_ptr<RankEvents> events;
    std::optional<std::int32_t> bucket_step;
    int first_microbatch = 0;
};

void intern_names(RunOutput& output);

RunOutput open_output(store::TraceWriter* out, const parallel::GridShape& grid) {
    RunOutput output;
    output.writer = out;
    if (out == nullptr) {
        return output;
    }
    output.lanes = add_simulated_ranks(*out, grid);
    intern_names(output);
    return output;
}

void intern_names(RunOutput& output) {
    store::TraceWriter* out = output.writer;
    EventNames& names = output.names;
    names.step = out->intern(range_name::kStep);
    names.forward = out->intern(range_name::kForward);
    names.backward = out->intern(range_name::kBackward);
    names.weight_gradients = out->intern(range_name::kWeightGradients);
    names.recompute = out->intern(range_name::kRecompute);
    names.tp_all_gather = out->intern(kTpAllGather);
    names.tp_reduce_scatter = out->intern(kTpReduceScatter);
    names.attention = out->intern(range_name::kAttention);
    names.mlp = out->intern(range_name::kMlp);
    names.recv_activations = out->intern(kRecvActivations);
    names.send_activations = out->intern(range_name::kSendActivations);
    names.recv_gradients = out->intern(kRecvGradients);
    names.send_gradients = out->intern(range_name::kSendGradients);
    names.cp_all_gather = out->intern(kCpAllGather);
    names.cp_reduce_scatter = out->intern(kCpReduceScatter);
    names.tp_all_reduce = out->intern(kTpAllReduce);
    names.dp_all_reduce = out->intern(kDpAllReduce);
    names.optimizer = out->intern(range_name::kOptimizer);
    names.embedding_all_reduce = out->intern(kEmbeddingAllReduce);
    output.events = std::make_unique<RankEvents>(output.names, *out);
}

// A bucket's events and workload rows as parts of the hot-switched step (RunOutput). A bucket
// only accumulates: its `dp all-reduce` range would be a replica waiting for the slowest, which
// the step's one reduction after the last bucket already shows.
void place_in_bucket(const RunOutput& output, std::vector<Event>& events,
                     std::vector<WorkloadEntry>& workload) {
    std::erase_if(events, [&](const Event& e) {
        return e.name == output.names.step || e.name == output.names.dp_all_reduce ||
               e.name == output.names.optimizer || e.end_ns <= e.start_ns;
    });
    for (Event& event : events) {
        event.step = *output.bucket_step;
        if (event.microbatch >= 0) {
            event.microbatch += output.first_microbatch;
        }
    }
    for (WorkloadEntry& entry : workload) {
        entry.step = *output.bucket_step;
        entry.microbatch += output.first_microbatch;
    }
}

// One step played: every replica's pipeline, then each stage's DP reduction and optimizer.
struct PlayedStep {
    SimulatedStep step;
    std::vector<ReplicaPlay> plays;        // by DP replica
    std::vector<std::int64_t> reduce_end;  // by stage: its DP reduction's end
    UpdateStart update;                    // the embedding's all-reduce and the optimizer's start
    std::int64_t end_ns = 0;
};

Result<PlayedStep> play_step(const balance::StepPlan& plan, const SimulationConfig& config,
                             const StageCosts& costs, const std::vector<std::int64_t>& dp_bytes,
                             std::int64_t optimizer_ns, std::int64_t step_start,
                             const SimulationProgress& progress) {
    const parallel::GridShape& grid = config.grid;
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
        const parallel::ReplayResult& replay = played.plays[d].replay;
        std::int64_t busy = 0, bubble = 0;
        for (int s = 0; s < grid.pp; ++s) {
            busy += replay.makespan_ns - replay.bubble_ns(s);
            bubble += replay.bubble_ns(s);
        }
        fraction_sum += busy > 0 ? static_cast<double>(bubble) / static_cast<double>(busy) : 0.0;
        pipelines += replica.empty() ? 0 : 1;
        for (const auto& planned : replica) {
            step.tokens += planned.packed.tokens;
        }
        step.microbatches += static_cast<int>(replica.size());
    }
    // One definition with the analysis (docs/analyses.md §2): Σ bubble / Σ busy over a
    // pipeline's stages, the convention of (p−1)/m; the mean over the step's pipelines.
    step.bubble_fraction = pipelines == 0 ? 0.0 : fraction_sum / static_cast<double>(pipelines);

    // Each stage all-reduces over its DP × CP group when its slowest replica is done.
    const bool reduces = grid.dp * grid.cp > 1 && !config.accumulate_gradients;
    const std::int64_t update_ns = config.accumulate_gradients ? 0 : optimizer_ns;
    played.reduce_end.resize(static_cast<std::size_t>(grid.pp));
    played.end_ns = step_start;
    std::vector<const parallel::ReplayResult*> replays;
    for (const auto& play : played.plays) {
        replays.push_back(&play.replay);
    }
    for (int s = 0; s < grid.pp; ++s) {
        GradientReductionInput reduction = gradient_reduction(config, s, step_start);
        reduction.stage_bytes = dp_bytes[static_cast<std::size_t>(s)];
        if (!reduces) {
            reduction.overlap = false;
            reduction.stage_bytes = 0;
        }
        const std::int64_t end =
            reduces ? gradient_reduction_end(reduction, replays, costs.dp_all_reduce)
                    : gradient_reduction_end(reduction, replays, {});
        played.reduce_end[static_cast<std::size_t>(s)] = end;
        played.end_ns = std::max(played.end_ns, end);
    }
    // An accumulating step neither sums the embedding nor updates (accumulate_gradients).
    if (!config.accumulate_gradients) {
        played.update =
            update_start(played.reduce_end, costs,
                         embedding_gradient_bytes(config.model, grid, element_bytes(config.dtype)));
        played.end_ns = std::max(played.end_ns, played.update.start + update_ns);
    }
    step.duration_ns = played.end_ns - step_start;
    return played;
}

// What CP rank `c` of a replica holds in every micro-batch of the step: its workload rows
// (the same on every stage and TP rank; `rank` filled by the caller).
std::vector<WorkloadEntry> cp_rank_workload(const std::vector<balance::PlannedMicroBatch>& replica,
                                            int c, int step, const std::string& balancer) {
    std::vector<WorkloadEntry> workload;
    for (std::size_t j = 0; j < replica.size(); ++j) {
        const auto& planned = replica[j];
        for (const auto& range : planned.cp.ranks[static_cast<std::size_t>(c)].ranges) {
            std::int64_t length = 0;
            for (const auto& document : planned.packed.documents) {
                if (document.id == range.document_id) {
                    length = document.length;
                    break;
                }
            }
            WorkloadEntry entry;
            entry.step = step;
            entry.microbatch = static_cast<std::int32_t>(j);
            entry.doc_id = static_cast<std::int64_t>(range.document_id);
            entry.doc_length = static_cast<std::int32_t>(length);
            entry.token_begin = static_cast<std::int32_t>(range.begin);
            entry.token_end = static_cast<std::int32_t>(range.end);
            entry.balancer = balancer;
            workload.push_back(std::move(entry));
        }
    }
    return workload;
}

// Writes one CP rank's stage of one replica for the step: its passes, DP reduction and
// optimizer, copied onto each of its TP ranks' lanes with the rank's workload rows.
void write_stage(RunOutput& output, const balance::StepPlan& plan, const PlayedStep& played, int d,
                 int c, int s, const std::vector<WorkloadEntry>& workload,
                 const SimulationConfig& config, const std::vector<std::int64_t>& dp_bytes,
                 std::int64_t optimizer_ns, SimulationResult& result) {
    const parallel::GridShape& grid = config.grid;
    const EventNames& names = output.names;
    RankEvents& events = *output.events;
    const ReplicaPlay& play = played.plays[static_cast<std::size_t>(d)];
    const std::int64_t step_start = played.step.start_ns;
    const auto stage = static_cast<std::int16_t>(s);
    events.events.clear();
    events.range(names.step, Category::schedule, step_start, played.end_ns, plan.step, -1, stage,
                 Phase::none);
    for (const parallel::ReplayedOp& op : play.replay.stages[static_cast<std::size_t>(s)]) {
        const std::size_t index =
            group_index(s, op.microbatch, play.microbatches, pass_phase(op.kind));
        add_pass_events(
            events, op, step_start, play.groups[index],
            play.ranks[index * static_cast<std::size_t>(grid.cp) + static_cast<std::size_t>(c)],
            config, plan.step, s);
    }
    const std::int64_t pipeline_end =
        step_start + play.replay.stage_end_ns[static_cast<std::size_t>(s)];
    const std::int64_t reduced = played.reduce_end[static_cast<std::size_t>(s)];
    if (grid.dp * grid.cp > 1) {
        events.range(names.dp_all_reduce, Category::communication, pipeline_end, reduced, plan.step,
                     -1, stage, Phase::none, dp_bytes[static_cast<std::size_t>(s)]);
    }
    const UpdateStart& update = played.update;
    const bool holds_embedding = grid.pp > 1 && (s == 0 || s == grid.pp - 1);
    if (!config.accumulate_gradients && holds_embedding) {
        events.range(names.embedding_all_reduce, Category::communication, update.embedding_start,
                     update.embedding_end, plan.step, -1, stage, Phase::none,
                     embedding_gradient_bytes(config.model, grid, element_bytes(config.dtype)));
    }
    if (!config.accumulate_gradients) {
        events.range(names.optimizer, Category::optimizer, update.start,
                     update.start + optimizer_ns, plan.step, -1, stage, Phase::none);
    }
    std::vector<WorkloadEntry> placed = workload;
    if (output.bucket_step) {
        place_in_bucket(output, events.events, placed);
    }
    for (int t = 0; t < grid.tp; ++t) {
        const int rank = parallel::rank_of(grid, {.dp = d, .tp = t, .pp = s, .cp = c});
        const LaneId lane = output.lanes[static_cast<std::size_t>(rank)];
        for (Event& event : events.events) {
            event.lane = lane;
        }
        output.writer->add_events(events.events.data(), events.events.size());
        result.events += static_cast<std::int64_t>(events.events.size());
        for (WorkloadEntry entry : placed) {
            entry.rank = rank;
            output.writer->add_workload(entry);
        }
        result.workload_rows += static_cast<std::int64_t>(placed.size());
    }
}

}  // namespace

std::vector<LaneId> add_simulated_ranks(store::TraceWriter& out, const parallel::GridShape& grid) {
    std::vector<LaneId> lanes(static_cast<std::size_t>(grid.world()));
    for (int rank = 0; rank < grid.world(); ++rank) {
        const parallel::GridCoordinates c = parallel::coordinates_of(grid, rank);
        RankInfo info;
        info.rank = rank;
        info.host = "simulated";
        info.dp = c.dp;
        info.tp = c.tp;
        info.pp = c.pp;
        info.cp = c.cp;
        info.complete = true;
        out.add_rank(info);
        lanes[static_cast<std::size_t>(rank)] = out.add_lane(rank, LaneKind::host_thread, "main");
    }
    return lanes;
}

Event simulated_range(StringId name, Category category, std::int64_t start, std::int64_t end,
                      std::int32_t step, std::int32_t microbatch, std::int16_t stage, Phase phase,
                      std::int64_t bytes, StringId args) {
    Event event;
    event.start_ns = start;
    event.end_ns = end;
    event.bytes = bytes;
    event.name = name;
    event.args = args;
    event.step = step;
    event.microbatch = microbatch;
    event.stage = stage;
    event.phase = phase;
    event.category = category;
    event.kind = category == Category::communication ? EventKind::collective : EventKind::range;
    return event;
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
    const parallel::GridShape& grid = config.grid;
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
            stage_parameters(config.model, grid, s, config.stage_layers, config.virtual_stages) *
            element_bytes(config.dtype);
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
                    write_stage(output, *plan, *played, d, c, s, workload, config, dp_bytes,
                                optimizer_ns, result);
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

Result<SimulationResult> simulate(const SimulationConfig& config, store::TraceWriter* out,
                                  const SimulationProgress& progress) {
    if (auto status = validate(config); !status) {
        return status.error();
    }
    if (config.hot_switch) {
        return simulate_hot_switched(config, out, progress);
    }
    RunOutput output = open_output(out, config.grid);
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

Result<SimulationResult> simulate_to_file(const SimulationConfig& config,
                                          const SimulationOutput& output,
                                          const SimulationProgress& progress) {
    namespace fs = std::filesystem;
    if (auto status = validate(config); !status) {
        return status.error();
    }
    // Built next to the target and renamed when complete: a failed or cancelled simulation
    // never leaves a half-written run where a good one was expected.
    auto target = PartialDatabase::prepare(output.path, output.overwrite);
    if (!target) {
        return target.error();
    }
    RunInfo run;
    run.name = output.run_name.empty() ? fs::path(output.path).stem().string() : output.run_name;
    run.command = output.command;
    run.start_utc_ns =
        output.start_utc_ns.value_or(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                         std::chrono::system_clock::now().time_since_epoch())
                                         .count());
    run.config_json = run_config_json(config, cost_source(config));
    run.origin = RunOrigin::simulated;
    run.producer = output.producer;
    store::WriterOptions options;
    options.overflow = store::WriterOptions::Overflow::block;
    options.overwrite = true;
    auto writer = store::TraceWriter::create(target->partial_path(), run, options);
    if (!writer) {
        return Error{ErrorCode::io,
                     "cannot write '" + output.path + "': " + writer.error().message};
    }
    auto result = simulate(config, writer->get(), progress);
    if (!result) {
        return result.error();  // the writer closes, then the partial file goes with `target`
    }
    if (auto status = (*writer)->close(); !status) {
        return Error{ErrorCode::io,
                     "cannot write '" + output.path + "': " + status.error().message};
    }
    writer->reset();
    if (auto status = target->commit("the simulated run"); !status) {
        return status.error();
    }
    return result;
}

}  // namespace fulcrum::sim
