// OutputFile: a file that appears under its name only when complete. Writes go to
// NAME.partial, which commit() renames; a failed or abandoned export leaves no half file
// where a good one was expected, and never clobbers an existing one unless asked to.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

#include "core/util/result.h"

namespace fulcrum {

class OutputFile {
public:
    static Result<OutputFile> create(const std::string& path, bool overwrite);
    OutputFile(OutputFile&& other) noexcept;
    OutputFile& operator=(OutputFile&&) = delete;
    OutputFile(const OutputFile&) = delete;
    ~OutputFile();  // removes the partial file unless committed

    // Returns false once any write failed (a full disk); the error is kept for commit().
    bool write(std::string_view text);
    Status commit();
    const std::string& path() const { return path_; }

private:
    OutputFile(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {}
    std::FILE* file_ = nullptr;
    std::string path_;
    int write_errno_ = 0;
    bool committed_ = false;
};

// A database (SQLite) file that appears under its name only when complete, for writers that
// open the file themselves: prepare() checks the target as OutputFile::create does and clears a
// stale NAME.partial; the caller builds the database at partial_path(); commit() replaces NAME
// with it. Until then, destruction removes the partial file and SQLite's side files.
class PartialDatabase {
public:
    static Result<PartialDatabase> prepare(const std::string& path, bool overwrite);
    PartialDatabase(PartialDatabase&& other) noexcept;
    PartialDatabase& operator=(PartialDatabase&&) = delete;
    PartialDatabase(const PartialDatabase&) = delete;
    ~PartialDatabase();

    const std::string& path() const { return path_; }
    std::string partial_path() const { return path_ + ".partial"; }
    // Close every connection to the partial file first. `what` names the file in the error
    // ("the merged run").
    Status commit(std::string_view what);

private:
    explicit PartialDatabase(std::string path) : path_(std::move(path)) {}
    void remove_partial() const;
    std::string path_;
    bool done_ = false;  // committed or moved from
};

}  // namespace fulcrum
