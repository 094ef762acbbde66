#include "core/sim/sim_trace.h"

#include <algorithm>
#include <utility>

#include "core/parallel/grid.h"
#include "core/trace/annotations.h"

namespace fulcrum::sim {
namespace {

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
    bool ulysses = false;  // CP's exchanges are Ulysses' all-to-alls

    std::int64_t share(std::int64_t ns) const { return ns / v; }
    std::int64_t calls(std::int64_t all) const { return all * chunk_layers / stage_layers; }
    void range(StringId name, Category category, std::int64_t begin, std::int64_t end,
               std::int64_t bytes = -1, StringId args = {}) {
        out.range(name, category, begin, end, step, microbatch, stage, phase, bytes, args);
    }
    // The pass's copies to host memory and back, each on its stream from `begin` for its
    // bytes at the host link's rate, as the CPU backend's copy threads record them.
    void copies(const HostCopies& bytes, std::int64_t begin, const HardwareAssumptions& hardware) {
        const auto copy = [&](std::vector<Event>& lane, StringId name, std::int64_t all) {
            const std::int64_t moved = calls(all);
            if (moved > 0) {
                const std::int64_t ns = share(host_link_ns(all, hardware));
                lane.push_back(simulated_range(name, Category::offload, begin, begin + ns, step,
                                               microbatch, stage, phase, moved));
            }
        };
        copy(out.to_host, out.names().memcpy_to_host, bytes.to_host);
        copy(out.to_device, out.names().memcpy_to_device, bytes.to_device);
    }
    // Half 0 or 1 of the TP collectives `ns`, `all_calls` by kind, back to back from t.
    std::int64_t tp_half_ns(const TpByKind& ns, int half) const {
        std::int64_t total = 0;
        for (std::size_t k = 0; k < 3; ++k) {
            total += half == 0 ? share(ns[k]) / 2 : share(ns[k]) - share(ns[k]) / 2;
        }
        return total;
    }
    // Each range carries the share of its calls' bytes that its time moved: where the GEMMs
    // hid part of the calls (`whole` their time before), the rest moved unseen beside them.
    std::int64_t tp_ranges(std::int64_t t, const TpByKind& ns, const TpByKind& whole,
                           const TpByKind& all_calls, int half) {
        for (std::size_t k = 0; k < 3; ++k) {
            const std::int64_t chunk_calls = calls(all_calls[k]);
            const std::int64_t count = half == 0 ? chunk_calls / 2 : chunk_calls - chunk_calls / 2;
            const std::int64_t first_ns = share(ns[k]) / 2;
            const std::int64_t length = half == 0 ? first_ns : share(ns[k]) - first_ns;
            if (count > 0) {
                range(tp_names[k], Category::communication, t, t + length,
                      exposed_bytes(count * tp_call_bytes, ns[k], whole[k]), out.calls(count));
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
        const TpByKind& whole = rank.recompute_tp_whole_ns;
        std::int64_t u = tp_ranges(compute_end, ns, whole, rank.recompute_tp_calls, 0);
        u = tp_ranges(u, ns, whole, rank.recompute_tp_calls, 1);
        if (regather > 0) {
            range(ulysses ? out.names().cp_all_to_all : out.names().cp_all_gather,
                  Category::communication, u, u + regather, calls(group.regather_bytes),
                  out.calls(chunk_layers));
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
    const parallel::GridShape& grid = config.layout.grid;
    const int v = std::max(config.layout.virtual_stages, 1);
    const Phase phase = op.kind;
    const bool forward = phase == Phase::forward;
    const int model_chunk = op.chunk * grid.pp + stage;
    const parallel::LayerRange chunk_range = parallel::model_chunk_layers(
        model_chunk, grid.pp * v, config.model.layers, config.layout.stage_layers);
    ChunkRanges r{out,
                  step,
                  op.microbatch,
                  static_cast<std::int16_t>(stage),
                  phase,
                  v,
                  chunk_range.last - chunk_range.first,
                  std::max(layers_of(stage, config), 1),
                  rank.tokens * config.model.hidden * element_bytes(config.dtype),
                  {n.tp_all_reduce, n.tp_all_gather, n.tp_reduce_scatter},
                  config.layout.context_parallelism == parallel::ContextParallelism::ulysses};
    const bool ulysses = r.ulysses;
    const std::int64_t start = offset + op.start_ns;
    const std::int64_t end = offset + op.end_ns;
    const bool receives =
        forward ? model_chunk > 0 : phase == Phase::backward && model_chunk < grid.pp * v - 1;
    const bool sends =
        forward ? model_chunk < grid.pp * v - 1 : phase == Phase::backward && model_chunk > 0;
    const std::int64_t begin = receives ? start - op.wait_ns : start;
    const std::int64_t exchange = grid.cp > 1 ? r.share(rank.wait_ns + group.exchange_ns) : 0;

    r.range(forward                    ? n.forward
            : phase == Phase::backward ? n.backward
                                       : n.weight_gradients,
            Category::compute, begin, end, -1, out.chunk(op.chunk));
    if (receives) {
        r.range(forward ? n.recv_activations : n.recv_gradients, Category::communication, begin,
                start, p2p_bytes(config, rank.tokens));
    }
    std::int64_t t = start;
    if (op.parameter_wait_ns > 0) {
        // The distributed optimizer's gather of the parameters its update changed, as long as
        // the pass waited for them (--overlap-param-gather; parameter_arrivals).
        r.range(n.zero_all_gather, Category::communication, t, t + op.parameter_wait_ns,
                op.parameter_bytes, out.calls(r.chunk_layers));
        t += op.parameter_wait_ns;
    }
    if (receives && group.gather_ns > 0) {
        // The scatter/gather send's other half: the whole activation from the TP ranks' parts.
        r.range(n.tp_all_gather, Category::communication, t, t + group.gather_ns, r.tp_call_bytes,
                out.calls(1));
        t += group.gather_ns;
    }
    if (!forward) {
        t = r.recompute(t, rank, group, phase == Phase::backward);
    }
    if (forward) {
        const std::int64_t compute_end = t + exchange + r.share(rank.attention_ns);
        const std::int64_t attention_end = compute_end + r.tp_half_ns(rank.tp_ns, 0);
        r.range(n.attention, Category::attention, t, attention_end);
        if (grid.cp > 1) {
            r.range(ulysses ? n.cp_all_to_all : n.cp_all_gather, Category::communication, t,
                    t + exchange, r.calls(group.exchange_bytes), out.calls(r.chunk_layers));
        }
        r.tp_ranges(compute_end, rank.tp_ns, rank.tp_whole_ns, rank.tp_calls, 0);
        const std::int64_t mlp_compute_end = attention_end + r.share(rank.mlp_ns);
        const std::int64_t mlp_end = mlp_compute_end + r.tp_half_ns(rank.tp_ns, 1);
        r.range(n.mlp, Category::compute, attention_end, mlp_end);
        r.tp_ranges(mlp_compute_end, rank.tp_ns, rank.tp_whole_ns, rank.tp_calls, 1);
        t = mlp_end;
    } else if (phase == Phase::backward) {
        const std::int64_t mlp_compute_end = t + r.share(rank.mlp_ns);
        const std::int64_t mlp_end = mlp_compute_end + r.tp_half_ns(rank.tp_ns, 0);
        r.range(n.mlp, Category::compute, t, mlp_end);
        r.tp_ranges(mlp_compute_end, rank.tp_ns, rank.tp_whole_ns, rank.tp_calls, 0);
        const std::int64_t compute_end = mlp_end + r.share(rank.attention_ns);
        const std::int64_t tp_end = compute_end + r.tp_half_ns(rank.tp_ns, 1);
        const std::int64_t attention_end = tp_end + exchange;
        r.range(n.attention, Category::attention, mlp_end, attention_end);
        r.tp_ranges(compute_end, rank.tp_ns, rank.tp_whole_ns, rank.tp_calls, 1);
        if (grid.cp > 1) {
            r.range(ulysses ? n.cp_all_to_all : n.cp_reduce_scatter, Category::communication,
                    tp_end, attention_end, r.calls(group.exchange_bytes),
                    out.calls(r.chunk_layers));
        }
        t = attention_end;
    } else {
        // W: the weight gradients of every GEMM (the attention core has none); a faster CP
        // rank, which nothing synchronises here, is done early.
        const std::int64_t compute_end = t + r.share(rank.mlp_ns + rank.attention_ns);
        const std::int64_t mlp_end =
            compute_end + r.tp_half_ns(rank.tp_ns, 0) + r.tp_half_ns(rank.tp_ns, 1);
        r.range(n.mlp, Category::compute, t, mlp_end);
        r.tp_ranges(r.tp_ranges(compute_end, rank.tp_ns, rank.tp_whole_ns, rank.tp_calls, 0),
                    rank.tp_ns, rank.tp_whole_ns, rank.tp_calls, 1);
        t = mlp_end;
    }
    // ZeRO-3's exposed parameter gathers, ZeRO-2's and -3's gradient reduce-scatters and the
    // copies the compute did not hide, after the pass's work (play_group adds them to its
    // length).
    // The wait for the slowest DP replica is inside the pass's DP collective: the gradients'
    // scatter in a backward that has one, else the parameters' gather.
    const bool waits_in_scatter = group.grad_scatter_ns > 0;
    if (group.param_gather_ns > 0) {
        const std::int64_t gather =
            r.share(group.param_gather_ns + (waits_in_scatter ? 0 : group.dp_wait_ns));
        r.range(n.zero_all_gather, Category::communication, t, t + gather,
                r.calls(group.param_gather_bytes), out.calls(r.chunk_layers));
        t += gather;
    }
    if (group.grad_scatter_ns > 0) {
        const std::int64_t scatter = r.share(group.grad_scatter_ns + group.dp_wait_ns);
        r.range(n.zero_reduce_scatter, Category::communication, t, t + scatter,
                r.calls(group.grad_scatter_bytes), out.calls(r.chunk_layers));
        t += scatter;
    }
    const HostCopies& offload = group.offload;
    if (offload.any()) {
        // The copies start with the pass's work; what the compute did not hide ends with the
        // wait (the slower direction's copy ends there).
        const std::int64_t wait = r.share(group.offload_wait_ns);
        const std::int64_t copying = r.share(copy_ns(offload, config.hardware));
        if (wait > 0) {
            r.range(n.offload_wait, Category::communication, t, t + wait,
                    exposed_bytes(r.calls(offload.to_host + offload.to_device), wait, copying));
        }
        t += wait;
        r.copies(offload, wait > 0 ? std::max(start, t - copying) : start, config.hardware);
    }
    if (sends) {
        r.range(forward ? n.send_activations : n.send_gradients, Category::communication, t,
                std::max(t, end), p2p_bytes(config, rank.tokens));
    }
}

// A bucket's events and workload rows as parts of the hot-switched step (RunOutput). A bucket
// only accumulates: its `dp all-reduce` range would be a replica waiting for the slowest, which
// the step's one reduction after the last bucket already shows.
void place_in_bucket(const RunOutput& output, std::vector<Event>& events,
                     std::vector<WorkloadEntry>& workload) {
    std::erase_if(events, [&](const Event& e) {
        return e.name == output.names.step || e.name == output.names.dp_all_reduce ||
               e.name == output.names.zero_reduce_scatter || e.name == output.names.optimizer ||
               e.end_ns <= e.start_ns;
    });
    for (std::vector<Event>* lane : {&events, &output.events->to_host, &output.events->to_device}) {
        for (Event& event : *lane) {
            event.step = *output.bucket_step;
            if (event.microbatch >= 0) {
                event.microbatch += output.first_microbatch;
            }
        }
    }
    for (WorkloadEntry& entry : workload) {
        entry.step = *output.bucket_step;
        entry.microbatch += output.first_microbatch;
    }
}

}  // namespace

bool copies_to_host(const SimulationConfig& config) {
    return config.layout.offload_checkpoints || (config.offload && config.attention_chunk > 0);
}

RunOutput open_output(store::TraceWriter* out, const SimulationConfig& config) {
    RunOutput output;
    output.writer = out;
    if (out == nullptr) {
        return output;
    }
    output.lanes = add_simulated_ranks(*out, config.layout.grid, copies_to_host(config));
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
    names.cp_all_to_all = out->intern(kCpAllToAll);
    names.zero_all_gather = out->intern(kZeroAllGather);
    names.zero_reduce_scatter = out->intern(kZeroReduceScatter);
    names.offload_wait = out->intern(range_name::kOffloadWait);
    names.memcpy_to_host = out->intern(range_name::kMemcpyToHost);
    names.memcpy_to_device = out->intern(range_name::kMemcpyToDevice);
    output.events = std::make_unique<RankEvents>(output.names, *out);
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
                 const SimulationConfig& config, std::int64_t optimizer_ns,
                 SimulationResult& result) {
    const parallel::GridShape& grid = config.layout.grid;
    const EventNames& names = output.names;
    RankEvents& events = *output.events;
    const ReplicaPlay& play = played.plays[static_cast<std::size_t>(d)];
    const std::int64_t step_start = played.step.start_ns;
    const auto stage = static_cast<std::int16_t>(s);
    events.events.clear();
    events.to_host.clear();
    events.to_device.clear();
    events.range(names.step, Category::schedule, step_start, played.end_ns, plan.step, -1, stage,
                 Phase::none);
    for (const parallel::ReplayedOp& op : play.replay.stages[static_cast<std::size_t>(s)]) {
        const std::size_t index = group_index(s, op.microbatch, play.microbatches, op.kind);
        add_pass_events(
            events, op, step_start, play.groups[index],
            play.ranks[index * static_cast<std::size_t>(grid.cp) + static_cast<std::size_t>(c)],
            config, plan.step, s);
    }
    const std::int64_t pipeline_end =
        step_start + play.replay.stage_end_ns[static_cast<std::size_t>(s)];
    const std::int64_t reduced = played.reduce_end[static_cast<std::size_t>(s)];
    if (grid.dp * grid.cp > 1) {
        // ZeRO-3's reduction is a reduce-scatter (sim_config.cpp, config_costs), as is the
        // distributed optimizer's where the gather waits for the next step. With the
        // reduction overlapped, the range is what the buckets had left at the pipeline's end.
        const bool scatters =
            config.layout.zero_stage >= 3 || gathers_parameters_at_step_start(config);
        events.range(scatters ? names.zero_reduce_scatter : names.dp_all_reduce,
                     Category::communication, pipeline_end, reduced, plan.step, -1, stage,
                     Phase::none, played.reduce_bytes[static_cast<std::size_t>(s)]);
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
        const auto on_lane = [&](std::vector<Event>& lane_events,
                                 const std::vector<LaneId>& lanes) {
            if (lane_events.empty()) {
                return;
            }
            const LaneId lane = lanes[static_cast<std::size_t>(rank)];
            for (Event& event : lane_events) {
                event.lane = lane;
            }
            output.writer->add_events(lane_events.data(), lane_events.size());
            result.events += static_cast<std::int64_t>(lane_events.size());
        };
        on_lane(events.events, output.lanes.main);
        on_lane(events.to_host, output.lanes.to_host);
        on_lane(events.to_device, output.lanes.to_device);
        for (WorkloadEntry entry : placed) {
            entry.rank = rank;
            output.writer->add_workload(entry);
        }
        result.workload_rows += static_cast<std::int64_t>(placed.size());
    }
}

SimulatedLanes add_simulated_ranks(store::TraceWriter& out, const parallel::GridShape& grid,
                                   bool host_copies) {
    SimulatedLanes lanes;
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
        lanes.main.push_back(out.add_lane(rank, LaneKind::host_thread, "main"));
        if (host_copies) {
            lanes.to_host.push_back(out.add_lane(rank, LaneKind::host_thread, "stream offload"));
            lanes.to_device.push_back(out.add_lane(rank, LaneKind::host_thread, "stream prefetch"));
        }
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

}  // namespace fulcrum::sim
