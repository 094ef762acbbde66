// The trace store's schema (docs/schema.md describes it column by column). Only core/store
// knows these tables; everything else goes through TraceWriter and TraceReader.
#pragma once

#include <cstdint>
#include <string>

#include "core/store/sqlite_handle.h"
#include "core/util/result.h"

namespace fulcrum::store {

// Bump on any change a reader of the previous version could misread, and teach the reader
// to upgrade or refuse older files.
// Version 2 added event.src_memory, event.dst_memory and import_log.skipped; version 1 files
// read with the memory kinds unknown and every import_log row one skipped record.
// Version 3 added event_block (rank files' events in compressed blocks, event_blocks.h); a
// version 2 file has no such table and holds its events as rows.
inline constexpr std::int64_t kSchemaVersion = 3;
// PRAGMA application_id: "FULC". Tells a Fulcrum trace from any other SQLite file.
inline constexpr std::int64_t kApplicationId = 0x46554C43;

// Page size, journal and sync settings for a file about to be recorded into. Call on a new,
// empty database before create_schema (the page size is fixed by the first table).
Status configure_for_recording(Database& db);

// The same page size without a journal or syncs: for a file that is deleted, not recovered,
// when writing it fails (merge's output, an import).
Status configure_for_bulk(Database& db);

// Creates every table in an empty database and stamps application_id and user_version.
Status create_schema(Database& db);

// Secondary indexes and per-lane statistics. The writer builds them at close, not while
// recording, because each index roughly halves insert throughput; a file whose writer was
// killed has none and is read without them. `lane_statistics` false leaves
// lane.max_duration_ns to the caller (the writer, which saw every event, sets it without
// reading them back).
Status create_indexes(Database& db, bool lane_statistics = true);
// The one index of create_indexes that costs a writer little to keep up as rows go in
// (event_by_lane_time: a lane's events come in time order, so each lane adds at one place);
// create_indexes then leaves it as it is (WriterOptions::lane_index_while_writing).
Status create_lane_index(Database& db);

// Checks that `path` is a Fulcrum trace this build can read before SQLite touches it, so
// that a foreign, truncated or newer file gets one message naming the file and the problem.
Status check_trace_file(const std::string& path);

// The trace file a path names: the path itself, or for a capture folder (`fulcrum capture -o
// DIR`) its merged DIR/run.fulcrum. A folder without one is an error that says what to do.
Result<std::string> resolve_trace_path(const std::string& path);

// resolve_trace_path + check_trace_file + open + schema checks.
Result<Database> open_trace(const std::string& path, Database::Mode mode);

}  // namespace fulcrum::store
