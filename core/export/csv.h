// CSV export of events, one row per event, ordered by rank, lane and start time. Columns are
// listed in docs/schema.md; names and kinds are spelled out, unknown values left empty.
#pragma once

#include <string>

#include "core/export/chrome_trace.h"
#include "core/store/trace_reader.h"
#include "core/util/result.h"

namespace fulcrum {

Result<ExportReport> export_csv(const store::TraceReader& trace, const std::string& path,
                                const ExportOptions& options = {});

}  // namespace fulcrum
