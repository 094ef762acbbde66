// A synthetic 4D run: per-rank trace files shaped like what the engine records (steps, 1F1B
// pipeline schedule, micro-batches of documents, attention and MLP ranges, collectives with
// bytes, clock-sync marks), with each rank on its own skewed clock. Tests, benchmarks and the
// demo use it until a captured engine run exists to take its place; it is labelled synthetic
// in every file it writes.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/util/result.h"

namespace fulcrum::testing {

struct SyntheticRunOptions {
    std::string name = "synthetic-1f1b";
    int dp = 1, tp = 1, pp = 2, cp = 1;
    int steps = 2;
    int microbatches = 4;
    int layers = 2;
    int kernels_per_layer = 0;  // GPU kernels per layer and phase on a stream lane
    std::uint64_t seed = 1;
    // Each rank's clock runs this far (random sign and size up to it) from true time...
    std::int64_t clock_skew_ns = 3'000'000;
    // ...and its recorded UTC offset is wrong by up to this much, as NTP would leave it.
    std::int64_t utc_offset_error_ns = 200'000;
    bool clock_sync_marks = true;
    std::string host_prefix = "node";
    // As a capture writes rank files (docs/schema.md); false writes the events as rows.
    bool event_blocks = true;
};

// A uniform draw in [0, 1) from 53 bits of `rng`.
double uniform(std::mt19937_64& rng);

// Lognormal document lengths, median 1900 tokens (docs/sources.md, "Document lengths"), summing
// to `tokens`: Box-Muller on our own uniform, so the lengths are the same with every standard
// library. bench/common/scale_run.cpp draws its micro-batches with it too.
std::vector<std::int32_t> document_lengths(std::mt19937_64& rng, int tokens);

// Writes DIR/rank-N.sqlite for every rank; returns their paths in rank order.
Result<std::vector<std::string>> write_synthetic_rank_files(const std::string& directory,
                                                            const SyntheticRunOptions& options);

}  // namespace fulcrum::testing
