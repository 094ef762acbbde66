// FPDT-style chunked attention (Yao et al. 2024, "Training Ultra Long Context Language Model
// with Fully Pipelined Distributed Transformer", §3): a block's QKV projection and attention in
// chunks of `chunk` rows of the packed micro-batch, with every chunk's Q, K and V waiting in
// pinned host memory between the block's forward and backward pass and only two chunks on the
// device at a time.
//
// Chunks. The micro-batch's query rows are cut into chunks of c rows, and so are the K/V rows
// (the same rows serially; the gathered rows of the whole micro-batch under CP). A chunk
// boundary may fall inside a document and a chunk may hold many short documents: the query
// rows of chunk i against the key rows of chunk j form one PAIR, one attention call whose spans
// are the pieces of the documents that meet in both chunks, each with the key window of chunk
// j's positions (attention.h, "Key windows"). Pairs whose chunks share no document are skipped,
// so the work stays Σ dᵢ², as unchunked.
//
// Math (attention.h). The windows of one query row fold together with attention_merge:
//     lse_i = log Σ_j exp(lse_ij),   o_i = Σ_j exp(lse_ij − lse_i) · o_ij
// The first window a query row meets is written, later ones go through one chunk of partial
// output and are merged. The backward of each pair, given the FINAL o_i and lse_i, adds exactly
// its window's share to dq_i, dk_j and dv_j. Nothing is approximated: chunked and whole
// attention agree to float rounding (tests/engine/test_engine_layers.cpp).
//
// Forward, per query chunk i (FPDT §3.2, Fig. 4):
//     q_i = x_i · W_qᵀ + b_q (and serially k_i, v_i = x_i · W_kvᵀ + b_kv), into device slot i mod 2
//     offload q_i (k_i, v_i) to pinned host memory, at once, on the offload stream
//     pair (i, i) on the slot's own K/V; then pairs (i, j), j < i ascending, each K/V chunk
//     prefetched from the host into the other K/V half of the slots while the pair before it
//     computes
// Under all-gather CP the K/V are the gathered rows, already on the device for the block's
// forward: the pairs read them in place, and they go to the host in one copy right after the
// gather. Under Ulysses the chunks are the head shard's rows, made as FPDT makes them: chunk i
// is produced only when its pairs come (a QkvChunkSource), so the head shard is never whole on
// the device, and chunk i + 1's is started (a QkvChunkPrefetch: its projection, and its
// all-to-all left in flight) before chunk i's pairs compute; from there on the pairs run as
// serially. With the store's host_out (FPDT's output
// offload) chunk i's output and lse, final after its pairs, sit in gradient slot i mod 2: the
// caller's OutputChunkSink takes the output (back to the sequence shards), then both go to the
// host.
//
// Backward (FPDT §3.3): K/V chunks OUTER, query chunks INNER.
//     for each K/V chunk j (ascending): fetch k_j, v_j (and meanwhile chunk j+1's)
//         for each query chunk i ≥ j that meets j (ascending): fetch q_i (the next one
//             meanwhile), attention backward of pair (i, j):
//                 dk_j, dv_j += …   accumulated on the device, in the caller's rows of chunk j
//                 dq_i       += …   accumulated on the device, in the caller's rows of chunk i
// Each K/V chunk crosses PCIe once per backward, each query chunk once per pair it is in.
// After outer chunk j, dq_j, dk_j and dv_j are final.
//
// The offloading backward (FPDT's own, under Ulysses, where the query rows are the K/V rows):
// ∂L/∂o is not whole on the device either. Before the pairs, the caller makes it a query chunk
// at a time (its all-to-all by chunk) into a gradient slot, and from there it goes to pinned
// host memory; each pair then fetches its query chunk's ∂L/∂o with q_i, and its dQ partial
// sum too when an earlier pair left one on the host. After the pair dq_i goes back to the
// host, or straight on to the next pair when that has the same query chunk, or — after the
// diagonal pair (i, i), query chunk i's last (K/V outer ascending, causal) — into the chunk's
// dq that the caller hands over with dk_i and dv_i.
//
// Streams (offload on). compute runs the GEMMs and attention; `offload` the device → host
// copies; `prefetch` the host → device ones. Events order them and the host never waits:
//     produced[s]   compute → offload   the slot's projection (or ∂L/∂o, dQ) is written
//     offloaded[s]  offload → compute   the slot's copies to the host are done: the compute
//                   stream waits for it only when it overwrites the slot (chunk i + 2), and the
//                   prefetch stream before a fetch into the slot or from the host rows it wrote
//     q_ready/kv_ready[s]  prefetch → compute   a fetch into the slot's Q or K/V half is done
//     q_free/kv_free[s]    compute → prefetch   the compute that read it is done
//     grad_ready/grad_free/grad_offloaded[s]     the same for a gradient slot, and
//     host_written  offload → prefetch   the latest copy into the host's ∂L/∂o, dQ or output
//                   (a guard: each fetch also follows, in the prefetch stream's order, one
//                   that waited for every earlier copy out of either slot)
// The host marks where it issues copies ("offload qkv chunk", "prefetch kv chunk", …, category
// runtime); the copies are CUPTI memcpy records on a GPU and `memcpy DtoH` / `memcpy HtoD`
// ranges on the CPU backend's copy threads.
//
// Memory. With offload the device holds, for all blocks and micro-batches together, two chunk
// slots of [c, 3C_l] floats (Q [c, C_l], then K|V [c, 2C_l]): the double buffers. A block's
// Q, K and V are never resident whole; they live in the caller's pinned host memory (QkvStore).
// So the device peak falls by the offloaded bytes less 2 · c · 3C_l floats
// (tests/engine/test_engine_model.cpp checks that equality on the CPU backend's counts). Both
// modes also hold one chunk of partial output and lse for the merges. The offloading backward
// adds two gradient slots of [c, 2C_l] (∂L/∂o, dQ) on the device, and [T, C_l] twice pinned
// (∂L/∂o and dQ's partial sums, shared by all blocks), where the caller held both whole.
//
// Without offload (`offload` false) the same chunks and pairs run on the caller's resident Q,
// K and V, so the two modes give the same bits.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <utility>
#include <vector>

#include "engine/backend/backend.h"

namespace fulcrum::engine {

struct ChunkedAttentionOptions {
    int chunk = 0;        // rows per chunk; 0 turns chunking off
    bool offload = true;  // Q, K and V through pinned host memory between forward and backward
};

// Writes the Q [rows, C_l] and K|V [rows, 2C_l] of query rows [first, first + rows) into q
// and kv, which are a chunk slot (offload on) or rows of the resident store.
using QkvChunkSource =
    std::function<void(std::int64_t first, std::int64_t rows, Tensor q, Tensor kv)>;
// Starts making the chunk of query rows [first, first + rows), so that the QkvChunkSource call
// for the same rows only finishes it: FPDT's all-to-all of chunk i + 1 beside chunk i's
// attention (§3.2, Fig. 4). forward() calls it for chunk i + 1 after chunk i's source and
// before chunk i's pairs.
using QkvChunkPrefetch = std::function<void(std::int64_t first, std::int64_t rows)>;
// Takes the final output [rows, C_l] of query rows [first, first + rows) (FPDT: back to the
// sequence shards by that chunk's all-to-all) before it leaves for the host. It may leave the
// exchange in flight: `out` is only read by work the caller issues on the compute stream now.
using OutputChunkSink = std::function<void(std::int64_t first, std::int64_t rows, Tensor out)>;

// The QKV projection of a block: q = input · q_weightᵀ + q_bias, and serially
// k|v = input · kv_weightᵀ + kv_bias. Under CP kv_weight is empty: K/V come gathered. Under
// Ulysses `source` makes each chunk instead (FPDT §3.2: the local rows that land in the chunk
// projected and traded for its head shard, context_parallel.h) for `rows` query rows, and
// nothing else is set.
struct QkvProjection {
    Tensor input;               // LN₁(x) [T, C]
    Tensor q_weight, q_bias;    // [C_l, C], [C_l]
    Tensor kv_weight, kv_bias;  // [2C_l, C], [2C_l], or empty
    QkvChunkSource source;
    QkvChunkPrefetch prepare;  // optional, with a source
    std::int64_t rows = 0;     // with a source: the query rows, which are also the K/V rows
    // With the store's host_out: where each chunk's final output goes before the host.
    OutputChunkSink output;
};

// Where one block's Q, K and V wait between its forward and backward pass. Offload off: on the
// device, q [T, C_l] and kv [T_kv, 2C_l] (K columns, then V), both contiguous. Offload on: in
// pinned host memory, dense, the same shapes.
struct QkvStore {
    Tensor q, kv;
    float* host_q = nullptr;
    float* host_kv = nullptr;
    // FPDT's output offload (Ulysses): the attention's output [T, C_l] and lse [T, n_head] in
    // pinned host memory too, written a chunk at a time by forward() and fetched a query chunk
    // at a time by the offloading backward; null when the caller keeps them on the device.
    float* host_out = nullptr;
    float* host_lse = nullptr;
};

// One (query chunk, K/V chunk) pair: its spans, query rows relative to the query chunk's first
// row and K/V rows relative to the K/V chunk's. `first` are the pieces of documents whose query
// rows meet their first window here (written), `merged` those that met one before (merged).
struct ChunkPair {
    int q_chunk = 0;
    int kv_chunk = 0;
    std::vector<AttentionSpan> first, merged;
};

// One chunk's gradients [rows, C_l] each, zeroed: dK and dV, and dQ under the offloading
// backward (empty otherwise: dQ is then the caller's whole tensor).
struct ChunkGradients {
    Tensor dq, dk, dv;
};

// Where a backward pass puts dK|dV (and dQ) a K/V chunk at a time, and what takes them from
// there.
struct KvGradientChunks {
    std::int64_t kv_rows = 0;
    std::function<ChunkGradients(int chunk, std::int64_t rows)> rows;
    // Chunk j's rows [first, first + rows) are final in dq and in what rows(j) gave; called
    // before rows() is asked for another chunk.
    std::function<void(int chunk, std::int64_t first, std::int64_t rows)> done;
};

// FPDT's offloading backward: writes ∂L/∂o of query rows [first, first + rows) into dout.
using OutputGradientSource =
    std::function<void(std::int64_t first, std::int64_t rows, Tensor dout)>;

struct AttentionMemory {
    std::int64_t double_buffer_bytes = 0;  // device: the two chunk slots (offload on)
    std::int64_t partial_bytes = 0;        // device: one chunk of partial output and lse
    // device: two chunk slots of ∂L/∂o and dQ (the offloading backward, once it has run)
    std::int64_t gradient_buffer_bytes = 0;
    std::int64_t offloaded_bytes = 0;   // device → host, so far
    std::int64_t prefetched_bytes = 0;  // host → device, so far
};

class ChunkedAttention {
public:
    // `channels` is the local C (after TP), `n_head` the local heads.
    ChunkedAttention(Backend& backend, int channels, int n_head, ChunkedAttentionOptions options);

    bool enabled() const { return options_.chunk > 0; }
    bool offloads() const { return enabled() && options_.offload; }
    const ChunkedAttentionOptions& options() const { return options_; }

    // The QKV projection and attention_forward of one block, in chunks; Q, K and V end up in
    // `store`. `gathered_kv` [T_kv, 2C_l] is CP's gathered K|V (the projection then has no
    // kv_weight), empty serially.
    void forward(const QkvProjection& projection, Tensor gathered_kv, const QkvStore& store,
                 Tensor out, Tensor lse, std::span<const AttentionSpan> spans);
    // attention_backward of one block from `store`: accumulates into dq [T, C_l], dk and dv
    // [T_kv, C_l] (which may be column views).
    void backward(const QkvStore& store, Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor out,
                  Tensor lse, std::span<const AttentionSpan> spans);
    // The same with dK|dV a K/V chunk at a time (FPDT §3.3, under Ulysses): chunk j's
    // accumulate in what `kv_chunks.rows` gives (zeroed), and `kv_chunks.done` hands them
    // over after chunk j's outer iteration, when dq_j, dk_j and dv_j are final.
    void backward(const QkvStore& store, Tensor dq, const KvGradientChunks& kv_chunks, Tensor dout,
                  Tensor out, Tensor lse, std::span<const AttentionSpan> spans);
    // FPDT's offloading backward (§3.3; offload on, the query rows the K/V rows, as under
    // Ulysses): ∂L/∂o is made a query chunk at a time by `dout` and waits in pinned host
    // memory, and so do dQ's partial sums between the pairs that add to them; a chunk's dQ is
    // final after its diagonal pair and goes into the dq that kv_chunks.rows gives, beside dK
    // and dV. The device holds two chunk slots of ∂L/∂o and dQ where it held both whole.
    void backward(const QkvStore& store, const KvGradientChunks& kv_chunks,
                  const OutputGradientSource& dout, Tensor out, Tensor lse,
                  std::span<const AttentionSpan> spans);
    // Offload on: issues backward()'s first fetches now, so that they hide behind the work the
    // caller does before it (the block's MLP backward). backward() with the same store and
    // spans then starts from them.
    void prefetch_backward(const QkvStore& store, std::int64_t q_rows, std::int64_t kv_rows,
                           std::span<const AttentionSpan> spans);
    // CP with offload: the compute stream waits until the K/V gathered for the last forward()
    // have left for the host; call it before overwriting that buffer.
    void await_gathered_offload();

    // The pairs in the order forward() computes them: query chunks ascending, and within one
    // the query rows' own K/V chunk first when they are the same rows (`own_keys`, serial),
    // then the others ascending.
    std::vector<ChunkPair> forward_order(std::int64_t q_rows, std::int64_t kv_rows, bool own_keys,
                                         std::span<const AttentionSpan> spans) const;
    // The pairs in the order backward() computes them: K/V chunks ascending (outer), and for
    // each the query chunks that meet it ascending (inner).
    std::vector<ChunkPair> backward_order(std::int64_t q_rows, std::int64_t kv_rows,
                                          std::span<const AttentionSpan> spans) const;

    const AttentionMemory& memory() const { return memory_; }
    StreamId offload_stream() const { return offload_stream_; }
    StreamId prefetch_stream() const { return prefetch_stream_; }

private:
    std::int64_t rows_of(int chunk, std::int64_t total) const;
    Tensor q_slot(int slot, std::int64_t rows) const;   // [rows, C_l] at the slot's start
    Tensor kv_slot(int slot, std::int64_t rows) const;  // [rows, 2C_l] after the slot's Q
    // Copies of chunk `chunk` (starting at host row chunk·c) between host and a slot.
    void offload_chunk(int slot, int chunk, Tensor q, Tensor kv, const QkvStore& store);
    void offload_gathered(Tensor gathered_kv, float* host_kv);
    void fetch_q(const float* host_q, int chunk, std::int64_t q_rows, int slot);
    void fetch_kv(const float* host_kv, int chunk, std::int64_t kv_rows, int slot);
    // The prefetch stream waits for every copy to the host issued so far, then fetches the
    // first pair of a backward pass.
    void begin_backward_fetches(const QkvStore& store, const ChunkPair& first, std::int64_t q_rows,
                                std::int64_t kv_rows);
    // The backward()s: the pairs, with dK|dV where kv_chunks puts them; dq and dout empty
    // under the offloading backward, which then takes both a chunk at a time through the host.
    void backward_pairs(const QkvStore& store, Tensor dq, const KvGradientChunks& kv_chunks,
                        Tensor dout, Tensor out, Tensor lse, std::span<const AttentionSpan> spans);
    // The offloading backward's host and device buffers for `rows` query rows, and ∂L/∂o
    // made and sent to the host a chunk at a time.
    void reserve_gradient_slots();
    void reserve_gradient_buffers(std::int64_t rows);
    void offload_output_gradient(const OutputGradientSource& dout, std::int64_t rows);
    // Copies of a slot's tensors (Q|K|V, ∂L/∂o, dQ, or the output and lse; empty ones
    // skipped) to their host rows on the offload stream, once the compute stream has written
    // them; the events `done` are recorded after them.
    void offload_slot(int slot, const char* name,
                      std::initializer_list<std::pair<float*, Tensor>> copies,
                      std::initializer_list<EventId> done);
    std::int64_t gradient_slot_floats() const;
    Tensor dout_slot(int slot, std::int64_t rows) const;  // [rows, C_l]
    Tensor dq_slot(int slot, std::int64_t rows) const;    // [rows, C_l]
    Tensor out_slot(int slot, std::int64_t rows) const;   // [rows, C_l]
    Tensor lse_slot(int slot, std::int64_t rows) const;   // [rows, n_head]
    // The attention calls of one pair of forward(): the written windows, then the merged ones.
    void forward_pair(const ChunkPair& pair, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse);

    Backend& backend_;
    int channels_;
    int n_head_;
    ChunkedAttentionOptions options_;
    StreamId offload_stream_{}, prefetch_stream_{};
    EventId produced_[2]{}, offloaded_[2]{};
    EventId q_ready_[2]{}, q_free_[2]{}, kv_ready_[2]{}, kv_free_[2]{};
    EventId gathered_written_{}, gathered_offloaded_{};
    DeviceBuffer slots_;     // [2][Q [c, C_l] | K|V [c, 2C_l]]
    DeviceBuffer partials_;  // part_out [c, C_l], part_lse [c, n_head]
    // The offloading backward: [2][∂L/∂o [c, C_l] | dQ [c, C_l] | the output [c, C_l] | lse
    // [c, n_head]] on the device (the output's part also the forward's under output offload),
    // ∂L/∂o and dQ's
    // partial sums [rows, C_l] each in pinned host memory; its events per slot
    // (grad_ready: prefetch → compute, grad_free: compute → prefetch, grad_offloaded:
    // offload → both) and `host_written`, the latest copy into those host rows.
    DeviceBuffer gradient_slots_;
    PinnedBuffer host_dout_, host_dq_;
    std::int64_t host_gradient_rows_ = 0;
    EventId grad_ready_[2]{}, grad_free_[2]{}, grad_offloaded_[2]{}, host_written_{};
    // The fetches prefetch_backward() issued, which backward() then does not repeat.
    struct PendingFetch {
        const float* host_q = nullptr;
        const float* host_kv = nullptr;
        int q_chunk = -1, kv_chunk = -1;
    } pending_;
    AttentionMemory memory_;
};

}  // namespace fulcrum::engine
