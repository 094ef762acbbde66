// Chrome trace JSON export (opens in Perfetto and chrome://tracing).
//
// Each rank is a process, each lane a thread. Ranges that nest on their lane are complete
// ("X") events; a range that overlaps a sibling without nesting (start/end ranges from
// different code paths can) would be drawn wrongly as "X", so it goes out as an async
// "b"/"e" pair. Marks are thread-scoped instants, counters "C" events. Timestamps are
// microseconds with nanosecond decimals.
#pragma once

#include <functional>
#include <string>

#include "core/store/trace_reader.h"
#include "core/util/result.h"

namespace fulcrum {

struct ExportOptions {
    bool overwrite = false;
    // Called with the fraction done, 0..1; return false to cancel.
    std::function<bool(double)> progress;
};

struct ExportReport {
    std::int64_t events = 0;
    std::int64_t async_events = 0;  // ranges that overlapped without nesting
};

Result<ExportReport> export_chrome_trace(const store::TraceReader& trace, const std::string& path,
                                         const ExportOptions& options = {});

}  // namespace fulcrum
