// Importers: traces people already have (Nsight Systems SQLite exports, PyTorch/Kineto
// Chrome JSON) become Fulcrum runs, so every analysis, view and report works on them.
//
// One interface, one file (or folder) per format, chosen by sniffing the first bytes
// (Perfetto's trace_processor is the model). An importer never writes SQL: it reads each input
// into a TraceSink (the store's TraceWriter for a rank file, a MemorySink for tests and fuzz
// targets), and import_files merges the rank files into one run, marked `imported`, on one
// clock (docs/import.md). What an importer cannot map goes to the import_log with the
// offending record; only a file it cannot read at all is an error.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/import/kineto/structure.h"
#include "core/trace/trace_sink.h"
#include "core/util/result.h"

namespace fulcrum::importer {

// One input: a file, or bytes in memory standing for it (fuzz targets and tests read without
// touching the disk). `path` names the input in messages and the run either way.
struct ImportInput {
    std::string path;
    const std::string* bytes = nullptr;  // when set, the content; nothing is read from disk
};

// What the inputs of one job tell together that none of them tells alone, found by
// Importer::survey before any input is read: a Megatron-LM rank's pipeline stage in an nsys
// export follows from its warm-up only once the pipeline's depth is known, which the rank with
// the most warm-up forwards gives (core/import/nsys/megatron.h, docs/import.md).
struct JobStructure {
    bool found = false;  // the grid below holds
    structure::Degrees grid;
    std::string schedule;  // as run.config names it; empty when not told
    std::int32_t microbatches = 0;
    std::int32_t virtual_stages = 1;    // model chunks a stage (interleaved)
    std::int32_t microbatch_group = 0;  // micro-batches a group of the interleaved order
    // Each placed process by (its input's index, the importer's key for the process).
    std::map<std::pair<int, std::int64_t>, structure::Coordinates> places;
    std::string rule;     // how the grid was found, for the import log
    std::string problem;  // why there is none, when the inputs looked as if they could tell
};

struct ImportFileOptions {
    // The input's position among the files given: the rank to use when the file says none.
    int input_index = 0;
    // Called with the fraction of this file done; may be empty.
    std::function<void(double)> progress;
    // Checked now and then; the importer returns ErrorCode::cancelled once it is true.
    const std::atomic<bool>* cancel = nullptr;
    // Things the user should know that are not skipped records (several processes became
    // several ranks, say); they end up in ImportReport::warnings. May be null.
    std::vector<std::string>* warnings = nullptr;
    // False for a scratch rank file that merge reads once (import_files): no indexes, which
    // merge builds for the run itself.
    bool indexes = true;
    // What the survey of every input of the job found; null: this input is read alone (the
    // importer surveys it by itself where it needs to).
    const JobStructure* job = nullptr;
};

class Importer {
public:
    virtual ~Importer() = default;
    virtual std::string_view name() const = 0;         // "nsys-sqlite", "kineto-json"
    virtual std::string_view description() const = 0;  // for messages and --help
    // Whether a file starting with `head` (its first bytes, up to 4096; already gunzipped for
    // a .gz file) is in this format.
    virtual bool sniff(std::string_view head) const = 0;
    // Reads one input into `sink`: its ranks, lanes, events, counters and import_log rows.
    // Writes no file. An error means the input could not be read at all (or the import was
    // cancelled); what was put into the sink before it is to be thrown away.
    virtual Status read(const ImportInput& input, TraceSink& sink,
                        const ImportFileOptions& options) const = 0;
    // Reads what every input of the job says together, before any is read (import_files hands
    // the result to each read). An input it cannot make sense of is left to its read to
    // report. The default finds nothing.
    virtual Result<JobStructure> survey(const std::vector<ImportInput>& inputs,
                                        const std::atomic<bool>* cancel) const {
        (void)inputs;
        (void)cancel;
        return JobStructure{};
    }
};

// Reads one input file with `format` into the rank file `rank_file` (store::TraceWriter,
// origin `imported`); a failed read leaves no file.
Status import_file(const Importer& format, const std::string& input, const std::string& rank_file,
                   const ImportFileOptions& options = {});

// The import_log of one input, bounded: the first kLogPerReason records of each reason are
// logged one per row with the record itself; the rest of each reason become one row that
// counts them. Notes (the input says something, nothing was dropped) are rows that skip 0.
class ImportLog {
public:
    static constexpr int kLogPerReason = 20;
    static constexpr std::size_t kRecordBytes = 512;

    ImportLog(TraceSink& sink, std::string source) : sink_(sink), source_(std::move(source)) {}
    // `count` records were not imported, for `reason`; `record` shows the (first) one.
    void skip(const std::string& reason, std::int64_t index, std::string_view record,
              std::int64_t count = 1);
    void note(const std::string& text);  // logged as "note: TEXT", skipping nothing
    // Writes the count rows; call once at the end.
    void finish();

private:
    TraceSink& sink_;
    std::string source_;
    struct Tally {
        int rows = 0;             // rows logged for the reason
        std::int64_t logged = 0;  // records those rows stand for
        std::int64_t total = 0;   // records skipped for the reason
    };
    std::map<std::string, Tally> tallies_;
};

// Every importer, in sniffing order.
const std::vector<const Importer*>& importers();

// The first bytes of a file (gunzipped when it starts with the gzip magic), for sniffing.
Result<std::string> file_head(const std::string& path, std::size_t bytes = 4096);

// The importer for a file, or nullptr when no importer recognises it (a Fulcrum run, say).
// Errors only when the file cannot be read.
Result<const Importer*> find_importer(const std::string& path);

struct ImportOptions {
    bool overwrite = false;
    std::string run_name;  // empty: the first input's file name
    // Called with a stage ("reading FILE", "reading N files", "merging") and the overall
    // fraction done. With several inputs it is called from the workers' threads, never by two
    // at once.
    std::function<void(std::string_view stage, double fraction)> progress;
    const std::atomic<bool>* cancel = nullptr;
    // Inputs read side by side, each into its own rank file: at most this many at once; 0: one
    // per core (std::thread::hardware_concurrency). The merge that follows compresses lanes
    // on as many threads (MergeOptions::threads).
    int threads = 0;
};

struct ImportReport {
    std::string format;        // the importer's name
    std::int64_t events = 0;   // in the run written
    std::int64_t skipped = 0;  // records not imported (Σ import_log.skipped)
    std::int64_t notes = 0;    // import_log rows that skipped nothing
    int ranks = 0;
    // The run written: its config (run.config, with the grid and schedule recovered) and its
    // rank rows (with their coordinates), for saying what was recovered.
    std::string config_json;
    std::vector<RankInfo> rank_rows;
    std::vector<std::string> warnings;
    // The inputs that end early (a job killed mid-write, a copy cut short): what they held
    // before the cut is in the run, which is therefore incomplete. Their import_log notes
    // start with kTruncatedNote.
    std::vector<std::string> truncated;
};

// How an importer's note on an input that ends early begins (after "note: ").
inline constexpr std::string_view kTruncatedNote = "truncated at byte ";

// Imports every input (all of one format) into one run at `output`, in rank order where the
// files' names number them 0 … N − 1 (`rank10.sqlite` after `rank9.sqlite`), else as given: an
// input's position is its rank where the file says none. A failed or cancelled import leaves no
// output file.
Result<ImportReport> import_files(const std::vector<std::string>& inputs, const std::string& output,
                                  const ImportOptions& options = {});

// The formats (defined in their own files).
std::unique_ptr<Importer> make_nsys_importer();
std::unique_ptr<Importer> make_kineto_importer();

}  // namespace fulcrum::importer
