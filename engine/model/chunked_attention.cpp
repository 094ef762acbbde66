#include "engine/model/chunked_attention.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "engine/instrument/annotations.h"

namespace fulcrum::engine {
namespace {

constexpr std::int64_t kFloat = sizeof(float);

std::vector<AttentionSpan> spans_of(const ChunkPair& pair) {
    std::vector<AttentionSpan> all = pair.first;
    all.insert(all.end(), pair.merged.begin(), pair.merged.end());
    return all;
}

}  // namespace

ChunkedAttention::ChunkedAttention(Backend& backend, int channels, int n_head,
                                   ChunkedAttentionOptions options)
    : backend_(backend), channels_(channels), n_head_(n_head), options_(options) {
    if (!enabled()) {
        return;
    }
    const std::int64_t c = options_.chunk;
    partials_ = backend_.allocate(std::size_t(c * (channels_ + n_head_) * kFloat));
    memory_.partial_bytes = std::int64_t(partials_.bytes());
    if (!options_.offload) {
        return;
    }
    offload_stream_ = backend_.create_stream("offload");
    prefetch_stream_ = backend_.create_stream("prefetch");
    for (int slot = 0; slot < 2; ++slot) {
        produced_[slot] = backend_.create_event();
        offloaded_[slot] = backend_.create_event();
        q_ready_[slot] = backend_.create_event();
        q_free_[slot] = backend_.create_event();
        kv_ready_[slot] = backend_.create_event();
        kv_free_[slot] = backend_.create_event();
        grad_ready_[slot] = backend_.create_event();
        grad_free_[slot] = backend_.create_event();
        grad_offloaded_[slot] = backend_.create_event();
    }
    host_written_ = backend_.create_event();
    gathered_written_ = backend_.create_event();
    gathered_offloaded_ = backend_.create_event();
    slots_ = backend_.allocate(std::size_t(2 * c * 3 * channels_ * kFloat));
    memory_.double_buffer_bytes = std::int64_t(slots_.bytes());
}

std::int64_t ChunkedAttention::rows_of(int chunk, std::int64_t total) const {
    const std::int64_t first = std::int64_t(chunk) * options_.chunk;
    return std::min<std::int64_t>(options_.chunk, total - first);
}

Tensor ChunkedAttention::q_slot(int slot, std::int64_t rows) const {
    return slots_.f32(std::int64_t(slot) * options_.chunk * 3 * channels_, {rows, channels_});
}

Tensor ChunkedAttention::kv_slot(int slot, std::int64_t rows) const {
    const std::int64_t c = options_.chunk;
    return slots_.f32((std::int64_t(slot) * 3 + 1) * c * channels_, {rows, 2 * channels_});
}

// A gradient slot: ∂L/∂o [c, C_l], dQ [c, C_l], the output [c, C_l], lse [c, n_head].
std::int64_t ChunkedAttention::gradient_slot_floats() const {
    return options_.chunk * (3 * channels_ + n_head_);
}

Tensor ChunkedAttention::dout_slot(int slot, std::int64_t rows) const {
    return gradient_slots_.f32(slot * gradient_slot_floats(), {rows, channels_});
}

Tensor ChunkedAttention::dq_slot(int slot, std::int64_t rows) const {
    return gradient_slots_.f32(slot * gradient_slot_floats() + options_.chunk * channels_,
                               {rows, channels_});
}

Tensor ChunkedAttention::out_slot(int slot, std::int64_t rows) const {
    return gradient_slots_.f32(slot * gradient_slot_floats() + 2 * options_.chunk * channels_,
                               {rows, channels_});
}

Tensor ChunkedAttention::lse_slot(int slot, std::int64_t rows) const {
    return gradient_slots_.f32(slot * gradient_slot_floats() + 3 * options_.chunk * channels_,
                               {rows, n_head_});
}

// ---- the pairs -------------------------------------------------------------------------------

std::vector<ChunkPair> ChunkedAttention::forward_order(std::int64_t q_rows, std::int64_t kv_rows,
                                                       bool own_keys,
                                                       std::span<const AttentionSpan> spans) const {
    FULCRUM_CHECK(enabled(), "chunked attention is off");
    check_attention_spans(spans, q_rows, kv_rows);
    const std::int64_t c = options_.chunk;
    // pieces[i][j]: the spans of pair (i, j), each tagged with the span it came from.
    std::vector<std::map<int, std::vector<std::pair<std::size_t, AttentionSpan>>>> pieces(
        std::size_t((q_rows + c - 1) / c));
    for (std::size_t s = 0; s < spans.size(); ++s) {
        const AttentionSpan& span = spans[s];
        const std::int64_t span_end = std::int64_t(span.q_begin) + span.length;
        for (std::int64_t a = span.q_begin; a < span_end;) {
            const int i = int(a / c);
            const std::int64_t b = std::min(span_end, (i + 1) * c);
            const std::int32_t prefix = span.prefix + std::int32_t(a - span.q_begin);
            const std::int32_t length = std::int32_t(b - a);
            // Keys of the piece: positions key_begin … last, K/V rows from kv_begin.
            const std::int32_t key_end = std::min(prefix + length, span.key_end);
            const std::int64_t first_row = span.kv_begin;
            const std::int64_t end_row = first_row + (key_end - span.key_begin);
            for (std::int64_t lo = first_row; lo < end_row;) {
                const int j = int(lo / c);
                const std::int64_t hi = std::min(end_row, (j + 1) * c);
                const std::int32_t window_begin = span.key_begin + std::int32_t(lo - first_row);
                const std::int32_t window_end = span.key_begin + std::int32_t(hi - first_row);
                pieces[std::size_t(i)][j].push_back(
                    {s, AttentionSpan{std::int32_t(a - i * c), std::int32_t(lo - j * c), prefix,
                                      length, window_begin, window_end}});
                lo = hi;
            }
            a = b;
        }
    }
    std::vector<ChunkPair> pairs;
    for (int i = 0; i < int(pieces.size()); ++i) {
        std::vector<int> order;
        if (own_keys && pieces[std::size_t(i)].contains(i)) {
            order.push_back(i);
        }
        for (const auto& [j, list] : pieces[std::size_t(i)]) {
            if (!(own_keys && j == i)) {
                order.push_back(j);
            }
        }
        std::set<std::size_t> written;  // spans whose rows in chunk i met a window already
        for (int j : order) {
            ChunkPair pair{i, j, {}, {}};
            for (const auto& [s, piece] : pieces[std::size_t(i)][j]) {
                (written.insert(s).second ? pair.first : pair.merged).push_back(piece);
            }
            pairs.push_back(std::move(pair));
        }
    }
    return pairs;
}

std::vector<ChunkPair> ChunkedAttention::backward_order(
    std::int64_t q_rows, std::int64_t kv_rows, std::span<const AttentionSpan> spans) const {
    std::vector<ChunkPair> pairs = forward_order(q_rows, kv_rows, false, spans);
    std::stable_sort(pairs.begin(), pairs.end(), [](const ChunkPair& a, const ChunkPair& b) {
        return a.kv_chunk != b.kv_chunk ? a.kv_chunk < b.kv_chunk : a.q_chunk < b.q_chunk;
    });
    return pairs;
}

// ---- copies ------------------------------------------------------------------------------

void ChunkedAttention::offload_chunk(int slot, int chunk, Tensor q, Tensor kv,
                                     const QkvStore& store) {
    const std::int64_t first = std::int64_t(chunk) * options_.chunk;
    offload_slot(slot, "offload qkv chunk",
                 {{store.host_q + first * channels_, q},
                  {kv.empty() ? nullptr : store.host_kv + first * 2 * channels_, kv}},
                 {offloaded_[slot]});
}

void ChunkedAttention::offload_slot(int slot, const char* name,
                                    std::initializer_list<std::pair<float*, Tensor>> copies,
                                    std::initializer_list<EventId> done) {
    std::int64_t bytes = 0;
    for (const auto& copy : copies) {
        bytes += copy.second.empty() ? 0 : copy.second.numel() * kFloat;
    }
    instrument::Range range(name, Category::runtime, instrument::with_bytes(bytes));
    backend_.record_event(produced_[slot], kComputeStream);
    backend_.wait_event(offload_stream_, produced_[slot]);
    for (const auto& copy : copies) {
        if (!copy.second.empty()) {
            backend_.download(copy.first, copy.second, offload_stream_);
        }
    }
    for (EventId event : done) {
        backend_.record_event(event, offload_stream_);
    }
    memory_.offloaded_bytes += bytes;
}

void ChunkedAttention::offload_gathered(Tensor gathered_kv, float* host_kv) {
    const std::int64_t bytes = gathered_kv.numel() * kFloat;
    instrument::Range range("offload gathered kv", Category::runtime,
                            instrument::with_bytes(bytes));
    backend_.record_event(gathered_written_, kComputeStream);
    backend_.wait_event(offload_stream_, gathered_written_);
    backend_.download(host_kv, gathered_kv, offload_stream_);
    backend_.record_event(gathered_offloaded_, offload_stream_);
    memory_.offloaded_bytes += bytes;
}

void ChunkedAttention::await_gathered_offload() {
    if (offloads()) {
        backend_.wait_event(kComputeStream, gathered_offloaded_);
    }
}

// A fetch into a slot waits for the compute that last read that half of it and for the slot's
// last copy to the host (which may still be reading it).
void ChunkedAttention::fetch_q(const float* host_q, int chunk, std::int64_t q_rows, int slot) {
    const std::int64_t rows = rows_of(chunk, q_rows);
    const std::int64_t bytes = rows * channels_ * kFloat;
    instrument::Range range("prefetch q chunk", Category::runtime, instrument::with_bytes(bytes));
    backend_.wait_event(prefetch_stream_, q_free_[slot]);
    backend_.wait_event(prefetch_stream_, offloaded_[slot]);
    backend_.upload(q_slot(slot, rows), host_q + std::int64_t(chunk) * options_.chunk * channels_,
                    prefetch_stream_);
    backend_.record_event(q_ready_[slot], prefetch_stream_);
    memory_.prefetched_bytes += bytes;
}

void ChunkedAttention::fetch_kv(const float* host_kv, int chunk, std::int64_t kv_rows, int slot) {
    const std::int64_t rows = rows_of(chunk, kv_rows);
    const std::int64_t bytes = rows * 2 * channels_ * kFloat;
    instrument::Range range("prefetch kv chunk", Category::runtime, instrument::with_bytes(bytes));
    backend_.wait_event(prefetch_stream_, kv_free_[slot]);
    backend_.wait_event(prefetch_stream_, offloaded_[slot]);
    backend_.upload(kv_slot(slot, rows),
                    host_kv + std::int64_t(chunk) * options_.chunk * 2 * channels_,
                    prefetch_stream_);
    backend_.record_event(kv_ready_[slot], prefetch_stream_);
    memory_.prefetched_bytes += bytes;
}

void ChunkedAttention::begin_backward_fetches(const QkvStore& store, const ChunkPair& first,
                                              std::int64_t q_rows, std::int64_t kv_rows) {
    // The host rows were written by the forward's copies; the offload stream runs in order, so
    // its latest records cover all of them. Slot 0's own record alone would not: under CP the
    // first pair's query chunk may be the forward's last, copied out of slot 1.
    backend_.wait_event(prefetch_stream_, offloaded_[0]);
    backend_.wait_event(prefetch_stream_, offloaded_[1]);
    backend_.wait_event(prefetch_stream_, gathered_offloaded_);
    fetch_kv(store.host_kv, first.kv_chunk, kv_rows, 0);
    fetch_q(store.host_q, first.q_chunk, q_rows, 0);
}

// ---- forward -----------------------------------------------------------------------------

void ChunkedAttention::forward_pair(const ChunkPair& pair, Tensor q, Tensor k, Tensor v, Tensor out,
                                    Tensor lse) {
    if (!pair.first.empty()) {
        backend_.attention_forward(out, lse, q, k, v, pair.first, n_head_);
    }
    if (pair.merged.empty()) {
        return;
    }
    const std::int64_t rows = q.rows();
    const Tensor part_out = partials_.f32(0, {rows, channels_});
    const Tensor part_lse =
        partials_.f32(std::int64_t(options_.chunk) * channels_, {rows, n_head_});
    backend_.attention_forward(part_out, part_lse, q, k, v, pair.merged, n_head_);
    for (const AttentionSpan& piece : pair.merged) {
        backend_.attention_merge(out.slice(piece.q_begin, piece.length),
                                 lse.slice(piece.q_begin, piece.length),
                                 part_out.slice(piece.q_begin, piece.length),
                                 part_lse.slice(piece.q_begin, piece.length), n_head_);
    }
}

void ChunkedAttention::forward(const QkvProjection& projection, Tensor gathered_kv,
                               const QkvStore& store, Tensor out, Tensor lse,
                               std::span<const AttentionSpan> spans) {
    FULCRUM_CHECK(enabled(), "chunked attention is off");
    const bool own_keys = gathered_kv.empty();
    const bool sourced = bool(projection.source);
    FULCRUM_CHECK(own_keys == (sourced || !projection.kv_weight.empty()),
                  "chunked attention: K/V either made a chunk at a time (serial, Ulysses) or "
                  "gathered (CP), not both");
    const std::int64_t q_rows = sourced ? projection.rows : projection.input.rows();
    const std::int64_t kv_rows = own_keys ? q_rows : gathered_kv.rows();
    // FPDT's output offload: each chunk's output and lse final in a gradient slot, handed to
    // projection.output, then to the host.
    const bool host_output = store.host_out != nullptr;
    if (host_output) {
        FULCRUM_CHECK(offloads() && own_keys && store.host_lse != nullptr && projection.output &&
                          out.empty() && lse.empty(),
                      "chunked attention: the output goes to the host only with offload, the "
                      "query rows' own keys and a sink for each chunk");
        reserve_gradient_slots();
    }
    if (offloads()) {
        FULCRUM_CHECK(store.host_q != nullptr && store.host_kv != nullptr,
                      "chunked attention with offload needs host memory for Q and K/V");
    } else {
        FULCRUM_CHECK(store.q.rows() == q_rows && store.kv.rows() == kv_rows &&
                          store.q.contiguous() && store.kv.contiguous(),
                      "chunked attention: Q [T, C] and K|V [T_kv, 2C] resident, contiguous");
    }
    const std::vector<ChunkPair> pairs = forward_order(q_rows, kv_rows, own_keys, spans);
    if (offloads() && !own_keys) {
        offload_gathered(gathered_kv, store.host_kv);
    }
    const std::int64_t c = options_.chunk;
    const std::int64_t width = channels_;
    std::size_t next = 0;
    for (int i = 0; std::int64_t(i) * c < q_rows; ++i) {
        const int slot = i % 2;
        const std::int64_t first = std::int64_t(i) * c, rows = rows_of(i, q_rows);
        Tensor q, own_kv;
        if (offloads()) {
            // The slot's copies to the host (chunk i − 2's) are done, and no fetch still writes
            // it: only now does the compute stream wait for that offload.
            backend_.wait_event(kComputeStream, offloaded_[slot]);
            backend_.wait_event(kComputeStream, q_ready_[slot]);
            backend_.wait_event(kComputeStream, kv_ready_[slot]);
            q = q_slot(slot, rows);
            own_kv = own_keys ? kv_slot(slot, rows) : Tensor{};
        } else {
            q = store.q.slice(first, rows);
            own_kv = own_keys ? store.kv.slice(first, rows) : Tensor{};
        }
        if (sourced) {
            projection.source(first, rows, q, own_kv);
        } else {
            const Tensor input = projection.input.slice(first, rows);
            backend_.matmul_forward(q, input, projection.q_weight, projection.q_bias);
            if (own_keys) {
                backend_.matmul_forward(own_kv, input, projection.kv_weight, projection.kv_bias);
            }
        }
        if (offloads()) {
            offload_chunk(slot, i, q, own_kv, store);
        }
        if (projection.prepare && first + rows < q_rows) {
            projection.prepare(first + rows, rows_of(i + 1, q_rows));
        }
        Tensor out_rows, lse_rows;
        if (host_output) {
            // The slot's last output (chunk i − 2's) has left for the host.
            backend_.wait_event(kComputeStream, grad_offloaded_[slot]);
            out_rows = out_slot(slot, rows);
            lse_rows = lse_slot(slot, rows);
        } else {
            out_rows = out.slice(first, rows);
            lse_rows = lse.slice(first, rows);
        }
        const std::size_t begin = next;
        while (next < pairs.size() && pairs[next].q_chunk == i) {
            ++next;
        }
        // Serially with offload, the key chunks other than the query rows' own come from the
        // host, double-buffered: the k-th of them goes to K/V half (slot + 1 + k) mod 2, issued
        // before the pair ahead of it computes.
        const bool fetches = offloads() && own_keys;
        auto fetched = [&](std::size_t n) { return fetches && pairs[n].kv_chunk != i; };
        std::vector<int> fetch_slot(next - begin, -1);
        for (std::size_t n = begin, k = 0; n < next; ++n) {
            if (fetched(n)) {
                fetch_slot[n - begin] = int((slot + 1 + k++) % 2);
            }
        }
        // A fetch waits for its slot's last copy to the host, chunk i's or i − 1's; the
        // offload stream runs in order, so the host rows of every earlier chunk are written.
        auto issue_fetch = [&](std::size_t n) {
            fetch_kv(store.host_kv, pairs[n].kv_chunk, kv_rows, fetch_slot[n - begin]);
        };
        if (begin < next && fetched(begin)) {
            issue_fetch(begin);
        }
        for (std::size_t n = begin; n < next; ++n) {
            const ChunkPair& pair = pairs[n];
            if (n + 1 < next && fetched(n + 1)) {
                issue_fetch(n + 1);
            }
            const std::int64_t kv_first = std::int64_t(pair.kv_chunk) * c;
            const std::int64_t kv_count = rows_of(pair.kv_chunk, kv_rows);
            Tensor kv;
            int kv_slot_used = -1;
            if (!own_keys) {
                kv = gathered_kv.slice(kv_first, kv_count);  // on the device for this forward
            } else if (pair.kv_chunk == i) {
                kv = own_kv;
                kv_slot_used = offloads() ? slot : -1;
            } else if (fetches) {
                kv_slot_used = fetch_slot[n - begin];
                backend_.wait_event(kComputeStream, kv_ready_[kv_slot_used]);
                kv = kv_slot(kv_slot_used, kv_count);
            } else {
                kv = store.kv.slice(kv_first, kv_count);
            }
            forward_pair(pair, q, kv.columns(0, width), kv.columns(width, width), out_rows,
                         lse_rows);
            if (kv_slot_used >= 0) {
                backend_.record_event(kv_free_[kv_slot_used], kComputeStream);
            }
        }
        if (offloads()) {
            backend_.record_event(q_free_[slot], kComputeStream);
        }
        if (host_output) {
            projection.output(first, rows, out_rows);
            offload_slot(slot, "offload out chunk",
                         {{store.host_out + first * width, out_rows},
                          {store.host_lse + first * n_head_, lse_rows}},
                         {grad_offloaded_[slot], host_written_});
        }
    }
}

// ---- backward ----------------------------------------------------------------------------

void ChunkedAttention::prefetch_backward(const QkvStore& store, std::int64_t q_rows,
                                         std::int64_t kv_rows,
                                         std::span<const AttentionSpan> spans) {
    if (!offloads()) {
        return;
    }
    const std::vector<ChunkPair> pairs = backward_order(q_rows, kv_rows, spans);
    if (pairs.empty()) {
        return;
    }
    begin_backward_fetches(store, pairs.front(), q_rows, kv_rows);
    pending_ = {store.host_q, store.host_kv, pairs.front().q_chunk, pairs.front().kv_chunk};
}

void ChunkedAttention::backward(const QkvStore& store, Tensor dq, Tensor dk, Tensor dv, Tensor dout,
                                Tensor out, Tensor lse, std::span<const AttentionSpan> spans) {
    const std::int64_t c = options_.chunk;
    KvGradientChunks whole;
    whole.kv_rows = dk.rows();
    whole.rows = [&](int chunk, std::int64_t rows) {
        const std::int64_t first = std::int64_t(chunk) * c;
        return ChunkGradients{Tensor{}, dk.slice(first, rows), dv.slice(first, rows)};
    };
    backward_pairs(store, dq, whole, dout, out, lse, spans);
}

void ChunkedAttention::backward(const QkvStore& store, Tensor dq, const KvGradientChunks& kv_chunks,
                                Tensor dout, Tensor out, Tensor lse,
                                std::span<const AttentionSpan> spans) {
    FULCRUM_CHECK(kv_chunks.rows && kv_chunks.done, "dK|dV by chunks needs rows and done");
    backward_pairs(store, dq, kv_chunks, dout, out, lse, spans);
}

void ChunkedAttention::backward(const QkvStore& store, const KvGradientChunks& kv_chunks,
                                const OutputGradientSource& dout, Tensor out, Tensor lse,
                                std::span<const AttentionSpan> spans) {
    FULCRUM_CHECK(offloads(), "the offloading backward needs offload on");
    FULCRUM_CHECK(kv_chunks.rows && kv_chunks.done && dout,
                  "the offloading backward needs dQ|dK|dV by chunks and a source of ∂L/∂o");
    FULCRUM_CHECK((store.host_out != nullptr) == out.empty() &&
                      (out.empty() || out.rows() == kv_chunks.kv_rows),
                  "the offloading backward: the query rows are the K/V rows (Ulysses), and the "
                  "output and lse are on the host or on the device");
    reserve_gradient_buffers(kv_chunks.kv_rows);
    offload_output_gradient(dout, kv_chunks.kv_rows);
    backward_pairs(store, Tensor{}, kv_chunks, Tensor{}, out, lse, spans);
}

void ChunkedAttention::reserve_gradient_slots() {
    if (gradient_slots_.bytes() == 0) {
        gradient_slots_ = backend_.allocate(std::size_t(2 * gradient_slot_floats() * kFloat));
        memory_.gradient_buffer_bytes = std::int64_t(gradient_slots_.bytes());
    }
}

void ChunkedAttention::reserve_gradient_buffers(std::int64_t rows) {
    reserve_gradient_slots();
    if (rows <= host_gradient_rows_) {
        return;
    }
    // The copies of an earlier backward may still read or write the old host rows.
    backend_.synchronize(offload_stream_);
    backend_.synchronize(prefetch_stream_);
    host_dout_ = backend_.allocate_pinned(std::size_t(rows * channels_));
    host_dq_ = backend_.allocate_pinned(std::size_t(rows * channels_));
    host_gradient_rows_ = rows;
}

// ∂L/∂o chunk by chunk into the slots' ∂L/∂o half (FPDT: ∂L/∂o's all-to-all a chunk at a
// time), and from there to the host. The pairs that read a slot before are done: the compute
// stream waited for their fetches.
void ChunkedAttention::offload_output_gradient(const OutputGradientSource& dout,
                                               std::int64_t rows) {
    const std::int64_t c = options_.chunk;
    for (int i = 0; std::int64_t(i) * c < rows; ++i) {
        const int slot = i % 2;
        const std::int64_t first = std::int64_t(i) * c, count = rows_of(i, rows);
        const Tensor chunk = dout_slot(slot, count);
        backend_.wait_event(kComputeStream, grad_offloaded_[slot]);
        dout(first, count, chunk);
        offload_slot(slot, "offload dout chunk", {{host_dout_.get() + first * channels_, chunk}},
                     {grad_offloaded_[slot], host_written_});
    }
}

void ChunkedAttention::backward_pairs(const QkvStore& store, Tensor dq,
                                      const KvGradientChunks& kv_chunks, Tensor dout, Tensor out,
                                      Tensor lse, std::span<const AttentionSpan> spans) {
    FULCRUM_CHECK(enabled(), "chunked attention is off");
    const bool host_gradients = dq.empty();  // the offloading backward
    const bool host_output = store.host_out != nullptr;
    FULCRUM_CHECK(!host_output || host_gradients,
                  "chunked attention: an output on the host is read by the offloading backward");
    const std::int64_t kv_rows = kv_chunks.kv_rows, q_rows = host_gradients ? kv_rows : dq.rows();
    const std::vector<ChunkPair> pairs = backward_order(q_rows, kv_rows, spans);
    const PendingFetch pending = std::exchange(pending_, PendingFetch{});
    const std::int64_t c = options_.chunk;
    // Chunks no pair reads (rows no span covers) are handed over zero, after the others.
    std::vector<bool> handed(std::size_t((kv_rows + c - 1) / c), false);
    auto hand_over = [&](int chunk) {
        handed[std::size_t(chunk)] = true;
        if (kv_chunks.done) {
            kv_chunks.done(chunk, std::int64_t(chunk) * c, rows_of(chunk, kv_rows));
        }
    };
    auto hand_over_the_rest = [&] {
        for (int chunk = 0; chunk < int(handed.size()); ++chunk) {
            if (!handed[std::size_t(chunk)] && kv_chunks.done) {
                (void)kv_chunks.rows(chunk, rows_of(chunk, kv_rows));
                hand_over(chunk);
            }
        }
    };
    if (pairs.empty()) {
        hand_over_the_rest();
        return;
    }
    const std::int64_t width = channels_;
    if (offloads()) {
        FULCRUM_CHECK(store.host_q != nullptr && store.host_kv != nullptr,
                      "chunked attention with offload needs host memory for Q and K/V");
        const bool started = pending.host_q == store.host_q && pending.host_kv == store.host_kv &&
                             pending.q_chunk == pairs.front().q_chunk &&
                             pending.kv_chunk == pairs.front().kv_chunk;
        if (!started) {
            begin_backward_fetches(store, pairs.front(), q_rows, kv_rows);
        }
    }
    // The offloading backward: pair n's ∂L/∂o and dQ sit in gradient slot n mod 2. Its dQ
    // comes from the host when an earlier pair left a partial sum there, from the pair before
    // when that one had the same query chunk, or starts at zero; after the pair it goes back
    // to the host, on to the next pair, or, after the diagonal pair (the query chunk's last),
    // into the chunk's dq for the hand-over.
    enum class PartialDq : char { none, left, final };  // by query chunk, as the pairs run
    std::vector<PartialDq> touched(std::size_t((q_rows + c - 1) / c), PartialDq::none);
    auto fetch_gradients = [&](std::size_t n, bool with_dq) {
        const int slot = int(n % 2);
        const std::int64_t first = std::int64_t(pairs[n].q_chunk) * c;
        const std::int64_t rows = rows_of(pairs[n].q_chunk, q_rows);
        const std::int64_t bytes =
            ((with_dq ? 2 : 1) * rows * width + (host_output ? rows * (width + n_head_) : 0)) *
            kFloat;
        instrument::Range range("prefetch dout chunk", Category::runtime,
                                instrument::with_bytes(bytes));
        backend_.wait_event(prefetch_stream_, grad_free_[slot]);
        backend_.wait_event(prefetch_stream_, grad_offloaded_[slot]);
        backend_.wait_event(prefetch_stream_, host_written_);
        backend_.upload(dout_slot(slot, rows), host_dout_.get() + first * width, prefetch_stream_);
        if (with_dq) {
            backend_.upload(dq_slot(slot, rows), host_dq_.get() + first * width, prefetch_stream_);
        }
        if (host_output) {
            backend_.upload(out_slot(slot, rows), store.host_out + first * width, prefetch_stream_);
            backend_.upload(lse_slot(slot, rows), store.host_lse + first * n_head_,
                            prefetch_stream_);
        }
        backend_.record_event(grad_ready_[slot], prefetch_stream_);
        memory_.prefetched_bytes += bytes;
    };
    // Pair n's dQ when no fetch brings it: zero, or the previous pair's.
    auto seed_dq = [&](std::size_t n) {
        const int slot = int(n % 2), chunk = pairs[n].q_chunk;
        const std::int64_t rows = rows_of(chunk, q_rows);
        backend_.wait_event(kComputeStream, grad_offloaded_[slot]);
        if (n > 0 && pairs[n - 1].q_chunk == chunk) {
            backend_.copy(dq_slot(slot, rows), dq_slot(int((n - 1) % 2), rows));
        } else {
            backend_.fill_zero(dq_slot(slot, rows));
        }
    };
    auto fetches_dq = [&](std::size_t n) {
        return touched[std::size_t(pairs[n].q_chunk)] != PartialDq::none &&
               !(n > 0 && pairs[n - 1].q_chunk == pairs[n].q_chunk);
    };
    if (host_gradients) {
        fetch_gradients(0, false);
        seed_dq(0);
    }
    // The K/V chunk of outer iteration o sits in slot o mod 2, the query chunk of pair n in
    // slot n mod 2.
    int outer = 0;
    ChunkGradients outer_gradients;  // the outer chunk's dk and dv rows (and dq's)
    for (std::size_t n = 0; n < pairs.size(); ++n) {
        const ChunkPair& pair = pairs[n];
        const bool new_outer = n == 0 || pair.kv_chunk != pairs[n - 1].kv_chunk;
        if (new_outer && n > 0) {
            if (offloads()) {
                backend_.record_event(kv_free_[outer % 2], kComputeStream);
            }
            hand_over(pairs[n - 1].kv_chunk);
            ++outer;
        }
        if (new_outer) {
            outer_gradients = kv_chunks.rows(pair.kv_chunk, rows_of(pair.kv_chunk, kv_rows));
        }
        if (offloads()) {
            if (new_outer) {
                // The next K/V chunk comes in while this one's whole inner loop computes.
                std::size_t m = n + 1;
                while (m < pairs.size() && pairs[m].kv_chunk == pair.kv_chunk) {
                    ++m;
                }
                if (m < pairs.size()) {
                    fetch_kv(store.host_kv, pairs[m].kv_chunk, kv_rows, (outer + 1) % 2);
                }
                backend_.wait_event(kComputeStream, kv_ready_[outer % 2]);
            }
            if (n + 1 < pairs.size()) {
                fetch_q(store.host_q, pairs[n + 1].q_chunk, q_rows, int((n + 1) % 2));
                if (host_gradients) {
                    fetch_gradients(n + 1, fetches_dq(n + 1));
                }
            }
            backend_.wait_event(kComputeStream, q_ready_[n % 2]);
            if (host_gradients) {
                backend_.wait_event(kComputeStream, grad_ready_[n % 2]);
            }
        }
        const int slot = int(n % 2);
        const std::int64_t q_first = std::int64_t(pair.q_chunk) * c;
        const std::int64_t q_count = rows_of(pair.q_chunk, q_rows);
        const std::int64_t kv_first = std::int64_t(pair.kv_chunk) * c;
        const std::int64_t kv_count = rows_of(pair.kv_chunk, kv_rows);
        const Tensor q = offloads() ? q_slot(slot, q_count) : store.q.slice(q_first, q_count);
        const Tensor kv =
            offloads() ? kv_slot(outer % 2, kv_count) : store.kv.slice(kv_first, kv_count);
        const Tensor pair_dq = host_gradients ? dq_slot(slot, q_count) : dq.slice(q_first, q_count);
        const Tensor pair_dout =
            host_gradients ? dout_slot(slot, q_count) : dout.slice(q_first, q_count);
        const Tensor pair_out = host_output ? out_slot(slot, q_count) : out.slice(q_first, q_count);
        const Tensor pair_lse = host_output ? lse_slot(slot, q_count) : lse.slice(q_first, q_count);
        const std::vector<AttentionSpan> pieces = spans_of(pair);
        backend_.attention_backward(pair_dq, outer_gradients.dk, outer_gradients.dv, pair_dout, q,
                                    kv.columns(0, width), kv.columns(width, width), pair_out,
                                    pair_lse, pieces, n_head_);
        if (offloads()) {
            backend_.record_event(q_free_[slot], kComputeStream);
        }
        if (!host_gradients) {
            continue;
        }
        FULCRUM_CHECK(touched[std::size_t(pair.q_chunk)] != PartialDq::final,
                      "the offloading backward: a query chunk after its diagonal pair");
        touched[std::size_t(pair.q_chunk)] = PartialDq::left;
        const bool same_next = n + 1 < pairs.size() && pairs[n + 1].q_chunk == pair.q_chunk;
        if (pair.q_chunk == pair.kv_chunk) {
            // Its last pair (K/V chunks ascending, causal): dQ is final.
            touched[std::size_t(pair.q_chunk)] = PartialDq::final;
            backend_.copy(outer_gradients.dq, pair_dq);
        } else if (!same_next) {
            offload_slot(slot, "offload dq chunk", {{host_dq_.get() + q_first * width, pair_dq}},
                         {grad_offloaded_[slot], host_written_});
        }
        if (n + 1 < pairs.size() && !fetches_dq(n + 1)) {
            seed_dq(n + 1);
        }
        backend_.record_event(grad_free_[slot], kComputeStream);
    }
    if (offloads()) {
        backend_.record_event(kv_free_[outer % 2], kComputeStream);
    }
    hand_over(pairs.back().kv_chunk);
    hand_over_the_rest();
}

}  // namespace fulcrum::engine
