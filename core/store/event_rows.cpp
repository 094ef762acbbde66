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

}  // namespace fulcrum::store
