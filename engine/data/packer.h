// Packing documents into micro-batches, deterministically for a seed.
//
// Documents are visited in a random order (a Fisher–Yates shuffle per epoch, seeded by
// derive_seed(seed, epoch)) and laid end to end into sequences of exactly `context` tokens.
// A document that does not fit in what is left of a sequence is cut: the part that fits
// closes the sequence, the rest opens the next one. Each part is a document of its own for
// the model — positions restart at 0 and its last token has no target — so a cut costs one
// target token and the model never attends across the cut or across sequences. Nothing is
// padded. A micro-batch is `sequences_per_micro_batch` such sequences.
//
// This is plain "fixed-length packing" (WLB-LLM's baseline; docs/sources.md, "Workload balancing"),
// the baseline that the balancing work (core/balance) improves on; the sampler only needs to
// produce valid MicroBatches, so a balanced packer can replace it.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/data/corpus.h"
#include "engine/model/micro_batch.h"

namespace fulcrum::engine {

struct PackingConfig {
    int context = 128;  // tokens per sequence; must not exceed the model's max_context
    int sequences_per_micro_batch = 4;
    std::uint64_t seed = 1;
};

class MicroBatchSampler {
public:
    // `corpus` must outlive the sampler and hold at least one non-empty document.
    MicroBatchSampler(const Corpus& corpus, PackingConfig config);

    TokenBatch next();
    std::int64_t epoch() const { return epoch_; }  // 0-based: how many passes are complete

private:
    void shuffle();

    const Corpus& corpus_;
    PackingConfig config_;
    std::vector<std::uint32_t> order_;
    std::size_t cursor_ = 0;    // index into order_
    std::size_t consumed_ = 0;  // bytes of the current document already packed
    std::int64_t epoch_ = 0;
};

}  // namespace fulcrum::engine
