// TokenBatch: a micro-batch as the model consumes it, documents packed back to back into one
// token sequence (balance::MicroBatch is the planner's view of it: which documents, how much
// work).
//
// The model sees only a flat list of tokens and the lengths of the documents they form; it
// does not know about "sequences" of the context length. A batch of B sequences of S tokens
// is simply a micro-batch whose documents never straddle a multiple of S (the packer in
// engine/data cuts them there), and since attention never crosses a document boundary the
// two views train identically.
//
// Conventions (see lm_head.h and embedding.h):
//   * tokens are byte values 0…255;
//   * positions restart at 0 at each document start;
//   * targets[t] = tokens[t+1] inside a document, and −1 (no target) at the last token of
//     each document, which therefore contributes d − 1 targets.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/util/result.h"
#include "engine/model/attention.h"
#include "engine/model/config.h"

namespace fulcrum::engine {

struct TokenBatch {
    std::vector<std::int32_t> tokens;
    std::vector<std::int32_t> targets;
    std::vector<std::int32_t> doc_lengths;

    std::int64_t size() const { return std::int64_t(tokens.size()); }
    std::int64_t target_count() const;

    // Appends one document (its bytes are its tokens) with next-token targets.
    void append_document(std::string_view bytes);

    std::vector<std::int32_t> positions() const;
    // One span per document, prefix 0, Q and K/V rows the same (serial attention).
    std::vector<AttentionSpan> attention_spans() const;
};

TokenBatch micro_batch_of(std::span<const std::string_view> documents);
// All documents of `parts`, in order, as one micro-batch.
TokenBatch concatenate(std::span<const TokenBatch> parts);

// invalid_input when the batch is inconsistent or does not fit the model (a document longer
// than max_context, a token outside the vocabulary, targets of the wrong size).
Status validate(const TokenBatch& batch, const ModelShape& config);

}  // namespace fulcrum::engine
