#include "core/store/schema.h"

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string_view>

#include "core/trace/model.h"

namespace fulcrum::store {
namespace {

constexpr const char* kCreateTables = R"sql(
CREATE TABLE run (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    name         TEXT NOT NULL,
    command      TEXT NOT NULL,
    start_utc_ns INTEGER NOT NULL,
    config       TEXT NOT NULL,
    origin       TEXT NOT NULL,
    producer     TEXT NOT NULL
);
CREATE TABLE rank (
    rank            INTEGER PRIMARY KEY,
    host            TEXT NOT NULL,
    pid             INTEGER NOT NULL,
    device          INTEGER,
    dp              INTEGER,
    pp              INTEGER,
    cp              INTEGER,
    tp              INTEGER,
    utc_offset_ns   INTEGER NOT NULL DEFAULT 0,
    complete        INTEGER NOT NULL DEFAULT 0,
    dropped_records INTEGER NOT NULL DEFAULT 0,
    clock_alignment TEXT NOT NULL DEFAULT 'none',
    clock_shift_ns  INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE lane (
    id              INTEGER PRIMARY KEY,
    rank            INTEGER NOT NULL,
    kind            INTEGER NOT NULL,
    name            TEXT NOT NULL,
    native_id       INTEGER,
    max_duration_ns INTEGER
);
CREATE TABLE string (
    id    INTEGER PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE event (
    lane        INTEGER NOT NULL,
    start_ns    INTEGER NOT NULL,
    end_ns      INTEGER NOT NULL,
    kind        INTEGER NOT NULL,
    name        INTEGER,
    category    INTEGER NOT NULL,
    step        INTEGER,
    microbatch  INTEGER,
    stage       INTEGER,
    phase       INTEGER,
    bytes       INTEGER,
    copy_kind   INTEGER,
    correlation INTEGER,
    args        INTEGER,
    src_memory  INTEGER,
    dst_memory  INTEGER
);
CREATE TABLE event_block (
    lane         INTEGER NOT NULL,
    start_min    INTEGER NOT NULL,
    start_max    INTEGER NOT NULL,
    end_max      INTEGER NOT NULL,
    duration_max INTEGER NOT NULL,
    step_min     INTEGER,
    step_max     INTEGER,
    events       INTEGER NOT NULL,
    format       INTEGER NOT NULL,
    codec        INTEGER NOT NULL,
    data         BLOB NOT NULL
);
CREATE TABLE workload (
    rank        INTEGER NOT NULL,
    step        INTEGER NOT NULL,
    microbatch  INTEGER NOT NULL,
    doc_id      INTEGER NOT NULL,
    doc_length  INTEGER NOT NULL,
    token_begin INTEGER NOT NULL,
    token_end   INTEGER NOT NULL,
    balancer    TEXT NOT NULL
);
CREATE TABLE counter (
    rank    INTEGER NOT NULL,
    name    TEXT NOT NULL,
    time_ns INTEGER NOT NULL,
    value   REAL NOT NULL
);
CREATE TABLE import_log (
    id           INTEGER PRIMARY KEY,
    source       TEXT NOT NULL,
    record_index INTEGER,
    reason       TEXT NOT NULL,
    record       TEXT NOT NULL,
    skipped      INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE enum_label (
    type  TEXT NOT NULL,
    value INTEGER NOT NULL,
    label TEXT NOT NULL,
    PRIMARY KEY (type, value)
) WITHOUT ROWID;
)sql";

constexpr std::array kRequiredTables = {"run",      "rank",    "lane",       "string",    "event",
                                        "workload", "counter", "import_log", "enum_label"};

// Lets people query a trace with plain SQL and still read the integer columns.
Status insert_enum_labels(Database& db) {
    auto stmt = db.prepare("INSERT INTO enum_label (type, value, label) VALUES (?1, ?2, ?3)");
    if (!stmt) {
        return stmt.error();
    }
    auto add = [&](std::string_view type, int value, std::string_view label) {
        stmt->bind(1, type);
        stmt->bind(2, std::int64_t{value});
        stmt->bind(3, label);
        return stmt->run();
    };
    bool ok = true;
    for (int i = 0; i < kEventKindCount; ++i) {
        ok &= add("event.kind", i, to_string(static_cast<EventKind>(i)));
    }
    for (int i = 0; i < kCategoryCount; ++i) {
        ok &= add("event.category", i, to_string(static_cast<Category>(i)));
    }
    for (int i = 0; i <= 2; ++i) {
        ok &= add("event.phase", i, to_string(static_cast<Phase>(i)));
    }
    for (int value = 1; value <= 10; ++value) {
        ok &= add("event.copy_kind", value, to_string(static_cast<CopyKind>(value)));
    }
    for (int value = 0; value <= 7; ++value) {
        ok &= add("event.memory", value, to_string(static_cast<MemoryKind>(value)));
    }
    for (int i = 0; i <= 1; ++i) {
        ok &= add("lane.kind", i, to_string(static_cast<LaneKind>(i)));
    }
    if (!ok) {
        return db.error_for("cannot write the schema of");
    }
    return {};
}

std::uint32_t read_be32(const unsigned char* bytes) {
    return (std::uint32_t{bytes[0]} << 24) | (std::uint32_t{bytes[1]} << 16) |
           (std::uint32_t{bytes[2]} << 8) | std::uint32_t{bytes[3]};
}

// A hint for files people commonly hand us by mistake.
std::string what_to_do_with(const unsigned char* head, std::size_t size) {
    std::size_t i = 0;
    while (i < size && (head[i] == ' ' || head[i] == '\n' || head[i] == '\r' || head[i] == '\t')) {
        ++i;
    }
    if (size >= 2 && head[0] == 0x1f && head[1] == 0x8b) {
        return " It looks gzip-compressed (a PyTorch/Kineto trace?): use `fulcrum import`.";
    }
    if (i < size && (head[i] == '{' || head[i] == '[')) {
        return " It looks like JSON (a Chrome or Kineto trace?): use `fulcrum import`.";
    }
    return "";
}

}  // namespace

Status configure_for_recording(Database& db) {
    // 16 KiB pages: fewer B-tree splits per event than the default 4 KiB, measured ~10% faster
    // inserts (bench_store). WAL + synchronous=NORMAL: a commit survives the process being
    // killed; only power loss can take the last transactions, which a profiler can afford.
    return db.exec(
        "PRAGMA page_size = 16384; PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; "
        "PRAGMA cache_size = -65536;");
}

Status configure_for_bulk(Database& db) {
    return db.exec(
        "PRAGMA page_size = 16384; PRAGMA synchronous = OFF; PRAGMA journal_mode = OFF; "
        "PRAGMA cache_size = -65536;");
}

Status create_schema(Database& db) {
    if (auto status = db.exec("BEGIN"); !status) {
        return status;
    }
    if (auto status = db.exec(kCreateTables); !status) {
        return status;
    }
    if (auto status = insert_enum_labels(db); !status) {
        return status;
    }
    const std::string stamp = "PRAGMA application_id = " + std::to_string(kApplicationId) +
                              "; PRAGMA user_version = " + std::to_string(kSchemaVersion) + ";";
    if (auto status = db.exec(stamp); !status) {
        return status;
    }
    return db.exec("COMMIT");
}

Status create_lane_index(Database& db) {
    return db.exec("CREATE INDEX IF NOT EXISTS event_by_lane_time ON event (lane, start_ns);");
}

Status create_indexes(Database& db, bool lane_statistics) {
    if (auto status = create_lane_index(db); !status) {
        return status;
    }
    if (auto status = db.exec(R"sql(
        CREATE INDEX IF NOT EXISTS event_by_kind_step ON event (kind, step);
        CREATE INDEX IF NOT EXISTS workload_by_step ON workload (step, microbatch, rank);
        CREATE INDEX IF NOT EXISTS event_block_by_lane_time ON event_block (lane, start_min);
    )sql");
        !status || !lane_statistics) {
        return status;
    }
    return db.exec(R"sql(
        UPDATE lane SET max_duration_ns = MAX(
            (SELECT COALESCE(MAX(end_ns - start_ns), 0) FROM event WHERE event.lane = lane.id),
            (SELECT COALESCE(MAX(duration_max), 0) FROM event_block
             WHERE event_block.lane = lane.id));
    )sql");
}

Status check_trace_file(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    if (!file) {
        return Error{ErrorCode::io, "cannot open '" + path + "': " + std::strerror(errno)};
    }
    std::array<unsigned char, 100> header{};
    file.read(reinterpret_cast<char*>(header.data()), header.size());
    const auto got = static_cast<std::size_t>(file.gcount());
    file.clear();
    file.seekg(0, std::ios::end);
    const auto file_size = static_cast<std::uint64_t>(file.tellg());

    static constexpr char kMagic[] = "SQLite format 3";  // 16 bytes with its NUL
    const bool magic_ok = got >= 16 && std::memcmp(header.data(), kMagic, 16) == 0;
    if (!magic_ok) {
        if (got < 16 && got > 0 && std::memcmp(header.data(), kMagic, got) == 0) {
            return Error{ErrorCode::corrupt, "'" + path + "' is truncated: only " +
                                                 std::to_string(got) +
                                                 " bytes of an SQLite header are there."};
        }
        if (got == 0) {
            return Error{ErrorCode::not_sqlite,
                         "'" + path + "' is empty: it is not a Fulcrum trace."};
        }
        return Error{ErrorCode::not_sqlite, "'" + path +
                                                "' is not a Fulcrum trace: it is not an SQLite "
                                                "database." +
                                                what_to_do_with(header.data(), got)};
    }
    if (got < header.size()) {
        return Error{ErrorCode::corrupt, "'" + path +
                                             "' is truncated: its 100-byte SQLite "
                                             "header is cut short."};
    }
    // Header bytes 16-17: page size (1 means 65536); 28-31: pages in the file, valid when the
    // change counter (24-27) equals version-valid-for (92-95). See sqlite.org/fileformat.html.
    std::uint64_t page_size = (std::uint64_t{header[16]} << 8) | header[17];
    if (page_size == 1) {
        page_size = 65536;
    }
    const std::uint32_t page_count = read_be32(&header[28]);
    const bool count_valid = read_be32(&header[24]) == read_be32(&header[92]);
    if (count_valid && page_count > 0 && page_size * page_count > file_size) {
        return Error{ErrorCode::corrupt,
                     "'" + path + "' is truncated: its header promises " +
                         std::to_string(page_size * page_count) + " bytes but the file has " +
                         std::to_string(file_size) + ". Copy it again from where it was recorded."};
    }
    return {};
}

Result<std::string> resolve_trace_path(const std::string& path) {
    std::error_code error;
    if (!std::filesystem::is_directory(path, error)) {
        return path;
    }
    const std::filesystem::path merged = std::filesystem::path(path) / "run.fulcrum";
    if (std::filesystem::exists(merged, error)) {
        return merged.string();
    }
    bool has_ranks = false;
    for (const auto& entry : std::filesystem::directory_iterator(path, error)) {
        const std::string name = entry.path().filename().string();
        has_ranks = has_ranks || (name.starts_with("rank-") && name.ends_with(".sqlite"));
    }
    if (has_ranks) {
        return Error{ErrorCode::invalid_input,
                     "'" + path +
                         "' is a capture folder whose rank files were never merged; "
                         "merge them first: fulcrum merge -o '" +
                         merged.string() + "' '" + path + "'"};
    }
    return Error{ErrorCode::invalid_input, "'" + path +
                                               "' is a folder without a run.fulcrum or "
                                               "rank files: give a run file or a capture folder"};
}

Result<Database> open_trace(const std::string& requested, Database::Mode mode) {
    auto resolved = resolve_trace_path(requested);
    if (!resolved) {
        return resolved.error();
    }
    const std::string& path = *resolved;
    if (auto status = check_trace_file(path); !status) {
        return status.error();
    }
    auto db = Database::open(path, mode);
    if (!db) {
        return db.error();
    }
    auto application_id = db->query_int("PRAGMA application_id");
    if (!application_id) {
        return Error{application_id.error().code,
                     "'" + path + "' cannot be read as SQLite: " + application_id.error().message};
    }
    auto version = db->query_int("PRAGMA user_version");
    if (!version) {
        return version.error();
    }
    if (*application_id != kApplicationId) {
        std::string hint;
        if (db->has_table("NVTX_EVENTS") || db->has_table("CUPTI_ACTIVITY_KIND_KERNEL") ||
            db->has_table("StringIds")) {
            hint = " It looks like an Nsight Systems export: use `fulcrum import`.";
        }
        return Error{ErrorCode::foreign_sqlite,
                     "'" + path +
                         "' is an SQLite database of another program, not a Fulcrum "
                         "trace." +
                         hint};
    }
    if (*version > kSchemaVersion) {
        return Error{ErrorCode::newer_schema,
                     "'" + path + "' was written by a newer Fulcrum (schema version " +
                         std::to_string(*version) + "; this build reads up to " +
                         std::to_string(kSchemaVersion) + "). Upgrade Fulcrum to open it."};
    }
    // Every table's name in one query: opening a run is done thousands of times by a merge of
    // an import's rank files, and a statement per table was a sixth of it.
    std::set<std::string, std::less<>> tables;
    if (auto names = db->prepare("SELECT name FROM sqlite_master WHERE type = 'table'")) {
        while (names->step()) {
            tables.insert(names->column_text(0));
        }
    }
    for (const char* table : kRequiredTables) {
        if (!tables.contains(std::string_view(table))) {
            return Error{ErrorCode::corrupt, "'" + path + "' is damaged: the table '" +
                                                 std::string(table) + "' is missing."};
        }
    }
    return db;
}

}  // namespace fulcrum::store
