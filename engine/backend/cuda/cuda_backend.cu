// The CUDA backend (cuda_backend.h): memory, streams, events, and the contract checks around
// the launchers of the per-layer kernel headers in this folder.
#include "engine/backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/backend/cuda/adamw.cuh"
#include "engine/backend/cuda/attention.cuh"
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/crossentropy.cuh"
#include "engine/backend/cuda/dense_attention.cuh"
#include "engine/backend/cuda/embedding.cuh"
#include "engine/backend/cuda/gelu.cuh"
#include "engine/backend/cuda/layernorm.cuh"
#include "engine/backend/cuda/matmul.cuh"

namespace fulcrum::engine {

namespace {

void require_cuda(const Tensor& t) {
    FULCRUM_CHECK(t.empty() || t.device() == Device::cuda, "tensor is not on the CUDA device");
}

void require_2d(const Tensor& t, std::int64_t rows, std::int64_t cols, const char* what) {
    require_cuda(t);
    FULCRUM_CHECK(t.rank() == 2 && t.rows() == rows && t.cols() == cols, what);
}

void require_contiguous_2d(const Tensor& t, std::int64_t rows, std::int64_t cols,
                           const char* what) {
    require_2d(t, rows, cols, what);
    FULCRUM_CHECK(t.contiguous(), what);
}

void require_1d(const Tensor& t, std::int64_t n, const char* what) {
    require_cuda(t);
    FULCRUM_CHECK(t.rank() == 1 && t.numel() == n, what);
}

// Through Tensor::f32() / i32(), which check the element type as the CPU backend does.
const float* cf(const Tensor& t) {
    return t.f32();
}
float* mf(const Tensor& t) {
    return t.f32();
}
const int* ci(const Tensor& t) {
    return t.i32();
}

// A device array that only grows; reused by every call of one kind.
struct Scratch {
    void* data = nullptr;
    std::size_t bytes = 0;
    void* reserve(std::size_t wanted) {
        if (wanted > bytes) {
            // cudaFree waits for the device, so no queued kernel still reads the old array.
            if (data != nullptr)
                FULCRUM_CUDA_CHECK(cudaFree(data));
            FULCRUM_CUDA_CHECK(cudaMalloc(&data, wanted));
            bytes = wanted;
        }
        return data;
    }
    void release() {
        if (data != nullptr)
            cudaFree(data);
        data = nullptr;
        bytes = 0;
    }
};

// Device copies of the tile lists of attention calls, kept by content. Every layer of a
// micro-batch attends with the same spans, and chunked attention with the same list per
// chunk pair in every layer (chunked_attention.h: dozens of calls per layer, each with its own
// list), so each list crosses to the device once per micro-batch, not once per call: an upload
// from pageable memory may make the host wait for the stream (the CUDA runtime's "API
// synchronization behavior"), a hit never does. The lists live in append-only device blocks;
// past kCapacity the device is synchronised, so no kernel still reads them, and the cache
// starts over.
class TileCache {
public:
    struct Tiles {
        const cuda::AttentionTile* data = nullptr;
        int count = 0;
    };

    Tiles upload(const std::vector<cuda::AttentionTile>& tiles, cudaStream_t stream) {
        if (tiles.empty())
            return {};
        std::string key(reinterpret_cast<const char*>(tiles.data()),
                        tiles.size() * sizeof(cuda::AttentionTile));
        if (const auto found = entries_.find(key); found != entries_.end())
            return found->second;
        const std::size_t bytes = padded_bytes(tiles);
        if (used_ + bytes > kCapacity)
            release();
        if (blocks_.empty() || block_used_ + bytes > block_bytes_) {
            block_bytes_ = std::max(kBlock, bytes);
            void* block = nullptr;
            FULCRUM_CUDA_CHECK(cudaMalloc(&block, block_bytes_));
            blocks_.push_back(block);
            block_used_ = 0;
        }
        auto* device = reinterpret_cast<cuda::AttentionTile*>(static_cast<char*>(blocks_.back()) +
                                                              block_used_);
        block_used_ += bytes;
        used_ += bytes;
        const auto [entry, inserted] =
            entries_.emplace(std::move(key), Tiles{device, int(tiles.size())});
        // The source is the entry's own key, which lives as long as the entry: the copy may
        // read it after this call returns. It runs on the stream of the kernels that read it.
        FULCRUM_CUDA_CHECK(cudaMemcpyAsync(device, entry->first.data(), entry->first.size(),
                                           cudaMemcpyHostToDevice, stream));
        return entry->second;
    }

    // Two lists that one kernel reads together: a cache that starts over between the two
    // uploads would free the first list's block under it, so the room for both is made first.
    std::pair<Tiles, Tiles> upload_pair(const std::vector<cuda::AttentionTile>& first,
                                        const std::vector<cuda::AttentionTile>& second,
                                        cudaStream_t stream) {
        if (used_ + padded_bytes(first) + padded_bytes(second) > kCapacity)
            release();
        Tiles a = upload(first, stream);
        return {a, upload(second, stream)};
    }

    void release() {
        if (blocks_.empty())
            return;
        FULCRUM_CUDA_CHECK(cudaDeviceSynchronize());
        for (void* block : blocks_)
            cudaFree(block);
        blocks_.clear();
        entries_.clear();
        used_ = block_used_ = block_bytes_ = 0;
    }

private:
    static std::size_t padded_bytes(const std::vector<cuda::AttentionTile>& tiles) {
        return (tiles.size() * sizeof(cuda::AttentionTile) + kAlign - 1) / kAlign * kAlign;
    }

    static constexpr std::size_t kAlign = 256;
    static constexpr std::size_t kBlock = std::size_t(1) << 20;
    static constexpr std::size_t kCapacity = std::size_t(64) << 20;
    std::unordered_map<std::string, Tiles> entries_;
    std::vector<void*> blocks_;
    std::size_t used_ = 0, block_used_ = 0, block_bytes_ = 0;
};

}  // namespace

const char* precision_name(Precision precision) {
    return precision == Precision::fp32 ? "fp32" : "bf16";
}

bool cuda_device_available(std::string* reason) {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
        if (reason != nullptr)
            *reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status);
        cudaGetLastError();  // clear the error so that later calls start clean
        return false;
    }
    if (count == 0) {
        if (reason != nullptr)
            *reason = "no CUDA device";
        return false;
    }
    return true;
}

int cuda_device_count() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return count;
}

struct CudaBackend::State {
    int device = 0;
    cudaDeviceProp properties{};
    cublasHandle_t cublas = nullptr;
    cublasComputeType_t gemm_compute = CUBLAS_COMPUTE_32F;
    // dense_attention.cuh's GEMMs: fp32 in both modes (its "Precision").
    cublasComputeType_t attention_compute = CUBLAS_COMPUTE_32F;
    std::vector<cudaStream_t> streams;
    std::vector<std::string> stream_names;
    std::vector<cudaEvent_t> events;
    TileCache tiles;  // query and key tiles of attention calls
    Scratch delta, sum;
    Scratch dense_scores, dense_gradients;  // dense_attention.cuh's S and G
    int dense_min_rows = CudaBackend::kDenseAttentionRows;

    // The dense path's blocks of `spans`, the rest into `tiled`; the workspace made to fit.
    std::vector<cuda::DenseBlock> split(std::span<const AttentionSpan> spans, int n_head,
                                        std::vector<AttentionSpan>& tiled, bool backward) {
        std::vector<cuda::DenseBlock> blocks = cuda::split_dense(spans, dense_min_rows, tiled);
        std::size_t floats = 0;
        for (const cuda::DenseBlock& b : blocks)
            floats = std::max(floats, std::size_t(cuda::dense_head_group(b, n_head)) *
                                          std::size_t(b.rows) * std::size_t(b.keys));
        if (floats > 0) {
            dense_scores.reserve(floats * sizeof(float));
            if (backward)
                dense_gradients.reserve(floats * sizeof(float));
        }
        return blocks;
    }

    cudaStream_t stream(StreamId id) const {
        FULCRUM_CHECK(id.index < streams.size(), "no such stream");
        return streams[id.index];
    }
    cudaStream_t compute() const { return streams[0]; }
};

CudaBackend::CudaBackend(Precision precision, int device)
    : state_(std::make_unique<State>()), precision_(precision) {
    State& s = *state_;
    s.device = device;
    FULCRUM_CUDA_CHECK(cudaSetDevice(device));
    FULCRUM_CUDA_CHECK(cudaGetDeviceProperties(&s.properties, device));
    FULCRUM_CUBLAS_CHECK(cublasCreate(&s.cublas));
    s.gemm_compute =
        precision == Precision::bf16 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F;
    create_stream("compute");
}

CudaBackend::~CudaBackend() {
    State& s = *state_;
    cudaDeviceSynchronize();
    s.tiles.release();
    s.delta.release();
    s.sum.release();
    s.dense_scores.release();
    s.dense_gradients.release();
    for (cudaEvent_t e : s.events)
        cudaEventDestroy(e);
    for (cudaStream_t stream : s.streams)
        cudaStreamDestroy(stream);
    cublasDestroy(s.cublas);
}

std::string CudaBackend::description() const {
    const cudaDeviceProp& p = state_->properties;
    char text[sizeof p.name + 128];
    std::snprintf(text, sizeof text, "%s (sm_%d%d, %d SMs, %.1f GiB), %s GEMMs", p.name, p.major,
                  p.minor, p.multiProcessorCount, double(p.totalGlobalMem) / (1 << 30),
                  precision_name(precision_));
    return text;
}

int CudaBackend::device_index() const {
    return state_->device;
}

void* CudaBackend::native_stream(StreamId stream) const {
    return state_->stream(stream);
}

// ---- memory -------------------------------------------------------------------------------

void* CudaBackend::allocate_raw(std::size_t bytes) {
    void* data = nullptr;
    FULCRUM_CUDA_CHECK(cudaMalloc(&data, bytes));  // 256-byte aligned
    // On the legacy default stream, which every stream made by cudaStreamCreate waits for:
    // the zeros are there before any later work on any of our streams.
    FULCRUM_CUDA_CHECK(cudaMemset(data, 0, bytes));
    return data;
}

void CudaBackend::release_raw(void* data) {
    FULCRUM_CUDA_CHECK(cudaFree(data));
}

void* CudaBackend::allocate_pinned_raw(std::size_t bytes) {
    void* data = nullptr;
    FULCRUM_CUDA_CHECK(cudaMallocHost(&data, bytes));
    return data;
}

// As on the CPU backend, freeing pinned memory waits for the copies in flight: an offload or a
// prefetch on a copy stream may still read or write it.
void CudaBackend::release_pinned_raw(void* data) {
    FULCRUM_CUDA_CHECK(cudaDeviceSynchronize());
    FULCRUM_CUDA_CHECK(cudaFreeHost(data));
}

// A host <-> device copy of a tensor that may be a row-strided 2-D view: one cudaMemcpy2DAsync
// (width = a row's bytes, the device pitch = its row stride, dense on the host side).
static void copy_rows(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                      const Tensor& t, cudaMemcpyKind kind, cudaStream_t stream) {
    const std::size_t element = dtype_size(t.dtype());
    if (t.contiguous()) {
        FULCRUM_CUDA_CHECK(
            cudaMemcpyAsync(dst, src, std::size_t(t.numel()) * element, kind, stream));
        return;
    }
    FULCRUM_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch,
                                         std::size_t(t.cols()) * element, std::size_t(t.rows()),
                                         kind, stream));
}

void CudaBackend::upload(Tensor dst, const void* host, StreamId stream) {
    require_cuda(dst);
    cuda::NvtxRange range("upload");
    const std::size_t element = dtype_size(dst.dtype());
    copy_rows(dst.raw(), std::size_t(dst.row_stride()) * element, host,
              std::size_t(dst.rank() == 2 ? dst.cols() : 0) * element, dst, cudaMemcpyHostToDevice,
              state_->stream(stream));
}

void CudaBackend::download(void* host, Tensor src, StreamId stream) {
    require_cuda(src);
    cuda::NvtxRange range("download");
    const cudaStream_t s = state_->stream(stream);
    const std::size_t element = dtype_size(src.dtype());
    copy_rows(host, std::size_t(src.rank() == 2 ? src.cols() : 0) * element, src.raw(),
              std::size_t(src.row_stride()) * element, src, cudaMemcpyDeviceToHost, s);
    // An offload into pinned memory on a copy stream stays asynchronous (backend.h); every
    // other download returns with the data on the host.
    if (stream == kComputeStream || !is_pinned(host))
        FULCRUM_CUDA_CHECK(cudaStreamSynchronize(s));
}

void CudaBackend::copy(Tensor dst, Tensor src) {
    require_cuda(dst);
    require_cuda(src);
    FULCRUM_CHECK(dst.same_shape(src) && dst.dtype() == src.dtype(), "copy between shapes");
    if (src.empty())
        return;
    const std::size_t element = dtype_size(src.dtype());
    if (dst.contiguous() && src.contiguous()) {
        FULCRUM_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), std::size_t(src.numel()) * element,
                                           cudaMemcpyDeviceToDevice, state_->compute()));
        return;
    }
    FULCRUM_CUDA_CHECK(cudaMemcpy2DAsync(dst.raw(), std::size_t(dst.row_stride()) * element,
                                         src.raw(), std::size_t(src.row_stride()) * element,
                                         std::size_t(src.cols()) * element, std::size_t(src.rows()),
                                         cudaMemcpyDeviceToDevice, state_->compute()));
}

void CudaBackend::fill_zero(Tensor t) {
    require_cuda(t);
    if (t.empty())
        return;
    const std::size_t element = dtype_size(t.dtype());
    if (t.contiguous()) {
        FULCRUM_CUDA_CHECK(
            cudaMemsetAsync(t.raw(), 0, std::size_t(t.numel()) * element, state_->compute()));
        return;
    }
    FULCRUM_CUDA_CHECK(cudaMemset2DAsync(t.raw(), std::size_t(t.row_stride()) * element, 0,
                                         std::size_t(t.cols()) * element, std::size_t(t.rows()),
                                         state_->compute()));
}

// ---- streams and events -------------------------------------------------------------------

StreamId CudaBackend::create_stream(std::string_view name) {
    State& s = *state_;
    cudaStream_t stream = nullptr;
    FULCRUM_CUDA_CHECK(cudaStreamCreate(&stream));
    s.stream_names.emplace_back(name);
    nvtxNameCudaStreamA(stream, s.stream_names.back().c_str());
    s.streams.push_back(stream);
    return StreamId{std::uint32_t(s.streams.size() - 1)};
}

std::string_view CudaBackend::stream_name(StreamId stream) const {
    FULCRUM_CHECK(stream.index < state_->stream_names.size(), "no such stream");
    return state_->stream_names[stream.index];
}

EventId CudaBackend::create_event() {
    cudaEvent_t event = nullptr;
    FULCRUM_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    state_->events.push_back(event);
    return EventId{std::uint32_t(state_->events.size() - 1)};
}

void CudaBackend::record_event(EventId event, StreamId stream) {
    FULCRUM_CHECK(event.index < state_->events.size(), "no such event");
    FULCRUM_CUDA_CHECK(cudaEventRecord(state_->events[event.index], state_->stream(stream)));
}

void CudaBackend::wait_event(StreamId stream, EventId event) {
    FULCRUM_CHECK(event.index < state_->events.size(), "no such event");
    FULCRUM_CUDA_CHECK(cudaStreamWaitEvent(state_->stream(stream), state_->events[event.index], 0));
}

void CudaBackend::synchronize(StreamId stream) {
    FULCRUM_CUDA_CHECK(cudaStreamSynchronize(state_->stream(stream)));
}

// ---- layer kernels ------------------------------------------------------------------------

void CudaBackend::embedding_forward(Tensor out, Tensor tokens, Tensor positions, Tensor wte,
                                    Tensor wpe) {
    const std::int64_t n = tokens.numel();
    const std::int64_t c = wte.cols();
    require_1d(tokens, n, "embedding: tokens");
    require_1d(positions, n, "embedding: positions");
    require_contiguous_2d(out, n, c, "embedding: out [T, C]");
    require_contiguous_2d(wpe, wpe.rows(), c, "embedding: wpe [S, C]");
    require_contiguous_2d(wte, wte.rows(), c, "embedding: wte [V, C]");
    FULCRUM_CHECK(tokens.dtype() == DType::i32 && positions.dtype() == DType::i32,
                  "embedding: ids are int32");
    cuda::embedding_forward(mf(out), ci(tokens), ci(positions), cf(wte), cf(wpe), n, int(c),
                            state_->compute());
}

void CudaBackend::embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens,
                                     Tensor positions) {
    const std::int64_t n = tokens.numel();
    const std::int64_t c = dwte.cols();
    require_1d(tokens, n, "embedding: tokens");
    require_1d(positions, n, "embedding: positions");
    require_contiguous_2d(dout, n, c, "embedding: dout [T, C]");
    require_contiguous_2d(dwte, dwte.rows(), c, "embedding: dwte [V, C]");
    require_contiguous_2d(dwpe, dwpe.rows(), c, "embedding: dwpe [S, C]");
    cuda::embedding_backward(mf(dwte), mf(dwpe), cf(dout), ci(tokens), ci(positions), n, int(c),
                             state_->compute());
}

void CudaBackend::layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                                    Tensor bias) {
    const std::int64_t n = inp.rows(), c = inp.cols();
    require_contiguous_2d(inp, n, c, "layernorm: inp [N, C]");
    require_contiguous_2d(out, n, c, "layernorm: out [N, C]");
    require_1d(mean, n, "layernorm: mean [N]");
    require_1d(rstd, n, "layernorm: rstd [N]");
    require_1d(weight, c, "layernorm: weight [C]");
    require_1d(bias, c, "layernorm: bias [C]");
    cuda::layernorm_forward(mf(out), mf(mean), mf(rstd), cf(inp), cf(weight), cf(bias), n, int(c),
                            state_->compute());
}

void CudaBackend::layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout,
                                     Tensor inp, Tensor weight, Tensor mean, Tensor rstd) {
    const std::int64_t n = inp.rows(), c = inp.cols();
    require_contiguous_2d(inp, n, c, "layernorm: inp [N, C]");
    if (!dinp.empty())
        require_contiguous_2d(dinp, n, c, "layernorm: dinp [N, C]");
    require_contiguous_2d(dout, n, c, "layernorm: dout [N, C]");
    require_1d(mean, n, "layernorm: mean [N]");
    require_1d(rstd, n, "layernorm: rstd [N]");
    require_1d(weight, c, "layernorm: weight [C]");
    FULCRUM_CHECK(dweight.empty() == dbias.empty(), "layernorm: dweight and dbias go together");
    FULCRUM_CHECK(!dinp.empty() || !dweight.empty(), "layernorm: no gradient asked for");
    if (!dweight.empty()) {
        require_1d(dweight, c, "layernorm: dweight [C]");
        require_1d(dbias, c, "layernorm: dbias [C]");
    }
    cuda::layernorm_backward(
        dinp.empty() ? nullptr : mf(dinp), dweight.empty() ? nullptr : mf(dweight),
        dbias.empty() ? nullptr : mf(dbias), cf(dout), cf(inp), cf(weight), cf(mean), cf(rstd), n,
        int(c), state_->properties.multiProcessorCount, state_->compute());
}

void CudaBackend::residual_forward(Tensor out, Tensor a, Tensor b) {
    require_cuda(out);
    require_cuda(a);
    require_cuda(b);
    FULCRUM_CHECK(out.same_shape(a) && out.same_shape(b), "residual: shapes differ");
    FULCRUM_CHECK(out.contiguous() && a.contiguous() && b.contiguous(), "residual: strided");
    cuda::residual_forward(mf(out), cf(a), cf(b), out.numel(), state_->compute());
}

void CudaBackend::matmul_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
    const std::int64_t n = inp.rows(), c = inp.cols(), oc = weight.rows();
    require_2d(inp, n, c, "matmul: inp [N, C]");
    require_contiguous_2d(weight, oc, c, "matmul: weight [OC, C]");
    require_contiguous_2d(out, n, oc, "matmul: out [N, OC]");
    if (!bias.empty())
        require_1d(bias, oc, "matmul: bias [OC]");
    cuda::matmul_forward(state_->cublas, state_->gemm_compute, mf(out), cf(inp), inp.row_stride(),
                         cf(weight), bias.empty() ? nullptr : cf(bias), n, int(c), int(oc),
                         state_->compute());
}

void CudaBackend::matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout,
                                  Tensor inp, Tensor weight) {
    const std::int64_t n = dout.rows(), c = weight.cols(), oc = weight.rows();
    require_2d(dout, n, oc, "matmul: dout [N, OC]");
    require_contiguous_2d(weight, oc, c, "matmul: weight [OC, C]");
    if (!dweight.empty()) {
        require_2d(inp, n, c, "matmul: inp [N, C]");
        require_contiguous_2d(dweight, oc, c, "matmul: dweight [OC, C]");
    }
    if (!dinp.empty())
        require_contiguous_2d(dinp, n, c, "matmul: dinp [N, C]");
    if (!dbias.empty())
        require_1d(dbias, oc, "matmul: dbias [OC]");
    cuda::matmul_backward(
        state_->cublas, state_->gemm_compute, dinp.empty() ? nullptr : mf(dinp),
        dweight.empty() ? nullptr : mf(dweight), dbias.empty() ? nullptr : mf(dbias), cf(dout),
        dout.row_stride(), dweight.empty() ? nullptr : cf(inp),
        dweight.empty() ? 0 : inp.row_stride(), cf(weight), n, int(c), int(oc), state_->compute());
}

void CudaBackend::attention_forward(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v,
                                    std::span<const AttentionSpan> spans, int n_head) {
    const std::int64_t tq = q.rows(), tkv = k.rows(), c = q.cols();
    FULCRUM_CHECK(n_head > 0 && c % n_head == 0, "attention: C not divisible by n_head");
    const int hs = int(c / n_head);
    FULCRUM_CHECK(hs <= cuda::kMaxHeadSize, "attention: head size above 128");
    require_2d(q, tq, c, "attention: q [Tq, C]");
    require_2d(k, tkv, c, "attention: k [Tkv, C]");
    require_2d(v, tkv, c, "attention: v [Tkv, C]");
    require_2d(out, tq, c, "attention: out [Tq, C]");
    require_contiguous_2d(lse, tq, n_head, "attention: lse [Tq, n_head]");
    check_attention_spans(spans, tq, tkv);
    State& s = *state_;
    cuda::AttentionViews views{};
    views.q = cf(q);
    views.k = cf(k);
    views.v = cf(v);
    views.o = mf(out);
    views.q_stride = q.row_stride();
    views.k_stride = k.row_stride();
    views.v_stride = v.row_stride();
    views.o_stride = out.row_stride();
    std::vector<AttentionSpan> tiled;
    const std::vector<cuda::DenseBlock> blocks = s.split(spans, n_head, tiled, false);
    const TileCache::Tiles tiles = s.tiles.upload(cuda::query_tiles(tiled), s.compute());
    cuda::attention_forward(views, mf(lse), tiles.data, tiles.count, n_head, hs, s.compute());
    if (!blocks.empty()) {
        cuda::dense_attention_forward(s.cublas, s.attention_compute, views, mf(lse), blocks,
                                      static_cast<float*>(s.dense_scores.data), n_head, hs,
                                      s.compute());
    }
}

void CudaBackend::set_dense_attention_rows(int min_rows) {
    state_->dense_min_rows = min_rows;
}

void CudaBackend::attention_merge(Tensor out, Tensor lse, Tensor part_out, Tensor part_lse,
                                  int n_head) {
    const std::int64_t rows = out.rows(), c = out.cols();
    FULCRUM_CHECK(n_head > 0 && c % n_head == 0, "attention merge: C not divisible by n_head");
    require_2d(part_out, rows, c, "attention merge: part_out [T, C]");
    require_contiguous_2d(lse, rows, n_head, "attention merge: lse [T, n_head]");
    require_contiguous_2d(part_lse, rows, n_head, "attention merge: part_lse [T, n_head]");
    cuda::attention_merge(mf(out), out.row_stride(), mf(lse), cf(part_out), part_out.row_stride(),
                          cf(part_lse), rows, n_head, int(c / n_head), state_->compute());
}

void CudaBackend::attention_backward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q,
                                     Tensor k, Tensor v, Tensor out, Tensor lse,
                                     std::span<const AttentionSpan> spans, int n_head) {
    const std::int64_t tq = q.rows(), tkv = k.rows(), c = q.cols();
    FULCRUM_CHECK(n_head > 0 && c % n_head == 0, "attention: C not divisible by n_head");
    const int hs = int(c / n_head);
    FULCRUM_CHECK(hs <= cuda::kMaxHeadSize, "attention: head size above 128");
    require_2d(q, tq, c, "attention: q [Tq, C]");
    require_2d(dq, tq, c, "attention: dq [Tq, C]");
    require_2d(k, tkv, c, "attention: k [Tkv, C]");
    require_2d(dk, tkv, c, "attention: dk [Tkv, C]");
    require_2d(v, tkv, c, "attention: v [Tkv, C]");
    require_2d(dv, tkv, c, "attention: dv [Tkv, C]");
    require_2d(out, tq, c, "attention: out [Tq, C]");
    require_2d(dout, tq, c, "attention: dout [Tq, C]");
    require_contiguous_2d(lse, tq, n_head, "attention: lse [Tq, n_head]");
    check_attention_spans(spans, tq, tkv);
    State& s = *state_;
    cuda::AttentionViews views{};
    views.q = cf(q);
    views.k = cf(k);
    views.v = cf(v);
    views.out = cf(out);
    views.dout = cf(dout);
    views.dq = mf(dq);
    views.dk = mf(dk);
    views.dv = mf(dv);
    views.q_stride = q.row_stride();
    views.k_stride = k.row_stride();
    views.v_stride = v.row_stride();
    views.out_stride = out.row_stride();
    views.dout_stride = dout.row_stride();
    views.dq_stride = dq.row_stride();
    views.dk_stride = dk.row_stride();
    views.dv_stride = dv.row_stride();
    float* delta = static_cast<float*>(
        s.delta.reserve(std::size_t(std::max<std::int64_t>(tq, 1) * n_head) * sizeof(float)));
    cuda::attention_delta(views, delta, tq, n_head, hs, s.compute());
    std::vector<AttentionSpan> tiled;
    const std::vector<cuda::DenseBlock> blocks = s.split(spans, n_head, tiled, true);
    const auto [q_tiles, k_tiles] =
        s.tiles.upload_pair(cuda::query_tiles(tiled), cuda::key_tiles(tiled), s.compute());
    cuda::attention_backward(views, cf(lse), delta, q_tiles.data, q_tiles.count, k_tiles.data,
                             k_tiles.count, n_head, hs, s.compute());
    if (!blocks.empty()) {
        cuda::dense_attention_backward(s.cublas, s.attention_compute, views, cf(lse), delta, blocks,
                                       static_cast<float*>(s.dense_scores.data),
                                       static_cast<float*>(s.dense_gradients.data), n_head, hs,
                                       s.compute());
    }
}

void CudaBackend::gelu_forward(Tensor out, Tensor inp) {
    require_cuda(out);
    require_cuda(inp);
    FULCRUM_CHECK(out.same_shape(inp) && out.contiguous() && inp.contiguous(), "gelu: shapes");
    cuda::gelu_forward(mf(out), cf(inp), out.numel(), state_->compute());
}

void CudaBackend::gelu_backward(Tensor dinp, Tensor dout, Tensor inp) {
    require_cuda(dinp);
    require_cuda(dout);
    require_cuda(inp);
    FULCRUM_CHECK(dinp.same_shape(inp) && dout.same_shape(inp), "gelu: shapes");
    FULCRUM_CHECK(dinp.contiguous() && dout.contiguous() && inp.contiguous(), "gelu: strided");
    cuda::gelu_backward(mf(dinp), cf(dout), cf(inp), inp.numel(), state_->compute());
}

void CudaBackend::crossentropy_forward(Tensor losses, Tensor probs, Tensor logits, Tensor targets) {
    const std::int64_t n = logits.rows(), vocab = logits.cols();
    require_contiguous_2d(logits, n, vocab, "crossentropy: logits [N, V]");
    require_contiguous_2d(probs, n, vocab, "crossentropy: probs [N, V]");
    require_1d(losses, n, "crossentropy: losses [N]");
    require_1d(targets, n, "crossentropy: targets [N]");
    cuda::crossentropy_forward(mf(losses), mf(probs), cf(logits), ci(targets), n, int(vocab),
                               state_->compute());
}

void CudaBackend::crossentropy_backward(Tensor dlogits, Tensor probs, Tensor targets,
                                        float loss_scale) {
    const std::int64_t n = probs.rows(), vocab = probs.cols();
    require_contiguous_2d(probs, n, vocab, "crossentropy: probs [N, V]");
    require_contiguous_2d(dlogits, n, vocab, "crossentropy: dlogits [N, V]");
    require_1d(targets, n, "crossentropy: targets [N]");
    cuda::crossentropy_backward(mf(dlogits), cf(probs), ci(targets), loss_scale, n, int(vocab),
                                state_->compute());
}

// ---- optimizer ----------------------------------------------------------------------------

double CudaBackend::sum_of_squares(Tensor x) {
    require_cuda(x);
    FULCRUM_CHECK(x.contiguous(), "sum_of_squares of a strided view");
    State& s = *state_;
    double* result = static_cast<double*>(s.sum.reserve(sizeof(double)));
    FULCRUM_CUDA_CHECK(cudaMemsetAsync(result, 0, sizeof(double), s.compute()));
    cuda::sum_of_squares(result, cf(x), x.numel(), s.properties.multiProcessorCount, s.compute());
    double host = 0.0;
    FULCRUM_CUDA_CHECK(
        cudaMemcpyAsync(&host, result, sizeof(double), cudaMemcpyDeviceToHost, s.compute()));
    FULCRUM_CUDA_CHECK(cudaStreamSynchronize(s.compute()));
    return host;
}

void CudaBackend::adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v,
                               const AdamWStep& step) {
    require_cuda(param);
    require_cuda(grad);
    require_cuda(m);
    require_cuda(v);
    FULCRUM_CHECK(param.same_shape(grad) && param.same_shape(m) && param.same_shape(v),
                  "adamw: shapes differ");
    FULCRUM_CHECK(param.contiguous() && grad.contiguous() && m.contiguous() && v.contiguous(),
                  "adamw: strided");
    FULCRUM_CHECK(step.step >= 1, "adamw: steps count from 1");
    // As the CPU kernel: the bias corrections in double, then rounded to float.
    const float bias1 = float(1.0 - std::pow(double(step.beta1), double(step.step)));
    const float bias2 = float(1.0 - std::pow(double(step.beta2), double(step.step)));
    cuda::adamw_update(mf(param), cf(grad), mf(m), mf(v), param.numel(), step.learning_rate,
                       step.beta1, step.beta2, step.epsilon, step.weight_decay, step.grad_scale,
                       bias1, bias2, state_->compute());
}

}  // namespace fulcrum::engine
