// FPDT-style chunked attention (Yao et al. 2024, "Training Ultra Long Context Language Model
// with Fully Pipelined Distributed Transformer"; REFERENCE §1): a long document's attention in
// chunks of `chunk` tokens, with its K/V chunks kept in pinned host memory and brought back to
// the device two at a time while the previous chunk computes.
//
// Math (attention.h, "Key windows"). Cut the document's positions into chunks of c. Query
// chunk i sees key chunks 0…i; each (i, j) is one attention call over the key window
// [j·c, (j+1)·c), and the partial results fold together with attention_merge:
//     lse_i = log Σ_j exp(lse_ij),   o_i = Σ_j exp(lse_ij − lse_i) · o_ij
// The backward runs the same (i, j) pairs given the final o_i and lse_i; each adds exactly its
// window's share to dq_i, dk_j and dv_j. Nothing is approximated: chunked and whole attention
// agree to rounding (tests/engine/test_engine_layers.cpp).
//
// Streams (with offload on):
//   offload  — after the QKV projection, every K/V chunk of the document is copied from the
//              device to pinned host memory (device → host, "offload kv").
//   prefetch — before pair n computes, pair n+1's K/V chunk is copied host → device into the
//              other of two device slots ("prefetch kv"), so the copy hides behind pair n.
//   compute  — attention on the slot, then the merge.
// Events order them: a slot is refilled only after the compute that read it (slot_free), and
// computed on only after its copy (slot_ready). On the CPU backend streams run in issue order
// and the copies are memcpys: the same code, checked without a GPU.
//
// Memory. Without offload the whole document's K/V must be resident for attention; with it,
// two chunk slots (2 · 2 · c · C floats) plus one chunk of partial output. `memory()` reports
// both for the longest document seen. Between a block's forward and backward pass its fused
// QKV (and CP's gathered K/V) waits in pinned host memory too: the model's activation offload
// (GptModel, Activations::offloads_qkv) keeps two device slots instead of one per layer, and
// uses this class's copy streams.
//
// Spans shorter than a chunk (most documents of a packed micro-batch) go through one ordinary
// attention call, as without chunking.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "engine/backend/backend.h"

namespace fulcrum::engine {

struct ChunkedAttentionOptions {
    int chunk = 0;        // tokens per chunk; 0 turns chunking off
    bool offload = true;  // K/V chunks through pinned host memory
};

struct AttentionMemory {
    std::int64_t resident_kv_bytes = 0;  // device K/V the longest document needs unchunked
    std::int64_t device_bytes = 0;       // device bytes chunking actually holds (slots, partials)
    std::int64_t host_bytes = 0;         // pinned host bytes for the offloaded K/V
    std::int64_t offloaded_bytes = 0;    // device → host bytes copied so far
    std::int64_t prefetched_bytes = 0;   // host → device bytes copied so far
};

class ChunkedAttention {
public:
    // `channels` is the local C (after TP), `n_head` the local heads.
    ChunkedAttention(Backend& backend, int channels, int n_head, ChunkedAttentionOptions options);

    bool enabled() const { return options_.chunk > 0; }
    const ChunkedAttentionOptions& options() const { return options_; }

    // The Backend's attention_forward / attention_backward contracts, run in chunks.
    void forward(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v,
                 std::span<const AttentionSpan> spans);
    void backward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q, Tensor k, Tensor v,
                  Tensor out, Tensor lse, std::span<const AttentionSpan> spans);

    const AttentionMemory& memory() const { return memory_; }
    // The copy streams (offload on): the model's activation offload uses them too.
    StreamId offload_stream() const { return offload_stream_; }
    StreamId prefetch_stream() const { return prefetch_stream_; }

private:
    // One (query chunk, key chunk) pair of a long span, in rows of the caller's tensors.
    struct Pair {
        AttentionSpan query;   // the query chunk: rows, positions (key window unset)
        std::int32_t kv_row;   // K/V row of the key chunk's first position
        std::int32_t key_begin, key_count;
        int chunk_index;       // which key chunk of the span (host offset / c)

        // The attention call of this pair, on the query chunk's rows and the key chunk's rows
        // alone (both start at row 0 of the views it is given).
        AttentionSpan window() const {
            return {0, 0, query.prefix, query.length, key_begin, key_begin + key_count};
        }
    };
    std::vector<Pair> pairs_of(const AttentionSpan& span) const;
    bool is_long(const AttentionSpan& span) const;
    // (spans within one chunk, spans to chunk)
    std::pair<std::vector<AttentionSpan>, std::vector<AttentionSpan>> split(
        std::span<const AttentionSpan> spans) const;
    void run_pairs(Tensor k, Tensor v, const AttentionSpan& span,
                   const std::function<void(const Pair&, Tensor, Tensor)>& visit);
    void reserve(std::int64_t keys);
    void offload(Tensor k, Tensor v, const AttentionSpan& span);
    // Issues the copy of `pair`'s K/V chunk into `slot` on the prefetch stream.
    void prefetch(const Pair& pair, int slot);

    Backend& backend_;
    int channels_;
    int n_head_;
    ChunkedAttentionOptions options_;
    StreamId offload_stream_{}, prefetch_stream_{};
    EventId produced_{}, offloaded_{}, slot_ready_[2]{}, slot_free_[2]{};
    DeviceBuffer slots_;     // [2][k, v][chunk, C]
    DeviceBuffer partials_;  // part_out [chunk, C], part_lse [chunk, n_head]
    PinnedBuffer host_k_, host_v_;
    std::int64_t host_keys_ = 0;
    AttentionMemory memory_;
};

}  // namespace fulcrum::engine
