// Megatron-LM's pipeline in an Nsight Systems export (docs/import.md, "The pipeline of a
// Megatron-LM run"). Run with `--nvtx-ranges`, Megatron-LM wraps each of its
// pipeline hand-overs in an NVTX range named after the function
// (megatron/core/pipeline_parallel/p2p_communication.py, `@nvtx_decorator()`: the module's path
// and the function's name, `megatron.core.pipeline_parallel.p2p_communication.recv_forward`),
// on every stage, even where the call sends or receives nothing (the first stage's
// recv_forward, the last stage's send_forward). Its passes carry no range, but the order of
// the calls in forward_backward_pipelining_without_interleaving
// (megatron/core/pipeline_parallel/schedules.py) places them:
//
//   warm-up   W × [recv_forward, F, send_forward]          W = min(p − s − 1, m)
//             recv_forward                                  (when m − W > 0)
//   steady    (m − W) × [F, send_forward_recv_backward, B, send_backward_recv_forward]
//             (the last of them ends in send_backward instead)
//   cool-down W × [recv_backward, B, send_backward]
//
// so a forward lies between a call that receives activations and the next that sends them, a
// backward between a call that receives gradients and the next that sends them, and W — the
// forwards a stage sends with plain send_forward — is p − s − 1: the stage s follows once the
// pipeline's depth p is known, which only the job's files together tell (the stage with the
// most warm-up forwards is the first).
//
// The interleaved schedule (forward_backward_pipelining_with_interleaving), with Megatron-LM's
// default `overlap_p2p_comm` (on unless --no-overlap-p2p-communication), follows each pass with
// one call that posts its hand-over and the next receive without waiting:
//
//   warm-up   recv_forward, W × [F, send_forward_recv_forward],
//             send_backward_recv_backward (the first backward's gradients; when m·v − W > 0)
//   steady    (m·v − W) × [F, send_forward_recv_forward, B, send_backward_recv_backward]
//   cool-down W × [B, send_backward_recv_backward]
//   W = min(2 (p − s − 1) + (v − 1) · g, m·v)   (get_pp_rank_microbatches; g the micro-batches
//                                               a group, microbatch_group_size_per_vp_stage)
//
// so each pass lies between two calls, a forward where the second is send_forward_recv_forward,
// a backward where it is send_backward_recv_backward (but the warm-up's last, which follows no
// pass); the k-th forward runs the k-th (micro-batch, chunk) of get_schedule_table, the k-th
// backward the same micro-batch on chunk v − 1 − that chunk (structure::
// interleaved_forward_order). The pipeline's depth, the chunks and the stages follow from every
// rank's warm-up with g = p (Megatron-LM's default): the warm-ups span 2 (p − 1) between the
// first stage and the last, and the last stage's is (v − 1) · p. Without the overlap, the
// steady state runs a forward and a backward between two send_forward_backward_recv_forward_
// backward calls, and its passes are not told from these ranges alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "core/import/kineto/structure.h"

namespace fulcrum::importer::megatron {

// The hand-over functions of Megatron-LM's P2PCommunicator (and of the module-level functions
// that preceded it, named alike).
enum class P2pCall {
    recv_forward,
    recv_backward,
    send_forward,
    send_backward,
    send_forward_recv_backward,
    send_backward_recv_forward,
    // The interleaved schedule's.
    send_forward_recv_forward,
    send_backward_recv_backward,
    send_forward_backward_recv_forward_backward,
};

// The call an NVTX range's text names: `…p2p_communication.<function>`.
std::optional<P2pCall> parse_p2p_range(std::string_view text);

// Whether an NVTX range's text is one of the interleaved schedule's phases
// (`nvtx_range_push(suffix="warmup")` and "steady", "cooldown", "misc" in
// forward_backward_pipelining_with_interleaving: the caller's path and the suffix). A pass
// starts no earlier than the phase it runs in, and a step no later than the phase its first
// call runs in, so that the ranges recovered nest in Megatron-LM's own.
bool is_schedule_phase(std::string_view text);

// The SQL LIKE pattern that selects both kinds of range (the survey reads only them).
inline constexpr std::string_view kP2pLike = "%pipeline_parallel.%";

// A phase range's [start, end].
using PhaseRange = std::pair<std::int64_t, std::int64_t>;

struct P2pRange {
    std::int64_t start_ns = 0, end_ns = 0;
    P2pCall call = P2pCall::recv_forward;
};

// One training step of one stage: its passes (forward, backward) with their micro-batches, and
// each call as the hand-over it is — a call that receives is named for what it receives (its
// time is the wait for it), a call that only sends for what it sends. `calls[i]` is the
// hand-over of the step's i-th call. Under the interleaved schedule a pass's or hand-over's
// `microbatch` is its ordinal among the step's forwards (or backwards), which the job's
// micro-batches and chunks turn into a micro-batch and a chunk (interleaved_place).
struct MegatronStep {
    std::int64_t start_ns = 0;  // its first call's start (interleaved: its warm-up phase's)
    std::int64_t end_ns = 0;    // its last call's end
    std::vector<structure::RecoveredRange> passes;
    std::vector<structure::RecoveredRange> calls;
    std::int32_t warmup = 0;        // forwards before the first backward's hand-over
    std::int32_t microbatches = 0;  // forwards: m, or m·v under the interleaved schedule
    bool consistent = true;  // the calls follow the order above, as many forwards as backwards
};

enum class MegatronSchedule {
    one_f_one_b,
    interleaved,                  // with overlap_p2p_comm, Megatron-LM's default
    interleaved_without_overlap,  // not derived
};

// A thread's calls (sorted by start) split into steps. 1F1B: a step starts with a
// recv_forward that follows a send_backward (or the thread's first call); interleaved: with
// each recv_forward. Under interleaved_without_overlap no step is derived.
struct MegatronThread {
    std::vector<MegatronStep> steps;
    MegatronSchedule schedule = MegatronSchedule::one_f_one_b;
};
// `phases`: the thread's phase ranges (is_schedule_phase), by start.
MegatronThread megatron_passes(const std::vector<P2pRange>& calls,
                               const std::vector<PhaseRange>& phases = {});

// A stage's warm-up over its consistent steps: the one W they agree on, with the forwards of a
// step and whether every forward was a warm-up one (W = all: the stage's place is not told).
// nullopt: no consistent step, or steps that disagree.
struct Warmup {
    std::int32_t forwards = 0;
    std::int32_t microbatches = 0;  // forwards a step
    bool saturated = false;
    MegatronSchedule schedule = MegatronSchedule::one_f_one_b;
};
std::optional<Warmup> warmup_of(const MegatronThread& thread);

// The (micro-batch, chunk) of an interleaved step's `ordinal`-th forward (or backward) in a job
// of `microbatches` a step, `chunks` model chunks a stage and `group` micro-batches a group;
// nullopt past the step's passes.
std::optional<std::pair<std::int32_t, std::int32_t>> interleaved_place(std::int32_t ordinal,
                                                                       bool backward,
                                                                       std::int32_t microbatches,
                                                                       std::int32_t chunks,
                                                                       std::int32_t group);

}  // namespace fulcrum::importer::megatron
