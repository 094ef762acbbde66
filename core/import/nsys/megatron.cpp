#include "core/import/nsys/megatron.h"

#include <algorithm>
#include <array>
#include <iterator>

namespace fulcrum::importer::megatron {

namespace {

using Kind = structure::PipelineAction::Kind;

bool feeds_forward(P2pCall call) {
    return call == P2pCall::recv_forward || call == P2pCall::send_backward_recv_forward;
}
bool ends_forward(P2pCall call) {
    return call == P2pCall::send_forward || call == P2pCall::send_forward_recv_backward;
}
bool feeds_backward(P2pCall call) {
    return call == P2pCall::send_forward_recv_backward || call == P2pCall::recv_backward;
}
bool ends_backward(P2pCall call) {
    return call == P2pCall::send_backward || call == P2pCall::send_backward_recv_forward;
}

// Whether `next` may follow `call` within one step of the 1F1B order (megatron.h): with a pass
// between them, or (warm-up into cool-down, cool-down) without.
bool may_follow(P2pCall call, P2pCall next) {
    if ((feeds_forward(call) && ends_forward(next)) ||
        (feeds_backward(call) && ends_backward(next)))
        return true;
    if (call == P2pCall::send_forward)
        return next == P2pCall::recv_forward || next == P2pCall::recv_backward;
    if (call == P2pCall::send_backward)
        return next == P2pCall::recv_backward;
    return false;
}

MegatronStep step_of(const std::vector<P2pRange>& calls, std::size_t begin, std::size_t end) {
    MegatronStep step;
    step.start_ns = calls[begin].start_ns;
    step.end_ns = calls[begin].end_ns;
    std::int32_t forwards = 0, backwards = 0;
    for (std::size_t i = begin; i < end; ++i) {
        const P2pRange& call = calls[i];
        step.end_ns = std::max(step.end_ns, call.end_ns);
        // The hand-over: a call that receives is named for what it receives.
        structure::RecoveredRange handover{call.start_ns, call.end_ns, Kind::recv_activations, 0,
                                           0};
        switch (call.call) {
            case P2pCall::recv_forward:
            case P2pCall::send_backward_recv_forward:
                handover.kind = Kind::recv_activations;
                handover.microbatch = forwards;
                break;
            case P2pCall::recv_backward:
            case P2pCall::send_forward_recv_backward:
                handover.kind = Kind::recv_gradients;
                handover.microbatch = backwards;
                break;
            case P2pCall::send_forward:
                handover.kind = Kind::send_activations;
                handover.microbatch = std::max(forwards - 1, 0);
                ++step.warmup;
                break;
            case P2pCall::send_backward:
                handover.kind = Kind::send_gradients;
                handover.microbatch = std::max(backwards - 1, 0);
                break;
            default:
                step.consistent = false;
                break;
        }
        step.calls.push_back(handover);
        if (i + 1 == end)
            break;
        const P2pRange& next = calls[i + 1];
        if (!may_follow(call.call, next.call))
            step.consistent = false;
        if (feeds_forward(call.call) && ends_forward(next.call)) {
            step.passes.push_back({call.start_ns, next.start_ns, Kind::forward, forwards++, 0});
        } else if (feeds_backward(call.call) && ends_backward(next.call)) {
            step.passes.push_back({call.start_ns, next.start_ns, Kind::backward, backwards++, 0});
        }
    }
    step.microbatches = forwards;
    if (forwards == 0 || forwards != backwards)
        step.consistent = false;
    return step;
}

// One step of the interleaved schedule with overlap_p2p_comm (megatron.h): each pass lies
// between two calls, its kind told by the second; the first send_backward_recv_backward
// followed by a send_forward_recv_forward only posts the first backward's receive at the end
// of the warm-up. Passes run from the end of the call before (whose receive was posted without
// waiting: the pass waits on its stream, where no range shows it) to the start of the next.
MegatronStep interleaved_step_of(const std::vector<P2pRange>& calls, std::size_t begin,
                                 std::size_t end, const std::vector<PhaseRange>& phases) {
    MegatronStep step;
    step.start_ns = calls[begin].start_ns;
    // The phase the step's first call runs in begins the step.
    for (const PhaseRange& phase : phases) {
        if (phase.first <= step.start_ns && step.start_ns < phase.second) {
            step.start_ns = phase.first;
            break;
        }
    }
    step.end_ns = calls[begin].end_ns;
    std::int32_t forwards = 0, backwards = 0;
    bool prefetched = false;
    for (std::size_t i = begin; i < end; ++i) {
        const P2pRange& call = calls[i];
        step.end_ns = std::max(step.end_ns, call.end_ns);
        structure::RecoveredRange handover{call.start_ns, call.end_ns, Kind::recv_activations, 0,
                                           0};
        bool closes = i > begin;  // a pass lies between the call before and this one
        switch (call.call) {
            case P2pCall::recv_forward:
                handover.kind = Kind::recv_activations;
                step.consistent = step.consistent && i == begin;
                closes = false;
                break;
            case P2pCall::send_forward_recv_forward:
                handover.kind = Kind::send_activations;
                handover.microbatch = forwards;
                break;
            case P2pCall::send_backward_recv_backward:
                if (!prefetched && i + 1 < end &&
                    calls[i + 1].call == P2pCall::send_forward_recv_forward) {
                    prefetched = true;
                    step.warmup = forwards;
                    handover.kind = Kind::recv_gradients;  // the first backward's
                    closes = false;
                } else {
                    handover.kind = Kind::send_gradients;
                    handover.microbatch = backwards;
                }
                break;
            default:
                step.consistent = false;
                closes = false;
                break;
        }
        if (closes) {
            std::int64_t from = calls[i - 1].end_ns;
            const std::int64_t to = std::max(from, call.start_ns);
            // A phase that begins between the two calls holds the pass: it starts there.
            const auto after = std::upper_bound(
                phases.begin(), phases.end(), to,
                [](std::int64_t at, const PhaseRange& phase) { return at < phase.first; });
            if (after != phases.begin() && std::prev(after)->first > from)
                from = std::prev(after)->first;
            if (call.call == P2pCall::send_forward_recv_forward) {
                step.passes.push_back({from, to, Kind::forward, forwards++, 0});
            } else {
                step.passes.push_back({from, to, Kind::backward, backwards++, 0});
            }
        }
        step.calls.push_back(handover);
    }
    step.microbatches = forwards;
    if (!prefetched)
        step.warmup = forwards;
    if (forwards == 0 || forwards != backwards || calls[begin].call != P2pCall::recv_forward)
        step.consistent = false;
    return step;
}

}  // namespace

std::optional<P2pCall> parse_p2p_range(std::string_view text) {
    static constexpr std::string_view kModule = "p2p_communication.";
    const std::size_t at = text.rfind(kModule);
    if (at == std::string_view::npos)
        return std::nullopt;
    const std::string_view function = text.substr(at + kModule.size());
    struct Name {
        std::string_view function;
        P2pCall call;
    };
    static constexpr std::array<Name, 9> kNames = {{
        {"recv_forward", P2pCall::recv_forward},
        {"recv_backward", P2pCall::recv_backward},
        {"send_forward", P2pCall::send_forward},
        {"send_backward", P2pCall::send_backward},
        {"send_forward_recv_backward", P2pCall::send_forward_recv_backward},
        {"send_backward_recv_forward", P2pCall::send_backward_recv_forward},
        {"send_forward_recv_forward", P2pCall::send_forward_recv_forward},
        {"send_backward_recv_backward", P2pCall::send_backward_recv_backward},
        {"send_forward_backward_recv_forward_backward",
         P2pCall::send_forward_backward_recv_forward_backward},
    }};
    for (const Name& name : kNames) {
        if (function == name.function)
            return name.call;
    }
    return std::nullopt;
}

bool is_schedule_phase(std::string_view text) {
    static constexpr std::string_view kSchedule = "forward_backward_pipelining_with_interleaving.";
    const std::size_t at = text.rfind(kSchedule);
    if (at == std::string_view::npos)
        return false;
    const std::string_view suffix = text.substr(at + kSchedule.size());
    return suffix == "warmup" || suffix == "steady" || suffix == "cooldown" || suffix == "misc";
}

MegatronThread megatron_passes(const std::vector<P2pRange>& calls,
                               const std::vector<PhaseRange>& phases) {
    MegatronThread thread;
    for (const P2pRange& call : calls) {
        if (call.call == P2pCall::send_forward_backward_recv_forward_backward) {
            thread.schedule = MegatronSchedule::interleaved_without_overlap;
            return thread;
        }
        if (call.call == P2pCall::send_forward_recv_forward ||
            call.call == P2pCall::send_backward_recv_backward) {
            thread.schedule = MegatronSchedule::interleaved;
        }
    }
    const bool interleaved = thread.schedule == MegatronSchedule::interleaved;
    std::size_t begin = 0;
    for (std::size_t i = 1; i <= calls.size(); ++i) {
        const bool starts_step =
            i == calls.size() || (calls[i].call == P2pCall::recv_forward &&
                                  (interleaved || calls[i - 1].call == P2pCall::send_backward));
        if (starts_step && begin < i) {
            thread.steps.push_back(interleaved ? interleaved_step_of(calls, begin, i, phases)
                                               : step_of(calls, begin, i));
            begin = i;
        }
    }
    return thread;
}

std::optional<Warmup> warmup_of(const MegatronThread& thread) {
    if (thread.schedule == MegatronSchedule::interleaved_without_overlap)
        return std::nullopt;
    std::optional<Warmup> found;
    for (const MegatronStep& step : thread.steps) {
        if (!step.consistent)
            continue;
        const Warmup warmup{step.warmup, step.microbatches, step.warmup == step.microbatches,
                            thread.schedule};
        if (found &&
            (found->forwards != warmup.forwards || found->microbatches != warmup.microbatches))
            return std::nullopt;
        if (!found)
            found = warmup;
    }
    return found;
}

std::optional<std::pair<std::int32_t, std::int32_t>> interleaved_place(std::int32_t ordinal,
                                                                       bool backward,
                                                                       std::int32_t microbatches,
                                                                       std::int32_t chunks,
                                                                       std::int32_t group) {
    const auto order = structure::interleaved_forward_order(microbatches, chunks, group);
    if (ordinal < 0 || static_cast<std::size_t>(ordinal) >= order.size())
        return std::nullopt;
    const auto [microbatch, chunk] = order[static_cast<std::size_t>(ordinal)];
    return std::pair{microbatch, backward ? chunks - 1 - chunk : chunk};
}

}  // namespace fulcrum::importer::megatron
