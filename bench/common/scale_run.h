// A cluster-scale synthetic run (issue 18): 1024 ranks of a 4D job, written straight into one
// run file through the store's TraceWriter with events in blocks (no rank files, no merge), as
// fast as the writer takes them. bench_scale and the GUI's scale checks open it.
//
// It is shaped like a CUPTI capture of fulcrum-train (docs/annotations.md): per rank a host
// thread with the engine's ranges (step, forward/backward passes with step, mb, stage and
// phase, attention and mlp per layer, the pipeline, CP, TP and DP communication, optimizer),
// a launch API call for each piece of device work (so the analyses time passes by their GPU
// projection), a compute stream of kernels and copies and an NCCL stream of collectives, and
// the workload table. Micro-batches hold lognormal documents, cut across CP ranks contiguously,
// so the causal attention work differs between CP ranks and the micro-batch costs between DP
// replicas; one node (a tp × cp group) is slower than the rest. The imbalance, CP-load,
// straggler and bubble analyses all have something to find. Deterministic for a seed.
#pragma once

#include <cstdint>
#include <string>

#include "core/util/result.h"

namespace fulcrum::bench {

// Its documents' lengths in the simulator's spelling (run.config's `lengths`).
inline constexpr const char* kLengths = "lognormal:median=1901,sigma=0.9";

struct ScaleRunOptions {
    // The grid, in the order DP × TP × PP × CP (core/parallel/grid.h).
    int dp = 16, tp = 4, pp = 8, cp = 2;
    int microbatches = 16;  // per DP replica and step, 1F1B
    int layers = 64;        // layers / pp a stage
    int tokens_per_microbatch = 16384;
    // As many steps as this many events needs (at least one).
    std::int64_t target_events = 100'000'000;
    std::uint64_t seed = 1;
};

// dp × 4 × 8 × 2 for `ranks`, a multiple of 64 (1024: dp 16 × tp 4 × pp 8 × cp 2).
Result<ScaleRunOptions> scale_run_options(int ranks, std::int64_t target_events);

struct ScaleRunFile {
    std::int64_t events = 0;
    std::int64_t bytes = 0;  // of the file on disk
    int steps = 0;
    double seconds = 0;  // to write it; 0 when an existing file was kept
    bool kept = false;   // the file was there, complete, made with the same options
};

// Writes the run to `path`, unless a complete file made with the same options (the run's
// command line records them) is there already and `remake` is false.
Result<ScaleRunFile> make_scale_run(const std::string& path, const ScaleRunOptions& options,
                                    bool remake = false);
Result<ScaleRunFile> make_scale_run(const std::string& path, int ranks, std::int64_t target_events);

}  // namespace fulcrum::bench
