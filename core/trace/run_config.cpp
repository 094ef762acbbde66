#include "core/trace/run_config.h"

#include <algorithm>
#include <type_traits>

#include <nlohmann/json.hpp>

namespace fulcrum {

namespace {

// Every key of run.config beside the model, with the field it fills: the reader and the writer
// both walk this one list. `Config` is RunConfig or const RunConfig.
template <typename Config, typename Visit>
void visit_fields(Config& c, Visit&& visit) {
    visit("dp", c.dp);
    visit("tp", c.tp);
    visit("pp", c.pp);
    visit("cp", c.cp);
    visit("schedule", c.schedule);
    visit("virtual_stages", c.virtual_stages);
    visit("recompute", c.recompute);
    visit("sequence_parallel", c.sequence_parallel);
    visit("overlap_grad_reduce", c.overlap_grad_reduce);
    visit("dtype", c.dtype);
    visit("balancer", c.balancer);
    visit("cp_shard", c.cp_shard);
    visit("microbatches", c.microbatches);
    visit("stage_layers", c.stage_layers);
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
    visit("layers", c.layers);
    visit("hidden", c.hidden);
    visit("heads", c.heads);
    visit("context", c.context);
    visit("vocab", c.vocab);
}

// Reads `key` into `value` when it is there with the value's type.
struct FieldReader {
    const nlohmann::json& object;

    template <typename T>
    void operator()(const char* key, T& value) const {
        const auto it = object.find(key);
        if (it == object.end()) {
            return;
        }
        if constexpr (std::is_same_v<T, std::string>) {
            if (it->is_string()) {
                value = it->template get<std::string>();
            }
        } else if constexpr (std::is_same_v<T, bool>) {
            if (it->is_boolean()) {
                value = it->template get<bool>();
            }
        } else if constexpr (std::is_same_v<T, std::vector<int>>) {
            if (it->is_array() && std::all_of(it->begin(), it->end(), [](const auto& element) {
                    return element.is_number_integer();
                })) {
                value = it->template get<std::vector<int>>();
            }
        } else if (it->is_number()) {
            value = it->template get<T>();
        }
    }
};

struct FieldWriter {
    nlohmann::json& object;

    template <typename T>
    void operator()(const char* key, const T& value) const {
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
        object[key] = value;
    }
};

}  // namespace

RunConfig parse_run_config(std::string_view config_json, const std::vector<RankInfo>& ranks) {
    RunConfig config;
    const auto json = nlohmann::json::parse(config_json, nullptr, /*allow_exceptions=*/false);
    if (json.is_object()) {
        visit_fields(config, FieldReader{json});
        if (const auto model = json.find("model"); model != json.end() && model->is_object()) {
            visit_model(config, FieldReader{*model});
        }
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
        config.dp = std::max(dp, 1);
        config.tp = std::max(tp, 1);
        config.pp = std::max(pp, 1);
        config.cp = std::max(cp, 1);
    }
    return config;
}

std::string run_config_json(const RunConfig& config) {
    nlohmann::json json = nlohmann::json::object();
    visit_fields(config, FieldWriter{json});
    nlohmann::json model = nlohmann::json::object();
    visit_model(config, FieldWriter{model});
    json["model"] = std::move(model);
    return json.dump();
}

std::string describe_grid(const RunConfig& config) {
    if (!config.grid_known) {
        return "unknown (the trace gives no DP/TP/PP/CP coordinates)";
    }
    return "dp " + std::to_string(config.dp) + " × tp " + std::to_string(config.tp) + " × pp " +
           std::to_string(config.pp) + " × cp " + std::to_string(config.cp);
}

}  // namespace fulcrum
