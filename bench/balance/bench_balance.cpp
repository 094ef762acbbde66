// bench_balance: packing quality and latency of the balancers on one long-tailed epoch.
//
// Every balancer packs the same global batches (cut from the stream the way a fixed-length
// data loader cuts it), so the fixed balancer, measured in the same run, is the baseline of
// every ratio. Imbalance is max/mean of per-micro-batch Σd² (WLB-LLM §3.3), averaged over
// global batches; wlb's drain at the end of the epoch is reported, not averaged in.
//
// A second table runs the lognormal body alone (docs/sources.md, "Document lengths" without the
// tail): there no single document dominates a batch, which is where a per-batch packer like ilp can
// help.
//
//   bench_balance [--documents 100000] [--context 65536] [--microbatches 16]
//                 [--ilp-time-limit 2] [--lengths SPEC ...] [--tune]
#include "core/balance/lengths.h"
#include "core/balance/packing.h"
#include "core/balance/wlb_tuning.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace {

using namespace fulcrum::balance;
using Clock = std::chrono::steady_clock;

struct Row {
    std::string balancer;
    double imbalance = 0;
    double worst_imbalance = 0;
    double mean_ms = 0;
    double max_ms = 0;
    std::string note;
};

int fail(const fulcrum::Error& error) {
    std::fprintf(stderr, "bench_balance: %s\n", error.message.c_str());
    return 1;
}

// Mean over batches of max(d_max², Σd²/M) / mean: a floor for any packing of each batch on its
// own, whatever the solver; only moving documents between batches (wlb's delay) gets below.
double per_batch_bound(const std::vector<std::vector<Document>>& batches, int microbatches,
                       std::int64_t context) {
    double sum = 0;
    for (const auto& batch : batches) {
        PackingOptions options;
        options.microbatches = microbatches;
        options.capacity = context;
        PackingState none;
        const auto fixed = pack_global_batch(batch, options, none);
        const auto m = static_cast<double>(fixed->microbatches.size());
        double total = 0;
        double longest = 0;
        for (const auto& document : batch) {
            const double d = static_cast<double>(document.length);
            total += d * d;
            longest = std::max(longest, d * d);
        }
        sum += total > 0 ? std::max(longest, total / m) / (total / m) : 1.0;
    }
    return sum / static_cast<double>(batches.size());
}

int run_table(const std::string& spec, std::size_t documents, std::int64_t context,
              int microbatches, double ilp_time_limit, std::uint64_t seed) {
    auto distribution = parse_length_spec(spec);
    if (!distribution) {
        return fail(distribution.error());
    }
    auto lengths = sample_lengths(*distribution, documents, seed, context);
    if (!lengths) {
        return fail(lengths.error());
    }
    const auto stream = make_documents(*lengths);
    auto batches = split_into_global_batches(stream, microbatches, context);
    if (!batches) {
        return fail(batches.error());
    }
    // drop_last, as data loaders do: the partial tail batch would put a few documents into a
    // few micro-batches and make the worst case an artefact of the epoch's end.
    if (batches->size() > 1) {
        batches->pop_back();
    }
    std::size_t packed_documents = 0;
    std::int64_t tokens = 0;
    for (const auto& batch : *batches) {
        packed_documents += batch.size();
        for (const auto& document : batch) {
            tokens += document.length;
        }
    }
    std::printf(
        "\n%s\n  %zu documents (last partial batch dropped), %lld tokens, %zu global batches "
        "of N=%d x S=%lld, ilp limit %.2f s\n",
        length_spec(*distribution).c_str(), packed_documents, static_cast<long long>(tokens),
        batches->size(), microbatches, static_cast<long long>(context), ilp_time_limit);

    std::vector<Row> rows;
    for (const auto balancer : {Balancer::fixed, Balancer::ilp, Balancer::wlb}) {
        PackingOptions options;
        options.balancer = balancer;
        options.microbatches = microbatches;
        options.capacity = context;
        options.ilp_time_limit_s = ilp_time_limit;
        PackingState state;
        Row row;
        row.balancer = balancer_name(balancer);
        int improved = 0;
        int within_gap = 0;
        for (const auto& batch : *batches) {
            const auto started = Clock::now();
            auto packed = pack_global_batch(batch, options, state);
            const double ms =
                std::chrono::duration<double, std::milli>(Clock::now() - started).count();
            if (!packed) {
                return fail(packed.error());
            }
            const double imbalance = imbalance_degree(packed->microbatches);
            row.imbalance += imbalance;
            row.worst_imbalance = std::max(row.worst_imbalance, imbalance);
            row.mean_ms += ms;
            row.max_ms = std::max(row.max_ms, ms);
            improved += packed->ilp.outcome == IlpSolve::Outcome::solver_improved;
            within_gap += packed->ilp.outcome == IlpSolve::Outcome::greedy_within_gap;
        }
        row.imbalance /= static_cast<double>(batches->size());
        row.mean_ms /= static_cast<double>(batches->size());
        auto drained = drain(options, state);
        if (!drained) {
            return fail(drained.error());
        }
        if (balancer == Balancer::ilp) {
            row.note = "CBC ran on " + std::to_string(batches->size() - within_gap) +
                       " batches, improved " + std::to_string(improved);
        }
        if (balancer == Balancer::wlb) {
            auto replay = replay_wlb(*batches, options);
            if (!replay) {
                return fail(replay.error());
            }
            char note[128];
            std::snprintf(note, sizeof note, "mean token delay %.2f it, drain %zu batch(es)",
                          replay->mean_delay_iterations, drained->size());
            row.note = note;
        }
        rows.push_back(row);
    }

    // ilp over a window of 4 global batches, the way WLB-LLM §3.3 reports ILP over 1/2/4.
    {
        PackingOptions options;
        options.balancer = Balancer::ilp;
        options.microbatches = microbatches;
        options.capacity = context;
        options.ilp_time_limit_s = ilp_time_limit;
        constexpr std::size_t kWindow = 4;
        Row row;
        row.balancer = "ilp w=4";
        std::size_t packed_batches = 0;
        for (std::size_t first = 0; first + kWindow <= batches->size(); first += kWindow) {
            const auto started = Clock::now();
            auto packed = pack_ilp_window(
                std::span<const std::vector<Document>>(batches->data() + first, kWindow), options);
            const double ms =
                std::chrono::duration<double, std::milli>(Clock::now() - started).count();
            if (!packed) {
                return fail(packed.error());
            }
            for (const auto& batch : *packed) {
                const double imbalance = imbalance_degree(batch.microbatches);
                row.imbalance += imbalance;
                row.worst_imbalance = std::max(row.worst_imbalance, imbalance);
                ++packed_batches;
            }
            row.mean_ms += ms / kWindow;
            row.max_ms = std::max(row.max_ms, ms / kWindow);
        }
        row.imbalance /= static_cast<double>(std::max<std::size_t>(packed_batches, 1));
        row.mean_ms /= static_cast<double>(std::max<std::size_t>(packed_batches / kWindow, 1));
        row.note = "4 batches packed jointly; documents wait <= 3 iterations";
        rows.push_back(row);
    }

    const double baseline = rows.front().imbalance;
    std::printf("  %-8s %10s %10s %9s %10s %10s  %s\n", "balancer", "imbalance", "worst",
                "vs fixed", "ms/batch", "max ms", "notes");
    for (const auto& row : rows) {
        std::printf("  %-8s %10.3f %10.3f %8.3fx %10.3f %10.3f  %s\n", row.balancer.c_str(),
                    row.imbalance, row.worst_imbalance, row.imbalance / baseline, row.mean_ms,
                    row.max_ms, row.note.c_str());
    }
    std::printf("  per-batch bound max(d_max^2, sum d^2/M)/mean: %.3f\n",
                per_batch_bound(*batches, microbatches, context));
    return 0;
}

int tune(std::size_t documents, std::int64_t context, int microbatches, std::uint64_t seed) {
    auto distribution = parse_length_spec("long-tail:context=" + std::to_string(context));
    auto lengths = sample_lengths(*distribution, documents, seed, context);
    const auto stream = make_documents(*lengths);
    const auto batches = split_into_global_batches(stream, microbatches, context);
    PackingOptions options;
    options.microbatches = microbatches;
    options.capacity = context;
    auto tuned = tune_wlb_thresholds(*batches, options);
    if (!tuned) {
        return fail(tuned.error());
    }
    std::printf("\nWLB threshold tuning, %s, %zu documents, N=%d (mean delay <= 1 it):\n  L =",
                length_spec(*distribution).c_str(), documents, microbatches);
    for (const auto threshold : tuned->thresholds) {
        std::printf(" %lld (S/%.3g)", static_cast<long long>(threshold),
                    static_cast<double>(context) / static_cast<double>(threshold));
    }
    std::printf("\n  tuned:     mean imbalance %.3f, mean delay %.2f it, max delay %.0f it\n",
                tuned->replay.mean_imbalance, tuned->replay.mean_delay_iterations,
                tuned->replay.max_delay_iterations);
    for (const auto& thresholds : {std::vector<std::int64_t>{}, default_wlb_thresholds(context)}) {
        options.wlb_thresholds = thresholds;
        const auto replay = replay_wlb(*batches, options);
        std::printf("  %s mean imbalance %.3f, mean delay %.2f it, max delay %.0f it\n",
                    thresholds.empty() ? "no queues:" : "defaults: ", replay->mean_imbalance,
                    replay->mean_delay_iterations, replay->max_delay_iterations);
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"Packing balancers on long-tailed epochs: imbalance and time per global batch"};
    std::size_t documents = 100000;
    std::int64_t context = 65536;
    int microbatches = 16;
    double ilp_time_limit = 2.0;
    std::uint64_t seed = 2025;
    std::vector<std::string> specs;
    bool tune_thresholds = false;
    app.add_option("--documents", documents, "documents per epoch");
    app.add_option("--context", context, "S: tokens per fixed-length micro-batch");
    app.add_option("--microbatches", microbatches, "N: micro-batches per global batch");
    app.add_option("--ilp-time-limit", ilp_time_limit, "CBC time limit per global batch (s)");
    app.add_option("--seed", seed, "length sampler seed");
    app.add_option("--lengths", specs,
                   "length specs (default: long-tail:context=S and its lognormal body)");
    app.add_flag("--tune", tune_thresholds,
                 "rerun the WLB threshold tuning behind default_wlb_thresholds instead");
    CLI11_PARSE(app, argc, argv);

    if (tune_thresholds) {
        return tune(std::min<std::size_t>(documents, 20000), context, microbatches, seed);
    }
    if (specs.empty()) {
        specs = {"long-tail:context=" + std::to_string(context), "lognormal:median=1900,sigma=0.9"};
    }
    std::printf(
        "imbalance: mean over global batches of max/mean per-micro-batch sum d^2 "
        "(WLB-LLM 3.3); times per global batch\n");
    for (const auto& spec : specs) {
        if (const int status =
                run_table(spec, documents, context, microbatches, ilp_time_limit, seed);
            status != 0) {
            return status;
        }
    }
    return 0;
}
