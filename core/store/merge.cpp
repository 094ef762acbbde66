#include "core/store/merge.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <system_error>
#include <utility>

#include "core/store/event_blocks.h"
#include "core/store/event_pack.h"
#include "core/store/event_rows.h"
#include "core/store/lane_summary.h"
#include "core/store/schema.h"
#include "core/store/trace_reader.h"
#include "core/store/trace_writer.h"
#include "core/util/ordered_pool.h"
#include "core/util/output_file.h"

namespace fulcrum::store {
namespace {

struct Source {
    std::string path;
    std::vector<RankInfo> ranks;
    std::int64_t schema_version = 0;
    std::int64_t utc_offset_ns = 0;
    std::vector<std::int64_t> sync_marks;  // in UTC: local time + utc_offset_ns
    std::int64_t first_start_ns = 0;       // local clock
    bool has_events = false;
    std::int64_t shift_ns = 0;  // local -> reference UTC clock
    ClockAlignment alignment = ClockAlignment::utc_offset;
    bool events_in_blocks = false;  // a rank file of schema version 3 (event_blocks.h)
};

std::int64_t median(std::vector<std::int64_t> values) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
}

// The clock-sync marks and the earliest start of a file whose events are in blocks. The start
// is in the blocks' bounds; the marks, which the engine's threads emit, are looked for on host
// lanes only, so that the GPU streams' kernels (most of a capture) are not decoded for them.
Status inspect_blocks(const TraceReader& reader, Database& db, Source& source) {
    StringId sync_mark;
    for (std::size_t id = 1; id < reader.string_count(); ++id) {
        const StringId string{static_cast<std::uint32_t>(id)};
        if (reader.string(string) == kClockSyncMark) {
            sync_mark = string;
        }
    }
    auto first = db.query_int("SELECT MIN(start_min) FROM event_block",
                              std::numeric_limits<std::int64_t>::min());
    if (!first) {
        return first.error();
    }
    source.has_events = *first != std::numeric_limits<std::int64_t>::min();
    source.first_start_ns = source.has_events ? *first : 0;
    if (!sync_mark.valid()) {
        return {};
    }
    for (const LaneInfo& lane : reader.lanes()) {
        if (lane.kind != LaneKind::host_thread) {
            continue;
        }
        auto status = reader.for_each_event(lane.id, [&](const Event& e) {
            if (e.kind == EventKind::mark && e.name == sync_mark) {
                source.sync_marks.push_back(e.start_ns + source.utc_offset_ns);
            }
            return true;
        });
        if (!status) {
            return status;
        }
    }
    std::sort(source.sync_marks.begin(), source.sync_marks.end());
    return {};
}

Result<Source> inspect(const std::string& path) {
    auto reader = TraceReader::open(path);
    if (!reader) {
        return reader.error();
    }
    Source source;
    source.path = path;
    source.ranks = reader->ranks();
    source.schema_version = reader->schema_version();
    if (!source.ranks.empty()) {
        source.utc_offset_ns = source.ranks.front().utc_offset_ns;
    }
    auto db = Database::open(path, Database::Mode::read_only);
    if (!db) {
        return db.error();
    }
    if (reader->events_in_blocks()) {
        source.events_in_blocks = true;
        if (auto status = inspect_blocks(*reader, *db, source); !status) {
            return status.error();
        }
        return source;
    }
    auto marks = db->prepare(
        "SELECT e.start_ns FROM event e JOIN string s ON s.id = e.name "
        "WHERE e.kind = ?1 AND s.value = ?2 ORDER BY e.start_ns");
    if (!marks) {
        return marks.error();
    }
    marks->bind(1, static_cast<std::int64_t>(EventKind::mark));
    marks->bind(2, kClockSyncMark);
    while (marks->step()) {
        source.sync_marks.push_back(marks->column_int64(0) + source.utc_offset_ns);
    }
    auto first =
        db->query_int("SELECT MIN(start_ns) FROM event", std::numeric_limits<std::int64_t>::min());
    if (!first) {
        return first.error();
    }
    source.has_events = *first != std::numeric_limits<std::int64_t>::min();
    source.first_start_ns = source.has_events ? *first : 0;
    return source;
}

void choose_shifts(std::vector<Source>& sources, std::vector<std::string>& warnings) {
    const Source& reference = sources.front();
    for (auto& source : sources) {
        source.shift_ns = source.utc_offset_ns;
        source.alignment = ClockAlignment::utc_offset;
        const std::size_t common = std::min(source.sync_marks.size(), reference.sync_marks.size());
        if (common == 0) {
            continue;
        }
        std::vector<std::int64_t> differences;
        for (std::size_t k = 0; k < common; ++k) {
            differences.push_back(reference.sync_marks[k] - source.sync_marks[k]);
        }
        source.shift_ns += median(differences);
        source.alignment = ClockAlignment::barrier_marks;
    }
    const bool any_barrier = std::any_of(sources.begin(), sources.end(), [](const Source& s) {
        return s.alignment == ClockAlignment::barrier_marks;
    });
    if (any_barrier) {
        for (const auto& source : sources) {
            if (source.alignment != ClockAlignment::barrier_marks) {
                warnings.push_back("'" + source.path +
                                   "' has no clock-sync marks in common with the first file; "
                                   "aligned by its UTC offset only");
            }
        }
    }
}

// How copy_source_sql writes rank rows: with the clock alignment merge chose, or as the source
// has them (a copy of a run that was merged already).
enum class RankClock { aligned, as_is };

// The start of one transaction that copies an attached rank file (`src`) into the merged run:
// its strings (deduplicated), lanes (ids after `lane_offset`), event rows when `event_rows`
// (times shifted by `shift`, names and args mapped to the merged strings, in lane and time
// order), ranks, workload, counters and import log. It leaves the transaction open and
// temp.string_map (source string id -> merged id) for the events it did not copy
// (copy_events_as_rows, copy_events_as_blocks).
std::string copy_source_sql(const Source& source, std::int64_t shift, std::int64_t lane_offset,
                            bool event_rows, RankClock rank_clock) {
    const std::string shift_sql = std::to_string(shift);
    const std::string lane_sql = std::to_string(lane_offset);
    const std::string memory_sql =
        source.schema_version >= 2 ? "e.src_memory, e.dst_memory" : "NULL, NULL";
    const std::string events_sql =
        !event_rows ? ""
                    : "INSERT INTO event (lane, start_ns, end_ns, kind, name, category, step, "
                      "  microbatch, stage, phase, bytes, copy_kind, correlation, args, "
                      "  src_memory, dst_memory) "
                      "  SELECT e.lane + " +
                          lane_sql + ", e.start_ns + " + shift_sql + ", e.end_ns + " + shift_sql +
                          ", e.kind, n.new, e.category, e.step, e.microbatch, e.stage, e.phase, "
                          "  e.bytes, e.copy_kind, e.correlation, a.new, " +
                          memory_sql +
                          " FROM src.event e "
                          "  LEFT JOIN string_map n ON n.old = e.name "
                          "  LEFT JOIN string_map a ON a.old = e.args "
                          "  ORDER BY e.lane, e.start_ns, e.end_ns DESC;";
    const std::string clock_sql =
        rank_clock == RankClock::as_is
            ? std::string("clock_alignment, clock_shift_ns")
            : "'" + std::string(to_string(source.alignment)) + "', " + shift_sql;
    return "BEGIN;"
           "INSERT INTO string (value) SELECT DISTINCT value FROM src.string s "
           "  WHERE NOT EXISTS (SELECT 1 FROM main.string m WHERE m.value = s.value);"
           "CREATE TEMP TABLE string_map (old INTEGER PRIMARY KEY, new INTEGER NOT NULL);"
           "INSERT INTO string_map SELECT s.id, m.id FROM src.string s "
           "  JOIN main.string m ON m.value = s.value;"
           "INSERT INTO lane (id, rank, kind, name, native_id) "
           "  SELECT id + " +
           lane_sql + ", rank, kind, name, native_id FROM src.lane;" + events_sql +
           "INSERT INTO rank (rank, host, pid, device, dp, pp, cp, tp, utc_offset_ns, complete, "
           "  dropped_records, clock_alignment, clock_shift_ns) "
           "  SELECT rank, host, pid, device, dp, pp, cp, tp, utc_offset_ns, complete, "
           "  dropped_records, " +
           clock_sql +
           "  FROM src.rank;"
           "INSERT INTO workload SELECT * FROM src.workload;"
           "INSERT INTO counter (rank, name, time_ns, value) "
           "  SELECT rank, name, time_ns + " +
           shift_sql +
           ", value FROM src.counter;"
           "INSERT INTO import_log (source, record_index, reason, record, skipped) "
           "  SELECT source, record_index, reason, record, " +
           std::string(source.schema_version >= 2 ? "skipped" : "1") +
           " FROM src.import_log ORDER BY id;";
}

// Lane, start, end descending; equal events keep their order, as merge's ORDER BY keeps the
// rank file's. Rows of a rank file come lane after lane interleaved but each lane mostly in
// time order: a counting pass puts each lane's events together, and only a lane found out of
// order is sorted.
void sort_by_lane_and_time(std::vector<Event>& events) {
    std::vector<std::size_t> first;  // by lane id: where its events start, then go next
    for (const Event& e : events) {
        if (e.lane.value >= first.size()) {
            first.resize(e.lane.value + 1);
        }
        ++first[e.lane.value];
    }
    std::size_t at = 0;
    for (std::size_t& lane : first) {
        at += std::exchange(lane, at);
    }
    const std::vector<std::size_t> starts = first;
    std::vector<Event> by_lane(events.size());
    for (const Event& e : events) {
        by_lane[first[e.lane.value]++] = e;
    }
    events = std::move(by_lane);
    const auto earlier = [](const Event& a, const Event& b) {
        return a.start_ns < b.start_ns || (a.start_ns == b.start_ns && a.end_ns > b.end_ns);
    };
    for (std::size_t lane = 0; lane < starts.size(); ++lane) {
        const auto begin = events.begin() + static_cast<std::ptrdiff_t>(starts[lane]);
        const auto end = events.begin() + static_cast<std::ptrdiff_t>(first[lane]);
        if (!std::is_sorted(begin, end, earlier)) {
            std::stable_sort(begin, end, earlier);
        }
    }
}

// temp.string_map as a table by the source's string id: the merged run's id of each.
Result<std::vector<StringId>> read_string_map(Database& db) {
    std::vector<StringId> merged;
    auto string_map = db.prepare("SELECT old, new FROM temp.string_map");
    if (!string_map) {
        return string_map.error();
    }
    while (string_map->step()) {
        const std::int64_t old_id = string_map->column_int64(0);
        if (old_id > 0 && old_id <= std::numeric_limits<std::uint32_t>::max()) {
            if (static_cast<std::size_t>(old_id) >= merged.size()) {
                merged.resize(static_cast<std::size_t>(old_id) + 1);
            }
            merged[static_cast<std::size_t>(old_id)] =
                StringId{static_cast<std::uint32_t>(string_map->column_int64(1))};
        }
    }
    return merged;
}

// A source's event as the merged run has it: on its lane and clock, with its strings.
class EventMapping {
public:
    EventMapping(std::vector<StringId> strings, std::int64_t shift, std::int64_t lane_offset)
        : strings_(std::move(strings)), shift_(shift), lane_offset_(lane_offset) {}

    Event operator()(Event e) const {
        e.lane = LaneId{static_cast<std::uint32_t>(e.lane.value + lane_offset_)};
        e.start_ns += shift_;
        e.end_ns += shift_;
        e.name = string(e.name);
        e.args = string(e.args);
        return e;
    }

private:
    StringId string(StringId id) const {
        return id.value < strings_.size() ? strings_[id.value] : StringId{};
    }
    std::vector<StringId> strings_;
    std::int64_t shift_, lane_offset_;
};

// The source's lanes, lowest id first: the order its events go into the merged run.
std::vector<LaneId> lanes_in_order(const TraceReader& reader) {
    std::vector<LaneId> lanes;
    for (const LaneInfo& lane : reader.lanes()) {
        lanes.push_back(lane.id);
    }
    std::sort(lanes.begin(), lanes.end());
    return lanes;
}

// Said after each lane a source's events are copied for, with the fraction of its lanes done;
// false cancels the merge.
using LaneProgress = std::function<bool(double)>;

Status cancelled_merge() {
    return Error{ErrorCode::cancelled, "merge cancelled"};
}

// The events of a rank file kept in blocks, as rows of the merged run in the order
// copy_source_sql writes rows: lane by lane, by start time, end descending. `pack`, when given,
// gets each row too: the event pack made as the rows go in, not read back from them after.
Status copy_events_as_rows(Database& db, const TraceReader& reader, const EventMapping& mapping,
                           EventPackWriter* pack, const LaneProgress& progress) {
    EventInserter inserter;
    if (auto status = inserter.prepare(db); !status) {
        return status;
    }
    std::vector<Event> rows;
    bool ok = true;
    const auto write_rows = [&] {
        ok = ok && inserter.insert(rows);
        rows.clear();
    };
    const std::vector<LaneId> lanes = lanes_in_order(reader);
    for (std::size_t i = 0; i < lanes.size(); ++i) {
        auto status = reader.for_each_event(lanes[i], [&](const Event& e) {
            const Event& row = rows.emplace_back(mapping(e));
            ok = ok && (pack == nullptr || pack->add(row));
            if (rows.size() == EventInserter::kEventsPerInsert) {
                write_rows();
            }
            return ok;
        });
        if (!status) {
            return status;
        }
        if (ok) {
            write_rows();
        }
        if (!ok) {
            return db.error_for("cannot write");
        }
        if (!progress(double(i + 1) / double(lanes.size()))) {
            return cancelled_merge();
        }
    }
    return {};
}

// One lane of a rank file made ready on a worker: its events re-timed and renamed, cut into
// blocks, encoded and compressed, and summarised.
struct EncodedLane {
    std::vector<EventBlock> blocks;  // `data` left empty: the bytes are in `bytes`
    std::vector<std::string> bytes;
    RunSummaryBuilder summaries;
};

// A rank file in blocks into the run's blocks, its lanes side by side on `threads` workers
// (each with its own connection and encoder) and inserted here in lane order, a few lanes
// ahead at most: the blocks, their order and so the file are what one thread makes.
Status copy_lanes_as_blocks(Database& db, const TraceReader& reader, const EventMapping& mapping,
                            EventBlockWriter& blocks, RunSummaryBuilder& summaries, int threads,
                            const LaneProgress& progress) {
    const std::vector<LaneId> lanes = lanes_in_order(reader);
    // A worker for each block's worth of events at most (and a lane, produce_in_order's own
    // bound): an import of 1024 small rank files spent more opening a connection a worker than
    // encoding.
    const auto pack = reader.event_pack();
    const std::int64_t blocks_of_events =
        pack && pack->has_value() ? (*pack)->events / std::int64_t{kEventsPerBlock} : 1;
    const int workers = static_cast<int>(std::max<std::int64_t>(
        1, std::min<std::int64_t>(threads > 0 ? threads : worker_threads(), blocks_of_events)));
    // The first worker reads through the caller's connection, which nothing else uses
    // meanwhile; the others open their own.
    std::vector<std::optional<TraceReader>> opened(static_cast<std::size_t>(workers));
    std::vector<const TraceReader*> readers(static_cast<std::size_t>(workers), nullptr);
    readers[0] = &reader;
    std::vector<std::unique_ptr<EventBlockEncoder>> encoders(static_cast<std::size_t>(workers));
    const auto encode_lane = [&](int worker, std::size_t index) -> Result<EncodedLane> {
        const auto w = static_cast<std::size_t>(worker);
        if (readers[w] == nullptr) {
            auto open = TraceReader::open(reader.path());
            if (!open) {
                return open.error();
            }
            readers[w] = &opened[w].emplace(std::move(*open));
        }
        if (encoders[w] == nullptr) {
            encoders[w] = std::make_unique<EventBlockEncoder>();
        }
        const TraceReader* own = readers[w];
        EventBlockEncoder& encoder = *encoders[w];
        EncodedLane lane;
        std::vector<Event> block;
        const auto encode_block = [&] {
            EventBlock encoded = encoder.encode(block);
            lane.bytes.emplace_back(encoded.data);
            encoded.data = {};
            lane.blocks.push_back(encoded);
            block.clear();
        };
        auto status = own->for_each_event(lanes[index], [&](const Event& e) {
            lane.summaries.add(block.emplace_back(mapping(e)));
            if (block.size() == kEventsPerBlock) {
                encode_block();
            }
            return true;
        });
        if (!status) {
            return status.error();
        }
        if (!block.empty()) {
            encode_block();
        }
        return lane;
    };
    const auto insert_lane = [&](std::size_t index, EncodedLane&& lane) -> Status {
        for (std::size_t i = 0; i < lane.blocks.size(); ++i) {
            EventBlock& block = lane.blocks[i];
            block.data = lane.bytes[i];
            if (!blocks.insert(block)) {
                return db.error_for("cannot write");
            }
        }
        summaries.take(std::move(lane.summaries));
        if (!progress(double(index + 1) / double(lanes.size()))) {
            return cancelled_merge();
        }
        return {};
    };
    return produce_in_order<EncodedLane>(
        lanes.size(), workers, 2 * static_cast<std::size_t>(workers), encode_lane, insert_lane);
}

// Every event of a source as blocks of the merged run: lane by lane, each lane's events in
// store order cut into full blocks, so that a lane's blocks follow each other in time (a rank
// file's overlap, and its last ones are often short); and into the timeline's lane summaries
// as they pass (lane_summary.h). A file of rows (schema 2) is read whole
// in rowid order and sorted once: ~5x faster than a sorted query per lane, and a file whose
// writer was killed has no index for those. A file of blocks goes lane by lane through
// copy_lanes_as_blocks.
Status copy_events_as_blocks(Database& db, const TraceReader& reader, const EventMapping& mapping,
                             EventBlockWriter& blocks, RunSummaryBuilder& summaries, int threads,
                             const LaneProgress& progress) {
    std::vector<Event> block;
    bool ok = true;
    const auto add = [&](const Event& e) {
        summaries.add(block.emplace_back(mapping(e)));
        if (block.size() == kEventsPerBlock) {
            ok = blocks.write_block(block);
            block.clear();
        }
        return ok;
    };
    const auto end_lane = [&] {
        if (ok && !block.empty()) {
            ok = blocks.write_block(block);
        }
        block.clear();
        return ok ? Status() : db.error_for("cannot write");
    };
    if (!reader.events_in_blocks()) {
        std::vector<Event> events;
        auto rowids = reader.event_rowids();
        if (!rowids) {
            return rowids.error();
        }
        auto status = reader.scan_events(rowids->first, rowids->second, [&](const Event& e) {
            events.push_back(e);
            return true;
        });
        if (!status) {
            return status;
        }
        sort_by_lane_and_time(events);
        for (std::size_t i = 0; i < events.size(); ++i) {
            if (!add(events[i])) {
                break;
            }
            if (i + 1 == events.size() || events[i + 1].lane != events[i].lane) {
                if (auto ended = end_lane(); !ended) {
                    return ended;
                }
            }
        }
        return end_lane();
    }
    return copy_lanes_as_blocks(db, reader, mapping, blocks, summaries, threads, progress);
}

// The merged run's row, from the first source's with these in place of its own.
struct RunRow {
    std::string name;     // "": the source's
    std::string command;  // "": the source's
    std::int64_t start_utc_ns = 0;
};

// Where copy_source puts a source's events: in blocks, or as rows (by SQL, or from a source's
// blocks, each row also to `pack` when given).
struct EventOutput {
    EventBlockWriter* blocks = nullptr;      // not null: the run keeps blocks
    RunSummaryBuilder* summaries = nullptr;  // with blocks
    EventPackWriter* pack = nullptr;
    RankClock rank_clock = RankClock::aligned;
    int threads = 0;  // MergeOptions::threads
};

// Attaches one rank file, copies it in (copy_source_sql and the events' copy), with the run row
// from it when `run_row` is given, and detaches it.
Status copy_source(Database& db, const Source& source, std::int64_t shift, std::int64_t lane_offset,
                   const RunRow* run_row, const EventOutput& output, const LaneProgress& progress) {
    auto attach = db.prepare("ATTACH DATABASE ?1 AS src");
    if (!attach) {
        return attach.error();
    }
    attach->bind(1, source.path);
    if (!attach->run()) {
        return db.error_for("cannot read");
    }
    const bool rows_by_sql = output.blocks == nullptr && !source.events_in_blocks;
    Status copied =
        db.exec(copy_source_sql(source, shift, lane_offset, rows_by_sql, output.rank_clock));
    if (copied && !rows_by_sql) {
        copied = [&]() -> Status {
            auto strings = read_string_map(db);
            if (!strings) {
                return strings.error();
            }
            auto reader = TraceReader::open(source.path);
            if (!reader) {
                return reader.error();
            }
            const EventMapping mapping(std::move(*strings), shift, lane_offset);
            return output.blocks != nullptr
                       ? copy_events_as_blocks(db, *reader, mapping, *output.blocks,
                                               *output.summaries, output.threads, progress)
                       : copy_events_as_rows(db, *reader, mapping, output.pack, progress);
        }();
    }
    if (copied) {
        copied = db.exec("DROP TABLE temp.string_map; COMMIT;");
    }
    if (!copied) {
        (void)db.exec("ROLLBACK");
        return Error{copied.error().code,
                     "cannot merge '" + source.path + "': " + copied.error().message};
    }
    if (run_row != nullptr) {
        auto run = db.prepare(
            "INSERT INTO run (id, name, command, start_utc_ns, config, origin, producer) "
            "SELECT 1, CASE WHEN ?1 = '' THEN name ELSE ?1 END, "
            "CASE WHEN ?3 = '' THEN command ELSE ?3 END, ?2, config, origin, producer "
            "FROM src.run");
        if (!run) {
            return run.error();
        }
        run->bind(1, run_row->name);
        run->bind(2, run_row->start_utc_ns);
        run->bind(3, run_row->command);
        if (!run->run()) {
            return db.error_for("cannot write");
        }
    }
    return db.exec("DETACH DATABASE src");
}

// Every input, read for its ranks and clock, the lowest rank first (the reference clock). Two
// inputs holding one rank are refused. The inputs are read side by side on `threads` (0: every
// core): each is opened and its clock-sync marks decoded, which for an import of 1024 small
// rank files was two thirds of the merge on one core.
Result<std::vector<Source>> inspect_sources(const std::vector<std::string>& inputs, int threads) {
    std::vector<Source> sources;
    std::map<std::int32_t, std::string> rank_owner;
    const int workers = threads > 0 ? threads : worker_threads();
    auto inspected = produce_in_order<Source>(
        inputs.size(), workers, 4 * static_cast<std::size_t>(workers),
        [&](int, std::size_t index) { return inspect(inputs[index]); },
        [&](std::size_t index, Source&& source) -> Status {
            for (const auto& rank : source.ranks) {
                auto [it, inserted] = rank_owner.emplace(rank.rank, inputs[index]);
                if (!inserted) {
                    return Error{ErrorCode::invalid_input,
                                 "rank " + std::to_string(rank.rank) + " is in both '" +
                                     it->second + "' and '" + inputs[index] +
                                     "'; merge the files of one run only"};
                }
            }
            sources.push_back(std::move(source));
            return {};
        });
    if (!inspected) {
        return inspected.error();
    }
    // The lowest rank is the reference clock.
    std::stable_sort(sources.begin(), sources.end(), [](const Source& a, const Source& b) {
        const auto first_rank = [](const Source& s) {
            return s.ranks.empty() ? std::numeric_limits<std::int32_t>::max()
                                   : s.ranks.front().rank;
        };
        return first_rank(a) < first_rank(b);
    });
    return sources;
}

// What every merged run gets once its events are in: the string index, the event indexes and
// lane statistics, and for a run of rows the event pack (unless `packed`: it was written with
// the rows); then the event count. A run of blocks needs no pack: its blocks are what loading
// reads (TraceReader::event_pack).
Result<std::int64_t> index_and_pack(Database& db, bool packed) {
    if (auto status = db.exec("CREATE INDEX IF NOT EXISTS string_by_value ON string (value)");
        !status) {
        return status.error();
    }
    if (auto status = create_indexes(db); !status) {
        return status.error();
    }
    auto block_events = db.query_int("SELECT COALESCE(SUM(events), 0) FROM event_block");
    if (!block_events || *block_events > 0) {
        return block_events;
    }
    // The compact copy of the events that loading reads (event_pack.h): ~20% more file for
    // loads about ten times faster.
    if (auto status = packed ? Status() : write_event_pack(db); !status) {
        return status.error();
    }
    return db.query_int("SELECT COUNT(*) FROM event");
}

// The ranks of the merged run at `output`, with a warning for each that stopped early.
Status read_merged_ranks(const std::string& output, MergeReport& report) {
    auto merged = TraceReader::open(output);
    if (!merged) {
        return merged.error();
    }
    report.ranks = merged->ranks();
    for (const auto& rank : report.ranks) {
        if (!rank.complete) {
            report.warnings.push_back("rank " + std::to_string(rank.rank) +
                                      " is incomplete: its recording stopped early (killed?); "
                                      "everything up to its last commit is included");
        }
    }
    return {};
}

// Every lane's summary, an empty one for lanes without events.
Status write_summaries(Database& db, RunSummaryBuilder summaries) {
    std::vector<LaneId> lanes;
    auto lane_ids = db.prepare("SELECT id FROM lane ORDER BY id");
    if (!lane_ids) {
        return lane_ids.error();
    }
    while (lane_ids->step()) {
        lanes.push_back(LaneId{static_cast<std::uint32_t>(lane_ids->column_int64(0))});
    }
    if (auto status = db.exec("BEGIN"); !status) {
        return status;
    }
    if (auto status = write_lane_summaries(db, std::move(summaries).finish(lanes)); !status) {
        return status;
    }
    return db.exec("COMMIT");
}

// MergeOptions::lone_process: the run's only rank, without coordinates, placed on the grid of
// one, and the import log says why.
Status place_lone_process(Database& db) {
    // A coordinate the rank does not know is NULL (docs/schema.md).
    auto unplaced = db.query_int(
        "SELECT COUNT(*) FROM rank WHERE COALESCE(dp, -1) < 0 AND COALESCE(tp, -1) < 0 AND "
        "COALESCE(pp, -1) < 0 AND COALESCE(cp, -1) < 0");
    auto ranks = db.query_int("SELECT COUNT(*) FROM rank");
    if (!unplaced || !ranks) {
        return !unplaced ? unplaced.error() : ranks.error();
    }
    if (*ranks != 1 || *unplaced != 1) {
        return {};
    }
    return db.exec(
        "UPDATE rank SET dp = 0, tp = 0, pp = 0, cp = 0;"
        "INSERT INTO import_log (source, record_index, reason, record, skipped) VALUES "
        "('capture', -1, 'note: structure: grid dp1 tp1 pp1 cp1, from one process that no "
        "launcher placed (no rank variable of mpirun, torchrun or SLURM) or whose launcher "
        "says the job has one rank, and that marked no coordinates: the grid of one rank', '', "
        "0);");
}

// Writes the run of `sources` at `output`: each source's events shifted by its shift_ns − `origin`,
// its lanes after the ones before it, the run row from the first. Returns the event count.
Result<std::int64_t> write_run(const std::vector<Source>& sources, std::int64_t origin,
                               const std::string& output, const MergeOptions& options,
                               RankClock rank_clock, const RunRow& run_row) {
    // Build next to the target and rename at the end: a failed or cancelled merge never
    // leaves a half-written run where a good one was expected.
    auto target = PartialDatabase::prepare(output, options.overwrite);
    if (!target) {
        return target.error();
    }
    auto db_result = Database::open(target->partial_path(), Database::Mode::create);
    if (!db_result) {
        return Error{ErrorCode::io, "cannot write '" + output + "': " + db_result.error().message};
    }
    Database db = std::move(*db_result);
    // Hold statements on `db`: go first.
    std::optional<EventPackWriter> pack;
    std::optional<EventBlockWriter> blocks;
    RunSummaryBuilder summaries;
    auto fail = [&](const Error& error) -> Result<std::int64_t> {
        pack.reset();
        blocks.reset();
        db = Database();
        return error;  // the partial file goes with `target`
    };
    // No journal: a failed merge is deleted, never recovered. Events go in lane by lane in
    // time order, so that a lane's events share pages and a window query reads few of them.
    if (auto status = configure_for_bulk(db); !status) {
        return fail(status.error());
    }
    if (auto status = create_schema(db); !status) {
        return fail(status.error());
    }
    if (auto status = db.exec("CREATE INDEX string_by_value ON string (value)"); !status) {
        return fail(status.error());
    }

    // Rows from rank files in blocks are decoded in C++ on their way in, so the event pack is
    // made then; rows copied by SQL are packed after, read back (write_event_pack).
    const bool in_blocks = options.events == WriterOptions::EventStorage::blocks;
    const bool pack_while_copying =
        !in_blocks && std::all_of(sources.begin(), sources.end(),
                                  [](const Source& s) { return s.events_in_blocks; });
    if (in_blocks) {
        blocks.emplace();
        if (auto status = blocks->prepare(db); !status) {
            return fail(status.error());
        }
    } else if (pack_while_copying) {
        pack.emplace(db);
        if (auto status = pack->create_table(); !status) {
            return fail(status.error());
        }
    }
    const EventOutput event_output{blocks ? &*blocks : nullptr, &summaries, pack ? &*pack : nullptr,
                                   rank_clock, options.threads};
    std::int64_t lane_offset = 0;
    for (std::size_t i = 0; i < sources.size(); ++i) {
        const Source& source = sources[i];
        // Each source is an equal share of the bar; its lanes move it within the share.
        const LaneProgress progress = [&](double lanes_done) {
            return !options.progress ||
                   options.progress((static_cast<double>(i) + lanes_done) / sources.size());
        };
        if (!progress(0.0)) {
            return fail(cancelled_merge().error());
        }
        if (auto status = copy_source(db, source, source.shift_ns - origin, lane_offset,
                                      i == 0 ? &run_row : nullptr, event_output, progress);
            !status) {
            return fail(status.error());
        }
        auto max_lane = db.query_int("SELECT MAX(id) FROM lane", lane_offset);
        if (!max_lane) {
            return fail(max_lane.error());
        }
        lane_offset = *max_lane;
    }
    if (pack && !pack->flush()) {
        return fail(db.error_for("cannot write the event pack of"));
    }
    pack.reset();
    blocks.reset();
    if (in_blocks) {
        // The summaries the GUI opens a large run from (views/timeline/paged_timeline.h), made
        // as the events went by: reading them back would decode every block again.
        if (auto status = write_summaries(db, std::move(summaries)); !status) {
            return fail(status.error());
        }
    }
    if (options.lone_process && sources.size() == 1) {
        if (auto status = place_lone_process(db); !status) {
            return fail(status.error());
        }
    }
    auto events = index_and_pack(db, pack_while_copying);
    if (!events) {
        return fail(events.error());
    }
    db = Database();
    if (auto status = target->commit("the merged run"); !status) {
        return status.error();
    }
    return events;
}

}  // namespace

Result<MergeReport> merge_rank_files(const std::vector<std::string>& inputs,
                                     const std::string& output, const MergeOptions& options) {
    if (inputs.empty()) {
        return Error{ErrorCode::invalid_input, "nothing to merge: give at least one rank file"};
    }
    MergeReport report;
    auto inspected = inspect_sources(inputs, options.threads);
    if (!inspected) {
        return inspected.error();
    }
    std::vector<Source> sources = std::move(*inspected);
    choose_shifts(sources, report.warnings);

    std::int64_t origin = std::numeric_limits<std::int64_t>::max();
    for (const auto& source : sources) {
        if (source.has_events) {
            origin = std::min(origin, source.first_start_ns + source.shift_ns);
        }
    }
    if (origin == std::numeric_limits<std::int64_t>::max()) {
        origin = sources.front().utc_offset_ns;
    }

    auto events = write_run(sources, origin, output, options, RankClock::aligned,
                            RunRow{options.run_name, options.command, origin});
    if (!events) {
        return events.error();
    }
    report.events = *events;
    report.start_utc_ns = origin;
    if (auto status = read_merged_ranks(output, report); !status) {
        return status.error();
    }
    if (options.progress) {
        options.progress(1.0);
    }
    return report;
}

Result<std::int64_t> write_rows_copy(const std::string& input, const std::string& output,
                                     const MergeOptions& options) {
    auto reader = TraceReader::open(input);
    if (!reader) {
        return reader.error();
    }
    auto source = inspect(input);
    if (!source) {
        return source.error();
    }
    source->shift_ns = 0;
    MergeOptions rows = options;
    rows.events = WriterOptions::EventStorage::rows;
    return write_run({std::move(*source)}, 0, output, rows, RankClock::as_is,
                     RunRow{"", "", reader->run().start_utc_ns});
}

}  // namespace fulcrum::store
