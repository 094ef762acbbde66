#include "core/store/trace_reader.h"

#include <sqlite3.h>

#include <algorithm>

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
        auto maxima = db_.prepare("SELECT lane, MAX(end_ns - start_ns) FROM event GROUP BY lane");
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

Result<std::vector<Event>> TraceReader::events_in_window(LaneId lane_id, std::int64_t t0,
                                                         std::int64_t t1) const {
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
    auto stmt = db_.prepare("SELECT " + event_columns(schema_version_) +
                            " FROM event WHERE kind = ?1 AND step = ?2 ORDER BY lane, start_ns");
    if (!stmt) {
        return stmt.error();
    }
    stmt->bind(1, static_cast<std::int64_t>(kind));
    stmt->bind(2, std::int64_t{step});
    return collect(*stmt);
}

Status TraceReader::for_each_event(LaneId lane_id,
                                   const std::function<bool(const Event&)>& visit) const {
    auto stmt = db_.prepare("SELECT " + event_columns(schema_version_) +
                            " FROM event WHERE lane = ?1 ORDER BY start_ns, end_ns DESC");
    if (!stmt) {
        return stmt.error();
    }
    stmt->bind(1, std::int64_t{lane_id.value});
    return visit_event_rows(db_, *stmt, visit);
}

Result<std::pair<std::int64_t, std::int64_t>> TraceReader::event_rowids() const {
    auto stmt = db_.prepare("SELECT MIN(rowid), MAX(rowid) FROM event");
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
    auto stmt = db_.prepare(
        "SELECT lane, events, data, format FROM event_pack WHERE rowid >= ?1 AND rowid < ?2 ORDER "
        "BY rowid");
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
        const auto count = static_cast<std::size_t>(stmt->column_int64(1));
        const int format = static_cast<int>(stmt->column_int64(3));
        if (!decode_event_block(stmt->column_blob(2), count, lane, format, *out)) {
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

Result<TraceSummary> TraceReader::summary() const {
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

    auto span = db_.prepare("SELECT MIN(start_ns), MAX(end_ns) FROM event");
    if (!span) {
        return span.error();
    }
    if (span->step() && !span->column_is_null(0)) {
        summary.start_ns = span->column_int64(0);
        summary.end_ns = span->column_int64(1);
    } else if (span->last_result() != SQLITE_ROW && span->last_result() != SQLITE_DONE) {
        return query_failed(db_, *span);
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

    auto per_lane = db_.prepare("SELECT lane, COUNT(*) FROM event GROUP BY lane ORDER BY lane");
    if (!per_lane) {
        return per_lane.error();
    }
    while (per_lane->step()) {
        summary.events_per_lane.emplace_back(
            LaneId{static_cast<std::uint32_t>(per_lane->column_int64(0))},
            per_lane->column_int64(1));
    }
    if (per_lane->last_result() != SQLITE_DONE) {
        return query_failed(db_, *per_lane);
    }
    return summary;
}

Result<std::vector<WorkloadEntry>> TraceReader::workload() const {
    auto stmt = db_.prepare(
        "SELECT rank, step, microbatch, doc_id, doc_length, token_begin, token_end, balancer "
        "FROM workload ORDER BY step, microbatch, rank, doc_id, token_begin");
    if (!stmt) {
        return stmt.error();
    }
    std::vector<WorkloadEntry> entries;
    while (stmt->step()) {
        WorkloadEntry w;
        w.rank = static_cast<std::int32_t>(stmt->column_int64(0));
        w.step = static_cast<std::int32_t>(stmt->column_int64(1));
        w.microbatch = static_cast<std::int32_t>(stmt->column_int64(2));
        w.doc_id = stmt->column_int64(3);
        w.doc_length = static_cast<std::int32_t>(stmt->column_int64(4));
        w.token_begin = static_cast<std::int32_t>(stmt->column_int64(5));
        w.token_end = static_cast<std::int32_t>(stmt->column_int64(6));
        w.balancer = stmt->column_text(7);
        entries.push_back(std::move(w));
    }
    if (stmt->last_result() != SQLITE_DONE) {
        return query_failed(db_, *stmt);
    }
    return entries;
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
