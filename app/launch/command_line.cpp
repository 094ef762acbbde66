#include "app/launch/command_line.h"

#include <algorithm>
#include <cstdio>
#include <string_view>

#include "core/balance/cp_shard.h"
#include "core/balance/packing.h"
#include "core/parallel/hot_switch_spec.h"
#include "core/sim/simulator.h"

namespace fulcrum::launch {
namespace {

using Words = std::vector<std::string>;

// "4,8,8,4", as fulcrum-train's list options take them.
template <typename Integer>
std::string join(const std::vector<Integer>& values) {
    std::string text;
    for (Integer value : values) {
        text += (text.empty() ? "" : ",") + std::to_string(value);
    }
    return text;
}

std::string general(double value) {
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%g", value);
    return buffer;
}

void append(Words& words, std::initializer_list<std::string> more) {
    words.insert(words.end(), more);
}

// The packing's flags, the same for both command lines. wlb's S_max and thresholds are given,
// so that simulate --calibrate does not take the run's own.
void append_packing(Words& words, const plan::Candidate& c, const sim::SimulationConfig& config) {
    append(words, {"--balancer", balance::balancer_name(c.balancer), "--cp-shard",
                   balance::cp_sharding_name(c.sharding)});
    if (c.balancer == balance::Balancer::wlb) {
        append(words,
               {"--wlb-max-tokens", std::to_string(sim::wlb_max_tokens_from_memory(config))});
        if (c.wlb_thresholds) {
            append(words, {"--wlb-thresholds",
                           c.wlb_thresholds->empty() ? "none" : join(*c.wlb_thresholds)});
        }
    }
}

void append_model(Words& words, const sim::ModelShape& model) {
    append(words,
           {"--layers", std::to_string(model.layers), "--hidden", std::to_string(model.hidden),
            "--heads", std::to_string(model.heads), "--context", std::to_string(model.context)});
}

// The shape fulcrum-train does not take: simulate's and plan's.
void append_model_beyond_gpt(Words& words, const sim::ModelShape& model) {
    if (model.architecture != parallel::Architecture::gpt) {
        append(words, {"--architecture", parallel::architecture_name(model.architecture)});
    }
    if (model.kv_heads > 0 && model.kv_heads != model.heads) {
        append(words, {"--kv-heads", std::to_string(model.kv_heads)});
    }
    if (model.ffn_hidden > 0 && model.ffn_hidden != 4 * model.hidden) {
        append(words, {"--ffn-hidden", std::to_string(model.ffn_hidden)});
    }
}

void append_documents(Words& words, const plan::PlanRequest& request,
                      const sim::SimulationConfig& config) {
    append(words,
           {"--lengths", request.lengths, "--documents", std::to_string(config.documents), "--seed",
            std::to_string(request.seed), "--steps", std::to_string(request.steps)});
}

// Drops OPTION and, when it takes one, its value.
void drop(Words& words, std::string_view option, bool takes_value) {
    for (auto at = words.begin(); at != words.end();) {
        if (*at != option) {
            ++at;
            continue;
        }
        const auto end = takes_value && at + 1 != words.end() ? at + 2 : at + 1;
        at = words.erase(at, end);
    }
}

// The static best's command line with the hot-switch spec in place of what it cannot take
// (stage layers, virtual stages, interleaving; for fulcrum-train also the degrees, which
// come from the spec, and the overlapped reduction, which it does not do).
Words hot_switch_words(Words words, const plan::HotSwitchChoice& choice, bool train) {
    for (const char* option : {"--stage-layers", "--virtual-stages", "--recompute"}) {
        drop(words, option, true);
    }
    drop(words, "--sequence-parallel", false);
    append(words, {"--recompute", parallel::recompute_name(choice.recompute)});
    if (choice.sequence_parallel) {
        words.emplace_back("--sequence-parallel");
    }
    for (std::size_t i = 0; i + 1 < words.size(); ++i) {
        if (words[i] == "--schedule" && words[i + 1] == "interleaved") {
            words[i + 1] = "1f1b";
        }
    }
    if (train) {
        for (const char* option : {"--dp", "--tp", "--pp", "--cp", "--overlap-grad-reduce"}) {
            drop(words, option, true);
        }
        append(words, {"--overlap-grad-reduce", "off"});
    }
    append(words, {"--hot-switch", parallel::hot_switch_spec_string(choice.spec)});
    return words;
}

}  // namespace

std::string shell_quote(const std::vector<std::string>& command) {
    std::string text;
    for (const auto& word : command) {
        if (!text.empty()) {
            text += ' ';
        }
        const bool plain =
            !word.empty() && word.find_first_not_of(
                                 "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                 "0123456789-_./=:,+@%") == std::string::npos;
        if (plain) {
            text += word;
            continue;
        }
        text += '\'';
        for (char c : word) {
            if (c == '\'') {
                text += "'\\''";
            } else {
                text += c;
            }
        }
        text += '\'';
    }
    return text;
}

std::vector<std::string> layout_arguments(const plan::Candidate& c) {
    Words words = {"--dp",
                   std::to_string(c.layout.grid.dp),
                   "--tp",
                   std::to_string(c.layout.grid.tp),
                   "--pp",
                   std::to_string(c.layout.grid.pp),
                   "--cp",
                   std::to_string(c.layout.grid.cp),
                   "--micro-batches",
                   std::to_string(c.layout.microbatches),
                   "--schedule",
                   parallel::schedule_name(c.layout.schedule)};
    if (c.layout.virtual_stages > 1) {
        append(words, {"--virtual-stages", std::to_string(c.layout.virtual_stages)});
    }
    if (!c.layout.stage_layers.empty()) {
        append(words, {"--stage-layers", join(c.layout.stage_layers)});
    }
    append(words, {"--recompute", parallel::recompute_name(c.layout.recompute)});
    if (c.layout.sequence_parallel) {
        words.emplace_back("--sequence-parallel");
    }
    return words;
}

namespace {

// train_arguments and simulate_arguments with the candidate's simulation config already made
// (it merges calibrations and sizes wlb's S_max from memory: made once for both lines).
Words train_words(const plan::PlanRequest& request, const plan::Candidate& c,
                  const sim::SimulationConfig& config) {
    Words words = {"mpirun", "-np", std::to_string(c.layout.grid.world()), "fulcrum-train"};
    const Words layout = layout_arguments(c);
    words.insert(words.end(), layout.begin(), layout.end());
    append_packing(words, c, config);
    append_model(words, request.model);
    append_documents(words, request, config);
    // ZeRO-2 and -3 reduce-scatter after the passes: fulcrum-train takes no overlapped
    // reduction.
    const bool overlap = request.overlap_grad_reduce && c.layout.zero_stage < 2;
    append(words, {"--overlap-grad-reduce", overlap ? "on" : "off"});
    if (c.layout.zero_stage > 0) {
        append(words, {"--zero", std::to_string(c.layout.zero_stage)});
    }
    if (c.layout.context_parallelism == parallel::ContextParallelism::ulysses) {
        append(words, {"--cp-impl", "ulysses"});
    }
    if (c.layout.offload_checkpoints) {
        words.emplace_back("--offload-checkpoints");
    }
    if (c.offload) {
        append(words, {"--attention-chunk", std::to_string(c.attention_chunk), "--offload", "on"});
    }
    return words;
}

Words simulate_words(const plan::PlanRequest& request, const plan::Candidate& c,
                     const sim::SimulationConfig& config) {
    const sim::HardwareAssumptions& hw = request.hardware;
    Words words = {"fulcrum", "simulate"};
    for (const std::string& run : request.calibration_runs) {
        append(words, {"--calibrate", run});
    }
    const bool fitted = !request.calibration_runs.empty() || !request.cost_model_file.empty();
    if (!request.cost_model_file.empty()) {
        append(words, {"--cost-model", request.cost_model_file});
    }
    // With fits, the analytic model prices only what they lack: the same system as here.
    if (!hw.preset.empty()) {
        append(words, {"--hardware", hw.preset});
    } else if (!fitted) {
        append(words, {"--tflops", general(hw.tflops), "--nvlink-gbs", general(hw.nvlink_gbs),
                       "--network-gbs", general(hw.network_gbs), "--latency-us",
                       general(hw.collective_latency_us)});
    }
    append(words, {"--gpus-per-node", std::to_string(request.gpus_per_node)});
    append_model(words, request.model);
    append(words, {"--vocab", std::to_string(request.model.vocab)});
    append_model_beyond_gpt(words, request.model);
    const Words layout = layout_arguments(c);
    words.insert(words.end(), layout.begin(), layout.end());
    if (c.layout.rank_order != parallel::kMegatronOrder) {
        append(words, {"--rank-order", parallel::rank_order_name(c.layout.rank_order)});
    }
    append(words, {"--dtype", sim::dtype_name(request.dtype), "--overlap-grad-reduce",
                   request.overlap_grad_reduce ? "on" : "off"});
    if (request.grad_reduce_dtype) {
        append(words, {"--grad-reduce-dtype", sim::dtype_name(*request.grad_reduce_dtype)});
    }
    if (request.tp_backward_overlap) {
        append(words, {"--tp-backward-overlap"});
    }
    if (request.packed_attention) {
        append(words, {"--attention-mask", "packed"});
    }
    if (c.layout.zero_stage == 1) {
        append(words, {"--distributed-optimizer"});
        if (request.overlap_param_gather) {
            append(words, {"--overlap-param-gather"});
        }
    } else if (c.layout.zero_stage > 1) {
        append(words, {"--zero", std::to_string(c.layout.zero_stage)});
    }
    if (c.layout.context_parallelism != parallel::ContextParallelism::all_gather) {
        append(words,
               {"--cp-impl", parallel::context_parallelism_name(c.layout.context_parallelism)});
    }
    if (c.layout.offload_checkpoints) {
        append(words, {"--offload-checkpoints"});
    }
    if (c.offload) {
        append(words, {"--attention-chunk", std::to_string(c.attention_chunk), "--offload", "on"});
    }
    if (config.hardware.unfused_attention) {
        append(words, {"--attention-backend", "unfused"});
    }
    append_packing(words, c, config);
    if (!request.calibration_runs.empty()) {
        append(words, {"--attention-kernel", config.attention_kernel});
    }
    append(words, {"--gpu-memory-gib", general(request.gpu_memory_gib)});
    append_documents(words, request, config);
    return words;
}

}  // namespace

std::vector<std::string> train_arguments(const plan::PlanRequest& request,
                                         const plan::Candidate& c) {
    return train_words(request, c, plan::simulation_config(request, c));
}

std::vector<std::string> simulate_arguments(const plan::PlanRequest& request,
                                            const plan::Candidate& c) {
    return simulate_words(request, c, plan::simulation_config(request, c));
}

// What fulcrum-train cannot run of a candidate (a model or memory technique the engine has
// not got yet); empty when it runs it all.
std::string beyond_the_engine(const plan::PlanRequest& request, const plan::Candidate& c) {
    std::vector<std::string> missing;
    if (request.model.architecture != parallel::Architecture::gpt || request.model.kv_heads > 0 ||
        request.model.ffn_hidden > 0) {
        missing.push_back("Llama shapes");
    }
    if (c.layout.offload_checkpoints && parallel::splits_backward(c.layout.schedule)) {
        missing.push_back("offloaded checkpoints under zb-h1");
    }
    std::string text;
    for (std::size_t i = 0; i < missing.size(); ++i) {
        text += (i == 0 ? "" : i + 1 == missing.size() ? " or " : ", ") + missing[i];
    }
    return text;
}

void write_commands(const plan::PlanRequest& request, plan::PlanResult& result) {
    for (plan::Candidate& c : result.candidates) {
        if (c.status == plan::CandidateStatus::ranked) {
            const sim::SimulationConfig config = plan::simulation_config(request, c);
            const std::string missing = beyond_the_engine(request, c);
            c.train_command = missing.empty()
                                  ? shell_quote(train_words(request, c, config))
                                  : "# fulcrum-train has no " + missing + " yet; simulate it:";
            c.simulate_command = shell_quote(simulate_words(request, c, config));
        }
    }
}

void write_commands(const plan::PlanRequest& request, const plan::PlanResult& result,
                    std::vector<plan::HotSwitchSearch>& searches) {
    for (plan::HotSwitchSearch& search : searches) {
        const plan::Candidate& best = result.candidates[search.static_candidate];
        if (search.found()) {
            search.simulate_command = shell_quote(
                hot_switch_words(simulate_arguments(request, best), search.best(), false));
        }
        if (const std::string missing = beyond_the_engine(request, best); !missing.empty()) {
            search.train_command = "# fulcrum-train has no " + missing + " yet";
        } else if (const plan::HotSwitchChoice* runnable = search.best_runnable()) {
            search.train_command =
                shell_quote(hot_switch_words(train_arguments(request, best), *runnable, true));
        }
    }
}

}  // namespace fulcrum::launch
