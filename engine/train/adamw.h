// AdamW (Loshchilov & Hutter 2019, Algorithm 2) with global-norm gradient clipping.
//
// Math, per parameter p with gradient g at step t (1-based):
//     g  ← c · g                         c = clipping coefficient (below), 1 if no clipping
//     m  ← β₁·m + (1 − β₁)·g
//     v  ← β₂·v + (1 − β₂)·g²
//     m̂ = m / (1 − β₁ᵗ),   v̂ = v / (1 − β₂ᵗ)        (bias correction)
//     p  ← p − lr · ( m̂ / (√v̂ + ε) + λ·p )          (decay decoupled from the gradient)
// λ applies only to matrices (wte, wpe and the four GEMM weights of each block), not to biases
// or LayerNorm parameters: the GPT-2/nanoGPT convention; ParameterLayout marks which.
//
// Clipping (Pascanu et al. 2013): ‖g‖ = √(Σ over every parameter g²) over the whole model,
// c = min(1, max_norm / (‖g‖ + 1e-6)), the same rule as torch.nn.utils.clip_grad_norm_.
// The coefficient is folded into the update rather than applied in a separate pass.
//
// Memory layout: m and v are flat fp32 buffers with the parameter buffer's layout (params.h),
// so a sharded optimizer (ZeRO-1) owns one range of all three at once: its moments are that
// range's, and an update writes only the parameters in it.
#pragma once

#include <cmath>
#include <cstdint>

#include "engine/backend/backend.h"
#include "engine/model/params.h"

namespace fulcrum::engine {

namespace kernels {

template <typename T>
void adamw_update(T* param, const T* grad, T* m, T* v, std::int64_t n, const AdamWStep& s) {
    const T bias1 = T(1.0 - std::pow(double(s.beta1), double(s.step)));
    const T bias2 = T(1.0 - std::pow(double(s.beta2), double(s.step)));
    for (std::int64_t i = 0; i < n; ++i) {
        const T g = grad[i] * T(s.grad_scale);
        m[i] = T(s.beta1) * m[i] + (T(1) - T(s.beta1)) * g;
        v[i] = T(s.beta2) * v[i] + (T(1) - T(s.beta2)) * g * g;
        const T m_hat = m[i] / bias1;
        const T v_hat = v[i] / bias2;
        param[i] -= T(s.learning_rate) *
                    (m_hat / (std::sqrt(v_hat) + T(s.epsilon)) + T(s.weight_decay) * param[i]);
    }
}

}  // namespace kernels

struct AdamWConfig {
    float learning_rate = 1e-3f;
    float beta1 = 0.9f;
    float beta2 = 0.95f;
    float epsilon = 1e-8f;
    float weight_decay = 0.1f;
};

// The clipping coefficient c above; max_norm <= 0 disables clipping.
float clip_coefficient(double grad_norm, float max_norm);

// Owns the moment buffers m and v of the parameters in `owned` (every one by default; under
// ZeRO, the rank's shard of the flat buffer) and the step counter.
class AdamW {
public:
    AdamW(Backend& backend, const ParameterLayout& layout, AdamWConfig config,
          ElementRange owned = {0, -1});

    const AdamWConfig& config() const { return config_; }
    std::int64_t steps_taken() const { return steps_taken_; }
    ElementRange owned() const { return owned_; }

    // One update of the owned parameters. `params` and `grads` are each either the whole flat
    // buffer in `layout` order, of which only the owned range is read or written, or the
    // owned range alone (owned().count elements: ZeRO-3's parameter shard, ZeRO-2's gradient
    // shard). `grad_scale` is the clipping coefficient; `learning_rate` overrides the config's
    // (for a schedule) when positive.
    void update(Tensor params, Tensor grads, float grad_scale, float learning_rate = -1.0f);

private:
    // The layout offset of `flat`'s first element: 0 for the whole buffer, owned().offset for
    // the owned range alone.
    std::int64_t offset_of(const Tensor& flat) const;

    Backend& backend_;
    const ParameterLayout& layout_;
    AdamWConfig config_;
    ElementRange owned_;
    DeviceBuffer state_;
    Tensor m_, v_;
    std::int64_t steps_taken_ = 0;
};

}  // namespace fulcrum::engine
