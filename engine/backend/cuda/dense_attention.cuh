// Attention of long spans on tensor cores: the scores of a block of query rows are
// materialised and the five products of attention.h go through cuBLAS, all heads of the block
// in one strided-batched GEMM; two small kernels do the causal softmax and the gradient of the
// scores. The tiled kernels of attention.cuh run on the CUDA cores in fp32 and were measured at
// 2% of the GEMM rate on an H200 (bench/README.md, "The CUDA engine on a GPU"); for a long
// document the GEMMs are what the step is made of, so this path takes every span of at least
// `min_rows` query rows and the tiled kernels the rest (one-token documents, short chunks).
//
// Per block of query rows (rows [q_begin, q_begin + rows) at document positions prefix…, the
// keys of the window up to what the block's last row sees: `keys` K/V rows from kv_row) and per
// head, row-major [rows, keys] arrays S and G in the workspace:
//     forward   S = scale · Q Kᵀ;  softmax rows (causal, window): S := P, lse;  O = P V
//     backward  S = scale · Q Kᵀ;  G = dO Vᵀ;  S := P = exp(S − lse), G := dS = P (G − D);
//               dV += Pᵀ dO;  dK += scale · dSᵀ Q;  dQ += scale · dS K
// Row-major onto column-major as in matmul.cuh: a row-major [R, C] array of row stride ld is
// cuBLAS's column-major [C, R] with leading dimension ld, so S (row-major [rows, keys]) is
// computed as Sᵀ = K Qᵀ, and so on. Blocks of at most kDenseRows query rows keep the causal
// waste (scores above the diagonal, masked) and the workspace small; the masked scores cost
// GEMM time but no accuracy: P is exactly 0 there.
//
// Precision: fp32 GEMMs (CUBLAS_COMPUTE_32F) in both modes, as the tiled kernels compute; the
// linear layers alone take bf16 in bf16 mode. With bf16 operands here, and again with TF32,
// test_cuda_backend's bf16LossTracksFp32 saw the 30-step loss curve 2.4% from fp32's at step 18
// on an H200 (2% allowed; with fp32 attention it stays within): the scores go through exp,
// which turns their rounding into relative error of P. The softmax and the score gradients are
// fp32 too.
#pragma once

#include <algorithm>
#include <span>
#include <vector>

#include "engine/backend/cuda/attention.cuh"
#include "engine/backend/cuda/common.cuh"

namespace fulcrum::engine::cuda {

constexpr int kDenseRows = 512;                          // query rows per block
constexpr long long kDenseWorkspaceFloats = 64LL << 20;  // per array: 256 MiB

// A block of query rows of one span, with the keys its last row sees.
struct DenseBlock {
    int q_begin;    // first query row
    int kv_row;     // K/V row of the window's first position (the span's kv_begin)
    int prefix;     // document position of the first query row
    int rows;       // query rows
    int key_begin;  // document position of the first key (the window's start)
    int key_end;    // the window's end (exclusive)
    int keys;       // keys of the window up to the last row's position: > 0
};

// Spans of at least `min_rows` query rows become dense blocks; the rest, and the rows of a
// dense span that see no key of their window yet (they get out = 0, lse = −∞ from the tiled
// kernels), are returned as spans for the tiled kernels. min_rows <= 0: no dense blocks.
inline std::vector<DenseBlock> split_dense(std::span<const AttentionSpan> spans, int min_rows,
                                           std::vector<AttentionSpan>& tiled) {
    std::vector<DenseBlock> blocks;
    tiled.clear();
    for (const AttentionSpan& s : spans) {
        if (min_rows <= 0 || s.length < min_rows) {
            tiled.push_back(s);
            continue;
        }
        for (int i0 = 0; i0 < s.length; i0 += kDenseRows) {
            const int rows = std::min(kDenseRows, s.length - i0);
            const int keys = s.visible_end(i0 + rows - 1) - s.key_begin;
            if (keys <= 0) {
                tiled.push_back(
                    {s.q_begin + i0, s.kv_begin, s.prefix + i0, rows, s.key_begin, s.key_end});
                continue;
            }
            blocks.push_back(
                {s.q_begin + i0, s.kv_begin, s.prefix + i0, rows, s.key_begin, s.key_end, keys});
        }
    }
    return blocks;
}

// How many heads of a block fit in the workspace at once (at least one).
inline int dense_head_group(const DenseBlock& block, int n_head) {
    const long long per_head = (long long)block.rows * block.keys;
    return int(std::clamp<long long>(kDenseWorkspaceFloats / per_head, 1, n_head));
}

// ---- kernels ------------------------------------------------------------------------------

// Keys of the window that query row i of the block sees: [0, visible).
__device__ inline int dense_visible(const DenseBlock& b, int i) {
    return max(0, min(min(b.prefix + i + 1, b.key_end) - b.key_begin, b.keys));
}

// One block of threads per (row, head): the row of scaled scores becomes its probabilities, 0
// past what the row sees, and its lse (−∞ for a row that sees nothing: then all zeros).
__global__ void dense_softmax_kernel(float* s, float* lse, DenseBlock b, int n_head, int h0) {
    const int i = blockIdx.x, hh = blockIdx.y;
    float* row = s + ((long long)hh * b.rows + i) * b.keys;
    const int visible = dense_visible(b, i);
    // Each thread's running max and sum (online softmax), then the block's.
    float m = -INFINITY, l = 0.0f;
    for (int j = threadIdx.x; j < visible; j += blockDim.x) {
        const float x = row[j];
        if (x > m) {
            l = l * expf(m - x) + 1.0f;
            m = x;
        } else {
            l += expf(x - m);
        }
    }
    const float row_max = block_max(m);
    const float sum = block_sum(m == -INFINITY ? 0.0f : l * expf(m - row_max));
    const float row_lse = visible > 0 ? row_max + logf(sum) : -INFINITY;
    for (int j = threadIdx.x; j < b.keys; j += blockDim.x)
        row[j] = j < visible ? expf(row[j] - row_lse) : 0.0f;
    if (threadIdx.x == 0)
        lse[(long long)(b.q_begin + i) * n_head + h0 + hh] = row_lse;
}

// S (scaled scores) := P, G (dO·Vᵀ) := dS = P (G − D), one block of threads per (row, head).
__global__ void dense_score_gradient_kernel(float* s, float* g, const float* lse,
                                            const float* delta, DenseBlock b, int n_head, int h0) {
    const int i = blockIdx.x, hh = blockIdx.y;
    const long long offset = ((long long)hh * b.rows + i) * b.keys;
    const long long index = (long long)(b.q_begin + i) * n_head + h0 + hh;
    const float row_lse = lse[index], d = delta[index];
    const int visible = row_lse == -INFINITY ? 0 : dense_visible(b, i);
    for (int j = threadIdx.x; j < b.keys; j += blockDim.x) {
        const float p = j < visible ? expf(s[offset + j] - row_lse) : 0.0f;
        s[offset + j] = p;
        g[offset + j] = p * (g[offset + j] - d);
    }
}

// ---- launchers ----------------------------------------------------------------------------

// C = alpha · op(A) op(B) + beta · C over `batch` heads; A, B and C step by their strides.
inline void gemm_batched(cublasHandle_t handle, cublasComputeType_t compute,
                         cublasOperation_t trans_a, cublasOperation_t trans_b, int m, int n, int k,
                         float alpha, const float* a, long long lda, long long stride_a,
                         const float* b, long long ldb, long long stride_b, float beta, float* c,
                         long long ldc, long long stride_c, int batch) {
    FULCRUM_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        handle, trans_a, trans_b, m, n, k, &alpha, a, CUDA_R_32F, int(lda), stride_a, b, CUDA_R_32F,
        int(ldb), stride_b, &beta, c, CUDA_R_32F, int(ldc), stride_c, batch, compute,
        CUBLAS_GEMM_DEFAULT));
}

// `s` holds kDenseWorkspaceFloats floats at least (or one head of the largest block).
inline void dense_attention_forward(cublasHandle_t handle, cublasComputeType_t compute,
                                    const AttentionViews& v, float* lse,
                                    std::span<const DenseBlock> blocks, float* s, int n_head,
                                    int hs, cudaStream_t stream) {
    NvtxRange range("attention_forward_dense");
    FULCRUM_CUBLAS_CHECK(cublasSetStream(handle, stream));
    const float scale = 1.0f / sqrtf(float(hs));
    for (const DenseBlock& b : blocks) {
        const long long area = (long long)b.rows * b.keys;
        const int group = dense_head_group(b, n_head);
        for (int h0 = 0; h0 < n_head; h0 += group) {
            const int heads = std::min(group, n_head - h0);
            const long long col = (long long)h0 * hs;
            gemm_batched(handle, compute, CUBLAS_OP_T, CUBLAS_OP_N, b.keys, b.rows, hs, scale,
                         v.k + b.kv_row * v.k_stride + col, v.k_stride, hs,
                         v.q + b.q_begin * v.q_stride + col, v.q_stride, hs, 0.0f, s, b.keys, area,
                         heads);
            dense_softmax_kernel<<<dim3(b.rows, heads), 256, 0, stream>>>(s, lse, b, n_head, h0);
            FULCRUM_CUDA_CHECK_LAUNCH();
            gemm_batched(handle, compute, CUBLAS_OP_N, CUBLAS_OP_N, hs, b.rows, b.keys, 1.0f,
                         v.v + b.kv_row * v.v_stride + col, v.v_stride, hs, s, b.keys, area, 0.0f,
                         v.o + b.q_begin * v.o_stride + col, v.o_stride, hs, heads);
        }
    }
}

// Accumulates into dq, dk, dv. `delta` holds D for every query row (attention_delta_kernel);
// `s` and `g` kDenseWorkspaceFloats floats each at least.
inline void dense_attention_backward(cublasHandle_t handle, cublasComputeType_t compute,
                                     const AttentionViews& v, const float* lse, const float* delta,
                                     std::span<const DenseBlock> blocks, float* s, float* g,
                                     int n_head, int hs, cudaStream_t stream) {
    NvtxRange range("attention_backward_dense");
    FULCRUM_CUBLAS_CHECK(cublasSetStream(handle, stream));
    const float scale = 1.0f / sqrtf(float(hs));
    for (const DenseBlock& b : blocks) {
        const long long area = (long long)b.rows * b.keys;
        const int group = dense_head_group(b, n_head);
        for (int h0 = 0; h0 < n_head; h0 += group) {
            const int heads = std::min(group, n_head - h0);
            const long long col = (long long)h0 * hs;
            const float* q = v.q + b.q_begin * v.q_stride + col;
            const float* k = v.k + b.kv_row * v.k_stride + col;
            const float* val = v.v + b.kv_row * v.v_stride + col;
            const float* dout = v.dout + b.q_begin * v.dout_stride + col;
            gemm_batched(handle, compute, CUBLAS_OP_T, CUBLAS_OP_N, b.keys, b.rows, hs, scale, k,
                         v.k_stride, hs, q, v.q_stride, hs, 0.0f, s, b.keys, area, heads);
            gemm_batched(handle, compute, CUBLAS_OP_T, CUBLAS_OP_N, b.keys, b.rows, hs, 1.0f, val,
                         v.v_stride, hs, dout, v.dout_stride, hs, 0.0f, g, b.keys, area, heads);
            dense_score_gradient_kernel<<<dim3(b.rows, heads), 256, 0, stream>>>(s, g, lse, delta,
                                                                                 b, n_head, h0);
            FULCRUM_CUDA_CHECK_LAUNCH();
            gemm_batched(handle, compute, CUBLAS_OP_N, CUBLAS_OP_T, hs, b.keys, b.rows, 1.0f, dout,
                         v.dout_stride, hs, s, b.keys, area, 1.0f,
                         v.dv + b.kv_row * v.dv_stride + col, v.dv_stride, hs, heads);
            gemm_batched(handle, compute, CUBLAS_OP_N, CUBLAS_OP_T, hs, b.keys, b.rows, scale, q,
                         v.q_stride, hs, g, b.keys, area, 1.0f, v.dk + b.kv_row * v.dk_stride + col,
                         v.dk_stride, hs, heads);
            gemm_batched(handle, compute, CUBLAS_OP_N, CUBLAS_OP_N, hs, b.rows, b.keys, scale, k,
                         v.k_stride, hs, g, b.keys, area, 1.0f,
                         v.dq + b.q_begin * v.dq_stride + col, v.dq_stride, hs, heads);
        }
    }
}

}  // namespace fulcrum::engine::cuda
