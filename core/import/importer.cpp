#include "core/import/importer.h"

#include <zlib.h>

#include <filesystem>
#include <map>
#include <set>

#include "core/store/merge.h"
#include "core/store/trace_reader.h"

namespace fulcrum::importer {

const std::vector<const Importer*>& importers() {
    static const std::vector<std::unique_ptr<Importer>> owned = [] {
        std::vector<std::unique_ptr<Importer>> all;
        all.push_back(make_nsys_importer());
        all.push_back(make_kineto_importer());
        return all;
    }();
    static const std::vector<const Importer*> all = [] {
        std::vector<const Importer*> pointers;
        for (const auto& importer : owned) {
            pointers.push_back(importer.get());
        }
        return pointers;
    }();
    return all;
}

Result<std::string> file_head(const std::string& path, std::size_t bytes) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
        return Error{ErrorCode::io, "cannot read '" + path + "': " +
                                        (std::filesystem::exists(path, ec) ? "not a file"
                                                                           : "no such file")};
    }
    // gzread reads plain files as they are and gunzips gzip files: one path for both.
    gzFile file = gzopen(path.c_str(), "rb");
    if (file == nullptr) {
        return Error{ErrorCode::io, "cannot open '" + path + "'"};
    }
    std::string head(bytes, '\0');
    const int got = gzread(file, head.data(), static_cast<unsigned>(bytes));
    gzclose(file);
    // A truncated gzip stream still gives its first bytes; only nothing at all is an error.
    head.resize(got > 0 ? static_cast<std::size_t>(got) : 0);
    return head;
}

Result<const Importer*> find_importer(const std::string& path) {
    auto head = file_head(path);
    if (!head) {
        return head.error();
    }
    for (const Importer* importer : importers()) {
        if (importer->sniff(*head)) {
            return importer;
        }
    }
    return static_cast<const Importer*>(nullptr);
}

namespace {

std::string supported_formats() {
    std::string text;
    for (const Importer* importer : importers()) {
        text += (text.empty() ? "" : ", ") + std::string(importer->description());
    }
    return text;
}

}  // namespace

Result<ImportReport> import_files(const std::vector<std::string>& inputs, const std::string& output,
                                  const ImportOptions& options) {
    if (inputs.empty()) {
        return Error{ErrorCode::invalid_input, "nothing to import: give one file per rank"};
    }
    std::error_code ec;
    if (!options.overwrite && std::filesystem::exists(output, ec)) {
        return Error{ErrorCode::io, "'" + output + "' exists; use --force to replace it"};
    }
    const Importer* format = nullptr;
    for (const std::string& input : inputs) {
        auto importer = find_importer(input);
        if (!importer) {
            return importer.error();
        }
        if (*importer == nullptr) {
            return Error{ErrorCode::invalid_input,
                         "'" + input + "' is not a trace Fulcrum can import (it reads: " +
                             supported_formats() + ")"};
        }
        if (format != nullptr && *importer != format) {
            return Error{ErrorCode::invalid_input,
                         "'" + input + "' is " + std::string((*importer)->description()) +
                             ", but '" + inputs.front() + "' is " +
                             std::string(format->description()) +
                             "; import the ranks of one run, in one format, together"};
        }
        format = *importer;
    }

    const std::filesystem::path scratch = std::filesystem::path(output).string() + ".import";
    std::filesystem::remove_all(scratch, ec);
    std::filesystem::create_directories(scratch, ec);
    if (ec) {
        return Error{ErrorCode::io, "cannot create the scratch folder '" + scratch.string() +
                                        "': " + ec.message()};
    }
    struct ScratchGuard {
        std::filesystem::path path;
        ~ScratchGuard() {
            std::error_code ignored;
            std::filesystem::remove_all(path, ignored);
        }
    } guard{scratch};

    auto report = [&](std::string_view stage, double fraction) {
        if (options.progress) {
            options.progress(stage, fraction);
        }
    };
    // Reading is most of the work; merging is the last tenth.
    std::vector<std::string> rank_files;
    std::map<std::int32_t, std::string> rank_owner;
    ImportReport result;
    result.format = std::string(format->name());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        const std::string stage = "reading " + std::filesystem::path(inputs[i]).filename().string();
        ImportFileOptions file_options;
        file_options.scratch_dir = (scratch / std::to_string(i)).string();
        std::filesystem::create_directories(file_options.scratch_dir, ec);
        file_options.input_index = static_cast<int>(i);
        file_options.cancel = options.cancel;
        file_options.warnings = &result.warnings;
        file_options.progress = [&](double fraction) {
            report(stage, 0.9 * (double(i) + fraction) / double(inputs.size()));
        };
        report(stage, 0.9 * double(i) / double(inputs.size()));
        auto files = format->import_file(inputs[i], file_options);
        if (!files) {
            return files.error();
        }
        for (const std::string& file : *files) {
            auto reader = store::TraceReader::open(file);
            if (!reader) {
                return reader.error();
            }
            for (const RankInfo& rank : reader->ranks()) {
                auto [at, added] = rank_owner.emplace(rank.rank, inputs[i]);
                if (!added) {
                    return Error{ErrorCode::invalid_input,
                                 "'" + inputs[i] + "' and '" + at->second + "' both hold rank " +
                                     std::to_string(rank.rank) +
                                     "; give each rank's file once (they may come from two runs)"};
                }
            }
            rank_files.push_back(file);
        }
    }
    if (options.cancel != nullptr && options.cancel->load()) {
        return Error{ErrorCode::cancelled, "import cancelled"};
    }

    store::MergeOptions merge;
    merge.overwrite = options.overwrite;
    merge.run_name = options.run_name.empty()
                         ? std::filesystem::path(inputs.front()).filename().string()
                         : options.run_name;
    merge.progress = [&](double fraction) {
        report("merging", 0.9 + 0.1 * fraction);
        return options.cancel == nullptr || !options.cancel->load();
    };
    auto merged = store::merge_rank_files(rank_files, output, merge);
    if (!merged) {
        return merged.error();
    }
    result.events = merged->events;
    result.ranks = static_cast<int>(merged->ranks.size());
    result.warnings.insert(result.warnings.end(), merged->warnings.begin(), merged->warnings.end());
    auto reader = store::TraceReader::open(output);
    if (!reader) {
        return reader.error();
    }
    auto log = reader->import_log();
    if (!log) {
        return log.error();
    }
    result.skipped = static_cast<std::int64_t>(log->size());
    return result;
}

}  // namespace fulcrum::importer
