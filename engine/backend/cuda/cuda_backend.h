// The CUDA backend: device memory, cuBLAS GEMMs, and the engine's own kernels on one GPU.
//
// The same contracts as backend.h and the CPU backend (cpu_backend.h), which is the
// reference every kernel here is tested against (tests/engine/test_cuda_backend.cpp):
// fp32 activations and parameters in device memory, int32 ids, gradients accumulate.
//
// Precision. Storage is fp32 everywhere: parameters (the master weights), gradients, AdamW
// moments and activations. The mode only changes how the GEMMs compute:
//   * fp32: cuBLAS with CUBLAS_COMPUTE_32F (full fp32, no tensor-core down-conversion) — the
//     mode for checking against the CPU backend;
//   * bf16: CUBLAS_COMPUTE_32F_FAST_16BF — cuBLAS rounds the fp32 operands to bf16 on the fly
//     and runs bf16 tensor cores with fp32 accumulation and fp32 output. That is bf16 compute
//     with fp32 master weights and no separate bf16 copy of anything, so the optimizer, the
//     gradient reduction and every non-GEMM kernel are identical in both modes. The own
//     kernels (attention included) compute in fp32 in both modes. Halving activation memory
//     with bf16 storage is a later step; it would change the Tensor dtype contract.
//
// Streams. Stream 0 is "compute"; `create_stream` makes more (cudaStreamCreate, named for
// Nsight Systems and the CUPTI collector with nvtxNameCudaStreamA). Events are created with
// timing disabled: they order streams, they do not time them.
//
// This header needs no CUDA header: what it holds of CUDA lives behind `State`.
#pragma once

#include <memory>
#include <string>

#include "engine/backend/backend.h"

namespace fulcrum::engine {

enum class Precision : std::uint8_t { fp32, bf16 };
const char* precision_name(Precision precision);

// Whether a CUDA device can be used: cudaGetDeviceCount succeeds and finds one. Without a GPU
// (only the driver stub, as on CI) it returns false and `reason` says what CUDA answered.
bool cuda_device_available(std::string* reason = nullptr);
// How many CUDA devices this process sees (0 without a GPU).
int cuda_device_count();

class CudaBackend final : public Backend {
public:
    // Uses device `device` (cudaSetDevice). Aborts with CUDA's message if it cannot: callers
    // check cuda_device_available() first.
    explicit CudaBackend(Precision precision = Precision::bf16, int device = 0);
    ~CudaBackend() override;
    CudaBackend(const CudaBackend&) = delete;
    CudaBackend& operator=(const CudaBackend&) = delete;

    Precision precision() const { return precision_; }
    // Spans of at least this many query rows run attention as cuBLAS GEMMs over materialised
    // scores (dense_attention.cuh), shorter ones in the tiled kernels (attention.cuh); 0 sends
    // every span to the tiled kernels. Tests set it to run each path.
    static constexpr int kDenseAttentionRows = 128;
    void set_dense_attention_rows(int min_rows);
    int device_index() const;
    // The cudaStream_t behind `stream`, for libraries that enqueue on it (NCCL).
    void* native_stream(StreamId stream) const;
    // "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB), bf16 GEMMs"
    std::string description() const;

    Device device() const override { return Device::cuda; }
    std::string_view name() const override { return "cuda (cuBLAS)"; }

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
    void* allocate_pinned_raw(std::size_t bytes) override;  // cudaMallocHost
    void release_pinned_raw(void* data) override;

private:
    struct State;
    std::unique_ptr<State> state_;
    Precision precision_;
};

}  // namespace fulcrum::engine
