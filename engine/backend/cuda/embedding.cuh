// Token + position embedding on the GPU. Math and layout: engine/model/embedding.h.
//     out[t] = wte[x_t] + wpe[p_t]
//     dwte[x_t] += dout[t],  dwpe[p_t] += dout[t]
// The backward is a scatter-add whose targets repeat (the vocabulary is 256 bytes), so it
// adds with atomicAdd: fp32 atomics make the sum order, and so the last bits, vary from run to
// run. A sorted, deterministic scatter (llm.c's encoder_backward) is a later optimisation.
#pragma once

#include "engine/backend/cuda/common.cuh"

namespace fulcrum::engine::cuda {

// ---- kernels ------------------------------------------------------------------------------

__global__ void embedding_forward_kernel(float* out, const int* tokens, const int* positions,
                                         const float* wte, const float* wpe, long long n_tokens,
                                         int channels) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= n_tokens * channels)
        return;
    const long long t = i / channels;
    const int c = int(i % channels);
    out[i] = wte[(long long)tokens[t] * channels + c] + wpe[(long long)positions[t] * channels + c];
}

__global__ void embedding_backward_kernel(float* dwte, float* dwpe, const float* dout,
                                          const int* tokens, const int* positions,
                                          long long n_tokens, int channels) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= n_tokens * channels)
        return;
    const long long t = i / channels;
    const int c = int(i % channels);
    const float g = dout[i];
    atomicAdd(&dwte[(long long)tokens[t] * channels + c], g);
    atomicAdd(&dwpe[(long long)positions[t] * channels + c], g);
}

// ---- launchers ----------------------------------------------------------------------------

inline void embedding_forward(float* out, const int* tokens, const int* positions, const float* wte,
                              const float* wpe, long long n_tokens, int channels,
                              cudaStream_t stream) {
    NvtxRange range("embedding_forward");
    const long long n = n_tokens * channels;
    if (n == 0)
        return;
    embedding_forward_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(out, tokens, positions, wte, wpe,
                                                                   n_tokens, channels);
    FULCRUM_CUDA_CHECK_LAUNCH();
}

inline void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens,
                               const int* positions, long long n_tokens, int channels,
                               cudaStream_t stream) {
    NvtxRange range("embedding_backward");
    const long long n = n_tokens * channels;
    if (n == 0)
        return;
    embedding_backward_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(dwte, dwpe, dout, tokens,
                                                                    positions, n_tokens, channels);
    FULCRUM_CUDA_CHECK_LAUNCH();
}

}  // namespace fulcrum::engine::cuda
