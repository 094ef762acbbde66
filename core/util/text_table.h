// Plain-text tables for the CLI: columns sized to their widest cell, numbers right-aligned.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fulcrum {

class TextTable {
public:
    enum class Align { left, right };

    explicit TextTable(std::vector<std::string> headers, std::vector<Align> aligns = {});
    void add_row(std::vector<std::string> cells);
    // Each line starts with `indent` and ends with '\n'; no trailing spaces.
    std::string render(const std::string& indent = "") const;

private:
    std::vector<std::string> headers_;
    std::vector<Align> aligns_;
    std::vector<std::vector<std::string>> rows_;
};

// "12.345 ms", "1.203 s", "850 ns": three significant decimals, unit picked by size.
std::string format_duration(std::int64_t ns);
// "2026-11-21T22:00:00.123456789Z"
std::string format_utc(std::int64_t utc_ns);

// What a figure shows where nothing was measured or predicted (docs/analyses.md, "Unknown
// figures"), in the CLI's tables and the report alike.
inline constexpr const char* kUnknownFigure = "—";
// "12.35" with `decimals` places; kUnknownFigure when `value` is not finite.
std::string format_fixed(double value, int decimals = 2);
// "+1.2%" or "-0.4%": how far `value` lies from `reference`, in percent of it, one decimal.
std::string format_relative_error(double value, double reference);
// "24", "0.08752", "1.5e+04": `digits` significant digits; kUnknownFigure when not finite.
std::string format_significant(double value, int digits = 4);
// format_fixed of a figure that may be unknown.
std::string format_figure(const std::optional<double>& value, int decimals = 2);
// `text`, or kUnknownFigure when it is empty.
std::string text_or_unknown(const std::string& text);
// "37.5%" (one decimal) of part / whole; kUnknownFigure when whole ≤ 0 or part is not finite.
std::string format_percent(double part, double whole);
// "1.50 MiB": bytes in binary units, two decimals; plain "512 B" under a KiB.
std::string format_bytes(std::int64_t bytes);

}  // namespace fulcrum
