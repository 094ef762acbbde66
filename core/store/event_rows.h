// The event table's columns as readers select them, one row back into an Event, and events in
// as rows: the one place (inside core/store) that knows the column order. NULL ("not known") is
// mapped to -1 in SQL, so a row reads with one call per column and no type checks: 25% faster over
// a 10M-event scan than testing each column for NULL.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/store/sqlite_handle.h"
#include "core/trace/model.h"

namespace fulcrum::store {

// The select list for a file of `schema_version`; version 1 files have no memory kinds and
// read them as unknown.
std::string event_columns(std::int64_t schema_version);

// The Event in the current row of a statement that selected event_columns() first.
Event read_event_row(const Statement& stmt);

// Inserts events as rows, kEventsPerInsert a statement and the rest one at a time: one
// statement step per 32 rows instead of per row spends less of a writer's time in SQLite's
// per-statement work (bench_kineto: about a quarter of the insert time); 32 × 16 parameters
// stays far below SQLite's limit of 32766. The writer's rows and merge's copy of event blocks.
class EventInserter {
public:
    static constexpr std::size_t kEventsPerInsert = 32;
    Status prepare(Database& db);
    // False when a statement failed (the database says why).
    bool insert(std::span<const Event> events);

private:
    Statement one_, many_;
};

}  // namespace fulcrum::store
