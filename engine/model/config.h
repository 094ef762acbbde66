// The engine's functions of a model's shape (parallel::ModelShape, the one type every tool
// describes a model with). Byte-level: the vocabulary is the 256 byte values.
#pragma once

#include <cstdint>
#include <string>

#include "core/parallel/layout.h"
#include "core/util/result.h"

namespace fulcrum::engine {

using parallel::ModelShape;

inline int head_size(const ModelShape& model) {
    return model.hidden / model.heads;
}
std::int64_t parameter_count(const ModelShape& model);
std::string describe(const ModelShape& model);  // "L2 C64 H4 ctx128 V256 (N params)"

// invalid_input with the offending field when the sizes make no sense (hidden not divisible
// by the head count, a non-positive size, a vocabulary other than bytes, ...).
Status validate(const ModelShape& model);

}  // namespace fulcrum::engine
