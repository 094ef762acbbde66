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
// The interleaved schedule (forward_backward_pipelining_with_interleaving) hands over with
// send_forward_recv_forward, send_backward_recv_backward and
// send_forward_backward_recv_forward_backward, a forward and a backward between two calls in
// its steady state: its passes are not told from these ranges alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
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

// The SQL LIKE pattern that selects such ranges (the survey reads only them).
inline constexpr std::string_view kP2pLike = "%p2p_communication.%";

struct P2pRange {
    std::int64_t start_ns = 0, end_ns = 0;
    P2pCall call = P2pCall::recv_forward;
};

// One training step of one stage: its passes (forward, backward) with their micro-batches, and
// each call as the hand-over it is — a call that receives is named for what it receives (its
// time is the wait for it), a call that only sends for what it sends. `calls[i]` is the
// hand-over of the step's i-th call.
struct MegatronStep {
    std::int64_t start_ns = 0;  // its first call's start
    std::int64_t end_ns = 0;    // its last call's end
    std::vector<structure::RecoveredRange> passes;
    std::vector<structure::RecoveredRange> calls;
    std::int32_t warmup = 0;  // forwards sent with a plain send_forward
    std::int32_t microbatches = 0;
    bool consistent = true;  // the calls follow the order above, as many forwards as backwards
};

// A thread's calls (sorted by start) split into steps: a step starts with a recv_forward that
// follows a send_backward (or the thread's first call). `interleaved`: a call only the
// interleaved schedule makes was seen, and no step is derived.
struct MegatronThread {
    std::vector<MegatronStep> steps;
    bool interleaved = false;
};
MegatronThread megatron_1f1b(const std::vector<P2pRange>& calls);

// A stage's warm-up over its consistent steps: the one W they agree on, with whether every
// forward of theirs was a warm-up one (W = m: the stage is at least p − 1 − m deep, not told
// exactly). nullopt: no consistent step, or steps that disagree.
struct Warmup {
    std::int32_t forwards = 0;
    std::int32_t microbatches = 0;
    bool saturated = false;
};
std::optional<Warmup> warmup_of(const MegatronThread& thread);

}  // namespace fulcrum::importer::megatron
