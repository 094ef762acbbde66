// GELU (tanh approximation) of the MLP on the GPU. Math: engine/model/mlp.h.
//     GELU(x)  = ½·x·(1 + tanh(u)),  u = √(2/π)·(x + 0.044715·x³)
//     GELU'(x) = ½·(1 + tanh(u)) + ½·x·(1 − tanh²(u))·√(2/π)·(1 + 3·0.044715·x²)
// The same operation order as the CPU kernel; tanhf differs from glibc's by at most a couple
// of ulp, which is the whole CPU/GPU difference.
#pragma once

#include "engine/backend/cuda/common.cuh"

namespace fulcrum::engine::cuda {

constexpr float kGeluScale = 0.7978845608028654f;  // √(2/π)
constexpr float kGeluCubic = 0.044715f;

// ---- kernels ------------------------------------------------------------------------------

__global__ void gelu_forward_kernel(float* out, const float* inp, long long n) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const float x = inp[i];
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    out[i] = 0.5f * x * (1.0f + tanhf(u));
}

__global__ void gelu_backward_kernel(float* dinp, const float* dout, const float* inp,
                                     long long n) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const float x = inp[i];
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    const float th = tanhf(u);
    const float du = kGeluScale * (1.0f + float(3 * 0.044715) * x * x);
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
    dinp[i] += grad * dout[i];
}

// ---- launchers ----------------------------------------------------------------------------

inline void gelu_forward(float* out, const float* inp, long long n, cudaStream_t stream) {
    NvtxRange range("gelu_forward");
    if (n == 0)
        return;
    gelu_forward_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(out, inp, n);
    FULCRUM_CUDA_CHECK_LAUNCH();
}

inline void gelu_backward(float* dinp, const float* dout, const float* inp, long long n,
                          cudaStream_t stream) {
    NvtxRange range("gelu_backward");
    if (n == 0)
        return;
    gelu_backward_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(dinp, dout, inp, n);
    FULCRUM_CUDA_CHECK_LAUNCH();
}

}  // namespace fulcrum::engine::cuda
