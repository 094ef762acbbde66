// A gzip file's text, for suites that edit the committed traces of tests/data before importing
// them (a variant without labels, on another thread, …).
#pragma once

#include <filesystem>
#include <string>

namespace fulcrum::test {

// The whole decompressed text; stops the test (abort) when the file cannot be opened.
std::string read_gzip(const std::filesystem::path& path);

}  // namespace fulcrum::test
