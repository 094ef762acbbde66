// The linear layer's GEMMs through cuBLAS. Math and layout: engine/model/matmul.h.
//     out = inp · Wᵀ + b          dinp += dout · W          dW += doutᵀ · inp          db += Σ dout
//
// Row-major onto column-major. cuBLAS is column-major; a row-major [R, K] array with row
// stride ld is, to cuBLAS, the column-major [K, R] array Xᵀ with leading dimension ld. So each
// row-major product C = A·B is issued as Cᵀ = Bᵀ·Aᵀ (llm.c's matmul_forward/backward):
//     outᵀ [OC, N]  = op_T(W: col-major [C, OC], ld C) · (inp: col-major [C, N], ld inp_stride)
//     dinpᵀ [C, N] += (W: col-major [C, OC], ld C) · (dout: col-major [OC, N], ld dout_stride)
//     dWᵀ  [C, OC] += (inp: col-major [C, N]) · op_T(dout: col-major [OC, N])
// dinp, dW and db are each optional (nullptr): Zero Bubble's input-gradient pass issues the
// first GEMM alone and its weight-gradient pass the other two (engine/model/matmul.h).
// The gradients accumulate with beta = 1 (backend.h). Strided inp/dout (the Q/K/V column
// views) are just a leading dimension larger than the row length.
//
// Precision: cublasGemmEx on fp32 arrays with CUBLAS_COMPUTE_32F (fp32 mode) or
// CUBLAS_COMPUTE_32F_FAST_16BF (bf16 mode: operands rounded to bf16, tensor cores, fp32
// accumulate and output). See cuda_backend.h.
//
// The bias is a separate pass in both directions; fusing it into a cuBLASLt epilogue
// (CUBLASLT_EPILOGUE_BIAS / BGRADB) is a later optimisation.
#pragma once

#include "engine/backend/cuda/common.cuh"

namespace fulcrum::engine::cuda {

// ---- kernels ------------------------------------------------------------------------------

__global__ void add_bias_kernel(float* out, const float* bias, long long rows, int out_ch) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < rows * out_ch)
        out[i] += bias[i % out_ch];
}

// db[c] += Σ_r dout[r, c]. Block (32, 8): threadIdx.x picks the column (coalesced rows),
// threadIdx.y and blockIdx.y split the rows; partial sums meet in shared memory, then one
// atomicAdd per column and block.
__global__ void bias_backward_kernel(float* dbias, const float* dout, long long dout_stride,
                                     long long rows, int out_ch) {
    __shared__ float partial[8][kWarpSize];
    const int c = blockIdx.x * kWarpSize + threadIdx.x;
    float sum = 0.0f;
    if (c < out_ch) {
        for (long long r = blockIdx.y * 8LL + threadIdx.y; r < rows; r += 8LL * gridDim.y)
            sum += dout[r * dout_stride + c];
    }
    partial[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && c < out_ch) {
        for (int y = 1; y < 8; ++y)
            sum += partial[y][threadIdx.x];
        atomicAdd(&dbias[c], sum);
    }
}

// ---- launchers ----------------------------------------------------------------------------

inline void gemm(cublasHandle_t handle, cublasComputeType_t compute, cublasOperation_t trans_a,
                 cublasOperation_t trans_b, int m, int n, int k, const float* a, long long lda,
                 const float* b, long long ldb, float beta, float* c, long long ldc) {
    const float alpha = 1.0f;
    FULCRUM_CUBLAS_CHECK(cublasGemmEx(handle, trans_a, trans_b, m, n, k, &alpha, a, CUDA_R_32F,
                                      int(lda), b, CUDA_R_32F, int(ldb), &beta, c, CUDA_R_32F,
                                      int(ldc), compute, CUBLAS_GEMM_DEFAULT));
}

inline void matmul_forward(cublasHandle_t handle, cublasComputeType_t compute, float* out,
                           const float* inp, long long inp_stride, const float* weight,
                           const float* bias, long long rows, int in_ch, int out_ch,
                           cudaStream_t stream) {
    NvtxRange range("matmul_forward");
    if (rows == 0)
        return;
    FULCRUM_CUBLAS_CHECK(cublasSetStream(handle, stream));
    gemm(handle, compute, CUBLAS_OP_T, CUBLAS_OP_N, out_ch, int(rows), in_ch, weight, in_ch, inp,
         inp_stride, 0.0f, out, out_ch);
    if (bias != nullptr) {
        const long long n = rows * out_ch;
        add_bias_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(out, bias, rows, out_ch);
        FULCRUM_CUDA_CHECK_LAUNCH();
    }
}

inline void matmul_backward(cublasHandle_t handle, cublasComputeType_t compute, float* dinp,
                            float* dweight, float* dbias, const float* dout, long long dout_stride,
                            const float* inp, long long inp_stride, const float* weight,
                            long long rows, int in_ch, int out_ch, cudaStream_t stream) {
    NvtxRange range("matmul_backward");
    if (rows == 0)
        return;
    FULCRUM_CUBLAS_CHECK(cublasSetStream(handle, stream));
    if (dinp != nullptr) {
        gemm(handle, compute, CUBLAS_OP_N, CUBLAS_OP_N, in_ch, int(rows), out_ch, weight, in_ch,
             dout, dout_stride, 1.0f, dinp, in_ch);
    }
    if (dweight != nullptr) {
        gemm(handle, compute, CUBLAS_OP_N, CUBLAS_OP_T, in_ch, out_ch, int(rows), inp, inp_stride,
             dout, dout_stride, 1.0f, dweight, in_ch);
    }
    if (dbias != nullptr) {
        const dim3 block(kWarpSize, 8);
        const dim3 grid(ceil_div(out_ch, kWarpSize), std::min<unsigned>(ceil_div(rows, 8), 64u));
        bias_backward_kernel<<<grid, block, 0, stream>>>(dbias, dout, dout_stride, rows, out_ch);
        FULCRUM_CUDA_CHECK_LAUNCH();
    }
}

}  // namespace fulcrum::engine::cuda
