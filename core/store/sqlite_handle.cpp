#include "core/store/sqlite_handle.h"

#include <sqlite3.h>

#include <utility>

namespace fulcrum::store {

Statement::Statement(Statement&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)),
      stmt_(std::exchange(other.stmt_, nullptr)),
      last_rc_(other.last_rc_) {}

Statement& Statement::operator=(Statement&& other) noexcept {
    if (this != &other) {
        sqlite3_finalize(stmt_);
        db_ = std::exchange(other.db_, nullptr);
        stmt_ = std::exchange(other.stmt_, nullptr);
        last_rc_ = other.last_rc_;
    }
    return *this;
}

Statement::~Statement() {
    sqlite3_finalize(stmt_);
}

void Statement::bind(int index, std::int64_t value) {
    sqlite3_bind_int64(stmt_, index, value);
}

void Statement::bind_optional(int index, std::int64_t value) {
    if (value < 0) {
        sqlite3_bind_null(stmt_, index);
    } else {
        sqlite3_bind_int64(stmt_, index, value);
    }
}

void Statement::bind(int index, double value) {
    sqlite3_bind_double(stmt_, index, value);
}

void Statement::bind(int index, std::string_view text) {
    sqlite3_bind_text(stmt_, index, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
}

void Statement::bind_null(int index) {
    sqlite3_bind_null(stmt_, index);
}

void Statement::bind_blob(int index, std::string_view bytes) {
    sqlite3_bind_blob64(stmt_, index, bytes.data(), bytes.size(), SQLITE_TRANSIENT);
}

bool Statement::step() {
    last_rc_ = sqlite3_step(stmt_);
    return last_rc_ == SQLITE_ROW;
}

bool Statement::run() {
    last_rc_ = sqlite3_step(stmt_);
    const bool ok = last_rc_ == SQLITE_DONE || last_rc_ == SQLITE_ROW;
    sqlite3_reset(stmt_);
    return ok;
}

void Statement::reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
}

std::int64_t Statement::column_int64(int index) const {
    return sqlite3_column_int64(stmt_, index);
}

std::int64_t Statement::column_optional(int index) const {
    if (sqlite3_column_type(stmt_, index) == SQLITE_NULL) {
        return -1;
    }
    return sqlite3_column_int64(stmt_, index);
}

double Statement::column_double(int index) const {
    return sqlite3_column_double(stmt_, index);
}

std::string Statement::column_text(int index) const {
    const auto* text = sqlite3_column_text(stmt_, index);
    if (text == nullptr) {
        return {};
    }
    return std::string(reinterpret_cast<const char*>(text),
                       static_cast<std::size_t>(sqlite3_column_bytes(stmt_, index)));
}

std::string_view Statement::column_blob(int index) const {
    const void* bytes = sqlite3_column_blob(stmt_, index);
    if (bytes == nullptr) {
        return {};
    }
    return std::string_view(static_cast<const char*>(bytes),
                            static_cast<std::size_t>(sqlite3_column_bytes(stmt_, index)));
}

bool Statement::column_is_null(int index) const {
    return sqlite3_column_type(stmt_, index) == SQLITE_NULL;
}

std::string Statement::error() const {
    return db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(last_rc_);
}

Database::Database(Database&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)), path_(std::move(other.path_)) {}

Database& Database::operator=(Database&& other) noexcept {
    if (this != &other) {
        sqlite3_close_v2(db_);
        db_ = std::exchange(other.db_, nullptr);
        path_ = std::move(other.path_);
    }
    return *this;
}

Database::~Database() {
    sqlite3_close_v2(db_);
}

Result<Database> Database::open(const std::string& path, Mode mode) {
    int flags = SQLITE_OPEN_NOMUTEX;
    switch (mode) {
        case Mode::read_only:
            flags |= SQLITE_OPEN_READONLY;
            break;
        case Mode::read_write:
            flags |= SQLITE_OPEN_READWRITE;
            break;
        case Mode::create:
            flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
            break;
    }
    Database db;
    db.path_ = path;
    const int rc = sqlite3_open_v2(path.c_str(), &db.db_, flags, nullptr);
    if (rc != SQLITE_OK) {
        std::string reason = db.db_ != nullptr ? sqlite3_errmsg(db.db_) : sqlite3_errstr(rc);
        return Error{
            ErrorCode::io,
            "cannot open '" + path + "': " + reason +
                (mode == Mode::create ? " (check that the folder exists and is writable)" : "")};
    }
    // Several readers (GUI threads, merge) and one writer may share a file.
    sqlite3_busy_timeout(db.db_, 5000);
    return db;
}

Status Database::exec(std::string_view sql) {
    char* message = nullptr;
    const std::string text(sql);
    const int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &message);
    if (rc != SQLITE_OK) {
        std::string reason = message != nullptr ? message : sqlite3_errstr(rc);
        sqlite3_free(message);
        return Error{is_corruption_code(rc) ? ErrorCode::corrupt : ErrorCode::io,
                     "'" + path_ + "': " + reason};
    }
    return {};
}

Result<Statement> Database::prepare(std::string_view sql) {
    sqlite3_stmt* stmt = nullptr;
    const int rc =
        sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
    if (rc != SQLITE_OK) {
        return Error{is_corruption_code(rc) ? ErrorCode::corrupt : ErrorCode::io,
                     "'" + path_ + "': " + sqlite3_errmsg(db_)};
    }
    return Statement(db_, stmt);
}

Result<std::int64_t> Database::query_int(std::string_view sql, std::int64_t fallback) {
    auto stmt = prepare(sql);
    if (!stmt) {
        return stmt.error();
    }
    if (stmt->step()) {
        return stmt->column_is_null(0) ? fallback : stmt->column_int64(0);
    }
    if (stmt->last_result() != SQLITE_DONE) {
        return Error{is_corruption_code(stmt->last_result()) ? ErrorCode::corrupt : ErrorCode::io,
                     "'" + path_ + "': " + stmt->error()};
    }
    return fallback;
}

bool Database::has_table(std::string_view name) {
    auto stmt = prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1");
    if (!stmt) {
        return false;
    }
    stmt->bind(1, name);
    return stmt->step();
}

std::string Database::last_error() const {
    return db_ != nullptr ? sqlite3_errmsg(db_) : "";
}

Error Database::error_for(std::string_view what) const {
    const int rc = db_ != nullptr ? sqlite3_errcode(db_) : SQLITE_ERROR;
    return Error{is_corruption_code(rc) ? ErrorCode::corrupt : ErrorCode::io,
                 std::string(what) + " '" + path_ + "': " + last_error()};
}

bool is_corruption_code(int rc) {
    const int primary = rc & 0xff;
    return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB;
}

}  // namespace fulcrum::store
