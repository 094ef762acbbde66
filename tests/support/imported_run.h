// Traces imported as a user imports them (`importer::import_files` into a run file in a
// temporary folder), loaded whole with their import log's notes, and the bubble table of their
// recovered passes worked out by hand, for the suites that check what the importers recover
// (tests/import). Header-only: its users link the importer and the
// analyses, which fulcrum_test_support does not.
#pragma once

#include <QTemporaryDir>
#include <QTest>
#include <QtGlobal>

#include <string>
#include <string_view>
#include <vector>

#include "core/analysis/bubbles.h"
#include "core/analysis/passes.h"
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

// The bubble table checked against the passes it came from, worked out here (docs/analyses.md
// §2): per stage and step, busy is the stage's passes' time less their pipeline waits, the
// waits split by phase into `wait prev` and `wait next`, and the bubble the rest of the window.
// With `waits` (receives inside the passes they feed), a pipeline's first stage waits only on
// the next, its last (`last_stage`) only on the previous; without, none waits. Call from a
// test function, then QVERIFY(!QTest::currentTestFailed()).
inline void compare_bubbles_with_passes(const analysis::BubbleAnalysis& bubbles,
                                        const std::vector<analysis::Pass>& passes, int last_stage,
                                        bool waits = true) {
    for (const analysis::StageBubble& stage : bubbles.stages) {
        QVERIFY(stage.rank.has_value());
        std::int64_t busy = 0, wait_previous = 0, wait_next = 0;
        for (const analysis::Pass& pass : passes) {
            if (pass.rank == *stage.rank && pass.step == stage.step) {
                // A rank's passes do not overlap.
                busy += pass.wall_ns() - pass.pipeline_wait_ns;
                (pass.phase == Phase::forward ? wait_previous : wait_next) += pass.pipeline_wait_ns;
            }
        }
        QCOMPARE(stage.busy_ns, busy);
        QCOMPARE(stage.wait_on_previous_ns, wait_previous);
        QCOMPARE(stage.wait_on_next_ns, wait_next);
        QCOMPARE(wait_previous > 0, waits && stage.stage > 0);
        QCOMPARE(wait_next > 0, waits && stage.stage < last_stage);
        QCOMPARE(stage.bubble_ns, stage.window_ns - busy);
        QVERIFY(stage.bubble_fraction.has_value());
        QCOMPARE(*stage.bubble_fraction, double(stage.bubble_ns) / double(busy));
    }
}

}  // namespace fulcrum::test
