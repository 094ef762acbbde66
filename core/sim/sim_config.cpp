#include "core/sim/sim_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <utility>

#include "core/balance/lengths.h"
#include "core/balance/step_planner.h"
#include "core/parallel/memory_model.h"

#include "core/parallel/run_config.h"

namespace fulcrum::sim {
namespace {

Error invalid(std::string message) {
    return Error{ErrorCode::invalid_input, std::move(message)};
}

std::string shortest(double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3g", value);
    return text;
}

}  // namespace

Result<std::vector<std::int64_t>> training_lengths(const SimulationConfig& config) {
    if (!config.document_lengths.empty()) {
        return config.document_lengths;
    }
    auto distribution = balance::parse_length_spec(config.lengths);
    if (!distribution) {
        return distribution.error();
    }
    auto count = static_cast<std::size_t>(config.documents);
    if (const auto* file = std::get_if<balance::LengthFile>(&*distribution)) {
        auto lengths = balance::read_length_file(file->path);
        if (!lengths) {
            return lengths.error();
        }
        for (std::size_t line = 0; line < lengths->size(); ++line) {
            if ((*lengths)[line] > config.model.context) {
                return invalid("'" + file->path + "' asks for a document of " +
                               std::to_string((*lengths)[line]) + " tokens (entry " +
                               std::to_string(line + 1) +
                               "), longer than any micro-batch can hold (--context " +
                               std::to_string(config.model.context) +
                               "); raise --context or shorten the entry");
            }
        }
        count = lengths->size();
    }
    return balance::sample_lengths(*distribution, count, config.seed, config.model.context);
}

std::int64_t wlb_max_tokens_from_memory(const SimulationConfig& config) {
    parallel::MemoryShape shape = parallel::memory_shape(config.model, config.layout);
    shape.flash_attention = true;
    shape.layout.zero_stage = std::max(shape.layout.zero_stage, 1);
    const double budget = config.gpu_memory_gib * 1024.0 * 1024.0 * 1024.0;
    const std::int64_t context = config.model.context;
    std::int64_t best = context;
    for (std::int64_t eighths = 9; eighths <= 64; ++eighths) {
        const std::int64_t tokens = context * eighths / 8;
        shape.model.context = static_cast<int>(std::min<std::int64_t>(tokens, 1 << 30));
        if (parallel::peak_stage_memory(shape).total_bytes() > budget) {
            break;
        }
        best = tokens;
    }
    return best;
}

balance::PlannerOptions planner_options(const SimulationConfig& config) {
    balance::PlannerOptions options;
    options.packing.balancer = config.balancer;
    options.packing.microbatches = config.layout.microbatches;
    options.packing.capacity = config.model.context;
    options.packing.ilp_time_limit_s = config.ilp_time_limit_s;
    options.dp = config.layout.grid.dp;
    options.cp = config.layout.grid.cp;
    options.sharding = config.sharding;
    options.cp_chunk = config.attention_chunk;
    options.seed = config.seed;
    options.ilp_window = config.ilp_window;
    options.epochs = config.epochs;
    options.packing.cost = config.packing_cost
                               ? *config.packing_cost
                               : balance::PackingCost::from_model(
                                     config.model.layers, config.model.hidden, config.model.vocab);
    options.packing.wlb_max_tokens =
        config.wlb_max_tokens > 0 ? config.wlb_max_tokens : wlb_max_tokens_from_memory(config);
    options.packing.wlb_max_delay = config.wlb_max_delay;
    options.packing.wlb_thresholds = config.wlb_thresholds;
    options.tune_wlb_thresholds = true;
    if (auto kernel = balance::attention_kernel_model(config.attention_kernel)) {
        options.attention_kernel = *kernel;
    }
    return options;
}

Status validate(const SimulationConfig& config) {
    const ModelShape& model = config.model;
    std::vector<std::string> unset;
    if (model.layers < 1) {
        unset.push_back("--layers");
    }
    if (model.hidden < 1) {
        unset.push_back("--hidden");
    }
    if (model.context < 1) {
        unset.push_back("--context");
    }
    if (config.layout.microbatches < 1) {
        unset.push_back("--micro-batches");
    }
    const bool no_lengths = config.lengths.empty() && config.document_lengths.empty();
    if (!unset.empty() || no_lengths) {
        // Given below 1, or left unset by a calibration run that does not record them: every
        // one named at once.
        std::string list;
        for (const auto& option : unset) {
            list += (list.empty() ? "" : ", ") + option;
        }
        std::string message = list.empty() ? "" : list + " must be at least 1";
        if (no_lengths) {
            message += std::string(list.empty() ? "" : "; ") +
                       "the simulation needs --lengths (a run with neither a length spec nor a "
                       "workload table: e.g. --lengths long-tail:context=N or file:PATH)";
        }
        return invalid(message +
                       "; a calibration run that does not record a setting leaves it unset: "
                       "give it on the command line");
    }
    if (config.steps < 1) {
        return invalid("--steps must be at least 1");
    }
    if (config.epochs < 0) {
        return invalid("--epochs must be at least 1");
    }
    if (config.wlb_max_tokens != 0 && config.wlb_max_tokens < config.model.context) {
        return invalid("--wlb-max-tokens " + std::to_string(config.wlb_max_tokens) +
                       " is less than --context " + std::to_string(config.model.context) +
                       "; S_max is at least the fixed micro-batch's tokens");
    }
    if (config.wlb_max_delay && *config.wlb_max_delay < 0) {
        return invalid("--wlb-max-delay must be at least 0 steps");
    }
    if (auto kernel = balance::attention_kernel_model(config.attention_kernel); !kernel) {
        return invalid("--attention-kernel: " + kernel.error().message);
    }
    if (config.tp_comm_overlap && config.layout.grid.tp > 1 && !config.layout.sequence_parallel) {
        return invalid(
            "--tp-comm-overlap overlaps sequence parallelism's all-gathers and reduce-scatters "
            "with the GEMMs beside them; add --sequence-parallel (as Megatron-LM requires)");
    }
    if (config.overlap_param_gather && config.layout.zero_stage != 1) {
        return invalid(
            "--overlap-param-gather overlaps the distributed optimizer's all-gather of the "
            "updated parameters with the next step's forward; add --distributed-optimizer "
            "(--zero 1), as Megatron-LM requires");
    }
    if (!(config.gpu_memory_gib > 0)) {
        return invalid("--gpu-memory-gib must be positive");
    }
    if (config.attention_chunk < 0 || (config.offload && config.attention_chunk == 0)) {
        return invalid(
            "--offload on sends chunks of Q, K and V to host memory: give --attention-chunk N "
            "(tokens a chunk, e.g. 65536)");
    }
    if (model.context < 2) {
        return invalid("--context must be at least 2");
    }
    if (auto status = parallel::check_layout(config.layout, model); !status) {
        return status;
    }
    if (model.vocab < 1) {
        return invalid("--vocab must be at least 1");
    }
    if (config.document_lengths.empty() && config.documents < 1) {
        return invalid("--documents must be at least 1");
    }
    if (config.ilp_window < 1 || config.ilp_window > 64) {
        return invalid("--ilp-window must be between 1 and 64");
    }
    if (config.ilp_time_limit_s <= 0) {
        return invalid("--ilp-time-limit must be positive");
    }
    const HardwareAssumptions& hardware = config.hardware;
    // Checked with a given model too: what it lacks comes from the analytic one.
    if (hardware.tflops <= 0 || hardware.nvlink_gbs <= 0 || hardware.network_gbs <= 0 ||
        hardware.hbm_gbs <= 0 || hardware.collective_latency_us < 0 ||
        hardware.p2p_latency_us < 0 || hardware.layer_overhead_us < 0 ||
        hardware.gpus_per_node < 1 || hardware.host_link_gbs <= 0) {
        return invalid("--tflops and the bandwidths must be positive, the latencies not negative");
    }
    return {};
}

std::string run_config_json(const SimulationConfig& config, const std::string& source) {
    const bool given_lengths = !config.document_lengths.empty();
    RunConfig run;
    run.model = config.model;
    run.layout = config.layout;
    run.overlap_grad_reduce = config.overlap_grad_reduce;
    run.overlap_param_gather = config.overlap_param_gather;
    run.packed_attention = config.packed_attention;
    run.attention_chunk = config.attention_chunk;
    run.offload = config.offload;
    run.tp_comm_overlap = config.tp_comm_overlap;
    run.attention_backend = config.hardware.unfused_attention ? "unfused" : "flash";
    run.dtype = dtype_name(config.dtype);
    if (config.grad_reduce_dtype) {
        run.grad_reduce_dtype = dtype_name(*config.grad_reduce_dtype);
    }
    run.balancer = balance::balancer_name(config.balancer);
    run.cp_shard = balance::cp_sharding_name(config.sharding);
    run.steps = config.epochs > 0 ? 0 : config.steps;
    run.epochs = config.epochs;
    run.seed = config.seed;
    run.ilp_window = config.ilp_window;
    run.wlb_max_tokens =
        config.wlb_max_tokens > 0 ? config.wlb_max_tokens : wlb_max_tokens_from_memory(config);
    run.wlb_max_delay = config.wlb_max_delay ? *config.wlb_max_delay : -1;
    run.wlb_thresholds = balance::wlb_thresholds_text(config.wlb_thresholds);
    run.packing_cost = config.packing_cost_source;
    run.attention_kernel = config.attention_kernel;
    run.documents = given_lengths ? static_cast<std::int64_t>(config.document_lengths.size())
                                  : config.documents;
    run.lengths = given_lengths ? "" : config.lengths;
    run.data = given_lengths ? std::to_string(run.documents) + " given document lengths"
                             : std::to_string(run.documents) + " synthetic documents, lengths " +
                                   config.lengths;
    run.backend = "simulated";
    // The cores the simulated ranks shared, where they outnumbered them.
    if (core_sharing(config).shared()) {
        run.host_cores = config.host_cores.value_or(config.cost_origin.host_cores);
    }
    run.simulated = true;
    run.cost_model = source;
    if (config.hot_switch) {
        run.hot_switch = parallel::hot_switch_spec_string(*config.hot_switch);
    }
    return fulcrum::run_config_json(run);
}

CoreSharing core_sharing(const SimulationConfig& config) {
    const int cores = config.host_cores.value_or(config.cost_origin.host_cores);
    const int world = config.layout.grid.world();
    const int per_host = config.ranks_per_host > 0 ? std::min(config.ranks_per_host, world) : world;
    if (cores <= 0 || per_host <= cores) {
        return {};
    }
    const int hosts = (world + per_host - 1) / per_host;
    return {static_cast<double>(cores) * hosts,
            static_cast<double>(per_host) / static_cast<double>(cores)};
}

bool gathers_parameters_at_step_start(const SimulationConfig& config) {
    return config.overlap_param_gather && config.layout.zero_stage == 1 &&
           config.layout.grid.dp * config.layout.grid.cp > 1 && !config.accumulate_gradients;
}

int gemm_chunks(const SimulationConfig& config) {
    return config.tp_comm_overlap && config.layout.sequence_parallel ? config.layout.grid.tp : 1;
}

StageCosts config_costs(const SimulationConfig& config) {
    StageCosts costs = resolve_costs(config.cost_model ? &*config.cost_model : nullptr,
                                     config.cost_origin, config.model, config.layout,
                                     config.hardware, config.dtype, gemm_chunks(config));
    // Under ZeRO (Megatron-LM's distributed optimizer is stage 1) a rank updates its 1/(dp·cp)
    // of the parameters; the reduce-scatter before and the all-gather after move a ring
    // all-reduce's bytes, priced as the all-reduce they replace.
    if (config.layout.zero_stage >= 1) {
        costs.optimizer_ns /= std::max(config.layout.grid.dp * config.layout.grid.cp, 1);
    }
    // ZeRO-3 keeps the parameters sharded after the update, and the distributed optimizer that
    // gathers them at the next step's start (gathers_parameters_at_step_start) leaves none to
    // gather: the step's reduction is the gradients' reduce-scatter alone.
    if (config.layout.zero_stage >= 3 || gathers_parameters_at_step_start(config)) {
        costs.dp_all_reduce = costs.zero_reduce_scatter;
    }
    // The passes share cores in the replay; the gradients' reduction and the optimizer run on
    // every rank at once, each at its share of a core (docs/simulate.md, "Ranks that share
    // cores").
    if (const CoreSharing sharing = core_sharing(config); sharing.shared()) {
        const double x = sharing.oversubscription;
        costs.optimizer_ns *= x;
        costs.notes.push_back("ranks share cores: " + std::to_string(config.layout.grid.world()) +
                              " ranks on " + std::to_string(std::llround(sharing.cores)) +
                              " cores; passes compute at min(1, cores / computing ranks) of a "
                              "core, the optimizer " +
                              shortest(x) + "× as long; collectives and transfers as fitted");
    }
    return costs;
}

}  // namespace fulcrum::sim
