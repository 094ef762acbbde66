// Traces imported as a user imports them (`importer::import_files` into a run file in a
// temporary folder), loaded whole with their import log's notes, for the suites that check what
// the importers recover (tests/import). Header-only: its users link the importer and the
// analyses, which fulcrum_test_support does not.
#pragma once

#include <QTemporaryDir>
#include <QtGlobal>

#include <string>
#include <string_view>
#include <vector>

#include "core/analysis/run_trace.h"
#include "core/import/importer.h"
#include "core/store/trace_reader.h"

namespace fulcrum::test {

struct Imported {
    analysis::RunTrace trace;
    std::vector<std::string> notes;  // the import log's reasons
};

// `inputs` imported into the run NAME.fulcrum in `dir`; a failure ends the test run.
inline Imported import_inputs(const QTemporaryDir& dir, const std::string& name,
                              const std::vector<std::string>& inputs) {
    const std::string out = dir.filePath(QString::fromStdString(name + ".fulcrum")).toStdString();
    auto report = importer::import_files(inputs, out);
    if (!report) {
        qFatal("%s: %s", name.c_str(), report.error().message.c_str());
    }
    auto reader = store::TraceReader::open(out);
    if (!reader) {
        qFatal("%s: %s", name.c_str(), reader.error().message.c_str());
    }
    Imported imported;
    auto trace = analysis::load_run_trace(*reader);
    if (!trace) {
        qFatal("%s: %s", name.c_str(), trace.error().message.c_str());
    }
    imported.trace = std::move(*trace);
    if (auto log = reader->import_log()) {
        for (const ImportLogEntry& entry : *log) {
            imported.notes.push_back(entry.reason);
        }
    }
    return imported;
}

inline bool any_note(const Imported& imported, std::string_view words) {
    for (const std::string& note : imported.notes) {
        if (note.find(words) != std::string::npos) {
            return true;
        }
    }
    return false;
}

}  // namespace fulcrum::test
