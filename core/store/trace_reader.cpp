#include "core/store/trace_reader.h"

#include <sqlite3.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "core/store/event_blocks.h"
#include "core/store/event_pack.h"
#include "core/store/event_rows.h"
#include "core/store/schema.h"

namespace fulcrum::store {
namespace {

Error query_failed(const Database& db, const Statement& stmt) {
    return Error{is_corruption_code(stmt.last_result()) ? ErrorCode::corrupt : ErrorCode::io,
                 "cannot read '" + db.path() + "': " + stmt.error() +
                     (is_corruption_code(stmt.last_result())
                          ? " (the file is damaged; copy it again from where it was recorded)"
                          : "")};
}

bool in_store_order(const Event& a, const Event& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
}

// The earliest start and latest end into `summary`, from a query that selects them (NULL when
// there are no events: both stay 0).
Status read_span(Database& db, const char* sql, TraceSummary& summary) {
    auto span = db.prepare(sql);
    if (!span) {
        return span.error();
    }
    if (span->step() && !span->column_is_null(0)) {
        summary.start_ns = span->column_int64(0);
        summary.end_ns = span->column_int64(1);
    } else if (span->last_result() != SQLITE_ROW && span->last_result() != SQLITE_DONE) {
        return query_failed(db, *span);
    }
    return {};
}

// The events of each lane into `summary`, from a query that selects (lane, count) by lane.
Status read_events_per_lane(Database& db, const char* sql, TraceSummary& summary) {
    auto per_lane = db.prepare(sql);
    if (!per_lane) {
        return per_lane.error();
    }
    while (per_lane->step()) {
        summary.events_per_lane.emplace_back(
            LaneId{static_cast<std::uint32_t>(per_lane->column_int64(0))},
            per_lane->column_int64(1));
    }
    if (per_lane->last_result() != SQLITE_DONE) {
        return query_failed(db, *per_lane);
    }
    return {};
}

// Hands every event row of a prepared statement to `visit` until it returns false.
Status visit_event_rows(const Database& db, Statement& stmt,
                        const std::function<bool(const Event&)>& visit) {
    while (stmt.step()) {
        if (!visit(read_event_row(stmt))) {
            return {};
        }
    }
    if (stmt.last_result() != SQLITE_DONE) {
        return query_failed(db, stmt);
    }
    return {};
}

}  // namespace

Result<TraceReader> TraceReader::open(const std::string& path) {
    auto db = open_trace(path, Database::Mode::read_only);
    if (!db) {
        return db.error();
    }
    TraceReader reader;
    reader.db_ = std::move(*db);
    if (auto status = reader.load_metadata(); !status) {
        return status.error();
    }
    return reader;
}

Status TraceReader::load_metadata() {
    auto version = db_.query_int("PRAGMA user_version");
    if (!version) {
        return version.error();
    }
    schema_version_ = *version;
    // A file holds its events as rows or as blocks, never both (docs/schema.md).
    if (db_.has_table("event_block")) {
        auto blocks = db_.query_int("SELECT EXISTS (SELECT 1 FROM event_block)");
        if (!blocks) {
            return blocks.error();
        }
        events_in_blocks_ = *blocks != 0;
    }

    auto run = db_.prepare(
        "SELECT name, command, start_utc_ns, config, origin, producer FROM run WHERE id = 1");
    if (!run) {
        return run.error();
    }
    if (run->step()) {
        run_.name = run->column_text(0);
        run_.command = run->column_text(1);
        run_.start_utc_ns = run->column_int64(2);
        run_.config_json = run->column_text(3);
        const auto origin = run->column_text(4);
        run_.origin = origin == "imported"    ? RunOrigin::imported
                      : origin == "simulated" ? RunOrigin::simulated
                                              : RunOrigin::captured;
        run_.producer = run->column_text(5);
    } else if (run->last_result() != SQLITE_DONE) {
        return query_failed(db_, *run);
    }

    auto ranks = db_.prepare(
        "SELECT rank, host, pid, device, dp, pp, cp, tp, utc_offset_ns, complete, "
        "dropped_records, clock_alignment, clock_shift_ns FROM rank ORDER BY rank");
    if (!ranks) {
        return ranks.error();
    }
    while (ranks->step()) {
        RankInfo r;
        r.rank = static_cast<std::int32_t>(ranks->column_int64(0));
        r.host = ranks->column_text(1);
        r.pid = ranks->column_int64(2);
        r.device = static_cast<std::int32_t>(ranks->column_optional(3));
        r.dp = static_cast<std::int32_t>(ranks->column_optional(4));
        r.pp = static_cast<std::int32_t>(ranks->column_optional(5));
        r.cp = static_cast<std::int32_t>(ranks->column_optional(6));
        r.tp = static_cast<std::int32_t>(ranks->column_optional(7));
        r.utc_offset_ns = ranks->column_int64(8);
        r.complete = ranks->column_int64(9) != 0;
        r.dropped_records = ranks->column_int64(10);
        const auto alignment = ranks->column_text(11);
        r.alignment = alignment == "barrier-marks" ? ClockAlignment::barrier_marks
                      : alignment == "utc-offset"  ? ClockAlignment::utc_offset
                                                   : ClockAlignment::none;
        r.clock_shift_ns = ranks->column_int64(12);
        ranks_.push_back(std::move(r));
    }
    if (ranks->last_result() != SQLITE_DONE) {
        return query_failed(db_, *ranks);
    }

    auto lanes = db_.prepare(
        "SELECT id, rank, kind, name, native_id, max_duration_ns FROM lane ORDER BY rank, id");
    if (!lanes) {
        return lanes.error();
    }
    bool max_duration_known = true;
    while (lanes->step()) {
        LaneInfo lane;
        lane.id = LaneId{static_cast<std::uint32_t>(lanes->column_int64(0))};
        lane.rank = static_cast<std::int32_t>(lanes->column_int64(1));
        lane.kind = static_cast<LaneKind>(lanes->column_int64(2));
        lane.name = lanes->column_text(3);
        lane.native_id = lanes->column_optional(4);
        max_duration_known &= !lanes->column_is_null(5);
        lane.max_duration_ns = lanes->column_optional(5);
        lanes_.push_back(std::move(lane));
    }
    if (lanes->last_result() != SQLITE_DONE) {
        return query_failed(db_, *lanes);
    }
    // A killed writer never computed per-lane maxima; the window query needs them.
    if (!max_duration_known) {
        auto maxima = db_.prepare(
            events_in_blocks_ ? "SELECT lane, MAX(duration_max) FROM event_block GROUP BY lane"
                              : "SELECT lane, MAX(end_ns - start_ns) FROM event GROUP BY lane");
        if (!maxima) {
            return maxima.error();
        }
        while (maxima->step()) {
            const LaneId id{static_cast<std::uint32_t>(maxima->column_int64(0))};
            for (auto& lane : lanes_) {
                if (lane.id == id) {
                    lane.max_duration_ns = maxima->column_int64(1);
                }
            }
        }
        if (maxima->last_result() != SQLITE_DONE) {
            return query_failed(db_, *maxima);
        }
        for (auto& lane : lanes_) {
            lane.max_duration_ns = std::max<std::int64_t>(lane.max_duration_ns, 0);
        }
    }

    auto strings = db_.prepare("SELECT id, value FROM string");
    if (!strings) {
        return strings.error();
    }
    while (strings->step()) {
        const auto id = static_cast<std::size_t>(strings->column_int64(0));
        if (id >= strings_.size()) {
            strings_.resize(id + 1);
        }
        strings_[id] = strings->column_text(1);
    }
    if (strings->last_result() != SQLITE_DONE) {
        return query_failed(db_, *strings);
    }

    auto indexes = db_.query_int(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = "
        "'event_by_lane_time'");
    has_indexes_ = indexes && *indexes > 0;
    return {};
}

std::vector<LaneInfo> TraceReader::lanes_of_rank(std::int32_t rank) const {
    std::vector<LaneInfo> result;
    for (const auto& lane : lanes_) {
        if (lane.rank == rank) {
            result.push_back(lane);
        }
    }
    return result;
}

const LaneInfo* TraceReader::lane(LaneId id) const {
    for (const auto& lane : lanes_) {
        if (lane.id == id) {
            return &lane;
        }
    }
    return nullptr;
}

bool TraceReader::incomplete() const {
    return std::any_of(ranks_.begin(), ranks_.end(), [](const RankInfo& r) { return !r.complete; });
}

std::string_view TraceReader::string(StringId id) const {
    return id.value < strings_.size() ? std::string_view(strings_[id.value]) : std::string_view();
}

Result<std::vector<Event>> TraceReader::collect(Statement& stmt) const {
    std::vector<Event> events;
    while (stmt.step()) {
        events.push_back(read_event_row(stmt));
    }
    if (stmt.last_result() != SQLITE_DONE) {
        return query_failed(db_, stmt);
    }
    return events;
}

Result<Statement> TraceReader::select_blocks(std::string_view where_and_order) const {
    return db_.prepare("SELECT lane, events, format, codec, data, rowid FROM event_block " +
                       std::string(where_and_order));
}

Error TraceReader::damaged_block(LaneId lane, std::int64_t rowid) const {
    return Error{ErrorCode::corrupt,
                 "cannot read '" + path() + "': its event block " + std::to_string(rowid) +
                     " (lane " + std::to_string(lane.value) +
                     ") is damaged or in a format this build does not know (copy the file "
                     "again from where it was recorded)"};
}

Status TraceReader::visit_blocks(
    Statement& stmt, const std::function<bool(LaneId, std::vector<Event>&)>& visit) const {
    std::vector<Event> events;
    while (stmt.step()) {
        const LaneId lane{static_cast<std::uint32_t>(stmt.column_int64(0))};
        const std::int64_t count = stmt.column_int64(1);
        events.clear();
        if (count < 0 || !decode_stored_block(stmt.column_blob(4), static_cast<std::size_t>(count),
                                              lane, static_cast<int>(stmt.column_int64(2)),
                                              static_cast<int>(stmt.column_int64(3)), events)) {
            return damaged_block(lane, stmt.column_int64(5));
        }
        // The writer stores a block sorted; one edited by hand is sorted here.
        if (!std::is_sorted(events.begin(), events.end(), in_store_order)) {
            std::stable_sort(events.begin(), events.end(), in_store_order);
        }
        if (!visit(lane, events)) {
            return {};
        }
    }
    if (stmt.last_result() != SQLITE_DONE) {
        return query_failed(db_, stmt);
    }
    return {};
}

Result<std::vector<Event>> TraceReader::events_in_window(LaneId lane_id, std::int64_t t0,
                                                         std::int64_t t1) const {
    if (events_in_blocks_) {
        // A block's bounds say whether any of its events can overlap the window.
        auto stmt = select_blocks(
            "WHERE lane = ?1 AND start_min < ?2 AND (end_max > ?3 OR start_max >= ?3) "
            "ORDER BY start_min");
        if (!stmt) {
            return stmt.error();
        }
        stmt->bind(1, std::int64_t{lane_id.value});
        stmt->bind(2, t1);
        stmt->bind(3, t0);
        std::vector<Event> found;
        auto status = visit_blocks(*stmt, [&](LaneId, std::vector<Event>& events) {
            for (const Event& e : events) {
                if (e.start_ns < t1 && (e.end_ns > t0 || e.start_ns >= t0)) {
                    found.push_back(e);
                }
            }
            return true;
        });
        if (!status) {
            return status.error();
        }
        std::stable_sort(found.begin(), found.end(), in_store_order);
        return found;
    }
    // An event overlapping t0 can start at most max_duration before it; bounding the start
    // keeps this a range scan of the (lane, start_ns) index instead of a scan of the lane.
    const LaneInfo* info = lane(lane_id);
    const std::int64_t lookback = info != nullptr ? info->max_duration_ns : 0;
    auto stmt = db_.prepare("SELECT " + event_columns(schema_version_) +
                            " FROM event WHERE lane = ?1 AND start_ns >= ?2 AND start_ns < ?3 "
                            "AND (end_ns > ?4 OR start_ns >= ?4) ORDER BY start_ns");
    if (!stmt) {
        return stmt.error();
    }
    stmt->bind(1, std::int64_t{lane_id.value});
    stmt->bind(2, t0 - lookback);
    stmt->bind(3, t1);
    stmt->bind(4, t0);
    return collect(*stmt);
}

Result<std::vector<Event>> TraceReader::events_of_kind_for_step(EventKind kind,
                                                                std::int32_t step) const {
    if (events_in_blocks_) {
        if (step == -1) {
            return std::vector<Event>{};  // "unknown" is NULL in rows, and matches no step
        }
        auto stmt = select_blocks("WHERE step_min <= ?1 AND step_max >= ?1 ORDER BY lane, rowid");
        if (!stmt) {
            return stmt.error();
        }
        stmt->bind(1, std::int64_t{step});
        std::vector<Event> found;
        auto status = visit_blocks(*stmt, [&](LaneId, std::vector<Event>& events) {
            for (const Event& e : events) {
                if (e.kind == kind && e.step == step) {
                    found.push_back(e);
                }
            }
            return true;
        });
        if (!status) {
            return status.error();
        }
        std::stable_sort(found.begin(), found.end(), [](const Event& a, const Event& b) {
            return a.lane != b.lane ? a.lane < b.lane : in_store_order(a, b);
        });
        return found;
    }
    auto stmt = db_.prepare("SELECT " + event_columns(schema_version_) +
                            " FROM event WHERE kind = ?1 AND step = ?2 ORDER BY lane, start_ns");
    if (!stmt) {
        return stmt.error();
    }
    stmt->bind(1, static_cast<std::int64_t>(kind));
    stmt->bind(2, std::int64_t{step});
    return collect(*stmt);
}

// A lane's blocks overlap in time (each holds what arrived in its interval, sorted), so they
// are merged: blocks come by their earliest start, and an event is handed on once no later
// block can start before it. Memory holds the blocks that overlap, not the lane.
Status TraceReader::for_each_block_event(LaneId lane_id,
                                         const std::function<bool(const Event&)>& visit) const {
    auto stmt = select_blocks("WHERE lane = ?1 ORDER BY start_min, rowid");
    if (!stmt) {
        return stmt.error();
    }
    stmt->bind(1, std::int64_t{lane_id.value});
    std::vector<Event> ready;  // sorted, not yet visited
    bool stopped = false;
    auto status = visit_blocks(*stmt, [&](LaneId, std::vector<Event>& block) {
        if (block.empty()) {
            return true;
        }
        std::size_t next = 0;
        while (next < ready.size() && ready[next].start_ns < block.front().start_ns) {
            if (!visit(ready[next++])) {
                stopped = true;
                return false;
            }
        }
        ready.erase(ready.begin(), ready.begin() + static_cast<std::ptrdiff_t>(next));
        const auto middle = static_cast<std::ptrdiff_t>(ready.size());
        ready.insert(ready.end(), block.begin(), block.end());
        std::inplace_merge(ready.begin(), ready.begin() + middle, ready.end(), in_store_order);
        return true;
    });
    if (!status || stopped) {
        return status;
    }
    for (const Event& event : ready) {
        if (!visit(event)) {
            break;
        }
    }
    return {};
}

Status TraceReader::for_each_event(LaneId lane_id,
                                   const std::function<bool(const Event&)>& visit) const {
    if (events_in_blocks_) {
        return for_each_block_event(lane_id, visit);
    }
    auto stmt = db_.prepare("SELECT " + event_columns(schema_version_) +
                            " FROM event WHERE lane = ?1 ORDER BY start_ns, end_ns DESC, rowid");
    if (!stmt) {
        return stmt.error();
    }
    stmt->bind(1, std::int64_t{lane_id.value});
    return visit_event_rows(db_, *stmt, visit);
}

Status TraceReader::read_lane(LaneId lane_id, std::vector<Event>& out) const {
    if (!events_in_blocks_) {
        return for_each_event(lane_id, [&out](const Event& event) {
            out.push_back(event);
            return true;
        });
    }
    auto count = db_.prepare("SELECT SUM(events) FROM event_block WHERE lane = ?1");
    if (!count) {
        return count.error();
    }
    count->bind(1, std::int64_t{lane_id.value});
    if (!count->step()) {
        return query_failed(db_, *count);
    }
    // A damaged count is found at its block; it only must not reserve without bound first.
    constexpr std::int64_t kLargestReserve = std::int64_t{1} << 26;
    const std::int64_t events = count->column_int64(0);
    if (events > 0 && events <= kLargestReserve) {
        out.reserve(out.size() + static_cast<std::size_t>(events));
    }
    auto stmt = select_blocks("WHERE lane = ?1 ORDER BY start_min, rowid");
    if (!stmt) {
        return stmt.error();
    }
    stmt->bind(1, std::int64_t{lane_id.value});
    const std::size_t first = out.size();
    while (stmt->step()) {
        const std::int64_t block_events = stmt->column_int64(1);
        const std::size_t middle = out.size();
        if (block_events < 0 ||
            !decode_stored_block(stmt->column_blob(4), static_cast<std::size_t>(block_events),
                                 lane_id, static_cast<int>(stmt->column_int64(2)),
                                 static_cast<int>(stmt->column_int64(3)), out)) {
            out.resize(middle);
            return damaged_block(lane_id, stmt->column_int64(5));
        }
        const auto begin = out.begin() + static_cast<std::ptrdiff_t>(first);
        const auto block = out.begin() + static_cast<std::ptrdiff_t>(middle);
        // As visit_blocks: a block edited by hand is sorted; then blocks that overlap are
        // merged, earlier blocks first on ties (as for_each_block_event merges them).
        if (!std::is_sorted(block, out.end(), in_store_order)) {
            std::stable_sort(block, out.end(), in_store_order);
        }
        if (block != begin && block != out.end() && in_store_order(*block, *(block - 1))) {
            std::inplace_merge(std::upper_bound(begin, block, *block, in_store_order), block,
                               out.end(), in_store_order);
        }
    }
    if (stmt->last_result() != SQLITE_DONE) {
        return query_failed(db_, *stmt);
    }
    return {};
}

Result<std::pair<std::int64_t, std::int64_t>> TraceReader::event_rowids() const {
    auto stmt = db_.prepare(events_in_blocks_ ? "SELECT MIN(rowid), MAX(rowid) FROM event_block"
                                              : "SELECT MIN(rowid), MAX(rowid) FROM event");
    if (!stmt) {
        return stmt.error();
    }
    if (!stmt->step()) {
        return query_failed(db_, *stmt);
    }
    if (stmt->column_optional(0) < 0) {
        return std::pair<std::int64_t, std::int64_t>{0, 0};  // no events
    }
    return std::pair<std::int64_t, std::int64_t>{stmt->column_int64(0), stmt->column_int64(1) + 1};
}

Status TraceReader::scan_events(std::int64_t begin, std::int64_t end,
                                const std::function<bool(const Event&)>& visit) const {
    if (events_in_blocks_) {
        auto stmt = select_blocks("WHERE rowid >= ?1 AND rowid < ?2 ORDER BY rowid");
        if (!stmt) {
            return stmt.error();
        }
        stmt->bind(1, begin);
        stmt->bind(2, end);
        return visit_blocks(*stmt, [&](LaneId, std::vector<Event>& events) {
            for (const Event& event : events) {
                if (!visit(event)) {
                    return false;
                }
            }
            return true;
        });
    }
    auto stmt = db_.prepare("SELECT " + event_columns(schema_version_) +
                            " FROM event WHERE rowid >= ?1 AND rowid < ?2");
    if (!stmt) {
        return stmt.error();
    }
    stmt->bind(1, begin);
    stmt->bind(2, end);
    return visit_event_rows(db_, *stmt, visit);
}

Result<std::optional<TraceReader::EventPack>> TraceReader::event_pack() const {
    using Range = std::optional<EventPack>;
    if (events_in_blocks_) {
        auto blocks = db_.prepare("SELECT MIN(rowid), MAX(rowid), SUM(events) FROM event_block");
        if (!blocks) {
            return blocks.error();
        }
        if (!blocks->step()) {
            return query_failed(db_, *blocks);
        }
        return Range{EventPack{blocks->column_int64(0), blocks->column_int64(1) + 1,
                               blocks->column_int64(2)}};
    }
    if (!db_.has_table("event_pack")) {
        return Range{};
    }
    auto stmt = db_.prepare(
        "SELECT MIN(rowid), MAX(rowid), SUM(events), SUM(format < 1 OR format > " +
        std::to_string(kEventPackFormat) + "), (SELECT COUNT(*) FROM event) FROM event_pack");
    if (!stmt) {
        return stmt.error();
    }
    if (!stmt->step()) {
        return query_failed(db_, *stmt);
    }
    const std::int64_t packed = stmt->column_optional(2);
    const std::int64_t foreign_blocks = stmt->column_optional(3);
    const std::int64_t rows = stmt->column_int64(4);
    // A pack that disagrees with the table (rows added or removed by hand, a newer format) is
    // ignored: the rows are the truth. Older formats decode (event_pack.h).
    if (packed != rows || foreign_blocks != 0 || rows == 0) {
        return Range{};
    }
    return Range{EventPack{stmt->column_int64(0), stmt->column_int64(1) + 1, rows}};
}

Status TraceReader::scan_event_pack(std::int64_t begin, std::int64_t end,
                                    const std::function<std::vector<Event>*(LaneId)>& destination,
                                    const std::function<bool()>& keep_going) const {
    // The pack's blocks are a rank file's event blocks without compression (codec 0).
    auto stmt = db_.prepare(std::string(events_in_blocks_
                                            ? "SELECT lane, events, data, format, codec, rowid "
                                              "FROM event_block"
                                            : "SELECT lane, events, data, format, 0, rowid "
                                              "FROM event_pack") +
                            " WHERE rowid >= ?1 AND rowid < ?2 ORDER BY rowid");
    if (!stmt) {
        return stmt.error();
    }
    stmt->bind(1, begin);
    stmt->bind(2, end);
    while (stmt->step()) {
        if (keep_going && !keep_going()) {
            return {};
        }
        const LaneId lane{static_cast<std::uint32_t>(stmt->column_int64(0))};
        std::vector<Event>* out = destination(lane);
        if (out == nullptr) {
            continue;
        }
        const std::int64_t count = stmt->column_int64(1);
        const int format = static_cast<int>(stmt->column_int64(3));
        const int codec = static_cast<int>(stmt->column_int64(4));
        if (count < 0 || !decode_stored_block(stmt->column_blob(2), static_cast<std::size_t>(count),
                                              lane, format, codec, *out)) {
            if (events_in_blocks_) {
                return damaged_block(lane, stmt->column_int64(5));
            }
            return Error{ErrorCode::corrupt,
                         "cannot read '" + path() + "': a block of lane " +
                             std::to_string(lane.value) +
                             " in its event pack is damaged (copy the file again from where it "
                             "was recorded, or run `fulcrum merge` again)"};
        }
    }
    if (stmt->last_result() != SQLITE_DONE) {
        return query_failed(db_, *stmt);
    }
    return {};
}

// Counts and the span come from the blocks' rows; kinds and steps need their events.
Result<TraceSummary> TraceReader::block_summary() const {
    TraceSummary summary;
    if (auto status = read_events_per_lane(
            db_, "SELECT lane, SUM(events) FROM event_block GROUP BY lane ORDER BY lane", summary);
        !status) {
        return status.error();
    }
    if (auto status =
            read_span(db_, "SELECT MIN(start_min), MAX(end_max) FROM event_block", summary);
        !status) {
        return status.error();
    }
    auto blocks = select_blocks("ORDER BY rowid");
    if (!blocks) {
        return blocks.error();
    }
    std::set<std::int32_t> steps;
    auto status = visit_blocks(*blocks, [&](LaneId, std::vector<Event>& events) {
        std::int32_t last_step = -1;
        for (const Event& e : events) {
            const auto kind = static_cast<int>(e.kind);
            if (kind >= 0 && kind < kEventKindCount) {
                ++summary.events_by_kind[kind];
            }
            ++summary.event_count;
            if (e.step != -1 && e.step != last_step) {
                steps.insert(e.step);
                last_step = e.step;
            }
        }
        return true;
    });
    if (!status) {
        return status.error();
    }
    summary.steps.assign(steps.begin(), steps.end());
    return summary;
}

Result<TraceSummary> TraceReader::summary() const {
    if (events_in_blocks_) {
        return block_summary();
    }
    TraceSummary summary;
    auto by_kind = db_.prepare("SELECT kind, COUNT(*) FROM event GROUP BY kind");
    if (!by_kind) {
        return by_kind.error();
    }
    while (by_kind->step()) {
        const auto kind = by_kind->column_int64(0);
        const auto count = by_kind->column_int64(1);
        if (kind >= 0 && kind < kEventKindCount) {
            summary.events_by_kind[kind] = count;
        }
        summary.event_count += count;
    }
    if (by_kind->last_result() != SQLITE_DONE) {
        return query_failed(db_, *by_kind);
    }

    if (auto status = read_span(db_, "SELECT MIN(start_ns), MAX(end_ns) FROM event", summary);
        !status) {
        return status.error();
    }

    auto steps =
        db_.prepare("SELECT DISTINCT step FROM event WHERE step IS NOT NULL ORDER BY step");
    if (!steps) {
        return steps.error();
    }
    while (steps->step()) {
        summary.steps.push_back(static_cast<std::int32_t>(steps->column_int64(0)));
    }
    if (steps->last_result() != SQLITE_DONE) {
        return query_failed(db_, *steps);
    }

    if (auto status = read_events_per_lane(
            db_, "SELECT lane, COUNT(*) FROM event GROUP BY lane ORDER BY lane", summary);
        !status) {
        return status.error();
    }
    return summary;
}

namespace {

constexpr const char* kWorkloadColumns =
    "SELECT rowid, rank, step, microbatch, doc_id, doc_length, token_begin, token_end, balancer "
    "FROM workload";

// Each row a statement of kWorkloadColumns selects, with its rowid.
Status visit_workload(const Database& db, Statement& stmt,
                      const std::function<void(std::int64_t, const WorkloadEntry&)>& visit) {
    InternedText balancer;  // the last row's: runs of rows share one, skip the lookup
    while (stmt.step()) {
        WorkloadEntry w;
        w.rank = static_cast<std::int32_t>(stmt.column_int64(1));
        w.step = static_cast<std::int32_t>(stmt.column_int64(2));
        w.microbatch = static_cast<std::int32_t>(stmt.column_int64(3));
        w.doc_id = stmt.column_int64(4);
        w.doc_length = static_cast<std::int32_t>(stmt.column_int64(5));
        w.token_begin = static_cast<std::int32_t>(stmt.column_int64(6));
        w.token_end = static_cast<std::int32_t>(stmt.column_int64(7));
        const std::string text = stmt.column_text(8);
        if (balancer.str() != text) {
            balancer = text;
        }
        w.balancer = balancer;
        visit(stmt.column_int64(0), w);
    }
    if (stmt.last_result() != SQLITE_DONE) {
        return query_failed(db, stmt);
    }
    return {};
}

}  // namespace

void sort_workload(std::vector<WorkloadEntry>& rows) {
    auto key = [](const WorkloadEntry& w) {
        return std::tie(w.step, w.microbatch, w.rank, w.doc_id, w.token_begin, w.token_end,
                        w.doc_length, w.balancer);
    };
    std::sort(rows.begin(), rows.end(),
              [&](const WorkloadEntry& a, const WorkloadEntry& b) { return key(a) < key(b); });
}

Result<std::vector<WorkloadEntry>> TraceReader::workload(WorkloadOrder order) const {
    // Counted first: a 1 B-event run has ten million rows, and a vector grown by doubling
    // would hold up to three times them while it moves.
    std::vector<WorkloadEntry> entries;
    if (auto count = db_.prepare("SELECT COUNT(*) FROM workload"); count && count->step()) {
        entries.reserve(static_cast<std::size_t>(count->column_int64(0)));
    }
    // Read in the table's order and sorted here: SQLite's ORDER BY walks workload_by_step and
    // looks every row up in the table, then sorts each group on the rest of the key, ~8× the
    // time of one plain scan (1.7 s against 0.2 s at 905 K rows).
    if (auto status =
            scan_workload([&](std::int64_t, const WorkloadEntry& w) { entries.push_back(w); });
        !status) {
        return status.error();
    }
    if (order == WorkloadOrder::sorted) {
        sort_workload(entries);
    }
    return entries;
}

Status TraceReader::scan_workload(
    const std::function<void(std::int64_t rowid, const WorkloadEntry&)>& visit) const {
    auto stmt = db_.prepare(kWorkloadColumns);
    if (!stmt) {
        return stmt.error();
    }
    return visit_workload(db_, *stmt, visit);
}

Status TraceReader::workload_rows(const std::vector<std::pair<std::int64_t, std::int64_t>>& ranges,
                                  std::vector<WorkloadEntry>& rows) const {
    auto stmt = db_.prepare(std::string(kWorkloadColumns) + " WHERE rowid BETWEEN ?1 AND ?2");
    if (!stmt) {
        return stmt.error();
    }
    for (const auto& [first, last] : ranges) {
        stmt->reset();
        stmt->bind(1, first);
        stmt->bind(2, last);
        if (auto status = visit_workload(
                db_, *stmt, [&](std::int64_t, const WorkloadEntry& w) { rows.push_back(w); });
            !status) {
            return status;
        }
    }
    return {};
}

Result<std::vector<CounterSample>> TraceReader::counters() const {
    auto stmt = db_.prepare(
        "SELECT rank, name, time_ns, value FROM counter ORDER BY rank, name, "
        "time_ns");
    if (!stmt) {
        return stmt.error();
    }
    std::vector<CounterSample> samples;
    while (stmt->step()) {
        samples.push_back({static_cast<std::int32_t>(stmt->column_int64(0)), stmt->column_text(1),
                           stmt->column_int64(2), stmt->column_double(3)});
    }
    if (stmt->last_result() != SQLITE_DONE) {
        return query_failed(db_, *stmt);
    }
    return samples;
}

Result<std::vector<ImportLogEntry>> TraceReader::import_log() const {
    auto stmt =
        db_.prepare(std::string("SELECT source, record_index, reason, record, ") +
                    (schema_version_ >= 2 ? "skipped" : "1") + " FROM import_log ORDER BY id");
    if (!stmt) {
        return stmt.error();
    }
    std::vector<ImportLogEntry> entries;
    while (stmt->step()) {
        entries.push_back({stmt->column_text(0), stmt->column_optional(1), stmt->column_text(2),
                           stmt->column_text(3), stmt->column_int64(4)});
    }
    if (stmt->last_result() != SQLITE_DONE) {
        return query_failed(db_, *stmt);
    }
    return entries;
}

}  // namespace fulcrum::store
