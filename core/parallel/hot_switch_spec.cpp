#include "core/parallel/hot_switch_spec.h"

#include <charconv>

namespace fulcrum::parallel {
namespace {

Error bad_spec(std::string_view spec, const std::string& problem) {
    return Error{ErrorCode::invalid_input, "--hot-switch '" + std::string(spec) + "': " + problem};
}

std::string_view trim(std::string_view text) {
    while (!text.empty() && text.front() == ' ') {
        text.remove_prefix(1);
    }
    while (!text.empty() && text.back() == ' ') {
        text.remove_suffix(1);
    }
    return text;
}

bool parse_count(std::string_view text, std::int64_t& value) {
    text = trim(text);
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    return error == std::errc{} && end == text.data() + text.size() && value >= 0;
}

// "dp2,tp2" → {dp 2, tp 2}; an empty string names the problem otherwise.
std::string parse_layout(std::string_view text, parallel::GridShape& layout) {
    bool named[4] = {false, false, false, false};
    static constexpr std::string_view kNames[4] = {"dp", "tp", "pp", "cp"};
    int* degrees[4] = {&layout.dp, &layout.tp, &layout.pp, &layout.cp};
    while (!text.empty()) {
        const std::size_t comma = text.find(',');
        const std::string_view item = trim(text.substr(0, comma));
        text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
        int which = -1;
        for (int k = 0; k < 4; ++k) {
            if (item.starts_with(kNames[k])) {
                which = k;
            }
        }
        std::int64_t degree = 0;
        if (which < 0 || !parse_count(item.substr(2), degree) || degree < 1 || degree > 1 << 20) {
            return "'" + std::string(item) + "' is not a degree (dpN, tpN, ppN or cpN, N >= 1)";
        }
        if (named[which]) {
            return std::string(kNames[which]) + " is named twice";
        }
        named[which] = true;
        *degrees[which] = static_cast<int>(degree);
    }
    return {};
}

}  // namespace

std::string layout_string(const parallel::GridShape& layout) {
    std::string text;
    const auto add = [&](std::string_view name, int degree) {
        if (degree != 1) {
            text += (text.empty() ? "" : ",") + std::string(name) + std::to_string(degree);
        }
    };
    add("dp", layout.dp);
    add("tp", layout.tp);
    add("pp", layout.pp);
    add("cp", layout.cp);
    return text.empty() ? "dp1" : text;
}

std::string bucket_bounds_string(const HotSwitchBucket& bucket) {
    return std::to_string(bucket.min_length) + "-" +
           (bucket.max_length < 0 ? std::string() : std::to_string(bucket.max_length));
}

std::string hot_switch_spec_string(const HotSwitchSpec& spec) {
    std::string text;
    for (const HotSwitchBucket& bucket : spec.buckets) {
        text += (text.empty() ? "" : ";") + bucket_bounds_string(bucket) + ":" +
                layout_string(bucket.layout);
    }
    return text;
}

int bucket_of(const HotSwitchSpec& spec, std::int64_t length) {
    for (std::size_t b = 0; b < spec.buckets.size(); ++b) {
        if (spec.buckets[b].contains(length)) {
            return static_cast<int>(b);
        }
    }
    return -1;
}

Result<HotSwitchSpec> parse_hot_switch_spec(std::string_view spec, const HotSwitchLimits& limits) {
    HotSwitchSpec parsed;
    std::string_view rest = spec;
    while (!rest.empty()) {
        const std::size_t semicolon = rest.find(';');
        const std::string_view text = trim(rest.substr(0, semicolon));
        rest =
            semicolon == std::string_view::npos ? std::string_view{} : rest.substr(semicolon + 1);
        const std::string where = "bucket " + std::to_string(parsed.buckets.size() + 1) + " ('" +
                                  std::string(text) + "')";
        const std::size_t colon = text.find(':');
        const std::size_t dash = text.find('-');
        if (colon == std::string_view::npos || dash == std::string_view::npos || dash > colon) {
            return bad_spec(spec, where + " is not LO-HI:LAYOUT (e.g. 0-2048:dp2,tp2)");
        }
        HotSwitchBucket bucket;
        const std::string_view high = trim(text.substr(dash + 1, colon - dash - 1));
        if (!parse_count(text.substr(0, dash), bucket.min_length) ||
            (!high.empty() && !parse_count(high, bucket.max_length))) {
            return bad_spec(spec, where + ": its bounds are not token counts");
        }
        if (bucket.max_length >= 0 && bucket.max_length <= bucket.min_length) {
            return bad_spec(spec, where + " is empty: HI must exceed LO");
        }
        if (const std::string problem = parse_layout(text.substr(colon + 1), bucket.layout);
            !problem.empty()) {
            return bad_spec(spec, where + ": " + problem);
        }
        parsed.buckets.push_back(bucket);
    }
    if (parsed.buckets.empty()) {
        return bad_spec(spec, "no bucket (e.g. 0-2048:dp4;2048-:dp2,tp2)");
    }
    for (std::size_t b = 0; b < parsed.buckets.size(); ++b) {
        const HotSwitchBucket& bucket = parsed.buckets[b];
        const std::string where = "bucket " + std::to_string(b + 1) + " (" +
                                  bucket_bounds_string(bucket) + ":" +
                                  layout_string(bucket.layout) + ")";
        const std::int64_t expected = b == 0 ? 0 : parsed.buckets[b - 1].max_length;
        if (b > 0 && expected < 0) {
            return bad_spec(
                spec, "only the last bucket may be open-ended, not bucket " + std::to_string(b));
        }
        if (bucket.min_length != expected) {
            return bad_spec(
                spec, where + " starts at " + std::to_string(bucket.min_length) +
                          (bucket.min_length < expected ? ", overlapping" : ", leaving a gap") +
                          ": buckets must start at 0 and each where the last ends (" +
                          std::to_string(expected) + ")");
        }
        if (b + 1 == parsed.buckets.size() && bucket.max_length >= 0) {
            return bad_spec(spec, where + " is the last and must be open-ended (" +
                                      std::to_string(bucket.min_length) + "-:...)");
        }
        if (limits.world > 0 && bucket.layout.world() != limits.world) {
            return bad_spec(spec, where + " has " + std::to_string(bucket.layout.world()) +
                                      " ranks; every layout must cover the world of " +
                                      std::to_string(limits.world));
        }
        if (limits.heads > 0 && limits.heads % bucket.layout.tp != 0) {
            return bad_spec(spec, where + ": tp " + std::to_string(bucket.layout.tp) +
                                      " does not divide the " + std::to_string(limits.heads) +
                                      " heads");
        }
        if (limits.layers > 0 && bucket.layout.pp > limits.layers) {
            return bad_spec(spec, where + ": pp " + std::to_string(bucket.layout.pp) +
                                      " exceeds the " + std::to_string(limits.layers) + " layers");
        }
    }
    return parsed;
}

}  // namespace fulcrum::parallel
