// What the model needs to know about tensor and context parallelism: the two communicators,
// and the shape of one CP rank's share of a micro-batch.
//
// Tensor parallelism (TP, Megatron-LM, Shoeybi et al. 2019 §3) splits the GEMMs of every
// block over the TP group; params.h has the local parameter layout, tensor_parallel.h the
// mapping to and from the serial one. Every TP rank holds the whole residual stream [T, C].
//
// Context parallelism (CP, WLB-LLM §4) splits the tokens of a micro-batch over the CP group:
// each rank holds some query rows (its TokenRanges of the documents, balance/cp_shard.h) and
// runs everything but attention on them alone. Attention needs the keys and values of the
// whole document prefix, so each block all-gathers K|V over the CP group in the forward pass
// and reduce-scatters their gradients back to the owning ranks in the backward pass
// (context_parallel.h). A ContextShard is what a rank loads instead of a TokenBatch.
#pragma once

#include <cstdint>
#include <vector>

#include "core/parallel/layout.h"
#include "core/util/result.h"
#include "engine/comm/communicator.h"
#include "engine/model/attention.h"
#include "engine/model/config.h"
#include "engine/model/lm_head.h"

namespace fulcrum::engine {

class ShardedParameters;  // params.h
class ShardedGradients;   // params.h

// Null communicators mean size 1. The model keeps the pointers; they must outlive it.
// `context_parallelism` says how a loaded ContextShard's attention is split: K/V all-gathered
// (the default) or DeepSpeed-Ulysses' head shards (context_parallel.h). `sharded`: ZeRO-3's
// parameters (params.h, ShardedParameters), gathered a range at a time; null: the model holds
// its parameters whole. `sharded_gradients`: ZeRO-2's (params.h, ShardedGradients), a block's
// reduce-scattered after each backward pass; null: the model holds its gradients whole.
struct ModelParallel {
    Communicator* tp = nullptr;
    Communicator* cp = nullptr;
    parallel::ContextParallelism context_parallelism = parallel::ContextParallelism::all_gather;
    ShardedParameters* sharded = nullptr;
    ShardedGradients* sharded_gradients = nullptr;

    bool ulysses() const { return context_parallelism == parallel::ContextParallelism::ulysses; }

    int tp_size() const { return tp == nullptr ? 1 : tp->size(); }
    int tp_rank() const { return tp == nullptr ? 0 : tp->rank(); }
    int cp_size() const { return cp == nullptr ? 1 : cp->size(); }
    int cp_rank() const { return cp == nullptr ? 0 : cp->rank(); }
};

// Sequence parallelism (tensor_parallel.h): TP rank `rank` of `tp` holds rows
// [begin, begin + rows) of a micro-batch's `total` rows, the first total mod tp ranks one more.
struct SequenceShard {
    std::int64_t begin = 0;
    std::int64_t rows = 0;
};
inline SequenceShard sequence_shard(std::int64_t total, int tp, int rank) {
    const std::int64_t base = total / tp, extra = total % tp;
    return {rank * base + (rank < extra ? rank : extra), base + (rank < extra ? 1 : 0)};
}

// A run of `count` consecutive rows that sits at `gathered_row` in the rank-major
// concatenation of every CP rank's local rows (what an all-gather produces) and at
// `document_row` in document order (every document contiguous, position 0 first, documents
// in micro-batch order — the order attention reads K/V in).
struct RowRun {
    std::int64_t gathered_row = 0;
    std::int64_t document_row = 0;
    std::int64_t count = 0;

    friend bool operator==(const RowRun&, const RowRun&) = default;
};

// How the K/V rows of one micro-batch travel between the CP ranks. The same on every rank.
struct ContextExchange {
    std::vector<int> rows_per_rank;  // index = CP rank: its local token count
    std::vector<RowRun> runs;        // cover all rows once, in gathered order
    // Attention over the whole micro-batch in document order, one span per document: what a
    // rank computes for its heads under DeepSpeed-Ulysses (context_parallel.h).
    std::vector<AttentionSpan> document_spans;

    std::int64_t total_rows() const {
        std::int64_t n = 0;
        for (int rows : rows_per_rank)
            n += rows;
        return n;
    }
};

// One CP rank's part of a micro-batch (build it with make_context_shard, context_parallel.h).
// Conventions as in micro_batch.h, applied to the FULL documents: targets[t] is the next
// token of the same document even when that token is another rank's, −1 at the document's
// last token; positions count from the document's start.
struct ContextShard {
    std::vector<std::int32_t> tokens, targets, positions;  // the local rows, in range order
    // Query rows are local rows; kv_begin is where the document starts in the document-
    // ordered gathered K/V (ContextExchange::runs), prefix the range's first position.
    std::vector<AttentionSpan> spans;
    ContextExchange exchange;

    std::int64_t size() const { return std::int64_t(tokens.size()); }
    std::int64_t target_count() const {
        std::int64_t n = 0;
        for (std::int32_t y : targets)
            n += y != kernels::kNoTarget;
        return n;
    }
};

// invalid_input when the shard is inconsistent or does not fit the model (a token outside the
// vocabulary, a position past max_context, an exchange that does not add up).
Status validate(const ContextShard& shard, const ModelShape& config);

}  // namespace fulcrum::engine
