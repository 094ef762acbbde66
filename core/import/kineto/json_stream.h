// Streaming JSON for the Kineto importer: no DOM. JsonStream reads a file and hands out one
// top-level member or one array element at a time as a view of its raw text; JsonCursor parses
// such a small view (one trace event) in place. A plain file is mapped and read where it lies
// (the pages behind the parser are let go, so memory stays bounded); a gzipped one is gunzipped
// in bounded chunks a few ahead on a second thread. Memory is then the chunk buffer plus the
// largest single element.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fulcrum::importer::kineto {

class JsonStream {
public:
    JsonStream();
    ~JsonStream();
    JsonStream(const JsonStream&) = delete;
    JsonStream& operator=(const JsonStream&) = delete;

    bool open(const std::string& path);
    // Reads `bytes` (plain or gzip) instead of a file; they must outlive the stream.
    bool open_memory(std::string_view bytes);
    // Skips whitespace; the next byte, or -1 at the end of the input (or on an error).
    int peek();
    void advance() { ++pos_; }
    // The raw text of the next JSON value (after whitespace), valid until the next call.
    // False at the end of the input or when the value is malformed/truncated.
    bool next_value(std::string_view& raw);
    // Bytes of uncompressed input before the next unread byte.
    std::uint64_t offset() const { return base_ + pos_; }
    // Bytes of the input (compressed, for gzip) read so far.
    std::int64_t file_offset() const;
    // Why the stream stopped early: "" when it did not.
    const std::string& problem() const { return problem_; }
    bool at_eof() const { return eof_ && pos_ >= end_; }

private:
    bool fill();            // reads more, keeping [pos_, end_); false when nothing more came
    bool fill_from_file();  // fill() for a file: the next chunk read ahead
    bool map_plain_file(const std::string& path);  // false: not a plain, regular, non-empty file
    void let_go_behind();  // a mapped file's pages before pos_ returned to the system
    void stop_at_end();    // the input ended: eof_, and the problem placed
    int read_more(char* into, std::size_t room);  // bytes read; <= 0 at the end or on an error

    class ReadAhead;  // a file's reads and gunzipping, on their own thread
    std::unique_ptr<ReadAhead> file_;
    std::string_view memory_;
    bool memory_open_ = false;
    std::size_t memory_used_ = 0;
    z_stream inflate_{};
    bool inflating_ = false;
    bool inflate_done_ = false;
    std::vector<char> buf_;
    const char* data_ = nullptr;  // the bytes [0, end_): buf_'s, or a mapped file's
    void* mapped_ = nullptr;      // a plain file's mapping (munmap'd with the stream)
    std::size_t mapped_size_ = 0;
    std::size_t let_go_ = 0;  // a mapped file's bytes before this are given back
    std::size_t pos_ = 0, end_ = 0;
    std::uint64_t base_ = 0;
    std::int64_t file_offset_ = 0;  // of a file: file_offset() at the last chunk taken
    bool eof_ = false;
    std::string problem_;
};

// A parser over the text of one small value.
class JsonCursor {
public:
    explicit JsonCursor(std::string_view text) : p_(text.data()), end_(text.data() + text.size()) {}
    void skip_ws() {
        while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t'))
            ++p_;
    }
    bool eat(char c);  // after whitespace
    char peek() {
        skip_ws();
        return p_ < end_ ? *p_ : '\0';
    }
    bool string(std::string& out);      // decodes escapes
    bool value(std::string_view& raw);  // any value, raw
    bool done() {
        skip_ws();
        return p_ >= end_;
    }

    // Iterates an object's members: call begin_object once, then next_member until false.
    bool begin_object() { return eat('{'); }
    // key is decoded when it has escapes (into scratch), raw otherwise.
    bool next_member(std::string_view& key, std::string_view& raw, bool& ok);

private:
    const char* p_;
    const char* end_;
    bool first_ = true;
    std::string key_scratch_;
};

// Helpers on raw values.
bool json_int(std::string_view raw, std::int64_t& out);
bool json_double(std::string_view raw, double& out);
// Microseconds (a JSON number, possibly with a fraction) to integer nanoseconds, exactly.
bool json_us_to_ns(std::string_view raw, std::int64_t& out);
// Whether `needle` occurs in `text` (16 bytes a step where the processor allows).
bool contains(std::string_view text, std::string_view needle);
// A string value decoded, or false when raw is not a string.
bool json_string(std::string_view raw, std::string& out);
// The raw text of an event object's "name" value, quotes included, when it comes before any
// nested object and holds no escape (as Kineto writes every event: ph, cat, name, …, args
// last); nullopt otherwise, and the caller looks at the whole event. One search where testing
// the whole event for each of several words would scan it once per word.
std::optional<std::string_view> leading_name(std::string_view event);

}  // namespace fulcrum::importer::kineto
