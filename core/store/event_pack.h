// The event pack: a compact copy of the event table, one BLOB per block of a lane's events,
// that loads an order of magnitude faster than decoding every row through SQLite.
//
// Reading 10M event rows costs ~4 s here, almost all of it SQLite decoding 14 columns per
// row; the same events as varint blocks decode in ~0.3 s. The event table stays the source
// of truth (SQL queries, window reads, exports); the pack is a read cache that merge writes
// once, and a reader uses it only when it holds exactly as many events as the table
// (docs/schema.md, "event_pack"). Files without it (rank files, older runs) read by rows.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/store/sqlite_handle.h"
#include "core/trace/model.h"
#include "core/util/result.h"

namespace fulcrum::store {

// Format 2 added the copies' memory kinds; format 1 blocks still decode (memory unknown).
inline constexpr int kEventPackFormat = 2;
inline constexpr std::size_t kEventsPerPackBlock = 65536;

// No event's encoding is longer: Δstart, duration and bytes (10 each), a verbatim correlation
// with its tag (11), name, args, step and micro-batch (5 each), stage (3) and six single bytes
// come to 70.
inline constexpr std::size_t kMaxEncodedEventBytes = 80;

// One block: events of one lane, in the order given. Every field round-trips exactly,
// including -1 ("unknown") and extreme int64 values.
std::string encode_event_block(const Event* events, std::size_t count);
// The same into `buffer`, which has room for count × kMaxEncodedEventBytes; returns the length.
std::size_t encode_event_block(const Event* events, std::size_t count, std::uint8_t* buffer);
// Appends `count` events of `lane` to `out`; false when the bytes are damaged (short,
// overlong varints, or bytes left over).
bool decode_event_block(std::string_view bytes, std::size_t count, LaneId lane, int format,
                        std::vector<Event>& out);

// Writes the pack's blocks as events come, in the event table's rowid order, inside the
// caller's transactions. A block is written when full or when the events move on to another
// lane. A lane whose rows are not contiguous (a file not written by merge) still packs
// correctly, in more blocks: blocks keep rowid order and readers concatenate a lane's blocks
// in that order.
class EventPackWriter {
public:
    explicit EventPackWriter(Database& db);
    // (Re)creates the empty pack table.
    Status create_table();
    // False when an insert failed (the database's error says why).
    bool add(const Event& event);
    // Writes the last block; call once every event is added.
    bool flush();

private:
    Database& db_;
    Statement insert_;
    std::vector<Event> block_;
};

// (Re)writes the pack of an open, writable run database from its event table (rowid order,
// which merge makes lane by lane in time order). `progress` may be empty.
Status write_event_pack(Database& db, const std::function<void(double)>& progress = {});

}  // namespace fulcrum::store
