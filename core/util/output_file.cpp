#include "core/util/output_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

namespace fulcrum {

namespace {

// Whether `path` may be written: it does not exist (or may be replaced) and its folder does.
Status check_target(const std::string& path, bool overwrite) {
    std::error_code ec;
    if (std::filesystem::exists(path, ec) && !overwrite) {
        return Error{ErrorCode::io, "'" + path +
                                        "' already exists; remove it, choose another path, or "
                                        "pass --force"};
    }
    const auto folder = std::filesystem::path(path).parent_path();
    if (!folder.empty() && !std::filesystem::is_directory(folder, ec)) {
        return Error{ErrorCode::io, "cannot write '" + path + "': the folder '" + folder.string() +
                                        "' does not exist"};
    }
    return {};
}

// The side files SQLite may leave beside a database, which it would apply to another file put
// under that name.
void remove_side_files(const std::string& path) {
    std::error_code ec;
    for (const char* suffix : {"-journal", "-wal", "-shm"}) {
        std::filesystem::remove(path + suffix, ec);
    }
}

}  // namespace

Result<OutputFile> OutputFile::create(const std::string& path, bool overwrite) {
    if (auto status = check_target(path, overwrite); !status) {
        return status.error();
    }
    const std::string partial = path + ".partial";
    std::FILE* file = std::fopen(partial.c_str(), "wb");
    if (file == nullptr) {
        return Error{ErrorCode::io, "cannot write '" + path + "': " + std::strerror(errno) +
                                        " (check that the folder exists and is writable)"};
    }
    static constexpr std::size_t kBufferBytes = 1 << 20;
    std::setvbuf(file, nullptr, _IOFBF, kBufferBytes);
    return OutputFile(file, path);
}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : file_(std::exchange(other.file_, nullptr)),
      path_(std::move(other.path_)),
      write_errno_(other.write_errno_),
      committed_(other.committed_) {}

OutputFile::~OutputFile() {
    if (file_ != nullptr) {
        std::fclose(file_);
    }
    if (!committed_ && !path_.empty()) {
        std::error_code ec;
        std::filesystem::remove(path_ + ".partial", ec);
    }
}

bool OutputFile::write(std::string_view text) {
    if (write_errno_ != 0) {
        return false;
    }
    if (std::fwrite(text.data(), 1, text.size(), file_) != text.size()) {
        write_errno_ = errno != 0 ? errno : EIO;
        return false;
    }
    return true;
}

Status OutputFile::commit() {
    if (write_errno_ == 0 && std::fflush(file_) != 0) {
        write_errno_ = errno != 0 ? errno : EIO;
    }
    const int close_result = std::fclose(file_);
    file_ = nullptr;
    if (write_errno_ == 0 && close_result != 0) {
        write_errno_ = errno != 0 ? errno : EIO;
    }
    if (write_errno_ != 0) {
        return Error{ErrorCode::io,
                     "cannot write '" + path_ + "': " + std::strerror(write_errno_) +
                         (write_errno_ == ENOSPC ? " (free some space and run it again)" : "")};
    }
    std::error_code ec;
    std::filesystem::rename(path_ + ".partial", path_, ec);
    if (ec) {
        return Error{ErrorCode::io, "cannot move the output to '" + path_ + "': " + ec.message()};
    }
    committed_ = true;
    return {};
}

Result<PartialDatabase> PartialDatabase::prepare(const std::string& path, bool overwrite) {
    if (auto status = check_target(path, overwrite); !status) {
        return status.error();
    }
    PartialDatabase database(path);
    database.remove_partial();
    return database;
}

PartialDatabase::PartialDatabase(PartialDatabase&& other) noexcept
    : path_(std::move(other.path_)), done_(std::exchange(other.done_, true)) {}

PartialDatabase::~PartialDatabase() {
    if (!done_) {
        remove_partial();
    }
}

void PartialDatabase::remove_partial() const {
    std::error_code ec;
    std::filesystem::remove(partial_path(), ec);
    remove_side_files(partial_path());
}

Status PartialDatabase::commit(std::string_view what) {
    // The rename replaces an existing file (prepare() allowed it) in one step; its side files
    // would belong to the old database.
    remove_side_files(path_);
    std::error_code ec;
    std::filesystem::rename(partial_path(), path_, ec);
    if (ec) {
        return Error{ErrorCode::io,
                     "cannot move " + std::string(what) + " to '" + path_ + "': " + ec.message()};
    }
    done_ = true;
    return {};
}

}  // namespace fulcrum
