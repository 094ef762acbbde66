// bench_published: the simulator against published runs. The eight A100 iteration times of
// Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
// Table 4 and §6: 22B, 175B, 530B and 1T GPT models with full recomputation, and with sequence
// parallelism + selective recomputation; A100 80 GB, 8 GPUs a node, fp16, sequence 2048, no
// data parallelism), each played event by event by `simulate` on the `a100` hardware preset
// (core/sim/hardware.cpp: the device's efficiencies, stated once, not per row), and the
// per-GPU memory of the same layouts from core/parallel/memory_model. Then the validation set
// (validation_set.h): 34 more runs from Narayanan et al. SC'21, MegaScale, Megatron-LM's README
// (H100) and BLOOM, each on its GPU's preset. Prints predicted against published with the
// error of every row, the mean and worst |error| and the signs by source; bench/sim/published.md
// records a run.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/parallel/memory_model.h"
#include "core/sim/hardware.h"
#include "core/sim/simulator.h"
#include "core/sim/step_estimate.h"
#include "core/util/text_table.h"
#include "validation_set.h"

using namespace fulcrum;

namespace {

constexpr int kSequence = 2048;
constexpr int kVocab = 51200;  // GPT-2's BPE vocabulary padded to a multiple of 128·tp
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct PublishedRun {
    const char* model;
    int layers, hidden, heads;
    int tp, pp, virtual_stages;
    int global_batch, microbatch_size;
    double full_recompute_s, selective_sp_s;  // seconds an iteration
    double model_state_gib;                   // weights + gradients + optimizer a GPU
    double activations_none_gib, activations_selective_sp_gib;
};

// Korthikanti et al. 2022, Tables 3 and 4 (and Figure 7's memory).
const std::vector<PublishedRun> kRuns = {
    {"22B", 48, 6144, 64, 8, 1, 1, 4, 4, 1.42, 1.10, 45.6, 59.3, 9.6},
    {"175B", 96, 12288, 96, 8, 8, 3, 64, 1, 18.13, 13.75, 45.6, 66.8, 12.4},
    {"530B", 105, 20480, 128, 8, 35, 3, 280, 1, 49.05, 37.83, 31.6, 114.0, 23.1},
    {"1T", 128, 25600, 160, 8, 64, 1, 512, 1, 94.42, 71.49, 33.0, 131.3, 26.6},
};

struct Variant {
    const char* name;
    parallel::Recompute recompute;
    bool sequence_parallel;
};

// What part of the model to leave out of the validation set's rows (--without), to show what
// each changes (bench/README.md).
struct Ablation {
    bool flash_attention = false;  // every row on the unfused kernels
    bool tp_comm_overlap = false;
    bool distributed_optimizer = false;
    // Gradients reduced in the compute type (2 bytes under bf16) instead of Megatron-LM's fp32.
    bool fp32_gradients = false;
    // Every row's backward TP collectives on the critical path (no asynchronous all-reduce).
    bool tp_backward_overlap = false;
    // The updated parameters gathered before the update, not at the next step's start.
    bool param_gather_overlap = false;
};

// The system a validation row ran on: its cluster's own file where it has one (the file in
// bench/sim, ValidationRun::system), else its GPU's preset.
Result<sim::HardwareAssumptions> row_hardware(const bench::ValidationRun& run) {
    if (run.system != nullptr) {
        return sim::hardware_preset(std::string(FULCRUM_BENCH_SIM_DIR) + "/" + run.system);
    }
    return sim::hardware_preset(run.gpu);
}

// A validation row as the simulator plays it: b sequences of s tokens a micro-batch (documents
// of exactly s, packed b at a time), the global batch over DP, Megatron-LM's pipeline sends.
sim::SimulationConfig config_for(const bench::ValidationRun& run,
                                 const sim::HardwareAssumptions& hardware,
                                 const Ablation& without = {}) {
    sim::SimulationConfig config;
    config.model = {run.layers, run.hidden, run.heads, run.sequence * run.microbatch_size,
                    run.vocab};
    config.model.architecture = run.architecture;
    config.model.kv_heads = run.kv_heads;
    config.model.ffn_hidden = run.ffn_hidden;
    config.layout.grid = {.dp = run.dp, .tp = run.tp, .pp = run.pp, .cp = run.cp};
    // Megatron-Core's context parallelism splits each sequence into 2·cp chunks, rank r
    // holding chunks r and 2·cp − 1 − r.
    config.sharding = balance::CpSharding::zigzag;
    config.layout.virtual_stages = run.virtual_stages;
    config.layout.schedule = run.virtual_stages > 1 ? parallel::PipelineSchedule::interleaved
                                                    : parallel::PipelineSchedule::one_f_one_b;
    config.layout.microbatches = run.global_batch / (run.dp * run.microbatch_size);
    config.layout.recompute = run.recompute;
    config.layout.sequence_parallel = run.sequence_parallel;
    config.steps = 1;
    config.document_lengths.assign(static_cast<std::size_t>(run.global_batch), run.sequence);
    config.dtype = run.bf16 ? sim::DType::bf16 : sim::DType::fp16;
    config.overlap_grad_reduce = run.overlap_grad_reduce;
    if (without.fp32_gradients) {
        config.grad_reduce_dtype = config.dtype;
    }
    // Megatron-LM sends 1/tp of a boundary activation and all-gathers it (SC'21, §4.1).
    config.pipeline_scatter_gather = true;
    config.tp_comm_overlap = run.tp_comm_overlap && !without.tp_comm_overlap;
    config.tp_backward_overlap = run.tp_backward_overlap && !without.tp_backward_overlap;
    config.layout.zero_stage = run.distributed_optimizer && !without.distributed_optimizer ? 1 : 0;
    config.overlap_param_gather =
        config.layout.zero_stage == 1 && run.overlap_param_gather && !without.param_gather_overlap;
    config.hardware = hardware;
    config.hardware.unfused_attention = !run.flash_attention || without.flash_attention;
    return config;
}

// One of Korthikanti's runs under a variant, as a row of the same shape (DP 1, fp16).
bench::ValidationRun korthikanti_row(const PublishedRun& run, const Variant& variant) {
    return {run.model,
            "Korthikanti",
            "a100",
            run.layers,
            run.hidden,
            run.heads,
            kVocab,
            kSequence,
            run.tp,
            run.pp,
            run.virtual_stages,
            1,
            run.global_batch,
            run.microbatch_size,
            variant.recompute,
            variant.sequence_parallel,
            false,
            false,
            bench::FlopCount::none,
            variant.sequence_parallel ? run.selective_sp_s : run.full_recompute_s,
            false,
            true};  // Korthikanti et al. 2022, §6.2: the backward's all-reduce asynchronous
}

parallel::MemoryShape memory_shape(const PublishedRun& run, parallel::Recompute recompute,
                                   bool sequence_parallel) {
    parallel::MemoryShape shape;
    shape.model.layers = run.layers;
    shape.model.hidden = run.hidden;
    shape.model.heads = run.heads;
    shape.model.vocab = kVocab;
    shape.model.context = kSequence;
    shape.microbatch_size = run.microbatch_size;
    shape.layout.grid.tp = run.tp;
    shape.layout.grid.pp = run.pp;
    shape.layout.virtual_stages = run.virtual_stages;
    shape.layout.schedule = run.virtual_stages > 1 ? parallel::PipelineSchedule::interleaved
                                                   : parallel::PipelineSchedule::one_f_one_b;
    shape.layout.microbatches = run.global_batch / run.microbatch_size;
    shape.layout.recompute = recompute;
    shape.layout.sequence_parallel = sequence_parallel;
    shape.precision = parallel::Precision::megatron_mixed();
    return shape;
}

// One layer of the 22B model, as Korthikanti et al. 2022 timed it (Table 4: A100, TP 8, a
// micro-batch of 4 sequences of 2048, each variant's forward and backward with the layer's TP
// collectives), against the simulator's passes: the closed-form step's forward and backward
// (core/sim/step_estimate.h) of two layers less those of one, so the embedding, the LM head
// and the update drop out. The only measured A100 layer the validation set has.
struct LayerTiming {
    Variant variant;
    double forward_ms, backward_ms;
};
const std::vector<LayerTiming> kTable4 = {
    {{"no recompute", parallel::Recompute::none, false}, 7.7, 11.9},
    {{"sequence parallel", parallel::Recompute::none, true}, 7.2, 11.8},
    {{"full recompute", parallel::Recompute::full, false}, 7.7, 19.5},
    {{"selective", parallel::Recompute::selective, false}, 7.7, 13.2},
    {{"SP + selective", parallel::Recompute::selective, true}, 7.2, 13.1},
};

void compare_table4(const sim::HardwareAssumptions& hardware, const Ablation& without) {
    using Align = TextTable::Align;
    TextTable table({"variant", "fwd published", "fwd model", "error", "bwd published", "bwd model",
                     "error", "layer published", "layer model", "error"},
                    {Align::left, Align::right, Align::right, Align::right, Align::right,
                     Align::right, Align::right, Align::right, Align::right, Align::right});
    const PublishedRun& run = kRuns.front();
    const std::int64_t tokens = static_cast<std::int64_t>(kSequence) * run.microbatch_size;
    const std::int64_t pairs =
        static_cast<std::int64_t>(run.microbatch_size) * kSequence * (kSequence + 1) / 2;
    double sum_abs = 0;
    for (const LayerTiming& timing : kTable4) {
        std::array<double, 2> passes[2]{};  // [layers − 1][phase]
        for (int layers = 1; layers <= 2; ++layers) {
            bench::ValidationRun row = korthikanti_row(run, timing.variant);
            row.layers = layers;
            row.global_batch = row.microbatch_size;
            const sim::SimulationConfig config = config_for(row, hardware, without);
            const sim::StepEstimate estimate =
                sim::estimate_step(config, sim::config_costs(config), tokens, pairs);
            passes[layers - 1] = {estimate.phase_ns[0][0] * 1e-6, estimate.phase_ns[0][1] * 1e-6};
        }
        const double forward = passes[1][0] - passes[0][0];
        const double backward = passes[1][1] - passes[0][1];
        const double published = timing.forward_ms + timing.backward_ms;
        sum_abs += std::abs(forward + backward - published) / published;
        table.add_row(
            {timing.variant.name, format_fixed(timing.forward_ms, 1) + " ms",
             format_fixed(forward, 2) + " ms", format_relative_error(forward, timing.forward_ms),
             format_fixed(timing.backward_ms, 1) + " ms", format_fixed(backward, 2) + " ms",
             format_relative_error(backward, timing.backward_ms),
             format_fixed(published, 1) + " ms", format_fixed(forward + backward, 2) + " ms",
             format_relative_error(forward + backward, published)});
    }
    std::printf(
        "One layer of the 22B (Korthikanti et al. 2022, Table 4; A100, TP 8, 4 x 2048 "
        "tokens)\n%s",
        table.render().c_str());
    std::printf("mean |error| of the layer %.1f%% over %zu variants\n\n",
                100 * sum_abs / static_cast<double>(kTable4.size()), kTable4.size());
}

// The published step time: the source's, or its TFLOP/s per GPU through its own FLOP count.
double published_seconds(const bench::ValidationRun& run) {
    const double b = run.global_batch, s = run.sequence, l = run.layers, h = run.hidden,
                 v = run.vocab;
    const double gpus = static_cast<double>(run.tp) * run.pp * run.dp * run.cp;
    switch (run.flops) {
        case bench::FlopCount::narayanan:
            return 96 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h)) /
                   (run.figure * 1e12 * gpus);
        case bench::FlopCount::megatron:
            return 72 * b * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h)) /
                   (run.figure * 1e12 * gpus);
        case bench::FlopCount::none:
            break;
    }
    return run.figure;
}

// The validation set (validation_set.h) on each row's preset: published against simulated
// step time, the error of every row, then the mean and worst |error| and the signs, by source
// and over all.
int play_validation_set(const Ablation& without) {
    using Align = TextTable::Align;
    TextTable table(
        {"row", "source", "GPU", "GPUs", "layout", "m", "published", "simulated", "error"},
        {Align::left, Align::left, Align::left, Align::right, Align::left, Align::right,
         Align::right, Align::right, Align::right});
    struct Tally {
        int rows = 0, high = 0, within_10 = 0;
        double sum_abs = 0, max_abs = 0;
        void add(double error) {
            ++rows;
            high += error > 0;
            within_10 += std::abs(error) <= 0.10;
            sum_abs += std::abs(error);
            max_abs = std::max(max_abs, std::abs(error));
        }
    };
    std::vector<std::pair<std::string, Tally>> by_source;
    Tally all;
    for (const bench::ValidationRun& run : bench::kValidationSet) {
        auto hardware = row_hardware(run);
        if (!hardware) {
            std::fprintf(stderr, "bench_published: %s\n", hardware.error().message.c_str());
            return 1;
        }
        const sim::SimulationConfig config = config_for(run, *hardware, without);
        auto result = sim::simulate(config, nullptr);
        if (!result) {
            std::fprintf(stderr, "bench_published: %s: %s\n", run.id,
                         result.error().message.c_str());
            return 1;
        }
        const double simulated = result->mean_step_ns * 1e-9;
        const double published = published_seconds(run);
        const double error = (simulated - published) / published;
        all.add(error);
        auto found = std::find_if(by_source.begin(), by_source.end(),
                                  [&](const auto& entry) { return entry.first == run.source; });
        if (found == by_source.end()) {
            by_source.emplace_back(run.source, Tally{});
            found = by_source.end() - 1;
        }
        found->second.add(error);
        std::string layout = "tp" + std::to_string(run.tp) + " pp" + std::to_string(run.pp);
        if (run.virtual_stages > 1) {
            layout += " v" + std::to_string(run.virtual_stages);
        }
        if (run.cp > 1) {
            layout += " cp" + std::to_string(run.cp);
        }
        layout += " dp" + std::to_string(run.dp);
        table.add_row({run.id, run.source,
                       run.system != nullptr ? std::string(run.gpu) + ", " + run.system : run.gpu,
                       std::to_string(run.tp * run.pp * run.dp * run.cp), layout,
                       std::to_string(config.layout.microbatches),
                       format_fixed(published, 2) + " s", format_fixed(simulated, 2) + " s",
                       format_relative_error(simulated, published)});
    }
    std::printf("\nThe validation set (bench/sim/validation_set.h)\n%s", table.render().c_str());
    TextTable summary(
        {"source", "rows", "mean |error|", "max |error|", "within 10%", "high"},
        {Align::left, Align::right, Align::right, Align::right, Align::right, Align::right});
    by_source.emplace_back("all", all);
    for (const auto& [source, tally] : by_source) {
        summary.add_row({source, std::to_string(tally.rows),
                         format_fixed(100 * tally.sum_abs / tally.rows, 1) + "%",
                         format_fixed(100 * tally.max_abs, 1) + "%",
                         std::to_string(tally.within_10) + "/" + std::to_string(tally.rows),
                         std::to_string(tally.high) + "/" + std::to_string(tally.rows)});
    }
    std::printf("\n%s", summary.render().c_str());
    return 0;
}

// One validation row played and written as a run (sim::simulate_to_file), so that fulcrum
// analyze, report or the GUI show where its simulated step goes: its passes, collectives,
// bubbles and reduction, rank by rank. A row of thousands of GPUs writes a large file.
int write_row_run(const std::string& id, const std::string& path, const Ablation& without) {
    const auto found =
        std::find_if(std::begin(bench::kValidationSet), std::end(bench::kValidationSet),
                     [&](const bench::ValidationRun& run) { return id == run.id; });
    if (found == std::end(bench::kValidationSet)) {
        std::string ids;
        for (const bench::ValidationRun& run : bench::kValidationSet) {
            ids += std::string(ids.empty() ? "" : " ") + run.id;
        }
        std::fprintf(stderr, "bench_published: no validation row '%s'; the rows: %s\n", id.c_str(),
                     ids.c_str());
        return 2;
    }
    auto hardware = row_hardware(*found);
    if (!hardware) {
        std::fprintf(stderr, "bench_published: %s\n", hardware.error().message.c_str());
        return 2;
    }
    sim::SimulationOutput output;
    output.path = path;
    output.run_name = id;
    output.command = "bench_published --write-run " + id + " " + path;
    auto result = sim::simulate_to_file(config_for(*found, *hardware, without), output);
    if (!result) {
        std::fprintf(stderr, "bench_published: %s: %s\n", id.c_str(),
                     result.error().message.c_str());
        return 2;
    }
    std::printf(
        "bench_published: %s (%s) played into %s: %.2f s a step, published %.2f s; "
        "fulcrum analyze %s shows where it goes\n",
        id.c_str(), found->source, path.c_str(), result->mean_step_ns * 1e-9,
        published_seconds(*found), path.c_str());
    return 0;
}

// The GEMMs a validation row's layers and LM head run on one rank, as the simulator prices them
// (core/sim/stage_costs.cpp, analytic_gemm_per_token_ns): a micro-batch's tokens times each
// weight's slice on a TP rank, in tp pieces under --tp-comm-overlap. One JSON object a line,
// {row, gpu, name, tokens, out, in, pieces, and the row's shape}, for
// bench/sim/measure_gpu_kernels.py to time on a GPU in the forward's, the input gradient's and the
// weight gradient's layouts.
int write_gemm_shapes(const std::string& path) {
    std::FILE* file = std::fopen(path.c_str(), "w");
    if (file == nullptr) {
        std::fprintf(stderr, "bench_published: cannot write %s\n", path.c_str());
        return 2;
    }
    for (const bench::ValidationRun& run : bench::kValidationSet) {
        // A CP rank holds 1/cp of the micro-batch's tokens.
        const long tokens = static_cast<long>(run.sequence) * run.microbatch_size / run.cp;
        const long h = run.hidden, tp = run.tp;
        const int pieces = run.tp_comm_overlap ? run.tp : 1;
        // Llama's rows: grouped-query attention's narrower K and V, SwiGLU's gate and up
        // projections in one GEMM (core/parallel/layout.h, layer_gemm_weights).
        const parallel::ModelShape shape{.hidden = run.hidden,
                                         .heads = run.heads,
                                         .architecture = run.architecture,
                                         .kv_heads = run.kv_heads,
                                         .ffn_hidden = run.ffn_hidden};
        const long kv = parallel::kv_hidden_of(shape), f = parallel::ffn_hidden_of(shape);
        const long up = run.architecture == parallel::Architecture::llama ? 2 * f : f;
        const struct {
            const char* name;
            long out, in;
            int pieces;
        } gemms[] = {{"qkv", (h + 2 * kv) / tp, h, pieces},
                     {"proj", h, h / tp, pieces},
                     {"fc1", up / tp, h, pieces},
                     {"fc2", h, f / tp, pieces},
                     {"head", run.vocab / tp, h, 1}};
        for (const auto& gemm : gemms) {
            std::fprintf(file,
                         "{\"row\": \"%s\", \"gpu\": \"%s\", \"name\": \"%s\", "
                         "\"tokens\": %ld, \"out\": %ld, \"in\": %ld, \"pieces\": %d, "
                         "\"hidden\": %d, \"heads\": %d, \"tp\": %d, \"sequence\": %d, "
                         "\"microbatch\": %d, \"architecture\": \"%s\", \"kv_heads\": %d, "
                         "\"ffn_hidden\": %ld, \"cp\": %d}\n",
                         run.id, run.gpu, gemm.name, tokens, gemm.out, gemm.in, gemm.pieces,
                         run.hidden, run.heads, run.tp, run.sequence, run.microbatch_size,
                         parallel::architecture_name(run.architecture),
                         parallel::kv_heads_of(shape), f, run.cp);
        }
    }
    const bool written = std::fclose(file) == 0;
    std::printf("bench_published: the validation set's GEMMs in %s\n", path.c_str());
    return written ? 0 : 2;
}

// One layer of each measured row (bench/sim/measure_gpu_kernels.py --parts layers: a GPT
// layer's forward and backward on one TP rank, communication left out, on the GPU it ran on)
// against the analytic model's forward and backward pass of one layer on `preset`: stage 0 of
// two, one layer each, so no embedding or LM head; the same tokens and causal pairs; no
// recomputation, sequence parallelism as the row, each GEMM whole (the measured layer does not
// cut them for --tp-comm-overlap). Compute alone, the step's other parts aside.
int compare_measured_layers(const std::string& path, const std::string& preset) {
    std::ifstream in(path);
    const auto json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!in || json.is_discarded() || !json.contains("layers")) {
        std::fprintf(stderr,
                     "bench_published: %s is not measure_gpu_kernels.py's output with "
                     "\"layers\"\n",
                     path.c_str());
        return 2;
    }
    auto hardware = sim::hardware_preset(preset);
    if (!hardware) {
        std::fprintf(stderr, "bench_published: %s\n", hardware.error().message.c_str());
        return 2;
    }
    using Align = TextTable::Align;
    TextTable table({"row", "tp", "tokens", "h", "measured fwd", "model fwd", "error",
                     "measured bwd", "model bwd", "error"},
                    {Align::left, Align::right, Align::right, Align::right, Align::right,
                     Align::right, Align::right, Align::right, Align::right, Align::right});
    double sum_abs = 0;
    int rows = 0;
    for (const auto& layer : json["layers"]) {
        const auto find =
            std::find_if(std::begin(bench::kValidationSet), std::end(bench::kValidationSet),
                         [&](const bench::ValidationRun& run) {
                             return run.id == layer["row"].get<std::string>();
                         });
        if (find == std::end(bench::kValidationSet)) {
            continue;
        }
        bench::ValidationRun run = *find;
        run.layers = 2;
        run.pp = 2;
        run.virtual_stages = 1;
        run.recompute = parallel::Recompute::none;
        run.sequence_parallel = run.tp > 1;
        run.flash_attention = true;
        run.tp_comm_overlap = false;  // the measured layer's GEMMs are whole, not in tp pieces
        const sim::SimulationConfig config = config_for(run, *hardware);
        const analysis::CostModel costs =
            sim::analytic_cost_model(config.model, config.layout, config.hardware, config.dtype);
        const std::int64_t tokens = static_cast<std::int64_t>(run.sequence) * run.microbatch_size;
        const std::int64_t pairs =
            static_cast<std::int64_t>(run.microbatch_size) * run.sequence * (run.sequence + 1) / 2;
        double predicted[2] = {0, 0};
        for (const analysis::PassCost& pass : costs.passes) {
            if (pass.stage == 0 &&
                (pass.phase == Phase::forward || pass.phase == Phase::backward)) {
                predicted[pass.phase == Phase::forward ? 0 : 1] =
                    static_cast<double>(sim::predict_pass_ns(pass, tokens, pairs)) * 1e-6;
            }
        }
        const double measured[2] = {layer["forward_s"].get<double>() * 1e3,
                                    layer["backward_s"].get<double>() * 1e3};
        for (int phase = 0; phase < 2; ++phase) {
            sum_abs += std::abs(predicted[phase] - measured[phase]) / measured[phase];
            ++rows;
        }
        table.add_row({run.id, std::to_string(run.tp), std::to_string(tokens),
                       std::to_string(run.hidden), format_fixed(measured[0], 3) + " ms",
                       format_fixed(predicted[0], 3) + " ms",
                       format_relative_error(predicted[0], measured[0]),
                       format_fixed(measured[1], 3) + " ms", format_fixed(predicted[1], 3) + " ms",
                       format_relative_error(predicted[1], measured[1])});
    }
    std::printf("One layer's compute: measured on %s against the %s preset's analytic passes\n%s",
                json.value("device", std::string("?")).c_str(), preset.c_str(),
                table.render().c_str());
    std::printf("mean |error| %.1f%% over %d passes\n", rows > 0 ? 100 * sum_abs / rows : 0.0,
                rows);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{
        "bench_published: simulate Korthikanti et al. 2022's eight A100 runs and the validation "
        "set's 46 (A100 and H100), and compare iteration time and memory with the published "
        "figures"};
    std::string preset = "a100";
    app.add_option("--hardware", preset, "Hardware preset")->capture_default_str();
    std::vector<std::string> left_out;
    app.add_option("--without", left_out,
                   "Play the validation set without a part of the model, to see what it changes: "
                   "flash (every row on unfused attention kernels), tp-comm-overlap, "
                   "distributed-optimizer, fp32-gradients (bf16 rows' gradients reduced in bf16), "
                   "tp-backward-overlap (every backward TP collective exposed), "
                   "param-gather-overlap (the updated parameters gathered before the update, "
                   "not beside the next step's first forward)")
        ->check(CLI::IsMember({"flash", "tp-comm-overlap", "distributed-optimizer",
                               "fp32-gradients", "tp-backward-overlap", "param-gather-overlap"}));
    std::string gemm_shapes;
    app.add_option("--gemm-shapes", gemm_shapes,
                   "Write the validation set's GEMM shapes (one JSON object a line) to this file "
                   "for bench/sim/measure_gpu_kernels.py, and stop");
    std::string measured_layers;
    app.add_option("--measured-layers", measured_layers,
                   "Compare one layer's analytic forward and backward on --hardware (default "
                   "h100 here) with measure_gpu_kernels.py's measured layers in this JSON file, "
                   "and stop");
    std::vector<std::string> write_run;
    app.add_option("--write-run", write_run,
                   "ROW PATH: play one validation row (e.g. S1) on its preset, with --without "
                   "applied, and write it as a run database for fulcrum analyze, report or the "
                   "GUI; then stop")
        ->expected(2);
    CLI11_PARSE(app, argc, argv);
    if (!gemm_shapes.empty()) {
        return write_gemm_shapes(gemm_shapes);
    }
    if (!measured_layers.empty()) {
        return compare_measured_layers(measured_layers,
                                       app.count("--hardware") > 0 ? preset : "h100");
    }
    Ablation without;
    for (const std::string& part : left_out) {
        without.flash_attention |= part == "flash";
        without.tp_comm_overlap |= part == "tp-comm-overlap";
        without.distributed_optimizer |= part == "distributed-optimizer";
        without.fp32_gradients |= part == "fp32-gradients";
        without.tp_backward_overlap |= part == "tp-backward-overlap";
        without.param_gather_overlap |= part == "param-gather-overlap";
    }
    if (write_run.size() == 2) {
        return write_row_run(write_run[0], write_run[1], without);
    }
    auto hardware = sim::hardware_preset(preset);
    if (!hardware) {
        std::fprintf(stderr, "bench_published: %s\n", hardware.error().message.c_str());
        return 2;
    }
    std::printf("hardware: %s\n\n", sim::describe(*hardware).c_str());

    const std::vector<Variant> variants = {
        {"full recompute", parallel::Recompute::full, false},
        {"SP + selective", parallel::Recompute::selective, true},
    };
    using Align = TextTable::Align;
    TextTable times(
        {"model", "GPUs", "schedule", "variant", "published", "simulated", "error", "bubble"},
        {Align::left, Align::right, Align::left, Align::left, Align::right, Align::right,
         Align::right, Align::right});
    double sum_abs = 0, max_abs = 0;
    int rows = 0;
    for (const PublishedRun& run : kRuns) {
        for (const Variant& variant : variants) {
            const sim::SimulationConfig config =
                config_for(korthikanti_row(run, variant), *hardware);
            auto result = sim::simulate(config, nullptr);
            if (!result) {
                std::fprintf(stderr, "bench_published: %s %s: %s\n", run.model, variant.name,
                             result.error().message.c_str());
                return 1;
            }
            const double seconds = result->mean_step_ns * 1e-9;
            const double published =
                variant.sequence_parallel ? run.selective_sp_s : run.full_recompute_s;
            const double error = std::abs(seconds - published) / published;
            sum_abs += error;
            max_abs = std::max(max_abs, error);
            ++rows;
            std::string schedule = parallel::schedule_name(config.layout.schedule);
            if (config.layout.virtual_stages > 1) {
                schedule += " v" + std::to_string(config.layout.virtual_stages);
            }
            times.add_row(
                {run.model, std::to_string(run.tp * run.pp),
                 "tp" + std::to_string(run.tp) + " pp" + std::to_string(run.pp) + " " + schedule,
                 variant.name, format_fixed(published, 2) + " s", format_fixed(seconds, 2) + " s",
                 format_relative_error(seconds, published),
                 format_fixed(100 * result->mean_bubble_fraction, 1) + "%"});
        }
    }
    std::printf("Iteration time\n%s", times.render().c_str());
    std::printf("mean |error| %.1f%%, max %.1f%% over %d runs\n\n", 100 * sum_abs / rows,
                100 * max_abs, rows);

    TextTable memory(
        {"model", "state published", "state model", "error", "act. none published",
         "act. none model", "error", "act. SP+sel published", "act. SP+sel model", "error"},
        {Align::left, Align::right, Align::right, Align::right, Align::right, Align::right,
         Align::right, Align::right, Align::right, Align::right});
    for (const PublishedRun& run : kRuns) {
        // The first stage: it holds the embedding and the most micro-batches in flight.
        const parallel::StageMemory none =
            parallel::stage_memory(memory_shape(run, parallel::Recompute::none, false), 0);
        const parallel::StageMemory selective =
            parallel::stage_memory(memory_shape(run, parallel::Recompute::selective, true), 0);
        const double state = none.model_state_bytes() / kGiB;
        const double act_none = none.activations_bytes / kGiB;
        const double act_selective = selective.activations_bytes / kGiB;
        memory.add_row({run.model, format_fixed(run.model_state_gib, 1), format_fixed(state, 1),
                        format_relative_error(state, run.model_state_gib),
                        format_fixed(run.activations_none_gib, 1), format_fixed(act_none, 1),
                        format_relative_error(act_none, run.activations_none_gib),
                        format_fixed(run.activations_selective_sp_gib, 1),
                        format_fixed(act_selective, 1),
                        format_relative_error(act_selective, run.activations_selective_sp_gib)});
    }
    std::printf("Memory per GPU, GiB (first pipeline stage; core/parallel/memory_model)\n%s\n",
                memory.render().c_str());
    compare_table4(*hardware, without);
    return play_validation_set(without);
}
