#include "core/import/nsys/megatron.h"

#include <array>

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

MegatronThread megatron_1f1b(const std::vector<P2pRange>& calls) {
    MegatronThread thread;
    for (const P2pRange& call : calls) {
        if (call.call == P2pCall::send_forward_recv_forward ||
            call.call == P2pCall::send_backward_recv_backward ||
            call.call == P2pCall::send_forward_backward_recv_forward_backward) {
            thread.interleaved = true;
            return thread;
        }
    }
    std::size_t begin = 0;
    for (std::size_t i = 1; i <= calls.size(); ++i) {
        const bool starts_step = i == calls.size() || (calls[i].call == P2pCall::recv_forward &&
                                                       calls[i - 1].call == P2pCall::send_backward);
        if (starts_step && begin < i) {
            thread.steps.push_back(step_of(calls, begin, i));
            begin = i;
        }
    }
    return thread;
}

std::optional<Warmup> warmup_of(const MegatronThread& thread) {
    std::optional<Warmup> found;
    for (const MegatronStep& step : thread.steps) {
        if (!step.consistent)
            continue;
        const Warmup warmup{step.warmup, step.microbatches, step.warmup == step.microbatches};
        if (found && (found->forwards != warmup.forwards || found->saturated != warmup.saturated))
            return std::nullopt;
        if (!found)
            found = warmup;
    }
    return found;
}

}  // namespace fulcrum::importer::megatron
