#include "core/store/event_pack.h"

#include <sqlite3.h>

#include <algorithm>

#include "core/store/event_rows.h"
#include "core/store/schema.h"
#include "core/store/sqlite_handle.h"

namespace fulcrum::store {

namespace {

// Zig-zag maps small negative and positive numbers to small unsigned ones (-1 → 1, 1 → 2),
// so -1 ("unknown") and small deltas take one byte.
std::uint64_t zigzag(std::int64_t value) {
    return (static_cast<std::uint64_t>(value) << 1) ^ static_cast<std::uint64_t>(value >> 63);
}

std::int64_t unzigzag(std::uint64_t value) {
    return static_cast<std::int64_t>(value >> 1) ^ -static_cast<std::int64_t>(value & 1);
}

// Writes through a cursor into a buffer the caller sized (kMaxEncodedEventBytes an event): a
// push_back per byte spent more time checking capacity than encoding.
void put_varint(std::uint8_t*& out, std::uint64_t value) {
    while (value >= 0x80) {
        *out++ = static_cast<std::uint8_t>((value & 0x7f) | 0x80);
        value >>= 7;
    }
    *out++ = static_cast<std::uint8_t>(value);
}

void put_signed(std::uint8_t*& out, std::int64_t value) {
    put_varint(out, zigzag(value));
}

// Wrapping subtraction: deltas of arbitrary int64 values round-trip without overflow.
std::int64_t wrapping_difference(std::int64_t a, std::int64_t b) {
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) - static_cast<std::uint64_t>(b));
}

std::int64_t wrapping_sum(std::int64_t a, std::int64_t b) {
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
}

class BlockDecoder {
public:
    explicit BlockDecoder(std::string_view bytes)
        : at_(reinterpret_cast<const std::uint8_t*>(bytes.data())), end_(at_ + bytes.size()) {}

    bool failed() const { return failed_; }
    bool finished() const { return at_ == end_; }

    std::uint64_t varint() {
        std::uint64_t value = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (at_ == end_) {
                failed_ = true;
                return 0;
            }
            const std::uint8_t byte = *at_++;
            value |= std::uint64_t{byte & 0x7fu} << shift;
            if ((byte & 0x80) == 0) {
                return value;
            }
        }
        failed_ = true;  // more than 10 bytes: not a varint this encoder wrote
        return 0;
    }
    std::int64_t signed_varint() { return unzigzag(varint()); }
    std::uint8_t byte() {
        if (at_ == end_) {
            failed_ = true;
            return 0;
        }
        return *at_++;
    }

private:
    const std::uint8_t* at_;
    const std::uint8_t* end_;
    bool failed_ = false;
};

}  // namespace

// Per event: Δstart, duration, name, args, kind, category, phase, copy kind, step,
// micro-batch, stage, bytes, then the correlation: 0 for none (-1), 2 + the zig-zagged delta
// from the lane's previous correlation (kernels' ids rise by small steps), or 1 and the
// value itself for ids that fit neither.
std::size_t encode_event_block(const Event* events, std::size_t count, std::uint8_t* buffer) {
    std::uint8_t* out = buffer;
    std::int64_t previous_start = 0;
    std::int64_t previous_correlation = 0;
    for (std::size_t i = 0; i < count; ++i) {
        const Event& event = events[i];
        put_signed(out, wrapping_difference(event.start_ns, previous_start));
        put_signed(out, wrapping_difference(event.end_ns, event.start_ns));
        previous_start = event.start_ns;
        put_varint(out, event.name.value);
        put_varint(out, event.args.value);
        *out++ = static_cast<std::uint8_t>(event.kind);
        *out++ = static_cast<std::uint8_t>(event.category);
        *out++ = static_cast<std::uint8_t>(event.phase);
        *out++ = static_cast<std::uint8_t>(event.copy_kind);
        *out++ = static_cast<std::uint8_t>(event.src_memory);
        *out++ = static_cast<std::uint8_t>(event.dst_memory);
        put_signed(out, event.step);
        put_signed(out, event.microbatch);
        put_signed(out, event.stage);
        put_signed(out, event.bytes);
        const std::uint64_t delta =
            zigzag(wrapping_difference(event.correlation, previous_correlation));
        if (event.correlation == -1) {
            put_varint(out, 0);
        } else if (event.correlation < 0 || delta > UINT64_MAX - 2) {  // foreign ids: verbatim
            put_varint(out, 1);
            put_signed(out, event.correlation);
        } else {
            put_varint(out, 2 + delta);
        }
        if (event.correlation >= 0) {
            previous_correlation = event.correlation;
        }
    }
    return static_cast<std::size_t>(out - buffer);
}

std::string encode_event_block(const Event* events, std::size_t count) {
    std::string out(count * kMaxEncodedEventBytes, '\0');
    out.resize(encode_event_block(events, count, reinterpret_cast<std::uint8_t*>(out.data())));
    return out;
}

bool decode_event_block(std::string_view bytes, std::size_t count, LaneId lane, int format,
                        std::vector<Event>& out) {
    // Every event takes at least 12 bytes; a larger count is damage, and must not size `out`.
    if (count > bytes.size()) {
        return false;
    }
    BlockDecoder in(bytes);
    const std::size_t first = out.size();
    out.resize(first + count);
    Event* event = out.data() + first;
    std::int64_t start = 0;
    std::int64_t previous_correlation = 0;
    for (std::size_t i = 0; i < count; ++i, ++event) {
        start = wrapping_sum(start, in.signed_varint());
        event->start_ns = start;
        event->end_ns = wrapping_sum(start, in.signed_varint());
        event->lane = lane;
        event->name = StringId{static_cast<std::uint32_t>(in.varint())};
        event->args = StringId{static_cast<std::uint32_t>(in.varint())};
        event->kind = static_cast<EventKind>(in.byte());
        event->category = static_cast<Category>(in.byte());
        event->phase = static_cast<Phase>(static_cast<std::int8_t>(in.byte()));
        event->copy_kind = static_cast<CopyKind>(static_cast<std::int8_t>(in.byte()));
        if (format >= 2) {
            event->src_memory = static_cast<MemoryKind>(static_cast<std::int8_t>(in.byte()));
            event->dst_memory = static_cast<MemoryKind>(static_cast<std::int8_t>(in.byte()));
        }
        event->step = static_cast<std::int32_t>(in.signed_varint());
        event->microbatch = static_cast<std::int32_t>(in.signed_varint());
        event->stage = static_cast<std::int16_t>(in.signed_varint());
        event->bytes = in.signed_varint();
        const std::uint64_t correlation = in.varint();
        if (correlation == 0) {
            event->correlation = -1;
        } else {
            event->correlation =
                correlation == 1 ? in.signed_varint()
                                 : wrapping_sum(previous_correlation, unzigzag(correlation - 2));
            if (event->correlation >= 0) {
                previous_correlation = event->correlation;
            }
        }
        if (in.failed()) {
            out.resize(first);
            return false;
        }
    }
    if (!in.finished()) {
        out.resize(first);
        return false;
    }
    return true;
}

EventPackWriter::EventPackWriter(Database& db) : db_(db) {
    block_.reserve(kEventsPerPackBlock);
}

Status EventPackWriter::create_table() {
    if (auto status =
            db_.exec("DROP TABLE IF EXISTS event_pack;"
                     "CREATE TABLE event_pack (lane INTEGER NOT NULL, format INTEGER NOT NULL, "
                     "  events INTEGER NOT NULL, data BLOB NOT NULL);");
        !status) {
        return status;
    }
    auto insert =
        db_.prepare("INSERT INTO event_pack (lane, format, events, data) VALUES (?1, ?2, ?3, ?4)");
    if (!insert) {
        return insert.error();
    }
    insert_ = std::move(*insert);
    return {};
}

bool EventPackWriter::add(const Event& event) {
    if (!block_.empty() && block_.front().lane != event.lane && !flush()) {
        return false;
    }
    block_.push_back(event);
    return block_.size() < kEventsPerPackBlock || flush();
}

bool EventPackWriter::flush() {
    if (block_.empty()) {
        return true;
    }
    const std::string data = encode_event_block(block_.data(), block_.size());
    insert_.bind(1, std::int64_t{block_.front().lane.value});
    insert_.bind(2, std::int64_t{kEventPackFormat});
    insert_.bind(3, static_cast<std::int64_t>(block_.size()));
    insert_.bind_blob(4, data);
    block_.clear();
    return insert_.run();
}

namespace {

// An EventPackWriter in one transaction of its own.
class PackWriter {
public:
    explicit PackWriter(Database& db) : db_(db), pack_(db) {}

    Status begin() {
        if (auto status = pack_.create_table(); !status) {
            return status;
        }
        return db_.exec("BEGIN");
    }
    bool add(const Event& event) { return pack_.add(event); }
    Status fail(const char* what) {
        Error error = db_.error_for(what);
        (void)db_.exec("ROLLBACK");
        return error;
    }
    Status commit() {
        if (!pack_.flush()) {
            return fail("cannot write the event pack of");
        }
        return db_.exec("COMMIT");
    }

private:
    Database& db_;
    EventPackWriter pack_;
};

}  // namespace

Status write_event_pack(Database& db, const std::function<void(double)>& progress) {
    auto total = db.query_int("SELECT COUNT(*) FROM event");
    if (!total) {
        return total.error();
    }
    auto rows =
        db.prepare("SELECT " + event_columns(kSchemaVersion) + " FROM event ORDER BY rowid");
    if (!rows) {
        return rows.error();
    }
    PackWriter pack(db);
    if (auto status = pack.begin(); !status) {
        return status;
    }
    std::int64_t done = 0;
    while (rows->step()) {
        if (!pack.add(read_event_row(*rows))) {
            return pack.fail("cannot write the event pack of");
        }
        if (++done % 262144 == 0 && progress) {
            progress(double(done) / double(std::max<std::int64_t>(*total, 1)));
        }
    }
    if (rows->last_result() != SQLITE_DONE) {
        return pack.fail("cannot read the events of");
    }
    return pack.commit();
}

}  // namespace fulcrum::store
