#include "core/balance/cp_shard.h"

#include <algorithm>
#include <string>

namespace fulcrum::balance {
namespace {

// What one more range costs the CPU kernel beyond its pairs. bench_shard_efficiency
// (bench/README.md) finds none: the kernel runs query rows one at a time, and short ranges,
// whose keys stay in cache, run 1.3–2× faster per pair than 1024-row ones.
constexpr double kCpuRangeOverheadPairs = 0;

Error invalid(std::string message) {
    return Error{ErrorCode::invalid_input, std::move(message)};
}

void append(CpShard& shard, std::uint64_t document_id, std::int64_t begin, std::int64_t end) {
    if (begin >= end) {
        return;
    }
    shard.ranges.push_back(TokenRange{document_id, begin, end});
    shard.tokens += end - begin;
    shard.attention_work += causal_pair_work(begin, end - begin);
}

// Where each document begins in the packed sequence, and the sequence's length.
std::vector<std::int64_t> packed_starts(std::span<const Document> documents) {
    std::vector<std::int64_t> starts(documents.size());
    std::int64_t at = 0;
    for (std::size_t i = 0; i < documents.size(); ++i) {
        starts[i] = at;
        at += documents[i].length;
    }
    return starts;
}
std::int64_t packed_length(std::span<const Document> documents) {
    std::int64_t total = 0;
    for (const Document& document : documents) {
        total += document.length;
    }
    return total;
}

// Assigns [from, to) of the packed sequence to `shard`, split at document boundaries.
// `starts[i]` is where document i begins in the packed sequence.
void append_packed(std::span<const Document> documents, std::span<const std::int64_t> starts,
                   std::int64_t from, std::int64_t to, CpShard& shard) {
    auto i = static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), from) -
                                      starts.begin() - 1);
    for (; i < documents.size() && starts[i] < to; ++i) {
        const std::int64_t begin = std::max(from, starts[i]) - starts[i];
        const std::int64_t end = std::min(to, starts[i] + documents[i].length) - starts[i];
        append(shard, documents[i].id, begin, end);
    }
}

// Cuts the packed sequence into `pieces` at ⌊k·T/pieces⌋ and hands piece k to owner(k).
CpPlan shard_packed(std::span<const Document> documents, int cp_size, CpSharding sharding,
                    int pieces, auto owner) {
    const std::vector<std::int64_t> starts = packed_starts(documents);
    const std::int64_t total = packed_length(documents);
    CpPlan plan;
    plan.sharding = sharding;
    plan.ranks.resize(cp_size);
    for (int k = 0; k < pieces; ++k) {
        append_packed(documents, starts, total * k / pieces, total * (k + 1) / pieces,
                      plan.ranks[owner(k)]);
    }
    return plan;
}

// Chunks of `chunk` tokens of the packed sequence, each cut into cp_size pieces at ⌊r·L/cp⌋;
// piece r to rank r.
CpPlan shard_chunked(std::span<const Document> documents, int cp_size, std::int64_t chunk) {
    const std::vector<std::int64_t> starts = packed_starts(documents);
    const std::int64_t total = packed_length(documents);
    CpPlan plan;
    plan.sharding = CpSharding::chunked;
    plan.ranks.resize(std::size_t(cp_size));
    for (std::int64_t first = 0; first < total; first += chunk) {
        const std::int64_t length = std::min(chunk, total - first);
        for (int r = 0; r < cp_size; ++r) {
            append_packed(documents, starts, first + length * r / cp_size,
                          first + length * (r + 1) / cp_size, plan.ranks[std::size_t(r)]);
        }
    }
    return plan;
}

CpPlan shard_per_document(std::span<const Document> documents, int cp_size,
                          CpShardingState& state) {
    const int slots = 2 * cp_size;
    CpPlan plan;
    plan.sharding = CpSharding::per_document;
    plan.ranks.resize(cp_size);
    std::vector<std::int64_t> chunk(slots);
    for (const auto& document : documents) {
        const std::int64_t base = document.length / slots;
        const int leftover = static_cast<int>(document.length % slots);
        std::fill(chunk.begin(), chunk.end(), base);
        for (int t = 0; t < leftover; ++t) {
            ++chunk[(state.next_leftover_slot + t) % slots];
        }
        state.next_leftover_slot = (state.next_leftover_slot + leftover) % slots;
        // Chunk c covers [offset(c), offset(c+1)); rank r gets c = r and c = 2·CP−1−r, so each
        // rank holds one early and one late slice of every document.
        std::int64_t offset = 0;
        std::vector<std::int64_t> begins(slots + 1);
        for (int c = 0; c < slots; ++c) {
            begins[c] = offset;
            offset += chunk[c];
        }
        begins[slots] = offset;
        for (int r = 0; r < cp_size; ++r) {
            const int mirror = slots - 1 - r;
            append(plan.ranks[r], document.id, begins[r], begins[r + 1]);
            append(plan.ranks[r], document.id, begins[mirror], begins[mirror + 1]);
        }
    }
    return plan;
}

}  // namespace

Result<CpSharding> parse_cp_sharding(std::string_view name) {
    for (const auto sharding :
         {CpSharding::contiguous, CpSharding::zigzag, CpSharding::per_document, CpSharding::chunked,
          CpSharding::adaptive}) {
        if (name == cp_sharding_name(sharding)) {
            return sharding;
        }
    }
    return invalid("unknown CP sharding '" + std::string(name) +
                   "'; expected contiguous, zigzag, per-doc, chunked or adaptive");
}

const char* cp_sharding_name(CpSharding sharding) {
    switch (sharding) {
        case CpSharding::contiguous:
            return "contiguous";
        case CpSharding::zigzag:
            return "zigzag";
        case CpSharding::per_document:
            return "per-doc";
        case CpSharding::chunked:
            return "chunked";
        case CpSharding::adaptive:
            return "adaptive";
    }
    return "unknown";
}

std::int64_t CpPlan::max_attention_work() const {
    std::int64_t largest = 0;
    for (const auto& rank : ranks) {
        largest = std::max(largest, rank.attention_work);
    }
    return largest;
}

double AttentionKernelModel::range_time(std::int64_t prefix, std::int64_t length) const {
    const std::int64_t tile = std::max<std::int64_t>(query_tile, 1);
    const std::int64_t rows = (length + tile - 1) / tile * tile;
    return static_cast<double>(causal_pair_work(prefix, rows)) + range_overhead_pairs;
}

double AttentionKernelModel::shard_time(const CpShard& shard) const {
    double time = 0;
    for (const TokenRange& range : shard.ranges) {
        time += range_time(range.begin, range.end - range.begin);
    }
    return time;
}

Result<AttentionKernelModel> attention_kernel_model(std::string_view name) {
    if (name == "ideal") {
        return AttentionKernelModel{};
    }
    if (name == "cpu") {
        return AttentionKernelModel{"cpu", 1, kCpuRangeOverheadPairs};
    }
    if (name == "cuda") {
        return AttentionKernelModel{"cuda", 64, 0};
    }
    return invalid("unknown attention kernel '" + std::string(name) +
                   "'; expected ideal, cpu or cuda");
}

Result<CpPlan> shard_microbatch(std::span<const Document> documents, int cp_size,
                                CpSharding sharding, CpShardingState& state,
                                const AttentionKernelModel& kernel) {
    if (cp_size < 1) {
        return invalid("CP size must be at least 1, got " + std::to_string(cp_size));
    }
    for (const auto& document : documents) {
        if (document.length < 1) {
            return invalid("document " + std::to_string(document.id) + " has length " +
                           std::to_string(document.length) + "; every document needs ≥ 1 token");
        }
    }
    const int chunks = 2 * cp_size;
    switch (sharding) {
        case CpSharding::contiguous:
            return shard_packed(documents, cp_size, sharding, cp_size, [](int k) { return k; });
        case CpSharding::zigzag:
            return shard_packed(documents, cp_size, sharding, chunks,
                                [chunks](int k) { return std::min(k, chunks - 1 - k); });
        case CpSharding::per_document:
            return shard_per_document(documents, cp_size, state);
        case CpSharding::chunked:
            if (state.chunk < 1) {
                return invalid(
                    "chunked CP sharding needs the attention's chunk (--attention-chunk)");
            }
            return shard_chunked(documents, cp_size, state.chunk);
        case CpSharding::adaptive: {
            auto zigzag = shard_packed(documents, cp_size, CpSharding::zigzag, chunks,
                                       [chunks](int k) { return std::min(k, chunks - 1 - k); });
            CpShardingState tried = state;
            auto per_document = shard_per_document(documents, cp_size, tried);
            const auto slowest = [&](const CpPlan& plan) {
                double time = 0;
                for (const CpShard& shard : plan.ranks) {
                    time = std::max(time, kernel.shard_time(shard));
                }
                return time;
            };
            if (slowest(per_document) < slowest(zigzag)) {
                state = tried;
                return per_document;
            }
            return zigzag;
        }
    }
    return invalid("unknown CP sharding");
}

Result<CpPlan> shard_microbatch(const MicroBatch& microbatch, int cp_size, CpSharding sharding) {
    CpShardingState state;
    return shard_microbatch(microbatch.documents, cp_size, sharding, state);
}

}  // namespace fulcrum::balance
