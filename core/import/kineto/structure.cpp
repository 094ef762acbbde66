#include "core/import/kineto/structure.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <charconv>

namespace fulcrum::importer::structure {

std::vector<ProcessGroup> parse_process_groups(std::string_view distributed_info) {
    std::vector<ProcessGroup> groups;
    const auto info = nlohmann::json::parse(distributed_info, nullptr, false);
    if (!info.is_object()) {
        return groups;
    }
    const auto config = info.find("pg_config");
    if (config == info.end() || !config->is_array()) {
        return groups;
    }
    for (const auto& entry : *config) {
        if (!entry.is_object()) {
            continue;
        }
        ProcessGroup group;
        if (const auto name = entry.find("pg_name"); name != entry.end() && name->is_string()) {
            group.name = name->get<std::string>();
        }
        if (const auto desc = entry.find("pg_desc"); desc != entry.end() && desc->is_string()) {
            group.desc = desc->get<std::string>();
        }
        const auto ranks = entry.find("ranks");
        if (ranks == entry.end() || !ranks->is_array()) {
            continue;
        }
        for (const auto& rank : *ranks) {
            if (rank.is_number_integer()) {
                group.ranks.push_back(rank.get<std::int32_t>());
            }
        }
        if (!group.ranks.empty()) {
            groups.push_back(std::move(group));
        }
    }
    return groups;
}

namespace {

enum class Dim { dp, tp, pp, cp, dp_shard, dp_replicate };

// A group's dimension by the name its framework gives it.
std::optional<Dim> dimension_of(std::string_view desc) {
    struct Name {
        std::string_view desc;
        Dim dim;
    };
    static constexpr std::array<Name, 10> kNames = {{
        // torch's DeviceMesh (torchtitan): "mesh_" and the mesh dimension's name.
        {"mesh_pp", Dim::pp},
        {"mesh_dp", Dim::dp},
        {"mesh_tp", Dim::tp},
        {"mesh_cp", Dim::cp},
        {"mesh_dp_shard", Dim::dp_shard},
        {"mesh_dp_replicate", Dim::dp_replicate},
        // Megatron-LM (megatron/core/parallel_state.py, group_desc).
        {"PIPELINE_MODEL_PARALLEL_GROUP", Dim::pp},
        {"DATA_PARALLEL_GROUP", Dim::dp},
        {"TENSOR_MODEL_PARALLEL_GROUP", Dim::tp},
        {"CONTEXT_PARALLEL_GROUP", Dim::cp},
    }};
    for (const Name& name : kNames) {
        if (desc == name.desc) {
            return name.dim;
        }
    }
    return std::nullopt;
}

}  // namespace

RecoveredGrid recover_grid(std::int32_t rank, std::int32_t world_size,
                           const std::vector<ProcessGroup>& groups, bool sends_to_others) {
    RecoveredGrid out;
    const ProcessGroup* found[6] = {};
    std::string names;
    for (const ProcessGroup& group : groups) {
        const auto dim = dimension_of(group.desc);
        if (!dim || std::find(group.ranks.begin(), group.ranks.end(), rank) == group.ranks.end() ||
            found[static_cast<int>(*dim)] != nullptr) {
            continue;
        }
        found[static_cast<int>(*dim)] = &group;
        names += (names.empty() ? "" : ", ") + group.desc;
    }
    const auto degree_and_index = [&](Dim dim, int& degree, int& index) {
        const ProcessGroup* group = found[static_cast<int>(dim)];
        if (group == nullptr) {
            return false;
        }
        degree = static_cast<int>(group->ranks.size());
        index = static_cast<int>(std::find(group->ranks.begin(), group->ranks.end(), rank) -
                                 group->ranks.begin());
        return true;
    };
    Degrees& grid = out.grid;
    Coordinates& at = out.coordinates;
    bool any = degree_and_index(Dim::pp, grid.pp, at.pp);
    any |= degree_and_index(Dim::tp, grid.tp, at.tp);
    any |= degree_and_index(Dim::cp, grid.cp, at.cp);
    if (!degree_and_index(Dim::dp, grid.dp, at.dp)) {
        // FSDP2's hybrid sharding: the replicas of shards; DP is both together.
        int shard = 1, shard_at = 0, replicas = 1, replica_at = 0;
        const bool sharded = degree_and_index(Dim::dp_shard, shard, shard_at);
        const bool replicated = degree_and_index(Dim::dp_replicate, replicas, replica_at);
        if (sharded || replicated) {
            grid.dp = shard * replicas;
            at.dp = replica_at * shard + shard_at;
            any = true;
        }
    } else {
        any = true;
    }
    if (any) {
        out.found = true;
        out.rule = "process groups " + names;
        if (const ProcessGroup* pipeline = found[static_cast<int>(Dim::pp)]) {
            out.pipeline = pipeline->ranks;
        } else {
            out.pipeline = {rank};
        }
        return out;
    }
    // No group names a dimension: a world that sends to itself is one pipeline, stage = rank.
    if (sends_to_others && world_size > 1 && rank < world_size) {
        out.found = true;
        grid.pp = world_size;
        at.pp = rank;
        for (std::int32_t r = 0; r < world_size; ++r) {
            out.pipeline.push_back(r);
        }
        out.rule =
            "no group names a dimension; pipeline sends between the ranks of the world: one "
            "pipeline over it, stage = rank (torch.distributed.pipelining's default; inferred)";
        return out;
    }
    // One process outside any distributed world (no process group, no world of more than
    // one, no sends): the grid of one rank, whose passes the autograd work still tells. Only
    // the first input: files of several such processes are not one run's ranks.
    if (groups.empty() && world_size <= 1 && !sends_to_others && rank == 0) {
        out.found = true;
        out.pipeline = {rank};
        out.rule =
            "one process, in no distributed world (no process group, no world size "
            "above 1): the grid of one rank";
    }
    return out;
}

namespace {

bool read_int(std::string_view& text, std::int32_t& value) {
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc{} || end == text.data() || value < 0) {
        return false;
    }
    text.remove_prefix(static_cast<std::size_t>(end - text.data()));
    return true;
}

}  // namespace

std::optional<PipelineAction> parse_pipeline_action(std::string_view name) {
    PipelineAction action;
    // ScheduleGPipe's record_function labels: "Forward 3", "Backward 3", the stage its own.
    for (const auto& [label, kind] :
         {std::pair{std::string_view("Forward "), PipelineAction::Kind::forward},
          std::pair{std::string_view("Backward "), PipelineAction::Kind::backward}}) {
        if (name.starts_with(label)) {
            std::string_view rest = name.substr(label.size());
            if (!read_int(rest, action.microbatch) || !rest.empty()) {
                return std::nullopt;
            }
            action.kind = kind;
            action.stage_index = -1;
            return action;
        }
    }
    constexpr std::string_view prefix = "PP:";
    if (!name.starts_with(prefix)) {
        return std::nullopt;
    }
    name.remove_prefix(prefix.size());
    if (!read_int(name, action.stage_index)) {
        return std::nullopt;
    }
    struct Code {
        std::string_view text;
        PipelineAction::Kind kind;
    };
    // Longest first: SEND_F before F.
    static constexpr std::array<Code, 8> kCodes = {{
        {"SEND_F", PipelineAction::Kind::send_activations},
        {"RECV_F", PipelineAction::Kind::recv_activations},
        {"SEND_B", PipelineAction::Kind::send_gradients},
        {"RECV_B", PipelineAction::Kind::recv_gradients},
        {"F", PipelineAction::Kind::forward},
        {"B", PipelineAction::Kind::backward},
        {"I", PipelineAction::Kind::backward_input},
        {"W", PipelineAction::Kind::backward_weight},
    }};
    for (const Code& code : kCodes) {
        if (!name.starts_with(code.text)) {
            continue;
        }
        std::string_view rest = name.substr(code.text.size());
        if (!read_int(rest, action.microbatch) || !rest.empty()) {
            return std::nullopt;
        }
        action.kind = code.kind;
        return action;
    }
    return std::nullopt;  // UNSHARD, RESHARD, REDUCE_GRAD, WAIT_…: not a pass or a hand-over
}

std::string_view action_range_name(PipelineAction::Kind kind) {
    using Kind = PipelineAction::Kind;
    switch (kind) {
        case Kind::forward:
            return "forward";
        case Kind::backward:
        case Kind::backward_input:
            return "backward";
        case Kind::backward_weight:
            return "weight gradients";
        case Kind::send_activations:
            return "send activations";
        case Kind::recv_activations:
            return "recv activations";
        case Kind::send_gradients:
            return "send gradients";
        case Kind::recv_gradients:
            return "recv gradients";
    }
    return "forward";
}

Phase action_phase(PipelineAction::Kind kind) {
    using Kind = PipelineAction::Kind;
    switch (kind) {
        case Kind::forward:
        case Kind::send_activations:
        case Kind::recv_activations:
            return Phase::forward;
        case Kind::backward_weight:
            return Phase::weight_grad;
        default:
            return Phase::backward;
    }
}

bool action_is_communication(PipelineAction::Kind kind) {
    using Kind = PipelineAction::Kind;
    return kind == Kind::send_activations || kind == Kind::recv_activations ||
           kind == Kind::send_gradients || kind == Kind::recv_gradients;
}

HostOp::Kind host_op_kind(std::string_view name) {
    if (name == "c10d::send") {
        return HostOp::Kind::send;
    }
    if (name == "c10d::recv_") {
        return HostOp::Kind::recv;
    }
    if (name.starts_with("autograd::engine::evaluate_function")) {
        return HostOp::Kind::autograd;
    }
    if (name.starts_with("c10d::") || name.starts_with("_c10d_functional::") ||
        name.starts_with("nccl:") || name.starts_with("gloo:")) {
        return HostOp::Kind::collective;
    }
    if (name.starts_with("Optimizer.")) {
        return HostOp::Kind::optimizer;
    }
    return HostOp::Kind::compute;
}

namespace {

// The thread's time in order from `window_start` (INT64_MIN: its first operator): the
// top-level operators (those no earlier one contains), and the time between them as compute
// work (Python, and the operators left out of `ops`), except between two autograd operators
// and between an autograd operator and a collective (a gradient reduction inside the
// backward). Before a collective in the forward (FSDP's all-gathers, TP's all-reduces) it is
// forward work like any other.
std::vector<HostOp> walk_of(std::vector<HostOp> ops, std::int64_t window_start) {
    std::sort(ops.begin(), ops.end(), [](const HostOp& a, const HostOp& b) {
        return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
    });
    std::vector<HostOp> walk;
    std::int64_t covered_until = INT64_MIN;
    std::int64_t last_end = window_start;
    HostOp::Kind last_kind = HostOp::Kind::optimizer;
    for (const HostOp& op : ops) {
        if (op.start_ns < covered_until) {
            continue;  // inside an earlier operator
        }
        covered_until = op.end_ns;
        const bool inside_backward =
            last_kind == HostOp::Kind::autograd &&
            (op.kind == HostOp::Kind::autograd || op.kind == HostOp::Kind::collective);
        if (last_end != INT64_MIN && op.start_ns > last_end && !inside_backward) {
            walk.push_back({last_end, op.start_ns, HostOp::Kind::compute, -1});
        }
        walk.push_back(op);
        last_end = std::max(last_end, op.end_ns);
        if (op.kind != HostOp::Kind::collective) {
            last_kind = op.kind;
        }
    }
    return walk;
}

}  // namespace

StepPasses passes_from_sends(std::vector<HostOp> ops, std::int32_t prev, std::int32_t next,
                             std::int64_t window_start) {
    using Kind = PipelineAction::Kind;
    StepPasses out;
    std::int32_t counts[8] = {};
    const auto numbered = [&](Kind kind) { return counts[static_cast<int>(kind)]++; };
    // The run of passes' work being gathered: its kind, extent, and whether it may be a pass
    // (a forward on a stage with a previous one needs its activations received first).
    bool open = false, autograd = false;
    std::int64_t run_start = 0, run_end = 0;
    bool activations_in = prev < 0;  // received since the last forward
    // A forward on a stage with a next one is a pass only once its activations are sent; on
    // a rank without a pipeline, only once its backward follows (the work after the last
    // backward, such as FSDP's post-backward callback, is no pass).
    const bool alone = prev < 0 && next < 0;
    std::optional<RecoveredRange> pending;
    const auto add_forward = [&](std::int64_t start, std::int64_t end) {
        out.ranges.push_back({start, end, Kind::forward, numbered(Kind::forward)});
        ++out.forwards;
        activations_in = prev < 0;
    };
    bool last_run_backward = false;  // the last run of work closed was autograd work
    const auto close = [&] {
        if (!open) {
            return;
        }
        open = false;
        last_run_backward = autograd;
        if (autograd) {
            out.ranges.push_back({run_start, run_end, Kind::backward, numbered(Kind::backward)});
            ++out.backwards;
        } else if (activations_in) {
            if (next < 0 && !alone) {
                add_forward(run_start, run_end);
            } else {
                pending = RecoveredRange{run_start, run_end, Kind::forward, 0};
            }
        }
    };
    const std::vector<HostOp> walk = walk_of(std::move(ops), window_start);
    // Whether autograd work (a backward) follows walk[i] before the next send, receive or
    // optimizer step: the time between a receive and a backward (the Python that calls it)
    // does not count, a forward's sends end it.
    const auto backward_follows = [&](std::size_t i) {
        for (std::size_t j = i + 1; j < walk.size(); ++j) {
            switch (walk[j].kind) {
                case HostOp::Kind::autograd:
                    return true;
                case HostOp::Kind::send:
                case HostOp::Kind::recv:
                case HostOp::Kind::optimizer:
                    return false;
                case HostOp::Kind::compute:
                case HostOp::Kind::collective:
                    continue;
            }
        }
        return false;
    };
    for (std::size_t i = 0; i < walk.size(); ++i) {
        const HostOp& op = walk[i];
        switch (op.kind) {
            case HostOp::Kind::collective:
                continue;  // a DP or TP collective inside the passes: neither part nor boundary
            case HostOp::Kind::optimizer:
                close();
                pending.reset();
                continue;
            case HostOp::Kind::send:
            case HostOp::Kind::recv: {
                close();
                const bool send = op.kind == HostOp::Kind::send;
                bool to_prev = op.peer >= 0 && op.peer == prev;
                bool to_next = op.peer >= 0 && op.peer == next;
                if (op.peer < 0 && (prev >= 0 || next >= 0)) {
                    // No peer in the trace (recorded without record_shapes, so without
                    // "Concrete Inputs"): the direction from the work around it. A stage with
                    // one neighbour has one; otherwise a send follows a forward (activations,
                    // to the next stage) or a backward (gradients, to the previous), and a
                    // receive comes before a forward (activations) or a backward (gradients).
                    const bool towards_next = prev < 0   ? true
                                              : next < 0 ? false
                                              : send ? (pending.has_value() || !last_run_backward)
                                                     : backward_follows(i);
                    to_next = towards_next;
                    to_prev = !towards_next;
                }
                if (!to_prev && !to_next) {
                    continue;
                }
                const Kind kind = send ? (to_next ? Kind::send_activations : Kind::send_gradients)
                                       : (to_prev ? Kind::recv_activations : Kind::recv_gradients);
                if (pending && kind == Kind::send_activations) {
                    add_forward(pending->start_ns, pending->end_ns);
                }
                pending.reset();
                if (kind == Kind::recv_activations) {
                    activations_in = true;
                }
                out.ranges.push_back({op.start_ns, op.end_ns, kind, numbered(kind)});
                continue;
            }
            case HostOp::Kind::autograd:
            case HostOp::Kind::compute: {
                const bool is_autograd = op.kind == HostOp::Kind::autograd;
                if (open && autograd != is_autograd) {
                    // Forward work after autograd work starts a new pass; a few operators
                    // before the first autograd one (the loss's gradient seed) stay in the
                    // forward.
                    close();
                }
                if (!open) {
                    if (pending && alone && is_autograd) {
                        add_forward(pending->start_ns, pending->end_ns);
                    }
                    pending.reset();  // work between a forward and its send: not a pass
                    open = true;
                    autograd = is_autograd;
                    run_start = op.start_ns;
                    run_end = op.end_ns;
                }
                run_end = std::max(run_end, op.end_ns);
                continue;
            }
        }
    }
    close();
    out.consistent = out.forwards == out.backwards && out.forwards > 0;
    if (!out.consistent) {
        out.ranges.clear();
    }
    return out;
}

std::int64_t wait_for_receives(StepPasses& step,
                               const std::vector<std::pair<std::int64_t, std::int64_t>>& requests) {
    using Kind = PipelineAction::Kind;
    std::vector<RecoveredRange>& ranges = step.ranges;
    const auto by_start = [&ranges] {
        std::stable_sort(ranges.begin(), ranges.end(),
                         [](const RecoveredRange& a, const RecoveredRange& b) {
                             return a.start_ns < b.start_ns;
                         });
    };
    by_start();
    std::int64_t extended = 0;
    for (std::size_t i = 0; i < ranges.size(); ++i) {
        RecoveredRange& recv = ranges[i];
        if (recv.kind != Kind::recv_activations && recv.kind != Kind::recv_gradients) {
            continue;
        }
        // The request that starts inside the receive.
        const auto request =
            std::lower_bound(requests.begin(), requests.end(), std::pair{recv.start_ns, INT64_MIN});
        if (request == requests.end() || request->first > recv.end_ns ||
            request->second <= recv.end_ns) {
            continue;
        }
        const Kind fed = recv.kind == Kind::recv_activations ? Kind::forward : Kind::backward;
        std::size_t j = i + 1;
        while (j < ranges.size() && action_is_communication(ranges[j].kind)) {
            ++j;
        }
        if (j == ranges.size() || ranges[j].kind != fed || request->second > ranges[j].end_ns) {
            continue;
        }
        recv.end_ns = request->second;
        ranges[j].start_ns = std::min(ranges[j].start_ns, recv.start_ns);
        ++extended;
    }
    by_start();  // a pass that starts with its receive moved earlier
    return extended;
}

std::vector<std::pair<std::int32_t, std::int32_t>> interleaved_forward_order(
    std::int32_t microbatches, std::int32_t chunks, std::int32_t group) {
    std::vector<std::pair<std::int32_t, std::int32_t>> order;
    if (microbatches <= 0 || chunks <= 0 || group <= 0) {
        return order;
    }
    order.reserve(static_cast<std::size_t>(microbatches) * static_cast<std::size_t>(chunks));
    for (std::int32_t first = 0; first < microbatches; first += group) {
        // The last group takes every micro-batch left.
        const std::int32_t last = first + group >= microbatches ? microbatches : first + group;
        for (std::int32_t chunk = 0; chunk < chunks; ++chunk) {
            for (std::int32_t microbatch = first; microbatch < last; ++microbatch) {
                order.emplace_back(microbatch, chunk);
            }
        }
        if (last == microbatches) {
            break;
        }
    }
    return order;
}

InterleavedPasses interleaved_passes(std::vector<HostOp> ops,
                                     const std::vector<std::int64_t>& operator_starts,
                                     std::int32_t stage, std::int32_t stages,
                                     std::int64_t window_start) {
    using Kind = PipelineAction::Kind;
    InterleavedPasses out;
    if (stages < 2 || stage < 0 || stage >= stages) {
        return out;
    }
    // Runs of work: consecutive compute (or autograd) steps of the walk, ended by a send, a
    // receive, an optimizer step or work of the other kind; collectives are neither.
    struct Run {
        std::int64_t start_ns = 0, end_ns = 0;
        bool autograd = false;
        bool after_autograd = false;    // begun where a backward ended, with nothing between
        bool before_optimizer = false;  // ended by an optimizer's operator (zero_grad, step)
        std::int64_t operators = 0;     // the thread's operators that start in it
    };
    std::vector<Run> runs;
    bool open = false;
    for (const HostOp& op : walk_of(std::move(ops), window_start)) {
        if (op.kind == HostOp::Kind::collective) {
            continue;
        }
        if (op.kind != HostOp::Kind::compute && op.kind != HostOp::Kind::autograd) {
            if (open && op.kind == HostOp::Kind::optimizer) {
                runs.back().before_optimizer = true;
            }
            open = false;
            continue;
        }
        const bool autograd = op.kind == HostOp::Kind::autograd;
        if (!open || runs.back().autograd != autograd) {
            const bool after_autograd = open && runs.back().autograd;
            runs.push_back({op.start_ns, op.end_ns, autograd, after_autograd, false, 0});
            open = true;
        }
        runs.back().end_ns = std::max(runs.back().end_ns, op.end_ns);
    }
    std::int64_t backwards = 0;
    std::size_t last_backward = 0;
    for (std::size_t i = 0; i < runs.size(); ++i) {
        if (runs[i].autograd) {
            ++backwards;
            last_backward = i;
        }
    }
    if (backwards == 0) {
        return out;
    }
    // The forwards: of the runs of other work before the last backward, those with the most
    // operators (then the longest), as many as the backwards.
    std::vector<std::size_t> candidates;
    for (std::size_t i = 0; i < last_backward; ++i) {
        Run& run = runs[i];
        if (run.autograd || run.after_autograd || run.before_optimizer) {
            continue;
        }
        run.operators =
            std::lower_bound(operator_starts.begin(), operator_starts.end(), run.end_ns) -
            std::lower_bound(operator_starts.begin(), operator_starts.end(), run.start_ns);
        if (run.operators > 0) {
            candidates.push_back(i);
        }
    }
    if (static_cast<std::int64_t>(candidates.size()) < backwards) {
        return out;
    }
    std::stable_sort(candidates.begin(), candidates.end(), [&](std::size_t a, std::size_t b) {
        const Run& x = runs[a];
        const Run& y = runs[b];
        return x.operators != y.operators ? x.operators > y.operators
                                          : x.end_ns - x.start_ns > y.end_ns - y.start_ns;
    });
    std::vector<bool> forward(runs.size(), false);
    for (std::int64_t k = 0; k < backwards; ++k) {
        forward[candidates[static_cast<std::size_t>(k)]] = true;
    }
    std::vector<bool> seen;  // true: a forward; in the order the stage ran them
    for (std::size_t i = 0; i < runs.size(); ++i) {
        if (runs[i].autograd || forward[i]) {
            seen.push_back(!runs[i].autograd);
        }
    }
    // The order an interleaved stage runs `chunks` chunks of `microbatches` in: its warm-up
    // forwards, then a forward and a backward at a time, then the rest of the backwards.
    const auto order_of = [&](std::int32_t chunks, std::int32_t group) {
        const std::int64_t total = backwards;
        const std::int64_t warmup =
            std::min<std::int64_t>(total, 2 * (stages - stage - 1) + (chunks - 1) * group);
        std::vector<bool> order(static_cast<std::size_t>(warmup), true);
        for (std::int64_t k = warmup; k < total; ++k) {
            order.push_back(true);
            order.push_back(false);
        }
        order.insert(order.end(), static_cast<std::size_t>(warmup), false);
        return order;
    };
    std::int32_t found_chunks = 0, found_group = 0;
    int matches = 0;  // numbers of chunks that give the order seen
    for (std::int32_t chunks = 2; chunks <= backwards; ++chunks) {
        if (backwards % chunks != 0) {
            continue;
        }
        const auto microbatches = static_cast<std::int32_t>(backwards / chunks);
        // Megatron-LM's group (microbatch_group_size_per_vp_stage, the stages by default),
        // else torch's: its micro-batches a round, of max(1, micro-batches ÷ stages) rounds.
        const std::int32_t torch_group = microbatches / std::max(1, microbatches / stages);
        for (const std::int32_t group : {stages, torch_group}) {
            if (order_of(chunks, group) == seen) {
                ++matches;
                found_chunks = chunks;
                found_group = group;
                break;
            }
        }
    }
    if (matches != 1) {
        return out;  // not interleaved, or more than one number of chunks gives this order
    }
    const std::int32_t microbatches = static_cast<std::int32_t>(backwards / found_chunks);
    const auto order = interleaved_forward_order(microbatches, found_chunks, found_group);
    std::size_t forwards_seen = 0, backwards_seen = 0;
    for (std::size_t i = 0; i < runs.size(); ++i) {
        const Run& run = runs[i];
        if (run.autograd) {
            const auto [microbatch, chunk] = order[backwards_seen++];
            out.ranges.push_back(
                {run.start_ns, run.end_ns, Kind::backward, microbatch, found_chunks - 1 - chunk});
        } else if (forward[i]) {
            const auto [microbatch, chunk] = order[forwards_seen++];
            out.ranges.push_back({run.start_ns, run.end_ns, Kind::forward, microbatch, chunk});
        }
    }
    out.chunks = found_chunks;
    out.microbatches = microbatches;
    out.found = true;
    return out;
}

}  // namespace fulcrum::importer::structure
