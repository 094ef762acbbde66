// The CPU backend: host memory, OpenBLAS GEMMs, and the host kernels of engine/model/.
//
// Streams. The compute stream is the calling thread: kernels, copy and fill_zero run when
// called. Every other stream (create_stream) is a thread of its own that runs the uploads and
// downloads issued to it in order, asynchronously, as a GPU's copy engines do: the offloads of
// chunked attention and of the activations really overlap compute here, and their ordering
// is enforced by events exactly as on CUDA — a missing event is a data race on the CPU too,
// which the engine's tests then see as wrong numbers. An event records a point of its stream;
// wait_event on the compute stream blocks the caller until that point is reached, on another
// stream it holds that stream's later copies back. Each copy thread names itself after its
// stream and opens an NVTX range per copy (category offload, with its bytes), so a capture of
// a CPU run shows copy lanes beside compute as a GPU run does.
//
// Host memory of a copy on another stream must be left alone until an event says the copy is
// done, when it is pinned memory (allocate_pinned); a copy from or to other host memory waits
// for itself before returning, as CUDA's do for pageable memory.
//
// OpenBLAS may use its own threads inside a GEMM; `blas_threads` caps them (0 keeps the
// library's default, which is one per core — ranks sharing a node under MPI should pass 1).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/backend/backend.h"

namespace fulcrum::engine {

class CpuBackend final : public Backend {
public:
    explicit CpuBackend(int blas_threads = 0);
    ~CpuBackend() override;
    CpuBackend(const CpuBackend&) = delete;
    CpuBackend& operator=(const CpuBackend&) = delete;

    // "OpenBLAS 0.3.21 ... core SkylakeX, 1 thread": OpenBLAS picks its kernels by CPU model
    // at load time and falls back to generic ones (Prescott) on CPUs it does not know;
    // OPENBLAS_CORETYPE overrides the choice.
    static std::string blas_description();

    // Tests: every copy on a stream other than compute first sleeps this long, so that a read
    // of its destination without waiting for its event meets stale data (a race that fast
    // memcpys would otherwise win every time).
    void set_copy_delay(std::chrono::microseconds delay) { copy_delay_ = delay; }
    // The same for the copies of one stream only (overrides the delay above): one stream
    // lagging behind another is how a missing event between two copy streams shows.
    void set_copy_delay(StreamId stream, std::chrono::microseconds delay) {
        stream_copy_delay_[stream.index] = delay;
    }

    Device device() const override { return Device::cpu; }
    std::string_view name() const override { return "cpu (OpenBLAS)"; }

    void upload(Tensor dst, const void* host, StreamId stream) override;
    void download(void* host, Tensor src, StreamId stream) override;
    void copy(Tensor dst, Tensor src) override;
    void fill_zero(Tensor t) override;

    StreamId create_stream(std::string_view name) override;
    std::string_view stream_name(StreamId stream) const override;
    EventId create_event() override;
    void record_event(EventId event, StreamId stream) override;
    void wait_event(StreamId stream, EventId event) override;
    void synchronize(StreamId stream) override;

    void embedding_forward(Tensor out, Tensor tokens, Tensor positions, Tensor wte,
                           Tensor wpe) override;
    void embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens,
                            Tensor positions) override;
    void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                           Tensor bias) override;
    void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                            Tensor weight, Tensor mean, Tensor rstd) override;
    void residual_forward(Tensor out, Tensor a, Tensor b) override;
    void matmul_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) override;
    void matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                         Tensor weight) override;
    void attention_forward(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v,
                           std::span<const AttentionSpan> spans, int n_head) override;
    void attention_backward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q, Tensor k,
                            Tensor v, Tensor out, Tensor lse, std::span<const AttentionSpan> spans,
                            int n_head) override;
    void attention_merge(Tensor out, Tensor lse, Tensor part_out, Tensor part_lse,
                         int n_head) override;
    void gelu_forward(Tensor out, Tensor inp) override;
    void gelu_backward(Tensor dinp, Tensor dout, Tensor inp) override;
    void crossentropy_forward(Tensor losses, Tensor probs, Tensor logits, Tensor targets) override;
    void crossentropy_backward(Tensor dlogits, Tensor probs, Tensor targets,
                               float loss_scale) override;
    double sum_of_squares(Tensor x) override;
    void adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v,
                      const AdamWStep& step) override;

protected:
    void* allocate_raw(std::size_t bytes) override;
    void release_raw(void* data) override;
    void release_pinned_raw(void* data) override;

private:
    class CopyStream;
    struct Event;
    // Runs `copy` on `stream`: now on the compute stream, else queued on its thread (and
    // waited for unless `host` is pinned).
    void issue(StreamId stream, const void* host, std::function<void()> copy);
    Event& event(EventId id);
    void drain_copies();

    std::vector<std::string> stream_names_;
    std::vector<std::unique_ptr<CopyStream>> copy_streams_;  // [i]: stream i (0, compute: null)
    std::mutex events_mutex_;
    std::deque<Event> events_;  // a deque: events never move while threads wait on them
    std::chrono::microseconds copy_delay_{0};
    std::map<std::uint32_t, std::chrono::microseconds> stream_copy_delay_;
};

}  // namespace fulcrum::engine
