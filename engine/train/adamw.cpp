#include "engine/train/adamw.h"

namespace fulcrum::engine {

float clip_coefficient(double grad_norm, float max_norm) {
    if (max_norm <= 0.0f)
        return 1.0f;
    const double c = double(max_norm) / (grad_norm + 1e-6);
    return c < 1.0 ? float(c) : 1.0f;
}

AdamW::AdamW(Backend& backend, const ParameterLayout& layout, AdamWConfig config)
    : backend_(backend), layout_(layout), config_(config) {
    const std::int64_t n = layout.total();
    state_ = backend_.allocate(std::size_t(2 * n) * sizeof(float));  // zeroed: m = v = 0
    m_ = state_.f32(0, {n});
    v_ = state_.f32(n, {n});
}

void AdamW::update(Tensor params, Tensor grads, float grad_scale, float learning_rate) {
    ++steps_taken_;
    AdamWStep step;
    step.learning_rate = learning_rate > 0.0f ? learning_rate : config_.learning_rate;
    step.beta1 = config_.beta1;
    step.beta2 = config_.beta2;
    step.epsilon = config_.epsilon;
    step.grad_scale = grad_scale;
    step.step = steps_taken_;
    // One call per tensor, because weight decay differs between matrices and vectors.
    for (const ParameterTensor& t : layout_.tensors()) {
        step.weight_decay = t.weight_decay ? config_.weight_decay : 0.0f;
        backend_.adamw_update(params.slice(t.offset, t.numel()), grads.slice(t.offset, t.numel()),
                              m_.slice(t.offset, t.numel()), v_.slice(t.offset, t.numel()), step);
    }
}

}  // namespace fulcrum::engine
