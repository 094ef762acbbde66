// bench_fpdt: FPDT's comparison of training strategies (Yao et al. 2024, "Training Ultra Long
// Context Language Model with Fully Pipelined Distributed Transformer", arXiv 2408.16978: the
// 8B Llama 3 on 8 A100 80 GB of one node) replayed by Fulcrum's memory model and simulator.
// For each strategy: the longest context of the form 2^k that fits in 80 GiB by
// core/parallel/memory_model, the memory at the published context, and the MFU `simulate`
// plays on the `a100` preset (core/sim/hardware.cpp) at that context, each beside the
// published figure. bench/README.md records a run and what each row assumes.
//
// What the paper leaves unsaid, and what is assumed (bench/README.md repeats it):
//   precision  bf16 weights and gradients, fp32 master weights and Adam's moments: 2 + 2 + 12
//              bytes a parameter (ZeRO §3.1), DeepSpeed's; under ZeRO-1 the gradients are the
//              parameters' .grad and under ZeRO-2 the shard, allocated as the backward
//              writes them (DeepSpeed's stage_1_and_2.py), so they take the activations'
//              place at the peak;
//   attention  FlashAttention (fused, no score matrix);
//   batch      one sequence a step, one micro-batch;
//   TP rows    Megatron-DeepSpeed's tensor parallelism of 8 without sequence parallelism;
//   Ulysses    sequence parallelism of 8, ZeRO over the same 8 ranks;
//   FPDT       chunks of 64K tokens (the paper's balance of PCIe and compute), Q, K, V and
//              the checkpoints offloaded, the loss taken a chunk at a time;
//   memory     the published GB read as GiB (PyTorch's max_memory_allocated / 2^30); a
//              context fits when the device holds it in 80 GiB and the node's 2 TB of host
//              memory (DGX A100 80 GB's) holds the 8 ranks' offloaded checkpoints;
//   MFU        model FLOPs (6 · the layers' GEMM weights and the LM head a token, 12·L·h a
//              causal pair: parallel::training_flops, the planner's) over 8 × 312 TFLOP/s.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/parallel/memory_model.h"
#include "core/sim/hardware.h"
#include "core/sim/simulator.h"
#include "core/util/text_table.h"

using namespace fulcrum;

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kDeviceGiB = 80;
constexpr double kHostGiB = 2048;  // a DGX A100 80 GB node's 2 TB, as fulcrum plan assumes
constexpr int kGpus = 8;
constexpr int kFpdtChunk = 65536;

// Llama 3 8B (Dubey et al. 2024, Table 3).
parallel::ModelShape llama3_8b(int context) {
    return {.layers = 32,
            .hidden = 4096,
            .heads = 32,
            .context = context,
            .vocab = 128256,
            .architecture = parallel::Architecture::llama,
            .kv_heads = 8,
            .ffn_hidden = 14336};
}

// One strategy of FPDT's table and what it published.
struct Strategy {
    const char* name;
    bool ulysses;  // else TP 8
    int zero;
    parallel::Recompute recompute;
    bool offload_checkpoints;
    bool fpdt;  // FPDT's chunks of Q, K, V offloaded, the loss in chunks
    int published_context;
    double published_gib;
    double published_mfu;  // percent
};

using parallel::Recompute;
const std::vector<Strategy> kStrategies = {
    {"TP", false, 0, Recompute::none, false, false, 32 << 10, 64.3, 9.4},
    {"TP + AC", false, 0, Recompute::full, false, false, 128 << 10, 61.2, 19.4},
    {"TP + AC + OC", false, 0, Recompute::full, true, false, 512 << 10, 78.7, 32.7},
    {"Ulysses + ZeRO-1", true, 1, Recompute::none, false, false, 64 << 10, 58.9, 15.3},
    {"Ulysses + ZeRO-2", true, 2, Recompute::none, false, false, 64 << 10, 54.5, 15.3},
    {"Ulysses + ZeRO-3", true, 3, Recompute::none, false, false, 64 << 10, 52.3, 21.0},
    {"AC + OC + Ulysses + ZeRO-1", true, 1, Recompute::full, true, false, 512 << 10, 65.5, 46.8},
    {"AC + OC + Ulysses + ZeRO-2", true, 2, Recompute::full, true, false, 512 << 10, 65.5, 46.8},
    {"AC + OC + Ulysses + ZeRO-3", true, 3, Recompute::full, true, false, 512 << 10, 60.1, 47.2},
    {"FPDT + ZeRO-3 + AC + OC", true, 3, Recompute::full, true, true, 4 << 20, 68.0, 55.7},
};

parallel::Layout layout_of(const Strategy& strategy) {
    parallel::Layout layout;
    layout.grid =
        strategy.ulysses ? parallel::GridShape{.cp = kGpus} : parallel::GridShape{.tp = kGpus};
    layout.microbatches = 1;
    layout.recompute = strategy.recompute;
    layout.offload_checkpoints = strategy.offload_checkpoints;
    layout.zero_stage = strategy.zero;
    layout.context_parallelism = strategy.ulysses ? parallel::ContextParallelism::ulysses
                                                  : parallel::ContextParallelism::all_gather;
    return layout;
}

parallel::MemoryShape memory_of(const Strategy& strategy, int context) {
    parallel::MemoryShape shape = parallel::memory_shape(llama3_8b(context), layout_of(strategy));
    shape.flash_attention = true;
    shape.precision = parallel::Precision::megatron_mixed();
    shape.precision.gradient_bytes = 2;  // DeepSpeed's bf16 gradients
    // DeepSpeed's ZeRO-1 keeps the gradients in the parameters' .grad, written by the
    // backward, and ZeRO-2 its shard, allocated at the backward's first reduction
    // (stage_1_and_2.py); its bf16 optimizer without ZeRO (the TP rows) holds fp32 gradient
    // buffers, and ZeRO-3 its own partitions.
    shape.gradients_as_written = strategy.zero == 1 || strategy.zero == 2;
    if (strategy.fpdt) {
        shape.attention_chunk = kFpdtChunk;
        shape.offload = true;
        shape.loss_chunk = kFpdtChunk;
    }
    return shape;
}

double peak_gib(const Strategy& strategy, int context) {
    return parallel::peak_stage_memory(memory_of(strategy, context)).total_bytes() / kGiB;
}

bool fits(const Strategy& strategy, int context) {
    const parallel::StageMemory peak = parallel::peak_stage_memory(memory_of(strategy, context));
    return peak.total_bytes() <= kDeviceGiB * kGiB && peak.host_bytes * kGpus <= kHostGiB * kGiB;
}

// The longest 2^k tokens (8K to 16M) that fit; 0 when none does.
int longest_context(const Strategy& strategy) {
    int longest = 0;
    for (int context = 8 << 10; context <= 16 << 20; context *= 2) {
        if (!fits(strategy, context)) {
            break;
        }
        longest = context;
    }
    return longest;
}

// The step `simulate` plays for one sequence of `context` tokens; its MFU in percent.
Result<double> simulated_mfu(const Strategy& strategy, int context,
                             const sim::HardwareAssumptions& hardware) {
    sim::SimulationConfig config;
    config.model = llama3_8b(context);
    config.layout = layout_of(strategy);
    config.sharding = balance::CpSharding::contiguous;
    config.steps = 1;
    config.document_lengths = {context};
    config.dtype = sim::DType::bf16;
    config.hardware = hardware;
    config.gpu_memory_gib = kDeviceGiB;
    if (strategy.fpdt) {
        config.attention_chunk = kFpdtChunk;
        config.offload = true;
    }
    auto result = sim::simulate(config, nullptr);
    if (!result) {
        return result.error();
    }
    const double tokens = context;
    const double flops = parallel::training_flops(config.model, tokens, tokens * (tokens + 1) / 2);
    return 100 * flops / (result->mean_step_ns * 1e-9) / (kGpus * hardware.tflops * 1e12);
}

std::string context_text(int tokens) {
    if (tokens == 0) {
        return "none";
    }
    return tokens >= (1 << 20) ? std::to_string(tokens >> 20) + "M"
                               : std::to_string(tokens >> 10) + "K";
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{
        "bench_fpdt: FPDT's table of training strategies (8B Llama 3 on 8 A100 80 GB) by the "
        "memory model and the simulator, beside the published longest context, memory and MFU"};
    std::string hardware_name = "a100";
    app.add_option("--hardware", hardware_name, "a preset or a system file (docs/simulate.md)");
    CLI11_PARSE(app, argc, argv);
    auto hardware = sim::hardware_preset(hardware_name);
    if (!hardware) {
        std::fprintf(stderr, "bench_fpdt: %s\n", hardware.error().message.c_str());
        return 2;
    }
    std::printf("hardware: %s\n", sim::describe(*hardware).c_str());
    std::printf("model: %s, %.3g B parameters\n\n",
                parallel::describe_model(llama3_8b(8192)).c_str(),
                parallel::model_parameters(llama3_8b(8192)) / 1e9);
    using Align = TextTable::Align;
    TextTable table({"strategy", "longest", "published", "GiB there", "published", "error",
                     "MFU there", "published", "error"},
                    {Align::left, Align::right, Align::right, Align::right, Align::right,
                     Align::right, Align::right, Align::right, Align::right});
    int contexts_equal = 0, memory_within = 0, mfu_within = 0;
    double memory_error_sum = 0, mfu_error_sum = 0;
    for (const Strategy& strategy : kStrategies) {
        const int longest = longest_context(strategy);
        const double gib = peak_gib(strategy, strategy.published_context);
        auto mfu = simulated_mfu(strategy, strategy.published_context, *hardware);
        if (!mfu) {
            std::fprintf(stderr, "bench_fpdt: %s: %s\n", strategy.name,
                         mfu.error().message.c_str());
            return 1;
        }
        contexts_equal += longest == strategy.published_context ? 1 : 0;
        const double memory_error = std::abs(gib - strategy.published_gib) / strategy.published_gib;
        const double mfu_error = std::abs(*mfu - strategy.published_mfu) / strategy.published_mfu;
        memory_within += memory_error <= 0.10 ? 1 : 0;
        mfu_within += mfu_error <= 0.15 ? 1 : 0;
        memory_error_sum += memory_error;
        mfu_error_sum += mfu_error;
        table.add_row({strategy.name, context_text(longest),
                       context_text(strategy.published_context), format_fixed(gib, 1),
                       format_fixed(strategy.published_gib, 1),
                       format_relative_error(gib, strategy.published_gib),
                       format_fixed(*mfu, 1) + "%", format_fixed(strategy.published_mfu, 1) + "%",
                       format_relative_error(*mfu, strategy.published_mfu)});
    }
    std::fputs(table.render().c_str(), stdout);
    const double rows = static_cast<double>(kStrategies.size());
    std::printf(
        "\nlongest context equal to the published: %d of %zu; memory within 10%%: %d of %zu "
        "(mean |error| %.1f%%); MFU within 15%%: %d of %zu (mean |error| %.1f%%)\n",
        contexts_equal, kStrategies.size(), memory_within, kStrategies.size(),
        100 * memory_error_sum / rows, mfu_within, kStrategies.size(), 100 * mfu_error_sum / rows);
    return 0;
}
