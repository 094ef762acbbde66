#include "core/analysis/scratch_table.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>

#include <unistd.h>

namespace fulcrum::analysis {

struct ScratchFile::ReadError {
    std::mutex mutex;
    std::optional<Error> error;
};

ScratchFile::~ScratchFile() {
    if (fd_ >= 0) {
        ::close(fd_);
    }
}

Result<std::unique_ptr<ScratchFile>> ScratchFile::make(std::string what) {
    const char* tmpdir = std::getenv("TMPDIR");
    const std::filesystem::path folder = tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp";
    std::unique_ptr<ScratchFile> file(new ScratchFile);
    file->folder_ = folder.string();
    file->what_ = std::move(what);
    file->read_error_ = std::make_unique<ReadError>();
    std::string slug = file->what_;
    std::replace(slug.begin(), slug.end(), ' ', '-');
    std::string name = (folder / ("fulcrum-" + slug + "-XXXXXX")).string();
    file->fd_ = ::mkstemp(name.data());
    if (file->fd_ < 0) {
        return Error{ErrorCode::io, "cannot make the analysis's scratch file for its " +
                                        file->what_ + " in '" + file->folder_ +
                                        "': " + std::strerror(errno) +
                                        "; set TMPDIR to a folder it may write to"};
    }
    ::unlink(name.c_str());  // gone with the descriptor, whatever ends the analysis
    return file;
}

Status ScratchFile::write(const void* bytes, std::size_t size, std::size_t offset) const {
    const auto* from = static_cast<const char*>(bytes);
    const std::size_t start = offset;
    while (size > 0) {
        const ssize_t wrote = ::pwrite(fd_, from, size, static_cast<off_t>(offset));
        if (wrote < 0 && errno == EINTR) {
            continue;
        }
        if (wrote <= 0) {
            const int code = wrote < 0 ? errno : ENOSPC;
            return Error{ErrorCode::io, "cannot write the analysis's " + what_ +
                                            " to its scratch file in '" + folder_ + "' (" +
                                            std::to_string(start >> 20) +
                                            " MiB written): " + std::strerror(code) +
                                            "; free some room there, or set TMPDIR to a "
                                            "folder with room"};
        }
        from += wrote;
        offset += static_cast<std::size_t>(wrote);
        size -= static_cast<std::size_t>(wrote);
    }
    return {};
}

bool ScratchFile::read(void* bytes, std::size_t size, std::size_t offset) const {
    auto* to = static_cast<char*>(bytes);
    while (size > 0) {
        const ssize_t got = ::pread(fd_, to, size, static_cast<off_t>(offset));
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            const std::lock_guard lock(read_error_->mutex);
            if (!read_error_->error) {
                read_error_->error = Error{
                    ErrorCode::io, "cannot read the analysis's " + what_ +
                                       " back from its scratch file in '" + folder_ +
                                       "': " + (got < 0 ? std::strerror(errno) : "it ended early")};
            }
            return false;
        }
        to += got;
        offset += static_cast<std::size_t>(got);
        size -= static_cast<std::size_t>(got);
    }
    return true;
}

Status ScratchFile::read_status() const {
    const std::lock_guard lock(read_error_->mutex);
    if (read_error_->error) {
        return *read_error_->error;
    }
    return {};
}

}  // namespace fulcrum::analysis
