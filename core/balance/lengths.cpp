#include "core/balance/lengths.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <numbers>
#include <optional>
#include <random>
#include <sstream>

namespace fulcrum::balance {
namespace {

Error invalid(std::string message) {
    return Error{ErrorCode::invalid_input, std::move(message)};
}

constexpr std::string_view kSpecForms =
    "expected lognormal:median=M,sigma=S, long-tail:context=C[,median=M,sigma=S,tail=F] "
    "or file:PATH";

// z-score of the 99th percentile of a standard normal: the tail starts where the lognormal
// body stops describing the data (docs/sources.md, "Document lengths").
constexpr double kP99Z = 2.3263478740408408;

std::string_view trim(std::string_view text) {
    const auto first = text.find_first_not_of(" \t\r\n");
    if (first == std::string_view::npos) {
        return {};
    }
    const auto last = text.find_last_not_of(" \t\r\n");
    return text.substr(first, last - first + 1);
}

std::optional<double> parse_double(std::string_view text) {
    double value = 0;
    const auto* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (ec != std::errc() || ptr != end || !std::isfinite(value)) {
        return std::nullopt;
    }
    return value;
}

std::optional<std::int64_t> parse_integer(std::string_view text) {
    std::int64_t value = 0;
    const auto* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (ec != std::errc() || ptr != end) {
        return std::nullopt;
    }
    return value;
}

// Uniform in [0, 1) from the top 53 bits: exact in a double, identical everywhere.
double uniform01(std::mt19937_64& engine) {
    return static_cast<double>(engine() >> 11) * 0x1.0p-53;
}

// Box–Muller, keeping the cosine branch only so each draw consumes exactly two words.
double standard_normal(std::mt19937_64& engine) {
    const double u1 = 1.0 - uniform01(engine);  // (0, 1]: log stays finite
    const double u2 = uniform01(engine);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

std::int64_t clamp_length(double tokens, std::int64_t max_length) {
    if (!(tokens < static_cast<double>(max_length))) {
        return max_length;
    }
    return std::max<std::int64_t>(1, std::llround(tokens));
}

// key=value pairs after the colon; `apply` returns an error message or empty.
template <typename Apply>
Status parse_parameters(std::string_view spec, std::string_view kind, std::string_view params,
                        Apply apply) {
    while (!params.empty()) {
        const auto comma = params.find(',');
        const auto item = trim(params.substr(0, comma));
        params = comma == std::string_view::npos ? std::string_view{} : params.substr(comma + 1);
        const auto equals = item.find('=');
        if (item.empty() || equals == std::string_view::npos) {
            return invalid("length spec '" + std::string(spec) + "': '" + std::string(item) +
                           "' is not key=value; " + std::string(kSpecForms));
        }
        const auto key = trim(item.substr(0, equals));
        const auto value_text = trim(item.substr(equals + 1));
        const auto value = parse_double(value_text);
        if (!value) {
            return invalid("length spec '" + std::string(spec) + "': " + std::string(key) + "='" +
                           std::string(value_text) + "' is not a number");
        }
        if (const std::string problem = apply(key, *value); !problem.empty()) {
            return invalid("length spec '" + std::string(spec) + "': " + problem + " (" +
                           std::string(kind) + ")");
        }
    }
    return {};
}

std::string check_shape(std::string_view key, double value, double& median, double& sigma) {
    if (key == "median") {
        if (value < 1.0) {
            return "median must be at least 1 token, got " + std::to_string(value);
        }
        median = value;
        return {};
    }
    if (key == "sigma") {
        if (value <= 0.0 || value > 10.0) {
            return "sigma must be in (0, 10], got " + std::to_string(value);
        }
        sigma = value;
        return {};
    }
    return "unknown parameter '" + std::string(key) + "'";
}

std::string format_number(double value) {
    std::ostringstream out;
    out << value;
    return out.str();
}

}  // namespace

Result<LengthDistribution> parse_length_spec(std::string_view spec) {
    const auto colon = spec.find(':');
    const auto kind = trim(spec.substr(0, colon));
    const auto params =
        colon == std::string_view::npos ? std::string_view{} : spec.substr(colon + 1);

    if (kind == "file") {
        const auto path = trim(params);
        if (path.empty()) {
            return invalid("length spec '" + std::string(spec) +
                           "': file needs a path, as in file:lengths.txt");
        }
        return LengthDistribution{LengthFile{std::string(path)}};
    }
    if (kind == "lognormal") {
        LognormalLengths lengths;
        auto status = parse_parameters(spec, kind, params, [&](std::string_view key, double value) {
            return check_shape(key, value, lengths.median, lengths.sigma);
        });
        if (!status) {
            return status.error();
        }
        return LengthDistribution{lengths};
    }
    if (kind == "long-tail") {
        LongTailLengths lengths;
        auto status = parse_parameters(spec, kind, params, [&](std::string_view key, double value) {
            if (key == "context") {
                if (value < 1.0 || value != std::floor(value) || value > 1e9) {
                    return "context must be a whole number of tokens in [1, 1e9], got " +
                           format_number(value);
                }
                lengths.context = static_cast<std::int64_t>(value);
                return std::string{};
            }
            if (key == "tail") {
                if (value < 0.0 || value > 1.0) {
                    return "tail is the fraction of documents in the tail, in [0, 1], got " +
                           format_number(value);
                }
                lengths.tail_fraction = value;
                return std::string{};
            }
            return check_shape(key, value, lengths.median, lengths.sigma);
        });
        if (!status) {
            return status.error();
        }
        return LengthDistribution{lengths};
    }
    return invalid("unknown length distribution '" + std::string(kind) + "' in '" +
                   std::string(spec) + "'; " + std::string(kSpecForms));
}

std::string length_spec(const LengthDistribution& distribution) {
    if (const auto* body = std::get_if<LognormalLengths>(&distribution)) {
        return "lognormal:median=" + format_number(body->median) +
               ",sigma=" + format_number(body->sigma);
    }
    if (const auto* mix = std::get_if<LongTailLengths>(&distribution)) {
        return "long-tail:context=" + std::to_string(mix->context) +
               ",median=" + format_number(mix->median) + ",sigma=" + format_number(mix->sigma) +
               ",tail=" + format_number(mix->tail_fraction);
    }
    return "file:" + std::get<LengthFile>(distribution).path;
}

Result<std::vector<std::int64_t>> read_length_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) {
        return Error{ErrorCode::io, "cannot open length file '" + path +
                                        "': check the path (one token count per line)"};
    }
    std::vector<std::int64_t> lengths;
    std::string line;
    for (std::size_t line_number = 1; std::getline(in, line); ++line_number) {
        const auto text = trim(line);
        if (text.empty() || text.front() == '#') {
            continue;
        }
        const auto value = parse_integer(text);
        if (!value || *value < 1) {
            return invalid(path + ":" + std::to_string(line_number) + ": '" + std::string(text) +
                           "' is not a document length; each line must hold one positive "
                           "integer token count");
        }
        lengths.push_back(*value);
    }
    if (in.bad()) {
        return Error{ErrorCode::io, "reading length file '" + path + "' failed"};
    }
    if (lengths.empty()) {
        return invalid("length file '" + path +
                       "' holds no lengths; write one token count per line");
    }
    return lengths;
}

Result<std::vector<std::int64_t>> sample_lengths(const LengthDistribution& distribution,
                                                 std::size_t count, std::uint64_t seed,
                                                 std::int64_t max_length) {
    if (max_length < 1) {
        return invalid("max_length must be at least 1 token, got " + std::to_string(max_length));
    }
    std::vector<std::int64_t> lengths;
    lengths.reserve(count);

    if (const auto* file = std::get_if<LengthFile>(&distribution)) {
        auto measured = read_length_file(file->path);
        if (!measured) {
            return measured.error();
        }
        for (std::size_t i = 0; i < count; ++i) {
            lengths.push_back(std::min(measured->at(i % measured->size()), max_length));
        }
        return lengths;
    }

    std::mt19937_64 engine(seed);
    if (const auto* body = std::get_if<LognormalLengths>(&distribution)) {
        const double mu = std::log(body->median);
        for (std::size_t i = 0; i < count; ++i) {
            lengths.push_back(
                clamp_length(std::exp(mu + body->sigma * standard_normal(engine)), max_length));
        }
        return lengths;
    }

    const auto& mix = std::get<LongTailLengths>(distribution);
    const double mu = std::log(mix.median);
    const double context = static_cast<double>(mix.context);
    const double tail_low = std::min(context, mix.median * std::exp(kP99Z * mix.sigma));
    const double log_low = std::log(tail_low);
    const double log_span = std::log(context) - log_low;
    for (std::size_t i = 0; i < count; ++i) {
        double tokens = 0;
        if (uniform01(engine) < mix.tail_fraction) {
            tokens = std::exp(log_low + log_span * uniform01(engine));
        } else {
            tokens = std::exp(mu + mix.sigma * standard_normal(engine));
        }
        lengths.push_back(clamp_length(tokens, std::min(max_length, mix.context)));
    }
    return lengths;
}

}  // namespace fulcrum::balance
