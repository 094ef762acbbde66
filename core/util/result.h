// Result<T>: a value or an Error a user can act on.
//
// core/ never exits the process and never throws across its API: every fallible call
// returns a Result, and only a main() decides what to do with a failure. (std::expected
// would do, but it is C++23 and this project builds as C++20 with nvcc as well.)
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace fulcrum {

// Stable, searchable codes: tests and scripts match on these, people read `message`.
enum class ErrorCode {
    io,              // a file or folder cannot be opened, read or written
    not_sqlite,      // the file is not an SQLite database at all
    foreign_sqlite,  // an SQLite database written by some other program
    newer_schema,    // written by a newer Fulcrum
    corrupt,         // truncated or damaged
    invalid_input,   // arguments or data that make no sense
    cancelled,
};

const char* error_code_name(ErrorCode code);

struct Error {
    ErrorCode code;
    std::string message;  // names the file and the problem, and says what to do
};

template <typename T>
class [[nodiscard]] Result {
public:
    Result(T value) : state_(std::move(value)) {}
    Result(Error error) : state_(std::move(error)) {}

    bool ok() const { return state_.index() == 0; }
    explicit operator bool() const { return ok(); }

    T& value() & { return std::get<0>(state_); }
    const T& value() const& { return std::get<0>(state_); }
    T&& value() && { return std::get<0>(std::move(state_)); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }

    const Error& error() const { return std::get<1>(state_); }

private:
    std::variant<T, Error> state_;
};

// Result<void>: success or an Error.
template <>
class [[nodiscard]] Result<void> {
public:
    Result() = default;
    Result(Error error) : error_(std::move(error)), failed_(true) {}

    bool ok() const { return !failed_; }
    explicit operator bool() const { return ok(); }
    const Error& error() const { return error_; }

private:
    Error error_{ErrorCode::io, {}};
    bool failed_ = false;
};

using Status = Result<void>;

}  // namespace fulcrum
