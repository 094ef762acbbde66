// Offloaded activation checkpoints (FPDT, Yao et al. 2024, §3.4; the "OC" rows of its table of
// training strategies): under full recomputation a block keeps only its output, the next
// block's input, and recomputes the rest in its backward pass. With offload those outputs wait
// in pinned host memory between the forward and backward pass, and the device holds two of
// them at a time, whatever the layers:
//
//     forward, block l:  compute waits until slot l mod 2's last copy out is done, writes the
//                        block's output there; the offload stream then copies it to the host
//                        while block l+1 reads it as its input
//     backward, block l: compute waits until checkpoint l−1 (its input) has come into its
//                        slot; the prefetch stream meanwhile fetches checkpoint l−2 into the
//                        other slot, once block l+1's backward has done reading it
//
// Which outputs go: every block's of a model chunk but the last, whose output is what the
// stage sends on (or the head reads) and stays (Activations, gpt.h). The chunk's input too
// stays: it was received into, or is the embedding's output.
//
// Streams and events as chunked_attention.h orders them; the host never waits. The copies are
// CUPTI memcpy records on a GPU and `memcpy DtoH` / `memcpy HtoD` ranges on the CPU backend's
// copy threads, inside "offload checkpoint" and "prefetch checkpoint" ranges (category
// runtime) where they are issued.
#pragma once

#include <cstdint>

#include "engine/backend/backend.h"

namespace fulcrum::engine {

struct CheckpointMemory {
    std::int64_t slot_bytes = 0;        // device: the two slots
    std::int64_t offloaded_bytes = 0;   // device → host, so far
    std::int64_t prefetched_bytes = 0;  // host → device, so far
};

class CheckpointOffload {
public:
    explicit CheckpointOffload(Backend& backend);

    // Forward: the device rows [rows, cols] block `layer` writes its output into, once the
    // copy out of them before is done (slot layer mod 2).
    Tensor output_rows(int layer, std::int64_t rows, std::int64_t cols);
    // After the block's forward was issued: its output, `rows` from output_rows(), to `host`.
    void offload(int layer, Tensor rows, float* host);

    // Before a backward pass's first prefetch: the slots' readers so far (the forward's) are
    // done before anything is fetched into them.
    void begin_backward();
    // Backward: fetch checkpoint `layer` (the input of block layer + 1) from `host` into slot
    // layer mod 2, once every forward copy out and the slot's last reader are done.
    void prefetch(int layer, const float* host, std::int64_t rows, std::int64_t cols);
    // Whether prefetch(layer, host, ...) was issued and not yet fetched: a backward that runs
    // block by block (the overlapped gradient reduction) finds the next block's input on its
    // way from the call before.
    bool prefetched(int layer, const float* host) const;
    // The compute stream waits for prefetch(layer, ...) and gets its rows.
    Tensor fetched(int layer, std::int64_t rows, std::int64_t cols);
    // After the compute that reads checkpoint `layer` was issued: its slot may be refilled.
    void release(int layer);

    const CheckpointMemory& memory() const { return memory_; }

private:
    Tensor slot(int layer, std::int64_t rows, std::int64_t cols);

    Backend& backend_;
    StreamId offload_stream_{}, prefetch_stream_{};
    EventId written_[2]{}, offloaded_[2]{}, fetched_[2]{}, free_[2]{};
    DeviceBuffer slots_;
    std::int64_t slot_floats_ = 0;
    struct Pending {
        int layer = -1;
        const float* host = nullptr;
    } pending_[2];
    CheckpointMemory memory_;
};

}  // namespace fulcrum::engine
