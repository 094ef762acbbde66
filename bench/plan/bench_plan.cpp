// bench_plan: fulcrum plan's whole search for a 32-layer h4096 model at a 32K context on the
// long-tailed mix, on 256, 1024 and 4096 GPUs of 8 a node, 80 GiB each.
//
//  fast        the planner as fulcrum plan runs it: memory first, the least recomputation
//              that fits, the closed-form estimate of every layout, the best layouts
//              (max(4·top, 32)) played in full for every balancer and CP sharding
//  exhaustive  the baseline: the same search playing every layout that fits in full
//              (refine = all), i.e. the simulator on the whole memory-feasible space
// The ratio is exhaustive / fast; "top-k kept" says how many of the exhaustive search's best
// k candidates the fast search also ranks in its best k, and "best" the fast search's best
// tokens/s against the exhaustive one's.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <set>
#include <string>
#include <tuple>

#include "bench/common/bench_support.h"
#include "core/plan/planner.h"
#include "core/util/text_table.h"

using namespace fulcrum;
using bench::cell;
using bench::Clock;
using bench::seconds_since;

namespace {

using Key = std::tuple<int, int, int, int, int, int, int, bool, int, int>;

Key key_of(const plan::Candidate& c) {
    return {c.layout.grid.dp,
            c.layout.grid.tp,
            c.layout.grid.pp,
            c.layout.grid.cp,
            static_cast<int>(c.layout.schedule),
            c.layout.virtual_stages,
            static_cast<int>(c.layout.recompute),
            c.layout.sequence_parallel,
            static_cast<int>(c.balancer),
            static_cast<int>(c.sharding)};
}

std::set<Key> top_keys(const plan::PlanResult& result, int k) {
    std::set<Key> keys;
    for (std::size_t i = 0; i < std::min<std::size_t>(result.ranked.size(), k); ++i) {
        keys.insert(key_of(result.candidates[result.ranked[i]]));
    }
    return keys;
}

double best(const plan::PlanResult& result) {
    return result.ranked.empty() ? 0.0 : result.candidates[result.ranked[0]].tokens_per_second;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"bench_plan: fulcrum plan's search, fast path against every layout simulated"};
    std::vector<int> worlds = {256, 1024, 4096};
    int exhaustive_up_to = 1024;
    int top = 10;
    app.add_option("--worlds", worlds, "World sizes, e.g. 256,1024")
        ->delimiter(',')
        ->capture_default_str();
    app.add_option("--exhaustive-up-to", exhaustive_up_to,
                   "Largest world also searched exhaustively (the baseline)")
        ->capture_default_str();
    app.add_option("--top", top)->capture_default_str();
    CLI11_PARSE(app, argc, argv);

    TextTable table(
        {"GPUs", "candidates", "fit", "fast simulated", "fast s", "exhaustive simulated",
         "exhaustive s", "exhaustive / fast", "top-k kept", "best fast / exhaustive"},
        std::vector<TextTable::Align>(10, TextTable::Align::right));
    for (int world : worlds) {
        plan::PlanRequest request;
        request.model = {
            .layers = 32, .hidden = 4096, .heads = 32, .context = 32768, .vocab = 50304};
        request.world_sizes = {world};
        request.lengths = "long-tail:context=32768,median=1900";
        request.top_k = top;
        auto start = Clock::now();
        auto fast = plan::plan(request);
        const double fast_s = seconds_since(start);
        if (!fast) {
            std::fprintf(stderr, "%s\n", fast.error().message.c_str());
            return 1;
        }
        std::vector<std::string> row = {
            std::to_string(world), std::to_string(fast->counts.enumerated),
            std::to_string(fast->counts.estimated + fast->counts.simulated),
            std::to_string(fast->counts.simulated), cell(fast_s, "%.2f")};
        if (world <= exhaustive_up_to) {
            request.refine_layouts = std::numeric_limits<int>::max();
            start = Clock::now();
            auto exhaustive = plan::plan(request);
            const double exhaustive_s = seconds_since(start);
            if (!exhaustive) {
                std::fprintf(stderr, "%s\n", exhaustive.error().message.c_str());
                return 1;
            }
            const std::set<Key> a = top_keys(*fast, top), b = top_keys(*exhaustive, top);
            std::size_t kept = 0;
            for (const Key& key : b) {
                kept += a.count(key);
            }
            row.insert(row.end(), {std::to_string(exhaustive->counts.simulated),
                                   cell(exhaustive_s, "%.2f"), cell(exhaustive_s / fast_s, "%.1fx"),
                                   std::to_string(kept) + "/" + std::to_string(b.size()),
                                   cell(best(*fast) / best(*exhaustive), "%.4f")});
        } else {
            row.insert(row.end(), {"-", "-", "-", "-", "-"});
        }
        table.add_row(row);
        std::fprintf(stderr, "%d GPUs done\n", world);
    }
    std::fputs(table.render().c_str(), stdout);
    return 0;
}
