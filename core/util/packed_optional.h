// An optional number kept in the number's own bytes: one value that no figure takes stands for
// "absent" (the lowest int64, a quiet NaN). For answers of which a run has millions — a 1 B-event
// run's CP groups, each with three optional figures a rank — where std::optional's flag and its
// padding double an int64. It reads as std::optional does (has_value, *, value, value_or, a
// bool test) and converts to it, so the code that shows the figures is the same.
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>

namespace fulcrum {

template <typename T>
requires std::same_as<T, std::int64_t> || std::same_as<T, double>
class PackedOptional {
public:
    constexpr PackedOptional() = default;
    constexpr PackedOptional(std::nullopt_t) {}              // NOLINT: as std::optional
    constexpr PackedOptional(T value) : value_(value) {}     // NOLINT: as std::optional
    constexpr PackedOptional(const std::optional<T>& value)  // NOLINT: as std::optional
        : value_(value ? *value : kAbsent) {}

    constexpr bool has_value() const {
        if constexpr (std::same_as<T, double>) {
            return !std::isnan(value_);
        } else {
            return value_ != kAbsent;
        }
    }
    constexpr explicit operator bool() const { return has_value(); }
    constexpr const T& operator*() const { return value_; }
    T value() const {
        if (!has_value()) {
            throw std::bad_optional_access();
        }
        return value_;
    }
    constexpr T value_or(T otherwise) const { return has_value() ? value_ : otherwise; }
    constexpr operator std::optional<T>() const {  // NOLINT: read where optionals are
        return has_value() ? std::optional<T>(value_) : std::nullopt;
    }
    constexpr void reset() { value_ = kAbsent; }
    // Equal when both are absent or both hold the same value, as std::optional's.
    friend constexpr bool operator==(const PackedOptional& a, const PackedOptional& b) {
        return a.has_value() == b.has_value() && (!a.has_value() || a.value_ == b.value_);
    }

private:
    static constexpr T kAbsent = std::same_as<T, double> ? std::numeric_limits<T>::quiet_NaN()
                                                         : std::numeric_limits<T>::lowest();
    T value_ = kAbsent;
};

}  // namespace fulcrum
