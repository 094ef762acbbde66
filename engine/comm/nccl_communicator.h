// The NCCL backend of Communicator: the engine's collectives and point-to-point transfers on
// device buffers, run by NCCL's kernels on the caller's CUDA stream (built with the CUDA
// backend when NCCL is found; FULCRUM_HAVE_NCCL says so).
//
// Bootstrap (docs/sources.md, "NCCL"). Rank 0 calls ncclGetUniqueId and hands the 128-byte id to
// every rank, then each calls ncclCommInitRank with it; sub-groups come from ncclCommSplit. The id
// travels over an existing host communicator (`bootstrap_over`, MPI in fulcrum-train) or,
// without MPI, through a file or TCP rendezvous (`bootstrap_with_rendezvous`, rendezvous.h).
//
// One GPU per rank. NCCL before 2.30 refuses two ranks of one communicator on the same GPU
// ("Duplicate GPU detected", ncclInvalidUsage); communicators of one rank are always allowed.
// Several ranks sharing a GPU (a 4-rank layout on one H100) therefore cannot use this class:
// the engine uses the staged communicator over MPI there (staged_communicator.h).
//
// Ordering. Every operation is enqueued on the stream given at creation — the backend's
// compute stream — so its result is ordered before the compute work enqueued after it, and
// the host does not wait: "blocking" in communicator.h's sense means "ordered on the stream".
// The exceptions wait for the stream before they return, because the host reads the result:
//   * spans in host memory. all_reduce_sum(span<double>) and broadcast_bytes always get host
//     memory from the engine (loss and norm scalars, step plans), and a few non-hot callers
//     pass host float vectors (gather_parameters). Any span that is not device or managed
//     memory (cudaPointerGetAttributes) is copied through a device scratch buffer and back.
//   * barrier(), which is a one-element all-reduce the host waits for.
//
// Posted sends. NCCL serialises the kernels of one communicator across streams, and a send
// waits for its peer's receive (NVIDIA/nccl#783 and #574): two neighbours that each enqueue a
// send to the other on one communicator can deadlock — 1F1B's steady state does exactly that.
// So transfers between two different ranks go over two duplicates of the communicator made
// at creation (ncclCommSplit, same color): `up` for every transfer from a lower to a higher
// rank, `down` for the others. On each, data flows one way, so no two ranks wait on each
// other. post_send copies `values` into a staging buffer on the compute stream (the caller may
// reuse its buffer at once) and sends it at once on a side stream, which waits for the copy
// by an event; compute goes on. wait_sends makes the compute stream wait for the side stream
// (the host does not wait). Torch's process groups get the same from one communicator per
// pair. A send to itself is the exception: it completes only in one group with the receive,
// so it is held back and grouped with the next point-to-point call (or issued by a
// collective, split or wait_sends).
//
// Overlapped reductions and exchanges. start_all_reduce_sum and start_all_to_all enqueue on
// the side stream after the compute stream's work so far; wait_all_reduces orders the compute
// stream after the side stream, wait_all_to_all after the event its all-to-all recorded there
// (FPDT's chunks: chunk i + 1's exchange beside chunk i's attention). Host spans fall back to
// the blocking call.
//
// Unequal counts. NCCL's all-gather and reduce-scatter take one count for all members; the
// engine's CP shards differ. Equal counts use them directly; unequal ones are one
// ncclBroadcast (all-gather) or ncclReduce (reduce-scatter) per member, rooted at that member,
// in one NCCL group. Padding every member to the largest count would need a padded copy of
// each buffer and a compaction after; the grouped form moves exactly the bytes MPI's
// v-variants move, writes straight into the caller's buffers, and NCCL runs the grouped
// operations concurrently (torch.distributed does the same for uneven all-gathers).
//
// Errors. Creating a communicator can fail for reasons a user can act on (the id's rank 0 is
// unreachable, two ranks on one GPU): those are Errors. A failing NCCL or CUDA call after that
// is a lost peer, a lost device or a programming error: it aborts with file, line and NCCL's
// or CUDA's message, like engine/backend/cuda/common.cuh. NCCL emits its own NVTX ranges
// (domain "NCCL", docs/sources.md, "NCCL"); this class adds none.
//
// This header needs no CUDA or NCCL header: what it holds of them lives behind `State`, and
// the stream is a `void*` (a cudaStream_t).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "core/util/result.h"
#include "engine/comm/communicator.h"
#include "engine/comm/rendezvous.h"

namespace fulcrum::engine {

// ncclUniqueId's bytes (NCCL_UNIQUE_ID_BYTES; the .cpp checks the size).
using NcclUniqueId = std::array<std::byte, 128>;

class NcclCommunicator final : public Communicator {
public:
    // ncclGetUniqueId: only rank 0 calls it, once per job.
    static Result<NcclUniqueId> new_unique_id();

    // ncclCommInitRank on `device` (cudaSetDevice first), enqueueing on `stream`; every rank
    // of `size` calls it with rank 0's `id`. `stream` (a cudaStream_t, nullptr for the legacy
    // default stream) must outlive the communicator.
    static Result<std::unique_ptr<NcclCommunicator>> create(int rank, int size,
                                                            const NcclUniqueId& id, int device,
                                                            void* stream, std::string name);

    // Rank 0 of `host_world` makes the id and broadcasts it with broadcast_bytes (every rank
    // learns whether that worked), then every rank creates its communicator: same rank, size
    // and name as `host_world`.
    static Result<std::unique_ptr<NcclCommunicator>> bootstrap_over(Communicator& host_world,
                                                                    int device, void* stream);

    // The same without MPI: the id goes through rendezvous_exchange(`spec`, ...) and, once the
    // communicator exists (every rank has read it), rank 0 removes a rendezvous file. Named
    // "world".
    static Result<std::unique_ptr<NcclCommunicator>> bootstrap_with_rendezvous(
        std::string_view spec, const LaunchRank& launch, int device, void* stream,
        std::chrono::milliseconds timeout);

    ~NcclCommunicator() override;
    NcclCommunicator(const NcclCommunicator&) = delete;
    NcclCommunicator& operator=(const NcclCommunicator&) = delete;

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    const std::string& name() const override { return name_; }
    int device() const { return device_; }

    void all_reduce_sum(std::span<float> values) override;
    void all_reduce_sum(std::span<double> values) override;
    void start_all_reduce_sum(std::span<float> values) override;
    void wait_all_reduces() override;
    void all_gather(std::span<const float> local, std::span<float> out,
                    const std::vector<int>& counts) override;
    void reduce_scatter_sum(std::span<const float> in, std::span<float> out,
                            const std::vector<int>& counts) override;
    void all_to_all(std::span<const float> in, const std::vector<int>& send_counts,
                    std::span<float> out, const std::vector<int>& recv_counts) override;
    std::int64_t start_all_to_all(std::span<const float> in, const std::vector<int>& send_counts,
                                  std::span<float> out,
                                  const std::vector<int>& recv_counts) override;
    void wait_all_to_all(std::int64_t ticket) override;
    void send(std::span<const float> values, int peer) override;
    void post_send(std::span<const float> values, int peer) override;
    void wait_sends() override;
    void recv(std::span<float> values, int peer) override;
    void send_recv(std::span<const float> send_values, int send_peer, std::span<float> recv_values,
                   int recv_peer) override;
    void broadcast(std::span<float> values, int root) override;
    void broadcast_bytes(std::span<std::byte> bytes, int root) override;
    void barrier() override;
    // ncclCommSplit; `color` must be ≥ 0 (a color nobody else passes gives a 1-rank
    // communicator). The child enqueues on the same stream.
    std::unique_ptr<Communicator> split(int color, int key, std::string name) override;

private:
    struct State;
    NcclCommunicator(std::unique_ptr<State> state, int rank, int size, int device,
                     std::string name);

    std::unique_ptr<State> state_;
    int rank_;
    int size_;
    int device_;
    std::string name_;
};

}  // namespace fulcrum::engine
