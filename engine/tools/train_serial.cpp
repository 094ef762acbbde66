// fulcrum-train-serial: trains the serial CPU GPT on a folder of text and prints the loss
// and throughput of every step. A check of the engine, not the real fulcrum-train CLI.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <vector>

#include "engine/backend/cpu_backend.h"
#include "engine/data/corpus.h"
#include "engine/data/packer.h"
#include "engine/model/gpt.h"
#include "engine/train/trainer.h"

using namespace fulcrum::engine;

int main(int argc, char** argv) {
    CLI::App app{"Train the serial CPU GPT on a folder of text files (bytes as tokens)."};
    std::string data_dir = "/usr/share/common-licenses";
    std::string split_name = "file";
    int steps = 50;
    int micro_batches = 1;
    int blas_threads = 1;  // tiny GEMMs: more threads cost more than they save
    std::uint64_t seed = 1;
    ModelShape model;
    PackingConfig packing;
    TrainConfig train;
    train.adamw.learning_rate = 1e-3f;
    train.warmup_steps = 10;
    app.add_option("--data", data_dir, "folder of text files")->capture_default_str();
    app.add_option("--split", split_name, "one document per 'file' or per 'blank' line block")
        ->check(CLI::IsMember({"file", "blank"}))
        ->capture_default_str();
    app.add_option("--steps", steps)->capture_default_str();
    app.add_option("--layers", model.layers)->capture_default_str();
    app.add_option("--hidden", model.hidden)->capture_default_str();
    app.add_option("--heads", model.heads)->capture_default_str();
    app.add_option("--context", packing.context, "tokens per packed sequence")
        ->capture_default_str();
    app.add_option("--sequences", packing.sequences_per_micro_batch, "sequences per micro-batch")
        ->capture_default_str();
    app.add_option("--micro-batches", micro_batches, "micro-batches per step (accumulated)")
        ->capture_default_str();
    app.add_option("--lr", train.adamw.learning_rate)->capture_default_str();
    app.add_option("--warmup", train.warmup_steps)->capture_default_str();
    app.add_option("--beta2", train.adamw.beta2)->capture_default_str();
    app.add_option("--weight-decay", train.adamw.weight_decay)->capture_default_str();
    app.add_option("--clip", train.max_grad_norm)->capture_default_str();
    app.add_option("--seed", seed)->capture_default_str();
    app.add_option("--blas-threads", blas_threads, "0: OpenBLAS default")->capture_default_str();
    CLI11_PARSE(app, argc, argv);

    model.context = packing.context;
    packing.seed = seed;
    if (const auto valid = validate(model); !valid) {
        std::fprintf(stderr, "fulcrum-train-serial: %s\n", valid.error().message.c_str());
        return 2;
    }
    auto corpus = load_text_corpus(
        data_dir, split_name == "file" ? DocumentSplit::file : DocumentSplit::blank_line);
    if (!corpus) {
        std::fprintf(stderr, "fulcrum-train-serial: %s\n", corpus.error().message.c_str());
        return 1;
    }

    CpuBackend backend(blas_threads);
    GptModel gpt(backend, model);
    gpt.initialize(seed);
    SerialTrainer trainer(gpt, train);
    MicroBatchSampler sampler(*corpus, packing);
    std::printf("model %s\nbackend %s: %s\ncorpus %s: %zu documents, %lld bytes\n",
                describe(model).c_str(), std::string(backend.name()).c_str(),
                CpuBackend::blas_description().c_str(), data_dir.c_str(), corpus->documents.size(),
                static_cast<long long>(corpus->total_bytes()));

    using Clock = std::chrono::steady_clock;
    std::int64_t total_tokens = 0;
    double total_seconds = 0.0;
    std::vector<TokenBatch> batches(static_cast<std::size_t>(micro_batches));
    for (int s = 0; s < steps; ++s) {
        for (TokenBatch& b : batches)
            b = sampler.next();
        const auto start = Clock::now();
        const StepReport r = trainer.step(batches);
        const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        total_tokens += r.tokens;
        total_seconds += seconds;
        std::printf("step %4lld  loss %.4f  grad_norm %.3f  lr %.2e  %6.0f tokens/s\n",
                    static_cast<long long>(r.step), r.loss, r.grad_norm, r.learning_rate,
                    double(r.tokens) / seconds);
    }
    std::printf("%lld tokens in %.2f s: %.0f tokens/s\n", static_cast<long long>(total_tokens),
                total_seconds, double(total_tokens) / total_seconds);
    return 0;
}
