// Importers: traces people already have (Nsight Systems SQLite exports, PyTorch/Kineto
// Chrome JSON) become Fulcrum runs, so every analysis, view and report works on them.
//
// One interface, one file (or folder) per format, chosen by sniffing the first bytes
// (Perfetto's trace_processor is the model). An importer never writes SQL: it turns each input
// file into one or more rank files through store::TraceWriter (which interns strings and owns
// the schema), and import_files merges them into one run, marked `imported`, on one clock
// (docs/import.md). What an importer cannot map goes to the import_log table with the
// offending record; only a file it cannot read at all is an error.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/util/result.h"

namespace fulcrum::importer {

struct ImportFileOptions {
    // Where to write this input's rank files (a scratch folder the caller removes).
    std::string scratch_dir;
    // The input's position among the files given: the rank to use when the file says none.
    int input_index = 0;
    // Called with the fraction of this file done; may be empty.
    std::function<void(double)> progress;
    // Checked now and then; the importer returns ErrorCode::cancelled once it is true.
    const std::atomic<bool>* cancel = nullptr;
    // Things the user should know that are not skipped records (several processes became
    // several ranks, say); they end up in ImportReport::warnings. May be null.
    std::vector<std::string>* warnings = nullptr;
};

class Importer {
public:
    virtual ~Importer() = default;
    virtual std::string_view name() const = 0;         // "nsys-sqlite", "kineto-json"
    virtual std::string_view description() const = 0;  // for messages and --help
    // Whether a file starting with `head` (its first bytes, up to 4096; already gunzipped for
    // a .gz file) is in this format.
    virtual bool sniff(std::string_view head) const = 0;
    // Reads one input file and writes it as rank files (store::TraceWriter, origin
    // `imported`, Overflow::block) into options.scratch_dir; returns their paths.
    virtual Result<std::vector<std::string>> import_file(const std::string& input,
                                                         const ImportFileOptions& options) const = 0;
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
    // Called with a stage ("reading FILE", "merging") and the overall fraction done.
    std::function<void(std::string_view stage, double fraction)> progress;
    const std::atomic<bool>* cancel = nullptr;
};

struct ImportReport {
    std::string format;          // the importer's name
    std::int64_t events = 0;     // in the run written
    std::int64_t skipped = 0;    // records logged to import_log
    int ranks = 0;
    std::vector<std::string> warnings;
};

// Imports every input (all of one format) into one run at `output`. A failed or cancelled
// import leaves no output file.
Result<ImportReport> import_files(const std::vector<std::string>& inputs, const std::string& output,
                                  const ImportOptions& options = {});

// The formats (defined in their own files).
std::unique_ptr<Importer> make_nsys_importer();
std::unique_ptr<Importer> make_kineto_importer();

}  // namespace fulcrum::importer
