// The MLP of a transformer block: Linear(C → 4C), GELU, Linear(4C → C).
//
// Math:
//     h = x · W_fcᵀ + b_fc                        [N, 4C]   (matmul.h)
//     g = GELU(h)                                 [N, 4C]   (below)
//     y = g · W_projᵀ + b_proj                    [N, C]    (matmul.h)
// GELU in the tanh approximation used by GPT-2 (Hendrycks & Gimpel 2016, eq. in §2):
//     GELU(x) = ½·x·(1 + tanh(u)),   u = √(2/π)·(x + 0.044715·x³)
//     GELU'(x) = ½·(1 + tanh(u)) + ½·x·(1 − tanh²(u))·√(2/π)·(1 + 3·0.044715·x²)
// Both h and g are saved for the backward pass (g is the input of the second GEMM, h the
// input of GELU's derivative).
//
// Memory layout: x, y [N, C]; h, g [N, 4C]; W_fc [4C, C]; W_proj [C, 4C]. Contiguous.
#pragma once

#include <cmath>
#include <cstdint>

namespace fulcrum::engine::kernels {

inline constexpr double kGeluScale = 0.7978845608028654;  // √(2/π)
inline constexpr double kGeluCubic = 0.044715;

template <typename T>
void gelu_forward(T* out, const T* inp, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) {
        const T x = inp[i];
        const T u = T(kGeluScale) * (x + T(kGeluCubic) * x * x * x);
        out[i] = T(0.5) * x * (T(1) + std::tanh(u));
    }
}

// Accumulates into dinp.
template <typename T>
void gelu_backward(T* dinp, const T* dout, const T* inp, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) {
        const T x = inp[i];
        const T u = T(kGeluScale) * (x + T(kGeluCubic) * x * x * x);
        const T th = std::tanh(u);
        const T du = T(kGeluScale) * (T(1) + T(3 * kGeluCubic) * x * x);
        const T grad = T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * du;
        dinp[i] += grad * dout[i];
    }
}

}  // namespace fulcrum::engine::kernels
