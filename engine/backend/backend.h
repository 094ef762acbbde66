// Compute backends: where the engine's tensors live and who runs its kernels.
//
// The model never does arithmetic or touches memory itself. It holds `Tensor`s (views that
// carry a device tag) and asks a `Backend` to run the layer kernels on them, so the same model
// code drives the CPU backend (cpu_backend.h, OpenBLAS) and, later, a CUDA backend with
// cuBLAS and its own kernels. The interface lists exactly the kernels the GPT needs, one pair
// per layer header in engine/model/, where the math and memory layout of each is written down.
//
// Conventions every backend keeps:
//   * fp32 activations and parameters, int32 token ids, row-major storage.
//   * Gradient outputs ACCUMULATE (+=), never overwrite: parameter gradients sum over the
//     micro-batches of a step, the residual stream's gradient sums its two branches, the
//     tied token embedding sums the embedding's and the LM head's contributions. Callers
//     zero a gradient buffer before its first use (`fill_zero`).
//   * Every kernel and `fill_zero`/`copy` runs on the compute stream (`kComputeStream`).
//     Other streams exist for copies and (later) communication that should overlap compute;
//     they are ordered against the compute stream with events, never with host waits.
//   * A call that returns a host value (`download`, `sum_of_squares`) waits for the work it
//     depends on; nothing else blocks the host, except freeing: releasing a DeviceBuffer or a
//     PinnedBuffer waits for the copies in flight, which may still read or write it (as
//     cudaFree does).
//   * Breaking a shape or device contract is a programming error: it aborts with a message
//     (FULCRUM_CHECK), it is not an Error a user could act on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>

#include "engine/model/attention.h"  // AttentionSpan

namespace fulcrum::engine {

[[noreturn]] void check_failed(const char* condition, const char* message, const char* file,
                               int line);

// Contract checks stay on in release builds: they guard kernels whose out-of-bounds writes
// would otherwise corrupt memory silently, and they cost one compare per kernel call.
#define FULCRUM_CHECK(condition, message)                                             \
    do {                                                                              \
        if (!(condition)) {                                                           \
            ::fulcrum::engine::check_failed(#condition, message, __FILE__, __LINE__); \
        }                                                                             \
    } while (false)

// Every span inside q_rows query rows and kv_rows key/value rows, with a non-empty key window
// (attention.h); a backend checks this before it launches attention.
void check_attention_spans(std::span<const AttentionSpan> spans, std::int64_t q_rows,
                           std::int64_t kv_rows);

enum class Device : std::uint8_t { cpu, cuda };
const char* device_name(Device device);

enum class DType : std::uint8_t { f32, i32 };
std::size_t dtype_size(DType dtype);

// A non-owning view of a 1-D or 2-D array on some device. A 2-D view may skip elements
// between rows (`row_stride` > cols): that is how the Q, K and V column blocks of one fused
// [T, 3C] projection are passed to attention without copying. Copying a Tensor copies the
// view, not the data; the memory belongs to a DeviceBuffer.
class Tensor {
public:
    Tensor() = default;
    // Contiguous view of `shape` (1 or 2 dims) starting at `data`.
    Tensor(void* data, DType dtype, Device device, std::initializer_list<std::int64_t> shape);

    bool empty() const { return data_ == nullptr; }
    DType dtype() const { return dtype_; }
    Device device() const { return device_; }
    int rank() const { return rank_; }
    std::int64_t dim(int axis) const;
    std::int64_t rows() const;                               // dim(0) of a 2-D view
    std::int64_t cols() const;                               // dim(1) of a 2-D view
    std::int64_t row_stride() const { return row_stride_; }  // elements between rows (2-D)
    std::int64_t numel() const;
    bool contiguous() const { return rank_ == 1 || row_stride_ == dims_[1]; }

    // Typed pointers: valid to dereference only on the CPU device.
    float* f32() const;
    std::int32_t* i32() const;
    void* raw() const { return data_; }

    // Rows [begin, begin + count) of a 2-D view, or elements of a 1-D view.
    Tensor slice(std::int64_t begin, std::int64_t count) const;
    // Columns [begin, begin + count) of a 2-D view (keeps the row stride).
    Tensor columns(std::int64_t begin, std::int64_t count) const;
    // The same contiguous memory seen with another shape of equal size.
    Tensor reshaped(std::initializer_list<std::int64_t> shape) const;

    bool same_shape(const Tensor& other) const;

private:
    void* data_ = nullptr;
    DType dtype_ = DType::f32;
    Device device_ = Device::cpu;
    int rank_ = 0;
    std::int64_t dims_[2] = {0, 0};
    std::int64_t row_stride_ = 0;
};

class Backend;

// What a backend holds now and held at most: its device allocations (DeviceBuffer) and the
// pinned host memory of offloads (PinnedBuffer). Counted by the backend itself, the same way
// on the CPU (where "device" memory is host memory) as on a GPU.
struct MemoryUse {
    std::int64_t device_bytes = 0;
    std::int64_t peak_device_bytes = 0;
    std::int64_t pinned_bytes = 0;
    std::int64_t peak_pinned_bytes = 0;
};

// Page-locked host memory, the target of offloads (cudaMallocHost on CUDA, aligned host memory
// on the CPU): copies between it and the device can run on a copy stream while kernels run.
struct PinnedDeleter {
    Backend* backend = nullptr;
    void operator()(float* data) const;
};
using PinnedBuffer = std::unique_ptr<float[], PinnedDeleter>;

// Owning device allocation, released through the backend that made it. Move-only. Views into
// it are handed out as Tensors; they must not outlive it.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(DeviceBuffer&& other) noexcept;
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    ~DeviceBuffer();

    std::size_t bytes() const { return bytes_; }
    Device device() const { return device_; }
    // A view of `shape` starting `offset` elements of `dtype` into the buffer.
    Tensor view(DType dtype, std::int64_t offset, std::initializer_list<std::int64_t> shape) const;
    Tensor f32(std::int64_t offset, std::initializer_list<std::int64_t> shape) const {
        return view(DType::f32, offset, shape);
    }
    Tensor i32(std::int64_t offset, std::initializer_list<std::int64_t> shape) const {
        return view(DType::i32, offset, shape);
    }

private:
    friend class Backend;
    Backend* backend_ = nullptr;
    void* data_ = nullptr;
    std::size_t bytes_ = 0;
    Device device_ = Device::cpu;
};

// Streams and events are owned by the backend and named by small ids, so that a CUDA backend
// can hand out cudaStream_t/cudaEvent_t without the model knowing. On the CPU the compute
// stream runs each call when it is issued and every other stream is a copy thread, ordered by
// events as on CUDA (cpu_backend.h).
struct StreamId {
    std::uint32_t index = 0;
    friend constexpr bool operator==(StreamId, StreamId) = default;
};
struct EventId {
    std::uint32_t index = 0;
    friend constexpr bool operator==(EventId, EventId) = default;
};
inline constexpr StreamId kComputeStream{0};

// One AdamW update of one parameter tensor (train/adamw.h has the formula).
struct AdamWStep {
    float learning_rate = 0.0f;
    float beta1 = 0.9f;
    float beta2 = 0.95f;
    float epsilon = 1e-8f;
    float weight_decay = 0.0f;  // decoupled: p -= lr * weight_decay * p
    float grad_scale = 1.0f;    // the gradient-clipping coefficient, applied on the fly
    std::int64_t step = 1;      // 1-based, for the bias corrections 1 - beta^step
};

class Backend {
public:
    virtual ~Backend() = default;

    virtual Device device() const = 0;
    virtual std::string_view name() const = 0;

    // ---- memory -------------------------------------------------------------------------
    // Zero-initialised, aligned for vector loads.
    DeviceBuffer allocate(std::size_t bytes);
    // Whether [data, data + bytes) lies inside one live allocation of this backend: how a
    // communicator that moves data through the host (comm/staged_communicator.h) tells the
    // engine's device buffers from the host vectors it is also handed.
    bool holds(const void* data, std::size_t bytes) const;
    MemoryUse memory_use() const;
    // Whether `data` is inside pinned memory from allocate_pinned.
    bool is_pinned(const void* data) const;
    // `floats` page-locked host floats (for offloads), released through this backend.
    PinnedBuffer allocate_pinned(std::size_t floats);
    // host -> device and device -> host. The device tensor may be a row-strided 2-D view (a
    // column block of the fused QKV, say); host memory is always dense. `download` returns
    // once `host` holds the data unless `host` is pinned memory and `stream` is not the
    // compute stream: then it is asynchronous like `upload`, ordered by events.
    virtual void upload(Tensor dst, const void* host, StreamId stream) = 0;
    virtual void download(void* host, Tensor src, StreamId stream) = 0;
    virtual void copy(Tensor dst, Tensor src) = 0;  // same shape; 2-D views may be row-strided
    virtual void fill_zero(Tensor t) = 0;

    // ---- streams and events -------------------------------------------------------------
    virtual StreamId create_stream(std::string_view name) = 0;
    virtual std::string_view stream_name(StreamId stream) const = 0;
    virtual EventId create_event() = 0;
    virtual void record_event(EventId event, StreamId stream) = 0;
    // Work issued to `stream` after this call starts only once `event` has completed.
    virtual void wait_event(StreamId stream, EventId event) = 0;
    virtual void synchronize(StreamId stream) = 0;

    // ---- layer kernels (one group per header in engine/model/) ----------------------------
    // embedding.h: out[t] = wte[tokens[t]] + wpe[positions[t]]
    virtual void embedding_forward(Tensor out, Tensor tokens, Tensor positions, Tensor wte,
                                   Tensor wpe) = 0;
    virtual void embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens,
                                    Tensor positions) = 0;

    // layernorm.h (with the residual add of a pre-LN block). Backward: `dinp` may be empty (no
    // input gradient), `dweight` and `dbias` both empty (no parameter gradients).
    virtual void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                                   Tensor bias) = 0;
    virtual void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout,
                                    Tensor inp, Tensor weight, Tensor mean, Tensor rstd) = 0;
    virtual void residual_forward(Tensor out, Tensor a, Tensor b) = 0;  // out may be a or b

    // matmul.h: out = inp · weightᵀ (+ bias); `bias` may be empty. Backward: each of `dinp`,
    // `dweight` and `dbias` may be empty (not computed); `inp` is needed only for `dweight`.
    virtual void matmul_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) = 0;
    virtual void matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                                 Tensor weight) = 0;

    // attention.h: causal attention of query rows against the K/V of their document prefix.
    virtual void attention_forward(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v,
                                   std::span<const AttentionSpan> spans, int n_head) = 0;
    virtual void attention_backward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q,
                                    Tensor k, Tensor v, Tensor out, Tensor lse,
                                    std::span<const AttentionSpan> spans, int n_head) = 0;
    // Folds a key window's partial (part_out, part_lse) into the running (out, lse), row by
    // row (attention.h, "Key windows"). Same rows in all four; out/part_out may be strided.
    virtual void attention_merge(Tensor out, Tensor lse, Tensor part_out, Tensor part_lse,
                                 int n_head) = 0;

    // mlp.h
    virtual void gelu_forward(Tensor out, Tensor inp) = 0;
    virtual void gelu_backward(Tensor dinp, Tensor dout, Tensor inp) = 0;

    // lm_head.h: softmax cross-entropy over the vocabulary. `probs` may alias `logits`.
    virtual void crossentropy_forward(Tensor losses, Tensor probs, Tensor logits,
                                      Tensor targets) = 0;
    virtual void crossentropy_backward(Tensor dlogits, Tensor probs, Tensor targets,
                                       float loss_scale) = 0;

    // ---- optimizer ----------------------------------------------------------------------
    // Σ x², accumulated in double; the host waits for it.
    virtual double sum_of_squares(Tensor x) = 0;
    virtual void adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v,
                              const AdamWStep& step) = 0;

protected:
    virtual void* allocate_raw(std::size_t bytes) = 0;
    virtual void release_raw(void* data) = 0;
    virtual void* allocate_pinned_raw(std::size_t bytes);  // default: aligned host memory
    virtual void release_pinned_raw(void* data);

private:
    friend class DeviceBuffer;
    friend struct PinnedDeleter;
    void release(void* data);

    // Live allocations, base -> bytes. Buffers are few and long-lived (parameters, gradients,
    // one set of activations per micro-batch in flight), so a map lookup per staged transfer
    // is noise next to the copy.
    mutable std::mutex allocations_mutex_;
    std::map<const std::byte*, std::size_t> allocations_;
    std::map<const void*, std::size_t> pinned_;
    MemoryUse memory_;
};

}  // namespace fulcrum::engine
