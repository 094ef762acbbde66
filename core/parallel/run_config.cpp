#include "core/parallel/run_config.h"

#include <algorithm>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "core/parallel/recompute.h"
#include "core/parallel/schedule.h"

namespace fulcrum {

namespace {

// Every key of run.config beside the model, with the field it fills: the reader and the writer
// both walk this one list. `Config` is RunConfig or const RunConfig.
template <typename Config, typename Visit>
void visit_fields(Config& c, Visit&& visit) {
    visit("dp", c.layout.grid.dp);
    visit("tp", c.layout.grid.tp);
    visit("pp", c.layout.grid.pp);
    visit("cp", c.layout.grid.cp);
    visit("schedule", c.layout.schedule);
    visit("virtual_stages", c.layout.virtual_stages);
    visit("recompute", c.layout.recompute);
    visit("sequence_parallel", c.layout.sequence_parallel);
    visit("rank_order", c.layout.rank_order);
    visit("cp_impl", c.layout.context_parallelism);
    visit("zero_stage", c.layout.zero_stage);
    visit("offload_checkpoints", c.layout.offload_checkpoints);
    visit("overlap_grad_reduce", c.overlap_grad_reduce);
    visit("overlap_param_gather", c.overlap_param_gather);
    visit("packed_attention", c.packed_attention);
    visit("dtype", c.dtype);
    visit("grad_reduce_dtype", c.grad_reduce_dtype);
    visit("balancer", c.balancer);
    visit("cp_shard", c.cp_shard);
    visit("microbatches", c.layout.microbatches);
    visit("stage_layers", c.layout.stage_layers);
    visit("steps", c.steps);
    visit("epochs", c.epochs);
    visit("seed", c.seed);
    visit("ilp_window", c.ilp_window);
    visit("wlb_max_tokens", c.wlb_max_tokens);
    visit("wlb_max_delay", c.wlb_max_delay);
    visit("wlb_thresholds", c.wlb_thresholds);
    visit("packing_cost", c.packing_cost);
    visit("attention_kernel", c.attention_kernel);
    visit("attention_chunk", c.attention_chunk);
    visit("offload", c.offload);
    visit("tp_comm_overlap", c.tp_comm_overlap);
    visit("attention_backend", c.attention_backend);
    visit("data", c.data);
    visit("lengths", c.lengths);
    visit("documents", c.documents);
    visit("backend", c.backend);
    visit("gemm_gflops", c.gemm_gflops);
    visit("gemm_gflops_cold", c.gemm_gflops_cold);
    visit("host_cores", c.host_cores);
    visit("comm", c.comm);
    visit("simulated", c.simulated);
    visit("cost_model", c.cost_model);
    visit("hot_switch", c.hot_switch);
}

template <typename Config, typename Visit>
void visit_model(Config& c, Visit&& visit) {
    visit("layers", c.model.layers);
    visit("hidden", c.model.hidden);
    visit("heads", c.model.heads);
    visit("context", c.model.context);
    visit("vocab", c.model.vocab);
    visit("architecture", c.model.architecture);
    visit("kv_heads", c.model.kv_heads);
    visit("ffn_hidden", c.model.ffn_hidden);
}

// The values run.config holds by name: each read with its parser, written by its name.
template <typename T>
constexpr bool kNamed =
    std::is_same_v<T, parallel::PipelineSchedule> || std::is_same_v<T, parallel::Recompute> ||
    std::is_same_v<T, parallel::RankOrder> || std::is_same_v<T, parallel::ContextParallelism> ||
    std::is_same_v<T, parallel::Architecture>;
Result<parallel::PipelineSchedule> parse_named(std::string_view text, parallel::PipelineSchedule) {
    return parallel::parse_schedule(text);
}
Result<parallel::Recompute> parse_named(std::string_view text, parallel::Recompute) {
    return parallel::parse_recompute(text);
}
Result<parallel::RankOrder> parse_named(std::string_view text, const parallel::RankOrder&) {
    return parallel::parse_rank_order(text);
}
Result<parallel::ContextParallelism> parse_named(std::string_view text,
                                                 parallel::ContextParallelism) {
    return parallel::parse_context_parallelism(text);
}
Result<parallel::Architecture> parse_named(std::string_view text, parallel::Architecture) {
    return parallel::parse_architecture(text);
}
std::string name_of(parallel::ContextParallelism cp) {
    return parallel::context_parallelism_name(cp);
}
std::string name_of(parallel::Architecture architecture) {
    return parallel::architecture_name(architecture);
}
std::string name_of(parallel::PipelineSchedule schedule) {
    return parallel::schedule_name(schedule);
}
std::string name_of(parallel::Recompute recompute) {
    return parallel::recompute_name(recompute);
}
std::string name_of(const parallel::RankOrder& order) {
    return parallel::rank_order_name(order);
}

// Reads `key` into `value` when it is there with the value's type (a schedule or a
// recomputation by its name); otherwise the value keeps its default and the key is unsaid.
struct FieldReader {
    const nlohmann::json& object;
    std::vector<std::string>& unsaid;

    template <typename T>
    void operator()(const char* key, T& value) const {
        const auto it = object.find(key);
        if (it == object.end() || !read(*it, value)) {
            unsaid.emplace_back(key);
        }
    }

    template <typename T>
    static bool read(const nlohmann::json& field, T& value) {
        if constexpr (std::is_same_v<T, std::string>) {
            if (!field.is_string()) {
                return false;
            }
            value = field.get<std::string>();
        } else if constexpr (kNamed<T>) {
            auto parsed = parse_named(field.is_string() ? field.get<std::string>() : "", value);
            if (!parsed) {
                return false;
            }
            value = *parsed;
        } else if constexpr (std::is_same_v<T, bool>) {
            if (!field.is_boolean()) {
                return false;
            }
            value = field.get<bool>();
        } else if constexpr (std::is_same_v<T, std::vector<int>>) {
            if (!field.is_array() || !std::all_of(field.begin(), field.end(), [](const auto& e) {
                    return e.is_number_integer();
                })) {
                return false;
            }
            value = field.get<std::vector<int>>();
        } else {
            if (!field.is_number()) {
                return false;
            }
            value = field.get<T>();
        }
        return true;
    }
};

// Writes every key the config says: strings and lists only when not empty, measurements only
// when made.
struct FieldWriter {
    nlohmann::json& object;
    const RunConfig& config;

    template <typename T>
    void operator()(const char* key, const T& value) const {
        if (!config.says(key)) {
            return;
        }
        if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, std::vector<int>>) {
            if (value.empty()) {
                return;
            }
        }
        if constexpr (std::is_same_v<T, double>) {
            if (value == 0) {
                return;  // a measurement not made
            }
        }
        if constexpr (kNamed<T>) {
            object[key] = name_of(value);
        } else {
            object[key] = value;
        }
    }
};

}  // namespace

RunConfig parse_run_config(std::string_view config_json, const std::vector<RankInfo>& ranks) {
    RunConfig config;
    const auto json = nlohmann::json::parse(config_json, nullptr, /*allow_exceptions=*/false);
    if (json.is_object()) {
        visit_fields(config, FieldReader{json, config.unsaid});
    }
    const auto model = json.is_object() ? json.find("model") : json.end();
    const nlohmann::json none = nlohmann::json::object();
    visit_model(config, FieldReader{model != json.end() && model->is_object() ? *model : none,
                                    config.unsaid});
    if (!json.is_object()) {
        visit_fields(config, FieldReader{none, config.unsaid});
    }
    // A foreign or hand-built run: the grid is what the ranks' coordinates span.
    if (!json.is_object() || !json.contains("pp")) {
        int dp = 0, tp = 0, pp = 0, cp = 0;
        for (const RankInfo& rank : ranks) {
            dp = std::max(dp, rank.dp + 1);
            tp = std::max(tp, rank.tp + 1);
            pp = std::max(pp, rank.pp + 1);
            cp = std::max(cp, rank.cp + 1);
        }
        config.grid_known = dp + tp + pp + cp > 0;
        config.layout.grid = {.dp = std::max(dp, 1),
                              .tp = std::max(tp, 1),
                              .pp = std::max(pp, 1),
                              .cp = std::max(cp, 1)};
    }
    return config;
}

std::string run_config_json(const RunConfig& config) {
    nlohmann::json json = nlohmann::json::object();
    visit_fields(config, FieldWriter{json, config});
    nlohmann::json model = nlohmann::json::object();
    visit_model(config, FieldWriter{model, config});
    json["model"] = std::move(model);
    return json.dump();
}

std::string describe_grid(const RunConfig& config) {
    if (!config.grid_known) {
        return "unknown (the trace gives no DP/TP/PP/CP coordinates)";
    }
    const parallel::GridShape& grid = config.layout.grid;
    return "dp " + std::to_string(grid.dp) + " × tp " + std::to_string(grid.tp) + " × pp " +
           std::to_string(grid.pp) + " × cp " + std::to_string(grid.cp);
}

std::string schedule_text(const RunConfig& config) {
    return config.says("schedule") ? parallel::schedule_name(config.layout.schedule) : "";
}

bool RunConfig::says(std::string_view key) const {
    return std::find(unsaid.begin(), unsaid.end(), key) == unsaid.end();
}

}  // namespace fulcrum
