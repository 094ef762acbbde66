#include "core/import/importer.h"

#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "core/store/merge.h"
#include "core/store/trace_reader.h"
#include "core/store/trace_writer.h"

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
        return Error{ErrorCode::io,
                     "cannot read '" + path + "': " +
                         (std::filesystem::exists(path, ec) ? "not a file" : "no such file")};
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

void ImportLog::skip(const std::string& reason, std::int64_t index, std::string_view record,
                     std::int64_t count) {
    Tally& tally = tallies_[reason];
    tally.total += count;
    if (tally.rows < kLogPerReason) {
        sink_.add_import_log(
            {source_, index, reason, std::string(record.substr(0, kRecordBytes)), count});
        ++tally.rows;
        tally.logged += count;
    }
}

void ImportLog::note(const std::string& text) {
    sink_.add_import_log({source_, -1, "note: " + text, "", 0});
}

void ImportLog::finish() {
    for (const auto& [reason, tally] : tallies_) {
        if (tally.total > tally.logged) {
            const std::int64_t rest = tally.total - tally.logged;
            sink_.add_import_log({source_, -1,
                                  reason + ": " + std::to_string(rest) +
                                      " more records like this (" + std::to_string(tally.total) +
                                      " in all)",
                                  "", rest});
        }
    }
    tallies_.clear();
}

Status import_file(const Importer& format, const std::string& input, const std::string& rank_file,
                   const ImportFileOptions& options) {
    RunInfo run;
    run.name = std::filesystem::path(input).filename().string();
    run.command = "fulcrum import " + input;
    run.origin = RunOrigin::imported;
    run.producer = "fulcrum import (" + std::string(format.name()) + ")";
    store::WriterOptions writer_options;
    writer_options.overflow = store::WriterOptions::Overflow::block;  // an import never drops
    writer_options.lane_index_while_writing = true;  // the parser is the slower thread
    writer_options.overwrite = true;
    writer_options.durable = false;  // a failed import leaves no file: nothing to recover
    writer_options.build_indexes = options.indexes;
    writer_options.events = store::WriterOptions::EventStorage::blocks;  // a rank file
    auto writer = store::TraceWriter::create(rank_file, run, writer_options);
    if (!writer) {
        return writer.error();
    }
    auto remove = [&] {
        std::error_code ec;
        for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
            std::filesystem::remove(rank_file + suffix, ec);
        }
    };
    Status status = format.read(ImportInput{input}, **writer, options);
    Status closed = (*writer)->close();
    if (!status || !closed) {
        remove();
        return !status ? status : closed;
    }
    if (options.progress) {
        options.progress(1.0);
    }
    return {};
}

namespace {

// The inputs in rank order when their names say it: a file's rank, where the format has none
// inside (nsys exports), is its position among the inputs, and a shell's `rank*.sqlite` puts
// rank10 before rank2. When the last number in every file's name (`rank10.sqlite`,
// `report_3.nsys.sqlite`) is distinct and together they are 0 … N − 1, the inputs are taken in
// that order; otherwise as given (process ids, dates and node numbers do not make 0 … N − 1).
std::vector<std::string> in_rank_order(const std::vector<std::string>& inputs) {
    std::vector<std::pair<std::size_t, std::string>> numbered;
    for (const std::string& input : inputs) {
        const std::string name = std::filesystem::path(input).filename().string();
        const std::size_t last = name.find_last_of("0123456789");
        if (last == std::string::npos) {
            return inputs;
        }
        std::size_t first = last;
        while (first > 0 && std::isdigit(static_cast<unsigned char>(name[first - 1]))) {
            --first;
        }
        std::size_t number = 0;
        const auto [end, error] =
            std::from_chars(name.data() + first, name.data() + last + 1, number);
        if (error != std::errc{} || number >= inputs.size()) {
            return inputs;
        }
        numbered.emplace_back(number, input);
    }
    std::sort(numbered.begin(), numbered.end());
    std::vector<std::string> ordered;
    for (std::size_t i = 0; i < numbered.size(); ++i) {
        if (numbered[i].first != i) {
            return inputs;  // a number twice, so another missing
        }
        ordered.push_back(numbered[i].second);
    }
    return ordered;
}

std::string supported_formats() {
    std::string text;
    for (const Importer* importer : importers()) {
        text += (text.empty() ? "" : ", ") + std::string(importer->description());
    }
    return text;
}

// Each input into a rank file in a scratch folder beside the output, then one merge (a rank
// file and a merge of blocks cost less than holding one input's events and writing them once:
// docs/decisions.md, "Merged runs keep blocks too"). Longer than most (about 100 lines) on purpose:
// the imports and the merge read best in one place, under the one guard that removes the scratch
// folder whatever happens.
Result<store::MergeReport> import_through_rank_files(
    const Importer& format, const std::vector<std::string>& inputs, const std::string& output,
    const ImportOptions& options, const std::function<void(std::string_view, double)>& report,
    std::vector<std::string>& warnings) {
    std::error_code ec;
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

    std::vector<ImportInput> job_inputs;
    for (const std::string& input : inputs) {
        job_inputs.push_back(ImportInput{input});
    }
    report("surveying " + std::to_string(inputs.size()) + " files", 0.0);
    auto job = format.survey(job_inputs, options.cancel);
    if (!job) {
        return job.error();
    }

    // Reading is most of the work; merging is the last tenth. The inputs are read side by
    // side, one per worker (each into its own rank file, so they share nothing), and checked
    // after in input order, so messages and warnings do not depend on which finished first.
    const std::size_t n = inputs.size();
    std::vector<std::string> rank_files(n);
    std::vector<Status> read(n);
    std::vector<std::vector<std::string>> file_warnings(n);
    std::vector<double> done(n, 0.0);
    std::mutex progress_mutex;  // the caller's callback is never run by two workers at once
    std::atomic<bool> stop{false};
    auto stopped = [&] {
        if (options.cancel != nullptr && options.cancel->load()) {
            stop = true;
        }
        return stop.load();
    };
    std::atomic<std::size_t> next{0};
    auto work = [&] {
        for (std::size_t i = next++; i < n && !stopped(); i = next++) {
            ImportFileOptions file_options;
            file_options.input_index = static_cast<int>(i);
            file_options.indexes = false;
            file_options.cancel = &stop;
            file_options.warnings = &file_warnings[i];
            file_options.job = &*job;
            const std::string stage =
                n == 1 ? "reading " + std::filesystem::path(inputs[i]).filename().string()
                       : "reading " + std::to_string(n) + " files";
            file_options.progress = [&, i, stage](double fraction) {
                stopped();
                const std::lock_guard lock(progress_mutex);
                done[i] = fraction;
                double sum = 0;
                for (double d : done) {
                    sum += d;
                }
                report(stage, 0.9 * sum / double(n));
            };
            rank_files[i] = (scratch / ("input-" + std::to_string(i) + ".sqlite")).string();
            read[i] = import_file(format, inputs[i], rank_files[i], file_options);
            if (!read[i]) {
                stop = true;  // the others need not finish: the import fails
            }
        }
    };
    const std::size_t workers = std::min<std::size_t>(
        n, options.threads > 0 ? std::size_t(options.threads)
                               : std::max(1u, std::thread::hardware_concurrency()));
    std::vector<std::thread> pool;
    for (std::size_t w = 1; w < workers; ++w) {
        pool.emplace_back(work);
    }
    work();  // the calling thread is a worker too
    for (std::thread& thread : pool) {
        thread.join();
    }
    std::map<std::int32_t, std::string> rank_owner;
    for (std::size_t i = 0; i < n; ++i) {
        if (!read[i] && read[i].error().code != ErrorCode::cancelled) {
            return read[i].error();  // the first input that failed, not one a failure stopped
        }
    }
    if (stopped()) {
        return Error{ErrorCode::cancelled, "import cancelled"};
    }
    for (std::size_t i = 0; i < n; ++i) {
        warnings.insert(warnings.end(), file_warnings[i].begin(), file_warnings[i].end());
        auto reader = store::TraceReader::open(rank_files[i]);
        if (!reader) {
            return reader.error();
        }
        for (const RankInfo& rank : reader->ranks()) {
            auto [at, added] = rank_owner.emplace(rank.rank, inputs[i]);
            if (!added) {
                return Error{ErrorCode::invalid_input,
                             "'" + at->second + "' and '" + inputs[i] + "' both hold rank " +
                                 std::to_string(rank.rank) +
                                 " (their distributedInfo or rank marks say so); give each "
                                 "rank's file once: they may come from two runs"};
            }
        }
    }

    store::MergeOptions merge;
    merge.overwrite = options.overwrite;
    merge.run_name = options.run_name.empty()
                         ? std::filesystem::path(inputs.front()).filename().string()
                         : options.run_name;
    merge.threads = options.threads;
    merge.command = "fulcrum import";
    for (const std::string& input : inputs) {
        merge.command += " " + input;
    }
    merge.progress = [&](double fraction) {
        report("merging", 0.9 + 0.1 * fraction);
        return options.cancel == nullptr || !options.cancel->load();
    };
    return store::merge_rank_files(rank_files, output, merge);
}

}  // namespace

Result<ImportReport> import_files(const std::vector<std::string>& given, const std::string& output,
                                  const ImportOptions& options) {
    const std::vector<std::string> inputs = in_rank_order(given);
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

    auto report = [&](std::string_view stage, double fraction) {
        if (options.progress) {
            options.progress(stage, fraction);
        }
    };
    ImportReport result;
    result.format = std::string(format->name());
    auto merged =
        import_through_rank_files(*format, inputs, output, options, report, result.warnings);
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
    result.config_json = reader->run().config_json;
    result.rank_rows = reader->ranks();
    auto log = reader->import_log();
    if (!log) {
        return log.error();
    }
    const std::string truncated = "note: " + std::string(kTruncatedNote);
    for (const ImportLogEntry& entry : *log) {
        result.skipped += entry.skipped;
        result.notes += entry.skipped == 0 ? 1 : 0;
        if (entry.skipped == 0 && entry.reason.starts_with(truncated)) {
            result.truncated.push_back(entry.source);
        }
    }
    return result;
}

}  // namespace fulcrum::importer
