// The one table of a model's and a layout's flags, from which fulcrum-train, `fulcrum simulate`
// and `fulcrum plan` register them: the same names, help and defaults in all three (the
// defaults are the bound values'). Header-only and for command lines alone: core's libraries
// do not use it, so they need no CLI11.
//
// Choices the tools parse themselves (--schedule, --recompute, --stage-layers) are bound as
// text, so each tool keeps its own words for a bad value; a tool adds checks of its own to the
// options these return (CLI::App::get_option).
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <string>
#include <string_view>

#include "core/parallel/grid.h"
#include "core/parallel/layout.h"
#include "core/parallel/placement.h"

namespace fulcrum::parallel {

namespace flag_help {
inline constexpr const char* kContext =
    "Tokens of one fixed-length micro-batch; no document is longer";
inline constexpr const char* kSchedule =
    "Pipeline schedule: gpipe, 1f1b, interleaved (1F1B over --virtual-stages model chunks per "
    "stage; --micro-batches a multiple of --pp) or zb-h1 (Zero Bubble: backward split into "
    "input- and weight-gradient passes)";
inline constexpr const char* kVirtualStages =
    "Model chunks per pipeline stage for --schedule interleaved (at least 2)";
inline constexpr const char* kStageLayers =
    "Layers of each pipeline stage, e.g. 3,5, summing to --layers (the first stage also runs the "
    "embedding and the last the head, so equal counts are not equal work); interleaved: one "
    "count per model chunk, --pp x --virtual-stages of them, stage s's chunk k being the "
    "(k*pp + s)-th (default: equal, the first layers mod pp stages one more)";
inline constexpr const char* kRecompute =
    "Activation recomputation: none, selective (the attention core re-run in backward) or full "
    "(only each layer's input kept, its forward re-run)";
inline constexpr const char* kSequenceParallel =
    "With --tp > 1: LayerNorm and residual activations split over the TP ranks by token; TP's "
    "all-reduces become reduce-scatters and all-gathers, pipeline sends carry a TP rank's rows";
}  // namespace flag_help

namespace detail {
inline CLI::Option* in_group(CLI::Option* option, std::string_view group) {
    if (!group.empty()) {
        option->group(std::string(group));
    }
    return option;
}
}  // namespace detail

// --layers, --hidden, --heads, --context, and where the tool takes them (fulcrum-train trains
// GPT on bytes) --vocab, --architecture, --kv-heads and --ffn-hidden.
inline void add_model_flags(CLI::App& app, ModelShape& model, bool vocab,
                            std::string_view group = {}) {
    using detail::in_group;
    in_group(app.add_option("--layers", model.layers)->capture_default_str(), group);
    in_group(app.add_option("--hidden", model.hidden)->capture_default_str(), group);
    in_group(app.add_option("--heads", model.heads)->capture_default_str(), group);
    in_group(app.add_option("--context", model.context, flag_help::kContext)->capture_default_str(),
             group);
    if (vocab) {
        in_group(app.add_option("--vocab", model.vocab)->capture_default_str(), group);
        // Beyond fulcrum-train's GPT: the shapes of the models the simulator and planner price.
        const std::map<std::string, Architecture> architectures = {{"gpt", Architecture::gpt},
                                                                   {"llama", Architecture::llama}};
        in_group(app.add_option("--architecture", model.architecture,
                                "The layer's family: gpt (LayerNorm, biases, learned positions, "
                                "GeLU MLP, tied LM head) or llama (RMSNorm, no biases, rotary "
                                "positions, SwiGLU MLP of three matrices, untied LM head)")
                     ->transform(CLI::CheckedTransformer(architectures, CLI::ignore_case))
                     ->default_str("gpt"),
                 group);
        in_group(app.add_option("--kv-heads", model.kv_heads,
                                "Key-value heads of grouped-query attention (default: --heads)"),
                 group);
        in_group(app.add_option("--ffn-hidden", model.ffn_hidden,
                                "The MLP's inner width (default: 4 x --hidden)"),
                 group);
    }
}

// --dp, --tp, --pp, --cp.
inline void add_grid_flags(CLI::App& app, GridShape& grid, std::string_view group = {}) {
    using detail::in_group;
    in_group(app.add_option("--dp", grid.dp, "Data-parallel degree")->capture_default_str(), group);
    in_group(app.add_option("--tp", grid.tp, "Tensor-parallel degree")->capture_default_str(),
             group);
    in_group(
        app.add_option("--pp", grid.pp, "Pipeline-parallel degree (stages)")->capture_default_str(),
        group);
    in_group(app.add_option("--cp", grid.cp, "Context-parallel degree")->capture_default_str(),
             group);
}

// Where a tool keeps the layout flags that are not the grid's.
struct LayoutFlagTargets {
    int& microbatches;
    std::string& schedule;
    int& virtual_stages;
    std::string& stage_layers;
    std::string& recompute;
    bool& sequence_parallel;
};

// --micro-batches, --schedule, --virtual-stages, --stage-layers, --recompute,
// --sequence-parallel.
inline void add_pipeline_flags(CLI::App& app, const LayoutFlagTargets& to,
                               std::string_view group = {}) {
    using detail::in_group;
    in_group(
        app.add_option("--micro-batches", to.microbatches, "Micro-batches per DP replica and step")
            ->capture_default_str(),
        group);
    in_group(app.add_option("--schedule", to.schedule, flag_help::kSchedule)->capture_default_str(),
             group);
    in_group(app.add_option("--virtual-stages", to.virtual_stages, flag_help::kVirtualStages)
                 ->capture_default_str()
                 ->check(CLI::PositiveNumber),
             group);
    in_group(app.add_option("--stage-layers", to.stage_layers, flag_help::kStageLayers), group);
    in_group(
        app.add_option("--recompute", to.recompute, flag_help::kRecompute)->capture_default_str(),
        group);
    in_group(
        app.add_flag("--sequence-parallel", to.sequence_parallel, flag_help::kSequenceParallel),
        group);
}

// --cp-impl: how context parallelism splits attention (fulcrum-train, simulate, plan's runs).
inline void add_cp_impl_flag(CLI::App& app, ContextParallelism& impl, std::string_view group = {}) {
    detail::in_group(app.add_option_function<std::string>(
                            "--cp-impl",
                            [&impl](const std::string& text) {
                                auto parsed = parse_context_parallelism(text);
                                if (!parsed) {
                                    throw CLI::ValidationError(parsed.error().message);
                                }
                                impl = *parsed;
                            },
                            "How context parallelism splits attention: all-gather (each "
                            "rank's queries meet every rank's keys and values) or ulysses "
                            "(DeepSpeed-Ulysses: all-to-all to whole sequences of heads/cp "
                            "heads and back; --tp x --cp must divide --heads)")
                         ->default_str("all-gather"),
                     group);
}

// The memory techniques of FPDT's comparison (Yao et al. 2024) beyond the pipeline's:
// --cp-impl, --zero, --offload-checkpoints, and Megatron-LM's name for ZeRO-1,
// --distributed-optimizer. For the simulator and the planner (fulcrum-train has its own --zero,
// which stops at 2, and --cp-impl).
inline void add_memory_technique_flags(CLI::App& app, Layout& layout, std::string_view group = {}) {
    using detail::in_group;
    add_cp_impl_flag(app, layout.context_parallelism, group);
    CLI::Option* zero =
        app.add_option("--zero", layout.zero_stage,
                       "ZeRO stage over the DP x CP ranks: 1 shards the optimizer state, 2 also "
                       "the gradients (reduce-scattered), 3 also the parameters (all-gathered "
                       "layer by layer in forward and backward)")
            ->capture_default_str()
            ->check(CLI::Range(0, 3));
    in_group(zero, group);
    in_group(app.add_flag_callback(
                    "--distributed-optimizer", [&layout] { layout.zero_stage = 1; },
                    "Megatron-LM's --use-distributed-optimizer: --zero 1")
                 ->excludes(zero),
             group);
    in_group(app.add_flag("--offload-checkpoints", layout.offload_checkpoints,
                          "With --recompute full: each layer's checkpointed input copied to host "
                          "memory after its forward and back before its backward (FPDT)"),
             group);
}

// --rank-order into `order` (placement.h), refused in parse_rank_order's words. `default_note`
// says where the default comes from besides Megatron-LM's order.
inline void add_rank_order_flag(CLI::App& app, RankOrder& order, std::string_view default_note = {},
                                std::string_view group = {}) {
    detail::in_group(
        app.add_option_function<std::string>(
            "--rank-order",
            [&order](const std::string& text) {
                auto parsed = parse_rank_order(text);
                if (!parsed) {
                    throw CLI::ValidationError(parsed.error().message);
                }
                order = *parsed;
            },
            "How the framework numbers ranks, " + std::string(kRankOrderHelp) +
                "; with a described network (--hardware) it decides which groups leave a node "
                "(default: tp-cp-dp-pp" +
                std::string(default_note) + ")"),
        group);
}

}  // namespace fulcrum::parallel
