// fulcrum plan's search (core/plan/planner.h) on cases checkable by hand: every factorisation
// of a tiny world, the exact layer split against brute force, the reasons a layout is
// dropped, and the ranking against the simulator playing the same candidates.
#include <QTest>

#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <tuple>

#include "app/launch/command_line.h"
#include "core/plan/planner.h"
#include "core/sim/hardware.h"
#include "core/sim/simulator.h"

using namespace fulcrum;
using namespace fulcrum::plan;
using namespace fulcrum::parallel;

namespace {

sim::HardwareAssumptions must_preset(const char* name) {
    auto preset = sim::hardware_preset(name);
    if (!preset) {
        qFatal("%s", preset.error().message.c_str());
    }
    return *preset;
}

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

// A calibration of `grid` as a capture of it would fit: its passes (every stage, forward and
// backward, per-token cost `per_token`) and only the collectives it runs, each with latency
// `latency` so the test can tell whose it is.
sim::Calibration run_of(const parallel::GridShape& grid, bool sequence_parallel, double per_token,
                        double latency) {
    sim::Calibration run;
    run.grid = grid;
    run.sequence_parallel = sequence_parallel;
    run.origin = {.layers = 4, .pp = grid.pp, .hidden = 64, .tp = grid.tp};
    for (int stage = 0; stage < grid.pp; ++stage) {
        for (Phase phase : {Phase::forward, Phase::backward}) {
            analysis::PassCost pass;
            pass.stage = static_cast<std::int16_t>(stage);
            pass.phase = phase;
            pass.per_token_ns = per_token;
            run.model.passes.push_back(pass);
        }
    }
    const auto add = [&](analysis::Role role, std::string_view name) {
        analysis::CollectiveCost cost;
        cost.role = role;
        cost.name = std::string(name);
        cost.latency_ns = latency;
        cost.per_byte_ns = 0.01;
        run.model.collectives.push_back(cost);
    };
    if (grid.pp > 1) {
        add(analysis::Role::pipeline_recv, sim::kRecvActivations);
        add(analysis::Role::pipeline_recv, sim::kRecvGradients);
        // fulcrum-train sums the tied embedding's gradient between the first and last stage.
        add(analysis::Role::embedding_collective, sim::kEmbeddingAllReduce);
    }
    if (grid.tp > 1 && !sequence_parallel) {
        add(analysis::Role::tp_collective, sim::kTpAllReduce);
    }
    if (grid.tp > 1 && sequence_parallel) {
        add(analysis::Role::tp_collective, sim::kTpAllGather);
        add(analysis::Role::tp_collective, sim::kTpReduceScatter);
    }
    if (grid.cp > 1) {
        add(analysis::Role::cp_collective, sim::kCpAllGather);
        add(analysis::Role::cp_collective, sim::kCpReduceScatter);
    }
    if (grid.dp * grid.cp > 1) {
        add(analysis::Role::dp_collective, sim::kDpAllReduce);
    }
    run.model.optimizer_ns = 1000;
    return run;
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
            grids.insert({c.layout.grid.dp, c.layout.grid.tp, c.layout.grid.pp, c.layout.grid.cp});
            QCOMPARE(c.layout.grid.world(), 4);
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
        // A dominated candidate costs more than the rung that fits: it recomputes, or offloads.
        for (const Candidate& c : result->candidates) {
            if (c.status == CandidateStatus::dominated) {
                QVERIFY(c.layout.recompute != Recompute::none || c.offload);
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

    // FPDT's question on Llama 3 8B over one A100 node: contexts double until none fits; the
    // short ones fit without recomputation, the long ones only with full recomputation's
    // checkpoints offloaded (and, from some length, FPDT's chunks), and the longest stops where
    // the offloads no longer fit the node's host memory.
    void longestContextFollowsTheMemoryTechniques() {
        PlanRequest request;
        request.model = {.layers = 32,
                         .hidden = 4096,
                         .heads = 32,
                         .context = 32768,
                         .vocab = 128256,
                         .architecture = parallel::Architecture::llama,
                         .kv_heads = 8,
                         .ffn_hidden = 14336};
        request.world_sizes = {8};
        request.global_batch = 8;
        request.gpu_memory_gib = 80;
        request.hardware = must_preset("a100");
        request.space.balancers = {balance::Balancer::fixed};
        request.space.zero_stages = {1, 2, 3};
        request.space.cp_impls = {parallel::ContextParallelism::all_gather,
                                  parallel::ContextParallelism::ulysses};
        request.top_k = 1;
        auto plans = plan::plan_contexts(request, 64 << 20);
        QVERIFY2(plans, plans ? "" : plans.error().message.c_str());
        QVERIFY(plans->size() >= 3);
        QCOMPARE(plans->front().context, 32768);
        QVERIFY(plans->front().best);
        QCOMPARE(plans->front().best->layout.recompute, Recompute::none);
        QVERIFY(!plans->back().best);  // it stopped at the first that did not fit
        const plan::ContextPlan& longest = (*plans)[plans->size() - 2];
        QVERIFY(longest.best);
        QVERIFY(longest.best->layout.offload_checkpoints);
        QVERIFY(longest.context < (64 << 20));
        for (std::size_t i = 1; i < plans->size(); ++i) {
            QCOMPARE((*plans)[i].context, 2 * (*plans)[i - 1].context);
        }
        // fulcrum-train has no Llama layer: the plan says so where a command line would go (not
        // the offloaded checkpoints, which it has), and gives the simulate line.
        PlanRequest at_longest = request;
        at_longest.model.context = longest.context;
        at_longest.document_lengths.assign(8, longest.context);
        auto planned = plan::plan(at_longest);
        QVERIFY(planned && !planned->ranked.empty());
        launch::write_commands(at_longest, *planned);
        const Candidate& top = planned->candidates[planned->ranked.front()];
        QVERIFY2(top.train_command.starts_with("# fulcrum-train has no Llama shapes"),
                 top.train_command.c_str());
        QVERIFY(top.layout.offload_checkpoints);
        QCOMPARE(top.train_command,
                 std::string("# fulcrum-train has no Llama shapes yet; simulate it:"));
        QVERIFY(top.simulate_command.find("--offload-checkpoints") != std::string::npos);
        QVERIFY(top.simulate_command.find("--architecture llama") != std::string::npos);
        // Half the host memory: a shorter longest context, refused for its offloads.
        request.host_memory_gib /= 2;
        auto halved = plan::plan_contexts(request, 64 << 20);
        QVERIFY(halved);
        QCOMPARE(halved->size(), plans->size() - 1);
        request.model.context = (*halved).back().context;
        request.world_sizes = {8};
        request.document_lengths.assign(8, request.model.context);
        auto refused = plan::plan(request);
        QVERIFY(refused);
        QVERIFY(refused->ranked.empty());
        std::map<std::string, std::int64_t> reasons(refused->counts.infeasible_by_reason.begin(),
                                                    refused->counts.infeasible_by_reason.end());
        QVERIFY(reasons.count("offloads exceed host memory") == 1);
        // A first context past the last is refused with both named.
        QVERIFY(!plan::plan_contexts(request, 1024));
    }

    // Placement is searched where it matters: on a described network a layout whose DP and
    // pipeline groups both leave the node is played under Megatron-LM's order and under
    // tp-cp-pp-dp, each at its own price; one that places its groups alike either way, and any
    // layout on flat rings, under the first order alone.
    void rankOrdersWhereTheyMatter() {
        PlanRequest request;
        request.model = {.layers = 8, .hidden = 2048, .heads = 16, .context = 2048, .vocab = 1024};
        request.world_sizes = {32};
        request.gpus_per_node = 8;
        request.global_batch = 64;
        request.lengths = "long-tail:context=2048,median=512";
        request.documents = 400;
        request.steps = 1;
        request.top_k = 5;
        request.refine_layouts = 400;
        request.space.balancers = {balance::Balancer::fixed};
        request.space.schedules = {PipelineSchedule::one_f_one_b};
        request.space.recomputes = {Recompute::none};
        request.space.sequence_parallel = false;
        request.hardware = must_preset("h100");
        auto planned = plan::plan(request);
        QVERIFY2(planned.ok(), planned.ok() ? "" : planned.error().message.c_str());
        std::map<std::string, std::set<std::string>> orders_of;  // grid → orders played
        std::map<std::pair<std::string, std::string>, double> speed;
        for (const std::size_t i : planned->ranked) {
            const Candidate& c = planned->candidates[i];
            const std::string grid = layout_string(c.layout.grid);
            orders_of[grid].insert(rank_order_name(c.layout.rank_order));
            speed[{grid, rank_order_name(c.layout.rank_order)}] = c.tokens_per_second;
        }
        // dp 2 × tp 4 × pp 4: DP pairs two ranks of one node under tp-cp-dp-pp, of two nodes
        // under tp-cp-pp-dp, and the pipeline the other way round.
        QCOMPARE(orders_of["dp2,tp4,pp4"], (std::set<std::string>{"tp-cp-dp-pp", "tp-cp-pp-dp"}));
        const double megatron = speed[{"dp2,tp4,pp4", "tp-cp-dp-pp"}];
        const double pipeline_first = speed[{"dp2,tp4,pp4", "tp-cp-pp-dp"}];
        QVERIFY(megatron > 0 && pipeline_first > 0 && megatron != pipeline_first);
        // No pipeline, or no data parallelism: both orders place alike.
        QCOMPARE(orders_of["dp4,tp8"], std::set<std::string>{"tp-cp-dp-pp"});
        QCOMPARE(orders_of["tp8,pp4"], std::set<std::string>{"tp-cp-dp-pp"});
        // The printed simulate line names the order it was played under.
        for (const std::size_t i : planned->ranked) {
            const Candidate& c = planned->candidates[i];
            if (c.layout.rank_order == kFulcrumOrder) {
                const std::string line =
                    launch::shell_quote(launch::simulate_arguments(request, c));
                QVERIFY2(line.find("--rank-order tp-cp-pp-dp") != std::string::npos, line.c_str());
                break;
            }
        }
        // Flat rings: one order for every layout.
        request.hardware = sim::HardwareAssumptions{};
        auto flat = plan::plan(request);
        QVERIFY(flat.ok());
        for (const Candidate& c : flat->candidates) {
            QVERIFY(c.layout.rank_order == kMegatronOrder);
        }
    }

    // The ranking is the simulator's: each ranked candidate's tokens/s is what simulate()
    // plays for simulation_config(candidate), best first.
    void rankingIsTheSimulators() {
        PlanRequest request = tiny_request(8);
        request.gpus_per_node = 8;
        auto result = plan::plan(request);
        QVERIFY2(result, result ? "" : result.error().message.c_str());
        launch::write_commands(request, *result);
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
            QVERIFY(c.train_command.find("fulcrum-train --dp " +
                                         std::to_string(c.layout.grid.dp)) != std::string::npos);
            QVERIFY(c.simulate_command.find("--micro-batches " +
                                            std::to_string(c.layout.microbatches)) !=
                    std::string::npos);
        }
    }

    // The train command runs what the candidate is: Ulysses and ZeRO-2 are fulcrum-train's
    // too (--cp-impl, --zero, and no overlapped reduction beside ZeRO-2's reduce-scatter).
    void trainCommandCarriesUlyssesAndZero() {
        PlanRequest request = tiny_request(4);
        request.overlap_grad_reduce = true;
        request.space.zero_stages = {2};
        request.space.cp_impls = {parallel::ContextParallelism::ulysses};
        auto result = plan::plan(request);
        QVERIFY2(result, result ? "" : result.error().message.c_str());
        launch::write_commands(request, *result);
        int ulysses = 0;
        for (std::size_t i : result->ranked) {
            const Candidate& c = result->candidates[i];
            QVERIFY2(!c.train_command.starts_with("#"), c.train_command.c_str());
            QVERIFY(c.train_command.find("--zero 2") != std::string::npos);
            QVERIFY(c.train_command.find("--overlap-grad-reduce off") != std::string::npos);
            if (c.layout.grid.cp > 1) {
                ++ulysses;
                QVERIFY2(c.train_command.find("--cp-impl ulysses") != std::string::npos,
                         c.train_command.c_str());
            }
        }
        QVERIFY(ulysses > 0);
    }

    // A layout whose CP shardings play to the same step time is one row: the twins leave the
    // ranking and are named on it (the CLI prints "zigzag = adaptive"), and they survive JSON.
    void equalShardingsAreOneRow() {
        PlanRequest request = tiny_request(8);
        request.gpus_per_node = 8;
        request.global_batch = 16;
        request.top_k = 20;
        auto result = plan::plan(request);
        QVERIFY2(result, result ? "" : result.error().message.c_str());
        int folded = 0;
        for (std::size_t i = 0; i < result->ranked.size(); ++i) {
            const Candidate& a = result->candidates[result->ranked[i]];
            folded += int(a.equal_shardings.size());
            for (const balance::CpSharding same : a.equal_shardings) {
                QVERIFY(same != a.sharding);
                QVERIFY(a.layout.grid.cp > 1);
            }
            for (std::size_t j = i + 1; j < result->ranked.size(); ++j) {
                const Candidate& b = result->candidates[result->ranked[j]];
                const bool twins = a.layout.grid == b.layout.grid &&
                                   a.layout.microbatches == b.layout.microbatches &&
                                   a.layout.schedule == b.layout.schedule &&
                                   a.layout.virtual_stages == b.layout.virtual_stages &&
                                   a.layout.recompute == b.layout.recompute &&
                                   a.balancer == b.balancer &&
                                   a.layout.stage_layers == b.layout.stage_layers &&
                                   a.layout.sequence_parallel == b.layout.sequence_parallel &&
                                   a.attention_chunk == b.attention_chunk;
                QVERIFY2(!(twins && a.step_ns == b.step_ns), qPrintable(QString::number(i)));
            }
        }
        QVERIFY(folded > 0);  // this workload has such twins (cp2 at 8 GPUs)
        const auto parsed = plan::parse_plan_json(plan::plan_json(request, *result, 0));
        QVERIFY2(parsed, parsed ? "" : parsed.error().message.c_str());
        int parsed_folded = 0;
        for (const std::size_t index : parsed->result.ranked) {
            parsed_folded += int(parsed->result.candidates[index].equal_shardings.size());
        }
        QCOMPARE(parsed_folded, folded);
    }

    // The simulator plays uneven stages: moving a layer off the last stage (which holds the LM
    // head) changes the step, and a split that does not sum to the layers is refused.
    void simulatorPlaysStageLayers() {
        sim::SimulationConfig config;
        config.model = {.layers = 4, .hidden = 64, .heads = 4, .context = 256, .vocab = 4096};
        config.layout.grid = {.dp = 1, .tp = 1, .pp = 2, .cp = 1};
        config.lengths = "long-tail:context=256,median=32";
        config.documents = 200;
        config.steps = 1;
        auto equal = sim::simulate(config, nullptr);
        QVERIFY(equal);
        config.layout.stage_layers = {3, 1};
        auto uneven = sim::simulate(config, nullptr);
        QVERIFY2(uneven, uneven ? "" : uneven.error().message.c_str());
        QVERIFY(uneven->mean_step_ns != equal->mean_step_ns);
        config.layout.stage_layers = {2, 1};
        QVERIFY(!sim::validate(config));
        config.layout.stage_layers = {2, 2};
        auto same = sim::simulate(config, nullptr);
        QVERIFY(same);
        QCOMPARE(same->mean_step_ns, equal->mean_step_ns);

        // Interleaved: one count per model chunk (p·v), as fulcrum-train takes them; the even
        // split given explicitly plays the same step, a stage's chunks summing to its layers.
        config.layout.schedule = parallel::PipelineSchedule::interleaved;
        config.layout.virtual_stages = 2;
        config.layout.microbatches = 4;
        config.layout.stage_layers = {};
        auto interleaved = sim::simulate(config, nullptr);
        QVERIFY2(interleaved, interleaved ? "" : interleaved.error().message.c_str());
        config.layout.stage_layers = {1, 1, 1, 1};
        auto explicit_even = sim::simulate(config, nullptr);
        QVERIFY(explicit_even);
        QCOMPARE(explicit_even->mean_step_ns, interleaved->mean_step_ns);
        config.layout.stage_layers = {2, 2};  // one count a stage is not one a model chunk
        QVERIFY(!sim::validate(config));
        QCOMPARE(sim::stage_parameters(config.model, config.layout.grid, 0, {1, 1, 1, 1}, 2),
                 sim::stage_parameters(config.model, config.layout.grid, 0, {}, 2));
    }

    // Several calibration runs (fulcrum plan --calibrate A --calibrate B ...): each layout takes
    // its passes from the run nearest it and each collective from the nearest run that ran it;
    // only what none ran is analytic, and the plan says so.
    void mergedCostsComeFromTheRunsThatRanThem() {
        const std::vector<sim::Calibration> runs = {
            run_of({.dp = 1, .tp = 1, .pp = 2, .cp = 1}, false, 10, 100),
            run_of({.dp = 1, .tp = 2, .pp = 1, .cp = 1}, false, 20, 200),
            run_of({.dp = 1, .tp = 2, .pp = 1, .cp = 1}, true, 30, 300),
            run_of({.dp = 1, .tp = 1, .pp = 1, .cp = 2}, false, 40, 400),
            run_of({.dp = 2, .tp = 1, .pp = 1, .cp = 1}, false, 50, 500)};
        const std::vector<std::string> names = {"pp2", "tp2", "tp2sp", "cp2", "dp2"};
        const auto merged = [&](parallel::GridShape grid, bool sp) {
            return sim::merge_calibrations(runs, names, grid, sp);
        };
        const auto latency = [](const sim::Calibration& c, std::string_view name) {
            const analysis::CollectiveCost* cost = c.model.collective(name);
            return cost != nullptr ? cost->latency_ns : -1.0;
        };
        // tp2 with SP: its passes and both halves from the SP run, no pipeline receive.
        const sim::Calibration tp_sp = merged({.dp = 1, .tp = 2, .pp = 1, .cp = 1}, true);
        QCOMPARE(tp_sp.model.passes.front().per_token_ns, 30.0);
        QCOMPARE(latency(tp_sp, sim::kTpAllGather), 300.0);
        QCOMPARE(latency(tp_sp, sim::kTpAllReduce), 200.0);
        QCOMPARE(latency(tp_sp, sim::kRecvActivations), -1.0);
        QVERIFY2(tp_sp.model.source.find(
                     "passes (tp2 sp), tp all-gather, tp reduce-scatter fitted on 'tp2sp'") !=
                     std::string::npos,
                 tp_sp.model.source.c_str());
        // dp2: the dp2 run's passes and all-reduce (cp2's spans two ranks too, but not dp's).
        const sim::Calibration dp = merged({.dp = 2, .tp = 1, .pp = 1, .cp = 1}, false);
        QCOMPARE(dp.model.passes.front().per_token_ns, 50.0);
        QCOMPARE(latency(dp, sim::kDpAllReduce), 500.0);
        // pp2 × cp2 (4 ranks): the pp2 run's two stages and receives, cp2's exchanges, and
        // the DP all-reduce over the two CP ranks from cp2 (dp × cp = 2 there too, cp matches).
        const sim::Calibration pp_cp = merged({.dp = 1, .tp = 1, .pp = 2, .cp = 2}, false);
        QCOMPARE(pp_cp.origin.pp, 2);
        QCOMPARE(pp_cp.model.passes.size(), std::size_t(4));
        QCOMPARE(latency(pp_cp, sim::kRecvGradients), 100.0);
        QCOMPARE(latency(pp_cp, sim::kCpReduceScatter), 400.0);
        QCOMPARE(latency(pp_cp, sim::kDpAllReduce), 400.0);
        // One run is taken as it is.
        const sim::Calibration alone =
            sim::merge_calibrations({runs[0]}, {"pp2"}, {.dp = 1, .tp = 2, .pp = 1, .cp = 1}, true);
        QCOMPARE(alone.model.collectives.size(), runs[0].model.collectives.size());

        // The plan: with every run, nothing its top candidates run is analytic; with the pp2
        // run alone, TP's and CP's collectives are, and its derived lines say so.
        PlanRequest request = tiny_request(2);
        request.top_k = 30;
        request.calibrations = runs;
        request.calibration_runs = names;
        auto all = plan::plan(request);
        QVERIFY2(all, all ? "" : all.error().message.c_str());
        launch::write_commands(request, *all);
        for (const std::string& note : all->notes) {
            QVERIFY2(note.find("not in the cost model") == std::string::npos, note.c_str());
        }
        const Candidate& top = all->candidates[all->ranked.front()];
        QVERIFY(top.simulate_command.find("--calibrate pp2 --calibrate tp2 --calibrate tp2sp") !=
                std::string::npos);
        QVERIFY(top.cost_source.find("fitted on") != std::string::npos);
        request.calibrations = {runs[0]};
        request.calibration_runs = {"pp2"};
        auto one = plan::plan(request);
        QVERIFY(one);
        bool tp_analytic = false;
        for (const std::string& note : one->notes) {
            tp_analytic |=
                note.starts_with(std::string(sim::kTpAllReduce) + ": not in the cost model");
        }
        QVERIFY(tp_analytic);
    }

    // Where activations do not fit without recomputation, offloading Q, K and V (chunked
    // attention) is tried before recomputing: as the GPU shrinks, one rank's layout first
    // fits only with offload (its fulcrum-train line says --attention-chunk and --offload on,
    // its memory the offloaded Q, K, V less, plus the two slots), and without offload in the
    // search the same memory needs recomputation.
    void offloadBeforeRecomputation() {
        PlanRequest request = tiny_request(1);
        request.model.context = 2048;
        request.lengths = "long-tail:context=2048,median=256";
        request.hardware.unfused_attention = false;
        request.space.attention_chunk = 256;
        request.space.balancers = {balance::Balancer::fixed};
        std::optional<Candidate> offloaded;
        double budget = 0.1;
        for (; budget > 1e-4 && !offloaded; budget *= 0.9) {
            request.gpu_memory_gib = budget;
            auto result = plan::plan(request);
            QVERIFY2(result, result ? "" : result.error().message.c_str());
            launch::write_commands(request, *result);
            for (std::size_t i : result->ranked) {
                if (result->candidates[i].offload) {
                    offloaded = result->candidates[i];
                    request.gpu_memory_gib = budget;
                    break;
                }
            }
        }
        QVERIFY2(offloaded, "no memory budget made offload the way to fit");
        QCOMPARE(offloaded->layout.recompute, Recompute::none);
        QCOMPARE(offloaded->attention_chunk, 256);
        QVERIFY(offloaded->train_command.find("--attention-chunk 256 --offload on") !=
                std::string::npos);
        // The memory model: Q, K, V (6 bytes a token and hidden unit in 16 bits, tp 1) off, the
        // two [chunk, 3h] slots on.
        MemoryShape shape;
        shape.model.layers = 4;
        shape.model.hidden = 64;
        shape.model.heads = 4;
        shape.model.context = 2048;
        shape.flash_attention = true;
        const double kept = stage_memory(shape, 0).activations_bytes;
        shape.attention_chunk = 256;
        shape.offload = true;
        QCOMPARE(stage_memory(shape, 0).activations_bytes,
                 kept - 4 * 6.0 * 2048 * 64 + 2 * 256 * 3 * 64 * 2.0);
        request.space.offload = false;
        auto without = plan::plan(request);
        QVERIFY(without);
        for (std::size_t i : without->ranked) {
            QVERIFY(!without->candidates[i].offload);
            QVERIFY(without->candidates[i].layout.recompute != Recompute::none);
        }
    }

    // The planner's estimate against the simulator with alike micro-batches (every document
    // exactly the context): the same step without a pipeline, and within 5% on four stages,
    // whose stages differ only by the embedding and the LM head.
    void estimateMatchesAlikeMicroBatches() {
        sim::SimulationConfig config;
        config.model = {.layers = 8, .hidden = 256, .heads = 4, .context = 512, .vocab = 256};
        config.layout.grid = {.dp = 2, .tp = 2, .pp = 1, .cp = 2};
        config.layout.microbatches = 8;
        config.steps = 1;
        config.document_lengths.assign(64, 512);
        const std::int64_t pairs = 512 * 513 / 2;
        for (int pp : {1, 4}) {
            config.layout.grid.pp = pp;
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
