#include "core/import/kineto/json_stream.h"

#include <charconv>
#include <climits>
#include <cmath>
#include <cstring>

namespace fulcrum::importer::kineto {

namespace {
constexpr std::size_t kInitialBuffer = 4u << 20;
constexpr std::size_t kMaxBuffer = 256u << 20;  // the largest single value we hold
constexpr std::size_t kReadChunk = 1u << 20;

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

bool hex4(const char* p, const char* end, std::uint32_t& out) {
    if (end - p < 4) return false;
    out = 0;
    for (int i = 0; i < 4; ++i) {
        const char c = p[i];
        out <<= 4;
        if (c >= '0' && c <= '9') out |= static_cast<std::uint32_t>(c - '0');
        else if (c >= 'a' && c <= 'f') out |= static_cast<std::uint32_t>(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') out |= static_cast<std::uint32_t>(c - 'A' + 10);
        else return false;
    }
    return true;
}

// Decodes the string starting at p (at the opening quote); leaves p after the closing quote.
bool decode_string(const char*& p, const char* end, std::string& out) {
    if (p >= end || *p != '"') return false;
    ++p;
    const char* start = p;
    const char* quote = static_cast<const char*>(std::memchr(p, '"', static_cast<std::size_t>(end - p)));
    if (quote == nullptr) return false;
    if (std::memchr(start, '\\', static_cast<std::size_t>(quote - start)) == nullptr) {
        out.assign(start, quote);
        p = quote + 1;
        return true;
    }
    out.clear();
    while (p < end) {
        const char c = *p++;
        if (c == '"') return true;
        if (c != '\\') {
            out += c;
            continue;
        }
        if (p >= end) return false;
        const char e = *p++;
        switch (e) {
            case '"': out += '"'; break;
            case '\\': out += '\\'; break;
            case '/': out += '/'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'n': out += '\n'; break;
            case 'r': out += '\r'; break;
            case 't': out += '\t'; break;
            case 'u': {
                std::uint32_t cp = 0;
                if (!hex4(p, end, cp)) return false;
                p += 4;
                if (cp >= 0xD800 && cp < 0xDC00 && end - p >= 6 && p[0] == '\\' && p[1] == 'u') {
                    std::uint32_t low = 0;
                    if (hex4(p + 2, end, low) && low >= 0xDC00 && low < 0xE000) {
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                        p += 6;
                    }
                }
                if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;
                append_utf8(out, cp);
                break;
            }
            default: return false;
        }
    }
    return false;
}

// Skips one value starting at p (after whitespace); false when malformed or cut short.
bool skip_value(const char*& p, const char* end) {
    if (p >= end) return false;
    const char c = *p;
    if (c == '"') {
        ++p;
        while (p < end) {
            const char ch = *p++;
            if (ch == '\\') {
                if (p >= end) return false;
                ++p;
            } else if (ch == '"') {
                return true;
            }
        }
        return false;
    }
    if (c == '{' || c == '[') {
        char stack[64];
        int depth = 0;
        while (p < end) {
            const char ch = *p++;
            if (ch == '"') {
                --p;
                if (!skip_value(p, end)) return false;
            } else if (ch == '{' || ch == '[') {
                if (depth == 64) return false;
                stack[depth++] = ch == '{' ? '}' : ']';
            } else if (ch == '}' || ch == ']') {
                if (depth == 0 || stack[depth - 1] != ch) return false;
                if (--depth == 0) return true;
            }
        }
        return false;
    }
    const char* start = p;
    while (p < end && !is_ws(*p) && *p != ',' && *p != '}' && *p != ']' && *p != ':') ++p;
    return p > start;
}
}  // namespace

JsonStream::~JsonStream() {
    if (file_ != nullptr) gzclose(file_);
}

bool JsonStream::open(const std::string& path) {
    file_ = gzopen(path.c_str(), "rb");
    if (file_ == nullptr) return false;
    gzbuffer(file_, 1u << 18);
    buf_.resize(kInitialBuffer);
    return true;
}

std::int64_t JsonStream::file_offset() const {
    return file_ != nullptr ? static_cast<std::int64_t>(gzoffset(file_)) : 0;
}

bool JsonStream::fill() {
    if (eof_ || file_ == nullptr) return false;
    if (pos_ > 0) {
        std::memmove(buf_.data(), buf_.data() + pos_, end_ - pos_);
        base_ += pos_;
        end_ -= pos_;
        pos_ = 0;
    }
    if (buf_.size() - end_ < kReadChunk / 4) {
        if (buf_.size() >= kMaxBuffer) {
            problem_ = "a single JSON value is larger than " + std::to_string(kMaxBuffer >> 20) +
                       " MiB at byte " + std::to_string(base_);
            eof_ = true;
            return false;
        }
        buf_.resize(buf_.size() * 2);
    }
    const std::size_t room = std::min<std::size_t>(buf_.size() - end_, INT_MAX);
    const int got = gzread(file_, buf_.data() + end_, static_cast<unsigned>(room));
    if (got <= 0) {
        eof_ = true;
        int errnum = Z_OK;
        const char* message = gzerror(file_, &errnum);
        if (errnum != Z_OK && errnum != Z_STREAM_END) {
            problem_ = std::string("gzip stream damaged or cut short (") +
                       (message != nullptr ? message : "unknown") + ") after byte " +
                       std::to_string(base_ + end_) + " of the uncompressed JSON";
        }
        return false;
    }
    end_ += static_cast<std::size_t>(got);
    return true;
}

int JsonStream::peek() {
    for (;;) {
        while (pos_ < end_ && is_ws(buf_[pos_])) ++pos_;
        if (pos_ < end_) return static_cast<unsigned char>(buf_[pos_]);
        if (!fill()) return -1;
    }
}

bool JsonStream::next_value(std::string_view& raw) {
    if (peek() < 0) return false;
    std::size_t i = pos_;
    auto more = [&]() {
        const std::size_t rel = i - pos_;
        if (!fill()) return false;
        i = pos_ + rel;
        return true;
    };
    const char c = buf_[i];
    if (c == '{' || c == '[') {
        int depth = 0;
        for (;;) {
            if (i == end_ && !more()) return false;
            const char* data = buf_.data();
            // Inner loop without bounds re-checks on refill.
            while (i < end_) {
                const char ch = data[i++];
                if (ch == '"') {
                    for (;;) {
                        // Find the closing quote quickly.
                        while (i < end_ && data[i] != '"' && data[i] != '\\') ++i;
                        if (i == end_) {
                            if (!more()) return false;
                            data = buf_.data();
                            continue;
                        }
                        if (data[i] == '\\') {
                            ++i;
                            if (i == end_) {
                                if (!more()) return false;
                                data = buf_.data();
                            }
                            ++i;
                            continue;
                        }
                        ++i;  // the closing quote
                        break;
                    }
                } else if (ch == '{' || ch == '[') {
                    ++depth;
                } else if (ch == '}' || ch == ']') {
                    if (--depth == 0) {
                        raw = std::string_view(buf_.data() + pos_, i - pos_);
                        pos_ = i;
                        return true;
                    }
                }
            }
        }
    }
    if (c == '"') {
        ++i;
        for (;;) {
            if (i == end_ && !more()) return false;
            const char ch = buf_[i++];
            if (ch == '\\') {
                if (i == end_ && !more()) return false;
                ++i;
            } else if (ch == '"') {
                break;
            }
        }
        raw = std::string_view(buf_.data() + pos_, i - pos_);
        pos_ = i;
        return true;
    }
    for (;;) {
        if (i == end_ && !more()) break;
        const char ch = buf_[i];
        if (is_ws(ch) || ch == ',' || ch == '}' || ch == ']' || ch == ':') break;
        ++i;
    }
    if (i == pos_) return false;
    raw = std::string_view(buf_.data() + pos_, i - pos_);
    pos_ = i;
    return true;
}

void JsonCursor::skip_ws() {
    while (p_ < end_ && is_ws(*p_)) ++p_;
}

bool JsonCursor::eat(char c) {
    skip_ws();
    if (p_ < end_ && *p_ == c) {
        ++p_;
        return true;
    }
    return false;
}

bool JsonCursor::string(std::string& out) {
    skip_ws();
    return decode_string(p_, end_, out);
}

bool JsonCursor::value(std::string_view& raw) {
    skip_ws();
    const char* start = p_;
    if (!skip_value(p_, end_)) return false;
    raw = std::string_view(start, static_cast<std::size_t>(p_ - start));
    return true;
}

bool JsonCursor::next_member(std::string_view& key, std::string_view& raw, bool& ok) {
    ok = false;
    skip_ws();
    if (p_ >= end_) return false;
    if (*p_ == '}') {
        ++p_;
        ok = true;
        return false;
    }
    if (!first_ && !eat(',')) return false;
    first_ = false;
    skip_ws();
    if (p_ >= end_ || *p_ != '"') return false;
    const char* start = p_ + 1;
    const char* quote = static_cast<const char*>(std::memchr(start, '"', static_cast<std::size_t>(end_ - start)));
    if (quote == nullptr) return false;
    if (std::memchr(start, '\\', static_cast<std::size_t>(quote - start)) == nullptr) {
        key = std::string_view(start, static_cast<std::size_t>(quote - start));
        p_ = quote + 1;
    } else {
        if (!decode_string(p_, end_, key_scratch_)) return false;
        key = key_scratch_;
    }
    if (!eat(':')) return false;
    if (!value(raw)) return false;
    ok = true;
    return true;
}

bool json_double(std::string_view raw, double& out) {
    if (raw.empty()) return false;
    const char* first = raw.data();
    const char* last = raw.data() + raw.size();
    const auto [ptr, ec] = std::from_chars(first, last, out);
    return ec == std::errc{} && ptr == last && std::isfinite(out);
}

bool json_int(std::string_view raw, std::int64_t& out) {
    if (raw.empty()) return false;
    const auto [ptr, ec] = std::from_chars(raw.data(), raw.data() + raw.size(), out);
    if (ec == std::errc{} && ptr == raw.data() + raw.size()) return true;
    double value = 0;
    if (!json_double(raw, value) || std::fabs(value) > 9.0e18 || value != std::floor(value)) return false;
    out = static_cast<std::int64_t>(value);
    return true;
}

bool json_us_to_ns(std::string_view raw, std::int64_t& out) {
    const char* p = raw.data();
    const char* end = p + raw.size();
    bool negative = false;
    if (p < end && *p == '-') {
        negative = true;
        ++p;
    }
    std::int64_t whole = 0;
    int digits = 0;
    while (p < end && *p >= '0' && *p <= '9') {
        if (++digits > 15) break;
        whole = whole * 10 + (*p++ - '0');
    }
    bool simple = digits > 0 && digits <= 15;
    std::int64_t frac = 0;
    if (simple && p < end && *p == '.') {
        ++p;
        int fd = 0;
        bool round_up = false;
        if (p >= end || *p < '0' || *p > '9') simple = false;
        while (simple && p < end && *p >= '0' && *p <= '9') {
            if (fd < 3) frac = frac * 10 + (*p - '0');
            else if (fd == 3) round_up = *p >= '5';
            ++fd;
            ++p;
        }
        for (; fd < 3; ++fd) frac *= 10;
        if (round_up) ++frac;
    }
    if (simple && p == end) {
        const std::int64_t ns = whole * 1000 + frac;
        out = negative ? -ns : ns;
        return true;
    }
    double value = 0;
    if (!json_double(raw, value) || std::fabs(value) > 9.0e15) return false;
    out = std::llround(value * 1000.0);
    return true;
}

bool json_string(std::string_view raw, std::string& out) {
    const char* p = raw.data();
    return decode_string(p, raw.data() + raw.size(), out) && p == raw.data() + raw.size();
}

}  // namespace fulcrum::importer::kineto
