// Causal multi-head attention over packed documents.
//
// Math, per head h (head size hs = C / n_head, scale = 1/√hs), for a query token i at position
// p_i inside its document D(i):
//     s_ij = scale · q_i · k_j            for every j in D(i) with position p_j ≤ p_i
//     lse_i = log Σ_j exp(s_ij)           (saved: one float per token and head)
//     P_ij  = exp(s_ij − lse_i)
//     o_i   = Σ_j P_ij · v_j
// A token never sees a token of another document, so packing several documents into one
// sequence trains each of them exactly as if it were alone (docs/sources.md, "Workload balancing":
// attention work of a packed micro-batch is Σ dᵢ², not (Σ dᵢ)²).
//
// Backward (the FlashAttention recomputation: P is rebuilt from q, k and lse, never stored,
// so memory is O(T·n_head), not O(Σ dᵢ²)):
//     D_i    = do_i · o_i
//     dP_ij  = do_i · v_j
//     dS_ij  = P_ij · (dP_ij − D_i)
//     dq_i  += scale · Σ_j dS_ij · k_j
//     dk_j  += scale · Σ_i dS_ij · q_i
//     dv_j  += Σ_i P_ij · do_i
//
// Memory layout. Q, K, V, out and their gradients are row-major [tokens, C] views whose
// rows may be strided: the serial model passes the three column blocks of its fused QKV
// projection [T, 3C] (row stride 3C). Head h of a row is columns [h·hs, (h+1)·hs). lse is
// [T_q, n_head] row-major.
//
// The `omp simd` pragmas (compiled with -fopenmp-simd: no OpenMP runtime) let the compiler
// vectorise the head-size reductions, which strict IEEE ordering otherwise forbids.
//
// Which query attends to which keys is given by AttentionSpans, not by a mask. A span is a
// run of consecutive query rows of ONE document together with where that document's keys
// start in K/V:
//     query row  q_begin + i  (i < length)  has position  prefix + i  in its document and
//     attends to K/V rows  kv_begin … kv_begin + prefix + i  (the document's positions 0…p).
// Serial training makes one span per document with prefix 0 and q_begin == kv_begin (Q and
// K/V come from the same tokens). Context parallelism will hand a rank the query rows of its
// own chunks of each document (prefix = where the chunk starts, WLB-LLM's per-document
// sharding) and K/V gathered for the whole document prefix; dk/dv then hold gradients for
// the gathered rows, to be reduce-scattered back. The kernels below need no change for that.
//
// Key windows (FPDT-style chunked attention, chunked_attention.h). A span may see only the
// document positions [key_begin, key_end) of its causal prefix; the K/V row of position m is
// then kv_begin + (m − key_begin), so a chunk of K/V staged alone in a buffer is passed with
// kv_begin = its first row. The defaults (0, unbounded) are the whole prefix. A query row that
// sees no key of its window gets out = 0 and lse = −∞, which attention_merge treats as "no
// contribution". The partial results of the windows of a prefix combine exactly:
//     lse = log Σ_w exp(lse_w),   o = Σ_w exp(lse_w − lse) · o_w
// and the backward of each window, given the FINAL o and lse (so D_i and P_ij are the whole
// prefix's), adds exactly that window's terms to dq, dk and dv.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace fulcrum::engine {

struct AttentionSpan {
    std::int32_t q_begin = 0;    // first query row (also the row in out and lse)
    std::int32_t kv_begin = 0;   // K/V row of position 0 of this span's document
    std::int32_t prefix = 0;     // position inside the document of the first query row
    std::int32_t length = 0;     // number of query rows
    std::int32_t key_begin = 0;  // first visible document position (the key window)
    std::int32_t key_end = std::numeric_limits<std::int32_t>::max();  // one past the last

    // Keys seen by query row i: positions key_begin … visible_end(i) − 1.
    std::int32_t visible_end(std::int32_t i) const { return std::min(prefix + i + 1, key_end); }
};

namespace kernels {

// Host kernels, templated on the scalar so that tests can run the same code in double as a
// reference. A strided set of rows: row r starts at data + r·stride.
template <typename T>
struct Rows {
    T* data;
    std::int64_t stride;
    T* row(std::int64_t r) const { return data + r * stride; }
};

template <typename T>
void attention_forward(Rows<T> out, T* lse, Rows<const T> q, Rows<const T> k, Rows<const T> v,
                       std::span<const AttentionSpan> spans, int n_head, int head_size) {
    const T scale = T(1) / std::sqrt(T(head_size));
    std::vector<T> scores;
    for (const AttentionSpan& span : spans) {
        scores.resize(static_cast<std::size_t>(
            std::max(0, span.visible_end(span.length - 1) - span.key_begin)));
        for (std::int32_t i = 0; i < span.length; ++i) {
            const std::int64_t qrow = span.q_begin + i;
            const std::int32_t n_keys = span.visible_end(i) - span.key_begin;
            for (int h = 0; h < n_head; ++h) {
                const std::int64_t off = std::int64_t(h) * head_size;
                if (n_keys <= 0) {  // nothing of this window is visible yet
                    T* oi = out.row(qrow) + off;
                    std::fill(oi, oi + head_size, T(0));
                    lse[qrow * n_head + h] = -std::numeric_limits<T>::infinity();
                    continue;
                }
                const T* qi = q.row(qrow) + off;
                T max_score = -std::numeric_limits<T>::infinity();
                for (std::int32_t j = 0; j < n_keys; ++j) {
                    const T* kj = k.row(span.kv_begin + j) + off;
                    T dot = 0;
#pragma omp simd reduction(+ : dot)
                    for (int d = 0; d < head_size; ++d)
                        dot += qi[d] * kj[d];
                    scores[j] = dot * scale;
                    max_score = std::max(max_score, scores[j]);
                }
                T sum = 0;
                for (std::int32_t j = 0; j < n_keys; ++j) {
                    scores[j] = std::exp(scores[j] - max_score);
                    sum += scores[j];
                }
                const T inv_sum = T(1) / sum;
                T* oi = out.row(qrow) + off;
                std::fill(oi, oi + head_size, T(0));
                for (std::int32_t j = 0; j < n_keys; ++j) {
                    const T p = scores[j] * inv_sum;
                    const T* vj = v.row(span.kv_begin + j) + off;
#pragma omp simd
                    for (int d = 0; d < head_size; ++d)
                        oi[d] += p * vj[d];
                }
                lse[qrow * n_head + h] = max_score + std::log(sum);
            }
        }
    }
}

// Accumulates into dq, dk, dv (+=).
template <typename T>
void attention_backward(Rows<T> dq, Rows<T> dk, Rows<T> dv, Rows<const T> dout, Rows<const T> q,
                        Rows<const T> k, Rows<const T> v, Rows<const T> out, const T* lse,
                        std::span<const AttentionSpan> spans, int n_head, int head_size) {
    const T scale = T(1) / std::sqrt(T(head_size));
    for (const AttentionSpan& span : spans) {
        for (std::int32_t i = 0; i < span.length; ++i) {
            const std::int64_t qrow = span.q_begin + i;
            const std::int32_t n_keys = span.visible_end(i) - span.key_begin;
            if (n_keys <= 0) {
                continue;
            }
            for (int h = 0; h < n_head; ++h) {
                const std::int64_t off = std::int64_t(h) * head_size;
                const T* qi = q.row(qrow) + off;
                const T* doi = dout.row(qrow) + off;
                const T* oi = out.row(qrow) + off;
                T* dqi = dq.row(qrow) + off;
                const T lse_i = lse[qrow * n_head + h];
                T d_i = 0;
#pragma omp simd reduction(+ : d_i)
                for (int d = 0; d < head_size; ++d)
                    d_i += doi[d] * oi[d];
                for (std::int32_t j = 0; j < n_keys; ++j) {
                    const std::int64_t kvrow = span.kv_begin + j;
                    const T* kj = k.row(kvrow) + off;
                    const T* vj = v.row(kvrow) + off;
                    T dot = 0, dp = 0;
#pragma omp simd reduction(+ : dot, dp)
                    for (int d = 0; d < head_size; ++d) {
                        dot += qi[d] * kj[d];
                        dp += doi[d] * vj[d];
                    }
                    const T p = std::exp(dot * scale - lse_i);
                    const T ds = p * (dp - d_i) * scale;
                    T* dkj = dk.row(kvrow) + off;
                    T* dvj = dv.row(kvrow) + off;
#pragma omp simd
                    for (int d = 0; d < head_size; ++d) {
                        dqi[d] += ds * kj[d];
                        dkj[d] += ds * qi[d];
                        dvj[d] += p * doi[d];
                    }
                }
            }
        }
    }
}

// Folds one window's partial result (part_out, part_lse) into the running (out, lse), per row
// and head: lse' = log(e^lse + e^part_lse), out' = e^(lse − lse')·out + e^(part_lse − lse')·part.
// A −∞ on either side (no key seen yet) takes the other side as it is, so a running result
// starts from lse = −∞ and any `out`.
template <typename T>
void attention_merge(Rows<T> out, T* lse, Rows<const T> part_out, const T* part_lse,
                     std::int64_t rows, int n_head, int head_size) {
    for (std::int64_t r = 0; r < rows; ++r) {
        for (int h = 0; h < n_head; ++h) {
            const T a = lse[r * n_head + h];
            const T b = part_lse[r * n_head + h];
            if (b == -std::numeric_limits<T>::infinity()) {
                continue;
            }
            T* o = out.row(r) + std::int64_t(h) * head_size;
            const T* p = part_out.row(r) + std::int64_t(h) * head_size;
            if (a ==
                -std::numeric_limits<T>::infinity()) {  // the first window: whatever `out` held
                std::copy(p, p + head_size, o);
                lse[r * n_head + h] = b;
                continue;
            }
            const T m = std::max(a, b);
            const T merged = m + std::log(std::exp(a - m) + std::exp(b - m));
            const T ca = std::exp(a - merged), cb = std::exp(b - merged);
            for (int d = 0; d < head_size; ++d) {
                o[d] = ca * o[d] + cb * p[d];
            }
            lse[r * n_head + h] = merged;
        }
    }
}

}  // namespace kernels
}  // namespace fulcrum::engine
