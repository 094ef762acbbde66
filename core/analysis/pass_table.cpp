#include "core/analysis/pass_table.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

#include <unistd.h>

namespace fulcrum::analysis {

static_assert(std::is_trivially_copyable_v<Pass>, "passes go to the file as their bytes");

namespace {

constexpr std::size_t kReadPasses = 1 << 16;  // a run handed by for_each: 5 MiB

std::string megabytes(std::size_t passes) {
    return std::to_string(passes * sizeof(Pass) / (1 << 20)) + " MiB";
}

}  // namespace

// The temporary file and what its reads met.
struct PassTable::Spill {
    int fd = -1;
    std::string folder;
    mutable std::mutex mutex;
    mutable std::optional<Error> read_error;

    ~Spill() {
        if (fd >= 0) {
            ::close(fd);
        }
    }

    static Result<std::unique_ptr<Spill>> make() {
        const char* tmpdir = std::getenv("TMPDIR");
        const std::filesystem::path folder = tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp";
        auto spill = std::make_unique<Spill>();
        spill->folder = folder.string();
        std::string name = (folder / "fulcrum-passes-XXXXXX").string();
        spill->fd = ::mkstemp(name.data());
        if (spill->fd < 0) {
            return Error{ErrorCode::io,
                         "cannot make the analysis's scratch file for its passes in '" +
                             spill->folder + "': " + std::strerror(errno) +
                             "; set TMPDIR to a folder it may write to"};
        }
        ::unlink(name.c_str());  // gone with the descriptor, whatever ends the analysis
        return spill;
    }

    Status write(const Pass* passes, std::size_t count, std::size_t at) const {
        const auto* bytes = reinterpret_cast<const char*>(passes);
        std::size_t left = count * sizeof(Pass);
        auto offset = static_cast<off_t>(at * sizeof(Pass));
        while (left > 0) {
            const ssize_t wrote = ::pwrite(fd, bytes, left, offset);
            if (wrote < 0 && errno == EINTR) {
                continue;
            }
            if (wrote <= 0) {
                const int code = wrote < 0 ? errno : ENOSPC;
                return Error{ErrorCode::io,
                             "cannot write the analysis's passes to its scratch file in '" +
                                 folder + "' (" + megabytes(at) +
                                 " written): " + std::strerror(code) +
                                 "; free some room there, or set TMPDIR to a folder with room"};
            }
            bytes += wrote;
            offset += wrote;
            left -= static_cast<std::size_t>(wrote);
        }
        return {};
    }

    bool read(Pass* passes, std::size_t count, std::size_t at) const {
        auto* bytes = reinterpret_cast<char*>(passes);
        std::size_t left = count * sizeof(Pass);
        auto offset = static_cast<off_t>(at * sizeof(Pass));
        while (left > 0) {
            const ssize_t got = ::pread(fd, bytes, left, offset);
            if (got < 0 && errno == EINTR) {
                continue;
            }
            if (got <= 0) {
                const std::lock_guard lock(mutex);
                if (!read_error) {
                    read_error = Error{
                        ErrorCode::io,
                        "cannot read the analysis's passes back from its scratch file in '" +
                            folder + "': " + (got < 0 ? std::strerror(errno) : "it ended early")};
                }
                return false;
            }
            bytes += got;
            offset += got;
            left -= static_cast<std::size_t>(got);
        }
        return true;
    }
};

PassTable::PassTable() = default;
PassTable::PassTable(std::int64_t memory_bytes) : memory_bytes_(memory_bytes) {}

PassTable::PassTable(const std::vector<Pass>& passes) : view_(&passes), size_(passes.size()) {
    sorted_ = std::is_sorted(passes.begin(), passes.end(), [](const Pass& a, const Pass& b) {
        return std::tie(a.rank, a.step) < std::tie(b.rank, b.step);
    });
}

PassTable::~PassTable() = default;
PassTable::PassTable(PassTable&&) noexcept = default;
PassTable& PassTable::operator=(PassTable&&) noexcept = default;

bool PassTable::spilled() const {
    return spill_ != nullptr;
}

Status PassTable::append(std::span<const Pass> rank) {
    if (view_ != nullptr) {
        return Error{ErrorCode::invalid_input, "a table that views passes takes no more"};
    }
    rank_begins_.push_back(size_);
    for (std::size_t i = 0; i < rank.size(); ++i) {
        const Pass& pass = rank[i];
        if (step_runs_.empty() || step_runs_.back().end != size_ + i ||
            step_runs_.back().step != pass.step) {
            step_runs_.push_back({pass.step, size_ + i, size_ + i});
        }
        ++step_runs_.back().end;
        const Pass* before = i > 0 ? &rank[i - 1] : nullptr;
        if (before == nullptr && size_ > 0) {
            before = &last_;
        }
        if (before != nullptr &&
            std::tie(pass.rank, pass.step) < std::tie(before->rank, before->step)) {
            sorted_ = false;
        }
    }
    if (!rank.empty()) {
        last_ = rank.back();
    }
    const auto bytes = static_cast<std::int64_t>((size_ + rank.size()) * sizeof(Pass));
    if (spill_ == nullptr && bytes > memory_bytes_) {
        auto made = Spill::make();
        if (!made) {
            return made.error();
        }
        spill_ = std::move(*made);
        if (auto wrote = spill_->write(held_.data(), held_.size(), 0); !wrote) {
            return wrote;
        }
        std::vector<Pass>().swap(held_);
    }
    if (spill_ != nullptr) {
        if (auto wrote = spill_->write(rank.data(), rank.size(), size_); !wrote) {
            return wrote;
        }
    } else {
        held_.insert(held_.end(), rank.begin(), rank.end());
    }
    size_ += rank.size();
    return {};
}

void PassTable::read(std::size_t begin, std::size_t end, std::vector<Pass>& out) const {
    const std::size_t at = out.size();
    out.resize(at + (end - begin));
    if (!spill_->read(out.data() + at, end - begin, begin)) {
        out.resize(at);
    }
}

std::span<const Pass> PassTable::run(std::size_t begin, std::size_t end,
                                     std::vector<Pass>& buffer) const {
    if (view_ != nullptr) {
        return {view_->data() + begin, end - begin};
    }
    if (spill_ == nullptr) {
        return {held_.data() + begin, end - begin};
    }
    buffer.clear();
    read(begin, end, buffer);
    return buffer;
}

void PassTable::for_each(const std::function<void(std::span<const Pass>)>& visit) const {
    std::vector<Pass> buffer;
    for (std::size_t begin = 0; begin < size_; begin += kReadPasses) {
        const std::span<const Pass> passes =
            run(begin, std::min(size_, begin + kReadPasses), buffer);
        if (passes.empty()) {
            return;  // a failed read: read_status says
        }
        visit(passes);
    }
}

void PassTable::for_each_rank(const std::function<void(std::span<const Pass>)>& visit) const {
    if (view_ != nullptr) {
        if (!view_->empty()) {
            visit(*view_);
        }
        return;
    }
    std::vector<Pass> buffer;
    for (std::size_t r = 0; r < rank_begins_.size(); ++r) {
        const std::size_t begin = rank_begins_[r];
        const std::size_t end = r + 1 < rank_begins_.size() ? rank_begins_[r + 1] : size_;
        if (begin == end) {
            continue;
        }
        const std::span<const Pass> passes = run(begin, end, buffer);
        if (passes.empty()) {
            return;
        }
        visit(passes);
    }
}

void PassTable::for_each_step_window(
    const std::function<void(const std::vector<Pass>&)>& visit) const {
    if (spill_ == nullptr) {
        const std::vector<Pass>& passes = view_ != nullptr ? *view_ : held_;
        if (!passes.empty()) {
            visit(passes);
        }
        return;
    }
    std::map<std::int32_t, std::size_t> step_sizes;
    for (const StepRun& run : step_runs_) {
        if (run.step >= 0) {
            step_sizes[run.step] += run.end - run.begin;
        }
    }
    const auto window_passes = static_cast<std::size_t>(memory_bytes_) / sizeof(Pass);
    std::vector<Pass> window;
    for (auto first = step_sizes.begin(); first != step_sizes.end();) {
        auto last = first;
        std::size_t passes = 0;
        do {
            passes += last->second;
            ++last;
        } while (last != step_sizes.end() && passes + last->second <= window_passes);
        const std::int32_t low = first->first;
        const std::int32_t high = std::prev(last)->first;
        window.clear();
        window.reserve(passes);
        // The window's runs in table order, those that follow on one another (a rank's steps)
        // read at once.
        std::size_t begin = 0, end = 0;
        const auto flush = [&] {
            const std::size_t before = window.size();
            if (end > begin) {
                read(begin, end, window);
            }
            return window.size() - before == end - begin;
        };
        for (const StepRun& run : step_runs_) {
            if (run.step < low || run.step > high) {
                continue;
            }
            if (run.begin != end) {
                if (!flush()) {
                    return;  // a failed read: read_status says
                }
                begin = run.begin;
            }
            end = run.end;
        }
        if (!flush()) {
            return;
        }
        visit(window);
        first = last;
    }
}

std::vector<Pass> PassTable::all() const {
    std::vector<Pass> out;
    out.reserve(size_);
    for_each(
        [&](std::span<const Pass> passes) { out.insert(out.end(), passes.begin(), passes.end()); });
    return out;
}

Status PassTable::read_status() const {
    if (spill_ != nullptr) {
        const std::lock_guard lock(spill_->mutex);
        if (spill_->read_error) {
            return *spill_->read_error;
        }
    }
    return {};
}

}  // namespace fulcrum::analysis
