// Chrome trace JSON export, in the PyTorch profiler's (Kineto's) dialect: it opens in Perfetto
// and chrome://tracing, Holistic Trace Analysis reads it, and `fulcrum import` gives back the
// same run (docs/cli.md, "export"; docs/import.md).
//
// Every event keeps Kineto's fields: `cat` says what it is (kernel, gpu_memcpy, gpu_memset,
// cuda_sync, cuda_runtime, user_annotation, gpu_user_annotation) and device events carry
// args.device, args.stream and args.correlation; each file has baseTimeNanoseconds and, one
// file per rank, distributedInfo. Fulcrum's own columns go into the args too (kind, category,
// step, micro-batch, stage, phase, copy and memory kinds, the stored args), and a top-level
// `fulcrum` member lists the ranks with their 4D coordinates, every lane, the run's
// configuration and its workload, so that a re-import restores them exactly.
//
// Times are microseconds with three decimals from the run's zero (baseTimeNanoseconds), exact
// to the nanosecond. Ranges that nest on their lane are complete ("X") events; a host range
// that overlaps a sibling without nesting would be drawn wrongly as "X", so it goes out as an
// async "b"/"e" pair. Work on a device stream is always "X", as Kineto writes it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/store/trace_reader.h"
#include "core/util/result.h"

namespace fulcrum {

struct ExportOptions {
    bool overwrite = false;
    // One file per rank (`rank-N.json` in the folder the path names), laid out as Kineto lays
    // out a rank: host threads under the process id, streams under the device. Otherwise one
    // file with a process per rank.
    bool per_rank = false;
    // Called with the fraction done, 0..1; return false to cancel.
    std::function<bool(double)> progress;
};

struct ExportReport {
    std::int64_t events = 0;
    std::int64_t async_events = 0;   // host ranges that overlapped without nesting
    std::vector<std::string> files;  // what was written
};

Result<ExportReport> export_chrome_trace(const store::TraceReader& trace, const std::string& path,
                                         const ExportOptions& options = {});

}  // namespace fulcrum
