#include "core/sim/layer_costs.h"

#include <string>

namespace fulcrum::sim {

Result<DType> parse_dtype(std::string_view name) {
    if (name == "fp32")
        return DType::fp32;
    if (name == "bf16")
        return DType::bf16;
    if (name == "fp16")
        return DType::fp16;
    return Error{ErrorCode::invalid_input, "unknown --dtype '" + std::string(name) + "' (choose " +
                                               std::string(kDTypeNames) + ")"};
}

const char* dtype_name(DType dtype) {
    switch (dtype) {
        case DType::fp32:
            return "fp32";
        case DType::bf16:
            return "bf16";
        case DType::fp16:
            return "fp16";
    }
    return "fp32";
}

std::int64_t element_bytes(DType dtype) {
    return dtype == DType::fp32 ? 4 : 2;
}

TpCollectives tp_collectives_per_layer(Phase phase, bool split_backward, bool sequence_parallel) {
    switch (phase) {
        case Phase::none:  // not a pass
            return {};
        case Phase::forward:
            return sequence_parallel ? TpCollectives{0, 2, 2} : TpCollectives{2, 0, 0};
        case Phase::backward:
            if (!sequence_parallel) {
                return {2, 0, 0};
            }
            // g backward gathers the output gradient (2), the weight gradients gather the
            // LayerNorm outputs again (2, left to W when split), f backward reduce-scatters (2).
            return split_backward ? TpCollectives{0, 2, 2} : TpCollectives{0, 4, 2};
        case Phase::weight_grad:
            return split_backward && sequence_parallel ? TpCollectives{0, 2, 0} : TpCollectives{};
    }
    return {};
}

TpCollectives tp_recompute_collectives_per_layer(parallel::Recompute recompute,
                                                 bool sequence_parallel) {
    if (recompute != parallel::Recompute::full) {
        return {};
    }
    return tp_collectives_per_layer(Phase::forward, false, sequence_parallel);
}

bool recomputes(Phase phase, parallel::Recompute recompute) {
    return recompute != parallel::Recompute::none && phase != Phase::forward;
}

}  // namespace fulcrum::sim
