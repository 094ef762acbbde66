// Thin RAII over the SQLite C API. Only core/store uses it: everything else reads and
// writes traces through TraceWriter / TraceReader.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/util/result.h"

struct sqlite3;
struct sqlite3_stmt;

namespace fulcrum::store {

class Statement {
public:
    Statement() = default;
    Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
    Statement(Statement&& other) noexcept;
    Statement& operator=(Statement&& other) noexcept;
    Statement(const Statement&) = delete;
    Statement& operator=(const Statement&) = delete;
    ~Statement();

    // Parameters are 1-based, as in SQLite. -1 for an optional integer binds NULL.
    void bind(int index, std::int64_t value);
    void bind_optional(int index, std::int64_t value);
    void bind(int index, double value);
    void bind(int index, std::string_view text);
    void bind_null(int index);
    void bind_blob(int index, std::string_view bytes);

    // True while a row is available; false when done. Errors land in `error()`.
    bool step();
    // Runs a statement that returns no rows; false on error.
    bool run();
    void reset();

    std::int64_t column_int64(int index) const;
    // NULL reads as -1.
    std::int64_t column_optional(int index) const;
    double column_double(int index) const;
    std::string column_text(int index) const;
    // Valid until the next step() or reset().
    std::string_view column_blob(int index) const;
    bool column_is_null(int index) const;

    int last_result() const { return last_rc_; }
    std::string error() const;

private:
    sqlite3* db_ = nullptr;
    sqlite3_stmt* stmt_ = nullptr;
    int last_rc_ = 0;
};

class Database {
public:
    enum class Mode { read_only, read_write, create };

    Database() = default;
    Database(Database&& other) noexcept;
    Database& operator=(Database&& other) noexcept;
    Database(const Database&) = delete;
    Database& operator=(const Database&) = delete;
    ~Database();

    static Result<Database> open(const std::string& path, Mode mode);

    Status exec(std::string_view sql);
    Result<Statement> prepare(std::string_view sql);
    // A one-value query (PRAGMA user_version, COUNT(*)); NULL or no row reads as `fallback`.
    Result<std::int64_t> query_int(std::string_view sql, std::int64_t fallback = 0);
    bool has_table(std::string_view name);

    sqlite3* handle() const { return db_; }
    const std::string& path() const { return path_; }
    std::string last_error() const;
    // The error of the last failed call as a user-facing Error naming the file.
    Error error_for(std::string_view what) const;

private:
    sqlite3* db_ = nullptr;
    std::string path_;
};

// SQLite's result codes that mean "the file is damaged" rather than "you asked wrong".
bool is_corruption_code(int rc);

}  // namespace fulcrum::store
