// Context-parallel sharding of one packed micro-batch across CP ranks.
//
// Under a causal mask a token at position p of its document attends to p+1 keys, so equal
// token counts are not equal work: the rank holding the tail of a long document does far
// more than the one holding its head. The strategies differ in how they pair heads with tails:
//
//   contiguous  the packed sequence cut into CP consecutive pieces (no pairing at all)
//   zigzag      the packed sequence cut into 2·CP chunks; rank r takes chunks r and
//               2·CP−1−r (balanced for one document, not for a packing of many)
//   per-doc     every document cut into 2·CP chunks; rank r takes chunks r and 2·CP−1−r of
//               each (WLB-LLM §4; docs/sources.md, "Workload balancing")
//   chunked     the packed sequence cut into chunks of CpShardingState::chunk tokens, each
//               cut into CP pieces; rank r takes piece r of every chunk (FPDT's input order,
//               Yao et al. 2024, §3.2: each chunk's all-to-all under Ulysses then carries
//               1/CP of it from every rank, and each rank projects its share of every chunk)
//   adaptive    per micro-batch, whichever of zigzag (per-sequence) and per-doc predicts
//               the shorter attention time on its slowest rank under an attention kernel
//               model (WLB-LLM §4's adaptive sharding: per-doc balances the work but cuts
//               every document into 2·CP slivers, which a tiled kernel runs less
//               efficiently; ties go to zigzag)
//
// Lengths that do not divide evenly lose and duplicate no token: contiguous and zigzag cut at
// ⌊k·T/pieces⌋ of the packed length T (chunked each chunk of length L at ⌊r·L/CP⌋), so pieces
// differ by at most one token and the longer ones are the later ones; per-doc deals each document's
// d mod 2·CP leftover tokens one per chunk slot, round-robin from a rotating slot index carried
// across documents (and across micro-batches through CpShardingState), so no slot is favoured and
// nothing is padded.
#pragma once

#include "core/balance/packing.h"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fulcrum::balance {

enum class CpSharding { contiguous, zigzag, per_document, chunked, adaptive };

// "contiguous", "zigzag", "per-doc", "chunked" or "adaptive".
Result<CpSharding> parse_cp_sharding(std::string_view name);
const char* cp_sharding_name(CpSharding sharding);

// Tokens [begin, end) of one document, positions counted from the document's first token.
struct TokenRange {
    std::uint64_t document_id = 0;
    std::int64_t begin = 0;
    std::int64_t end = 0;

    friend bool operator==(const TokenRange&, const TokenRange&) = default;
};

// Twice the causal query·key pairs of `length` tokens that start `prefix` tokens into their
// document: Σ_{t=p}^{p+ℓ−1} 2(t+1) = (2p + 1 + ℓ)·ℓ (WLB-LLM §3–4; docs/sources.md, "Workload
// balancing"). A whole document costs d² + d; the pieces of a document always add up to that.
constexpr std::int64_t causal_pair_work(std::int64_t prefix, std::int64_t length) {
    return (2 * prefix + 1 + length) * length;
}

struct CpShard {
    std::vector<TokenRange> ranges;  // in packed order
    std::int64_t tokens = 0;
    std::int64_t attention_work = 0;  // Σ causal_pair_work over ranges
};

struct CpPlan {
    CpSharding sharding = CpSharding::contiguous;  // what was applied; never adaptive
    std::vector<CpShard> ranks;                    // index = CP rank

    std::int64_t max_attention_work() const;
};

// How an attention kernel spends time on the ranges of one CP rank, in causal pairs
// (causal_pair_work units): a range's query rows are rounded up to the kernel's query tile,
// since rows a tile leaves empty take as long as full ones, and every range pays a fixed
// set-up cost. Short shards — per-doc sharding of short documents — pay both most.
struct AttentionKernelModel {
    std::string name = "ideal";
    std::int64_t query_tile = 1;      // query rows a kernel block handles at once
    double range_overhead_pairs = 0;  // per range, in pairs of full-efficiency work

    double range_time(std::int64_t prefix, std::int64_t length) const;
    double shard_time(const CpShard& shard) const;
};

// "ideal" (tile 1, no overhead: time is work), "cpu" (fulcrum-train's CPU kernel, measured by
// bench/balance/bench_shard_efficiency) or "cuda" (its CUDA kernel: 64-row query tiles,
// engine/backend/cuda/attention.cuh).
Result<AttentionKernelModel> attention_kernel_model(std::string_view name);

// The per-doc leftover slot, carried from one document to the next; and the chunk of chunked
// sharding (tokens: the attention's chunk, which the caller sets and sharding only reads).
struct CpShardingState {
    int next_leftover_slot = 0;
    std::int64_t chunk = 0;
};

// Shards `documents` (one packed micro-batch, in packed order) over cp_size ranks. `state` is
// read and advanced only when per-doc sharding is applied. `kernel` weighs adaptive's choice.
Result<CpPlan> shard_microbatch(std::span<const Document> documents, int cp_size,
                                CpSharding sharding, CpShardingState& state,
                                const AttentionKernelModel& kernel = {});

// Same, starting the leftover rotation at slot 0.
Result<CpPlan> shard_microbatch(const MicroBatch& microbatch, int cp_size, CpSharding sharding);

}  // namespace fulcrum::balance
