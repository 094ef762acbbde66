// The cost model as JSON (docs/analyses.md, "Cost model"): what `fulcrum analyze` writes and
// `fulcrum simulate --cost-model` reads, apart from the fitting in cost_model.cpp.
#include "core/analysis/cost_model.h"

#include <array>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace fulcrum::analysis {

namespace {

// Stable names of roles in the JSON format.
constexpr std::array<std::pair<Role, std::string_view>, 16> kRoleNames = {{
    {Role::other, "other"},
    {Role::step, "step"},
    {Role::forward, "forward"},
    {Role::backward, "backward"},
    {Role::attention, "attention"},
    {Role::pipeline_recv, "pipeline_recv"},
    {Role::pipeline_send, "pipeline_send"},
    {Role::cp_collective, "cp_collective"},
    {Role::tp_collective, "tp_collective"},
    {Role::dp_collective, "dp_collective"},
    {Role::embedding_collective, "embedding_collective"},
    {Role::optimizer, "optimizer"},
    {Role::collective, "collective"},
    {Role::copy_wait, "copy_wait"},
    {Role::reduction_start, "reduction_start"},
    {Role::reduction_wait, "reduction_wait"},
}};

std::string_view role_name(Role role) {
    for (const auto& [r, name] : kRoleNames) {
        if (r == role) {
            return name;
        }
    }
    return "other";
}

}  // namespace

std::string cost_model_json(const CostModel& model) {
    using Json = nlohmann::ordered_json;
    const auto fit_fields = [](Json& object, const FitQuality& fit) {
        object["samples"] = fit.samples;
        object["r_squared"] = fit.r_squared;
        object["mean_abs_rel_error"] = fit.mean_abs_rel_error;
    };
    Json json;
    json["version"] = 1;
    json["source"] = model.source;
    json["passes"] = Json::array();
    for (const PassCost& pass : model.passes) {
        Json row;
        row["stage"] = pass.stage;
        row["phase"] = std::string(to_string(pass.phase));
        row["fixed_ns"] = pass.fixed_ns;
        row["per_token_ns"] = pass.per_token_ns;
        row["per_pair_ns"] = pass.per_pair_ns;
        fit_fields(row, pass.fit);
        json["passes"].push_back(std::move(row));
    }
    json["collectives"] = Json::array();
    for (const CollectiveCost& collective : model.collectives) {
        Json row;
        row["name"] = collective.name;
        row["role"] = std::string(role_name(collective.role));
        row["latency_ns"] = collective.latency_ns;
        row["per_byte_ns"] = collective.per_byte_ns;
        if (!collective.per_byte_fitted()) {
            row["fitted_bytes"] = collective.fitted_bytes;
        }
        fit_fields(row, collective.fit);
        json["collectives"].push_back(std::move(row));
    }
    json["optimizer_ns"] = model.optimizer_ns;
    return json.dump(2) + "\n";
}

namespace {

// `where` is a path into the document, "passes[2].per_token_ns"; "" for the top level.
Error bad(const std::string& where, const std::string& problem) {
    return Error{ErrorCode::invalid_input,
                 "cost model JSON: " + (where.empty() ? "" : where + ": ") + problem};
}

std::string member(const std::string& where, const char* key) {
    return where.empty() ? std::string(key) : where + "." + key;
}

std::string shown(const nlohmann::json& value) {
    std::string text = value.dump();
    if (text.size() > 40) {
        text = text.substr(0, 37) + "...";
    }
    return text;
}

// A member that must be a finite number ≥ 0; `required` or it defaults to 0.
Result<double> read_time(const nlohmann::json& object, const std::string& where, const char* key,
                         bool required) {
    const auto it = object.find(key);
    if (it == object.end()) {
        if (required) {
            return bad(where, "missing \"" + std::string(key) + "\"");
        }
        return 0.0;
    }
    if (!it->is_number()) {
        return bad(member(where, key), "expected a number, got " + shown(*it));
    }
    const double value = it->get<double>();
    if (!(value >= 0) || !std::isfinite(value)) {
        return bad(member(where, key), "must be ≥ 0, got " + shown(*it));
    }
    return value;
}

Result<FitQuality> read_fit(const nlohmann::json& object, const std::string& where) {
    FitQuality fit;
    if (const auto it = object.find("samples"); it != object.end()) {
        if (!it->is_number_integer() || it->get<std::int64_t>() < 0) {
            return bad(where + ".samples", "expected an integer ≥ 0, got " + shown(*it));
        }
        fit.samples = static_cast<int>(it->get<std::int64_t>());
    }
    for (const auto& [key, field] : {std::pair{"r_squared", &fit.r_squared},
                                     std::pair{"mean_abs_rel_error", &fit.mean_abs_rel_error}}) {
        if (const auto it = object.find(key); it != object.end()) {
            if (!it->is_number()) {
                return bad(member(where, key), "expected a number, got " + shown(*it));
            }
            *field = it->get<double>();
        }
    }
    return fit;
}

// One entry of "passes".
Result<PassCost> parse_pass(const nlohmann::json& row, const std::string& where) {
    PassCost cost;
    const auto stage = row.find("stage");
    if (stage == row.end()) {
        return bad(where, "missing \"stage\"");
    }
    if (!stage->is_number_integer() || stage->get<std::int64_t>() < 0 ||
        stage->get<std::int64_t>() > 32767) {
        return bad(where + ".stage", "expected an integer ≥ 0, got " + shown(*stage));
    }
    cost.stage = static_cast<std::int16_t>(stage->get<std::int64_t>());
    const auto phase = row.find("phase");
    if (phase == row.end()) {
        return bad(where, "missing \"phase\"");
    }
    bool known_phase = false;
    for (const Phase p : {Phase::forward, Phase::backward, Phase::weight_grad}) {
        if (phase->is_string() && phase->get<std::string>() == to_string(p)) {
            cost.phase = p;
            known_phase = true;
        }
    }
    if (!known_phase) {
        return bad(where + ".phase",
                   "expected \"forward\", \"backward\" or \"weight-grad\", got " + shown(*phase));
    }
    for (const auto& [key, field] :
         {std::pair{"fixed_ns", &cost.fixed_ns}, std::pair{"per_token_ns", &cost.per_token_ns},
          std::pair{"per_pair_ns", &cost.per_pair_ns}}) {
        auto value = read_time(row, where, key, true);
        if (!value) {
            return value.error();
        }
        *field = *value;
    }
    auto fit = read_fit(row, where);
    if (!fit) {
        return fit.error();
    }
    cost.fit = *fit;
    return cost;
}

// One entry of "collectives".
Result<CollectiveCost> parse_collective(const nlohmann::json& row, const std::string& where) {
    CollectiveCost cost;
    const auto name = row.find("name");
    if (name == row.end()) {
        return bad(where, "missing \"name\"");
    }
    if (!name->is_string() || name->get<std::string>().empty()) {
        return bad(where + ".name", "expected a non-empty string, got " + shown(*name));
    }
    cost.name = name->get<std::string>();
    if (const auto role = row.find("role"); role != row.end()) {
        bool known_role = false;
        for (const auto& [r, role_text] : kRoleNames) {
            if (role->is_string() && role->get<std::string>() == role_text) {
                cost.role = r;
                known_role = true;
            }
        }
        if (!known_role) {
            return bad(where + ".role",
                       "unknown role " + shown(*role) +
                           " (e.g. \"cp_collective\", \"pipeline_recv\", \"collective\")");
        }
    }
    for (const auto& [key, field] :
         {std::pair{"latency_ns", &cost.latency_ns}, std::pair{"per_byte_ns", &cost.per_byte_ns}}) {
        auto value = read_time(row, where, key, true);
        if (!value) {
            return value.error();
        }
        *field = *value;
    }
    if (const auto fitted = row.find("fitted_bytes"); fitted != row.end()) {
        if (!fitted->is_number_integer() || fitted->get<std::int64_t>() < 0) {
            return bad(where + ".fitted_bytes", "expected a byte count ≥ 0, got " + shown(*fitted));
        }
        cost.fitted_bytes = fitted->get<std::int64_t>();
    }
    auto fit = read_fit(row, where);
    if (!fit) {
        return fit.error();
    }
    cost.fit = *fit;
    return cost;
}

}  // namespace

Result<CostModel> parse_cost_model_json(std::string_view text) {
    nlohmann::json json;
    try {
        json = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& error) {
        return Error{ErrorCode::invalid_input,
                     std::string("cost model JSON is not valid JSON: ") + error.what()};
    }
    if (!json.is_object()) {
        return bad("", "expected an object, got " + shown(json));
    }
    const auto version = json.find("version");
    if (version == json.end()) {
        return bad("", "missing \"version\" (this Fulcrum reads version 1)");
    }
    if (!version->is_number_integer() || version->get<std::int64_t>() != 1) {
        return bad("version",
                   "unsupported version " + shown(*version) + "; this Fulcrum reads version 1");
    }
    CostModel model;
    model.source = "given";
    if (const auto it = json.find("source"); it != json.end()) {
        if (!it->is_string()) {
            return bad("source", "expected a string, got " + shown(*it));
        }
        model.source = it->get<std::string>();
    }

    const auto passes = json.find("passes");
    if (passes == json.end()) {
        return bad("", "missing \"passes\"");
    }
    if (!passes->is_array()) {
        return bad("passes", "expected an array, got " + shown(*passes));
    }
    for (std::size_t i = 0; i < passes->size(); ++i) {
        const nlohmann::json& row = (*passes)[i];
        const std::string where = "passes[" + std::to_string(i) + "]";
        if (!row.is_object()) {
            return bad(where, "expected an object, got " + shown(row));
        }
        auto cost = parse_pass(row, where);
        if (!cost) {
            return cost.error();
        }
        if (model.pass(cost->stage, cost->phase) != nullptr) {
            return bad(where, "a second entry for stage " + std::to_string(cost->stage) + " " +
                                  std::string(to_string(cost->phase)));
        }
        model.passes.push_back(*cost);
    }

    if (const auto collectives = json.find("collectives"); collectives != json.end()) {
        if (!collectives->is_array()) {
            return bad("collectives", "expected an array, got " + shown(*collectives));
        }
        for (std::size_t i = 0; i < collectives->size(); ++i) {
            const nlohmann::json& row = (*collectives)[i];
            const std::string where = "collectives[" + std::to_string(i) + "]";
            if (!row.is_object()) {
                return bad(where, "expected an object, got " + shown(row));
            }
            auto cost = parse_collective(row, where);
            if (!cost) {
                return cost.error();
            }
            if (model.collective(cost->name) != nullptr) {
                return bad(where, "a second entry for \"" + cost->name + "\"");
            }
            model.collectives.push_back(std::move(*cost));
        }
    }

    auto optimizer = read_time(json, "", "optimizer_ns", false);
    if (!optimizer) {
        return optimizer.error();
    }
    model.optimizer_ns = *optimizer;
    return model;
}

}  // namespace fulcrum::analysis
