// The optimizer's kernels on the GPU: AdamW and the Σ g² of gradient clipping.
// Math: engine/train/adamw.h.
//     g ← c·g,  m ← β₁m + (1 − β₁)g,  v ← β₂v + (1 − β₂)g²
//     p ← p − lr·( (m/(1 − β₁ᵗ)) / (√(v/(1 − β₂ᵗ)) + ε) + λ·p )
// The bias corrections are computed on the host in double and rounded to float, exactly as
// the CPU kernel does; sqrt and division are correctly rounded on both (no --use_fast_math).
// The results may still differ by an ulp: nvcc contracts a·b + c into one fused multiply-add
// by default, and the CPU build (no -mfma) does not.
// Σ x² accumulates in double (backend.h): per thread, then per block, then one double
// atomicAdd per block into a device scalar that the host downloads.
#pragma once

#include "engine/backend/cuda/common.cuh"

namespace fulcrum::engine::cuda {

// ---- kernels ------------------------------------------------------------------------------

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, long long n,
                             float lr, float beta1, float beta2, float epsilon, float weight_decay,
                             float grad_scale, float bias1, float bias2) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const float g = grad[i] * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / bias1;
    const float v_hat = vi / bias2;
    param[i] -= lr * (m_hat / (sqrtf(v_hat) + epsilon) + weight_decay * param[i]);
}

__global__ void sum_of_squares_kernel(double* result, const float* x, long long n) {
    double sum = 0.0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        sum += double(x[i]) * double(x[i]);
    sum = block_sum(sum);
    if (threadIdx.x == 0)
        atomicAdd(result, sum);
}

// ---- launchers ----------------------------------------------------------------------------

inline void adamw_update(float* param, const float* grad, float* m, float* v, long long n, float lr,
                         float beta1, float beta2, float epsilon, float weight_decay,
                         float grad_scale, float bias1, float bias2, cudaStream_t stream) {
    NvtxRange range("adamw_update");
    if (n == 0)
        return;
    adamw_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(
        param, grad, m, v, n, lr, beta1, beta2, epsilon, weight_decay, grad_scale, bias1, bias2);
    FULCRUM_CUDA_CHECK_LAUNCH();
}

// `result` must be zero on entry (the launcher adds into it).
inline void sum_of_squares(double* result, const float* x, long long n, int sm_count,
                           cudaStream_t stream) {
    NvtxRange range("sum_of_squares");
    if (n == 0)
        return;
    const unsigned blocks = std::min<unsigned>(ceil_div(n, 512), unsigned(4 * sm_count));
    sum_of_squares_kernel<<<blocks, 512, 0, stream>>>(result, x, n);
    FULCRUM_CUDA_CHECK_LAUNCH();
}

}  // namespace fulcrum::engine::cuda
