// The timeline's layout and level-of-detail index: plain C++, no Qt, built once per run.
//
// Tracy's timeline is the model. Events on a lane come in start order with a parent before
// its children, so one stack of open ranges gives every event its nesting depth. Within one
// (lane, depth) the events never overlap, so their starts *and* their ends increase: the first
// visible event is one binary search away, and a run of events too narrow to see is skipped
// with another. Painting a row therefore costs O(pixels · log n), not O(events), and ten
// million events draw as fast as ten thousand.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/analysis/run_trace.h"

namespace fulcrum::views::timeline {

// One (rank, lane) of the run: a row of the canvas, `depths` sub-rows high.
struct LaneRow {
    std::int32_t rank = 0;
    std::uint32_t rank_index = 0;  // into RunTrace::ranks
    std::uint32_t lane_index = 0;  // into RankTrace::lanes
    const analysis::LaneTrace* lane = nullptr;
    // by_depth[d]: indices into lane->events of the events at nesting depth d, in start order;
    // non-overlapping, so their ends increase too.
    std::vector<std::vector<std::uint32_t>> by_depth;
    std::vector<std::uint8_t> depth;  // by event index

    int depths() const { return static_cast<int>(by_depth.size()); }
};

// The time a (step, micro-batch) covers on one row: the union of its events. microbatch -1
// holds the events of the step that belong to no micro-batch (the optimizer, the step range).
struct WorkSpan {
    std::int32_t step = -1;
    std::int32_t microbatch = -1;
    std::int64_t start_ns = 0;
    std::int64_t end_ns = 0;
};

// A launch on a host lane and the kernel it started on a GPU stream (same correlation id).
struct Flow {
    std::uint32_t host_row = 0, host_event = 0;
    std::uint32_t device_row = 0, device_event = 0;
    std::int64_t launch_ns = 0;  // the launch's start
    std::int64_t kernel_ns = 0;  // the kernel's start; flows are sorted by it
};

// Nesting a lane can show; deeper events (a broken trace) get depth kMaxDepth and no sub-row.
inline constexpr int kMaxDepth = 255;

struct Layout {
    std::vector<LaneRow> rows;                 // by rank, then lane, as in the RunTrace
    std::vector<std::vector<WorkSpan>> spans;  // by row, in start order
    std::vector<Flow> flows;
    std::int64_t start_ns = 0, end_ns = 0;  // of every event; 0, 0 for an empty run
    std::uint32_t max_name_id = 0;          // names used by events are 1..max_name_id
    std::int64_t events = 0;
};

// Builds the layout; lanes are indexed in parallel over `threads` (0: hardware threads).
// The trace must outlive the layout: rows point into it.
Layout build_layout(const analysis::RunTrace& trace, unsigned threads = 0);

// What to draw for one (row, depth) in the window [start_ns, end_ns) at `width_px` pixels.
// An item with count 1 is one event (`first`); an item with count > 1 is a block of `count`
// consecutive events, each narrower than `min_px` and each starting within `min_px` of the
// previous one's end, folded into one box from the first's start to the last's end.
struct PlanItem {
    std::int64_t start_ns = 0;
    std::int64_t end_ns = 0;
    std::uint32_t first = 0;  // index into lane->events
    std::uint32_t count = 1;
};

void plan_row(const std::vector<Event>& events, const std::vector<std::uint32_t>& depth_index,
              std::int64_t start_ns, std::int64_t end_ns, double width_px, double min_px,
              std::vector<PlanItem>& out);

// Position in `depth_index` of the event at `time_ns`, or of the nearest one within
// `tolerance_ns`; -1 when none.
std::int64_t event_at(const std::vector<Event>& events,
                      const std::vector<std::uint32_t>& depth_index, std::int64_t time_ns,
                      std::int64_t tolerance_ns);

// Events whose name contains `needle` (case-insensitive), as (row, event) in start order.
struct EventRef {
    std::uint32_t row = 0;
    std::uint32_t event = 0;
    friend bool operator==(const EventRef&, const EventRef&) = default;
};
std::vector<EventRef> find_by_name(const analysis::RunTrace& trace, const Layout& layout,
                                   std::string_view needle);

}  // namespace fulcrum::views::timeline
