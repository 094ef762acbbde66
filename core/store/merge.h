// Merge: per-rank trace files -> one run database on one clock.
//
// Clocks: every rank file records in its own clock and says how far that clock is from UTC
// (rank.utc_offset_ns). When every file holds the engine's clock-sync marks (emitted right
// after each start-up barrier, so all ranks leave it within a barrier's latency), rank r is
// aligned to the reference rank by the median over k of (t_ref,k - t_r,k); otherwise by its
// UTC offset alone, which is only as good as the hosts' NTP. The merged file's zero is its
// earliest event; run.start_utc_ns says when that was.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/store/trace_writer.h"
#include "core/trace/model.h"
#include "core/util/result.h"

namespace fulcrum::store {

struct MergeOptions {
    bool overwrite = false;
    std::string run_name;  // empty: the first file's run name
    std::string command;   // empty: the first file's command
    // How the run keeps its events: compressed blocks as rank files do (the default: ~9 bytes
    // an event, written at several million events a second), or rows of the event table with
    // the event pack, for SQL (`fulcrum merge --rows`, `fulcrum export --format sqlite`).
    WriterOptions::EventStorage events = WriterOptions::EventStorage::blocks;
    // Threads that decode, re-time and compress a rank file's lanes side by side for a run in
    // blocks (0: one per core); the writer inserts them in lane order, so the run is the same
    // byte for byte whatever the number.
    int threads = 0;
    // Called with the fraction done, 0..1; return false to cancel.
    std::function<bool(double)> progress;
    // The input is one process that no launcher placed (`fulcrum capture` of a plain program):
    // where it is the run's only rank and marked no coordinates, it is the grid of one rank
    // (dp = tp = pp = cp = 0, said in the import log), as the Kineto importer takes a process
    // in no distributed world (core/import/kineto/structure.h).
    bool lone_process = false;
};

struct MergeReport {
    std::vector<RankInfo> ranks;  // with the alignment merge chose and the shift it applied
    std::int64_t events = 0;
    std::int64_t start_utc_ns = 0;      // the merged run's zero, in UTC
    std::vector<std::string> warnings;  // incomplete ranks, fallbacks to UTC offsets
};

Result<MergeReport> merge_rank_files(const std::vector<std::string>& inputs,
                                     const std::string& output, const MergeOptions& options = {});

// A copy of a Fulcrum file (a run or a rank file, its events in blocks or rows) that holds its
// events as rows of the event table, with the event pack and indexes: for SQL, `fulcrum export
// --format sqlite` (docs/schema.md). Times, the ranks' clock columns and the run row stay as
// they are; `options.events` is ignored. Returns the event count.
Result<std::int64_t> write_rows_copy(const std::string& input, const std::string& output,
                                     const MergeOptions& options = {});

}  // namespace fulcrum::store
