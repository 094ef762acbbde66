#include "core/trace/model.h"

namespace fulcrum {

std::string_view to_string(LaneKind kind) {
    switch (kind) {
    case LaneKind::host_thread: return "host-thread";
    case LaneKind::gpu_stream: return "gpu-stream";
    }
    return "unknown";
}

std::string_view to_string(EventKind kind) {
    switch (kind) {
    case EventKind::range: return "range";
    case EventKind::mark: return "mark";
    case EventKind::kernel: return "kernel";
    case EventKind::memcpy: return "memcpy";
    case EventKind::memset: return "memset";
    case EventKind::sync: return "sync";
    case EventKind::collective: return "collective";
    case EventKind::api: return "api";
    }
    return "unknown";
}

std::string_view to_string(Category category) {
    switch (category) {
    case Category::other: return "other";
    case Category::compute: return "compute";
    case Category::attention: return "attention";
    case Category::communication: return "communication";
    case Category::offload: return "offload";
    case Category::optimizer: return "optimizer";
    case Category::memory: return "memory";
    case Category::runtime: return "runtime";
    case Category::schedule: return "schedule";
    }
    return "unknown";
}

std::string_view to_string(Phase phase) {
    switch (phase) {
    case Phase::none: return "";
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::weight_grad: return "weight-grad";
    }
    return "unknown";
}

std::string_view to_string(CopyKind kind) {
    switch (kind) {
    case CopyKind::none: return "";
    case CopyKind::host_to_device: return "HtoD";
    case CopyKind::device_to_host: return "DtoH";
    case CopyKind::device_to_device: return "DtoD";
    case CopyKind::peer_to_peer: return "PtoP";
    }
    return "other";
}

std::string_view to_string(RunOrigin origin) {
    switch (origin) {
    case RunOrigin::captured: return "captured";
    case RunOrigin::imported: return "imported";
    case RunOrigin::simulated: return "simulated";
    }
    return "unknown";
}

std::string_view to_string(ClockAlignment alignment) {
    switch (alignment) {
    case ClockAlignment::none: return "none";
    case ClockAlignment::utc_offset: return "utc-offset";
    case ClockAlignment::barrier_marks: return "barrier-marks";
    }
    return "unknown";
}

}  // namespace fulcrum
