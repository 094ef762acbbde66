// The tables of HTA's answers that `fulcrum analyze` and `fulcrum diff` print: kernels by type,
// top kernels, idle time by cause, launches, communication by collective, the critical path
// (docs/analyses.md §7–10). They draw the analyses' structs only; no figure is computed here.
#pragma once

#include <string>
#include <string_view>

#include "core/analysis/run_analysis.h"

namespace fulcrum::cli {

// Appends the kernel, communication and critical-path tables; at most `top` rows where a table
// has one row per rank, stream, kernel or what-if.
void render_hta_tables(const analysis::RunAnalysis& analysis, int top, std::string& out);

// The op-level diff, at most `top` rows (the largest changes in time first).
std::string render_diff(const analysis::RunDiff& diff, std::string_view a, std::string_view b,
                        int top);

}  // namespace fulcrum::cli
