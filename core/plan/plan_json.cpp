// fulcrum plan's JSON (docs/plan.md, "--json"): a plan written, and read back for
// `fulcrum report RUN --plan PLAN.json`. The search itself is planner.cpp.
#include <nlohmann/json.hpp>

#include <string>

#include "core/plan/planner.h"

namespace fulcrum::plan {

namespace {

std::vector<std::string> rank_order_names(const std::vector<parallel::RankOrder>& orders) {
    std::vector<std::string> names;
    for (const parallel::RankOrder& order : orders) {
        names.push_back(parallel::rank_order_name(order));
    }
    return names;
}

nlohmann::json candidate_json(const Candidate& c) {
    nlohmann::json json = {
        {"dp", c.layout.grid.dp},
        {"tp", c.layout.grid.tp},
        {"pp", c.layout.grid.pp},
        {"cp", c.layout.grid.cp},
        {"microbatches", c.layout.microbatches},
        {"schedule", parallel::schedule_name(c.layout.schedule)},
        {"virtual_stages", c.layout.virtual_stages},
        {"recompute", parallel::recompute_name(c.layout.recompute)},
        {"sequence_parallel", c.layout.sequence_parallel},
        {"balancer", balance::balancer_name(c.balancer)},
        {"cp_shard", balance::cp_sharding_name(c.sharding)},
        {"attention_chunk", c.attention_chunk},
        {"offload", c.offload},
        {"stage_layers", c.layout.stage_layers},
        {"rank_order", parallel::rank_order_name(c.layout.rank_order)},
        {"zero_stage", c.layout.zero_stage},
        {"cp_impl", parallel::context_parallelism_name(c.layout.context_parallelism)},
        {"offload_checkpoints", c.layout.offload_checkpoints},
        {"status", candidate_status_name(c.status)},
        {"step_ns", c.step_ns},
        {"estimated_step_ns", c.estimated_step_ns},
        {"tokens_per_second", c.tokens_per_second},
        {"mfu", c.mfu},
        {"bubble_fraction", c.bubble_fraction},
        {"imbalance", c.imbalance},
        {"memory",
         {{"stage", c.memory.stage},
          {"weights_gib", c.memory.weights_gib},
          {"gradients_gib", c.memory.gradients_gib},
          {"optimizer_gib", c.memory.optimizer_gib},
          {"activations_gib", c.memory.activations_gib},
          {"total_gib", c.memory.total_gib}}},
        {"train_command", c.train_command},
        {"simulate_command", c.simulate_command},
        {"cost_source", c.cost_source},
    };
    if (c.wlb_thresholds) {
        json["wlb_thresholds"] = *c.wlb_thresholds;
    }
    if (!c.equal_shardings.empty()) {
        nlohmann::json names = nlohmann::json::array();
        for (const balance::CpSharding sharding : c.equal_shardings) {
            names.push_back(balance::cp_sharding_name(sharding));
        }
        json["equal_cp_shardings"] = std::move(names);
    }
    return json;
}

}  // namespace

std::string plan_json(const PlanRequest& request, const PlanResult& result, int top) {
    nlohmann::json ranked = nlohmann::json::array();
    const std::size_t shown = top > 0
                                  ? std::min(result.ranked.size(), static_cast<std::size_t>(top))
                                  : result.ranked.size();
    for (std::size_t i = 0; i < shown; ++i) {
        nlohmann::json entry = candidate_json(result.candidates[result.ranked[i]]);
        entry["rank"] = i + 1;
        ranked.push_back(std::move(entry));
    }
    nlohmann::json reasons = nlohmann::json::array();
    for (const auto& [kind, n] : result.counts.infeasible_by_reason) {
        // One example of each cause, so a reader sees what the figures were.
        std::string example;
        std::vector<int> example_grid;
        for (const Candidate& c : result.candidates) {
            if (c.status == CandidateStatus::infeasible && c.reason_kind == kind) {
                example = c.reason;
                example_grid = {c.layout.grid.dp, c.layout.grid.tp, c.layout.grid.pp,
                                c.layout.grid.cp};
                break;
            }
        }
        reasons.push_back({{"reason", kind},
                           {"candidates", n},
                           {"example", example},
                           {"example_grid", example_grid}});
    }
    const nlohmann::json json = {
        {"format", "fulcrum plan"},
        {"version", 1},
        {"request",
         {{"model",
           {{"layers", request.model.layers},
            {"hidden", request.model.hidden},
            {"heads", request.model.heads},
            {"context", request.model.context},
            {"vocab", request.model.vocab},
            {"architecture", parallel::architecture_name(request.model.architecture)},
            {"kv_heads", parallel::kv_heads_of(request.model)},
            {"ffn_hidden", parallel::ffn_hidden_of(request.model)}}},
          {"world_sizes", request.world_sizes},
          {"gpus_per_node", request.gpus_per_node},
          {"rank_orders", rank_order_names(request.space.rank_orders)},
          {"gpu_memory_gib", request.gpu_memory_gib},
          {"usable_memory_fraction", request.usable_memory_fraction},
          {"global_batch", request.global_batch},
          {"lengths", request.lengths},
          {"documents", resolved_documents(request)},
          {"seed", request.seed},
          {"steps", request.steps},
          {"cost_model", result.cost_source}}},
        {"counts",
         {{"enumerated", result.counts.enumerated},
          {"infeasible", result.counts.infeasible},
          {"dominated", result.counts.dominated},
          {"estimated", result.counts.estimated},
          {"simulated", result.counts.simulated}}},
        {"elapsed_s", result.elapsed_s},
        {"derived_costs", result.notes},
        {"ranked", ranked},
        {"infeasible", reasons},
    };
    return json.dump();
}

namespace {

// One ranked candidate of plan_json; the parse errors name the key.
Result<Candidate> candidate_from_json(const nlohmann::json& j) {
    Candidate c;
    c.layout.grid = {.dp = j.at("dp").get<int>(),
                     .tp = j.at("tp").get<int>(),
                     .pp = j.at("pp").get<int>(),
                     .cp = j.at("cp").get<int>()};
    c.layout.microbatches = j.at("microbatches").get<int>();
    auto schedule = parallel::parse_schedule(j.at("schedule").get<std::string>());
    auto recompute = parallel::parse_recompute(j.at("recompute").get<std::string>());
    auto balancer = balance::parse_balancer(j.at("balancer").get<std::string>());
    auto sharding = balance::parse_cp_sharding(j.at("cp_shard").get<std::string>());
    if (!schedule || !recompute || !balancer || !sharding) {
        return !schedule    ? schedule.error()
               : !recompute ? recompute.error()
               : !balancer  ? balancer.error()
                            : sharding.error();
    }
    c.layout.schedule = *schedule;
    c.layout.recompute = *recompute;
    c.balancer = *balancer;
    c.sharding = *sharding;
    c.layout.virtual_stages = j.at("virtual_stages").get<int>();
    c.layout.sequence_parallel = j.at("sequence_parallel").get<bool>();
    c.attention_chunk = j.value("attention_chunk", 0);
    c.offload = j.value("offload", false);
    c.layout.stage_layers = j.at("stage_layers").get<std::vector<int>>();
    if (auto order = parallel::parse_rank_order(j.value("rank_order", "tp-cp-dp-pp"))) {
        c.layout.rank_order = *order;  // plans written before the key: Megatron-LM's
    }
    // Plans written before these keys: the distributed optimizer, all-gather CP, no offload.
    c.layout.zero_stage = j.value("zero_stage", 1);
    if (auto impl = parallel::parse_context_parallelism(j.value("cp_impl", "all-gather"))) {
        c.layout.context_parallelism = *impl;
    }
    c.layout.offload_checkpoints = j.value("offload_checkpoints", false);
    c.status = CandidateStatus::ranked;
    c.step_ns = j.at("step_ns").get<double>();
    c.estimated_step_ns = j.value("estimated_step_ns", 0.0);
    c.tokens_per_second = j.at("tokens_per_second").get<double>();
    c.mfu = j.at("mfu").get<double>();
    c.bubble_fraction = j.at("bubble_fraction").get<double>();
    c.imbalance = j.at("imbalance").get<double>();
    const nlohmann::json& m = j.at("memory");
    c.memory = {m.at("stage").get<int>(),
                m.at("weights_gib").get<double>(),
                m.at("gradients_gib").get<double>(),
                m.at("optimizer_gib").get<double>(),
                m.at("activations_gib").get<double>(),
                m.at("total_gib").get<double>()};
    c.train_command = j.value("train_command", "");
    c.simulate_command = j.value("simulate_command", "");
    c.cost_source = j.value("cost_source", "");
    if (j.contains("wlb_thresholds")) {
        c.wlb_thresholds = j.at("wlb_thresholds").get<std::vector<std::int64_t>>();
    }
    for (const std::string& name : j.value("equal_cp_shardings", std::vector<std::string>{})) {
        auto sharding = balance::parse_cp_sharding(name);
        if (!sharding) {
            throw nlohmann::json::other_error::create(
                501, "equal_cp_shardings: " + sharding.error().message, &j);
        }
        c.equal_shardings.push_back(*sharding);
    }
    return c;
}

Result<PlanFile> plan_from_json(const nlohmann::json& json) {
    PlanFile file;
    PlanRequest& request = file.request;
    PlanResult& result = file.result;
    const nlohmann::json& r = json.at("request");
    const nlohmann::json& model = r.at("model");
    request.model = {model.at("layers").get<int>(), model.at("hidden").get<int>(),
                     model.at("heads").get<int>(), model.at("context").get<int>(),
                     model.at("vocab").get<int>()};
    // Plans written before these keys priced GPT shapes alone.
    if (auto architecture =
            parallel::parse_architecture(model.value("architecture", std::string("gpt")));
        architecture) {
        request.model.architecture = *architecture;
    } else {
        return architecture.error();
    }
    request.model.kv_heads = model.value("kv_heads", 0);
    request.model.ffn_hidden = model.value("ffn_hidden", 0);
    request.world_sizes = r.at("world_sizes").get<std::vector<int>>();
    request.gpus_per_node = r.at("gpus_per_node").get<int>();
    // Plans written before the key searched Megatron-LM's order alone ("rank_order" once).
    request.space.rank_orders.clear();
    for (const std::string& name :
         r.value("rank_orders", std::vector<std::string>{r.value("rank_order", "tp-cp-dp-pp")})) {
        if (auto order = parallel::parse_rank_order(name)) {
            request.space.rank_orders.push_back(*order);
        }
    }
    if (request.space.rank_orders.empty()) {
        request.space.rank_orders.push_back(parallel::kMegatronOrder);
    }
    request.gpu_memory_gib = r.at("gpu_memory_gib").get<double>();
    request.usable_memory_fraction = r.at("usable_memory_fraction").get<double>();
    request.global_batch = r.at("global_batch").get<int>();
    request.lengths = r.at("lengths").get<std::string>();
    request.documents = r.at("documents").get<std::int64_t>();
    request.seed = r.at("seed").get<std::uint64_t>();
    request.steps = r.at("steps").get<int>();
    result.cost_source = r.at("cost_model").get<std::string>();
    const nlohmann::json& counts = json.at("counts");
    result.counts.enumerated = counts.at("enumerated").get<std::int64_t>();
    result.counts.infeasible = counts.at("infeasible").get<std::int64_t>();
    result.counts.dominated = counts.at("dominated").get<std::int64_t>();
    result.counts.estimated = counts.at("estimated").get<std::int64_t>();
    result.counts.simulated = counts.at("simulated").get<std::int64_t>();
    result.elapsed_s = json.value("elapsed_s", 0.0);
    result.notes = json.value("derived_costs", std::vector<std::string>{});
    for (const nlohmann::json& entry : json.at("ranked")) {
        auto candidate = candidate_from_json(entry);
        if (!candidate) {
            return candidate.error();
        }
        result.ranked.push_back(result.candidates.size());
        result.candidates.push_back(std::move(*candidate));
    }
    request.top_k = static_cast<int>(result.ranked.size());
    for (const nlohmann::json& entry : json.at("infeasible")) {
        Candidate example;
        example.status = CandidateStatus::infeasible;
        example.reason_kind = entry.at("reason").get<std::string>();
        example.reason = entry.value("example", "");
        const auto grid = entry.value("example_grid", std::vector<int>{});
        if (grid.size() == 4) {
            example.layout.grid = {.dp = grid[0], .tp = grid[1], .pp = grid[2], .cp = grid[3]};
        }
        result.counts.infeasible_by_reason.emplace_back(example.reason_kind,
                                                        entry.at("candidates").get<std::int64_t>());
        result.candidates.push_back(std::move(example));
    }
    return file;
}

}  // namespace

Result<PlanFile> parse_plan_json(std::string_view text) {
    const auto json = nlohmann::json::parse(text, nullptr, false);
    if (json.is_discarded() || !json.is_object() || json.value("format", "") != "fulcrum plan") {
        return Error{ErrorCode::invalid_input,
                     "not a plan: expected the JSON that fulcrum plan --json prints "
                     "({\"format\": \"fulcrum plan\", ...})"};
    }
    if (json.value("version", 0) != 1) {
        return Error{ErrorCode::invalid_input,
                     "a plan of version " + json.value("version", nlohmann::json()).dump() +
                         "; this fulcrum reads version 1: write it again with this fulcrum plan"};
    }
    try {
        return plan_from_json(json);
    } catch (const nlohmann::json::exception& e) {
        return Error{ErrorCode::invalid_input,
                     std::string("the plan lacks a key or has one of the wrong type (") + e.what() +
                         "); write it again with fulcrum plan --json"};
    }
}

}  // namespace fulcrum::plan
