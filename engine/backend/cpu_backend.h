// The CPU backend: host memory, OpenBLAS GEMMs, and the host kernels of engine/model/.
//
// Everything runs synchronously on the calling thread, in issue order, so streams and events
// are bookkeeping only (names are kept for the trace). OpenBLAS may use its own threads inside
// a GEMM; `blas_threads` caps them (0 keeps the library's default, which is one per core —
// ranks sharing a node under MPI should pass 1).
#pragma once

#include <string>
#include <vector>

#include "engine/backend/backend.h"

namespace fulcrum::engine {

class CpuBackend final : public Backend {
public:
    explicit CpuBackend(int blas_threads = 0);

    // "OpenBLAS 0.3.21 ... core SkylakeX, 1 thread": OpenBLAS picks its kernels by CPU model
    // at load time and falls back to generic ones (Prescott) on CPUs it does not know;
    // OPENBLAS_CORETYPE overrides the choice.
    static std::string blas_description();

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

private:
    std::vector<std::string> stream_names_;
    std::uint32_t event_count_ = 0;
};

}  // namespace fulcrum::engine
