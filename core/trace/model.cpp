#include "core/trace/model.h"

namespace fulcrum {

std::string_view to_string(LaneKind kind) {
    switch (kind) {
        case LaneKind::host_thread:
            return "host-thread";
        case LaneKind::gpu_stream:
            return "gpu-stream";
    }
    return "unknown";
}

std::string_view to_string(EventKind kind) {
    switch (kind) {
        case EventKind::range:
            return "range";
        case EventKind::mark:
            return "mark";
        case EventKind::kernel:
            return "kernel";
        case EventKind::memcpy:
            return "memcpy";
        case EventKind::memset:
            return "memset";
        case EventKind::sync:
            return "sync";
        case EventKind::collective:
            return "collective";
        case EventKind::api:
            return "api";
    }
    return "unknown";
}

std::string_view to_string(Category category) {
    switch (category) {
        case Category::other:
            return "other";
        case Category::compute:
            return "compute";
        case Category::attention:
            return "attention";
        case Category::communication:
            return "communication";
        case Category::offload:
            return "offload";
        case Category::optimizer:
            return "optimizer";
        case Category::memory:
            return "memory";
        case Category::runtime:
            return "runtime";
        case Category::schedule:
            return "schedule";
    }
    return "unknown";
}

std::string_view to_string(Phase phase) {
    switch (phase) {
        case Phase::none:
            return "";
        case Phase::forward:
            return "forward";
        case Phase::backward:
            return "backward";
        case Phase::weight_grad:
            return "weight-grad";
    }
    return "unknown";
}

std::string_view to_string(CopyKind kind) {
    switch (kind) {
        case CopyKind::none:
            return "";
        case CopyKind::host_to_device:
            return "HtoD";
        case CopyKind::device_to_host:
            return "DtoH";
        case CopyKind::device_to_device:
            return "DtoD";
        case CopyKind::host_to_array:
            return "HtoA";
        case CopyKind::array_to_host:
            return "AtoH";
        case CopyKind::array_to_array:
            return "AtoA";
        case CopyKind::array_to_device:
            return "AtoD";
        case CopyKind::device_to_array:
            return "DtoA";
        case CopyKind::host_to_host:
            return "HtoH";
        case CopyKind::peer_to_peer:
            return "PtoP";
    }
    return "other";
}

std::string_view to_string(MemoryKind kind) {
    switch (kind) {
        case MemoryKind::none:
            return "";
        case MemoryKind::unknown:
            return "Unknown";
        case MemoryKind::pageable:
            return "Pageable";
        case MemoryKind::pinned:
            return "Pinned";
        case MemoryKind::device:
            return "Device";
        case MemoryKind::array:
            return "Array";
        case MemoryKind::managed:
            return "Managed";
        case MemoryKind::device_static:
            return "Device Static";
        case MemoryKind::managed_static:
            return "Managed Static";
    }
    return "Unknown";
}

namespace {

// The names are Kineto's (libkineto's memcpyKindString / memoryKindString), which are
// CUPTI's enum names with the prefix dropped; Nsight Systems uses the same words.
template <typename Kind>
bool kind_named(std::string_view text, Kind first, Kind last, Kind& out) {
    for (int value = static_cast<int>(first); value <= static_cast<int>(last); ++value) {
        const auto kind = static_cast<Kind>(value);
        if (text == to_string(kind)) {
            out = kind;
            return true;
        }
    }
    return false;
}

std::string_view trim(std::string_view text) {
    while (!text.empty() && text.front() == ' ')
        text.remove_prefix(1);
    while (!text.empty() && text.back() == ' ')
        text.remove_suffix(1);
    return text;
}

}  // namespace

void copy_kinds_from_name(std::string_view name, CopyKind& kind, MemoryKind& src, MemoryKind& dst) {
    // "Memcpy HtoD (Pageable -> Device)": the copy kind is the word after "Memcpy ".
    constexpr std::string_view prefix = "Memcpy ";
    std::string_view rest =
        name.substr(0, prefix.size()) == prefix ? name.substr(prefix.size()) : name;
    const std::size_t space = rest.find(' ');
    CopyKind named = CopyKind::none;
    if (kind_named(rest.substr(0, space), CopyKind::host_to_device, CopyKind::peer_to_peer,
                   named)) {
        kind = named;
    }
    const std::size_t open = rest.find('('), arrow = rest.find("->"), close = rest.rfind(')');
    if (open == std::string_view::npos || arrow == std::string_view::npos ||
        close == std::string_view::npos || !(open < arrow && arrow < close)) {
        return;
    }
    MemoryKind from = MemoryKind::none, to = MemoryKind::none;
    if (kind_named(trim(rest.substr(open + 1, arrow - open - 1)), MemoryKind::unknown,
                   MemoryKind::managed_static, from) &&
        kind_named(trim(rest.substr(arrow + 2, close - arrow - 2)), MemoryKind::unknown,
                   MemoryKind::managed_static, to)) {
        src = from;
        dst = to;
    }
}

std::string_view to_string(RunOrigin origin) {
    switch (origin) {
        case RunOrigin::captured:
            return "captured";
        case RunOrigin::imported:
            return "imported";
        case RunOrigin::simulated:
            return "simulated";
    }
    return "unknown";
}

std::string_view to_string(ClockAlignment alignment) {
    switch (alignment) {
        case ClockAlignment::none:
            return "none";
        case ClockAlignment::utc_offset:
            return "utc-offset";
        case ClockAlignment::barrier_marks:
            return "barrier-marks";
    }
    return "unknown";
}

}  // namespace fulcrum
