// bench_shard_efficiency: how fulcrum-train's CPU attention kernel (engine/model/attention.h)
// runs the short ranges that per-document CP sharding makes. The same query rows, 4096 of
// them, are cut into ranges of ℓ rows (each range one document's first ℓ tokens); time
// against the range's causal pairs (ℓ(ℓ+1) per range, causal_pair_work) is fitted as
//     t = a · pairs + o · ranges,
// a from the longest ranges. o / a, the cost of one more range in pairs, is the CPU model's
// range overhead in core/balance/cp_shard.cpp (AttentionKernelModel "cpu"); the table gives
// the efficiency of each length against the longest, the baseline of the same run.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "core/util/text_table.h"
#include "engine/model/attention.h"

using namespace fulcrum;
using namespace fulcrum::engine;
using Clock = std::chrono::steady_clock;

namespace {

struct Measured {
    int length = 0;
    std::int64_t ranges = 0;
    std::int64_t pairs = 0;
    double seconds = 0;  // forward + backward, best of the repeats
};

Measured measure(int rows, int length, int n_head, int head_size, int repeats) {
    const std::int64_t c = std::int64_t(n_head) * head_size;
    std::vector<float> qkv(std::size_t(rows) * 3 * c), out(std::size_t(rows) * c),
        lse(std::size_t(rows) * n_head), dout(std::size_t(rows) * c),
        dqkv(std::size_t(rows) * 3 * c);
    for (std::size_t i = 0; i < qkv.size(); ++i) {
        qkv[i] = 0.01f * float(int(i * 2654435761u % 200) - 100);
    }
    std::fill(dout.begin(), dout.end(), 0.01f);
    std::vector<AttentionSpan> spans;
    Measured m;
    m.length = length;
    for (int begin = 0; begin < rows; begin += length) {
        AttentionSpan span;
        span.q_begin = begin;
        span.kv_begin = begin;
        span.length = std::min(length, rows - begin);
        spans.push_back(span);
        m.pairs += std::int64_t(span.length) * (span.length + 1);
    }
    m.ranges = std::int64_t(spans.size());
    m.seconds = 1e30;
    for (int r = 0; r < repeats; ++r) {
        const auto start = Clock::now();
        kernels::attention_forward<float>({out.data(), c}, lse.data(), {qkv.data(), 3 * c},
                                          {qkv.data() + c, 3 * c}, {qkv.data() + 2 * c, 3 * c},
                                          spans, n_head, head_size);
        std::fill(dqkv.begin(), dqkv.end(), 0.0f);
        kernels::attention_backward<float>(
            {dqkv.data(), 3 * c}, {dqkv.data() + c, 3 * c}, {dqkv.data() + 2 * c, 3 * c},
            {dout.data(), c}, {qkv.data(), 3 * c}, {qkv.data() + c, 3 * c},
            {qkv.data() + 2 * c, 3 * c}, {out.data(), c}, lse.data(), spans, n_head, head_size);
        m.seconds =
            std::min(m.seconds, std::chrono::duration<double>(Clock::now() - start).count());
    }
    return m;
}

}  // namespace

int main(int argc, char** argv) {
    int rows = 4096;
    int heads = 4;
    int head_size = 16;  // fulcrum-train's default model: hidden 64, 4 heads
    int repeats = 5;
    CLI::App app{"CPU attention time of short ranges against long ones (per-doc CP shards)"};
    app.add_option("--rows", rows, "Query rows in all")->capture_default_str();
    app.add_option("--heads", heads)->capture_default_str();
    app.add_option("--head-size", head_size)->capture_default_str();
    app.add_option("--repeats", repeats)->capture_default_str();
    CLI11_PARSE(app, argc, argv);

    std::vector<Measured> measured;
    for (int length : {1024, 512, 256, 128, 64, 32, 16, 8, 4, 2, 1}) {
        measured.push_back(measure(rows, length, heads, head_size, repeats));
    }
    // a: seconds per pair on the longest ranges, where the per-range term is negligible.
    const Measured& longest = measured.front();
    const double a = longest.seconds / double(longest.pairs);
    // o by least squares on t − a·pairs = o·ranges over the rest.
    double num = 0, den = 0;
    for (const Measured& m : measured) {
        num += (m.seconds - a * double(m.pairs)) * double(m.ranges);
        den += double(m.ranges) * double(m.ranges);
    }
    const double o = std::max(0.0, num / den);
    TextTable table({"range rows", "ranges", "pairs", "time", "ns per pair", "efficiency vs 1024",
                     "model a·pairs + o·ranges"},
                    {TextTable::Align::right, TextTable::Align::right, TextTable::Align::right,
                     TextTable::Align::right, TextTable::Align::right, TextTable::Align::right,
                     TextTable::Align::right});
    for (const Measured& m : measured) {
        char time[32], per_pair[32], efficiency[32], model[32];
        std::snprintf(time, sizeof time, "%.2f ms", m.seconds * 1e3);
        std::snprintf(per_pair, sizeof per_pair, "%.2f", m.seconds / double(m.pairs) * 1e9);
        std::snprintf(efficiency, sizeof efficiency, "%.2f", a * double(m.pairs) / m.seconds);
        std::snprintf(model, sizeof model, "%.2f ms",
                      (a * double(m.pairs) + o * double(m.ranges)) * 1e3);
        table.add_row({std::to_string(m.length), std::to_string(m.ranges), std::to_string(m.pairs),
                       time, per_pair, efficiency, model});
    }
    std::printf("CPU attention, forward + backward, %d query rows, %d heads of %d, best of %d\n\n",
                rows, heads, head_size, repeats);
    std::fputs(table.render().c_str(), stdout);
    std::printf("\nrange overhead o / a = %.0f pairs (core/balance/cp_shard.cpp, kernel \"cpu\")\n",
                o / a);
    return 0;
}
