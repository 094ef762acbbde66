#include "core/store/event_rows.h"

namespace fulcrum::store {

std::string event_columns(std::int64_t schema_version) {
    std::string columns =
        "lane, start_ns, end_ns, kind, ifnull(name, 0), category, ifnull(step, -1), "
        "ifnull(microbatch, -1), ifnull(stage, -1), ifnull(phase, -1), ifnull(bytes, -1), "
        "ifnull(copy_kind, -1), ifnull(correlation, -1), ifnull(args, 0)";
    columns +=
        schema_version >= 2 ? ", ifnull(src_memory, -1), ifnull(dst_memory, -1)" : ", -1, -1";
    return columns;
}

Event read_event_row(const Statement& stmt) {
    Event e;
    e.lane = LaneId{static_cast<std::uint32_t>(stmt.column_int64(0))};
    e.start_ns = stmt.column_int64(1);
    e.end_ns = stmt.column_int64(2);
    e.kind = static_cast<EventKind>(stmt.column_int64(3));
    const auto name = stmt.column_int64(4);
    e.name = StringId{name > 0 ? static_cast<std::uint32_t>(name) : 0u};
    e.category = static_cast<Category>(stmt.column_int64(5));
    e.step = static_cast<std::int32_t>(stmt.column_int64(6));
    e.microbatch = static_cast<std::int32_t>(stmt.column_int64(7));
    e.stage = static_cast<std::int16_t>(stmt.column_int64(8));
    e.phase = static_cast<Phase>(stmt.column_int64(9));
    e.bytes = stmt.column_int64(10);
    e.copy_kind = static_cast<CopyKind>(stmt.column_int64(11));
    e.correlation = stmt.column_int64(12);
    const auto args = stmt.column_int64(13);
    e.args = StringId{args > 0 ? static_cast<std::uint32_t>(args) : 0u};
    e.src_memory = static_cast<MemoryKind>(stmt.column_int64(14));
    e.dst_memory = static_cast<MemoryKind>(stmt.column_int64(15));
    return e;
}

namespace {

// The event table's columns as INSERT names them.
constexpr int kEventColumns = 16;

// "INSERT INTO event (...) VALUES (?1, ...), (...)" for `rows` rows.
std::string event_insert_sql(std::size_t rows) {
    std::string sql =
        "INSERT INTO event (lane, start_ns, end_ns, kind, name, category, step, microbatch, "
        "stage, phase, bytes, copy_kind, correlation, args, src_memory, dst_memory) VALUES ";
    for (std::size_t row = 0; row < rows; ++row) {
        sql += row == 0 ? "(" : ", (";
        for (int column = 0; column < kEventColumns; ++column) {
            sql += (column == 0 ? "?" : ", ?") +
                   std::to_string(row * kEventColumns + static_cast<std::size_t>(column) + 1);
        }
        sql += ")";
    }
    return sql;
}

// Binds one event's columns from parameter `first` on; -1 and id 0 bind NULL.
void bind_event(Statement& st, int first, const Event& e) {
    st.bind(first, std::int64_t{e.lane.value});
    st.bind(first + 1, e.start_ns);
    st.bind(first + 2, e.end_ns);
    st.bind(first + 3, static_cast<std::int64_t>(e.kind));
    st.bind_optional(first + 4, e.name.valid() ? std::int64_t{e.name.value} : -1);
    st.bind(first + 5, static_cast<std::int64_t>(e.category));
    st.bind_optional(first + 6, e.step);
    st.bind_optional(first + 7, e.microbatch);
    st.bind_optional(first + 8, e.stage);
    st.bind_optional(first + 9, static_cast<std::int64_t>(e.phase));
    st.bind_optional(first + 10, e.bytes);
    st.bind_optional(first + 11, static_cast<std::int64_t>(e.copy_kind));
    st.bind_optional(first + 12, e.correlation);
    st.bind_optional(first + 13, e.args.valid() ? std::int64_t{e.args.value} : -1);
    st.bind_optional(first + 14, static_cast<std::int64_t>(e.src_memory));
    st.bind_optional(first + 15, static_cast<std::int64_t>(e.dst_memory));
}

}  // namespace

Status EventInserter::prepare(Database& db) {
    auto one = db.prepare(event_insert_sql(1));
    if (!one) {
        return one.error();
    }
    auto many = db.prepare(event_insert_sql(kEventsPerInsert));
    if (!many) {
        return many.error();
    }
    one_ = std::move(*one);
    many_ = std::move(*many);
    return {};
}

bool EventInserter::insert(std::span<const Event> events) {
    std::size_t i = 0;
    for (; i + kEventsPerInsert <= events.size(); i += kEventsPerInsert) {
        for (std::size_t k = 0; k < kEventsPerInsert; ++k) {
            bind_event(many_, static_cast<int>(k) * kEventColumns + 1, events[i + k]);
        }
        if (!many_.run()) {
            return false;
        }
    }
    for (; i < events.size(); ++i) {
        bind_event(one_, 1, events[i]);
        if (!one_.run()) {
            return false;
        }
    }
    return true;
}

}  // namespace fulcrum::store
