// LayerNorm (Ba et al. 2016) and the residual add of a pre-LN block.
//
// Math, per token row x of C channels (eps = 1e-5, as GPT-2):
//     μ = mean(x),  σ² = mean((x − μ)²),  rstd = 1/√(σ² + eps)
//     n = (x − μ)·rstd,   out = n ⊙ weight + bias
// Backward, with g = dout ⊙ weight:
//     dweight += Σ_rows dout ⊙ n,   dbias += Σ_rows dout
//     dx += rstd · (g − mean(g) − n · mean(g ⊙ n))
// Mean and rstd (one float each per row) are saved by the forward pass so the backward pass
// does not recompute the statistics. dx and (dweight, dbias) are independent: Zero Bubble's
// input-gradient pass computes dx alone, its weight-gradient pass the other two (matmul.h).
//
// Pre-LN block (GPT-2): x₁ = x + Attn(LN₁(x)),  x₂ = x₁ + MLP(LN₂(x₁)). The residual add is
// `residual_forward` below; its backward is free because gradient kernels accumulate: both
// branches add into the one residual-gradient buffer.
//
// Memory layout: inp, out, dinp, dout [N, C]; weight, bias [C]; mean, rstd [N]. Contiguous.
#pragma once

#include <cmath>
#include <cstdint>

namespace fulcrum::engine::kernels {

inline constexpr double kLayerNormEpsilon = 1e-5;

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       std::int64_t rows, int channels) {
    for (std::int64_t r = 0; r < rows; ++r) {
        const T* x = inp + r * channels;
        T m = 0;
#pragma omp simd reduction(+ : m)
        for (int c = 0; c < channels; ++c)
            m += x[c];
        m /= T(channels);
        T var = 0;
#pragma omp simd reduction(+ : var)
        for (int c = 0; c < channels; ++c)
            var += (x[c] - m) * (x[c] - m);
        var /= T(channels);
        const T s = T(1) / std::sqrt(var + T(kLayerNormEpsilon));
        T* o = out + r * channels;
        for (int c = 0; c < channels; ++c)
            o[c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[r] = m;
        rstd[r] = s;
    }
}

// Accumulates into dinp, and into dweight and dbias; dinp nullptr: no input gradient, dweight
// and dbias nullptr (both): no parameter gradients.
template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, std::int64_t rows, int channels) {
    if (dinp == nullptr) {
        for (std::int64_t r = 0; r < rows; ++r) {
            const T* x = inp + r * channels;
            const T* g = dout + r * channels;
            for (int c = 0; c < channels; ++c) {
                const T n = (x[c] - mean[r]) * rstd[r];
                dweight[c] += g[c] * n;
                dbias[c] += g[c];
            }
        }
        return;
    }
    for (std::int64_t r = 0; r < rows; ++r) {
        const T* x = inp + r * channels;
        const T* g = dout + r * channels;
        const T m = mean[r];
        const T s = rstd[r];
        T mean_g = 0, mean_gn = 0;
#pragma omp simd reduction(+ : mean_g, mean_gn)
        for (int c = 0; c < channels; ++c) {
            const T n = (x[c] - m) * s;
            const T gw = g[c] * weight[c];
            mean_g += gw;
            mean_gn += gw * n;
        }
        mean_g /= T(channels);
        mean_gn /= T(channels);
        T* dx = dinp + r * channels;
        for (int c = 0; c < channels; ++c) {
            const T n = (x[c] - m) * s;
            if (dweight != nullptr) {
                dweight[c] += g[c] * n;
                dbias[c] += g[c];
            }
            dx[c] += s * (g[c] * weight[c] - mean_g - n * mean_gn);
        }
    }
}

template <typename T>
void residual_forward(T* out, const T* a, const T* b, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i)
        out[i] = a[i] + b[i];
}

}  // namespace fulcrum::engine::kernels
