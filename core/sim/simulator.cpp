#include "core/sim/simulator.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <variant>

#include "core/balance/lengths.h"
#include "core/balance/step_planner.h"
#include "core/parallel/replay.h"
#include "core/store/trace_writer.h"
#include "core/util/output_file.h"

namespace fulcrum::sim {
namespace {

using analysis::CollectiveCost;
using analysis::PassCost;

constexpr std::int64_t kFloatBytes = 4;

Error invalid(std::string message) {
    return Error{ErrorCode::invalid_input, std::move(message)};
}

// The documents fulcrum-train would train on with the same options
// (engine/data/step_plan.cpp, load_training_documents): `documents` samples of the spec
// clamped to the context, or every line of a length file, which must fit the context.
Result<std::vector<std::int64_t>> training_lengths(const SimulationConfig& config) {
    if (!config.document_lengths.empty()) {
        return config.document_lengths;
    }
    auto distribution = balance::parse_length_spec(config.lengths);
    if (!distribution) {
        return distribution.error();
    }
    auto count = static_cast<std::size_t>(config.documents);
    if (const auto* file = std::get_if<balance::LengthFile>(&*distribution)) {
        auto lengths = balance::read_length_file(file->path);
        if (!lengths) {
            return lengths.error();
        }
        for (std::size_t line = 0; line < lengths->size(); ++line) {
            if ((*lengths)[line] > config.model.context) {
                return invalid("'" + file->path + "' asks for a document of " +
                               std::to_string((*lengths)[line]) + " tokens (entry " +
                               std::to_string(line + 1) +
                               "), longer than any micro-batch can hold (--context " +
                               std::to_string(config.model.context) +
                               "); raise --context or shorten the entry");
            }
        }
        count = lengths->size();
    }
    return balance::sample_lengths(*distribution, count, config.seed, config.model.context);
}

// The engine's planner options (engine/tools/train.cpp).
balance::PlannerOptions planner_options(const SimulationConfig& config) {
    balance::PlannerOptions options;
    options.packing.balancer = config.balancer;
    options.packing.microbatches = config.microbatches;
    options.packing.capacity = config.model.context;
    options.packing.ilp_time_limit_s = config.ilp_time_limit_s;
    options.dp = config.grid.dp;
    options.cp = config.grid.cp;
    options.sharding = config.sharding;
    options.seed = config.seed;
    options.ilp_window = config.ilp_window;
    return options;
}

std::string cost_source(const SimulationConfig& config) {
    if (!config.cost_model) {
        return describe(config.hardware);
    }
    return config.cost_model->source.empty() ? "given" : config.cost_model->source;
}

// One pass (one micro-batch, one phase) of one replica's stage, for the whole CP group:
// what the pipeline replay sees.
struct GroupPass {
    std::int64_t duration_ns = 0;  // slowest member's compute + CP exchange + send
    std::int64_t exchange_ns = 0;  // the CP collective's transfer, every layer together
    std::int64_t exchange_bytes = 0;
    std::int64_t send_ns = 0;
};

// The same pass as one CP rank spends it.
struct RankPass {
    std::int64_t attention_ns = 0;  // its own attention compute: per_pair · pairs
    std::int64_t mlp_ns = 0;        // its own other compute: fixed + per_token · tokens
    std::int64_t tp_ns = 0;         // its TP all-reduces, 2 per layer
    std::int64_t wait_ns = 0;       // for the CP group's slowest rank
    std::int64_t tokens = 0;
};

struct ReplicaPlay {
    int microbatches = 0;
    std::vector<GroupPass> groups;  // [(stage · m + j) · 2 + phase]
    std::vector<RankPass> ranks;    // [group index · cp + cp rank]
    parallel::ReplayResult replay;  // times from 0, the step's start
};

std::size_t group_index(int stage, int microbatch, int microbatches, PassPhase phase) {
    return (static_cast<std::size_t>(stage) * static_cast<std::size_t>(microbatches) +
            static_cast<std::size_t>(microbatch)) *
               2 +
           static_cast<std::size_t>(phase);
}

int layers_of(int stage, const SimulationConfig& config) {
    const auto range = parallel::stage_layers(stage, config.grid.pp, config.model.layers);
    return range.last - range.first;
}

Result<ReplicaPlay> play_replica(const std::vector<balance::PlannedMicroBatch>& replica,
                                 const SimulationConfig& config, const StageCosts& costs) {
    const Grid& grid = config.grid;
    const std::int64_t hidden = config.model.hidden;
    const int m = static_cast<int>(replica.size());
    ReplicaPlay play;
    play.microbatches = m;
    play.groups.resize(static_cast<std::size_t>(grid.pp) * static_cast<std::size_t>(m) * 2);
    play.ranks.resize(play.groups.size() * static_cast<std::size_t>(grid.cp));

    parallel::ReplayInput input;
    input.schedule = config.schedule;
    input.stages = grid.pp;
    input.microbatches = m;
    input.forward_ns.assign(static_cast<std::size_t>(grid.pp),
                            std::vector<std::int64_t>(static_cast<std::size_t>(m)));
    input.backward_ns = input.forward_ns;
    // One latency for both directions (replay_pipeline takes one): their mean.
    input.p2p_latency_ns = grid.pp > 1
                               ? std::llround((std::max(costs.recv_activations.latency_ns, 0.0) +
                                               std::max(costs.recv_gradients.latency_ns, 0.0)) /
                                              2)
                               : 0;

    for (int stage = 0; stage < grid.pp; ++stage) {
        const std::int64_t layers = layers_of(stage, config);
        for (int j = 0; j < m; ++j) {
            const balance::PlannedMicroBatch& planned = replica[static_cast<std::size_t>(j)];
            for (PassPhase phase : {PassPhase::forward, PassPhase::backward}) {
                const bool forward = phase == PassPhase::forward;
                const PassCost& cost =
                    costs.passes[static_cast<std::size_t>(stage)][static_cast<std::size_t>(phase)];
                const std::size_t index = group_index(stage, j, m, phase);
                GroupPass& group = play.groups[index];
                RankPass* ranks = &play.ranks[index * static_cast<std::size_t>(grid.cp)];
                std::int64_t slowest = 0;
                std::int64_t largest_send = 0;
                const bool sends = forward ? stage < grid.pp - 1 : stage > 0;
                const CollectiveCost& p2p = forward ? costs.recv_activations : costs.recv_gradients;
                for (int c = 0; c < grid.cp; ++c) {
                    const balance::CpShard& shard = planned.cp.ranks[static_cast<std::size_t>(c)];
                    // attention_work is Σ causal_pair_work, twice the pairs; always even.
                    const std::int64_t pairs = shard.attention_work / 2;
                    RankPass& rank = ranks[c];
                    rank.tokens = shard.tokens;
                    const std::int64_t own = predict_pass_ns(cost, shard.tokens, pairs);
                    const double attention = cost.per_pair_ns * static_cast<double>(pairs);
                    rank.attention_ns =
                        std::clamp<std::int64_t>(std::llround(std::max(attention, 0.0)), 0, own);
                    rank.mlp_ns = own - rank.attention_ns;
                    if (grid.tp > 1) {
                        rank.tp_ns = 2 * layers *
                                     predict_collective_ns(costs.tp_all_reduce,
                                                           shard.tokens * hidden * kFloatBytes);
                    }
                    slowest = std::max(slowest, own + rank.tp_ns);
                    if (sends) {
                        const double send =
                            std::max(p2p.per_byte_ns, 0.0) *
                            static_cast<double>(shard.tokens * hidden * kFloatBytes);
                        largest_send = std::max<std::int64_t>(largest_send, std::llround(send));
                    }
                }
                for (int c = 0; c < grid.cp; ++c) {
                    ranks[c].wait_ns =
                        slowest - (ranks[c].attention_ns + ranks[c].mlp_ns + ranks[c].tp_ns);
                }
                if (grid.cp > 1) {
                    // K and V of every token of the micro-batch, this rank's heads (h/tp).
                    const std::int64_t bytes_per_layer =
                        planned.packed.tokens * 2 * (hidden / grid.tp) * kFloatBytes;
                    group.exchange_bytes = bytes_per_layer * layers;
                    group.exchange_ns =
                        layers * predict_collective_ns(
                                     forward ? costs.cp_all_gather : costs.cp_reduce_scatter,
                                     bytes_per_layer);
                }
                group.send_ns = largest_send;
                group.duration_ns = slowest + group.exchange_ns + group.send_ns;
                (forward ? input.forward_ns : input.backward_ns)[static_cast<std::size_t>(stage)]
                                                                [static_cast<std::size_t>(j)] =
                                                                    group.duration_ns;
            }
        }
    }
    auto replayed = parallel::replay_pipeline(input);
    if (!replayed) {
        return replayed.error();
    }
    play.replay = std::move(*replayed);
    return play;
}

struct EventNames {
    StringId step, forward, backward, attention, mlp;
    StringId recv_activations, send_activations, recv_gradients, send_gradients;
    StringId cp_all_gather, cp_reduce_scatter, tp_all_reduce, dp_all_reduce, optimizer;
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
            name != names_.backward) {
            return;
        }
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
        // The engine's capture stores communication ranges as collectives
        // (docs/annotations.md).
        event.kind = category == Category::communication ? EventKind::collective : EventKind::range;
        events.push_back(event);
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

    const EventNames& names() const { return names_; }

private:
    const EventNames& names_;
    store::TraceWriter& writer_;
    std::map<std::int64_t, StringId> calls_;
};

// The ranges of one pass on one CP rank, nested as the engine nests them
// (engine/distributed/parallel_trainer.cpp, engine/model/gpt.cpp):
//   forward:  [recv activations] attention{cp all-gather kv, tp all-reduce}
//             mlp{tp all-reduce} [send activations]
//   backward: [recv gradients] mlp{tp all-reduce} attention{tp all-reduce,
//             cp reduce-scatter dkv} [send gradients]
// One attention and one mlp range stand for every layer of the stage; the collectives in them
// carry the bytes of all their calls and args {"calls": N}. The wait for the CP group's
// slowest rank is inside the CP collective, as a blocking collective would show it.
void add_pass_events(RankEvents& out, const parallel::ReplayedOp& op, std::int64_t offset,
                     const GroupPass& group, const RankPass& rank, const SimulationConfig& config,
                     int step, int stage) {
    const EventNames& n = out.names();
    const Grid& grid = config.grid;
    const bool forward = op.kind == parallel::PassKind::forward;
    const Phase phase = forward ? Phase::forward : Phase::backward;
    const auto s = static_cast<std::int16_t>(stage);
    const int j = op.microbatch;
    const std::int64_t layers = layers_of(stage, config);
    const std::int64_t start = offset + op.start_ns;
    const std::int64_t end = offset + op.end_ns;
    const bool receives = forward ? stage > 0 : stage < grid.pp - 1;
    const std::int64_t begin = receives ? start - op.wait_ns : start;
    const std::int64_t p2p_bytes = rank.tokens * config.model.hidden * kFloatBytes;
    const std::int64_t tp_bytes = layers * p2p_bytes;  // per half: one call per layer
    const std::int64_t tp_first = rank.tp_ns / 2;
    const std::int64_t tp_second = rank.tp_ns - tp_first;
    const std::int64_t exchange = grid.cp > 1 ? rank.wait_ns + group.exchange_ns : 0;

    out.range(forward ? n.forward : n.backward, Category::compute, begin, end, step, j, s, phase);
    if (receives) {
        out.range(forward ? n.recv_activations : n.recv_gradients, Category::communication, begin,
                  start, step, j, s, phase, p2p_bytes);
    }
    std::int64_t t = start;
    if (forward) {
        const std::int64_t attention_end = t + exchange + rank.attention_ns + tp_first;
        out.range(n.attention, Category::attention, t, attention_end, step, j, s, phase);
        if (grid.cp > 1) {
            out.range(n.cp_all_gather, Category::communication, t, t + exchange, step, j, s, phase,
                      group.exchange_bytes, out.calls(layers));
        }
        if (grid.tp > 1) {
            out.range(n.tp_all_reduce, Category::communication, attention_end - tp_first,
                      attention_end, step, j, s, phase, tp_bytes, out.calls(layers));
        }
        const std::int64_t mlp_end = attention_end + rank.mlp_ns + tp_second;
        out.range(n.mlp, Category::compute, attention_end, mlp_end, step, j, s, phase);
        if (grid.tp > 1) {
            out.range(n.tp_all_reduce, Category::communication, mlp_end - tp_second, mlp_end, step,
                      j, s, phase, tp_bytes, out.calls(layers));
        }
        t = mlp_end;
    } else {
        const std::int64_t mlp_end = t + rank.mlp_ns + tp_first;
        out.range(n.mlp, Category::compute, t, mlp_end, step, j, s, phase);
        if (grid.tp > 1) {
            out.range(n.tp_all_reduce, Category::communication, mlp_end - tp_first, mlp_end, step,
                      j, s, phase, tp_bytes, out.calls(layers));
        }
        const std::int64_t compute_end = mlp_end + rank.attention_ns + tp_second;
        const std::int64_t attention_end = compute_end + exchange;
        out.range(n.attention, Category::attention, mlp_end, attention_end, step, j, s, phase);
        if (grid.tp > 1) {
            out.range(n.tp_all_reduce, Category::communication, compute_end - tp_second,
                      compute_end, step, j, s, phase, tp_bytes, out.calls(layers));
        }
        if (grid.cp > 1) {
            out.range(n.cp_reduce_scatter, Category::communication, compute_end, attention_end,
                      step, j, s, phase, group.exchange_bytes, out.calls(layers));
        }
        t = attention_end;
    }
    const bool sends = forward ? stage < grid.pp - 1 : stage > 0;
    if (sends) {
        out.range(forward ? n.send_activations : n.send_gradients, Category::communication, t,
                  t + group.send_ns, step, j, s, phase, p2p_bytes);
    }
}

// Rank number of grid coordinates: TP fastest, then CP, PP, DP (the engine's Topology).
int rank_of(const Grid& grid, int dp, int pp, int cp, int tp) {
    return ((dp * grid.pp + pp) * grid.cp + cp) * grid.tp + tp;
}

}  // namespace

Status validate(const SimulationConfig& config) {
    const Grid& grid = config.grid;
    const ModelShape& model = config.model;
    if (grid.dp < 1 || grid.tp < 1 || grid.pp < 1 || grid.cp < 1) {
        return invalid("--dp, --tp, --pp and --cp must be at least 1");
    }
    std::vector<std::string> unknown;
    if (model.layers < 1) {
        unknown.push_back("--layers");
    }
    if (model.hidden < 1) {
        unknown.push_back("--hidden");
    }
    if (model.context < 1) {
        unknown.push_back("--context");
    }
    if (config.microbatches < 1) {
        unknown.push_back("--micro-batches");
    }
    if (config.lengths.empty() && config.document_lengths.empty()) {
        unknown.push_back("--lengths");
    }
    if (!unknown.empty()) {
        std::string list;
        for (const auto& option : unknown) {
            list += (list.empty() ? "" : ", ") + option;
        }
        // Only a calibration run that does not record them leaves these unset.
        return invalid("the simulation needs " + list +
                       ", which the calibration run does not record; give them on the command "
                       "line (a run trained on text has no length spec: give e.g. --lengths "
                       "long-tail:context=N or file:PATH)");
    }
    if (config.steps < 1) {
        return invalid("--steps must be at least 1");
    }
    if (model.context < 2) {
        return invalid("--context must be at least 2");
    }
    if (grid.pp > model.layers) {
        return invalid("--pp " + std::to_string(grid.pp) +
                       " is more pipeline stages than --layers " + std::to_string(model.layers) +
                       "; every stage needs a layer");
    }
    if (model.heads < 1 || model.hidden % model.heads != 0) {
        return invalid("--heads " + std::to_string(model.heads) + " must divide --hidden " +
                       std::to_string(model.hidden));
    }
    if (model.hidden % grid.tp != 0 || model.heads % grid.tp != 0) {
        return invalid("--tp " + std::to_string(grid.tp) + " must divide --heads " +
                       std::to_string(model.heads) + " (each TP rank holds whole heads)");
    }
    if (model.vocab < 1) {
        return invalid("--vocab must be at least 1");
    }
    if (config.document_lengths.empty() && config.documents < 1) {
        return invalid("--documents must be at least 1");
    }
    if (config.ilp_window < 1 || config.ilp_window > 64) {
        return invalid("--ilp-window must be between 1 and 64");
    }
    if (config.ilp_time_limit_s <= 0) {
        return invalid("--ilp-time-limit must be positive");
    }
    if (config.schedule != parallel::PipelineSchedule::gpipe &&
        config.schedule != parallel::PipelineSchedule::one_f_one_b) {
        return invalid(std::string("the simulator plays the gpipe and 1f1b schedules; ") +
                       parallel::schedule_name(config.schedule) + " is not simulated yet");
    }
    const HardwareAssumptions& hardware = config.hardware;
    // Checked with a given model too: what it lacks comes from the analytic one.
    if (hardware.tflops <= 0 || hardware.nvlink_gbs <= 0 || hardware.network_gbs <= 0 ||
        hardware.hbm_gbs <= 0 || hardware.collective_latency_us < 0 ||
        hardware.p2p_latency_us < 0 || hardware.layer_overhead_us < 0 ||
        hardware.gpus_per_node < 1) {
        return invalid("--tflops and the bandwidths must be positive, the latencies not negative");
    }
    return {};
}

std::string run_config_json(const SimulationConfig& config, const std::string& source) {
    const bool given_lengths = !config.document_lengths.empty();
    const std::int64_t documents = given_lengths
                                       ? static_cast<std::int64_t>(config.document_lengths.size())
                                       : config.documents;
    const nlohmann::json json = {
        {"model",
         {{"layers", config.model.layers},
          {"hidden", config.model.hidden},
          {"heads", config.model.heads},
          {"context", config.model.context},
          {"vocab", config.model.vocab}}},
        {"dp", config.grid.dp},
        {"tp", config.grid.tp},
        {"pp", config.grid.pp},
        {"cp", config.grid.cp},
        {"schedule", parallel::schedule_name(config.schedule)},
        {"balancer", balance::balancer_name(config.balancer)},
        {"cp_shard", balance::cp_sharding_name(config.sharding)},
        {"microbatches", config.microbatches},
        {"steps", config.steps},
        {"seed", config.seed},
        {"ilp_window", config.ilp_window},
        {"lengths", given_lengths ? "" : config.lengths},
        {"documents", documents},
        {"backend", "simulated"},
        {"data", given_lengths ? std::to_string(documents) + " given document lengths"
                               : std::to_string(documents) + " synthetic documents, lengths " +
                                     config.lengths},
        {"simulated", true},
        {"cost_model", source},
    };
    return json.dump();
}

Result<SimulationResult> simulate(const SimulationConfig& config, store::TraceWriter* out,
                                  const SimulationProgress& progress) {
    if (auto status = validate(config); !status) {
        return status.error();
    }
    auto lengths = training_lengths(config);
    if (!lengths) {
        return lengths.error();
    }
    auto planner = balance::StepPlanner::create(std::move(*lengths), planner_options(config));
    if (!planner) {
        return planner.error();
    }
    const Grid& grid = config.grid;
    const StageCosts costs = resolve_costs(config.cost_model ? &*config.cost_model : nullptr,
                                           config.cost_origin, config.model, grid, config.hardware);

    SimulationResult result;
    result.ranks = grid.world();
    result.cost_source = costs.source;
    result.notes = costs.notes;

    std::vector<LaneId> lanes;
    EventNames names;
    if (out != nullptr) {
        lanes.resize(static_cast<std::size_t>(grid.world()));
        for (int d = 0; d < grid.dp; ++d) {
            for (int s = 0; s < grid.pp; ++s) {
                for (int c = 0; c < grid.cp; ++c) {
                    for (int t = 0; t < grid.tp; ++t) {
                        RankInfo rank;
                        rank.rank = rank_of(grid, d, s, c, t);
                        rank.host = "simulated";
                        rank.dp = d;
                        rank.pp = s;
                        rank.cp = c;
                        rank.tp = t;
                        rank.complete = true;
                        out->add_rank(rank);
                        lanes[static_cast<std::size_t>(rank.rank)] =
                            out->add_lane(rank.rank, LaneKind::host_thread, "main");
                    }
                }
            }
        }
        names.step = out->intern(range_name::kStep);
        names.forward = out->intern(range_name::kForward);
        names.backward = out->intern(range_name::kBackward);
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
    }
    std::vector<std::int64_t> dp_bytes(static_cast<std::size_t>(grid.pp));
    for (int s = 0; s < grid.pp; ++s) {
        dp_bytes[static_cast<std::size_t>(s)] =
            stage_parameters(config.model, grid, s) * kFloatBytes;
    }
    const std::int64_t optimizer_ns = std::llround(std::max(costs.optimizer_ns, 0.0));
    const std::string balancer = balance::balancer_name(config.balancer);
    std::unique_ptr<RankEvents> events;
    if (out != nullptr) {
        events = std::make_unique<RankEvents>(names, *out);
    }

    std::int64_t step_start = 0;
    double total_tokens = 0;
    for (int k = 0; k < config.steps; ++k) {
        auto packed = planner->pack_next();
        if (!packed) {
            return packed.error();
        }
        auto plan = planner->complete(std::move(*packed));
        if (!plan) {
            return plan.error();
        }
        SimulatedStep step;
        step.step = plan->step;
        step.epoch = plan->epoch;
        step.start_ns = step_start;
        step.imbalance = plan->imbalance;

        std::vector<ReplicaPlay> plays;
        plays.reserve(plan->replicas.size());
        double fraction_sum = 0;
        for (const auto& replica : plan->replicas) {
            if (progress.cancel != nullptr && progress.cancel->load()) {
                return Error{ErrorCode::cancelled, "the simulation was cancelled"};
            }
            auto play = play_replica(replica, config, costs);
            if (!play) {
                return play.error();
            }
            plays.push_back(std::move(*play));
            const parallel::ReplayResult& replay = plays.back().replay;
            std::int64_t busy = 0, bubble = 0;
            for (int s = 0; s < grid.pp; ++s) {
                busy += replay.makespan_ns - replay.bubble_ns(s);
                bubble += replay.bubble_ns(s);
            }
            fraction_sum += busy > 0 ? static_cast<double>(bubble) / static_cast<double>(busy) : 0.0;
            for (const auto& planned : replica) {
                step.tokens += planned.packed.tokens;
            }
            step.microbatches += static_cast<int>(replica.size());
        }
        // One definition with the analysis (docs/analyses.md §2): Σ bubble / Σ busy over a
        // pipeline's stages, the convention of (p−1)/m; the mean over the step's pipelines.
        step.bubble_fraction =
            plan->replicas.empty() ? 0.0 : fraction_sum / static_cast<double>(plan->replicas.size());

        // Each stage all-reduces over its DP × CP group when its slowest replica is done.
        const bool reduces = grid.dp * grid.cp > 1;
        std::vector<std::int64_t> reduce_end(static_cast<std::size_t>(grid.pp));
        std::int64_t step_end = step_start;
        for (int s = 0; s < grid.pp; ++s) {
            std::int64_t pipeline_end = step_start;
            for (const auto& play : plays) {
                pipeline_end =
                    std::max(pipeline_end,
                             step_start + play.replay.stage_end_ns[static_cast<std::size_t>(s)]);
            }
            reduce_end[static_cast<std::size_t>(s)] =
                pipeline_end + (reduces
                                    ? predict_collective_ns(costs.dp_all_reduce,
                                                            dp_bytes[static_cast<std::size_t>(s)])
                                    : 0);
            step_end = std::max(step_end, reduce_end[static_cast<std::size_t>(s)] + optimizer_ns);
        }
        step.duration_ns = step_end - step_start;

        if (out != nullptr) {
            for (int d = 0; d < grid.dp; ++d) {
                if (progress.cancel != nullptr && progress.cancel->load()) {
                    return Error{ErrorCode::cancelled, "the simulation was cancelled"};
                }
                const ReplicaPlay& play = plays[static_cast<std::size_t>(d)];
                const auto& replica = plan->replicas[static_cast<std::size_t>(d)];
                const int m = play.microbatches;
                for (int c = 0; c < grid.cp; ++c) {
                    // What this CP rank holds, the same on every stage and TP rank.
                    std::vector<WorkloadEntry> workload;
                    for (int j = 0; j < m; ++j) {
                        const auto& planned = replica[static_cast<std::size_t>(j)];
                        for (const auto& range :
                             planned.cp.ranks[static_cast<std::size_t>(c)].ranges) {
                            std::int64_t length = 0;
                            for (const auto& document : planned.packed.documents) {
                                if (document.id == range.document_id) {
                                    length = document.length;
                                    break;
                                }
                            }
                            WorkloadEntry entry;
                            entry.step = plan->step;
                            entry.microbatch = j;
                            entry.doc_id = static_cast<std::int64_t>(range.document_id);
                            entry.doc_length = static_cast<std::int32_t>(length);
                            entry.token_begin = static_cast<std::int32_t>(range.begin);
                            entry.token_end = static_cast<std::int32_t>(range.end);
                            entry.balancer = balancer;
                            workload.push_back(std::move(entry));
                        }
                    }
                    for (int s = 0; s < grid.pp; ++s) {
                        const auto stage = static_cast<std::int16_t>(s);
                        events->events.clear();
                        events->range(names.step, Category::schedule, step_start, step_end,
                                      plan->step, -1, stage, Phase::none);
                        for (const parallel::ReplayedOp& op :
                             play.replay.stages[static_cast<std::size_t>(s)]) {
                            const std::size_t index =
                                group_index(s, op.microbatch, m,
                                            op.kind == parallel::PassKind::forward ? PassPhase::forward
                                                                                   : PassPhase::backward);
                            add_pass_events(*events, op, step_start, play.groups[index],
                                            play.ranks[index * static_cast<std::size_t>(grid.cp) +
                                                       static_cast<std::size_t>(c)],
                                            config, plan->step, s);
                        }
                        const std::int64_t pipeline_end =
                            step_start + play.replay.stage_end_ns[static_cast<std::size_t>(s)];
                        const std::int64_t reduced = reduce_end[static_cast<std::size_t>(s)];
                        if (reduces) {
                            events->range(names.dp_all_reduce, Category::communication,
                                          pipeline_end, reduced, plan->step, -1, stage, Phase::none,
                                          dp_bytes[static_cast<std::size_t>(s)]);
                        }
                        events->range(names.optimizer, Category::optimizer, reduced,
                                      reduced + optimizer_ns, plan->step, -1, stage, Phase::none);
                        for (int t = 0; t < grid.tp; ++t) {
                            const int rank = rank_of(grid, d, s, c, t);
                            const LaneId lane = lanes[static_cast<std::size_t>(rank)];
                            for (Event& event : events->events) {
                                event.lane = lane;
                            }
                            out->add_events(events->events.data(), events->events.size());
                            result.events += static_cast<std::int64_t>(events->events.size());
                            for (WorkloadEntry& entry : workload) {
                                entry.rank = rank;
                                out->add_workload(entry);
                            }
                            result.workload_rows += static_cast<std::int64_t>(workload.size());
                        }
                    }
                }
                if (progress.progress) {
                    progress.progress((k + static_cast<double>(d + 1) / grid.dp) / config.steps);
                }
            }
        } else if (progress.progress) {
            progress.progress(static_cast<double>(k + 1) / config.steps);
        }
        total_tokens += static_cast<double>(step.tokens);
        result.steps.push_back(step);
        step_start = step_end;
    }

    double imbalance = 0;
    double bubble = 0;
    for (const SimulatedStep& step : result.steps) {
        imbalance += step.imbalance;
        bubble += step.bubble_fraction;
    }
    const auto count = static_cast<double>(result.steps.size());
    result.mean_step_ns = static_cast<double>(step_start) / count;
    result.mean_imbalance = imbalance / count;
    result.mean_bubble_fraction = bubble / count;
    result.tokens_per_second =
        step_start > 0 ? total_tokens / (static_cast<double>(step_start) * 1e-9) : 0.0;
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
