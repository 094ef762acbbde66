#include "core/util/text_table.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>

namespace fulcrum {

TextTable::TextTable(std::vector<std::string> headers, std::vector<Align> aligns)
    : headers_(std::move(headers)), aligns_(std::move(aligns)) {
    aligns_.resize(headers_.size(), Align::left);
}

void TextTable::add_row(std::vector<std::string> cells) {
    cells.resize(headers_.size());
    rows_.push_back(std::move(cells));
}

namespace {

// Columns a cell takes on a terminal: one per UTF-8 character, so that "—", "−" and "²"
// (three and two bytes) line up with ASCII. Wide (CJK) characters are not measured.
std::size_t display_width(const std::string& text) {
    return static_cast<std::size_t>(std::count_if(text.begin(), text.end(), [](char c) {
        return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    }));
}

}  // namespace

std::string TextTable::render(const std::string& indent) const {
    std::vector<std::size_t> widths(headers_.size());
    for (std::size_t c = 0; c < headers_.size(); ++c) {
        widths[c] = display_width(headers_[c]);
        for (const auto& row : rows_) {
            widths[c] = std::max(widths[c], display_width(row[c]));
        }
    }
    std::string out;
    auto render_row = [&](const std::vector<std::string>& cells) {
        std::string line = indent;
        for (std::size_t c = 0; c < cells.size(); ++c) {
            const std::string padding(widths[c] - display_width(cells[c]), ' ');
            if (c > 0) {
                line += "  ";
            }
            line += aligns_[c] == Align::right ? padding + cells[c] : cells[c] + padding;
        }
        while (!line.empty() && line.back() == ' ') {
            line.pop_back();
        }
        out += line + "\n";
    };
    render_row(headers_);
    for (const auto& row : rows_) {
        render_row(row);
    }
    return out;
}

std::string format_duration(std::int64_t ns) {
    char buffer[64];
    const double value = static_cast<double>(ns);
    const double magnitude = value < 0 ? -value : value;
    if (magnitude < 1e3) {
        std::snprintf(buffer, sizeof buffer, "%lld ns", static_cast<long long>(ns));
    } else if (magnitude < 1e6) {
        std::snprintf(buffer, sizeof buffer, "%.3f us", value / 1e3);
    } else if (magnitude < 1e9) {
        std::snprintf(buffer, sizeof buffer, "%.3f ms", value / 1e6);
    } else {
        std::snprintf(buffer, sizeof buffer, "%.3f s", value / 1e9);
    }
    return buffer;
}

std::string format_utc(std::int64_t utc_ns) {
    const std::int64_t seconds =
        utc_ns >= 0 ? utc_ns / 1000000000 : (utc_ns - 999999999) / 1000000000;
    const std::int64_t fraction = utc_ns - seconds * 1000000000;
    const std::time_t t = static_cast<std::time_t>(seconds);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char date[32];
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm);
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%s.%09lldZ", date, static_cast<long long>(fraction));
    return buffer;
}

std::string format_relative_error(double value, double reference) {
    const double error = 100.0 * (value - reference) / reference;
    return (error >= 0 ? "+" : "") + format_fixed(error, 1) + "%";
}

std::string format_fixed(double value, int decimals) {
    if (!std::isfinite(value)) {
        return kUnknownFigure;
    }
    char text[48];
    std::snprintf(text, sizeof text, "%.*f", decimals, value);
    return text;
}

std::string format_significant(double value, int digits) {
    if (!std::isfinite(value)) {
        return kUnknownFigure;
    }
    char text[48];
    std::snprintf(text, sizeof text, "%.*g", digits, value);
    return text;
}

std::string format_figure(const std::optional<double>& value, int decimals) {
    return value ? format_fixed(*value, decimals) : kUnknownFigure;
}

std::string text_or_unknown(const std::string& text) {
    return text.empty() ? kUnknownFigure : text;
}

std::string format_percent(double part, double whole) {
    return whole > 0 && std::isfinite(part) ? format_fixed(100.0 * part / whole, 1) + "%"
                                            : kUnknownFigure;
}

std::string format_bytes(std::int64_t bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double value = double(bytes);
    int unit = 0;
    while (value >= 1024 && unit < 4) {
        value /= 1024;
        ++unit;
    }
    return unit == 0 ? std::to_string(bytes) + " B" : format_fixed(value, 2) + " " + units[unit];
}

}  // namespace fulcrum
