// Document length distributions: the workload the balancers are measured against.
//
// Every sampler is deterministic for a seed on every platform: it draws raw 64-bit words
// from std::mt19937_64 (whose sequence the standard fixes) and applies its own transforms,
// never std::*_distribution (whose output the standard leaves to each library).
//
// Spec strings, as a command line takes them:
//   lognormal:median=1900,sigma=0.9
//   long-tail:context=32768[,median=1900,sigma=0.9,tail=0.01]
//   file:PATH            (one length per line; blank lines and lines starting with # skipped)
#pragma once

#include "core/util/result.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace fulcrum::balance {

// The body of real document mixes: docs/sources.md, "Document lengths" puts a ProLong-like mix
// close to a lognormal with median ≈ 1,900 tokens and σ ≈ 0.90 up to its p99.
struct LognormalLengths {
    double median = 1900.0;
    double sigma = 0.9;
};

// Lognormal body plus a log-uniform tail from the body's p99 up to the context length
// (docs/sources.md, "Document lengths": heavier than lognormal beyond p99). With the defaults the
// longest 1% of documents carry 31% of Σd² at a 32K context, 50% at 64K and 72% at 128K (12% of
// tokens at 64K), which is what makes packing by arrival order unbalanced.
struct LongTailLengths {
    double median = 1900.0;
    double sigma = 0.9;
    std::int64_t context = 32768;
    double tail_fraction = 0.01;
};

// Measured lengths, replayed in file order.
struct LengthFile {
    std::string path;
};

using LengthDistribution = std::variant<LognormalLengths, LongTailLengths, LengthFile>;

Result<LengthDistribution> parse_length_spec(std::string_view spec);

// The spec string that parse_length_spec reads back to the same distribution.
std::string length_spec(const LengthDistribution& distribution);

// Reads positive integer token counts, one per line. Errors name the file and the line.
Result<std::vector<std::int64_t>> read_length_file(const std::string& path);

// `count` lengths clamped to [1, max_length]. A LengthFile is replayed from its first line,
// wrapping around when `count` exceeds it, so the arrival order of real data is kept; the
// seed does not affect it.
Result<std::vector<std::int64_t>> sample_lengths(const LengthDistribution& distribution,
                                                 std::size_t count, std::uint64_t seed,
                                                 std::int64_t max_length);

}  // namespace fulcrum::balance
