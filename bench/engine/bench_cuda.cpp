// bench_cuda: the CUDA backend's training throughput and its attention kernel, each against
// a baseline measured in the same run (bench/README: ratios, not absolute times).
//
//   1. MFU of a GPT-2-small-shaped model (12 layers, 768 wide, 12 heads; byte vocabulary, so
//      ~88 M parameters instead of GPT-2's 124 M, whose 50 K-token embedding is most of the
//      difference) on 4096-token micro-batches, bf16 and fp32 GEMMs. FLOPs per docs/sources.md,
//      "FLOPs": per layer 72·S·h² + 6·h·Σdᵢ², plus the LM head 6·S·h·V; MFU against the H100/H200
//      dense bf16 peak, 989 TFLOP/s.
//      The bf16 model runs twice: attention in the tiled fp32 kernels (the baseline) and on the
//      cuBLAS path (dense_attention.cuh, the default for spans of 128 rows or more).
//   2. Attention at 16 K tokens (one document, so Σd² = 16384²; FLOPs 2·h·Σd², causal),
//      forward and forward + backward, tiled kernels against the cuBLAS path, and against the
//      cuBLAS rate of the QKV-projection-shaped GEMM [16384, 768]·[2304, 768]ᵀ on the same
//      device: the ratio says how far each is from the GEMMs that FlashAttention-class kernels
//      roughly match.
//   3. FPDT-style chunked attention (chunked_attention.h) on one 32 K-token document in 4 K
//      chunks, forward + backward, with the K/V offload (pinned host memory, double-buffered
//      prefetch) and without it, against whole-document attention in the same run: the time
//      ratio says how much of the copy traffic the prefetch hides; the device working set of
//      attention K/V is printed beside the unchunked one.
//
// Without a GPU it says so and exits 0, so CI can run it.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/model/chunked_attention.h"
#include "engine/model/gpt.h"
#include "engine/model/micro_batch.h"
#include "engine/train/trainer.h"

using namespace fulcrum::engine;

namespace {

constexpr double kPeakBf16 =
    989e12;  // H100 SXM dense bf16 (docs/sources.md, "FLOPs"); H200 the same

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// Deterministic printable bytes: the content does not change the work.
std::string document(int length, int seed) {
    std::string text(std::size_t(length), ' ');
    unsigned state = 2166136261u + unsigned(seed);
    for (char& c : text) {
        state = state * 1664525u + 1013904223u;
        c = char(32 + (state >> 24) % 95);
    }
    return text;
}

// dense_rows: CudaBackend::set_dense_attention_rows (0: the tiled kernels for every span).
void bench_training(Precision precision, int dense_rows) {
    CudaBackend backend(precision);
    backend.set_dense_attention_rows(dense_rows);
    ModelShape config;
    config.layers = 12;
    config.hidden = 768;
    config.heads = 12;
    config.context = 4096;
    GptModel model(backend, config);
    model.initialize(1);
    TrainConfig train;
    SerialTrainer trainer(model, train);
    const int context = 4096;
    TokenBatch batch;
    batch.append_document(document(context, 1));
    const std::vector<TokenBatch> batches = {batch};
    trainer.step(batches);  // warm-up: cuBLAS heuristics, allocations
    const int steps = 5;
    backend.synchronize(kComputeStream);
    const auto start = Clock::now();
    for (int s = 0; s < steps; ++s)
        trainer.step(batches);  // the gradient norm waits for the device every step
    backend.synchronize(kComputeStream);
    const double seconds = seconds_since(start) / steps;
    const double S = context, h = config.hidden, V = 256, L = config.layers;
    const double sum_d2 = S * S;
    const double flops = L * (72 * S * h * h + 6 * h * sum_d2) + 6 * S * h * V;
    std::printf("%-6s %-16s | %8.0f tokens/s | %7.1f ms/step | %7.1f TFLOP/s | MFU %5.1f%%\n",
                precision_name(precision), dense_rows > 0 ? "cuBLAS attention" : "tiled attention",
                S / seconds, seconds * 1e3, flops / seconds / 1e12,
                100 * flops / seconds / kPeakBf16);
}

void bench_attention() {
    CudaBackend backend(Precision::bf16);
    const int tokens = 16384, c = 768, n_head = 12;
    DeviceBuffer qkv = backend.allocate(std::size_t(tokens) * 3 * c * sizeof(float));
    DeviceBuffer out = backend.allocate(std::size_t(tokens) * 3 * c * sizeof(float));
    DeviceBuffer lse = backend.allocate(std::size_t(tokens) * n_head * sizeof(float));
    DeviceBuffer inp = backend.allocate(std::size_t(tokens) * c * sizeof(float));
    DeviceBuffer weight = backend.allocate(std::size_t(3 * c) * c * sizeof(float));
    const Tensor qkv_t = qkv.f32(0, {tokens, 3 * c});
    const std::vector<AttentionSpan> spans = {{0, 0, 0, tokens}};
    auto time = [&](auto&& work) {
        work();
        backend.synchronize(kComputeStream);
        const int repeats = 3;
        const auto start = Clock::now();
        for (int i = 0; i < repeats; ++i)
            work();
        backend.synchronize(kComputeStream);
        return seconds_since(start) / repeats;
    };
    DeviceBuffer dqkv = backend.allocate(std::size_t(tokens) * 3 * c * sizeof(float));
    DeviceBuffer dout = backend.allocate(std::size_t(tokens) * c * sizeof(float));
    const Tensor dqkv_t = dqkv.f32(0, {tokens, 3 * c});
    const Tensor out_t = out.f32(0, {tokens, c}), lse_t = lse.f32(0, {tokens, n_head});
    auto forward = [&] {
        backend.attention_forward(out_t, lse_t, qkv_t.columns(0, c), qkv_t.columns(c, c),
                                  qkv_t.columns(2 * c, c), spans, n_head);
    };
    auto backward = [&] {
        backend.attention_backward(dqkv_t.columns(0, c), dqkv_t.columns(c, c),
                                   dqkv_t.columns(2 * c, c), dout.f32(0, {tokens, c}),
                                   qkv_t.columns(0, c), qkv_t.columns(c, c),
                                   qkv_t.columns(2 * c, c), out_t, lse_t, spans, n_head);
    };
    const double gemm_s = time([&] {
        backend.matmul_forward(out.f32(0, {tokens, 3 * c}), inp.f32(0, {tokens, c}),
                               weight.f32(0, {3 * c, c}), Tensor{});
    });
    const double gemm_rate = 2.0 * tokens * c * 3.0 * c / gemm_s;
    // Causal FLOPs (the masked half of the scores the cuBLAS path also computes not counted):
    // forward 2·h·Σd², backward 2.5 times that (five products of seven, the recomputed S).
    const double forward_flops = 2.0 * c * double(tokens) * tokens;
    std::printf(
        "attention, one 16K-token document | forward ms | TFLOP/s | vs GEMM rate | "
        "fwd+bwd ms | TFLOP/s\n");
    double tiled_s = 0;
    for (const auto& [label, rows] :
         {std::pair{"tiled kernels (fp32 cores)", 0},
          std::pair{"cuBLAS over score blocks", CudaBackend::kDenseAttentionRows}}) {
        backend.set_dense_attention_rows(rows);
        const double forward_s = time(forward);
        const double both_s = time([&] {
            forward();
            backward();
        });
        if (rows == 0)
            tiled_s = both_s;
        std::printf("%-33s | %10.2f | %7.1f | %12.3f | %10.2f | %7.1f (%.1fx the tiled)\n", label,
                    forward_s * 1e3, forward_flops / forward_s / 1e12,
                    forward_flops / forward_s / gemm_rate, both_s * 1e3,
                    3.5 * forward_flops / both_s / 1e12, tiled_s / both_s);
    }
    std::printf("cuBLAS bf16 GEMM [16K,768]x[2304,768]^T | %7.2f ms | %7.1f TFLOP/s\n",
                gemm_s * 1e3, gemm_rate / 1e12);
}

// One block's QKV projection and attention, forward and backward, on one long document:
// whole (resident Q/K/V), and FPDT chunks with Q/K/V offloaded to pinned memory or resident.
void bench_chunked_attention() {
    CudaBackend backend(Precision::bf16);
    const int tokens = 32768, c = 768, n_head = 12, chunk = 4096;
    auto floats = [&](std::int64_t n) { return backend.allocate(std::size_t(n) * sizeof(float)); };
    DeviceBuffer x = floats(std::int64_t(tokens) * c), weight = floats(3 * c * c),
                 bias = floats(3 * c);
    DeviceBuffer q = floats(std::int64_t(tokens) * c), kv = floats(std::int64_t(tokens) * 2 * c);
    DeviceBuffer dq = floats(std::int64_t(tokens) * c), dkv = floats(std::int64_t(tokens) * 2 * c);
    DeviceBuffer out = floats(std::int64_t(tokens) * c), dout = floats(std::int64_t(tokens) * c);
    DeviceBuffer lse = floats(std::int64_t(tokens) * n_head);
    PinnedBuffer host_q = backend.allocate_pinned(std::size_t(tokens) * c);
    PinnedBuffer host_kv = backend.allocate_pinned(std::size_t(tokens) * 2 * c);
    const Tensor x_t = x.f32(0, {tokens, c}), w = weight.f32(0, {3 * c, c}),
                 b = bias.f32(0, {3 * c});
    const Tensor q_t = q.f32(0, {tokens, c}), kv_t = kv.f32(0, {tokens, 2 * c});
    const Tensor dq_t = dq.f32(0, {tokens, c}), dkv_t = dkv.f32(0, {tokens, 2 * c});
    const Tensor out_t = out.f32(0, {tokens, c}), dout_t = dout.f32(0, {tokens, c});
    const Tensor lse_t = lse.f32(0, {tokens, n_head});
    const std::vector<AttentionSpan> spans = {{0, 0, 0, tokens}};
    std::printf(
        "\nQKV projection + attention fwd+bwd, one %d-token document | ms | vs whole | "
        "device Q/K/V MiB\n",
        tokens);
    const double resident_mib = 3.0 * tokens * c * sizeof(float) / (1 << 20);
    double whole_s = 0;
    for (const auto& [label, options] :
         {std::pair{"whole document", ChunkedAttentionOptions{}},
          std::pair{"chunks of 4096, offload on", ChunkedAttentionOptions{chunk, true}},
          std::pair{"chunks of 4096, offload off", ChunkedAttentionOptions{chunk, false}}}) {
        ChunkedAttention attention(backend, c, n_head, options);
        const QkvStore store = attention.offloads()
                                   ? QkvStore{Tensor{}, Tensor{}, host_q.get(), host_kv.get()}
                                   : QkvStore{q_t, kv_t, nullptr, nullptr};
        auto pass = [&] {
            if (!attention.enabled()) {
                backend.matmul_forward(q_t, x_t, w.slice(0, c), b.slice(0, c));
                backend.matmul_forward(kv_t, x_t, w.slice(c, 2 * c), b.slice(c, 2 * c));
                backend.attention_forward(out_t, lse_t, q_t, kv_t.columns(0, c), kv_t.columns(c, c),
                                          spans, n_head);
                backend.attention_backward(dq_t, dkv_t.columns(0, c), dkv_t.columns(c, c), dout_t,
                                           q_t, kv_t.columns(0, c), kv_t.columns(c, c), out_t,
                                           lse_t, spans, n_head);
                return;
            }
            attention.forward(
                {x_t, w.slice(0, c), b.slice(0, c), w.slice(c, 2 * c), b.slice(c, 2 * c)}, Tensor{},
                store, out_t, lse_t, spans);
            attention.backward(store, dq_t, dkv_t.columns(0, c), dkv_t.columns(c, c), dout_t, out_t,
                               lse_t, spans);
        };
        pass();
        cudaDeviceSynchronize();
        const auto start = Clock::now();
        pass();
        cudaDeviceSynchronize();
        const double s = seconds_since(start);
        if (!attention.enabled())
            whole_s = s;
        const double qkv_mib = attention.offloads()
                                   ? double(attention.memory().double_buffer_bytes) / (1 << 20)
                                   : resident_mib;
        std::printf("%-30s | %8.1f | %5.2fx | %8.1f\n", label, s * 1e3, s / whole_s, qkv_mib);
    }
}

}  // namespace

int main() {
    std::string reason;
    if (!cuda_device_available(&reason)) {
        std::printf("bench_cuda: needs a GPU: %s\n", reason.c_str());
        return 0;
    }
    {
        CudaBackend probe;
        std::printf("device: %s\n", probe.description().c_str());
    }
    std::printf("GPT 12 x 768, 12 heads, 4096-token micro-batch, one document\n");
    bench_training(Precision::bf16, 0);
    bench_training(Precision::bf16, CudaBackend::kDenseAttentionRows);
    bench_training(Precision::fp32, CudaBackend::kDenseAttentionRows);
    bench_attention();
    bench_chunked_attention();
    return 0;
}
