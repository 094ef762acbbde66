// Internal to core/balance: the pieces of ilp_packing.cpp that packing.cpp uses.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/balance/packed_batch.h"

namespace fulcrum::balance::detail {

// Arrival order, next-fit: a document that does not fit the current micro-batch opens the
// next one. Returns max(min_microbatches, micro-batches needed). Lengths must be ≤ capacity.
std::vector<MicroBatch> next_fit(std::span<const Document> documents, int min_microbatches,
                                 std::int64_t capacity, const PackingCost& cost);

// The ilp balancer; lengths already checked against options.capacity.
PackedBatch pack_ilp(std::span<const Document> documents, const PackingOptions& options);

}  // namespace fulcrum::balance::detail
