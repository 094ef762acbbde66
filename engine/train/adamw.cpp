#include "engine/train/adamw.h"

#include <algorithm>

namespace fulcrum::engine {

float clip_coefficient(double grad_norm, float max_norm) {
    if (max_norm <= 0.0f)
        return 1.0f;
    const double c = double(max_norm) / (grad_norm + 1e-6);
    return c < 1.0 ? float(c) : 1.0f;
}

AdamW::AdamW(Backend& backend, const ParameterLayout& layout, AdamWConfig config,
             ElementRange owned)
    : backend_(backend),
      layout_(layout),
      config_(config),
      owned_(owned.count < 0 ? ElementRange{0, layout.total()} : owned) {
    FULCRUM_CHECK(
        owned_.offset >= 0 && owned_.count >= 0 && owned_.offset + owned_.count <= layout.total(),
        "the optimizer's range lies outside the parameters");
    const std::int64_t n = std::max<std::int64_t>(owned_.count, 1);
    state_ = backend_.allocate(std::size_t(2 * n) * sizeof(float));  // zeroed: m = v = 0
    m_ = state_.f32(0, {n});
    v_ = state_.f32(n, {n});
}

std::int64_t AdamW::offset_of(const Tensor& flat) const {
    if (flat.numel() == layout_.total()) {
        return 0;
    }
    FULCRUM_CHECK(flat.numel() == owned_.count,
                  "AdamW: a buffer that is neither the whole layout nor the owned range");
    return owned_.offset;
}

void AdamW::update(Tensor params, Tensor grads, float grad_scale, float learning_rate) {
    const std::int64_t params_offset = offset_of(params), grads_offset = offset_of(grads);
    ++steps_taken_;
    AdamWStep step;
    step.learning_rate = learning_rate > 0.0f ? learning_rate : config_.learning_rate;
    step.beta1 = config_.beta1;
    step.beta2 = config_.beta2;
    step.epsilon = config_.epsilon;
    step.grad_scale = grad_scale;
    step.step = steps_taken_;
    // One call per tensor (its part in the owned range), because weight decay differs
    // between matrices and vectors.
    const std::int64_t first = owned_.offset, last = owned_.offset + owned_.count;
    for (const ParameterTensor& t : layout_.tensors()) {
        const std::int64_t begin = std::max(t.offset, first);
        const std::int64_t end = std::min(t.offset + t.numel(), last);
        if (begin >= end) {
            continue;
        }
        step.weight_decay = t.weight_decay ? config_.weight_decay : 0.0f;
        backend_.adamw_update(params.slice(begin - params_offset, end - begin),
                              grads.slice(begin - grads_offset, end - begin),
                              m_.slice(begin - first, end - begin),
                              v_.slice(begin - first, end - begin), step);
    }
}

}  // namespace fulcrum::engine
