#include "core/store/event_blocks.h"

#include <zstd.h>

#include <algorithm>
#include <limits>

#include "core/store/event_pack.h"

namespace fulcrum::store {
namespace {

// zstd level 1: the fastest of its normal levels. On the varint blocks of bench_store, level 3
// saves under a byte an event and costs a third more writer time.
constexpr int kZstdLevel = 1;
// A frame claiming more than this per event is damaged, not merely large.
constexpr std::size_t kMaxBytesPerEvent = kMaxEncodedEventBytes;

bool in_store_order(const Event& a, const Event& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
}

struct DecompressionContext {
    ZSTD_DCtx* context = ZSTD_createDCtx();
    std::string buffer;
    ~DecompressionContext() { ZSTD_freeDCtx(context); }
};

}  // namespace

struct EventBlockEncoder::Context {
    ZSTD_CCtx* zstd = ZSTD_createCCtx();
    // Reused from block to block: a fresh buffer per block cost page faults and zeroing.
    std::unique_ptr<std::uint8_t[]> raw, packed;
    std::size_t raw_capacity = 0, packed_capacity = 0;
    Context() {
        ZSTD_CCtx_setParameter(zstd, ZSTD_c_compressionLevel, kZstdLevel);
        // A 4-byte checksum per block: a flipped bit is "damaged", not events that decode
        // to something else.
        ZSTD_CCtx_setParameter(zstd, ZSTD_c_checksumFlag, 1);
    }
    ~Context() { ZSTD_freeCCtx(zstd); }
};

EventBlockEncoder::EventBlockEncoder() : context_(std::make_unique<Context>()) {}
EventBlockEncoder::~EventBlockEncoder() = default;

EventBlock EventBlockEncoder::encode(std::vector<Event>& events) {
    // Collectors hand a range over when it ends, after the ranges nested in it: most blocks
    // arrive sorted, some need it.
    if (!std::is_sorted(events.begin(), events.end(), in_store_order)) {
        std::stable_sort(events.begin(), events.end(), in_store_order);
    }
    EventBlock block;
    block.lane = events.front().lane;
    block.events = static_cast<std::int64_t>(events.size());
    block.format = kEventPackFormat;
    block.start_min = events.front().start_ns;
    block.start_max = events.back().start_ns;
    block.end_max = std::numeric_limits<std::int64_t>::min();
    bool any_step = false;  // -1 is "unknown", stored as NULL in rows; any other step counts
    for (const Event& e : events) {
        block.end_max = std::max(block.end_max, e.end_ns);
        std::int64_t duration = 0;
        if (__builtin_sub_overflow(e.end_ns, e.start_ns, &duration)) {
            duration = std::numeric_limits<std::int64_t>::max();
        }
        block.duration_max = std::max(block.duration_max, duration);
        if (e.step != -1) {
            block.step_min = any_step ? std::min(block.step_min, e.step) : e.step;
            block.step_max = any_step ? std::max(block.step_max, e.step) : e.step;
            any_step = true;
        }
    }
    Context& c = *context_;
    const std::size_t raw_bound = events.size() * kMaxEncodedEventBytes;
    if (c.raw_capacity < raw_bound) {
        c.raw = std::make_unique_for_overwrite<std::uint8_t[]>(raw_bound);
        c.raw_capacity = raw_bound;
    }
    const std::size_t raw = encode_event_block(events.data(), events.size(), c.raw.get());
    const std::size_t packed_bound = ZSTD_compressBound(raw);
    if (c.packed_capacity < packed_bound) {
        c.packed = std::make_unique_for_overwrite<std::uint8_t[]>(packed_bound);
        c.packed_capacity = packed_bound;
    }
    const std::size_t packed =
        ZSTD_compress2(c.zstd, c.packed.get(), packed_bound, c.raw.get(), raw);
    if (ZSTD_isError(packed) || packed >= raw) {
        block.codec = BlockCodec::none;  // compression did not pay (or failed): stored raw
        block.data = std::string_view(reinterpret_cast<const char*>(c.raw.get()), raw);
    } else {
        block.codec = BlockCodec::zstd;
        block.data = std::string_view(reinterpret_cast<const char*>(c.packed.get()), packed);
    }
    return block;
}

bool decode_stored_block(std::string_view data, std::size_t count, LaneId lane, int format,
                         int codec, std::vector<Event>& out) {
    if (format < 1 || format > kEventPackFormat) {
        return false;
    }
    if (codec == static_cast<int>(BlockCodec::none)) {
        return decode_event_block(data, count, lane, format, out);
    }
    if (codec != static_cast<int>(BlockCodec::zstd)) {
        return false;
    }
    const unsigned long long size = ZSTD_getFrameContentSize(data.data(), data.size());
    if (size == ZSTD_CONTENTSIZE_UNKNOWN || size == ZSTD_CONTENTSIZE_ERROR ||
        count > std::numeric_limits<std::size_t>::max() / kMaxBytesPerEvent ||
        size > count * kMaxBytesPerEvent) {
        return false;
    }
    thread_local DecompressionContext zstd;
    zstd.buffer.resize(static_cast<std::size_t>(size));
    const std::size_t got = ZSTD_decompressDCtx(zstd.context, zstd.buffer.data(),
                                                zstd.buffer.size(), data.data(), data.size());
    if (ZSTD_isError(got) || got != size) {
        return false;
    }
    return decode_event_block(zstd.buffer, count, lane, format, out);
}

Status EventBlockWriter::prepare(Database& db) {
    auto insert = db.prepare(
        "INSERT INTO event_block (lane, start_min, start_max, end_max, duration_max, step_min, "
        "step_max, events, format, codec, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, "
        "?11)");
    if (!insert) {
        return insert.error();
    }
    insert_ = std::move(*insert);
    return {};
}

std::vector<Event>& EventBlockWriter::lane_events(LaneId lane) {
    constexpr std::uint32_t kDirectLanes = 1u << 16;
    if (lane.value < kDirectLanes) {
        if (lane.value >= lanes_.size()) {
            lanes_.resize(lane.value + 1);
        }
        return lanes_[lane.value];
    }
    for (auto& [id, events] : far_lanes_) {
        if (id == lane) {
            return events;
        }
    }
    return far_lanes_.emplace_back(lane, std::vector<Event>()).second;
}

bool EventBlockWriter::add(const std::vector<Event>& events) {
    for (const Event& event : events) {
        std::vector<Event>& lane = lane_events(event.lane);
        lane.push_back(event);
        ++pending_events_;
        if (lane.size() >= kEventsPerBlock && !write_staged(lane)) {
            return false;
        }
    }
    return true;
}

bool EventBlockWriter::write_pending() {
    for (auto& lane : lanes_) {
        if (!lane.empty() && !write_staged(lane)) {
            return false;
        }
    }
    for (auto& [id, lane] : far_lanes_) {
        if (!lane.empty() && !write_staged(lane)) {
            return false;
        }
    }
    return true;
}

void EventBlockWriter::discard() {
    lanes_.clear();
    far_lanes_.clear();
    pending_events_ = 0;
}

bool EventBlockWriter::write_block(std::vector<Event>& events) {
    return insert(encoder_.encode(events));
}

bool EventBlockWriter::insert(const EventBlock& block) {
    insert_.bind(1, std::int64_t{block.lane.value});
    insert_.bind(2, block.start_min);
    insert_.bind(3, block.start_max);
    insert_.bind(4, block.end_max);
    insert_.bind(5, block.duration_max);
    insert_.bind_optional(6, block.step_min);
    insert_.bind_optional(7, block.step_max);
    insert_.bind(8, block.events);
    insert_.bind(9, std::int64_t{block.format});
    insert_.bind(10, static_cast<std::int64_t>(block.codec));
    insert_.bind_blob(11, block.data);
    return insert_.run();
}

bool EventBlockWriter::write_staged(std::vector<Event>& events) {
    const bool written = write_block(events);
    pending_events_ -= events.size();
    // A busy lane keeps its buffer (a megabyte allocated again for every block was a third of
    // the writer's time, in page faults); a quiet one gives it back, so that many quiet lanes
    // do not each hold a block's room.
    if (events.size() >= kEventsPerBlock / 8) {
        events.clear();
    } else {
        std::vector<Event>().swap(events);
    }
    return written;
}

}  // namespace fulcrum::store
