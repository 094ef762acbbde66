#include "core/import/kineto/json_stream.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/util/json_text.h"

namespace fulcrum::importer::kineto {

namespace {
constexpr std::size_t kInitialBuffer = 4u << 20;
constexpr std::size_t kMaxBuffer = 256u << 20;  // the largest single value we hold
constexpr std::size_t kReadChunk = 1u << 20;
// A file's chunks start this far into their buffer, so that the unparsed end of the previous
// chunk (part of one event, almost always) fits in front of them and the parser moves on to
// the new buffer without copying the chunk; a longer unparsed end is copied the old way.
constexpr std::size_t kHeadroom = 64u << 10;
constexpr std::size_t kChunksAhead = 4;
// A mapped file's pages are given back once the parser is this far past them.
constexpr std::size_t kLetGoEvery = 16u << 20;

bool is_ws(char c) {
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

// The scans below are most of the parser's time: each looks at 16 bytes per step (SSE2, part
// of every x86-64) for the few bytes that matter, and falls back to one byte at a time at the
// end of the buffer and on other processors.

// The first '"' or '\\' in [p, end), or end.
const char* find_quote_or_escape(const char* p, const char* end) {
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), escape = _mm_set1_epi8('\\');
    while (end - p >= 16) {
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
        const int mask = _mm_movemask_epi8(
            _mm_or_si128(_mm_cmpeq_epi8(bytes, quote), _mm_cmpeq_epi8(bytes, escape)));
        if (mask != 0)
            return p + __builtin_ctz(static_cast<unsigned>(mask));
        p += 16;
    }
#endif
    while (p < end && *p != '"' && *p != '\\')
        ++p;
    return p;
}

bool hex4(const char* p, const char* end, std::uint32_t& out) {
    if (end - p < 4)
        return false;
    out = 0;
    for (int i = 0; i < 4; ++i) {
        const char c = p[i];
        out <<= 4;
        if (c >= '0' && c <= '9')
            out |= static_cast<std::uint32_t>(c - '0');
        else if (c >= 'a' && c <= 'f')
            out |= static_cast<std::uint32_t>(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            out |= static_cast<std::uint32_t>(c - 'A' + 10);
        else
            return false;
    }
    return true;
}

// 64 bytes at a time: which are quotes, backslashes, opening and closing brackets ({ or [, }
// or ]). The container scans below take a block whole when it has no backslash, masking the
// brackets inside strings with the prefix XOR of the quotes (simdjson's stage 1, Langdale and
// Lemire, "Parsing Gigabytes of JSON per Second", section 3.1); a block with a backslash goes
// one byte at a time, so escapes keep exactly the meaning the byte loop gives them.
struct Block {
    std::uint64_t quote = 0, escape = 0, open = 0, close = 0;
};

std::uint64_t prefix_xor(std::uint64_t x) {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    return x;
}

#if defined(__SSE2__)
constexpr bool kBlocks = true;
// Needs 64 readable bytes at p.
Block classify(const char* p) {
    const __m128i quote = _mm_set1_epi8('"'), escape = _mm_set1_epi8('\\'),
                  open = _mm_set1_epi8('{'), close = _mm_set1_epi8('}'),
                  case_bit = _mm_set1_epi8(0x20);
    Block block;
    for (int k = 0; k < 4; ++k) {
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * k));
        const __m128i folded = _mm_or_si128(bytes, case_bit);
        auto bits = [&](__m128i eq) {
            return static_cast<std::uint64_t>(static_cast<unsigned>(_mm_movemask_epi8(eq)))
                   << (16 * k);
        };
        block.quote |= bits(_mm_cmpeq_epi8(bytes, quote));
        block.escape |= bits(_mm_cmpeq_epi8(bytes, escape));
        block.open |= bits(_mm_cmpeq_epi8(folded, open));
        block.close |= bits(_mm_cmpeq_epi8(folded, close));
    }
    return block;
}
#else
constexpr bool kBlocks = false;
Block classify(const char*) {
    return {};
}
#endif

// Where a container scan stands between bytes.
struct ScanState {
    int depth = 0;
    bool in_string = false;
    bool escaped = false;  // the previous byte was a backslash inside a string
};

// Scans whole blocks from p while at least 64 bytes remain and no block holds a backslash.
// `bracket(at)` is called for each bracket outside strings, in order; scanning stops (and
// returns that position + 1) when it returns true. Returns where it stopped otherwise.
template <typename Bracket>
const char* scan_blocks(const char* p, const char* end, ScanState& state, Bracket&& bracket,
                        bool& done) {
    done = false;
    if constexpr (kBlocks) {
        while (end - p >= 64 && !state.escaped) {
            const Block block = classify(p);
            if (block.escape != 0)
                break;
            const std::uint64_t inside =
                prefix_xor(block.quote) ^ (state.in_string ? ~std::uint64_t{0} : 0);
            std::uint64_t brackets = (block.open | block.close) & ~inside;
            state.in_string = (inside >> 63) != 0;
            while (brackets != 0) {
                const int bit = __builtin_ctzll(brackets);
                brackets &= brackets - 1;
                if (bracket(p + bit)) {
                    done = true;
                    return p + bit + 1;
                }
            }
            p += 64;
        }
    }
    return p;
}

// One byte of a container scan; true when `bracket` ends the scan at it.
template <typename Bracket>
bool scan_byte(const char* at, ScanState& state, Bracket&& bracket) {
    const char ch = *at;
    if (state.in_string) {
        if (state.escaped)
            state.escaped = false;
        else if (ch == '\\')
            state.escaped = true;
        else if (ch == '"')
            state.in_string = false;
        return false;
    }
    if (ch == '"') {
        state.in_string = true;
        return false;
    }
    if (ch == '{' || ch == '[' || ch == '}' || ch == ']')
        return bracket(at);
    return false;
}

// Decodes the string starting at p (at the opening quote); leaves p after the closing quote.
bool decode_string(const char*& p, const char* end, std::string& out) {
    if (p >= end || *p != '"')
        return false;
    ++p;
    const char* start = p;
    const char* quote =
        static_cast<const char*>(std::memchr(p, '"', static_cast<std::size_t>(end - p)));
    if (quote == nullptr)
        return false;
    if (std::memchr(start, '\\', static_cast<std::size_t>(quote - start)) == nullptr) {
        out.assign(start, quote);
        p = quote + 1;
        return true;
    }
    out.clear();
    while (p < end) {
        const char c = *p++;
        if (c == '"')
            return true;
        if (c != '\\') {
            out += c;
            continue;
        }
        if (p >= end)
            return false;
        const char e = *p++;
        switch (e) {
            case '"':
                out += '"';
                break;
            case '\\':
                out += '\\';
                break;
            case '/':
                out += '/';
                break;
            case 'b':
                out += '\b';
                break;
            case 'f':
                out += '\f';
                break;
            case 'n':
                out += '\n';
                break;
            case 'r':
                out += '\r';
                break;
            case 't':
                out += '\t';
                break;
            case 'u': {
                std::uint32_t cp = 0;
                if (!hex4(p, end, cp))
                    return false;
                p += 4;
                if (cp >= 0xD800 && cp < 0xDC00 && end - p >= 6 && p[0] == '\\' && p[1] == 'u') {
                    std::uint32_t low = 0;
                    if (hex4(p + 2, end, low) && low >= 0xDC00 && low < 0xE000) {
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                        p += 6;
                    }
                }
                append_utf8(out, cp);  // a lone surrogate becomes U+FFFD
                break;
            }
            default:
                return false;
        }
    }
    return false;
}

// Skips one value starting at p (after whitespace); false when malformed or cut short.
bool skip_value(const char*& p, const char* end) {
    if (p >= end)
        return false;
    const char c = *p;
    if (c == '"') {
        ++p;
        for (;;) {
            p = find_quote_or_escape(p, end);
            if (p >= end)
                return false;
            if (*p == '"') {
                ++p;
                return true;
            }
            if (end - p < 2)  // a backslash ends the input
                return false;
            p += 2;
        }
    }
    if (c == '{' || c == '[') {
        // Brackets must pair up ({ with }, [ with ]), at most 64 deep.
        char stack[64];
        ScanState state;
        bool failed = false;
        auto bracket = [&](const char* at) {
            const char ch = *at;
            if (ch == '{' || ch == '[') {
                if (state.depth == 64) {
                    failed = true;
                    return true;
                }
                stack[state.depth++] = ch == '{' ? '}' : ']';
                return false;
            }
            if (state.depth == 0 || stack[state.depth - 1] != ch) {
                failed = true;
                return true;
            }
            return --state.depth == 0;
        };
        for (;;) {
            bool done = false;
            p = scan_blocks(p, end, state, bracket, done);
            if (done)
                return !failed;
            const char* stop = std::min(end, p + 64);
            for (; p < stop; ++p) {
                if (scan_byte(p, state, bracket)) {
                    ++p;
                    return !failed;
                }
            }
            if (p >= end)
                return false;
        }
    }
    const char* start = p;
    while (p < end && !is_ws(*p) && *p != ',' && *p != '}' && *p != ']' && *p != ':')
        ++p;
    return p > start;
}
}  // namespace

// A file through gzread (which reads plain files as they are and gunzips gzip files: one path
// for both), read a few chunks ahead of the parser on a thread of its own: the read() copies
// (a sixth of a plain file's parse) and the gunzipping run beside the parsing instead of
// between its steps. The chunks come in order and whole, so the parser sees the same bytes, and
// a damaged or cut stream the same problem after the same bytes, as reading in place.
class JsonStream::ReadAhead {
public:
    struct Chunk {
        std::vector<char> buffer;  // the bytes are at kHeadroom
        std::size_t size = 0;
        std::int64_t offset = 0;  // bytes of the file behind it (compressed, for gzip)
    };

    explicit ReadAhead(gzFile file) : file_(file), thread_([this] { read_ahead(); }) {}
    ~ReadAhead() {
        {
            std::lock_guard lock(mutex_);
            stop_ = true;
        }
        changed_.notify_all();
        thread_.join();
        gzclose(file_);
    }
    ReadAhead(const ReadAhead&) = delete;
    ReadAhead& operator=(const ReadAhead&) = delete;

    // The next chunk, waiting for it; false at the end of the input, where problem() tells
    // what went wrong, if anything.
    bool next(Chunk& chunk) {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return !ready_.empty() || finished_; });
        if (ready_.empty())
            return false;
        chunk = std::move(ready_.front());
        ready_.pop_front();
        changed_.notify_all();
        return true;
    }
    // A buffer the parser is done with, for a later chunk.
    void recycle(std::vector<char> buffer) {
        std::lock_guard lock(mutex_);
        if (spare_.size() < kChunksAhead)
            spare_.push_back(std::move(buffer));
    }
    std::string problem() {
        std::lock_guard lock(mutex_);
        return problem_;
    }

private:
    void read_ahead() {
        for (;;) {
            Chunk chunk;
            {
                std::unique_lock lock(mutex_);
                changed_.wait(lock, [&] { return ready_.size() < kChunksAhead || stop_; });
                if (stop_)
                    return;
                if (!spare_.empty()) {
                    chunk.buffer = std::move(spare_.back());
                    spare_.pop_back();
                }
            }
            if (chunk.buffer.size() < kHeadroom + kReadChunk)
                chunk.buffer.resize(kHeadroom + kReadChunk);
            const int got =
                gzread(file_, chunk.buffer.data() + kHeadroom, static_cast<unsigned>(kReadChunk));
            std::string problem;
            if (got <= 0) {
                int errnum = Z_OK;
                const char* message = gzerror(file_, &errnum);
                if (errnum != Z_OK && errnum != Z_STREAM_END) {
                    problem = std::string("gzip stream damaged or cut short (") +
                              (message != nullptr ? message : "unknown") + ")";
                }
            }
            chunk.size = got > 0 ? static_cast<std::size_t>(got) : 0;
            chunk.offset = static_cast<std::int64_t>(gzoffset(file_));
            std::lock_guard lock(mutex_);
            if (got <= 0) {
                problem_ = std::move(problem);
                finished_ = true;
                changed_.notify_all();
                return;
            }
            ready_.push_back(std::move(chunk));
            changed_.notify_all();
        }
    }

    gzFile file_;
    std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<Chunk> ready_;
    std::vector<std::vector<char>> spare_;
    bool finished_ = false;  // the reader has reached the end of the input (or an error)
    bool stop_ = false;
    std::string problem_;
    std::thread thread_;  // last: it starts once everything above is there
};

JsonStream::JsonStream() = default;

JsonStream::~JsonStream() {
    if (inflating_)
        inflateEnd(&inflate_);
    if (mapped_ != nullptr)
        munmap(mapped_, mapped_size_);
}

bool JsonStream::open(const std::string& path) {
    if (map_plain_file(path))
        return true;
    gzFile file = gzopen(path.c_str(), "rb");
    if (file == nullptr)
        return false;
    gzbuffer(file, 1u << 18);
    file_ = std::make_unique<ReadAhead>(file);
    return true;
}

// A plain file is read where it lies, in the page cache: no read() copies and no second thread
// (bench_kineto: a sixth less CPU per byte, so more files import side by side on the same
// cores). The whole input is then one buffer, so fill() has nothing to add and a value cut off
// by the end of the file ends the stream as it does when read in chunks. (A file truncated by
// another process while it is mapped would fault; a trace being imported is finished.)
bool JsonStream::map_plain_file(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    struct stat info {};
    unsigned char magic[2] = {0, 0};
    void* mapping = MAP_FAILED;
    if (fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && info.st_size >= 2 &&
        pread(fd, magic, 2, 0) == 2 && !(magic[0] == 0x1f && magic[1] == 0x8b)) {
        mapping =
            mmap(nullptr, static_cast<std::size_t>(info.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    }
    ::close(fd);
    if (mapping == MAP_FAILED)
        return false;
    madvise(mapping, static_cast<std::size_t>(info.st_size), MADV_SEQUENTIAL);
    mapped_ = mapping;
    mapped_size_ = static_cast<std::size_t>(info.st_size);
    data_ = static_cast<const char*>(mapping);
    end_ = mapped_size_;
    eof_ = true;
    return true;
}

void JsonStream::let_go_behind() {
    if (pos_ - let_go_ < kLetGoEvery)
        return;
    static const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    const std::size_t until = pos_ / page * page;
    // The views handed out so far are done with (they last until the next call); these pages
    // would come back from the page cache if read again.
    madvise(static_cast<char*>(mapped_) + let_go_, until - let_go_, MADV_DONTNEED);
    let_go_ = until;
}

bool JsonStream::open_memory(std::string_view bytes) {
    memory_ = bytes;
    memory_open_ = true;
    if (bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
        static_cast<unsigned char>(bytes[1]) == 0x8b) {
        inflate_ = z_stream{};
        // 15 + 16: a gzip wrapper, as gzread reads it.
        if (inflateInit2(&inflate_, 15 + 16) != Z_OK)
            return false;
        inflating_ = true;
        inflate_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
        inflate_.avail_in = static_cast<uInt>(std::min<std::size_t>(bytes.size(), UINT_MAX));
    }
    buf_.resize(std::min(kInitialBuffer, std::max<std::size_t>(bytes.size() * 4, 4096)));
    data_ = buf_.data();
    return true;
}

std::int64_t JsonStream::file_offset() const {
    if (mapped_ != nullptr)
        return static_cast<std::int64_t>(pos_);
    if (file_ != nullptr)
        return file_offset_;
    return static_cast<std::int64_t>(inflating_ ? memory_.size() - inflate_.avail_in
                                                : memory_used_);
}

int JsonStream::read_more(char* into, std::size_t room) {
    if (!memory_open_)
        return -1;
    if (!inflating_) {
        const std::size_t n = std::min({room, memory_.size() - memory_used_, std::size_t{INT_MAX}});
        std::memcpy(into, memory_.data() + memory_used_, n);
        memory_used_ += n;
        return static_cast<int>(n);
    }
    if (inflate_done_)
        return 0;
    inflate_.next_out = reinterpret_cast<Bytef*>(into);
    inflate_.avail_out = static_cast<uInt>(std::min<std::size_t>(room, INT_MAX));
    const int rc = inflate(&inflate_, Z_NO_FLUSH);
    const int got = static_cast<int>(std::min<std::size_t>(room, INT_MAX) - inflate_.avail_out);
    if (rc == Z_STREAM_END) {
        inflate_done_ = true;
    } else if (rc != Z_OK || (got == 0 && inflate_.avail_in == 0)) {
        inflate_done_ = true;
        problem_ = std::string("gzip stream damaged or cut short (") +
                   (inflate_.msg != nullptr ? inflate_.msg : "unexpected end of stream") + ")";
    }
    return got;
}

bool JsonStream::fill() {
    if (eof_)
        return false;
    if (file_ != nullptr)
        return fill_from_file();
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
        data_ = buf_.data();
    }
    const int got = read_more(buf_.data() + end_, buf_.size() - end_);
    if (got <= 0) {
        stop_at_end();
        return false;
    }
    end_ += static_cast<std::size_t>(got);
    return true;
}

// base_ is the offset of buf_[0] in the input, modulo 2^64: in front of a chunk's headroom it
// "starts" before the input does, and base_ + pos_ is still the offset of buf_[pos_].
bool JsonStream::fill_from_file() {
    ReadAhead::Chunk chunk;
    if (!file_->next(chunk)) {
        problem_ = file_->problem();
        stop_at_end();
        return false;
    }
    file_offset_ = chunk.offset;
    const std::size_t unparsed = end_ - pos_;
    if (unparsed <= kHeadroom) {
        const std::size_t first = kHeadroom - unparsed;
        if (unparsed > 0)
            std::memcpy(chunk.buffer.data() + first, buf_.data() + pos_, unparsed);
        base_ += pos_ - first;
        std::swap(buf_, chunk.buffer);
        data_ = buf_.data();
        pos_ = first;
        end_ = kHeadroom + chunk.size;
        file_->recycle(std::move(chunk.buffer));
        return true;
    }
    // One value longer than the headroom: it grows in buf_, as from memory.
    std::memmove(buf_.data(), buf_.data() + pos_, unparsed);
    base_ += pos_;
    end_ = unparsed;
    pos_ = 0;
    while (buf_.size() - end_ < chunk.size) {
        if (buf_.size() >= kMaxBuffer) {
            problem_ = "a single JSON value is larger than " + std::to_string(kMaxBuffer >> 20) +
                       " MiB at byte " + std::to_string(base_);
            eof_ = true;
            return false;
        }
        buf_.resize(std::max(buf_.size() * 2, kInitialBuffer));
        data_ = buf_.data();
    }
    std::memcpy(buf_.data() + end_, chunk.buffer.data() + kHeadroom, chunk.size);
    end_ += chunk.size;
    file_->recycle(std::move(chunk.buffer));
    return true;
}

void JsonStream::stop_at_end() {
    eof_ = true;
    if (!problem_.empty() && problem_.find(" after byte ") == std::string::npos) {
        problem_ += " after byte " + std::to_string(base_ + end_) + " of the uncompressed JSON";
    }
}

int JsonStream::peek() {
    for (;;) {
        const char* bytes = data_;
        while (pos_ < end_ && is_ws(bytes[pos_]))
            ++pos_;
        if (pos_ < end_)
            return static_cast<unsigned char>(bytes[pos_]);
        if (!fill())
            return -1;
    }
}

bool JsonStream::next_value(std::string_view& raw) {
    if (mapped_ != nullptr)
        let_go_behind();
    if (peek() < 0)
        return false;
    std::size_t i = pos_;
    auto more = [&]() {
        const std::size_t rel = i - pos_;
        if (!fill())
            return false;
        i = pos_ + rel;
        return true;
    };
    const char c = data_[i];
    if (c == '{' || c == '[') {
        // Only the depth counts here: parse_event checks the event's own brackets.
        ScanState state;
        auto bracket = [&](const char* at) {
            const char ch = *at;
            if (ch == '{' || ch == '[') {
                ++state.depth;
                return false;
            }
            return --state.depth == 0;
        };
        for (;;) {
            const char* bytes = data_;
            bool done = false;
            const char* p = scan_blocks(bytes + i, bytes + end_, state, bracket, done);
            if (!done) {
                const char* stop = std::min(bytes + end_, p + 64);
                for (; p < stop; ++p) {
                    if (scan_byte(p, state, bracket)) {
                        ++p;
                        done = true;
                        break;
                    }
                }
            }
            i = static_cast<std::size_t>(p - bytes);
            if (done) {
                raw = std::string_view(bytes + pos_, i - pos_);
                pos_ = i;
                return true;
            }
            if (i == end_ && !more())
                return false;
        }
    }
    if (c == '"') {
        ++i;
        for (;;) {
            if (i == end_ && !more())
                return false;
            const char ch = data_[i++];
            if (ch == '\\') {
                if (i == end_ && !more())
                    return false;
                ++i;
            } else if (ch == '"') {
                break;
            }
        }
        raw = std::string_view(data_ + pos_, i - pos_);
        pos_ = i;
        return true;
    }
    for (;;) {
        if (i == end_ && !more())
            break;
        const char ch = data_[i];
        if (is_ws(ch) || ch == ',' || ch == '}' || ch == ']' || ch == ':')
            break;
        ++i;
    }
    if (i == pos_)
        return false;
    raw = std::string_view(data_ + pos_, i - pos_);
    pos_ = i;
    return true;
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
    if (!skip_value(p_, end_))
        return false;
    raw = std::string_view(start, static_cast<std::size_t>(p_ - start));
    return true;
}

bool JsonCursor::next_member(std::string_view& key, std::string_view& raw, bool& ok) {
    ok = false;
    skip_ws();
    if (p_ >= end_)
        return false;
    if (*p_ == '}') {
        ++p_;
        ok = true;
        return false;
    }
    if (!first_ && !eat(','))
        return false;
    first_ = false;
    skip_ws();
    if (p_ >= end_ || *p_ != '"')
        return false;
    const char* start = p_ + 1;
    const char* quote = find_quote_or_escape(start, end_);
    if (quote == end_)
        return false;
    if (*quote == '"') {  // no escape before the closing quote
        key = std::string_view(start, static_cast<std::size_t>(quote - start));
        p_ = quote + 1;
    } else {
        if (!decode_string(p_, end_, key_scratch_))
            return false;
        key = key_scratch_;
    }
    if (!eat(':'))
        return false;
    if (!value(raw))
        return false;
    ok = true;
    return true;
}

bool json_double(std::string_view raw, double& out) {
    if (raw.empty())
        return false;
    const char* first = raw.data();
    const char* last = raw.data() + raw.size();
    const auto [ptr, ec] = std::from_chars(first, last, out);
    return ec == std::errc{} && ptr == last && std::isfinite(out);
}

bool json_int(std::string_view raw, std::int64_t& out) {
    if (raw.empty())
        return false;
    const auto [ptr, ec] = std::from_chars(raw.data(), raw.data() + raw.size(), out);
    if (ec == std::errc{} && ptr == raw.data() + raw.size())
        return true;
    double value = 0;
    if (!json_double(raw, value) || std::fabs(value) > 9.0e18 || value != std::floor(value))
        return false;
    out = static_cast<std::int64_t>(value);
    return true;
}

bool json_us_to_ns(std::string_view raw, std::int64_t& out) {
    // A JSON number is -?int(.frac)?([eE][+-]?exp)?. Its value in ns is the digit string
    // D = int·frac times 10^(exp + 3 − |frac|): keep the digits before that decimal point,
    // round half away from zero on the first one after it. Integers only, so Kineto's
    // 16-digit epoch microseconds with 3 decimals come out exact; a double holds ~15.9 digits
    // and was off by up to 256 ns.
    const char* p = raw.data();
    const char* end = p + raw.size();
    const bool negative = p < end && *p == '-';
    if (negative)
        ++p;
    auto digits = [&](std::string_view& into) {
        const char* first = p;
        while (p < end && *p >= '0' && *p <= '9')
            ++p;
        into = std::string_view(first, static_cast<std::size_t>(p - first));
        return !into.empty();
    };
    std::string_view whole, fraction;
    if (!digits(whole))
        return false;
    if (p < end && *p == '.') {
        ++p;
        if (!digits(fraction))
            return false;
    }
    std::int64_t exponent = 0;
    if (p < end && (*p == 'e' || *p == 'E')) {
        ++p;
        const bool exponent_negative = p < end && *p == '-';
        if (p < end && (*p == '+' || *p == '-'))
            ++p;
        std::string_view exponent_digits;
        if (!digits(exponent_digits))
            return false;
        for (char c : exponent_digits) {
            exponent = std::min<std::int64_t>(exponent * 10 + (c - '0'), 1'000'000);
        }
        if (exponent_negative)
            exponent = -exponent;
    }
    if (p != end)
        return false;
    const std::int64_t count = static_cast<std::int64_t>(whole.size() + fraction.size());
    auto digit = [&](std::int64_t i) -> int {
        if (i < 0 || i >= count)
            return 0;
        const auto at = static_cast<std::size_t>(i);
        return (at < whole.size() ? whole[at] : fraction[at - whole.size()]) - '0';
    };
    // Digits kept: those left of the point after shifting by exp + 3 − |frac|.
    const std::int64_t kept = count + exponent + 3 - static_cast<std::int64_t>(fraction.size());
    if (kept > count + 19) {  // ×10^20 or more: only zero stays in range
        for (std::int64_t i = 0; i < count; ++i) {
            if (digit(i) != 0)
                return false;
        }
        out = 0;
        return true;
    }
    constexpr std::uint64_t kLimit = static_cast<std::uint64_t>(INT64_MAX);
    std::uint64_t value = 0;
    for (std::int64_t i = 0; i < kept; ++i) {
        const int d = digit(i);
        if (value > (kLimit - static_cast<std::uint64_t>(d)) / 10)
            return false;  // out of int64 range
        value = value * 10 + static_cast<std::uint64_t>(d);
    }
    if (kept >= 0 && digit(kept) >= 5) {
        if (value == kLimit)
            return false;
        ++value;
    }
    out = negative ? -static_cast<std::int64_t>(value) : static_cast<std::int64_t>(value);
    return true;
}

bool contains(std::string_view text, std::string_view needle) {
    if (needle.empty())
        return true;
    if (needle.size() > text.size())
        return false;
    const char* p = text.data();
    const char* const last_start = text.data() + (text.size() - needle.size());
#if defined(__SSE2__)
    // Candidates are where both the needle's first and last bytes match (Muła's SIMD-friendly
    // substring search); only those are compared in full.
    const __m128i first = _mm_set1_epi8(needle.front()), last = _mm_set1_epi8(needle.back());
    const std::size_t tail = needle.size() - 1;
    while (last_start - p >= 15) {
        const __m128i at_first = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
        const __m128i at_last = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + tail));
        unsigned mask = static_cast<unsigned>(_mm_movemask_epi8(
            _mm_and_si128(_mm_cmpeq_epi8(at_first, first), _mm_cmpeq_epi8(at_last, last))));
        while (mask != 0) {
            const unsigned bit = static_cast<unsigned>(__builtin_ctz(mask));
            if (std::memcmp(p + bit + 1, needle.data() + 1, tail) == 0)
                return true;
            mask &= mask - 1;
        }
        p += 16;
    }
#endif
    for (; p <= last_start; ++p) {
        if (*p == needle.front() && std::memcmp(p, needle.data(), needle.size()) == 0)
            return true;
    }
    return false;
}

bool json_string(std::string_view raw, std::string& out) {
    const char* p = raw.data();
    return decode_string(p, raw.data() + raw.size(), out) && p == raw.data() + raw.size();
}

std::optional<std::string_view> leading_name(std::string_view event) {
    constexpr std::string_view kKey = "\"name\"";
    const std::size_t key = event.find(kKey);
    if (key == std::string_view::npos || event.find('{', 1) < key) {
        return std::nullopt;
    }
    std::size_t at = key + kKey.size();
    const auto skip_ws = [&] {
        while (at < event.size() && is_ws(event[at])) {
            ++at;
        }
    };
    skip_ws();
    if (at >= event.size() || event[at] != ':') {
        return std::nullopt;  // "name" was a value, not the key
    }
    ++at;
    skip_ws();
    if (at >= event.size() || event[at] != '"') {
        return std::nullopt;
    }
    const std::size_t close = event.find_first_of("\"\\", at + 1);
    if (close == std::string_view::npos || event[close] != '"') {
        return std::nullopt;  // an escape inside: read in full
    }
    return event.substr(at, close - at + 1);
}

}  // namespace fulcrum::importer::kineto
