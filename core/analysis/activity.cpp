#include "core/analysis/activity.h"

#include <vector>

namespace fulcrum::analysis {

Activity activity_of(const Event& event) {
    switch (event.kind) {
        case EventKind::mark:
            return Activity::none;
        case EventKind::collective:
            return Activity::communication;
        case EventKind::memcpy:
            return Activity::copy;
        case EventKind::memset:
        case EventKind::sync:
        case EventKind::api:
            return Activity::other;
        case EventKind::kernel:
        case EventKind::range:
            break;
    }
    switch (event.category) {
        case Category::compute:
        case Category::attention:
        case Category::optimizer:
            return Activity::compute;
        case Category::communication:
            return Activity::communication;
        case Category::offload:
            return Activity::copy;
        case Category::schedule:
            return Activity::none;
        case Category::memory:
        case Category::runtime:
            return Activity::other;
        case Category::other:
            break;
    }
    // A kernel of no known category is still the device working.
    return event.kind == EventKind::kernel ? Activity::compute : Activity::other;
}

namespace {

IntervalSet& set_of(RankActivity& activity, Activity kind) {
    switch (kind) {
        case Activity::compute:
            return activity.compute;
        case Activity::communication:
            return activity.communication;
        case Activity::copy:
            return activity.copy;
        default:
            return activity.other;
    }
}

// A device stream: every kernel, copy and collective is the device working for all of its
// duration. Work on one stream does not nest, but traces show it overlapping (Kineto rounds to
// the microsecond; graph replays), so each event adds its whole interval to its class and the
// sets are unions (HTA's definitions). Synchronisation records only say the host waited, and
// stream annotations are containers: neither is work.
void classify_device_lane(const LaneTrace& lane, RankActivity& activity) {
    for (const Event& event : lane.events) {
        if (event.kind == EventKind::sync) {
            continue;
        }
        const Activity kind = activity_of(event);
        if (kind != Activity::none) {
            set_of(activity, kind).add(event.start_ns, event.end_ns);
        }
    }
}

// Sweeps one host lane, giving each stretch of time to the innermost non-transparent event:
// the latest-started one still open. A range that outlives the one it started in (ranges of
// different code paths, overlapping without nesting) keeps its whole duration: it stays on
// the stack, and an enclosing range that ended under it is dropped when it surfaces.
void classify_host_lane(const LaneTrace& lane, RankActivity& activity) {
    struct Open {
        std::int64_t end_ns;
        Activity effective;  // its own class, or its parent's when it is transparent
    };
    std::vector<Open> stack;
    std::int64_t cursor = 0;
    auto emit_until = [&](std::int64_t t) {
        if (!stack.empty() && t > cursor && stack.back().effective != Activity::none) {
            set_of(activity, stack.back().effective).add(cursor, t);
        }
        cursor = std::max(cursor, t);
    };
    for (const Event& event : lane.events) {
        if (event.kind == EventKind::mark || event.end_ns <= event.start_ns) {
            continue;
        }
        while (!stack.empty() && stack.back().end_ns <= event.start_ns) {
            emit_until(stack.back().end_ns);
            stack.pop_back();
        }
        emit_until(event.start_ns);
        Activity kind = activity_of(event);
        if (kind == Activity::none && !stack.empty()) {
            kind = stack.back().effective;
        }
        stack.push_back({event.end_ns, kind});
    }
    while (!stack.empty()) {
        emit_until(stack.back().end_ns);
        stack.pop_back();
    }
}

}  // namespace

RankActivity rank_activity(const RankTrace& rank) {
    RankActivity activity;
    const bool device = rank.has_device_lanes();
    for (const LaneTrace& lane : rank.lanes) {
        if ((lane.info.kind == LaneKind::gpu_stream) != device) {
            continue;
        }
        if (device) {
            classify_device_lane(lane, activity);
        } else {
            classify_host_lane(lane, activity);
        }
    }
    return activity;
}

}  // namespace fulcrum::analysis
