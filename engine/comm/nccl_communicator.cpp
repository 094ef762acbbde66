#include "engine/comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "engine/backend/backend.h"  // FULCRUM_CHECK

namespace fulcrum::engine {
namespace {

static_assert(sizeof(ncclUniqueId) == std::tuple_size_v<NcclUniqueId>,
              "NcclUniqueId must hold exactly NCCL_UNIQUE_ID_BYTES");

// After creation a failing call is a lost peer or device, or a programming error: abort with
// where and why (the same form as engine/backend/cuda/common.cuh, which .cpp files cannot
// include). ncclGetLastError adds NCCL's own explanation ("Duplicate GPU detected ...").
[[noreturn]] void call_failed(const char* library, const char* call, const char* message,
                              const char* detail, const char* file, int line) {
    std::fprintf(stderr, "fulcrum engine: %s:%d: %s error: %s%s%s (%s)\n", file, line, library,
                 message, detail != nullptr && *detail != '\0' ? ": " : "",
                 detail != nullptr ? detail : "", call);
    std::abort();
}

#define FULCRUM_NCCL_CHECK(call)                                            \
    do {                                                                    \
        const ncclResult_t fulcrum_status_ = (call);                        \
        if (fulcrum_status_ != ncclSuccess)                                 \
            call_failed("NCCL", #call, ncclGetErrorString(fulcrum_status_), \
                        ncclGetLastError(nullptr), __FILE__, __LINE__);     \
    } while (false)

#define FULCRUM_CUDA_CHECK(call)                                                               \
    do {                                                                                       \
        const cudaError_t fulcrum_status_ = (call);                                            \
        if (fulcrum_status_ != cudaSuccess)                                                    \
            call_failed("CUDA", #call, cudaGetErrorString(fulcrum_status_), nullptr, __FILE__, \
                        __LINE__);                                                             \
    } while (false)

// Device (or managed) memory NCCL can use in place; anything else — pageable or pinned host
// memory — is staged. CUDA 11+ answers cudaMemoryTypeUnregistered for plain host memory.
bool device_accessible(const void* data) {
    cudaPointerAttributes attributes{};
    FULCRUM_CUDA_CHECK(cudaPointerGetAttributes(&attributes, data));
    return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

// A device allocation that grows and never shrinks.
class GrowingDeviceBuffer {
public:
    GrowingDeviceBuffer() = default;
    GrowingDeviceBuffer(GrowingDeviceBuffer&& other) noexcept
        : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
    GrowingDeviceBuffer& operator=(GrowingDeviceBuffer&&) = delete;
    ~GrowingDeviceBuffer() {
        if (data_ != nullptr) {
            cudaFree(data_);  // at teardown: a failure has nobody left to tell
        }
    }

    void* data() const { return data_; }

    // At least `bytes`; the contents are not kept. Work already enqueued on `stream` may still
    // read the old allocation, so it is freed only after that work.
    void reserve(std::size_t bytes, cudaStream_t stream) {
        if (bytes <= bytes_) {
            return;
        }
        if (data_ != nullptr) {
            FULCRUM_CUDA_CHECK(cudaStreamSynchronize(stream));
            FULCRUM_CUDA_CHECK(cudaFree(data_));
            data_ = nullptr;
        }
        FULCRUM_CUDA_CHECK(cudaMalloc(&data_, bytes));
        bytes_ = bytes;
    }

private:
    void* data_ = nullptr;
    std::size_t bytes_ = 0;
};

bool all_equal(const std::vector<int>& counts) {
    return std::adjacent_find(counts.begin(), counts.end(), std::not_equal_to<>()) == counts.end();
}

}  // namespace

struct NcclCommunicator::State {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
    // Device copies of host spans: one slot per span of a call (two at most).
    std::array<GrowingDeviceBuffer, 2> scratch;
    // post_send's copies; deferred[i] sends from send_staging[i].
    struct DeferredSend {
        std::size_t count;
        int peer;
    };
    std::vector<GrowingDeviceBuffer> send_staging;
    std::vector<DeferredSend> deferred;

    // Transfers between two different ranks go over two duplicates of `comm`, one per
    // direction: `up` carries every transfer from a lower to a higher rank, `down` the others.
    // A posted send then goes out at once on the side stream without deadlocking its peer's
    // send the other way (the 1F1B steady state): NCCL serialises the kernels of one
    // communicator, and on each of these all transfers flow one way, so no two ranks can wait
    // on each other. Torch's process groups get the same from one communicator per pair.
    ncclComm_t up = nullptr, down = nullptr;
    // Posted sends and started all-reduces run here, ordered after the compute stream's work
    // by `compute_ready`; wait_sends / wait_all_reduces order the compute stream after them.
    cudaStream_t side = nullptr;
    cudaEvent_t compute_ready = nullptr, side_done = nullptr;
    std::vector<GrowingDeviceBuffer> posted_staging;  // one per send posted since wait_sends
    // Started all-to-alls: each records its event on the side stream after its transfers;
    // wait_all_to_all orders the compute stream after that event. Events are reused.
    struct StartedExchange {
        std::int64_t ticket;
        cudaEvent_t done;
    };
    std::vector<StartedExchange> exchanges;
    std::vector<cudaEvent_t> spare_events;
    std::int64_t next_ticket = 0;
    std::size_t posted = 0;
    int rank = 0;

    State(ncclComm_t comm_, cudaStream_t stream_) : comm(comm_), stream(stream_) {}

    // Collective over the communicator's members (creation and split call it on every rank).
    void open_side(int rank_, int size) {
        rank = rank_;
        if (size > 1) {
            FULCRUM_NCCL_CHECK(ncclCommSplit(comm, 0, rank, &up, nullptr));
            FULCRUM_NCCL_CHECK(ncclCommSplit(comm, 0, rank, &down, nullptr));
        }
        FULCRUM_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
        FULCRUM_CUDA_CHECK(cudaEventCreateWithFlags(&compute_ready, cudaEventDisableTiming));
        FULCRUM_CUDA_CHECK(cudaEventCreateWithFlags(&side_done, cudaEventDisableTiming));
    }
    ncclComm_t sending_to(int peer) const { return peer > rank ? up : down; }
    ncclComm_t receiving_from(int peer) const { return peer < rank ? up : down; }
    void side_after_compute() {
        FULCRUM_CUDA_CHECK(cudaEventRecord(compute_ready, stream));
        FULCRUM_CUDA_CHECK(cudaStreamWaitEvent(side, compute_ready, 0));
    }
    void compute_after_side() {
        FULCRUM_CUDA_CHECK(cudaEventRecord(side_done, side));
        FULCRUM_CUDA_CHECK(cudaStreamWaitEvent(stream, side_done, 0));
    }
    State(const State&) = delete;
    State& operator=(const State&) = delete;

    ~State() {
        if (!deferred.empty()) {
            std::fprintf(stderr,
                         "fulcrum engine: warning: %zu posted NCCL send(s) never waited for "
                         "(wait_sends) are dropped\n",
                         deferred.size());
        }
        // Teardown must not abort: report and go on. Every rank destroys its communicators in
        // the same order (the engine's code is the same on every rank), which
        // ncclCommDestroy's internal finalisation expects.
        if (const cudaError_t status = cudaStreamSynchronize(stream); status != cudaSuccess) {
            std::fprintf(stderr,
                         "fulcrum engine: warning: %s before destroying a NCCL "
                         "communicator\n",
                         cudaGetErrorString(status));
        }
        if (side != nullptr) {
            cudaStreamSynchronize(side);
        }
        for (ncclComm_t direction : {up, down}) {
            if (direction != nullptr) {
                ncclCommDestroy(direction);
            }
        }
        for (const StartedExchange& x : exchanges) {
            cudaEventDestroy(x.done);
        }
        for (cudaEvent_t event : spare_events) {
            cudaEventDestroy(event);
        }
        if (side != nullptr) {
            cudaEventDestroy(compute_ready);
            cudaEventDestroy(side_done);
            cudaStreamDestroy(side);
        }
        if (const ncclResult_t status = ncclCommDestroy(comm); status != ncclSuccess) {
            std::fprintf(stderr, "fulcrum engine: warning: ncclCommDestroy: %s\n",
                         ncclGetErrorString(status));
        }
    }

    // One NCCL group with the deferred sends first, then `transfers` (NCCL calls); the sends'
    // staging buffers may be reused by later work on the stream, which runs after the group.
    template <typename Transfers>
    void grouped_with_deferred_sends(Transfers transfers) {
        FULCRUM_NCCL_CHECK(ncclGroupStart());
        for (std::size_t i = 0; i < deferred.size(); ++i) {
            FULCRUM_NCCL_CHECK(ncclSend(send_staging[i].data(), deferred[i].count, ncclFloat,
                                        deferred[i].peer, comm, stream));
        }
        transfers();
        FULCRUM_NCCL_CHECK(ncclGroupEnd());
        deferred.clear();
    }

    // An all-to-all's transfers (NCCL has none: one send and one receive per member, sends to
    // itself included; NCCL's documentation, "Point-to-point communication", all-to-all
    // example), on `on`, inside the caller's group.
    void all_to_all_transfers(const float* send, const std::vector<int>& send_counts, float* recv,
                              const std::vector<int>& recv_counts, cudaStream_t on) const {
        std::size_t sent = 0, received = 0;
        for (std::size_t member = 0; member < send_counts.size(); ++member) {
            const auto to = static_cast<std::size_t>(send_counts[member]);
            const auto from = static_cast<std::size_t>(recv_counts[member]);
            if (to > 0) {
                FULCRUM_NCCL_CHECK(ncclSend(send + sent, to, ncclFloat, int(member), comm, on));
            }
            if (from > 0) {
                FULCRUM_NCCL_CHECK(
                    ncclRecv(recv + received, from, ncclFloat, int(member), comm, on));
            }
            sent += to;
            received += from;
        }
    }

    void issue_deferred_sends() {
        if (!deferred.empty()) {
            grouped_with_deferred_sends([] {});
        }
    }

    // One call's view of its spans for NCCL: device memory in place, host memory in a scratch
    // slot, copied in before the operation and back after it; finish() then waits for the
    // stream, because the host reads the result as soon as the call returns.
    class Staging {
    public:
        explicit Staging(State& state) : state_(state) {}
        Staging(const Staging&) = delete;
        Staging& operator=(const Staging&) = delete;

        // A device pointer NCCL may read.
        const void* in(const void* data, std::size_t bytes) {
            if (bytes == 0 || device_accessible(data)) {
                return data;
            }
            void* slot = next_slot(bytes);
            FULCRUM_CUDA_CHECK(
                cudaMemcpyAsync(slot, data, bytes, cudaMemcpyHostToDevice, state_.stream));
            return slot;
        }

        // A device pointer NCCL may write; `fill` also copies the current contents in (for
        // in-place operations).
        void* out(void* data, std::size_t bytes, bool fill) {
            if (bytes == 0 || device_accessible(data)) {
                return data;
            }
            void* slot = next_slot(bytes);
            if (fill) {
                FULCRUM_CUDA_CHECK(
                    cudaMemcpyAsync(slot, data, bytes, cudaMemcpyHostToDevice, state_.stream));
            }
            copy_back_.push_back({data, slot, bytes});
            return slot;
        }

        void finish() {
            for (const CopyBack& copy : copy_back_) {
                FULCRUM_CUDA_CHECK(cudaMemcpyAsync(copy.host, copy.device, copy.bytes,
                                                   cudaMemcpyDeviceToHost, state_.stream));
            }
            if (slots_used_ > 0) {
                FULCRUM_CUDA_CHECK(cudaStreamSynchronize(state_.stream));
            }
        }

    private:
        struct CopyBack {
            void* host;
            const void* device;
            std::size_t bytes;
        };

        void* next_slot(std::size_t bytes) {
            FULCRUM_CHECK(slots_used_ < state_.scratch.size(),
                          "NCCL staging: more host spans in one call than scratch slots");
            GrowingDeviceBuffer& slot = state_.scratch[slots_used_++];
            slot.reserve(bytes, state_.stream);
            return slot.data();
        }

        State& state_;
        std::size_t slots_used_ = 0;
        std::vector<CopyBack> copy_back_;
    };
};

// ---------------------------------------------------------------------------------------------
// Creation

Result<NcclUniqueId> NcclCommunicator::new_unique_id() {
    ncclUniqueId raw;
    if (const ncclResult_t status = ncclGetUniqueId(&raw); status != ncclSuccess) {
        const char* detail = ncclGetLastError(nullptr);
        return Error{ErrorCode::io,
                     std::string("NCCL cannot make a unique id: ") + ncclGetErrorString(status) +
                         (detail != nullptr && *detail != '\0' ? std::string(" (") + detail + ")"
                                                               : std::string())};
    }
    NcclUniqueId id;
    std::memcpy(id.data(), &raw, sizeof raw);
    return id;
}

Result<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(int rank, int size,
                                                                   const NcclUniqueId& id,
                                                                   int device, void* stream,
                                                                   std::string name) {
    const std::string who = "rank " + std::to_string(rank) + " of " + std::to_string(size) +
                            " on GPU " + std::to_string(device);
    if (size < 1 || rank < 0 || rank >= size) {
        return Error{ErrorCode::invalid_input,
                     "NCCL communicator '" + name + "': " + who + " is not a rank of that size"};
    }
    if (const cudaError_t status = cudaSetDevice(device); status != cudaSuccess) {
        return Error{ErrorCode::io, "NCCL communicator '" + name + "': " + who + ": " +
                                        cudaGetErrorString(status)};
    }
    ncclUniqueId raw;
    std::memcpy(&raw, id.data(), sizeof raw);
    ncclComm_t comm = nullptr;
    if (const ncclResult_t status = ncclCommInitRank(&comm, size, raw, rank);
        status != ncclSuccess) {
        const char* detail = ncclGetLastError(nullptr);
        std::string message = "NCCL cannot create communicator '" + name + "' (" + who +
                              "): " + ncclGetErrorString(status);
        if (detail != nullptr && *detail != '\0') {
            message += std::string(" (") + detail + ")";
        }
        if (status == ncclInvalidUsage) {
            message +=
                "; if ranks share a GPU: NCCL before 2.30 refuses that, use the staged "
                "communicator (fulcrum-train --comm staged)";
        }
        if (comm != nullptr) {
            ncclCommAbort(comm);
        }
        return Error{status == ncclInvalidUsage || status == ncclInvalidArgument
                         ? ErrorCode::invalid_input
                         : ErrorCode::io,
                     message};
    }
    auto state = std::make_unique<State>(comm, static_cast<cudaStream_t>(stream));
    state->open_side(rank, size);
    return std::unique_ptr<NcclCommunicator>(
        new NcclCommunicator(std::move(state), rank, size, device, std::move(name)));
}

Result<std::unique_ptr<NcclCommunicator>> NcclCommunicator::bootstrap_over(Communicator& host_world,
                                                                           int device,
                                                                           void* stream) {
    // Byte 0 says whether rank 0 has an id, so that a failure there stops every rank with a
    // message instead of leaving them waiting in ncclCommInitRank.
    std::array<std::byte, 1 + std::tuple_size_v<NcclUniqueId>> message{};
    std::string failure;
    if (host_world.rank() == 0) {
        if (auto id = new_unique_id()) {
            message[0] = std::byte{1};
            std::copy(id->begin(), id->end(), message.begin() + 1);
        } else {
            failure = id.error().message;
        }
    }
    host_world.broadcast_bytes(message, 0);
    if (message[0] != std::byte{1}) {
        return Error{ErrorCode::io, host_world.rank() == 0
                                        ? failure
                                        : "rank 0 could not make NCCL's unique id (its own "
                                          "message says why)"};
    }
    NcclUniqueId id;
    std::copy(message.begin() + 1, message.end(), id.begin());
    return create(host_world.rank(), host_world.size(), id, device, stream, host_world.name());
}

Result<std::unique_ptr<NcclCommunicator>> NcclCommunicator::bootstrap_with_rendezvous(
    std::string_view spec, const LaunchRank& launch, int device, void* stream,
    std::chrono::milliseconds timeout) {
    NcclUniqueId id{};
    if (launch.rank == 0) {
        auto made = new_unique_id();
        if (!made) {
            return made.error();
        }
        id = *made;
    }
    auto got = rendezvous_exchange(spec, launch.rank, launch.world_size, id, timeout);
    if (!got) {
        return got.error();
    }
    if (got->size() != id.size()) {
        return Error{ErrorCode::corrupt,
                     "rank " + std::to_string(launch.rank) + " got " + std::to_string(got->size()) +
                         " bytes from the rendezvous '" + std::string(spec) + "', not the " +
                         std::to_string(id.size()) + " of NCCL's unique id"};
    }
    std::copy(got->begin(), got->end(), id.begin());
    auto communicator = create(launch.rank, launch.world_size, id, device, stream, "world");
    if (!communicator) {
        return communicator;
    }
    // ncclCommInitRank has returned on every rank, so all of them have read the id.
    if (auto cleaned = rendezvous_cleanup(spec, launch.rank); !cleaned) {
        std::fprintf(stderr, "fulcrum engine: warning: %s\n", cleaned.error().message.c_str());
    }
    return communicator;
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<State> state, int rank, int size, int device,
                                   std::string name)
    : state_(std::move(state)), rank_(rank), size_(size), device_(device), name_(std::move(name)) {}

NcclCommunicator::~NcclCommunicator() = default;

// ---------------------------------------------------------------------------------------------
// Collectives

void NcclCommunicator::all_reduce_sum(std::span<float> values) {
    if (values.empty()) {
        return;  // every member passes the same length
    }
    State& s = *state_;
    s.issue_deferred_sends();
    State::Staging staging(s);
    void* data = staging.out(values.data(), values.size_bytes(), true);
    FULCRUM_NCCL_CHECK(
        ncclAllReduce(data, data, values.size(), ncclFloat, ncclSum, s.comm, s.stream));
    staging.finish();
}

void NcclCommunicator::all_reduce_sum(std::span<double> values) {
    if (values.empty()) {
        return;
    }
    State& s = *state_;
    s.issue_deferred_sends();
    State::Staging staging(s);
    void* data = staging.out(values.data(), values.size_bytes(), true);
    FULCRUM_NCCL_CHECK(
        ncclAllReduce(data, data, values.size(), ncclDouble, ncclSum, s.comm, s.stream));
    staging.finish();
}

void NcclCommunicator::all_gather(std::span<const float> local, std::span<float> out,
                                  const std::vector<int>& counts) {
    FULCRUM_CHECK(counts_match(counts, rank_, size_, local.size(), out.size()),
                  "all_gather: counts do not match the buffers");
    if (out.empty()) {
        return;
    }
    State& s = *state_;
    s.issue_deferred_sends();
    State::Staging staging(s);
    const auto* send = static_cast<const float*>(staging.in(local.data(), local.size_bytes()));
    auto* recv = static_cast<float*>(staging.out(out.data(), out.size_bytes(), false));
    if (all_equal(counts)) {
        FULCRUM_NCCL_CHECK(ncclAllGather(send, recv, local.size(), ncclFloat, s.comm, s.stream));
    } else {
        // Unequal counts: one broadcast per member into its place (the header says why).
        FULCRUM_NCCL_CHECK(ncclGroupStart());
        std::size_t offset = 0;
        for (int member = 0; member < size_; ++member) {
            const auto count = static_cast<std::size_t>(counts[static_cast<std::size_t>(member)]);
            if (count > 0) {
                FULCRUM_NCCL_CHECK(ncclBroadcast(member == rank_ ? send : recv + offset,
                                                 recv + offset, count, ncclFloat, member, s.comm,
                                                 s.stream));
            }
            offset += count;
        }
        FULCRUM_NCCL_CHECK(ncclGroupEnd());
    }
    staging.finish();
}

void NcclCommunicator::all_to_all(std::span<const float> in, const std::vector<int>& send_counts,
                                  std::span<float> out, const std::vector<int>& recv_counts) {
    FULCRUM_CHECK(all_to_all_counts_match(send_counts, in.size(), recv_counts, out.size(), size_),
                  "all_to_all: counts do not match the buffers");
    if (in.empty() && out.empty()) {
        return;
    }
    State& s = *state_;
    State::Staging staging(s);
    const auto* send = static_cast<const float*>(staging.in(in.data(), in.size_bytes()));
    auto* recv = static_cast<float*>(staging.out(out.data(), out.size_bytes(), false));
    // One group with the held sends.
    s.grouped_with_deferred_sends(
        [&] { s.all_to_all_transfers(send, send_counts, recv, recv_counts, s.stream); });
    staging.finish();
}

std::int64_t NcclCommunicator::start_all_to_all(std::span<const float> in,
                                                const std::vector<int>& send_counts,
                                                std::span<float> out,
                                                const std::vector<int>& recv_counts) {
    FULCRUM_CHECK(all_to_all_counts_match(send_counts, in.size(), recv_counts, out.size(), size_),
                  "start_all_to_all: counts do not match the buffers");
    if ((in.empty() && out.empty()) || !device_accessible(in.data()) ||
        !device_accessible(out.data())) {
        // Nothing to trade, or host memory the host reads right after: nothing to overlap.
        all_to_all(in, send_counts, out, recv_counts);
        return kNoTicket;
    }
    State& s = *state_;
    s.issue_deferred_sends();
    s.side_after_compute();
    FULCRUM_NCCL_CHECK(ncclGroupStart());
    s.all_to_all_transfers(in.data(), send_counts, out.data(), recv_counts, s.side);
    FULCRUM_NCCL_CHECK(ncclGroupEnd());
    cudaEvent_t done = nullptr;
    if (s.spare_events.empty()) {
        FULCRUM_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    } else {
        done = s.spare_events.back();
        s.spare_events.pop_back();
    }
    FULCRUM_CUDA_CHECK(cudaEventRecord(done, s.side));
    s.exchanges.push_back({s.next_ticket++, done});
    return s.exchanges.back().ticket;
}

void NcclCommunicator::wait_all_to_all(std::int64_t ticket) {
    State& s = *state_;
    const auto x =
        std::find_if(s.exchanges.begin(), s.exchanges.end(),
                     [&](const State::StartedExchange& e) { return e.ticket == ticket; });
    if (x == s.exchanges.end()) {
        return;  // kNoTicket, or waited for already
    }
    FULCRUM_CUDA_CHECK(cudaStreamWaitEvent(s.stream, x->done, 0));
    s.spare_events.push_back(x->done);
    s.exchanges.erase(x);
}

void NcclCommunicator::reduce_scatter_sum(std::span<const float> in, std::span<float> out,
                                          const std::vector<int>& counts) {
    FULCRUM_CHECK(counts_match(counts, rank_, size_, out.size(), in.size()),
                  "reduce_scatter_sum: counts do not match the buffers");
    if (in.empty()) {
        return;
    }
    State& s = *state_;
    s.issue_deferred_sends();
    State::Staging staging(s);
    const auto* send = static_cast<const float*>(staging.in(in.data(), in.size_bytes()));
    auto* recv = static_cast<float*>(staging.out(out.data(), out.size_bytes(), false));
    if (all_equal(counts)) {
        FULCRUM_NCCL_CHECK(
            ncclReduceScatter(send, recv, out.size(), ncclFloat, ncclSum, s.comm, s.stream));
    } else {
        // Unequal counts: member i's slice reduced onto member i (the header says why).
        FULCRUM_NCCL_CHECK(ncclGroupStart());
        std::size_t offset = 0;
        for (int member = 0; member < size_; ++member) {
            const auto count = static_cast<std::size_t>(counts[static_cast<std::size_t>(member)]);
            if (count > 0) {
                FULCRUM_NCCL_CHECK(ncclReduce(send + offset, member == rank_ ? recv : nullptr,
                                              count, ncclFloat, ncclSum, member, s.comm, s.stream));
            }
            offset += count;
        }
        FULCRUM_NCCL_CHECK(ncclGroupEnd());
    }
    staging.finish();
}

void NcclCommunicator::broadcast(std::span<float> values, int root) {
    if (values.empty()) {
        return;
    }
    State& s = *state_;
    s.issue_deferred_sends();
    State::Staging staging(s);
    void* data = staging.out(values.data(), values.size_bytes(), rank_ == root);
    FULCRUM_NCCL_CHECK(ncclBroadcast(data, data, values.size(), ncclFloat, root, s.comm, s.stream));
    staging.finish();
}

void NcclCommunicator::broadcast_bytes(std::span<std::byte> bytes, int root) {
    if (bytes.empty()) {
        return;
    }
    State& s = *state_;
    s.issue_deferred_sends();
    State::Staging staging(s);
    void* data = staging.out(bytes.data(), bytes.size(), rank_ == root);
    FULCRUM_NCCL_CHECK(ncclBroadcast(data, data, bytes.size(), ncclUint8, root, s.comm, s.stream));
    staging.finish();
}

void NcclCommunicator::barrier() {
    State& s = *state_;
    s.issue_deferred_sends();
    // A one-element all-reduce completes on this GPU only once every member has joined it;
    // the host then waits for it. The value is never read.
    GrowingDeviceBuffer& slot = s.scratch[0];
    slot.reserve(sizeof(float), s.stream);
    FULCRUM_NCCL_CHECK(
        ncclAllReduce(slot.data(), slot.data(), 1, ncclFloat, ncclSum, s.comm, s.stream));
    FULCRUM_CUDA_CHECK(cudaStreamSynchronize(s.stream));
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key, std::string name) {
    // NCCL_SPLIT_NOCOLOR (-1) would leave this rank out with no communicator; the interface
    // always returns one.
    FULCRUM_CHECK(color >= 0, "split: NCCL takes colors >= 0");
    State& s = *state_;
    s.issue_deferred_sends();
    ncclComm_t child = nullptr;
    FULCRUM_NCCL_CHECK(ncclCommSplit(s.comm, color, key, &child, nullptr));
    int child_rank = 0, child_size = 0;
    FULCRUM_NCCL_CHECK(ncclCommUserRank(child, &child_rank));
    FULCRUM_NCCL_CHECK(ncclCommCount(child, &child_size));
    auto state = std::make_unique<State>(child, s.stream);
    state->open_side(child_rank, child_size);
    return std::unique_ptr<Communicator>(
        new NcclCommunicator(std::move(state), child_rank, child_size, device_, std::move(name)));
}

// ---------------------------------------------------------------------------------------------
// Point to point

void NcclCommunicator::send(std::span<const float> values, int peer) {
    if (values.empty()) {
        return;  // the peer receives an empty span too
    }
    State& s = *state_;
    State::Staging staging(s);
    const void* data = staging.in(values.data(), values.size_bytes());
    if (peer == rank_) {
        s.grouped_with_deferred_sends([&] {
            FULCRUM_NCCL_CHECK(ncclSend(data, values.size(), ncclFloat, peer, s.comm, s.stream));
        });
    } else {
        FULCRUM_NCCL_CHECK(
            ncclSend(data, values.size(), ncclFloat, peer, s.sending_to(peer), s.stream));
    }
    staging.finish();
}

void NcclCommunicator::post_send(std::span<const float> values, int peer) {
    if (values.empty()) {
        return;
    }
    State& s = *state_;
    if (peer != rank_) {
        // Copied on the compute stream (the caller may reuse `values` at once), then sent on
        // the side stream over the direction's communicator while compute goes on.
        if (s.posted_staging.size() <= s.posted) {
            s.posted_staging.emplace_back();
        }
        GrowingDeviceBuffer& staging = s.posted_staging[s.posted++];
        staging.reserve(values.size_bytes(), s.stream);
        FULCRUM_CUDA_CHECK(cudaMemcpyAsync(staging.data(), values.data(), values.size_bytes(),
                                           cudaMemcpyDefault, s.stream));
        if (!device_accessible(values.data())) {
            FULCRUM_CUDA_CHECK(cudaStreamSynchronize(s.stream));
        }
        s.side_after_compute();
        FULCRUM_NCCL_CHECK(
            ncclSend(staging.data(), values.size(), ncclFloat, peer, s.sending_to(peer), s.side));
        return;
    }
    // To itself: held back and grouped with the receive (a rank's send to itself completes
    // only inside one group with its receive).
    const std::size_t index = s.deferred.size();
    if (s.send_staging.size() <= index) {
        s.send_staging.emplace_back();
    }
    GrowingDeviceBuffer& staging = s.send_staging[index];
    staging.reserve(values.size_bytes(), s.stream);
    FULCRUM_CUDA_CHECK(cudaMemcpyAsync(staging.data(), values.data(), values.size_bytes(),
                                       cudaMemcpyDefault, s.stream));
    if (!device_accessible(values.data())) {
        // Pinned host memory is read only when the stream reaches the copy (and CUDA promises
        // no more for pageable memory), while the caller may overwrite it once this returns.
        FULCRUM_CUDA_CHECK(cudaStreamSynchronize(s.stream));
    }
    s.deferred.push_back({values.size(), peer});
}

void NcclCommunicator::wait_sends() {
    // Sends to itself go out now; the compute stream then waits for the side stream's posted
    // sends, so what follows on it (the staging buffers' reuse included) runs after them, and
    // the host need not wait.
    State& s = *state_;
    s.issue_deferred_sends();
    if (s.posted > 0) {
        s.compute_after_side();
        s.posted = 0;
    }
}

void NcclCommunicator::start_all_reduce_sum(std::span<float> values) {
    if (values.empty()) {
        return;
    }
    State& s = *state_;
    if (!device_accessible(values.data())) {
        all_reduce_sum(values);  // the host reads host memory right after: nothing to overlap
        return;
    }
    s.issue_deferred_sends();
    s.side_after_compute();
    FULCRUM_NCCL_CHECK(ncclAllReduce(values.data(), values.data(), values.size(), ncclFloat,
                                     ncclSum, s.comm, s.side));
}

void NcclCommunicator::wait_all_reduces() {
    state_->compute_after_side();
}

void NcclCommunicator::recv(std::span<float> values, int peer) {
    if (values.empty()) {
        return;
    }
    State& s = *state_;
    State::Staging staging(s);
    void* data = staging.out(values.data(), values.size_bytes(), false);
    if (peer == rank_) {
        s.grouped_with_deferred_sends([&] {
            FULCRUM_NCCL_CHECK(ncclRecv(data, values.size(), ncclFloat, peer, s.comm, s.stream));
        });
    } else {
        FULCRUM_NCCL_CHECK(
            ncclRecv(data, values.size(), ncclFloat, peer, s.receiving_from(peer), s.stream));
    }
    staging.finish();
}

void NcclCommunicator::send_recv(std::span<const float> send_values, int send_peer,
                                 std::span<float> recv_values, int recv_peer) {
    if (send_values.empty() && recv_values.empty()) {
        return;
    }
    State& s = *state_;
    State::Staging staging(s);
    const void* outgoing = staging.in(send_values.data(), send_values.size_bytes());
    void* incoming = staging.out(recv_values.data(), recv_values.size_bytes(), false);
    // With itself on either side, everything on `comm` in the group of the held sends; else
    // each transfer on its direction's communicator, both in one group.
    const bool self = send_peer == rank_ || recv_peer == rank_;
    s.grouped_with_deferred_sends([&] {
        if (!send_values.empty()) {
            FULCRUM_NCCL_CHECK(ncclSend(outgoing, send_values.size(), ncclFloat, send_peer,
                                        self ? s.comm : s.sending_to(send_peer), s.stream));
        }
        if (!recv_values.empty()) {
            FULCRUM_NCCL_CHECK(ncclRecv(incoming, recv_values.size(), ncclFloat, recv_peer,
                                        self ? s.comm : s.receiving_from(recv_peer), s.stream));
        }
    });
    staging.finish();
}

}  // namespace fulcrum::engine
