// Chrome-trace JSON for suites that edit the committed traces of tests/data before importing
// them (a variant without labels, on another thread, without steps, …).
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <string_view>

namespace fulcrum::test {

// The whole decompressed text of a gzip file; stops the test (abort) when the file cannot be
// opened.
std::string read_gzip(const std::filesystem::path& path);

// Takes out of `trace`'s traceEvents every event whose name starts with `prefix`.
void drop_events(nlohmann::json& trace, std::string_view prefix);

}  // namespace fulcrum::test
