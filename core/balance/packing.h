// Packing the documents of a global batch into micro-batches.
//
// One API for the training engine, which places data with it, and for the simulator, which
// predicts step time with it: both call pack_global_batch once per global batch with the
// state carried from the previous one, and drain() once at the end of the epoch. The state
// is a plain value, so a simulator can copy it to try alternatives.
//
// Work model (WLB-LLM §3; docs/sources.md, "Workload balancing"): under a causal mask a packed
// micro-batch's attention work grows with Σd² and everything else with Σd, so two micro-batches of
// equal length can differ several-fold in time when one holds a long document.
#pragma once

#include "core/balance/packed_batch.h"
#include "core/util/result.h"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fulcrum::balance {

// "fixed", "ilp" or "wlb".
Result<Balancer> parse_balancer(std::string_view name);
const char* balancer_name(Balancer balancer);

// --wlb-thresholds: "tuned" (nullopt: tuned on the run's first epoch), "none" (no queues),
// or L1,L2,... strictly increasing token counts.
Result<std::optional<std::vector<std::int64_t>>> parse_wlb_thresholds(std::string_view text);
// "tuned", "none" or "L1,L2,...".
std::string wlb_thresholds_text(const std::optional<std::vector<std::int64_t>>& thresholds);

// Thresholds for `capacity`, from replaying tune_wlb_thresholds (wlb_tuning.h) on the
// long-tail mix; the derivation is in packing.cpp.
std::vector<std::int64_t> default_wlb_thresholds(std::int64_t capacity);

Status validate(const PackingOptions& options);

// What wlb carries from one global batch to the next; fixed and ilp carry nothing. Every
// document still held at the end of a batch has its `waited` raised by one.
struct PackingState {
    std::vector<std::deque<Document>> outlier_queues;  // queue i: L_i ≤ d < L_{i+1}, FIFO
    std::vector<Document> left_over;                   // did not fit under S_max last time

    std::size_t pending_documents() const;
};

// Packs one global batch. fixed and ilp return max(N, what next-fit needs) micro-batches, so
// both see the same count and the same mean; wlb returns exactly N and may keep documents in
// `state` for later batches. A document longer than a micro-batch can hold (S, or S_max for
// wlb) is an invalid_input error and leaves `state` unchanged.
Result<PackedBatch> pack_global_batch(std::span<const Document> documents,
                                      const PackingOptions& options, PackingState& state);

// ilp over a window of W global batches (WLB-LLM §3.3 "ILP over 2/4 batches"): the documents
// of W consecutive batches are packed together into W·N micro-batches, then dealt back as W
// batches of N in order of Σd², heaviest first, so that each batch holds micro-batches of
// similar attention work. One outlier document no longer sets its own batch's maximum
// against N−1 light micro-batches, which bounds what any single-batch packer can reach.
// Documents wait at most W−1 iterations. W = batches.size(); the balancer must be ilp.
Result<std::vector<PackedBatch>> pack_ilp_window(std::span<const std::vector<Document>> batches,
                                                 const PackingOptions& options);

// End of epoch: packs everything still delayed into as many further global batches as it
// takes (each of N micro-batches), so no document is ever dropped.
Result<std::vector<PackedBatch>> drain(const PackingOptions& options, PackingState& state);

// max / mean of per-micro-batch Σd² (WLB-LLM §3.3); 1 is perfect balance. 1 for no work.
double imbalance_degree(std::span<const MicroBatch> microbatches);

// Documents with ids first_id, first_id+1, ... in the order of `lengths`.
std::vector<Document> make_documents(std::span<const std::int64_t> lengths,
                                     std::uint64_t first_id = 0);

// Cuts an arrival-ordered stream into global batches the way a fixed-length data loader
// does: next-fit into N micro-batches of `capacity` tokens; the document that does not fit
// the N-th starts the next batch. So every balancer gets the same documents per batch, and N
// micro-batches of S tokens always suffice for them.
Result<std::vector<std::vector<Document>>> split_into_global_batches(
    std::span<const Document> stream, int microbatches, std::int64_t capacity);

}  // namespace fulcrum::balance
