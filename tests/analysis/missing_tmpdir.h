// TMPDIR pointed at a folder that does not exist, for a scope, so that an analysis's temporary
// file (core/analysis/scratch_table.h) cannot be made; what was set before comes back after.
#pragma once

#include <QTemporaryDir>

#include <cstdlib>
#include <optional>
#include <string>

namespace fulcrum::analysis::builders {

class MissingTmpdir {
public:
    MissingTmpdir() : path_((parent_.path() + "/no-such-folder").toStdString()) {
        if (const char* before = std::getenv("TMPDIR"); before != nullptr) {
            before_ = before;
        }
        ::setenv("TMPDIR", path_.c_str(), 1);
    }
    ~MissingTmpdir() {
        if (before_) {
            ::setenv("TMPDIR", before_->c_str(), 1);
        } else {
            ::unsetenv("TMPDIR");
        }
    }
    MissingTmpdir(const MissingTmpdir&) = delete;
    MissingTmpdir& operator=(const MissingTmpdir&) = delete;

    bool valid() const { return parent_.isValid(); }
    const std::string& path() const { return path_; }

private:
    QTemporaryDir parent_;
    std::string path_;
    std::optional<std::string> before_;
};

}  // namespace fulcrum::analysis::builders
