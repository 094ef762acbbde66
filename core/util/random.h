// Deterministic random numbers that do not depend on the standard library implementation.
//
// std::mt19937_64's output sequence is fixed by the standard, but std::normal_distribution
// and std::shuffle/uniform_int_distribution are not: libstdc++ and libc++ give different
// numbers for the same seed. The engine must produce the same initial weights and the same
// batches wherever it runs (serial vs parallel, one machine vs another), so it draws raw
// 64-bit words from mt19937_64 and transforms them itself.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>

namespace fulcrum {

// SplitMix64 (Steele, Lea & Flood 2014): turns (seed, stream index) into independent seeds.
constexpr std::uint64_t splitmix64(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

constexpr std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream) {
    return splitmix64(seed ^ splitmix64(stream + 1));
}

class Random {
public:
    explicit Random(std::uint64_t seed) : engine_(seed) {}

    // Uniform in [0, 1) with 53 random bits.
    double uniform() { return double(engine_() >> 11) * 0x1.0p-53; }

    // Uniform integer in [0, n), unbiased (rejects the top partial block of 2⁶⁴ mod n).
    std::uint64_t below(std::uint64_t n) {
        const std::uint64_t limit = ~std::uint64_t(0) - (~std::uint64_t(0) % n);
        std::uint64_t x;
        do {
            x = engine_();
        } while (x >= limit);
        return x % n;
    }

    // Standard normal by the Box–Muller transform; both values of each pair are used.
    double normal() {
        if (has_spare_) {
            has_spare_ = false;
            return spare_;
        }
        const double u1 = 1.0 - uniform();  // (0, 1]: log(u1) is finite
        const double u2 = uniform();
        const double r = std::sqrt(-2.0 * std::log(u1));
        const double theta = 2.0 * std::numbers::pi * u2;
        spare_ = r * std::sin(theta);
        has_spare_ = true;
        return r * std::cos(theta);
    }

private:
    std::mt19937_64 engine_;
    bool has_spare_ = false;
    double spare_ = 0.0;
};

}  // namespace fulcrum
