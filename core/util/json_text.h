// Writing JSON and CSV text by hand, for exporters that stream millions of records (a DOM
// per event would cost more than the rest of the export).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace fulcrum {

// Appends `text` as a quoted JSON string. Control characters are escaped and bytes that are
// not valid UTF-8 become U+FFFD, so that any kernel name a trace holds yields valid JSON.
void append_json_string(std::string& out, std::string_view text);

// Appends one code point as UTF-8; code points that are not Unicode scalar values (surrogates,
// above U+10FFFF) become U+FFFD.
void append_utf8(std::string& out, std::uint32_t code_point);

// Appends `ns` as microseconds with three decimals ("1234.567"), exact for any int64.
void append_microseconds(std::string& out, std::int64_t ns);

// Appends a CSV field, quoted when it holds a comma, quote or line break (RFC 4180).
void append_csv_field(std::string& out, std::string_view text);

}  // namespace fulcrum
