#include "engine/model/micro_batch.h"

#include <numeric>
#include <string>

#include "engine/model/lm_head.h"
#include "engine/model/parallel_context.h"

namespace fulcrum::engine {

std::int64_t TokenBatch::target_count() const {
    std::int64_t n = 0;
    for (std::int32_t y : targets)
        n += y != kernels::kNoTarget;
    return n;
}

void TokenBatch::append_document(std::string_view bytes) {
    if (bytes.empty())
        return;
    for (std::size_t i = 0; i < bytes.size(); ++i) {
        tokens.push_back(static_cast<unsigned char>(bytes[i]));
        targets.push_back(i + 1 < bytes.size() ? static_cast<unsigned char>(bytes[i + 1])
                                               : kernels::kNoTarget);
    }
    doc_lengths.push_back(std::int32_t(bytes.size()));
}

std::vector<std::int32_t> TokenBatch::positions() const {
    std::vector<std::int32_t> out;
    out.reserve(tokens.size());
    for (std::int32_t length : doc_lengths) {
        for (std::int32_t p = 0; p < length; ++p)
            out.push_back(p);
    }
    return out;
}

std::vector<AttentionSpan> TokenBatch::attention_spans() const {
    std::vector<AttentionSpan> spans;
    spans.reserve(doc_lengths.size());
    std::int32_t start = 0;
    for (std::int32_t length : doc_lengths) {
        spans.push_back({start, start, 0, length});
        start += length;
    }
    return spans;
}

TokenBatch micro_batch_of(std::span<const std::string_view> documents) {
    TokenBatch batch;
    for (std::string_view doc : documents)
        batch.append_document(doc);
    return batch;
}

TokenBatch concatenate(std::span<const TokenBatch> parts) {
    TokenBatch out;
    for (const TokenBatch& part : parts) {
        out.tokens.insert(out.tokens.end(), part.tokens.begin(), part.tokens.end());
        out.targets.insert(out.targets.end(), part.targets.begin(), part.targets.end());
        out.doc_lengths.insert(out.doc_lengths.end(), part.doc_lengths.begin(),
                               part.doc_lengths.end());
    }
    return out;
}

Status validate(const TokenBatch& batch, const ModelShape& config) {
    auto invalid = [](std::string message) {
        return Status(Error{ErrorCode::invalid_input, "micro-batch: " + std::move(message)});
    };
    if (batch.targets.size() != batch.tokens.size()) {
        return invalid("targets and tokens differ in length");
    }
    std::int64_t total = 0;
    for (std::int32_t length : batch.doc_lengths) {
        if (length < 1)
            return invalid("empty document");
        if (length > config.context) {
            return invalid("a document of " + std::to_string(length) +
                           " tokens is longer than max_context " + std::to_string(config.context) +
                           "; pack with a smaller context");
        }
        total += length;
    }
    if (total != batch.size())
        return invalid("document lengths do not add up to the tokens");
    for (std::size_t i = 0; i < batch.tokens.size(); ++i) {
        if (batch.tokens[i] < 0 || batch.tokens[i] >= config.vocab) {
            return invalid("token " + std::to_string(i) + " outside the vocabulary");
        }
        if (batch.targets[i] < kernels::kNoTarget || batch.targets[i] >= config.vocab) {
            return invalid("target " + std::to_string(i) + " outside the vocabulary");
        }
    }
    return {};
}

Status validate(const ContextShard& shard, const ModelShape& config) {
    auto invalid = [](std::string message) {
        return Status(Error{ErrorCode::invalid_input, "CP shard: " + std::move(message)});
    };
    const std::size_t n = shard.tokens.size();
    if (n == 0)
        return invalid("no token");
    if (shard.targets.size() != n || shard.positions.size() != n) {
        return invalid("tokens, targets and positions differ in length");
    }
    for (std::size_t i = 0; i < n; ++i) {
        if (shard.tokens[i] < 0 || shard.tokens[i] >= config.vocab) {
            return invalid("token " + std::to_string(i) + " outside the vocabulary");
        }
        if (shard.targets[i] < kernels::kNoTarget || shard.targets[i] >= config.vocab) {
            return invalid("target " + std::to_string(i) + " outside the vocabulary");
        }
        if (shard.positions[i] < 0 || shard.positions[i] >= config.context) {
            return invalid("position " + std::to_string(shard.positions[i]) +
                           " is past max_context " + std::to_string(config.context) +
                           "; pack with a smaller context");
        }
    }
    std::int64_t span_rows = 0;
    for (const AttentionSpan& span : shard.spans) {
        if (span.q_begin != span_rows || span.length < 1 || span.prefix < 0 || span.kv_begin < 0) {
            return invalid("attention spans must tile the local rows in order");
        }
        span_rows += span.length;
    }
    if (span_rows != std::int64_t(n))
        return invalid("attention spans do not cover the local rows");
    std::int64_t run_rows = 0;
    for (const RowRun& run : shard.exchange.runs)
        run_rows += run.count;
    if (shard.exchange.rows_per_rank.empty() || run_rows != shard.exchange.total_rows()) {
        return invalid("the K/V exchange does not add up");
    }
    return {};
}

}  // namespace fulcrum::engine
