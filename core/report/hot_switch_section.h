// The report's section of a hot-switched run (HotSPa, SOSP'24; docs/report.md): the time per
// length bucket under its layout with 'others' the switching (HotSPa's breakdown), as a bar
// chart and a table, and the switch-cost matrix layout i → j. It draws
// core/analysis/hot_switch.h's struct, as `fulcrum analyze` and the GUI's Hot switch tab do.
#pragma once

#include <string>

#include "core/analysis/hot_switch.h"

namespace fulcrum::report {

// Appends the section (id run-INDEX-hot-switch) of run `index`; nothing for a run without hot
// switching. `spec` is the run's hot-switch spec (run.config), shown when not empty.
void hot_switch_section(const analysis::HotSwitchAnalysis& hot, const std::string& spec, int index,
                        std::string& out);

}  // namespace fulcrum::report
