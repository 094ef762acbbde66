#include "engine/model/chunked_attention.h"

#include <algorithm>
#include <utility>

#include "engine/instrument/annotations.h"

namespace fulcrum::engine {
namespace {

constexpr std::int64_t kFloat = sizeof(float);

}  // namespace

ChunkedAttention::ChunkedAttention(Backend& backend, int channels, int n_head,
                                   ChunkedAttentionOptions options)
    : backend_(backend), channels_(channels), n_head_(n_head), options_(options) {
    if (!enabled()) {
        return;
    }
    const std::int64_t c = options_.chunk;
    partials_ = backend_.allocate(std::size_t(c * (channels_ + n_head_) * kFloat));
    memory_.device_bytes = std::int64_t(partials_.bytes());
    if (options_.offload) {
        offload_stream_ = backend_.create_stream("offload");
        prefetch_stream_ = backend_.create_stream("prefetch");
        produced_ = backend_.create_event();
        offloaded_ = backend_.create_event();
        for (int slot = 0; slot < 2; ++slot) {
            slot_ready_[slot] = backend_.create_event();
            slot_free_[slot] = backend_.create_event();
        }
        slots_ = backend_.allocate(std::size_t(2 * 2 * c * channels_ * kFloat));
        memory_.device_bytes += std::int64_t(slots_.bytes());
    }
}

bool ChunkedAttention::is_long(const AttentionSpan& span) const {
    return span.length > 0 && span.visible_end(span.length - 1) > options_.chunk;
}

std::vector<ChunkedAttention::Pair> ChunkedAttention::pairs_of(const AttentionSpan& span) const {
    const std::int32_t c = options_.chunk;
    const std::int32_t end = span.prefix + span.length;
    std::vector<Pair> pairs;
    for (std::int32_t a = span.prefix; a < end;) {
        const std::int32_t b = std::min((a / c + 1) * c, end);
        const AttentionSpan query{span.q_begin + (a - span.prefix), span.kv_begin, a, b - a};
        for (std::int32_t j = 0; j * c < b; ++j) {
            const std::int32_t key_begin = j * c;
            pairs.push_back({query, span.kv_begin + key_begin, key_begin,
                             std::min(c, b - key_begin), j});
        }
        a = b;
    }
    return pairs;
}

void ChunkedAttention::reserve(std::int64_t keys) {
    if (keys <= host_keys_) {
        return;
    }
    // Copies may still read or write the old buffers.
    backend_.synchronize(offload_stream_);
    backend_.synchronize(prefetch_stream_);
    host_k_ = backend_.allocate_pinned(std::size_t(keys * channels_));
    host_v_ = backend_.allocate_pinned(std::size_t(keys * channels_));
    host_keys_ = keys;
    memory_.host_bytes = 2 * keys * channels_ * kFloat;
}

void ChunkedAttention::offload(Tensor k, Tensor v, const AttentionSpan& span) {
    const std::int64_t keys = span.prefix + span.length;
    reserve(keys);
    const std::int64_t bytes = 2 * keys * channels_ * kFloat;
    instrument::Range range("offload kv", Category::runtime, instrument::with_bytes(bytes));
    backend_.record_event(produced_, kComputeStream);
    backend_.wait_event(offload_stream_, produced_);
    for (std::int64_t first = 0; first < keys; first += options_.chunk) {
        const std::int64_t count = std::min<std::int64_t>(options_.chunk, keys - first);
        backend_.download(host_k_.get() + first * channels_, k.slice(span.kv_begin + first, count),
                          offload_stream_);
        backend_.download(host_v_.get() + first * channels_, v.slice(span.kv_begin + first, count),
                          offload_stream_);
    }
    backend_.record_event(offloaded_, offload_stream_);
    memory_.offloaded_bytes += bytes;
}

void ChunkedAttention::prefetch(const Pair& pair, int slot) {
    const std::int64_t c = options_.chunk;
    const std::int64_t bytes = 2 * std::int64_t(pair.key_count) * channels_ * kFloat;
    instrument::Range range("prefetch kv", Category::runtime, instrument::with_bytes(bytes));
    backend_.wait_event(prefetch_stream_, offloaded_);
    backend_.wait_event(prefetch_stream_, slot_free_[slot]);
    const std::int64_t host_offset = std::int64_t(pair.chunk_index) * c * channels_;
    const std::int64_t slot_offset = std::int64_t(slot) * 2 * c * channels_;
    backend_.upload(slots_.f32(slot_offset, {pair.key_count, channels_}),
                    host_k_.get() + host_offset, prefetch_stream_);
    backend_.upload(slots_.f32(slot_offset + c * channels_, {pair.key_count, channels_}),
                    host_v_.get() + host_offset, prefetch_stream_);
    backend_.record_event(slot_ready_[slot], prefetch_stream_);
    memory_.prefetched_bytes += bytes;
}

std::pair<std::vector<AttentionSpan>, std::vector<AttentionSpan>> ChunkedAttention::split(
    std::span<const AttentionSpan> spans) const {
    std::pair<std::vector<AttentionSpan>, std::vector<AttentionSpan>> parts;
    for (const AttentionSpan& span : spans) {
        (is_long(span) ? parts.second : parts.first).push_back(span);
    }
    return parts;
}

// Every pair of `span` in order; with offload, the span's K/V go to the host first, and pair
// n + 1's chunk is prefetched into the other slot before pair n computes. The backward offloads
// again: the host copy the forward made belongs to whichever layer ran last.
void ChunkedAttention::run_pairs(Tensor k, Tensor v, const AttentionSpan& span,
                                 const std::function<void(const Pair&, Tensor, Tensor)>& visit) {
    const std::int64_t c = options_.chunk;
    const std::vector<Pair> pairs = pairs_of(span);
    if (options_.offload) {
        offload(k, v, span);
        prefetch(pairs.front(), 0);
    }
    for (std::size_t n = 0; n < pairs.size(); ++n) {
        const Pair& pair = pairs[n];
        const int slot = int(n % 2);
        if (!options_.offload) {
            visit(pair, k.slice(pair.kv_row, pair.key_count), v.slice(pair.kv_row, pair.key_count));
            continue;
        }
        if (n + 1 < pairs.size()) {
            prefetch(pairs[n + 1], 1 - slot);
        }
        backend_.wait_event(kComputeStream, slot_ready_[slot]);
        visit(pair, slots_.f32(slot * 2 * c * channels_, {pair.key_count, channels_}),
              slots_.f32((slot * 2 + 1) * c * channels_, {pair.key_count, channels_}));
        backend_.record_event(slot_free_[slot], kComputeStream);
    }
}

void ChunkedAttention::forward(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v,
                               std::span<const AttentionSpan> spans) {
    if (!enabled()) {
        backend_.attention_forward(out, lse, q, k, v, spans, n_head_);
        return;
    }
    const auto [short_spans, long_spans] = split(spans);
    if (!short_spans.empty()) {
        backend_.attention_forward(out, lse, q, k, v, short_spans, n_head_);
    }
    const std::int64_t c = options_.chunk;
    const Tensor part_out = partials_.f32(0, {c, channels_});
    const Tensor part_lse = partials_.f32(c * channels_, {c, n_head_});
    for (const AttentionSpan& span : long_spans) {
        memory_.resident_kv_bytes = std::max<std::int64_t>(
            memory_.resident_kv_bytes, 2 * std::int64_t(span.prefix + span.length) * channels_ * kFloat);
        run_pairs(k, v, span, [&](const Pair& pair, Tensor k_chunk, Tensor v_chunk) {
            const AttentionSpan window = pair.window();
            const std::int64_t rows = pair.query.length;
            const Tensor q_rows = q.slice(pair.query.q_begin, rows);
            const Tensor out_rows = out.slice(pair.query.q_begin, rows);
            const Tensor lse_rows = lse.slice(pair.query.q_begin, rows);
            if (pair.key_begin == 0) {  // the first window of this query chunk: no merge
                backend_.attention_forward(out_rows, lse_rows, q_rows, k_chunk, v_chunk,
                                           {&window, 1}, n_head_);
            } else {
                const Tensor part_rows = part_out.slice(0, rows);
                const Tensor part_lse_rows = part_lse.slice(0, rows);
                backend_.attention_forward(part_rows, part_lse_rows, q_rows, k_chunk, v_chunk,
                                           {&window, 1}, n_head_);
                backend_.attention_merge(out_rows, lse_rows, part_rows, part_lse_rows, n_head_);
            }
        });
    }
}

void ChunkedAttention::backward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q, Tensor k,
                                Tensor v, Tensor out, Tensor lse,
                                std::span<const AttentionSpan> spans) {
    if (!enabled()) {
        backend_.attention_backward(dq, dk, dv, dout, q, k, v, out, lse, spans, n_head_);
        return;
    }
    const auto [short_spans, long_spans] = split(spans);
    if (!short_spans.empty()) {
        backend_.attention_backward(dq, dk, dv, dout, q, k, v, out, lse, short_spans, n_head_);
    }
    for (const AttentionSpan& span : long_spans) {
        run_pairs(k, v, span, [&](const Pair& pair, Tensor k_chunk, Tensor v_chunk) {
            const AttentionSpan window = pair.window();
            const std::int64_t rows = pair.query.length;
            const std::int64_t first = pair.query.q_begin;
            backend_.attention_backward(
                dq.slice(first, rows), dk.slice(pair.kv_row, pair.key_count),
                dv.slice(pair.kv_row, pair.key_count), dout.slice(first, rows),
                q.slice(first, rows), k_chunk, v_chunk, out.slice(first, rows),
                lse.slice(first, rows), {&window, 1}, n_head_);
        });
    }
}

}  // namespace fulcrum::engine
