#include "engine/backend/cpu_backend.h"

#include <cblas.h>

#include <cstdlib>
#include <cstring>
#include <optional>

#include "core/trace/annotations.h"
#include "engine/instrument/annotations.h"

#include "engine/model/attention.h"
#include "engine/model/embedding.h"
#include "engine/model/layernorm.h"
#include "engine/model/lm_head.h"
#include "engine/model/matmul.h"
#include "engine/model/mlp.h"
#include "engine/train/adamw.h"

namespace fulcrum::engine {

namespace {

constexpr std::size_t kAlignment = 64;  // a cache line, and an AVX-512 register

void require_cpu(const Tensor& t) {
    FULCRUM_CHECK(t.empty() || t.device() == Device::cpu, "tensor is not on the CPU");
}

void require_2d(const Tensor& t, std::int64_t rows, std::int64_t cols, const char* what) {
    require_cpu(t);
    FULCRUM_CHECK(t.rank() == 2 && t.rows() == rows && t.cols() == cols, what);
}

void require_contiguous_2d(const Tensor& t, std::int64_t rows, std::int64_t cols,
                           const char* what) {
    require_2d(t, rows, cols, what);
    FULCRUM_CHECK(t.contiguous(), what);
}

void require_1d(const Tensor& t, std::int64_t n, const char* what) {
    require_cpu(t);
    FULCRUM_CHECK(t.rank() == 1 && t.numel() == n, what);
}

kernels::Rows<float> rows_of(const Tensor& t) {
    return {t.f32(), t.row_stride()};
}
kernels::Rows<const float> const_rows_of(const Tensor& t) {
    return {t.f32(), t.row_stride()};
}

}  // namespace

// A point of some stream: `recorded` counts record_event calls, `reached` how far the stream
// has got (each record's number is reached when the stream gets past it).
struct CpuBackend::Event {
    std::mutex mutex;
    std::condition_variable changed;
    std::uint64_t recorded = 0;
    std::uint64_t reached = 0;

    void reach(std::uint64_t point) {
        {
            const std::lock_guard lock(mutex);
            reached = std::max(reached, point);
        }
        changed.notify_all();
    }
    void wait_for(std::uint64_t point) {
        std::unique_lock lock(mutex);
        changed.wait(lock, [&] { return reached >= point; });
    }
};

// One stream other than compute: a thread that runs its queue in order.
class CpuBackend::CopyStream {
public:
    explicit CopyStream(std::string name)
        : thread_([this, name = std::move(name)] { run(name); }) {}
    ~CopyStream() {
        {
            const std::lock_guard lock(mutex_);
            stopping_ = true;
        }
        changed_.notify_all();
        thread_.join();
    }

    void push(std::function<void()> work) {
        {
            const std::lock_guard lock(mutex_);
            queue_.push_back(std::move(work));
            ++issued_;
        }
        changed_.notify_all();
    }
    // Returns when everything pushed so far has run.
    void drain() {
        std::unique_lock lock(mutex_);
        const std::uint64_t target = issued_;
        changed_.wait(lock, [&] { return done_ >= target; });
    }

private:
    void run(const std::string& name) {
        instrument::name_this_thread("stream " + name);
        std::unique_lock lock(mutex_);
        for (;;) {
            changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
            if (queue_.empty()) {
                return;  // stopping, and everything issued has run
            }
            std::function<void()> work = std::move(queue_.front());
            queue_.pop_front();
            lock.unlock();
            work();
            lock.lock();
            ++done_;
            changed_.notify_all();
        }
    }

    std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<std::function<void()>> queue_;
    std::uint64_t issued_ = 0, done_ = 0;
    bool stopping_ = false;
    std::thread thread_;  // last: starts once the members above exist
};

CpuBackend::CpuBackend(int blas_threads) : stream_names_{"compute"} {
    copy_streams_.emplace_back();  // compute: the calling thread
    if (blas_threads > 0)
        openblas_set_num_threads(blas_threads);
}

CpuBackend::~CpuBackend() {
    copy_streams_.clear();  // each thread finishes its queue first
}

void CpuBackend::issue(StreamId stream, const void* host, std::function<void()> copy) {
    FULCRUM_CHECK(stream.index < copy_streams_.size(), "no such stream");
    CopyStream* thread = copy_streams_[stream.index].get();
    if (thread == nullptr) {
        copy();
        return;
    }
    const auto own_delay = stream_copy_delay_.find(stream.index);
    const std::chrono::microseconds delay =
        own_delay != stream_copy_delay_.end() ? own_delay->second : copy_delay_;
    if (delay.count() > 0) {
        copy = [delay, copy = std::move(copy)] {
            std::this_thread::sleep_for(delay);
            copy();
        };
    }
    thread->push(std::move(copy));
    if (!is_pinned(host)) {
        thread->drain();
    }
}

CpuBackend::Event& CpuBackend::event(EventId id) {
    const std::lock_guard lock(events_mutex_);
    FULCRUM_CHECK(id.index < events_.size(), "no such event");
    return events_[id.index];
}

std::string CpuBackend::blas_description() {
    const int threads = openblas_get_num_threads();
    return std::string(openblas_get_config()) + ", core " + openblas_get_corename() + ", " +
           std::to_string(threads) + (threads == 1 ? " thread" : " threads");
}

void* CpuBackend::allocate_raw(std::size_t bytes) {
    const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* data = std::aligned_alloc(kAlignment, rounded);
    FULCRUM_CHECK(data != nullptr, "out of host memory");
    std::memset(data, 0, rounded);
    return data;
}

// Like cudaFree and cudaFreeHost, freeing waits for the copies in flight: one may still read
// or write the memory.
void CpuBackend::drain_copies() {
    for (const auto& stream : copy_streams_) {
        if (stream != nullptr) {
            stream->drain();
        }
    }
}

void CpuBackend::release_raw(void* data) {
    drain_copies();
    std::free(data);
}

void CpuBackend::release_pinned_raw(void* data) {
    drain_copies();
    std::free(data);
}

void CpuBackend::upload(Tensor dst, const void* host, StreamId stream) {
    require_cpu(dst);
    issue(stream, host, [dst, host, stream] {
        std::optional<instrument::Range> range;
        if (stream != kComputeStream) {
            range.emplace(
                range_name::kMemcpyToDevice, Category::offload,
                instrument::with_bytes(dst.numel() * std::int64_t(dtype_size(dst.dtype()))));
        }
        if (dst.contiguous()) {
            std::memcpy(dst.raw(), host, std::size_t(dst.numel()) * dtype_size(dst.dtype()));
            return;
        }
        const std::size_t row_bytes = std::size_t(dst.cols()) * dtype_size(dst.dtype());
        for (std::int64_t r = 0; r < dst.rows(); ++r) {
            std::memcpy(static_cast<char*>(dst.slice(r, 1).raw()),
                        static_cast<const char*>(host) + std::size_t(r) * row_bytes, row_bytes);
        }
    });
}

void CpuBackend::download(void* host, Tensor src, StreamId stream) {
    require_cpu(src);
    issue(stream, host, [host, src, stream] {
        std::optional<instrument::Range> range;
        if (stream != kComputeStream) {
            range.emplace(
                range_name::kMemcpyToHost, Category::offload,
                instrument::with_bytes(src.numel() * std::int64_t(dtype_size(src.dtype()))));
        }
        if (src.contiguous()) {
            std::memcpy(host, src.raw(), std::size_t(src.numel()) * dtype_size(src.dtype()));
            return;
        }
        const std::size_t row_bytes = std::size_t(src.cols()) * dtype_size(src.dtype());
        for (std::int64_t r = 0; r < src.rows(); ++r) {
            std::memcpy(static_cast<char*>(host) + std::size_t(r) * row_bytes,
                        src.slice(r, 1).raw(), row_bytes);
        }
    });
}

void CpuBackend::copy(Tensor dst, Tensor src) {
    require_cpu(dst);
    require_cpu(src);
    FULCRUM_CHECK(dst.same_shape(src) && dst.dtype() == src.dtype(), "copy between shapes");
    if (dst.contiguous() && src.contiguous()) {
        std::memmove(dst.raw(), src.raw(), std::size_t(src.numel()) * dtype_size(src.dtype()));
        return;
    }
    const std::size_t row_bytes = std::size_t(src.cols()) * dtype_size(src.dtype());
    for (std::int64_t r = 0; r < src.rows(); ++r)
        std::memmove(dst.slice(r, 1).raw(), src.slice(r, 1).raw(), row_bytes);
}

void CpuBackend::fill_zero(Tensor t) {
    require_cpu(t);
    if (t.contiguous()) {
        std::memset(t.raw(), 0, std::size_t(t.numel()) * dtype_size(t.dtype()));
        return;
    }
    const std::size_t row_bytes = std::size_t(t.cols()) * dtype_size(t.dtype());
    for (std::int64_t r = 0; r < t.rows(); ++r)
        std::memset(t.slice(r, 1).raw(), 0, row_bytes);
}

StreamId CpuBackend::create_stream(std::string_view name) {
    stream_names_.emplace_back(name);
    copy_streams_.push_back(std::make_unique<CopyStream>(std::string(name)));
    return StreamId{std::uint32_t(stream_names_.size() - 1)};
}

std::string_view CpuBackend::stream_name(StreamId stream) const {
    FULCRUM_CHECK(stream.index < stream_names_.size(), "no such stream");
    return stream_names_[stream.index];
}

EventId CpuBackend::create_event() {
    const std::lock_guard lock(events_mutex_);
    events_.emplace_back();
    return EventId{std::uint32_t(events_.size() - 1)};
}

void CpuBackend::record_event(EventId id, StreamId stream) {
    Event& e = event(id);
    std::uint64_t point = 0;
    {
        const std::lock_guard lock(e.mutex);
        point = ++e.recorded;
    }
    FULCRUM_CHECK(stream.index < copy_streams_.size(), "no such stream");
    if (CopyStream* thread = copy_streams_[stream.index].get()) {
        thread->push([&e, point] { e.reach(point); });
    } else {
        e.reach(point);  // the compute stream's work so far is done
    }
}

void CpuBackend::wait_event(StreamId stream, EventId id) {
    Event& e = event(id);
    std::uint64_t point = 0;
    {
        const std::lock_guard lock(e.mutex);
        point = e.recorded;  // the latest record, as cudaStreamWaitEvent
    }
    FULCRUM_CHECK(stream.index < copy_streams_.size(), "no such stream");
    if (CopyStream* thread = copy_streams_[stream.index].get()) {
        thread->push([&e, point] { e.wait_for(point); });
    } else {
        e.wait_for(point);
    }
}

void CpuBackend::synchronize(StreamId stream) {
    FULCRUM_CHECK(stream.index < copy_streams_.size(), "no such stream");
    if (CopyStream* thread = copy_streams_[stream.index].get()) {
        thread->drain();
    }
}

void CpuBackend::embedding_forward(Tensor out, Tensor tokens, Tensor positions, Tensor wte,
                                   Tensor wpe) {
    const std::int64_t n = tokens.numel();
    const std::int64_t c = wte.cols();
    require_1d(tokens, n, "embedding: tokens");
    require_1d(positions, n, "embedding: positions");
    require_contiguous_2d(out, n, c, "embedding: out [T, C]");
    require_contiguous_2d(wpe, wpe.rows(), c, "embedding: wpe [S, C]");
    require_contiguous_2d(wte, wte.rows(), c, "embedding: wte [V, C]");
    kernels::embedding_forward(out.f32(), tokens.i32(), positions.i32(), wte.f32(), wpe.f32(), n,
                               int(c));
}

void CpuBackend::embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens,
                                    Tensor positions) {
    const std::int64_t n = tokens.numel();
    const std::int64_t c = dwte.cols();
    require_1d(tokens, n, "embedding: tokens");
    require_1d(positions, n, "embedding: positions");
    require_contiguous_2d(dout, n, c, "embedding: dout [T, C]");
    require_contiguous_2d(dwte, dwte.rows(), c, "embedding: dwte [V, C]");
    require_contiguous_2d(dwpe, dwpe.rows(), c, "embedding: dwpe [S, C]");
    kernels::embedding_backward(dwte.f32(), dwpe.f32(), dout.f32(), tokens.i32(), positions.i32(),
                                n, int(c));
}

void CpuBackend::layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                                   Tensor bias) {
    const std::int64_t n = inp.rows(), c = inp.cols();
    require_contiguous_2d(inp, n, c, "layernorm: inp [N, C]");
    require_contiguous_2d(out, n, c, "layernorm: out [N, C]");
    require_1d(mean, n, "layernorm: mean [N]");
    require_1d(rstd, n, "layernorm: rstd [N]");
    require_1d(weight, c, "layernorm: weight [C]");
    require_1d(bias, c, "layernorm: bias [C]");
    kernels::layernorm_forward(out.f32(), mean.f32(), rstd.f32(), inp.f32(), weight.f32(),
                               bias.f32(), n, int(c));
}

void CpuBackend::layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout,
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
    kernels::layernorm_backward(dinp.empty() ? nullptr : dinp.f32(),
                                dweight.empty() ? nullptr : dweight.f32(),
                                dbias.empty() ? nullptr : dbias.f32(), dout.f32(), inp.f32(),
                                weight.f32(), mean.f32(), rstd.f32(), n, int(c));
}

void CpuBackend::residual_forward(Tensor out, Tensor a, Tensor b) {
    require_cpu(out);
    FULCRUM_CHECK(out.same_shape(a) && out.same_shape(b), "residual: shapes differ");
    FULCRUM_CHECK(out.contiguous() && a.contiguous() && b.contiguous(), "residual: strided");
    kernels::residual_forward(out.f32(), a.f32(), b.f32(), out.numel());
}

void CpuBackend::matmul_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
    const std::int64_t n = inp.rows(), c = inp.cols(), oc = weight.rows();
    require_2d(inp, n, c, "matmul: inp [N, C]");
    require_contiguous_2d(weight, oc, c, "matmul: weight [OC, C]");
    require_contiguous_2d(out, n, oc, "matmul: out [N, OC]");
    if (!bias.empty())
        require_1d(bias, oc, "matmul: bias [OC]");
    kernels::matmul_forward(out.f32(), inp.f32(), inp.row_stride(), weight.f32(),
                            bias.empty() ? nullptr : bias.f32(), n, int(c), int(oc));
}

void CpuBackend::matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                                 Tensor weight) {
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
    kernels::matmul_backward(
        dinp.empty() ? nullptr : dinp.f32(), dweight.empty() ? nullptr : dweight.f32(),
        dbias.empty() ? nullptr : dbias.f32(), dout.f32(), dout.row_stride(),
        dweight.empty() ? nullptr : inp.f32(), dweight.empty() ? 0 : inp.row_stride(), weight.f32(),
        n, int(c), int(oc));
}

void CpuBackend::attention_forward(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v,
                                   std::span<const AttentionSpan> spans, int n_head) {
    const std::int64_t tq = q.rows(), tkv = k.rows(), c = q.cols();
    FULCRUM_CHECK(n_head > 0 && c % n_head == 0, "attention: C not divisible by n_head");
    require_2d(q, tq, c, "attention: q [Tq, C]");
    require_2d(k, tkv, c, "attention: k [Tkv, C]");
    require_2d(v, tkv, c, "attention: v [Tkv, C]");
    require_2d(out, tq, c, "attention: out [Tq, C]");
    require_contiguous_2d(lse, tq, n_head, "attention: lse [Tq, n_head]");
    check_attention_spans(spans, tq, tkv);
    kernels::attention_forward(rows_of(out), lse.f32(), const_rows_of(q), const_rows_of(k),
                               const_rows_of(v), spans, n_head, int(c / n_head));
}

void CpuBackend::attention_backward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q,
                                    Tensor k, Tensor v, Tensor out, Tensor lse,
                                    std::span<const AttentionSpan> spans, int n_head) {
    const std::int64_t tq = q.rows(), tkv = k.rows(), c = q.cols();
    FULCRUM_CHECK(n_head > 0 && c % n_head == 0, "attention: C not divisible by n_head");
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
    kernels::attention_backward(rows_of(dq), rows_of(dk), rows_of(dv), const_rows_of(dout),
                                const_rows_of(q), const_rows_of(k), const_rows_of(v),
                                const_rows_of(out), lse.f32(), spans, n_head, int(c / n_head));
}

void CpuBackend::attention_merge(Tensor out, Tensor lse, Tensor part_out, Tensor part_lse,
                                 int n_head) {
    const std::int64_t rows = out.rows(), c = out.cols();
    FULCRUM_CHECK(n_head > 0 && c % n_head == 0, "attention merge: C not divisible by n_head");
    require_2d(part_out, rows, c, "attention merge: part_out [T, C]");
    require_contiguous_2d(lse, rows, n_head, "attention merge: lse [T, n_head]");
    require_contiguous_2d(part_lse, rows, n_head, "attention merge: part_lse [T, n_head]");
    kernels::attention_merge(rows_of(out), lse.f32(), const_rows_of(part_out), part_lse.f32(), rows,
                             n_head, int(c / n_head));
}

void CpuBackend::gelu_forward(Tensor out, Tensor inp) {
    require_cpu(out);
    FULCRUM_CHECK(out.same_shape(inp) && out.contiguous() && inp.contiguous(), "gelu: shapes");
    kernels::gelu_forward(out.f32(), inp.f32(), out.numel());
}

void CpuBackend::gelu_backward(Tensor dinp, Tensor dout, Tensor inp) {
    require_cpu(dinp);
    FULCRUM_CHECK(dinp.same_shape(inp) && dout.same_shape(inp), "gelu: shapes");
    FULCRUM_CHECK(dinp.contiguous() && dout.contiguous() && inp.contiguous(), "gelu: strided");
    kernels::gelu_backward(dinp.f32(), dout.f32(), inp.f32(), inp.numel());
}

void CpuBackend::crossentropy_forward(Tensor losses, Tensor probs, Tensor logits, Tensor targets) {
    const std::int64_t n = logits.rows(), vocab = logits.cols();
    require_contiguous_2d(logits, n, vocab, "crossentropy: logits [N, V]");
    require_contiguous_2d(probs, n, vocab, "crossentropy: probs [N, V]");
    require_1d(losses, n, "crossentropy: losses [N]");
    require_1d(targets, n, "crossentropy: targets [N]");
    kernels::crossentropy_forward(losses.f32(), probs.f32(), logits.f32(), targets.i32(), n,
                                  int(vocab));
}

void CpuBackend::crossentropy_backward(Tensor dlogits, Tensor probs, Tensor targets,
                                       float loss_scale) {
    const std::int64_t n = probs.rows(), vocab = probs.cols();
    require_contiguous_2d(probs, n, vocab, "crossentropy: probs [N, V]");
    require_contiguous_2d(dlogits, n, vocab, "crossentropy: dlogits [N, V]");
    require_1d(targets, n, "crossentropy: targets [N]");
    kernels::crossentropy_backward(dlogits.f32(), probs.f32(), targets.i32(), loss_scale, n,
                                   int(vocab));
}

double CpuBackend::sum_of_squares(Tensor x) {
    require_cpu(x);
    FULCRUM_CHECK(x.contiguous(), "sum_of_squares of a strided view");
    const float* data = x.f32();
    double sum = 0.0;
    for (std::int64_t i = 0; i < x.numel(); ++i)
        sum += double(data[i]) * data[i];
    return sum;
}

void CpuBackend::adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v,
                              const AdamWStep& step) {
    require_cpu(param);
    FULCRUM_CHECK(param.same_shape(grad) && param.same_shape(m) && param.same_shape(v),
                  "adamw: shapes differ");
    FULCRUM_CHECK(param.contiguous() && grad.contiguous() && m.contiguous() && v.contiguous(),
                  "adamw: strided");
    FULCRUM_CHECK(step.step >= 1, "adamw: steps count from 1");
    kernels::adamw_update(param.f32(), grad.f32(), m.f32(), v.f32(), param.numel(), step);
}

}  // namespace fulcrum::engine
