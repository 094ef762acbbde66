// Sizes of a GPT. Byte-level: the vocabulary is the 256 byte values.
#pragma once

#include <cstdint>
#include <string>

#include "core/util/result.h"

namespace fulcrum::engine {

struct GptConfig {
    int vocab_size = 256;
    int max_context = 128;  // rows of the position table: the longest document piece
    int n_layer = 2;
    int n_head = 4;
    int channels = 64;  // hidden size C; the MLP is 4C wide

    int head_size() const { return channels / n_head; }
    std::int64_t parameter_count() const;
    std::string describe() const;  // "L2 C64 H4 ctx128 V256 (N params)"
};

// invalid_input with the offending field when the sizes make no sense (C not divisible by the
// head count, a non-positive size, ...).
Status validate(const GptConfig& config);

}  // namespace fulcrum::engine
