// Causal attention over packed documents on the GPU, tiled with an online softmax
// (FlashAttention, Dao et al. 2022; the backward as in FlashAttention-2 §3.1.2).
// Math, spans and layout: engine/model/attention.h. In short, per head, for query row i of a
// span (position p_i = prefix + i in its document) and the document's keys j ≤ p_i:
//     s_ij = q_i·k_j / √hs,   lse_i = log Σ_j exp(s_ij),   o_i = Σ_j exp(s_ij − lse_i) v_j
//     D_i = do_i·o_i,  P_ij = exp(s_ij − lse_i),  dS_ij = P_ij (do_i·v_j − D_i)
//     dq_i += Σ_j dS_ij k_j / √hs,  dk_j += Σ_i dS_ij q_i / √hs,  dv_j += Σ_i P_ij do_i
//
// Tiling. The host cuts every span into query tiles of kQueryTile rows (and, for dk/dv, into
// key tiles of kKeyRows rows of the span's document prefix); the grid is (tiles, heads), so a
// block never straddles two documents and never looks at a key of another document — packed
// micro-batches cost Σ dᵢ², not (Σ dᵢ)².
//   * forward and dq: one thread per query row of the tile; K and V stream through shared
//     memory kKeyTile rows at a time; the forward keeps the running max m, the running sum l
//     and the unnormalised o in registers and rescales them once per key tile (online
//     softmax), so nothing of size T² is ever stored.
//   * dk/dv: one thread per key row; the query rows that see the tile stream through shared
//     memory with their lse and D; P is recomputed from q, k and lse (no stored probabilities).
//     Spans may share K/V rows (context parallelism: several chunks of one document), so
//     dk/dv are added to global memory with atomicAdd; dq rows belong to one span each.
// The head size is a template parameter rounded up to 16/32/64/128 (zero padding), so the
// per-thread loops unroll into registers. This is the simple correct version: fp32 CUDA cores,
// no tensor cores, no warp-level MMA; bench_cuda measures how far it is from the GEMM rate.
#pragma once

#include <vector>

#include "engine/backend/cuda/common.cuh"
#include "engine/model/attention.h"

namespace fulcrum::engine::cuda {

constexpr int kQueryTile = 64;  // query rows per block (forward, dq): one per thread
constexpr int kKeyTile = 32;    // K/V rows per shared-memory tile (forward, dq)
constexpr int kKeyRows = 64;    // key rows per block (dk/dv): one per thread
constexpr int kQueryStep = 32;  // query rows per shared-memory tile (dk/dv)
constexpr int kMaxHeadSize = 128;

// A block's share of one span: query rows [q_begin, q_begin + length) at document positions
// prefix…; the span's key window is positions [window_begin, window_end), and the K/V row of
// position m is kv_base + m (kv_base = the span's kv_begin − window_begin, which may be
// negative: only rows of the window are ever read). For dk/dv, key positions
// [key_begin, key_begin + key_count) of the window.
struct AttentionTile {
    int q_begin, kv_base, prefix, length;
    int key_begin, key_count;
    int window_begin, window_end;
};

// Row-strided views of Q, K, V, out, dout and the gradients (attention.h: the Q/K/V blocks of
// the fused QKV projection have row stride 3C).
struct AttentionViews {
    const float* q;
    const float* k;
    const float* v;
    const float* out;
    const float* dout;
    float* o;  // forward output
    float* dq;
    float* dk;
    float* dv;
    long long q_stride, k_stride, v_stride, out_stride, dout_stride, o_stride, dq_stride, dk_stride,
        dv_stride;
};

// ---- kernels ------------------------------------------------------------------------------

// Rows [first, first + count) of one head, zero-padded to HS columns and kRows rows.
template <int HS, int kRows>
__device__ inline void load_rows(float (*tile)[HS], const float* base, long long stride,
                                 long long first, int count, int head_offset, int hs) {
    for (int idx = threadIdx.x; idx < kRows * HS; idx += blockDim.x) {
        const int r = idx / HS, d = idx % HS;
        tile[r][d] = r < count && d < hs ? base[(first + r) * stride + head_offset + d] : 0.0f;
    }
}

template <int HS>
__global__ void __launch_bounds__(kQueryTile)
    attention_forward_kernel(AttentionViews views, float* lse, const AttentionTile* tiles,
                             int n_head, int hs, float scale) {
    __shared__ float k_tile[kKeyTile][HS];
    __shared__ float v_tile[kKeyTile][HS];
    const AttentionTile tile = tiles[blockIdx.x];
    const int h = blockIdx.y;
    const int head_offset = h * hs;
    const int i = threadIdx.x;
    const bool active = i < tile.length;
    const long long qrow = tile.q_begin + i;
    const int position = tile.prefix + i;
    float q[HS], o[HS];
#pragma unroll
    for (int d = 0; d < HS; ++d) {
        q[d] = active && d < hs ? views.q[qrow * views.q_stride + head_offset + d] : 0.0f;
        o[d] = 0.0f;
    }
    float running_max = -INFINITY, running_sum = 0.0f;
    // Keys the last row of the tile sees, and this row's own end (positions, exclusive).
    const int n_keys = min(tile.prefix + tile.length, tile.window_end);
    const int row_end = min(position + 1, tile.window_end);
    for (int j0 = tile.window_begin; j0 < n_keys; j0 += kKeyTile) {
        const int count = min(kKeyTile, n_keys - j0);
        __syncthreads();
        load_rows<HS, kKeyTile>(k_tile, views.k, views.k_stride, tile.kv_base + j0, count,
                                head_offset, hs);
        load_rows<HS, kKeyTile>(v_tile, views.v, views.v_stride, tile.kv_base + j0, count,
                                head_offset, hs);
        __syncthreads();
        if (!active || j0 >= row_end)
            continue;
        const int visible = min(count, row_end - j0);
        float scores[kKeyTile];
        float tile_max = running_max;
#pragma unroll
        for (int j = 0; j < kKeyTile; ++j) {
            float dot = 0.0f;
#pragma unroll
            for (int d = 0; d < HS; ++d)
                dot += q[d] * k_tile[j][d];
            scores[j] = j < visible ? dot * scale : -INFINITY;
            tile_max = fmaxf(tile_max, scores[j]);
        }
        const float correction = expf(running_max - tile_max);  // 0 on the first tile
        running_sum *= correction;
#pragma unroll
        for (int d = 0; d < HS; ++d)
            o[d] *= correction;
#pragma unroll
        for (int j = 0; j < kKeyTile; ++j) {
            const float p = expf(scores[j] - tile_max);  // exp(−inf) = 0 past `visible`
            running_sum += p;
#pragma unroll
            for (int d = 0; d < HS; ++d)
                o[d] += p * v_tile[j][d];
        }
        running_max = tile_max;
    }
    if (!active)
        return;
    // A row that sees no key of the window gets o = 0 and lse = −inf (attention.h).
    const bool seen = running_sum != 0.0f;
    const float inv_sum = seen ? 1.0f / running_sum : 0.0f;
    // Loops over the register arrays run to the compile-time HS, so that they stay in
    // registers (a runtime bound would index them and put them in local memory).
#pragma unroll
    for (int d = 0; d < HS; ++d)
        if (d < hs)
            views.o[qrow * views.o_stride + head_offset + d] = o[d] * inv_sum;
    lse[qrow * n_head + h] = seen ? running_max + logf(running_sum) : -INFINITY;
}

// D[row, h] = do_row · o_row over head h: one warp per (row, head).
__global__ void attention_delta_kernel(float* delta, AttentionViews views, long long rows,
                                       int n_head, int hs) {
    const long long warp = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    if (warp >= rows * n_head)
        return;
    const long long row = warp / n_head;
    const int head_offset = int(warp % n_head) * hs;
    float sum = 0.0f;
    for (int d = lane; d < hs; d += kWarpSize)
        sum += views.dout[row * views.dout_stride + head_offset + d] *
               views.out[row * views.out_stride + head_offset + d];
    sum = warp_sum(sum);
    if (lane == 0)
        delta[warp] = sum;
}

template <int HS>
__global__ void __launch_bounds__(kQueryTile)
    attention_backward_dq_kernel(AttentionViews views, const float* lse, const float* delta,
                                 const AttentionTile* tiles, int n_head, int hs, float scale) {
    __shared__ float k_tile[kKeyTile][HS];
    __shared__ float v_tile[kKeyTile][HS];
    const AttentionTile tile = tiles[blockIdx.x];
    const int h = blockIdx.y;
    const int head_offset = h * hs;
    const int i = threadIdx.x;
    const bool active = i < tile.length;
    const long long qrow = tile.q_begin + i;
    const int position = tile.prefix + i;
    float q[HS], dout[HS], dq[HS];
#pragma unroll
    for (int d = 0; d < HS; ++d) {
        const bool in = active && d < hs;
        q[d] = in ? views.q[qrow * views.q_stride + head_offset + d] : 0.0f;
        dout[d] = in ? views.dout[qrow * views.dout_stride + head_offset + d] : 0.0f;
        dq[d] = 0.0f;
    }
    const float lse_i = active ? lse[qrow * n_head + h] : 0.0f;
    const float d_i = active ? delta[qrow * n_head + h] : 0.0f;
    const int n_keys = min(tile.prefix + tile.length, tile.window_end);
    const int row_end = min(position + 1, tile.window_end);
    for (int j0 = tile.window_begin; j0 < n_keys; j0 += kKeyTile) {
        const int count = min(kKeyTile, n_keys - j0);
        __syncthreads();
        load_rows<HS, kKeyTile>(k_tile, views.k, views.k_stride, tile.kv_base + j0, count,
                                head_offset, hs);
        load_rows<HS, kKeyTile>(v_tile, views.v, views.v_stride, tile.kv_base + j0, count,
                                head_offset, hs);
        __syncthreads();
        if (!active || j0 >= row_end)
            continue;
        const int visible = min(count, row_end - j0);
        for (int j = 0; j < visible; ++j) {
            float dot = 0.0f, dp = 0.0f;
#pragma unroll
            for (int d = 0; d < HS; ++d) {
                dot += q[d] * k_tile[j][d];
                dp += dout[d] * v_tile[j][d];
            }
            const float p = expf(dot * scale - lse_i);
            const float ds = p * (dp - d_i) * scale;
#pragma unroll
            for (int d = 0; d < HS; ++d)
                dq[d] += ds * k_tile[j][d];
        }
    }
    if (!active)
        return;
#pragma unroll
    for (int d = 0; d < HS; ++d)
        if (d < hs)
            views.dq[qrow * views.dq_stride + head_offset + d] += dq[d];
}

template <int HS>
__global__ void __launch_bounds__(kKeyRows)
    attention_backward_dkdv_kernel(AttentionViews views, const float* lse, const float* delta,
                                   const AttentionTile* tiles, int n_head, int hs, float scale) {
    __shared__ float q_tile[kQueryStep][HS];
    __shared__ float dout_tile[kQueryStep][HS];
    __shared__ float lse_tile[kQueryStep];
    __shared__ float delta_tile[kQueryStep];
    const AttentionTile tile = tiles[blockIdx.x];
    const int h = blockIdx.y;
    const int head_offset = h * hs;
    const int key = tile.key_begin + int(threadIdx.x);  // position in the document
    const bool active = int(threadIdx.x) < tile.key_count;
    const long long kvrow = tile.kv_base + key;
    float k[HS], v[HS], dk[HS], dv[HS];
#pragma unroll
    for (int d = 0; d < HS; ++d) {
        const bool in = active && d < hs;
        k[d] = in ? views.k[kvrow * views.k_stride + head_offset + d] : 0.0f;
        v[d] = in ? views.v[kvrow * views.v_stride + head_offset + d] : 0.0f;
        dk[d] = 0.0f;
        dv[d] = 0.0f;
    }
    // Query row i (position prefix + i) sees this tile's keys from i = key_begin − prefix on.
    const int first_query = max(0, tile.key_begin - tile.prefix);
    for (int i0 = first_query; i0 < tile.length; i0 += kQueryStep) {
        const int count = min(kQueryStep, tile.length - i0);
        __syncthreads();
        load_rows<HS, kQueryStep>(q_tile, views.q, views.q_stride, tile.q_begin + i0, count,
                                  head_offset, hs);
        load_rows<HS, kQueryStep>(dout_tile, views.dout, views.dout_stride, tile.q_begin + i0,
                                  count, head_offset, hs);
        if (threadIdx.x < kQueryStep) {
            const long long row = tile.q_begin + i0 + threadIdx.x;
            const bool in = int(threadIdx.x) < count;
            lse_tile[threadIdx.x] = in ? lse[row * n_head + h] : 0.0f;
            delta_tile[threadIdx.x] = in ? delta[row * n_head + h] : 0.0f;
        }
        __syncthreads();
        if (!active)
            continue;
        for (int i = 0; i < count; ++i) {
            if (tile.prefix + i0 + i < key)
                continue;  // causal: this query comes before the key
            float dot = 0.0f, dp = 0.0f;
#pragma unroll
            for (int d = 0; d < HS; ++d) {
                dot += q_tile[i][d] * k[d];
                dp += dout_tile[i][d] * v[d];
            }
            const float p = expf(dot * scale - lse_tile[i]);
            const float ds = p * (dp - delta_tile[i]) * scale;
#pragma unroll
            for (int d = 0; d < HS; ++d) {
                dk[d] += ds * q_tile[i][d];
                dv[d] += p * dout_tile[i][d];
            }
        }
    }
    if (!active)
        return;
#pragma unroll
    for (int d = 0; d < HS; ++d) {
        if (d < hs) {
            atomicAdd(&views.dk[kvrow * views.dk_stride + head_offset + d], dk[d]);
            atomicAdd(&views.dv[kvrow * views.dv_stride + head_offset + d], dv[d]);
        }
    }
}

// ---- launchers ----------------------------------------------------------------------------

// Query tiles of every span (forward and dq).
inline std::vector<AttentionTile> query_tiles(std::span<const AttentionSpan> spans) {
    std::vector<AttentionTile> tiles;
    for (const AttentionSpan& s : spans) {
        for (int i0 = 0; i0 < s.length; i0 += kQueryTile)
            tiles.push_back({s.q_begin + i0, s.kv_begin - s.key_begin, s.prefix + i0,
                             std::min(kQueryTile, s.length - i0), 0, 0, s.key_begin, s.key_end});
    }
    return tiles;
}

// Key tiles of every span's visible keys (dk/dv): its window, up to what its last row sees.
inline std::vector<AttentionTile> key_tiles(std::span<const AttentionSpan> spans) {
    std::vector<AttentionTile> tiles;
    for (const AttentionSpan& s : spans) {
        if (s.length == 0)
            continue;
        const int n_keys = s.visible_end(s.length - 1);
        for (int j0 = s.key_begin; j0 < n_keys; j0 += kKeyRows)
            tiles.push_back({s.q_begin, s.kv_begin - s.key_begin, s.prefix, s.length, j0,
                             std::min(kKeyRows, n_keys - j0), s.key_begin, s.key_end});
    }
    return tiles;
}

// One window's partial result folded into the running one (attention.h, attention_merge): one
// thread per (row, head).
__global__ void attention_merge_kernel(float* out, long long out_stride, float* lse,
                                       const float* part, long long part_stride,
                                       const float* part_lse, long long rows, int n_head, int hs) {
    const long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (index >= rows * n_head)
        return;
    const long long row = index / n_head;
    const int head_offset = int(index % n_head) * hs;
    const float a = lse[index], b = part_lse[index];
    if (b == -INFINITY)
        return;
    float* o = out + row * out_stride + head_offset;
    const float* p = part + row * part_stride + head_offset;
    if (a == -INFINITY) {
        for (int d = 0; d < hs; ++d)
            o[d] = p[d];
        lse[index] = b;
        return;
    }
    const float m = fmaxf(a, b);
    const float merged = m + logf(expf(a - m) + expf(b - m));
    const float ca = expf(a - merged), cb = expf(b - merged);
    for (int d = 0; d < hs; ++d)
        o[d] = ca * o[d] + cb * p[d];
    lse[index] = merged;
}

inline void attention_merge(float* out, long long out_stride, float* lse, const float* part,
                            long long part_stride, const float* part_lse, long long rows,
                            int n_head, int hs, cudaStream_t stream) {
    NvtxRange range("attention_merge");
    if (rows == 0)
        return;
    attention_merge_kernel<<<ceil_div(rows * n_head, 256), 256, 0, stream>>>(
        out, out_stride, lse, part, part_stride, part_lse, rows, n_head, hs);
    FULCRUM_CUDA_CHECK_LAUNCH();
}

inline int padded_head_size(int hs) {
    return hs <= 16 ? 16 : hs <= 32 ? 32 : hs <= 64 ? 64 : 128;
}

// `tiles` is a device array of `n_tiles` query tiles.
inline void attention_forward(const AttentionViews& views, float* lse, const AttentionTile* tiles,
                              int n_tiles, int n_head, int hs, cudaStream_t stream) {
    NvtxRange range("attention_forward");
    if (n_tiles == 0)
        return;
    const dim3 grid{unsigned(n_tiles), unsigned(n_head)};
    const float scale = 1.0f / sqrtf(float(hs));
    switch (padded_head_size(hs)) {
        case 16:
            attention_forward_kernel<16>
                <<<grid, kQueryTile, 0, stream>>>(views, lse, tiles, n_head, hs, scale);
            break;
        case 32:
            attention_forward_kernel<32>
                <<<grid, kQueryTile, 0, stream>>>(views, lse, tiles, n_head, hs, scale);
            break;
        case 64:
            attention_forward_kernel<64>
                <<<grid, kQueryTile, 0, stream>>>(views, lse, tiles, n_head, hs, scale);
            break;
        default:
            attention_forward_kernel<128>
                <<<grid, kQueryTile, 0, stream>>>(views, lse, tiles, n_head, hs, scale);
            break;
    }
    FULCRUM_CUDA_CHECK_LAUNCH();
}

// D = dout · out per query row and head, into `delta` (rows·n_head floats), for the backward
// of both paths (this file's kernels and dense_attention.cuh).
inline void attention_delta(const AttentionViews& views, float* delta, long long rows, int n_head,
                            int hs, cudaStream_t stream) {
    if (rows == 0)
        return;
    attention_delta_kernel<<<ceil_div(rows * n_head * kWarpSize, 256), 256, 0, stream>>>(
        delta, views, rows, n_head, hs);
    FULCRUM_CUDA_CHECK_LAUNCH();
}

// `delta` holds D (attention_delta); `q_tiles`/`k_tiles` are device arrays.
inline void attention_backward(const AttentionViews& views, const float* lse, const float* delta,
                               const AttentionTile* q_tiles, int n_q_tiles,
                               const AttentionTile* k_tiles, int n_k_tiles, int n_head, int hs,
                               cudaStream_t stream) {
    NvtxRange range("attention_backward");
    if (n_q_tiles == 0)
        return;
    const float scale = 1.0f / sqrtf(float(hs));
    const dim3 q_grid{unsigned(n_q_tiles), unsigned(n_head)};
    const dim3 k_grid{unsigned(n_k_tiles), unsigned(n_head)};
    switch (padded_head_size(hs)) {
#define FULCRUM_ATTENTION_BACKWARD(HS)                                                            \
    case HS:                                                                                      \
        attention_backward_dq_kernel<HS>                                                          \
            <<<q_grid, kQueryTile, 0, stream>>>(views, lse, delta, q_tiles, n_head, hs, scale);   \
        FULCRUM_CUDA_CHECK_LAUNCH();                                                              \
        if (n_k_tiles > 0) { /* no key tiles: every window starts after its queries */            \
            attention_backward_dkdv_kernel<HS>                                                    \
                <<<k_grid, kKeyRows, 0, stream>>>(views, lse, delta, k_tiles, n_head, hs, scale); \
            FULCRUM_CUDA_CHECK_LAUNCH();                                                          \
        }                                                                                         \
        break;
        FULCRUM_ATTENTION_BACKWARD(16)
        FULCRUM_ATTENTION_BACKWARD(32)
        FULCRUM_ATTENTION_BACKWARD(64)
        default:
            FULCRUM_ATTENTION_BACKWARD(128)
#undef FULCRUM_ATTENTION_BACKWARD
    }
}

}  // namespace fulcrum::engine::cuda
