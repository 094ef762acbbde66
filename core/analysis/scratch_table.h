// An append-only table of an analysis's records that goes to a temporary file past a memory
// budget (issue 37, docs/analyses.md, "Runs larger than memory"): what the analyses across
// ranks keep of a run grows with its steps — passes, pipeline pairs — while everything else grows
// with its ranks. Past `memory_bytes` the rows move to a file in TMPDIR (or /tmp), unlinked as
// soon as it is made, and are read back a bounded run at a time in the order they came, so a
// reader sees the same rows in the same order either way and its answers are the same bytes.
// Pages of the file sit in the kernel's cache, which gives them up under pressure.
//
// A table made from a vector only views it (implicitly: callers that hold their rows pass the
// vector).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/util/result.h"

namespace fulcrum::analysis {

// The file under a ScratchTable: bytes written and read at offsets; the first failed read is
// kept for the table's reader to ask after.
class ScratchFile {
public:
    ~ScratchFile();
    ScratchFile(const ScratchFile&) = delete;
    ScratchFile& operator=(const ScratchFile&) = delete;

    // `what` names the rows in messages ("passes").
    static Result<std::unique_ptr<ScratchFile>> make(std::string what);
    Status write(const void* bytes, std::size_t size, std::size_t offset) const;
    bool read(void* bytes, std::size_t size, std::size_t offset) const;
    Status read_status() const;

private:
    ScratchFile() = default;
    struct ReadError;
    int fd_ = -1;
    std::string folder_, what_;
    std::unique_ptr<ReadError> read_error_;
};

// Where a batch that starts at `first` ends, over a map of (key → rows) in key order: the keys
// from `first` on while their rows together stay within `limit`, at least one; `rows` gets their
// sum. How a reader of a table bounds what it holds at once (steps, fits).
template <typename Iterator>
Iterator batch_end(Iterator first, Iterator end, std::size_t limit, std::size_t& rows) {
    rows = 0;
    do {
        rows += first->second;
        ++first;
    } while (first != end && rows + first->second <= limit);
    return first;
}

template <typename T>
class ScratchTable {
    static_assert(std::is_trivially_copyable_v<T>, "rows go to the file as their bytes");

public:
    static constexpr std::int64_t kDefaultMemoryBytes = 64LL << 20;
    static constexpr std::size_t kReadRows = (4u << 20) / sizeof(T);  // a run of for_each: 4 MiB

    ScratchTable() = default;  // owning, kDefaultMemoryBytes
    ScratchTable(std::int64_t memory_bytes, std::string what)
        : memory_bytes_(memory_bytes), what_(std::move(what)) {}
    ScratchTable(const std::vector<T>& rows)  // NOLINT(google-explicit-constructor): a view
        : view_(&rows), size_(rows.size()) {}

    // Rows after those before (owning tables only).
    Status append(std::span<const T> rows) {
        if (view_ != nullptr) {
            return Error{ErrorCode::invalid_input, "a table that views its rows takes no more"};
        }
        const auto bytes = static_cast<std::int64_t>((size_ + rows.size()) * sizeof(T));
        if (file_ == nullptr && bytes > memory_bytes_) {
            auto made = ScratchFile::make(what_);
            if (!made) {
                return made.error();
            }
            file_ = std::move(*made);
            if (auto wrote = file_->write(held_.data(), held_.size() * sizeof(T), 0); !wrote) {
                return wrote;
            }
            std::vector<T>().swap(held_);
        }
        if (file_ != nullptr) {
            if (auto wrote = file_->write(rows.data(), rows.size() * sizeof(T), size_ * sizeof(T));
                !wrote) {
                return wrote;
            }
        } else {
            held_.insert(held_.end(), rows.begin(), rows.end());
        }
        size_ += rows.size();
        return {};
    }

    std::size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    bool spilled() const { return file_ != nullptr; }
    std::int64_t memory_bytes() const { return memory_bytes_; }
    // The rows where they are in memory (a view, or a table that has not spilled), else null.
    const std::vector<T>* in_memory() const {
        return file_ != nullptr ? nullptr : view_ != nullptr ? view_ : &held_;
    }
    // Rows [begin, end) appended to `out`; none where the read failed (read_status says).
    void read(std::size_t begin, std::size_t end, std::vector<T>& out) const {
        const std::size_t at = out.size();
        if (file_ == nullptr) {
            const T* rows = view_ != nullptr ? view_->data() : held_.data();
            out.insert(out.end(), rows + begin, rows + end);
            return;
        }
        out.resize(at + (end - begin));
        if (!file_->read(out.data() + at, (end - begin) * sizeof(T), begin * sizeof(T))) {
            out.resize(at);
        }
    }
    // Rows [begin, end): in place where they are in memory, else read into `buffer`; empty
    // where the read failed.
    std::span<const T> run(std::size_t begin, std::size_t end, std::vector<T>& buffer) const {
        if (file_ == nullptr) {
            const T* rows = view_ != nullptr ? view_->data() : held_.data();
            return {rows + begin, end - begin};
        }
        buffer.clear();
        read(begin, end, buffer);
        return buffer;
    }
    // Every row in order, a run of at most kReadRows at a time; stops at a failed read.
    void for_each(const std::function<void(std::span<const T>)>& visit) const {
        std::vector<T> buffer;
        for (std::size_t begin = 0; begin < size_; begin += kReadRows) {
            const std::span<const T> rows = run(begin, std::min(size_, begin + kReadRows), buffer);
            if (rows.empty()) {
                return;
            }
            visit(rows);
        }
    }
    std::vector<T> all() const {
        std::vector<T> out;
        out.reserve(size_);
        for_each([&](std::span<const T> rows) { out.insert(out.end(), rows.begin(), rows.end()); });
        return out;
    }
    // What a read of the file met: the readers above stop at the first failed read, and the
    // caller asks once it is done.
    Status read_status() const { return file_ != nullptr ? file_->read_status() : Status{}; }

private:
    const std::vector<T>* view_ = nullptr;
    std::int64_t memory_bytes_ = kDefaultMemoryBytes;
    std::string what_ = "rows";
    std::vector<T> held_;  // an owning table's, until it spills
    std::unique_ptr<ScratchFile> file_;
    std::size_t size_ = 0;
};

}  // namespace fulcrum::analysis
