// TraceReader: read access to a run database or a per-rank file, with the indexed queries
// the views and analyses need. Opening checks the file first (not SQLite, another program's
// database, a newer schema, truncated) and says which of those it is.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/store/lane_summary.h"
#include "core/store/sqlite_handle.h"
#include "core/trace/model.h"
#include "core/util/result.h"

namespace fulcrum::store {

struct TraceSummary {
    std::int64_t event_count = 0;
    std::int64_t events_by_kind[kEventKindCount] = {};
    std::int64_t start_ns = 0;  // earliest start, latest end; both 0 when there are no events
    std::int64_t end_ns = 0;
    std::vector<std::int32_t> steps;  // distinct steps, ascending
    std::vector<std::pair<LaneId, std::int64_t>> events_per_lane;
};

class TraceReader {
public:
    static Result<TraceReader> open(const std::string& path);

    const std::string& path() const { return db_.path(); }
    const RunInfo& run() const { return run_; }
    std::int64_t schema_version() const { return schema_version_; }
    const std::vector<RankInfo>& ranks() const { return ranks_; }
    const std::vector<LaneInfo>& lanes() const { return lanes_; }
    std::vector<LaneInfo> lanes_of_rank(std::int32_t rank) const;
    const LaneInfo* lane(LaneId id) const;
    // False when the writer was killed before building its indexes: queries still work,
    // with full scans.
    bool has_indexes() const { return has_indexes_; }
    // True when the file keeps its events in compressed blocks (event_block, schema version 3:
    // rank files) rather than as rows of the event table; every method below reads either.
    bool events_in_blocks() const { return events_in_blocks_; }
    // True when any rank's writer did not close cleanly.
    bool incomplete() const;

    // Interned names; an unknown or zero id reads as "".
    std::string_view string(StringId id) const;
    // Ids run from 1 to string_count() − 1.
    std::size_t string_count() const { return strings_.size(); }

    // Events of one lane that overlap [t0, t1) (marks: that lie in it), by start time.
    Result<std::vector<Event>> events_in_window(LaneId lane, std::int64_t t0,
                                                std::int64_t t1) const;
    Result<std::vector<Event>> events_of_kind_for_step(EventKind kind, std::int32_t step) const;
    // Streams every event of a lane by start time (end time descending on ties, so a parent
    // comes before the children that start with it). Return false to stop early.
    Status for_each_event(LaneId lane, const std::function<bool(const Event&)>& visit) const;
    // Appends every event of a lane to `out` in the order for_each_event visits them: a
    // block's events are decoded straight into `out` (sized once from the blocks' counts), not
    // handed over one at a time.
    Status read_lane(LaneId lane, std::vector<Event>& out) const;

    // The whole event table in storage order, a slice of rowids at a time: a sequential read
    // with no sort, the fastest way to load a run. Rows [begin, end) of event_rowids(); for a
    // file whose events are in blocks, the rowids are the blocks' and a slice is whole blocks.
    Result<std::pair<std::int64_t, std::int64_t>> event_rowids() const;  // [min, max + 1)
    Status scan_events(std::int64_t begin, std::int64_t end,
                       const std::function<bool(const Event&)>& visit) const;

    // The event pack (core/store/event_pack.h), when the file has one that holds exactly the
    // event table's rows; nullopt when rows must be read. A file whose events are in blocks
    // answers with its blocks, which scan_event_pack reads the same way.
    struct EventPack {
        std::int64_t first_block = 0, end_block = 0;  // block rowids [min, max + 1)
        std::int64_t events = 0;
    };
    Result<std::optional<EventPack>> event_pack() const;
    // Decodes the pack's blocks [begin, end) in rowid order, appending each block to the
    // vector `destination(lane)` returns (nullptr skips the block). `keep_going` is asked
    // between blocks; false stops early without an error.
    Status scan_event_pack(std::int64_t begin, std::int64_t end,
                           const std::function<std::vector<Event>*(LaneId)>& destination,
                           const std::function<bool()>& keep_going) const;

    Result<TraceSummary> summary() const;
    // The timeline's level-of-detail tables (lane_summary.h); nullopt when the file has none
    // (build_lane_summaries adds them).
    Result<std::optional<std::vector<LaneSummary>>> lane_summaries() const {
        return read_lane_summaries(db_);
    }
    // Every row of the workload table, in sort_workload's order; or, for a reader that only
    // tallies them, in the table's own order, which spares the sort (a merged run's table is
    // rank by rank).
    enum class WorkloadOrder { sorted, table };
    Result<std::vector<WorkloadEntry>> workload(WorkloadOrder order = WorkloadOrder::sorted) const;
    // The table without holding it (issue 37, docs/analyses.md, "Runs larger than memory"):
    // each row with its rowid, in the table's own order (a merged run's: rank by rank).
    Status scan_workload(
        const std::function<void(std::int64_t rowid, const WorkloadEntry&)>& visit) const;
    // The rows whose rowids lie in the ranges [first, last], appended in the ranges' order.
    Status workload_rows(const std::vector<std::pair<std::int64_t, std::int64_t>>& ranges,
                         std::vector<WorkloadEntry>& rows) const;
    Result<std::vector<CounterSample>> counters() const;
    Result<std::vector<ImportLogEntry>> import_log() const;

private:
    TraceReader() = default;
    Status load_metadata();
    Result<std::vector<Event>> collect(Statement& stmt) const;
    // Decodes each block a statement selects (block_columns() first), handing visit() the
    // block's events in store order; visit() may take them. False from visit() stops early.
    Status visit_blocks(Statement& stmt,
                        const std::function<bool(LaneId, std::vector<Event>&)>& visit) const;
    Result<Statement> select_blocks(std::string_view where_and_order) const;
    Error damaged_block(LaneId lane, std::int64_t rowid) const;
    Status for_each_block_event(LaneId lane, const std::function<bool(const Event&)>& visit) const;
    Result<TraceSummary> block_summary() const;

    mutable Database db_;
    std::int64_t schema_version_ = 0;
    RunInfo run_;
    std::vector<RankInfo> ranks_;
    std::vector<LaneInfo> lanes_;
    std::vector<std::string> strings_;  // index = StringId value
    bool has_indexes_ = false;
    bool events_in_blocks_ = false;
};

// The order TraceReader::workload gives the rows: by step, micro-batch, rank, document and its
// tokens, on every field (rows it cannot order are the same row to any reader). In place: a
// stable sort's buffer would be half a gigabyte at 1 B events.
void sort_workload(std::vector<WorkloadEntry>& rows);

}  // namespace fulcrum::store
