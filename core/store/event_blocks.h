// Event blocks: how rank files hold their events (schema version 3, docs/schema.md,
// "event_block"). A block is up to kEventsPerBlock events of one lane, sorted by start time
// (end descending on ties), in the event pack's varint format (event_pack.h), compressed with
// zstd when that pays. Rows cost ~85 bytes an event on disk and SQLite's per-row work caps the
// writer near 1.25 M events/s (bench/README.md); a block costs one row per 16K events and
// about 6 bytes an event. Each block row carries its time and step bounds, so a window or
// step query decodes only the blocks that can hold an answer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/store/sqlite_handle.h"
#include "core/trace/model.h"
#include "core/util/result.h"

namespace fulcrum::store {

inline constexpr std::size_t kEventsPerBlock = 16384;
// event_block.codec: how `data` is stored.
enum class BlockCodec : int { none = 0, zstd = 1 };
inline constexpr int kNewestBlockCodec = 1;

// One event_block row.
struct EventBlock {
    LaneId lane;
    std::int64_t start_min = 0, start_max = 0, end_max = 0;
    // Longest end − start of the block (saturated at INT64_MAX): lane.max_duration_ns of a file
    // whose writer was killed before it wrote the lane statistics.
    std::int64_t duration_max = 0;
    std::int32_t step_min = -1, step_max = -1;  // -1, -1: no event of the block knows its step
    std::int64_t events = 0;
    int format = 0;
    BlockCodec codec = BlockCodec::none;
    std::string_view data;  // the encoder's buffer: valid until its next encode()
};

// Makes blocks: sorts each lane's events into store order, encodes and compresses them.
// Holds a zstd context, so that one encoder reused by a writer thread allocates it once.
class EventBlockEncoder {
public:
    EventBlockEncoder();
    ~EventBlockEncoder();
    EventBlockEncoder(const EventBlockEncoder&) = delete;
    EventBlockEncoder& operator=(const EventBlockEncoder&) = delete;

    // `events` all of one lane; sorted in place.
    EventBlock encode(std::vector<Event>& events);

private:
    struct Context;
    std::unique_ptr<Context> context_;
};

// Appends a block's `count` events to `out`; false when the block is damaged (a codec or
// format this build does not know counts as damaged: the caller says which).
bool decode_stored_block(std::string_view data, std::size_t count, LaneId lane, int format,
                         int codec, std::vector<Event>& out);

// The writer's side (TraceWriter with WriterOptions::EventStorage::blocks): events are staged
// per lane and a lane's block is inserted when it fills, or for every lane at write_pending(),
// which the writer calls at least every commit interval. Used by the writer thread only.
class EventBlockWriter {
public:
    Status prepare(Database& db);
    // False when an insert failed (the database's error says why).
    bool add(const std::vector<Event>& events);
    bool write_pending();
    bool has_pending() const { return pending_events_ > 0; }
    // After a failed write: what was staged is lost with the recording.
    void discard();
    // Writes `events` (all of one lane, at most kEventsPerBlock) as one block at once, past the
    // staging: merge, which hands over each lane whole and in order. Sorts them in place.
    bool write_block(std::vector<Event>& events);
    // Inserts a block an encoder of its own made (merge's workers).
    bool insert(const EventBlock& block);

private:
    std::vector<Event>& lane_events(LaneId lane);
    // write_block of a lane's staged events, which it empties.
    bool write_staged(std::vector<Event>& events);

    Statement insert_;
    EventBlockEncoder encoder_;
    // By lane id; ids past the table's end (never seen in practice: ids are dense from 1)
    // go to `far_lanes_`.
    std::vector<std::vector<Event>> lanes_;
    std::vector<std::pair<LaneId, std::vector<Event>>> far_lanes_;
    std::size_t pending_events_ = 0;
};

}  // namespace fulcrum::store
