// LayerNorm and the residual add on the GPU. Math and layout: engine/model/layernorm.h.
//     μ = mean(x), σ² = mean((x − μ)²), rstd = 1/√(σ² + 1e-5), out = (x − μ)·rstd ⊙ w + b
//     dweight += Σ_rows dout ⊙ n,  dbias += Σ_rows dout
//     dx += rstd · (g − mean(g) − n · mean(g ⊙ n)),  g = dout ⊙ w
// Forward: one warp per row, two passes over the row as the CPU does (mean, then the
// centred variance: no E[x²] − μ² cancellation). Backward: one warp per row for dx; dweight
// and dbias are summed over the rows a block handles in shared memory, then added to global
// memory once per block with atomicAdd (a few hundred blocks, not N rows, contend). dinp, or
// dweight and dbias together, may be nullptr: Zero Bubble's input- and weight-gradient passes
// each ask for one half (engine/model/layernorm.h).
#pragma once

#include "engine/backend/cuda/common.cuh"

namespace fulcrum::engine::cuda {

// ---- kernels ------------------------------------------------------------------------------

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, long long rows,
                                         int channels) {
    const int lane = threadIdx.x % kWarpSize;
    const long long row =
        blockIdx.x * (long long)(blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
    if (row >= rows)
        return;
    const float* x = inp + row * channels;
    float sum = 0.0f;
    for (int c = lane; c < channels; c += kWarpSize)
        sum += x[c];
    const float m = warp_sum(sum) / float(channels);
    float var = 0.0f;
    for (int c = lane; c < channels; c += kWarpSize)
        var += (x[c] - m) * (x[c] - m);
    var = warp_sum(var) / float(channels);
    const float s = 1.0f / sqrtf(var + 1e-5f);
    float* o = out + row * channels;
    for (int c = lane; c < channels; c += kWarpSize)
        o[c] = (x[c] - m) * s * weight[c] + bias[c];
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

// Dynamic shared memory: 2·channels floats (the block's dweight and dbias partial sums).
__global__ void layernorm_backward_kernel(float* dinp, float* dweight, float* dbias,
                                          const float* dout, const float* inp, const float* weight,
                                          const float* mean, const float* rstd, long long rows,
                                          int channels) {
    extern __shared__ float shared[];
    float* dweight_block = shared;
    float* dbias_block = shared + channels;
    for (int c = threadIdx.x; c < 2 * channels; c += blockDim.x)
        shared[c] = 0.0f;
    __syncthreads();
    const int lane = threadIdx.x % kWarpSize;
    const int warps_per_block = blockDim.x / kWarpSize;
    const long long warp_id = blockIdx.x * (long long)warps_per_block + threadIdx.x / kWarpSize;
    const long long warp_count = (long long)gridDim.x * warps_per_block;
    for (long long row = warp_id; row < rows; row += warp_count) {
        const float* x = inp + row * channels;
        const float* g = dout + row * channels;
        const float m = mean[row], s = rstd[row];
        if (dweight != nullptr) {
            for (int c = lane; c < channels; c += kWarpSize) {
                const float n = (x[c] - m) * s;
                atomicAdd(&dweight_block[c], g[c] * n);
                atomicAdd(&dbias_block[c], g[c]);
            }
        }
        if (dinp == nullptr)
            continue;
        // Every lane of the warp takes this branch or none: warp_sum needs all 32.
        float mean_g = 0.0f, mean_gn = 0.0f;
        for (int c = lane; c < channels; c += kWarpSize) {
            const float n = (x[c] - m) * s;
            const float gw = g[c] * weight[c];
            mean_g += gw;
            mean_gn += gw * n;
        }
        mean_g = warp_sum(mean_g) / float(channels);
        mean_gn = warp_sum(mean_gn) / float(channels);
        float* dx = dinp + row * channels;
        for (int c = lane; c < channels; c += kWarpSize) {
            const float n = (x[c] - m) * s;
            dx[c] += s * (g[c] * weight[c] - mean_g - n * mean_gn);
        }
    }
    if (dweight == nullptr)
        return;  // the whole block alike: no thread is left waiting at a barrier
    __syncthreads();
    for (int c = threadIdx.x; c < channels; c += blockDim.x) {
        atomicAdd(&dweight[c], dweight_block[c]);
        atomicAdd(&dbias[c], dbias_block[c]);
    }
}

__global__ void residual_forward_kernel(float* out, const float* a, const float* b, long long n) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = a[i] + b[i];
}

// ---- launchers ----------------------------------------------------------------------------

inline void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                              const float* weight, const float* bias, long long rows, int channels,
                              cudaStream_t stream) {
    NvtxRange range("layernorm_forward");
    if (rows == 0)
        return;
    constexpr int kThreads = 256;  // 8 rows per block
    layernorm_forward_kernel<<<ceil_div(rows, kThreads / kWarpSize), kThreads, 0, stream>>>(
        out, mean, rstd, inp, weight, bias, rows, channels);
    FULCRUM_CUDA_CHECK_LAUNCH();
}

inline void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, const float* mean,
                               const float* rstd, long long rows, int channels, int sm_count,
                               cudaStream_t stream) {
    NvtxRange range("layernorm_backward");
    if (rows == 0)
        return;
    constexpr int kThreads = 512;
    const std::size_t shared_bytes = 2 * std::size_t(channels) * sizeof(float);
    if (shared_bytes > 48 * 1024)
        FULCRUM_CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_kernel,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                int(shared_bytes)));
    // Two blocks per SM are enough to saturate memory bandwidth; more only adds atomics.
    const unsigned blocks =
        std::min<unsigned>(ceil_div(rows, kThreads / kWarpSize), unsigned(2 * sm_count));
    layernorm_backward_kernel<<<blocks, kThreads, shared_bytes, stream>>>(
        dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows, channels);
    FULCRUM_CUDA_CHECK_LAUNCH();
}

inline void residual_forward(float* out, const float* a, const float* b, long long n,
                             cudaStream_t stream) {
    NvtxRange range("residual_forward");
    if (n == 0)
        return;
    residual_forward_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(out, a, b, n);
    FULCRUM_CUDA_CHECK_LAUNCH();
}

}  // namespace fulcrum::engine::cuda
