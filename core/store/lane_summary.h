// Lane summaries: the timeline's level-of-detail tables, stored in the run file (table
// lane_summary, docs/schema.md). A run of 100 M events cannot be held in the GUI (64 bytes an
// event); zoomed out, the timeline needs per pixel only how busy a lane was, with what, and
// how deep its nesting went. Each lane keeps that for bins of 2^shift ns: level 0 the finest
// (at most kSummaryBins bins across the lane), each next level 4× coarser, down to a few bins.
// The GUI opens a large run from these and the lane metadata alone and pages event detail in
// from the blocks as the user zooms (views/timeline/paged_timeline.h; docs/decisions.md).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/store/sqlite_handle.h"
#include "core/trace/model.h"
#include "core/util/result.h"

namespace fulcrum::store {

// Level 0's span is kept to at most this many bins by doubling its bin width: a whole-run
// view ~1,500 px wide then draws bins about a pixel wide, and 4,096 lanes cost ~180 MB.
inline constexpr std::int64_t kSummaryBins = 1024;
inline constexpr int kSummaryLevelStep = 2;          // each level's bins are 2^2 = 4× wider
inline constexpr std::int64_t kSummaryMinBins = 16;  // the coarsest level has at most this many
inline constexpr int kSummaryFirstShift = 10;        // level 0 starts at 1 µs bins
inline constexpr int kNewestSummaryFormat = 1;

// One bin [index << shift, (index + 1) << shift) of one lane at one level.
struct SummaryBin {
    std::int64_t index = 0;
    // Time the lane's top-level (depth 0) events cover inside the bin; they never overlap.
    std::int64_t busy_ns = 0;
    // The depth-0 event covering most of the bin (when two half-bins merge, the larger of
    // their two): its name, category, and how much of the bin it covers.
    std::int64_t dominant_ns = 0;
    StringId name;
    Category category = Category::other;
    std::uint8_t max_depth = 0;  // deepest nesting of an event starting in the bin (0: top)
    std::uint32_t events = 0;    // events starting in the bin, any depth

    friend bool operator==(const SummaryBin&, const SummaryBin&) = default;
};

struct SummaryLevel {
    int shift = 0;                 // bins are 2^shift ns wide
    std::vector<SummaryBin> bins;  // by index; only bins that hold something
    std::int64_t bin_ns() const { return std::int64_t{1} << shift; }
};

struct LaneSummary {
    LaneId lane;
    std::int64_t events = 0;
    std::int64_t start_ns = 0, end_ns = 0;  // first start, last end; 0, 0 with no events
    int depths = 0;                         // nesting depths used (timeline sub-rows)
    std::vector<SummaryLevel> levels;       // finest first

    // The coarsest level whose bins are at most `ns_per_bin` wide; the finest when none is.
    const SummaryLevel* level_for(double ns_per_bin) const;
};

// Builds one lane's summary from its events in store order (start ascending, a parent before
// the children that start with it), as the writer, merge and TraceReader::for_each_event hand
// them. Depths come from one stack of open ranges, as the timeline's layout computes them
// (views/timeline/timeline_layout.cpp), so the two agree event for event.
class LaneSummaryBuilder {
public:
    explicit LaneSummaryBuilder(LaneId lane) { summary_.lane = lane; }
    void add(const Event& event);
    LaneSummary finish() &&;

private:
    SummaryBin& bin_at(std::int64_t index);
    void coarsen();  // doubles level 0's bin width
    void cover(const Event& event);

    LaneSummary summary_;
    int shift_ = kSummaryFirstShift;
    std::vector<SummaryBin> bins_;  // level 0, by index
    std::vector<std::int64_t> open_ends_;
    std::int64_t first_start_ = 0;
};

// Every lane of a file at once, for a writer that goes through lanes interleaved (merge copying
// blocks): events of different lanes may come in any order, each lane's own in store order.
class RunSummaryBuilder {
public:
    void add(const Event& event);
    void add(const std::vector<Event>& events) {
        for (const Event& event : events) {
            add(event);
        }
    }
    // The lanes `other` summarised, which this one must not have (merge: each lane is
    // summarised on one worker).
    void take(RunSummaryBuilder&& other);
    // By lane id. A reader needs a row for every lane (one missing reads as damaged), so
    // `every_lane` names the file's lanes: those that had no events get an empty summary.
    std::vector<LaneSummary> finish(const std::vector<LaneId>& every_lane = {}) &&;

private:
    std::vector<std::optional<LaneSummaryBuilder>> by_lane_;  // index: lane id
};

// Replaces the lane_summary rows of these lanes (creating the table when the file has none).
// Call inside the caller's transaction, if it has one.
Status write_lane_summaries(Database& db, const std::vector<LaneSummary>& summaries);

// Every lane's summary; nullopt when the file has no lane_summary table. A damaged row or one
// in a format this build does not know is an error naming the lane.
Result<std::optional<std::vector<LaneSummary>>> read_lane_summaries(Database& db);

}  // namespace fulcrum::store
