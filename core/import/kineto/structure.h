// Structure recovery for PyTorch profiler traces (docs/import.md, "The 4D structure of a
// PyTorch run"): what Fulcrum's own annotations say outright — each rank's place in the
// DP × TP × PP × CP grid, and which host time was which micro-batch's forward or backward pass
// on which stage — read from what a torch.distributed run's trace carries anyway:
//   - the grid from `distributedInfo.pg_config`, the process groups a rank belongs to, by the
//     names frameworks give them: torch's DeviceMesh (torchtitan) `mesh_pp`, `mesh_dp`,
//     `mesh_tp`, `mesh_cp`, `mesh_dp_shard`, `mesh_dp_replicate`; Megatron-LM's
//     `PIPELINE_MODEL_PARALLEL_GROUP`, `DATA_PARALLEL_GROUP`, `TENSOR_MODEL_PARALLEL_GROUP`,
//     `CONTEXT_PARALLEL_GROUP` (megatron/core/parallel_state.py). Without such names, a run
//     whose only group is the world and whose ranks send to each other is one pipeline over
//     the world, stage = rank (torch.distributed.pipelining's default);
//   - the passes from torch.distributed.pipelining's action labels (`PP:1F0`: stage 1's
//     forward of micro-batch 0; B, I and W its full, input-gradient and weight-gradient
//     backward; SEND_F, RECV_F, SEND_B, RECV_B its hand-overs), which its schedule runtime
//     (the interleaved and zero-bubble schedules) records; and, where a schedule records none
//     (GPipe, 1F1B), from the pipeline sends and receives (`c10d::send`, `c10d::recv_` with
//     their peer) and the autograd engine's work (`autograd::engine::evaluate_function: …`)
//     between them, micro-batches numbered in the order each stage runs them;
//   - a rank without a pipeline (pp 1) from its autograd work alone: each backward a
//     micro-batch, the work before it its forward.
// Each rule that fires is said in the import log with how sure it is; when none does, the run
// imports as before and says what could not be derived.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/trace/model.h"

namespace fulcrum::importer::structure {

// One process group of `distributedInfo.pg_config`: its name, description and member ranks.
struct ProcessGroup {
    std::string name;
    std::string desc;
    std::vector<std::int32_t> ranks;
};

// The pg_config array of a distributedInfo member's text; groups that do not parse are left out.
std::vector<ProcessGroup> parse_process_groups(std::string_view distributed_info);

// Degrees of the four dimensions, and a rank's index along each (core/parallel/grid.h's
// GridShape and GridCoordinates, which this layer does not see: scripts/check-layers).
struct Degrees {
    int dp = 1, tp = 1, pp = 1, cp = 1;
    friend bool operator==(const Degrees&, const Degrees&) = default;
};
struct Coordinates {
    int dp = 0, tp = 0, pp = 0, cp = 0;
    friend bool operator==(const Coordinates&, const Coordinates&) = default;
};

// A rank's place in the grid, and how it was found.
struct RecoveredGrid {
    bool found = false;
    Degrees grid;
    Coordinates coordinates;
    // The pipeline group's ranks in stage order (one rank when pp = 1).
    std::vector<std::int32_t> pipeline;
    std::string rule;  // for the import log: which groups, named how
};

// `rank`'s grid from its process groups; `sends_to_others`: its trace holds pipeline sends or
// receives (the fallback of one pipeline over the world needs them). A process in no
// distributed world (rank 0, no groups, world size unknown or 1, no sends) is the grid of one.
RecoveredGrid recover_grid(std::int32_t rank, std::int32_t world_size,
                           const std::vector<ProcessGroup>& groups, bool sends_to_others);

// One of torch.distributed.pipelining's action labels, `PP:<stage><action><micro-batch>`
// (torch/distributed/pipelining/schedules.py, _Action's text, recorded by the schedule runtime
// of the multi-stage schedules), or ScheduleGPipe's `Forward <micro-batch>` and
// `Backward <micro-batch>`.
struct PipelineAction {
    enum class Kind {
        forward,
        backward,         // B: the whole backward
        backward_input,   // I: the input gradients (a zero-bubble schedule's B)
        backward_weight,  // W: the weight gradients
        send_activations,
        recv_activations,
        send_gradients,
        recv_gradients,
    };
    Kind kind = Kind::forward;
    // The model chunk's global stage, as torch numbers it; -1: the rank's own (GPipe's labels).
    std::int32_t stage_index = 0;
    std::int32_t microbatch = 0;
};
std::optional<PipelineAction> parse_pipeline_action(std::string_view name);

// The Fulcrum range an action becomes (docs/annotations.md's names) and its phase.
std::string_view action_range_name(PipelineAction::Kind kind);
Phase action_phase(PipelineAction::Kind kind);
bool action_is_communication(PipelineAction::Kind kind);

// A host operator of the thread that runs the schedule, as pass recovery sees it.
struct HostOp {
    enum class Kind { compute, autograd, send, recv, collective, optimizer };
    std::int64_t start_ns = 0, end_ns = 0;
    Kind kind = Kind::compute;
    std::int32_t peer = -1;  // send and recv: the other rank
};

// What a cpu_op or user_annotation of that name is to pass recovery; `peer_input` is the third
// of its "Concrete Inputs" (c10d::send's dstRank, c10d::recv_'s srcRank).
HostOp::Kind host_op_kind(std::string_view name);

// A pass or hand-over found from the sends and the autograd work (no labels).
struct RecoveredRange {
    std::int64_t start_ns = 0, end_ns = 0;
    PipelineAction::Kind kind = PipelineAction::Kind::forward;
    std::int32_t microbatch = 0;
    std::int32_t chunk = 0;  // the rank's model chunk (interleaved_passes), else 0
};

// The passes of one step on one stage from its thread's operators (any order, nested or not),
// `prev` and `next` the neighbour stages' ranks as the sends name them (-1: none): the
// top-level operators, and the thread's time between them from `window_start` (INT64_MIN: the
// first operator), split into runs of forward work (neither autograd nor communication) and
// of autograd work. An autograd run is a backward pass; a forward run is a pass when its
// activations were received (a stage with a previous one) and it ends in their send (a stage
// with a next one); without either neighbour (no pipeline), when a backward follows it.
// Passes are numbered in order per phase (GPipe and 1F1B run the
// micro-batches in order); a receive from `prev` hands over activations, a send to it
// gradients, `next` the other way round, numbered likewise. An operator without its peer (-1:
// a profile without record_shapes) goes to the stage's one neighbour, or on a middle stage
// by the work around it: a send after a forward to `next`, after a backward to `prev`; a
// receive before a backward from `next`, else from `prev`. `consistent` is false when the
// forward and backward counts differ (then nothing is kept).
struct StepPasses {
    std::vector<RecoveredRange> ranges;
    std::int32_t forwards = 0, backwards = 0;
    bool consistent = true;
};
StepPasses passes_from_sends(std::vector<HostOp> ops, std::int32_t prev, std::int32_t next,
                             std::int64_t window_start = INT64_MIN);

// gloo's receives wait where the trace shows no operator: `c10d::recv_` only posts the receive,
// and its request (`gloo:recv`, a user_annotation that starts inside it) ends when the wait on
// it returns. Each receive of `step` whose request (`requests`: the thread's [start, end], by
// start) outlasts it is extended to the request's end, and the pass it feeds — the next pass,
// a forward after activations, a backward after gradients — starts with it, so that the wait
// is the pass's pipeline wait as fulcrum-train's receives are (docs/analyses.md §2). A
// receive whose request ends after that pass, or that feeds no pass, is left as it is.
// Returns how many receives were extended; the ranges end sorted by start.
std::int64_t wait_for_receives(StepPasses& step,
                               const std::vector<std::pair<std::int64_t, std::int64_t>>& requests);

// The (micro-batch, model chunk) of each forward of an interleaved 1F1B stage, in the order it
// runs them: micro-batches in groups of `group` a chunk, chunk after chunk (Megatron-LM's
// get_schedule_table, megatron/core/pipeline_parallel/schedules.py; torch's
// ScheduleInterleaved1F1B runs the same order with groups of its micro-batches a round). The
// k-th backward is the k-th forward's micro-batch on chunk chunks − 1 − its chunk.
std::vector<std::pair<std::int32_t, std::int32_t>> interleaved_forward_order(
    std::int32_t microbatches, std::int32_t chunks, std::int32_t group);

// The passes of one step of an interleaved 1F1B stage that wrote no labels (Megatron-LM's
// forward_backward_pipelining_with_interleaving, whose passes carry no record_function; its
// sends are posted in batches after both passes of a steady-state pair, so they do not mark
// the forwards as 1F1B's do), `stage` of `stages`: each run of autograd work a backward; of
// the runs of other work before the last backward, those holding the most of the thread's
// operators (`operator_starts`, sorted: every cpu_op the thread ran, nested or not), as many
// as the backwards, its forwards: what lies between a pass and a send or receive is an
// operator or two (the receive's buffer), a forward every layer's. Neither the tail of a
// backward (from its last operator to its send) nor the work before an optimizer's operator
// (zero_grad) is a forward. The order of forwards and backwards then tells the chunks: an
// interleaved stage runs 2 (stages − stage − 1) + (chunks − 1) · group forwards before its
// first backward (Megatron-LM's get_pp_rank_microbatches), with `group` the stages
// (Megatron-LM's default) or torch's micro-batches a round, then a forward and a backward at
// a time, then the rest of the backwards. Found when exactly one number of chunks (2 or more)
// gives the order seen; the passes then carry their micro-batch and chunk by
// interleaved_forward_order. The hand-overs are not told apart (`ranges` holds passes only).
struct InterleavedPasses {
    std::vector<RecoveredRange> ranges;
    std::int32_t chunks = 0, microbatches = 0;
    bool found = false;
};
InterleavedPasses interleaved_passes(std::vector<HostOp> ops,
                                     const std::vector<std::int64_t>& operator_starts,
                                     std::int32_t stage, std::int32_t stages,
                                     std::int64_t window_start = INT64_MIN);

}  // namespace fulcrum::importer::structure
