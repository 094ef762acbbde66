// bench_engine: CPU model throughput (issue 3). Tokens/s of a whole training micro-batch
// (forward + backward) of the serial model, and the model's achieved FLOP/s against what
// OpenBLAS's sgemm reaches on the same GEMM shapes in the same run (the ratio is the figure:
// how much of the machine's GEMM rate the engine turns into training).
#include <cblas.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/util/text_table.h"
#include "engine/backend/cpu_backend.h"
#include "engine/model/gpt.h"
#include "engine/model/micro_batch.h"

using namespace fulcrum;
using namespace fulcrum::engine;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// Seconds per call of C[m,n] = A[m,k]·B[k,n]ᵀ-style sgemm, best of `repeats`.
double time_sgemm(int m, int n, int k, int repeats) {
    std::vector<float> a(std::size_t(m) * k, 0.5f), b(std::size_t(n) * k, 0.25f),
        c(std::size_t(m) * n);
    double best = 1e9;
    for (int r = 0; r < repeats; ++r) {
        const auto start = Clock::now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a.data(), k, b.data(),
                    k, 0.0f, c.data(), n);
        best = std::min(best, seconds_since(start));
    }
    return best;
}

}  // namespace

int main(int argc, char** argv) {
    ModelShape config;
    config.layers = 4;
    config.hidden = 256;
    config.heads = 8;
    config.context = 1024;
    int tokens = 2048;
    int document_length = 256;
    int repeats = 5;
    CLI::App app{"CPU engine throughput against OpenBLAS sgemm on the same shapes"};
    app.add_option("--layers", config.layers)->capture_default_str();
    app.add_option("--hidden", config.hidden)->capture_default_str();
    app.add_option("--heads", config.heads)->capture_default_str();
    app.add_option("--tokens", tokens, "Tokens per micro-batch")->capture_default_str();
    app.add_option("--document-length", document_length)->capture_default_str();
    app.add_option("--repeats", repeats)->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    config.context = std::max(config.context, document_length);

    CpuBackend backend(1);
    GptModel model(backend, config);
    model.initialize(1);
    std::string text;
    for (int i = 0; text.size() < std::size_t(tokens); ++i) {
        text += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + " ";
    }
    std::vector<std::string_view> documents;
    for (int begin = 0; begin < tokens; begin += document_length) {
        documents.emplace_back(text.data() + begin, std::min(document_length, tokens - begin));
    }
    const TokenBatch batch = micro_batch_of(documents);
    Activations acts(backend, config);
    double best_step = 1e9;
    for (int r = 0; r < repeats; ++r) {
        model.zero_gradients();
        const auto start = Clock::now();
        model.forward(batch, acts);
        model.backward(acts, 1.0f / float(batch.target_count()));
        best_step = std::min(best_step, seconds_since(start));
    }

    // Training FLOPs (docs/sources.md, "FLOPs"): per layer 72·S·C² + 6·C·Σd², plus the LM head
    // 6·S·C·V.
    const double s = tokens, c = config.hidden, v = config.vocab;
    double sum_d2 = 0;
    for (const auto& d : documents) {
        sum_d2 += double(d.size()) * double(d.size());
    }
    // Causal attention does half of the d² pairs: 6·C·Σd²/2·... docs/sources.md counts ≈ 6h·Σd².
    const double flops = config.layers * (72.0 * s * c * c + 6.0 * c * sum_d2) + 6.0 * s * c * v;
    const double model_rate = flops / best_step;

    // sgemm on the model's shapes: the forward GEMMs of one layer, as FLOP-weighted rate.
    const int t = tokens, ch = config.hidden;
    struct Shape {
        const char* name;
        int m, n, k;
    };
    const Shape shapes[] = {{"qkv", t, 3 * ch, ch},
                            {"attn proj", t, ch, ch},
                            {"fc", t, 4 * ch, ch},
                            {"mlp proj", t, ch, 4 * ch},
                            {"lm head", t, 256, ch}};
    double gemm_flops = 0, gemm_seconds = 0;
    using Align = TextTable::Align;
    TextTable gemm_table({"sgemm shape", "m x n x k", "GFLOP/s"},
                         {Align::left, Align::left, Align::right});
    for (const auto& shape : shapes) {
        const double seconds = time_sgemm(shape.m, shape.n, shape.k, repeats);
        const double f = 2.0 * shape.m * shape.n * shape.k;
        gemm_flops += f;
        gemm_seconds += seconds;
        char rate[32];
        std::snprintf(rate, sizeof rate, "%.2f", f / seconds / 1e9);
        gemm_table.add_row({shape.name,
                            std::to_string(shape.m) + " x " + std::to_string(shape.n) + " x " +
                                std::to_string(shape.k),
                            rate});
    }
    const double gemm_rate = gemm_flops / gemm_seconds;

    std::printf("model %s, %d tokens in documents of %d, BLAS %s\n\n%s\n", describe(config).c_str(),
                tokens, document_length, CpuBackend::blas_description().c_str(),
                gemm_table.render().c_str());
    TextTable table({"figure", "value", "vs sgemm"}, {Align::left, Align::right, Align::right});
    char buffer[4][48];
    std::snprintf(buffer[0], 48, "%.0f", tokens / best_step);
    std::snprintf(buffer[1], 48, "%.2f GFLOP/s", model_rate / 1e9);
    std::snprintf(buffer[2], 48, "%.2f GFLOP/s", gemm_rate / 1e9);
    std::snprintf(buffer[3], 48, "%.2f", model_rate / gemm_rate);
    table.add_row({"training tokens/s (fwd + bwd, 1 thread)", buffer[0], ""});
    table.add_row({"model FLOP rate", buffer[1], buffer[3]});
    table.add_row({"sgemm on the same shapes (baseline)", buffer[2], "1.00"});
    std::printf("%s", table.render().c_str());
    return 0;
}
