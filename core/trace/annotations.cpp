#include "core/trace/annotations.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <limits>

#include "core/util/json_text.h"

namespace fulcrum {
namespace {

std::string_view trim(std::string_view text) {
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) {
        text.remove_prefix(1);
    }
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) {
        text.remove_suffix(1);
    }
    return text;
}

template <typename Int>
bool parse_non_negative(std::string_view text, Int& out) {
    std::int64_t value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || value < 0 ||
        value > std::numeric_limits<Int>::max()) {
        return false;
    }
    out = static_cast<Int>(value);
    return true;
}

bool parse_phase(std::string_view text, Phase& out) {
    if (text == "fwd") {
        out = Phase::forward;
    } else if (text == "bwd") {
        out = Phase::backward;
    } else if (text == "wgrad") {
        out = Phase::weight_grad;
    } else {
        return false;
    }
    return true;
}

// Puts key=value into its column; false when the key is not one of the scheme's or its value
// does not parse (then it is kept in args, as written, rather than lost).
bool assign_known_key(std::string_view key, std::string_view value, RangeAnnotation& out) {
    if (key == "step") {
        return parse_non_negative(value, out.step);
    }
    if (key == "mb") {
        return parse_non_negative(value, out.microbatch);
    }
    if (key == "stage") {
        return parse_non_negative(value, out.stage);
    }
    if (key == "phase") {
        return parse_phase(value, out.phase);
    }
    if (key == "bytes") {
        return parse_non_negative(value, out.bytes);
    }
    if (key == "chunk") {
        return parse_non_negative(value, out.chunk);
    }
    return false;
}

std::int32_t int_field(const nlohmann::json& object, const char* key) {
    const auto found = object.find(key);
    if (found == object.end() || !found->is_number_integer()) {
        return -1;
    }
    const auto value = found->get<std::int64_t>();
    if (value < std::numeric_limits<std::int32_t>::min() ||
        value > std::numeric_limits<std::int32_t>::max()) {
        return -1;
    }
    return static_cast<std::int32_t>(value);
}

Result<nlohmann::json> parse_object(std::string_view json, std::string_view mark) {
    auto value = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded() || !value.is_object()) {
        return Error{ErrorCode::invalid_input,
                     std::string(mark) + " mark does not carry a JSON object"};
    }
    return value;
}

}  // namespace

std::string format_range_message(const RangeAnnotation& annotation) {
    std::string message = annotation.name;
    auto add = [&](const char* key, std::int64_t value) {
        if (value >= 0) {
            message += ' ';
            message += key;
            message += '=';
            message += std::to_string(value);
        }
    };
    add("step", annotation.step);
    add("mb", annotation.microbatch);
    add("stage", annotation.stage);
    switch (annotation.phase) {
        case Phase::forward:
            message += " phase=fwd";
            break;
        case Phase::backward:
            message += " phase=bwd";
            break;
        case Phase::weight_grad:
            message += " phase=wgrad";
            break;
        case Phase::none:
            break;
    }
    add("chunk", annotation.chunk);
    add("bytes", annotation.bytes);
    return message;
}

RangeAnnotation parse_range_message(std::string_view message) {
    RangeAnnotation out;
    // NAME runs up to the first token that holds '='; it may contain spaces ("send
    // activations").
    std::size_t keys_begin = message.size();
    for (std::size_t token_begin = 0; token_begin < message.size();) {
        const std::size_t token_end = std::min(message.find(' ', token_begin), message.size());
        const std::string_view token = message.substr(token_begin, token_end - token_begin);
        if (token.find('=') != std::string_view::npos) {
            keys_begin = token_begin;
            break;
        }
        token_begin = token_end + 1;
    }
    out.name = std::string(trim(message.substr(0, keys_begin)));
    if (keys_begin == message.size()) {
        return out;
    }

    std::vector<std::pair<std::string_view, std::string>> extra;
    std::string_view rest = message.substr(keys_begin);
    while (!rest.empty()) {
        const std::size_t space = std::min(rest.find(' '), rest.size());
        const std::string_view token = rest.substr(0, space);
        rest.remove_prefix(std::min(space + 1, rest.size()));
        if (token.empty()) {
            continue;
        }
        const std::size_t equals = token.find('=');
        if (equals == std::string_view::npos) {
            // A value with spaces ("note=two words"): the word belongs to the previous value.
            if (!extra.empty()) {
                extra.back().second += ' ';
                extra.back().second += token;
            }
            continue;
        }
        const std::string_view key = token.substr(0, equals);
        const std::string_view value = token.substr(equals + 1);
        if (!assign_known_key(key, value, out)) {
            extra.emplace_back(key, std::string(value));
        }
    }
    if (!extra.empty() || out.chunk >= 0) {
        out.args_json = "{";
        if (out.chunk >= 0) {
            out.args_json += "\"chunk\":" + std::to_string(out.chunk);
        }
        for (std::size_t i = 0; i < extra.size(); ++i) {
            if (i > 0 || out.chunk >= 0) {
                out.args_json += ',';
            }
            append_json_string(out.args_json, extra[i].first);
            out.args_json += ':';
            append_json_string(out.args_json, extra[i].second);
        }
        out.args_json += '}';
    }
    return out;
}

std::int32_t chunk_of_args(std::string_view args_json) {
    if (args_json.empty()) {
        return -1;
    }
    const auto object = nlohmann::json::parse(args_json, nullptr, /*allow_exceptions=*/false);
    if (object.is_discarded() || !object.is_object()) {
        return -1;
    }
    const std::int32_t chunk = int_field(object, "chunk");
    return chunk >= 0 ? chunk : -1;
}

Category category_from_nvtx(std::uint32_t nvtx_category) {
    if (nvtx_category < static_cast<std::uint32_t>(kCategoryCount)) {
        return static_cast<Category>(nvtx_category);
    }
    return Category::other;
}

MarkMessage split_mark_message(std::string_view message) {
    message = trim(message);
    const std::size_t space = message.find(' ');
    if (space == std::string_view::npos) {
        return {message, {}};
    }
    return {message.substr(0, space), trim(message.substr(space + 1))};
}

Result<RankMark> parse_rank_mark(std::string_view json) {
    auto object = parse_object(json, kRankMark);
    if (!object) {
        return object.error();
    }
    RankMark mark;
    mark.rank = int_field(*object, "rank");
    if (mark.rank < 0) {
        return Error{ErrorCode::invalid_input, "fulcrum.rank mark has no \"rank\" >= 0"};
    }
    mark.world = int_field(*object, "world");
    mark.dp = int_field(*object, "dp");
    mark.pp = int_field(*object, "pp");
    mark.cp = int_field(*object, "cp");
    mark.tp = int_field(*object, "tp");
    mark.device = int_field(*object, "device");
    return mark;
}

std::string rank_mark_json(const RankMark& mark) {
    const nlohmann::json object = {{"rank", mark.rank},    {"world", mark.world}, {"dp", mark.dp},
                                   {"tp", mark.tp},        {"pp", mark.pp},       {"cp", mark.cp},
                                   {"device", mark.device}};
    return object.dump();
}

std::string domain_args(std::string_view domain) {
    std::string args = "{\"domain\":";
    append_json_string(args, domain);
    args += '}';
    return args;
}

Result<std::string> parse_run_mark(std::string_view json) {
    auto object = parse_object(json, kRunMark);
    if (!object) {
        return object.error();
    }
    return object->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Result<std::vector<WorkloadEntry>> parse_workload_mark(std::string_view json, std::int32_t rank) {
    auto object = parse_object(json, kWorkloadMark);
    if (!object) {
        return object.error();
    }
    const std::int32_t step = int_field(*object, "step");
    if (step < 0) {
        return Error{ErrorCode::invalid_input, "fulcrum.workload mark has no \"step\" >= 0"};
    }
    const auto microbatches = object->find("microbatches");
    if (microbatches == object->end() || !microbatches->is_array()) {
        return Error{ErrorCode::invalid_input,
                     "fulcrum.workload mark has no \"microbatches\" array"};
    }
    std::string balancer;
    if (const auto found = object->find("balancer"); found != object->end() && found->is_string()) {
        balancer = found->get<std::string>();
    }
    std::vector<WorkloadEntry> entries;
    for (std::size_t mb = 0; mb < microbatches->size(); ++mb) {
        const auto& documents = (*microbatches)[mb];
        if (!documents.is_array()) {
            return Error{ErrorCode::invalid_input,
                         "fulcrum.workload micro-batch " + std::to_string(mb) + " is not an array"};
        }
        for (const auto& document : documents) {
            const bool well_formed =
                document.is_array() && document.size() == 4 &&
                std::all_of(document.begin(), document.end(),
                            [](const nlohmann::json& v) { return v.is_number_integer(); });
            if (!well_formed) {
                return Error{
                    ErrorCode::invalid_input,
                    "fulcrum.workload micro-batch " + std::to_string(mb) + " holds " +
                        document.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                        ", not [doc_id, doc_length, token_begin, token_end]"};
            }
            WorkloadEntry entry;
            entry.rank = rank;
            entry.step = step;
            entry.microbatch = static_cast<std::int32_t>(mb);
            entry.doc_id = document[0].get<std::int64_t>();
            entry.doc_length = document[1].get<std::int32_t>();
            entry.token_begin = document[2].get<std::int32_t>();
            entry.token_end = document[3].get<std::int32_t>();
            entry.balancer = balancer;
            entries.push_back(std::move(entry));
        }
    }
    return entries;
}

std::uint64_t pack_semantic_keys(std::int32_t step, std::int32_t microbatch, std::int16_t stage,
                                 Phase phase) {
    const auto field = [](std::int64_t value, int bits) -> std::uint64_t {
        if (value < 0) {
            return 0;
        }
        const auto stored = static_cast<std::uint64_t>(value) + 1;
        return stored < (std::uint64_t{1} << bits) ? stored : 0;
    };
    return field(step, 32) << 32 | field(microbatch, 16) << 16 | field(stage, 12) << 4 |
           field(static_cast<std::int64_t>(phase), 4);
}

SemanticKeys unpack_semantic_keys(std::uint64_t id) {
    const auto field = [&](int shift, int bits) {
        return static_cast<std::int64_t>((id >> shift) & ((std::uint64_t{1} << bits) - 1)) - 1;
    };
    SemanticKeys keys;
    keys.step = static_cast<std::int32_t>(field(32, 32));
    keys.microbatch = static_cast<std::int32_t>(field(16, 16));
    keys.stage = static_cast<std::int16_t>(field(4, 12));
    keys.phase = static_cast<Phase>(field(0, 4));
    return keys;
}

Result<bool> record_metadata_mark(const MarkMessage& mark, std::int32_t rank, TraceSink& sink) {
    if (mark.name == kRunMark) {
        auto config = parse_run_mark(mark.json);
        if (!config) {
            return config.error();
        }
        sink.set_run_config(std::move(*config));
        return true;
    }
    if (mark.name == kWorkloadMark) {
        auto entries = parse_workload_mark(mark.json, rank);
        if (!entries) {
            return entries.error();
        }
        for (const WorkloadEntry& entry : *entries) {
            sink.add_workload(entry);
        }
        return true;
    }
    return false;
}

}  // namespace fulcrum
