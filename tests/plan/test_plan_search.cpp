// fulcrum plan's search (core/plan/planner.h) on cases checkable by hand: every factorisation
// of a tiny world, the exact layer split against brute force, the reasons a layout is
// dropped, and the ranking against the simulator playing the same candidates.
#include <QtTest>

#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <tuple>

#include "core/plan/planner.h"
#include "core/sim/simulator.h"

using namespace fulcrum;
using namespace fulcrum::plan;

namespace {

// A 4-layer model small enough to simulate in milliseconds.
PlanRequest tiny_request(int world) {
    PlanRequest request;
    request.model = {.layers = 4, .hidden = 64, .heads = 4, .context = 256, .vocab = 256};
    request.world_sizes = {world};
    request.gpus_per_node = 4;
    request.global_batch = 8;
    request.lengths = "long-tail:context=256,median=32";
    request.documents = 400;
    request.top_k = 3;
    return request;
}

// Every way to put `layers` layers on `stages` stages, at least one each.
void compositions(int layers, int stages, std::vector<int>& prefix,
                  const std::function<void(const std::vector<int>&)>& visit) {
    if (stages == 1) {
        prefix.push_back(layers);
        visit(prefix);
        prefix.pop_back();
        return;
    }
    for (int n = 1; n <= layers - (stages - 1); ++n) {
        prefix.push_back(n);
        compositions(layers - n, stages - 1, prefix, visit);
        prefix.pop_back();
    }
}

double bottleneck(const std::vector<int>& split, double layer_ns, double first_ns, double last_ns) {
    double worst = 0;
    for (std::size_t s = 0; s < split.size(); ++s) {
        const double extra = (s == 0 ? first_ns : 0.0) + (s + 1 == split.size() ? last_ns : 0.0);
        worst = std::max(worst, split[s] * layer_ns + extra);
    }
    return worst;
}

}  // namespace

class PlanSearchTest : public QObject {
    Q_OBJECT

private slots:
    // 4 GPUs, 4 GPUs a node: the ten ordered factorisations dp·tp·pp·cp = 4 are all
    // considered, and each that cannot run says why.
    void tinyWorldEnumeratesEveryFactorisation() {
        PlanRequest request = tiny_request(4);
        auto result = plan::plan(request);
        QVERIFY2(result, result ? "" : result.error().message.c_str());
        std::set<std::tuple<int, int, int, int>> grids;
        for (const Candidate& c : result->candidates) {
            grids.insert({c.grid.dp, c.grid.tp, c.grid.pp, c.grid.cp});
            QCOMPARE(c.grid.world(), 4);
            if (c.status == CandidateStatus::infeasible || c.status == CandidateStatus::dominated) {
                QVERIFY(!c.reason.empty());
                QVERIFY(!c.reason_kind.empty());
            }
        }
        QCOMPARE(grids.size(), std::size_t{10});
        // Every kept layout was estimated; only the least recomputation that fits is kept.
        QCOMPARE(result->counts.enumerated, result->counts.infeasible + result->counts.dominated +
                                                result->counts.estimated +
                                                result->counts.simulated);
        QVERIFY(result->counts.simulated > 0);
        for (const Candidate& c : result->candidates) {
            if (c.status == CandidateStatus::dominated) {
                QVERIFY(c.recompute != Recompute::none);
            }
        }
    }

    // The dynamic programme's bottleneck equals the best of every composition, memory caps
    // included, on random costs.
    void layerSplitMatchesBruteForce() {
        std::mt19937 random(7);
        std::uniform_real_distribution<double> cost(0.5, 3.0);
        for (int trial = 0; trial < 200; ++trial) {
            const int layers = 2 + static_cast<int>(random() % 9);
            const int stages = 1 + static_cast<int>(random() % std::min(layers, 5));
            const double layer_ns = cost(random), first_ns = cost(random) * (random() % 2);
            const double last_ns = cost(random) * 3;
            const int cap0 = 1 + static_cast<int>(random() % layers);
            const auto fits = [&](int stage, int n) { return stage != 0 || n <= cap0; };
            double best = std::numeric_limits<double>::infinity();
            std::vector<int> prefix;
            compositions(layers, stages, prefix, [&](const std::vector<int>& split) {
                bool ok = true;
                for (std::size_t s = 0; s < split.size(); ++s) {
                    ok = ok && fits(static_cast<int>(s), split[s]);
                }
                if (ok) {
                    best = std::min(best, bottleneck(split, layer_ns, first_ns, last_ns));
                }
            });
            const std::vector<int> split =
                split_layers(layers, stages, layer_ns, first_ns, last_ns, fits);
            if (best == std::numeric_limits<double>::infinity()) {
                QVERIFY(split.empty());
                continue;
            }
            QCOMPARE(static_cast<int>(split.size()), stages);
            QCOMPARE(std::accumulate(split.begin(), split.end(), 0), layers);
            QVERIFY(fits(0, split[0]));
            QCOMPARE(bottleneck(split, layer_ns, first_ns, last_ns), best);
        }
        // By hand: 8 layers of 1 on 2 stages, the head worth 2 layers: 5 + 3.
        QCOMPARE(split_layers(8, 2, 1.0, 0.0, 2.0, [](int, int) { return true; }),
                 (std::vector<int>{5, 3}));
        // Stage 0 holds at most 3 (its activations): 3 + 5.
        QCOMPARE(split_layers(8, 2, 1.0, 0.0, 2.0, [](int s, int n) { return s != 0 || n <= 3; }),
                 (std::vector<int>{3, 5}));
    }

    // Why layouts are dropped: too little memory for the model state, TP that does not
    // divide the heads, a batch that does not split over DP.
    void infeasibleReasons() {
        PlanRequest request = tiny_request(8);
        request.model.heads = 2;
        request.model.hidden = 64;
        request.global_batch = 4;
        request.gpus_per_node = 8;
        request.gpu_memory_gib = 1e-5;  // 10 KiB: not even the weights
        auto result = plan::plan(request);
        QVERIFY2(result, result ? "" : result.error().message.c_str());
        QVERIFY(result->ranked.empty());
        std::map<std::string, std::int64_t> reasons(result->counts.infeasible_by_reason.begin(),
                                                    result->counts.infeasible_by_reason.end());
        QVERIFY(reasons.count("model state exceeds memory") == 1);
        QVERIFY(reasons.count("tp does not divide the heads") == 1);  // tp 4, 8 for 2 heads
        QVERIFY(reasons.count("batch not divisible by dp") == 1);     // dp 8 for 4 sequences
        for (const Candidate& c : result->candidates) {
            if (c.reason_kind == "model state exceeds memory") {
                QVERIFY(c.reason.find("iB usable") != std::string::npos);
                QVERIFY(c.memory.total_gib > 0);
            }
        }
    }

    // The ranking is the simulator's: each ranked candidate's tokens/s is what simulate()
    // plays for simulation_config(candidate), best first.
    void rankingIsTheSimulators() {
        PlanRequest request = tiny_request(8);
        request.gpus_per_node = 8;
        auto result = plan::plan(request);
        QVERIFY2(result, result ? "" : result.error().message.c_str());
        QVERIFY(result->ranked.size() >= 3);
        double previous = std::numeric_limits<double>::infinity();
        for (std::size_t i = 0; i < 3; ++i) {
            const Candidate& c = result->candidates[result->ranked[i]];
            QVERIFY(c.tokens_per_second <= previous);
            previous = c.tokens_per_second;
            auto played = sim::simulate(simulation_config(request, c), nullptr);
            QVERIFY2(played, played ? "" : played.error().message.c_str());
            QCOMPARE(played->tokens_per_second, c.tokens_per_second);
            QCOMPARE(played->mean_step_ns, c.step_ns);
            QVERIFY(c.train_command.find("fulcrum-train --dp " + std::to_string(c.grid.dp)) !=
                    std::string::npos);
            QVERIFY(c.simulate_command.find("--micro-batches " + std::to_string(c.microbatches)) !=
                    std::string::npos);
        }
    }

    // The simulator plays uneven stages: moving a layer off the last stage (which holds the LM
    // head) changes the step, and a split that does not sum to the layers is refused.
    void simulatorPlaysStageLayers() {
        sim::SimulationConfig config;
        config.model = {.layers = 4, .hidden = 64, .heads = 4, .context = 256, .vocab = 4096};
        config.grid = {.dp = 1, .tp = 1, .pp = 2, .cp = 1};
        config.lengths = "long-tail:context=256,median=32";
        config.documents = 200;
        config.steps = 1;
        auto equal = sim::simulate(config, nullptr);
        QVERIFY(equal);
        config.stage_layers = {3, 1};
        auto uneven = sim::simulate(config, nullptr);
        QVERIFY2(uneven, uneven ? "" : uneven.error().message.c_str());
        QVERIFY(uneven->mean_step_ns != equal->mean_step_ns);
        config.stage_layers = {2, 1};
        QVERIFY(!sim::validate(config));
        config.stage_layers = {2, 2};
        auto same = sim::simulate(config, nullptr);
        QVERIFY(same);
        QCOMPARE(same->mean_step_ns, equal->mean_step_ns);

        // Interleaved: one count per model chunk (p·v), as fulcrum-train takes them; the even
        // split given explicitly plays the same step, a stage's chunks summing to its layers.
        config.schedule = parallel::PipelineSchedule::interleaved;
        config.virtual_stages = 2;
        config.microbatches = 4;
        config.stage_layers = {};
        auto interleaved = sim::simulate(config, nullptr);
        QVERIFY2(interleaved, interleaved ? "" : interleaved.error().message.c_str());
        config.stage_layers = {1, 1, 1, 1};
        auto explicit_even = sim::simulate(config, nullptr);
        QVERIFY(explicit_even);
        QCOMPARE(explicit_even->mean_step_ns, interleaved->mean_step_ns);
        config.stage_layers = {2, 2};  // one count a stage is not one a model chunk
        QVERIFY(!sim::validate(config));
        QCOMPARE(sim::stage_parameters(config.model, config.grid, 0, {1, 1, 1, 1}, 2),
                 sim::stage_parameters(config.model, config.grid, 0, {}, 2));
    }

    // The planner's estimate against the simulator with alike micro-batches (every document
    // exactly the context): the same step without a pipeline, and within 5% on four stages,
    // whose stages differ only by the embedding and the LM head.
    void estimateMatchesAlikeMicroBatches() {
        sim::SimulationConfig config;
        config.model = {.layers = 8, .hidden = 256, .heads = 4, .context = 512, .vocab = 256};
        config.grid = {.dp = 2, .tp = 2, .pp = 1, .cp = 2};
        config.microbatches = 8;
        config.steps = 1;
        config.document_lengths.assign(64, 512);
        const std::int64_t pairs = 512 * 513 / 2;
        for (int pp : {1, 4}) {
            config.grid.pp = pp;
            auto played = sim::simulate(config, nullptr);
            QVERIFY2(played, played ? "" : played.error().message.c_str());
            const sim::StepEstimate estimate =
                sim::estimate_step(config, sim::config_costs(config), 512, pairs);
            const double error =
                std::abs(estimate.step_ns - played->mean_step_ns) / played->mean_step_ns;
            QVERIFY2(pp == 1 ? error < 1e-6 : error < 0.05,
                     qPrintable(QString("pp %1: estimate %2 ns, played %3 ns")
                                    .arg(pp)
                                    .arg(estimate.step_ns)
                                    .arg(played->mean_step_ns)));
        }
    }
};

QTEST_GUILESS_MAIN(PlanSearchTest)
#include "test_plan_search.moc"
