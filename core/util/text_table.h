// Plain-text tables for the CLI: columns sized to their widest cell, numbers right-aligned.
#pragma once

#include <cstdint>
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

}  // namespace fulcrum
