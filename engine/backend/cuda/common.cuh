// What every CUDA kernel header of the backend shares: error checks, NVTX ranges, warp and
// block reductions. Included only by .cu files of engine/backend/cuda/.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtCudaRt.h>  // nvtxNameCudaStreamA

#include <cstdio>
#include <cstdlib>

namespace fulcrum::engine::cuda {

// A failed CUDA or cuBLAS call is a programming or environment error the engine cannot
// recover from (a bad launch, out of memory, a lost device): abort with where and why, like
// FULCRUM_CHECK.
[[noreturn]] inline void cuda_failed(const char* what, const char* message, const char* file,
                                     int line) {
    std::fprintf(stderr, "fulcrum engine: %s:%d: CUDA error: %s (%s)\n", file, line, message, what);
    std::abort();
}

#define FULCRUM_CUDA_CHECK(call)                                                             \
    do {                                                                                     \
        const cudaError_t fulcrum_status_ = (call);                                          \
        if (fulcrum_status_ != cudaSuccess)                                                  \
            ::fulcrum::engine::cuda::cuda_failed(#call, cudaGetErrorString(fulcrum_status_), \
                                                 __FILE__, __LINE__);                        \
    } while (false)

#define FULCRUM_CUBLAS_CHECK(call)                                                              \
    do {                                                                                        \
        const cublasStatus_t fulcrum_status_ = (call);                                          \
        if (fulcrum_status_ != CUBLAS_STATUS_SUCCESS)                                           \
            ::fulcrum::engine::cuda::cuda_failed(#call, cublasGetStatusString(fulcrum_status_), \
                                                 __FILE__, __LINE__);                           \
    } while (false)

// After every launch: a bad configuration (too many threads, too much shared memory) shows
// up here, at the launcher that caused it, not at the next synchronising call.
#define FULCRUM_CUDA_CHECK_LAUNCH() FULCRUM_CUDA_CHECK(cudaGetLastError())

// The NVTX range a launcher opens for its whole duration ("attention_forward", ...). With no
// tool attached, nvtxRangePushA is a no-op.
class NvtxRange {
public:
    explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
    ~NvtxRange() { nvtxRangePop(); }
    NvtxRange(const NvtxRange&) = delete;
    NvtxRange& operator=(const NvtxRange&) = delete;
};

inline unsigned ceil_div(long long a, long long b) {
    return unsigned((a + b - 1) / b);
}

constexpr int kWarpSize = 32;

template <typename T>
__device__ inline T warp_sum(T value) {
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
        value += __shfl_xor_sync(0xffffffffu, value, offset);
    return value;
}

__device__ inline float warp_max(float value) {
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
        value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
    return value;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
template <typename T>
__device__ inline T block_sum(T value) {
    __shared__ T partial[kWarpSize];
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    const int warps = blockDim.x / kWarpSize;
    value = warp_sum(value);
    __syncthreads();  // `partial` may still be read by a previous call
    if (lane == 0)
        partial[warp] = value;
    __syncthreads();
    value = lane < warps ? partial[lane] : T(0);
    return warp_sum(value);
}

__device__ inline float block_max(float value) {
    __shared__ float partial[kWarpSize];
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    const int warps = blockDim.x / kWarpSize;
    value = warp_max(value);
    __syncthreads();
    if (lane == 0)
        partial[warp] = value;
    __syncthreads();
    value = lane < warps ? partial[lane] : -INFINITY;
    return warp_max(value);
}

}  // namespace fulcrum::engine::cuda
