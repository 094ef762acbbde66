// The report's sections of HTA's answers (docs/analyses.md §7–10; docs/report.md): kernel time
// by type, top kernels, idle time by cause, kernel launches, communication by collective, the
// critical path of each step, and, in a comparison, the op-level diff of each run against the
// first. They draw the RunAnalysis and RunDiff structs only.
#pragma once

#include <string>

#include "core/analysis/run_analysis.h"

namespace fulcrum::report {

// Appends the sections of one run; `index` is the run's place in the report (section ids
// run-INDEX-kernels, -idle, -communication, -critical-path).
void hta_sections(const analysis::RunAnalysis& analysis, int index, std::string& out);

// Appends the op-level diff of run `index` against the first run (id run-INDEX-diff).
void diff_section(const analysis::RunDiff& diff, std::string_view first_run, int index,
                  std::string& out);

}  // namespace fulcrum::report
