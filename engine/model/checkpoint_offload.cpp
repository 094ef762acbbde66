#include "engine/model/checkpoint_offload.h"

#include "engine/instrument/annotations.h"

namespace fulcrum::engine {
namespace {

constexpr std::int64_t kFloat = sizeof(float);

}  // namespace

CheckpointOffload::CheckpointOffload(Backend& backend) : backend_(backend) {
    offload_stream_ = backend_.create_stream("checkpoint offload");
    prefetch_stream_ = backend_.create_stream("checkpoint prefetch");
    for (int s = 0; s < 2; ++s) {
        written_[s] = backend_.create_event();
        offloaded_[s] = backend_.create_event();
        fetched_[s] = backend_.create_event();
        free_[s] = backend_.create_event();
    }
}

Tensor CheckpointOffload::slot(int layer, std::int64_t rows, std::int64_t cols) {
    const std::int64_t floats = rows * cols;
    if (floats > slot_floats_) {
        // Freeing the old slots waits for the copies in flight to or from them (backend.h).
        slots_ = backend_.allocate(std::size_t(2 * floats * kFloat));
        slot_floats_ = floats;
        memory_.slot_bytes = std::int64_t(slots_.bytes());
    }
    return slots_.f32(std::int64_t(layer % 2) * slot_floats_, {rows, cols});
}

Tensor CheckpointOffload::output_rows(int layer, std::int64_t rows, std::int64_t cols) {
    const Tensor rows_view = slot(layer, rows, cols);
    backend_.wait_event(kComputeStream, offloaded_[layer % 2]);
    backend_.wait_event(kComputeStream, fetched_[layer % 2]);
    return rows_view;
}

void CheckpointOffload::offload(int layer, Tensor rows, float* host) {
    const std::int64_t bytes = rows.numel() * kFloat;
    instrument::Range range("offload checkpoint", Category::runtime, instrument::with_bytes(bytes));
    const int s = layer % 2;
    backend_.record_event(written_[s], kComputeStream);
    backend_.wait_event(offload_stream_, written_[s]);
    backend_.download(host, rows, offload_stream_);
    backend_.record_event(offloaded_[s], offload_stream_);
    memory_.offloaded_bytes += bytes;
}

void CheckpointOffload::begin_backward() {
    backend_.record_event(free_[0], kComputeStream);
    backend_.record_event(free_[1], kComputeStream);
}

void CheckpointOffload::prefetch(int layer, const float* host, std::int64_t rows,
                                 std::int64_t cols) {
    const Tensor rows_view = slot(layer, rows, cols);
    const std::int64_t bytes = rows * cols * kFloat;
    instrument::Range range("prefetch checkpoint", Category::runtime,
                            instrument::with_bytes(bytes));
    const int s = layer % 2;
    // The offload stream runs in order: its latest records cover every copy out so far.
    backend_.wait_event(prefetch_stream_, offloaded_[0]);
    backend_.wait_event(prefetch_stream_, offloaded_[1]);
    backend_.wait_event(prefetch_stream_, free_[s]);
    backend_.upload(rows_view, host, prefetch_stream_);
    backend_.record_event(fetched_[s], prefetch_stream_);
    pending_[s] = {layer, host};
    memory_.prefetched_bytes += bytes;
}

bool CheckpointOffload::prefetched(int layer, const float* host) const {
    const Pending& pending = pending_[layer % 2];
    return pending.layer == layer && pending.host == host;
}

Tensor CheckpointOffload::fetched(int layer, std::int64_t rows, std::int64_t cols) {
    backend_.wait_event(kComputeStream, fetched_[layer % 2]);
    pending_[layer % 2] = {};
    return slot(layer, rows, cols);
}

void CheckpointOffload::release(int layer) {
    backend_.record_event(free_[layer % 2], kComputeStream);
}

}  // namespace fulcrum::engine
