// A large run in event blocks, as the cluster-scale timeline is measured on (issue 18) until
// a generator of whole 4D runs at that size lands: every rank a host thread and two GPU
// streams, written through TraceWriter with EventStorage::blocks (a rank-file-like run that
// TraceReader reads and build_lane_summaries summarizes). Per step and rank: a `step` range,
// per micro-batch a `forward` and a `backward` with one `layer` range per layer inside; on
// the compute stream four kernels per layer and pass, on the communication stream one.
#pragma once

#include <cstdint>
#include <string>

#include "core/util/result.h"

namespace fulcrum::bench {

struct BlockRunShape {
    std::int32_t ranks = 1024;
    std::int32_t steps = 4;
    std::int32_t microbatches = 8;
    std::int32_t layers = 8;
    std::int64_t step_ns = 80'000'000;  // 80 ms a step

    std::int64_t events_per_rank_step() const;
    std::int64_t events() const { return events_per_rank_step() * ranks * steps; }
};

// The shape with `ranks` ranks and as many steps as `target_events` needs (at least one).
BlockRunShape block_run_shape(std::int32_t ranks, std::int64_t target_events);

// Writes the run to `path` (replacing it); returns the events written.
Result<std::int64_t> make_block_run(const std::string& path, const BlockRunShape& shape);

}  // namespace fulcrum::bench
