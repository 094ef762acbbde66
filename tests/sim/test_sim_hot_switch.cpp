// Hot-switched steps (HotSPa, SOSP'24): the switch cost from the planner's bytes over the
// links, a step as its buckets (each with its gradient reduction), switches and one update
// at home, and bad specs refused before any work.
#include <QTemporaryDir>
#include <QTest>

#include "core/analysis/hot_switch.h"
#include "core/analysis/run_analysis.h"
#include "core/sim/hot_switch_play.h"
#include "core/sim/simulator.h"
#include "core/sim/stage_costs.h"
#include "core/store/trace_reader.h"
#include "core/trace/annotations.h"

#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "tests/support/hot_switch_run.h"

using namespace fulcrum;
using namespace fulcrum::sim;
using parallel::GridShape;

namespace {

RankInfo rank_info(int rank) {
    RankInfo info;
    info.rank = rank;
    return info;
}

parallel::HotSwitchSpec spec(const std::string& text) {
    auto parsed = parallel::parse_hot_switch_spec(text, {.world = 4});
    return parsed.ok() ? *parsed : parallel::HotSwitchSpec{};
}

// A simulated run written at `path` and read back as the analyses read it.
struct Played {
    SimulationResult result;
    analysis::RunTrace trace;
};

Result<Played> play_and_load(const SimulationConfig& config, const std::string& path) {
    SimulationOutput output;
    output.path = path;
    output.start_utc_ns = 0;
    auto played = simulate_to_file(config, output);
    if (!played) {
        return played.error();
    }
    auto reader = store::TraceReader::open(path);
    if (!reader) {
        return reader.error();
    }
    auto trace = analysis::load_run_trace(*reader, {});
    if (!trace) {
        return trace.error();
    }
    return Played{std::move(*played), std::move(*trace)};
}

}  // namespace

class HotSwitchSimTest : public QObject {
    Q_OBJECT

private slots:
    // TP 4 → DP 4 in one node: every rank sends and receives 3/4 of the model (parameters
    // only), over NVLink; the time is that over nvlink_gbs plus one latency.
    void switchCostIsBytesOverLinks() {
        const SimulationConfig config = test::hot_switch_workload();
        const SwitchCost cost = switch_cost(config, GridShape{.tp = 4}, GridShape{.dp = 4}, false);
        const double h = 256;
        const double model_bytes = (4 * (12 * h * h + 13 * h) + (256 + 4096) * h) * 2;
        QVERIFY(std::abs(cost.plan.sent[0] - 0.75 * model_bytes) < 8);
        QCOMPARE(cost.plan.inter_node_bytes, 0.0);
        const double expected =
            0.75 * model_bytes / config.hardware.nvlink_gbs + config.hardware.p2p_latency_us * 1e3;
        QVERIFY(std::abs(static_cast<double>(cost.ns) - expected) < 2);
        // With the gradient accumulators (fp32 under bf16: sim_config.h), three times the bytes.
        const SwitchCost both = switch_cost(config, GridShape{.tp = 4}, GridShape{.dp = 4}, true);
        QVERIFY(std::abs(both.plan.total_bytes - 3 * cost.plan.total_bytes) < 16);
        // Across nodes (one GPU a node), the network's bandwidth.
        SimulationConfig spread = config;
        spread.hardware.gpus_per_node = 1;
        const SwitchCost far = switch_cost(spread, GridShape{.tp = 4}, GridShape{.dp = 4}, false);
        QVERIFY(far.ns > cost.ns * 5);
    }

    // Each step is its buckets in order, the switches between them and back, and one update:
    // the segments add up to the step, the buckets' tokens to the step's.
    void stepIsBucketsSwitchesAndUpdate() {
        SimulationConfig config = test::hot_switch_workload();
        config.hot_switch = spec(test::kHotSwitchSpec);
        auto result = simulate(config, nullptr);
        QVERIFY2(result.ok(), result.ok() ? "" : result.error().message.c_str());
        QCOMPARE(result->steps.size(), std::size_t(3));
        QCOMPARE(result->buckets.size(), std::size_t(3));
        std::int64_t tokens = 0, bucket_tokens = 0, duration = 0;
        for (const SimulatedStep& step : result->steps) {
            tokens += step.tokens;
            duration += step.duration_ns;
        }
        double parts = result->update_ns;
        for (const SimulatedBucket& bucket : result->buckets) {
            bucket_tokens += bucket.tokens;
            parts += bucket.ns;
        }
        for (const SimulatedSwitch& change : result->switches) {
            parts += change.ns;
        }
        QCOMPARE(bucket_tokens, tokens);
        QVERIFY(std::abs(parts - static_cast<double>(duration)) < 1);
        // dp4 → dp2,tp2 moves nothing (DP holds everything): no switch; tp4 → dp4 (back)
        // moves most.
        bool back = false;
        for (const SimulatedSwitch& change : result->switches) {
            QVERIFY(!(change.from == GridShape{.dp = 4}));
            if (change.from == GridShape{.tp = 4} && change.to == GridShape{.dp = 4}) {
                back = true;
                QVERIFY(change.bytes > 0);
            }
        }
        QVERIFY(back);
    }

    // After each bucket's passes, its gradients are all-reduced over its own layout's DP × CP
    // groups, as fulcrum-train runs it: a `dp all-reduce gradients` range inside the bucket's
    // range, the bytes its stage holds, the time of an all-reduce over that group's size; none
    // under a layout without DP or CP. The optimizer runs once a step, under the first
    // bucket's layout, after only the gradients went home.
    void perBucketReductions() {
        QTemporaryDir work;
        SimulationConfig config = test::hot_switch_workload();
        config.hot_switch = spec(test::kHotSwitchSpec);
        auto run = play_and_load(config, work.filePath("hot.fulcrum").toStdString());
        QVERIFY2(run.ok(), run.ok() ? "" : run.error().message.c_str());
        const SimulationResult* played = &run->result;
        const analysis::RunTrace* trace = &run->trace;
        // Bytes and time of each layout's reduction (one stage each: every rank alike).
        const auto expected = [&](const GridShape& grid) {
            SimulationConfig under = config;
            under.layout.grid = grid;
            // bf16 training's gradients, reduced in fp32.
            const std::int64_t bytes = stage_parameters(config.model, grid, 0) * 4;
            return std::pair{bytes,
                             predict_collective_ns(config_costs(under).dp_all_reduce, bytes)};
        };
        const auto [dp4_bytes, dp4_ns] = expected(GridShape{.dp = 4});
        const auto [dp2_bytes, dp2_ns] = expected(GridShape{.dp = 2, .tp = 2});
        QVERIFY(dp2_bytes < dp4_bytes);  // TP 2 halves the layers' share
        QVERIFY(dp4_ns > dp2_ns);        // more bytes over a larger group
        QCOMPARE(bucket_reduction_ns(config, GridShape{.dp = 4}), dp4_ns);
        QCOMPARE(bucket_reduction_ns(config, GridShape{.tp = 4}), std::int64_t(0));
        for (const analysis::RankTrace& rank : trace->ranks) {
            std::vector<const Event*> buckets, reductions, optimizers;
            for (const analysis::LaneTrace& lane : rank.lanes) {
                for (const Event& event : lane.events) {
                    const std::string_view name = trace->name(event.name);
                    if (name == range_name::kHotSwitchBucket) {
                        buckets.push_back(&event);
                    } else if (name == range_name::kDpAllReduce) {
                        reductions.push_back(&event);
                    } else if (name == range_name::kOptimizer) {
                        optimizers.push_back(&event);
                    }
                }
            }
            QCOMPARE(optimizers.size(), std::size_t(3));
            std::size_t dp4 = 0, dp2 = 0;
            for (const Event* reduced : reductions) {
                const std::int64_t ns = reduced->end_ns - reduced->start_ns;
                if (reduced->bytes == dp4_bytes) {
                    QCOMPARE(ns, dp4_ns);
                    ++dp4;
                } else {
                    QCOMPARE(reduced->bytes, dp2_bytes);
                    QCOMPARE(ns, dp2_ns);
                    ++dp2;
                }
                // Inside a bucket, at its end.
                const bool inside =
                    std::any_of(buckets.begin(), buckets.end(), [&](const Event* b) {
                        return b->start_ns <= reduced->start_ns && reduced->end_ns == b->end_ns &&
                               b->step == reduced->step;
                    });
                QVERIFY(inside);
            }
            // One reduction per step for each bucket with documents and DP (tp4 has none).
            std::size_t with_dp = 0;
            for (const Event* b : buckets) {
                with_dp += trace->name(b->args).find("\"layout\":\"tp4\"") == std::string::npos;
            }
            QCOMPARE(dp4 + dp2, with_dp);
            QVERIFY(dp4 > 0 && dp2 > 0);
        }
        double reduction_ns = 0;
        for (const SimulatedBucket& bucket : played->buckets) {
            QVERIFY(bucket.reduction_ns < bucket.ns);
            reduction_ns += bucket.reduction_ns;
        }
        QVERIFY(reduction_ns > 0);
        QCOMPARE(played->buckets.back().reduction_ns, 0.0);
        // The switch home after the last bucket (tp4 → dp4) moves the gradients only: twice
        // the bf16 parameters' switch (the accumulators are fp32), not three times.
        const SwitchCost parameters =
            switch_cost(config, GridShape{.tp = 4}, GridShape{.dp = 4}, false);
        for (const SimulatedSwitch& change : played->switches) {
            if (change.from == GridShape{.tp = 4} && change.to == GridShape{.dp = 4}) {
                QVERIFY(std::abs(change.bytes / change.count - 2 * parameters.plan.total_bytes) <
                        16);
            }
        }
    }

    // Every bucket under the static layout: a single bucket plays the static run's step (its
    // own packing: within 10%); with two, each step is the buckets' passes, one reduction each
    // (the static step's one, and one extra) and one optimizer step, and nothing switches.
    void staticLayoutBucketsPlayTheStaticStep() {
        SimulationConfig config = test::hot_switch_workload();
        config.layout.grid = GridShape{.dp = 4};
        config.steps = 2;
        auto fixed_layout = simulate(config, nullptr);
        QVERIFY(fixed_layout.ok());
        const std::int64_t bytes = stage_parameters(config.model, config.layout.grid, 0) * 4;
        const std::int64_t reduce_ns =
            predict_collective_ns(config_costs(config).dp_all_reduce, bytes);
        QVERIFY(reduce_ns > 0);
        config.hot_switch = spec("0-:dp4");
        auto single = simulate(config, nullptr);
        QVERIFY2(single.ok(), single.ok() ? "" : single.error().message.c_str());
        for (std::size_t k = 0; k < fixed_layout->steps.size(); ++k) {
            const auto hot = static_cast<double>(single->steps[k].duration_ns);
            const auto fixed = static_cast<double>(fixed_layout->steps[k].duration_ns);
            QVERIFY2(std::abs(hot - fixed) < 0.1 * fixed,
                     (std::to_string(hot) + " against " + std::to_string(fixed)).c_str());
        }
        QCOMPARE(single->buckets[0].reduction_ns, 2.0 * static_cast<double>(reduce_ns));
        config.hot_switch = spec("0-1024:dp4;1024-:dp4");
        auto two = simulate(config, nullptr);
        QVERIFY2(two.ok(), two.ok() ? "" : two.error().message.c_str());
        QVERIFY(two->switches.empty());
        double duration = 0, parts = two->update_ns;
        for (const SimulatedStep& step : two->steps) {
            duration += static_cast<double>(step.duration_ns);
        }
        for (const SimulatedBucket& bucket : two->buckets) {
            parts += bucket.ns;
            QCOMPARE(bucket.reduction_ns, 2.0 * static_cast<double>(reduce_ns));
        }
        QVERIFY(std::abs(parts - duration) < 1);
        QCOMPARE(two->update_ns, single->update_ns);
    }

    // Several calibration runs: each bucket's layout takes its costs from the runs merged again
    // for it (a tp4 run's passes for the tp4 bucket), not the static grid's merge.
    void bucketsTakeTheirLayoutsCalibration() {
        const auto run_of = [](const GridShape& grid, double per_token) {
            Calibration run;
            run.grid = grid;
            run.origin = {.layers = 4, .pp = 1, .hidden = 256, .tp = grid.tp};
            for (Phase phase : {Phase::forward, Phase::backward}) {
                analysis::PassCost pass;
                pass.phase = phase;
                pass.per_token_ns = per_token;
                run.model.passes.push_back(pass);
            }
            return run;
        };
        SimulationConfig config = test::hot_switch_workload();
        config.layout.grid = GridShape{.dp = 4};
        config.calibrations = {run_of(GridShape{.dp = 4}, 10), run_of(GridShape{.tp = 4}, 500)};
        config.calibration_names = {"dp4", "tp4"};
        Calibration merged = merge_calibrations(config.calibrations, config.calibration_names,
                                                config.layout.grid, false);
        config.cost_model = merged.model;
        config.cost_origin = merged.origin;
        QCOMPARE(under_layout(config, GridShape{.dp = 4}).cost_model->passes.front().per_token_ns,
                 10.0);
        QCOMPARE(under_layout(config, GridShape{.tp = 4}).cost_model->passes.front().per_token_ns,
                 500.0);
        config.hot_switch = spec("0-1024:dp4;1024-:tp4");
        auto both = simulate(config, nullptr);
        config.calibrations.pop_back();
        config.calibration_names.pop_back();
        auto home_only = simulate(config, nullptr);
        QVERIFY(both.ok() && home_only.ok());
        QCOMPARE(both->buckets[0].ns, home_only->buckets[0].ns);
        QVERIFY(both->buckets[1].ns > 5 * home_only->buckets[1].ns);
    }

    // The same documents as the static layout: the same tokens over an epoch.
    void sameDocumentsAsStatic() {
        SimulationConfig config = test::hot_switch_workload();
        config.epochs = 1;
        auto fixed_layout = simulate(config, nullptr);
        config.hot_switch = spec("0-1024:dp4;1024-:tp4");
        auto switched = simulate(config, nullptr);
        QVERIFY(fixed_layout.ok() && switched.ok());
        QCOMPARE(switched->tokens, fixed_layout->tokens);
        QCOMPARE(switched->documents, fixed_layout->documents);
    }

    // A layout the simulator cannot play is refused before any work, naming the bucket.
    void badBucketRefused() {
        SimulationConfig config = test::hot_switch_workload();
        config.hot_switch = spec("0-1024:dp4;1024-:tp4");
        config.hot_switch->buckets[1].layout = GridShape{.tp = 2};
        auto result = simulate(config, nullptr);
        QVERIFY(!result.ok());
        QVERIFY2(result.error().message.find("the world of 4") != std::string::npos,
                 result.error().message.c_str());
    }

    // The analysis on a hand-built trace: two ranks, one step of two buckets and a switch
    // each way, args written as text as a `key=value` producer would.
    void analysisOfHandBuiltTrace() {
        analysis::RunTrace trace;
        for (int r = 0; r < 2; ++r) {
            trace.add_rank(rank_info(r));
            auto& lane = trace.add_lane(r, LaneKind::host_thread, "main");
            trace.add_range(lane, "step", Category::schedule, 0, 1000, 0);
            trace.add_range(lane, "hot-switch bucket", Category::schedule, 0, 300, 0)
                .args = trace.intern(
                "{\"bucket\":\"0\",\"layout\":\"dp2\",\"bounds\":\"0-1024\",\"documents\":\"5\","
                "\"tokens\":\"3000\",\"microbatches\":\"2\"}");
            auto& there = trace.add_range(lane, "hot-switch", Category::communication, 300, 350, 0);
            there.args = trace.intern(std::string("{\"from\":\"dp2\",\"to\":\"tp2\",\"sent\":\"") +
                                      (r == 0 ? "0" : "100") +
                                      "\",\"received\":\"0\",\"total_bytes\":\"100\"}");
            trace.add_range(lane, "hot-switch bucket", Category::schedule, 350, 850, 0).args =
                trace.intern(
                    "{\"bucket\":1,\"layout\":\"tp2\",\"bounds\":\"1024-\",\"documents\":1,"
                    "\"tokens\":4000,\"microbatches\":1}");
            trace.add_range(lane, "hot-switch", Category::communication, 900, 1000, 0).args =
                trace.intern(
                    "{\"from\":\"tp2\",\"to\":\"dp2\",\"sent\":50,\"received\":50,"
                    "\"total_bytes\":100,\"largest_send_bytes\":50}");
        }
        trace.finish();
        const analysis::HotSwitchAnalysis hot = analysis::analyze_hot_switch(trace);
        QCOMPARE(hot.steps, 1);
        QCOMPARE(hot.step_ns, std::int64_t(1000));
        QCOMPARE(hot.buckets.size(), std::size_t(2));
        QCOMPARE(hot.buckets[0].ns, std::int64_t(300));
        QCOMPARE(hot.buckets[0].tokens, std::int64_t(3000));
        QCOMPARE(hot.buckets[1].layout, std::string("tp2"));
        QCOMPARE(hot.buckets[1].share, 0.5);
        QCOMPARE(hot.switching_ns, std::int64_t(150));
        QCOMPARE(hot.rest_ns, std::int64_t(50));
        QCOMPARE(hot.layouts, (std::vector<std::string>{"dp2", "tp2"}));
        const analysis::HotSwitchCost* there = hot.cost("dp2", "tp2");
        QVERIFY(there != nullptr);
        QCOMPARE(there->ns, std::int64_t(50));
        QCOMPARE(there->sent, (std::vector<double>{0, 100}));
        QCOMPARE(hot.cost("tp2", "dp2")->largest_send_bytes, 50.0);
        // A run without hot switching has nothing to say.
        analysis::RunTrace plain;
        auto& lane =
            plain.add_lane(plain.add_rank(rank_info(0)).info.rank, LaneKind::host_thread, "main");
        plain.add_range(lane, "step", Category::schedule, 0, 10, 0);
        plain.finish();
        QVERIFY(analysis::analyze_hot_switch(plain).empty());
    }

    // A simulated run through the store: the analysis reads back what the play summed.
    void annotationsRoundTrip() {
        QTemporaryDir work;
        SimulationConfig config = test::hot_switch_workload();
        config.hot_switch = spec(test::kHotSwitchSpec);
        auto run = play_and_load(config, work.filePath("hot.fulcrum").toStdString());
        QVERIFY2(run.ok(), run.ok() ? "" : run.error().message.c_str());
        const SimulationResult* played = &run->result;
        const analysis::RunTrace* trace = &run->trace;
        auto analysed = analysis::analyze_run(*trace);
        QVERIFY(analysed.ok());
        const analysis::HotSwitchAnalysis& hot = analysed->hot_switch;
        QCOMPARE(hot.steps, 3);
        QCOMPARE(hot.buckets.size(), played->buckets.size());
        std::int64_t duration = 0;
        for (const SimulatedStep& step : played->steps) {
            duration += step.duration_ns;
        }
        QCOMPARE(hot.step_ns, duration);
        for (std::size_t b = 0; b < hot.buckets.size(); ++b) {
            QCOMPARE(hot.buckets[b].tokens, played->buckets[b].tokens);
            QCOMPARE(hot.buckets[b].documents, played->buckets[b].documents);
            QCOMPARE(static_cast<double>(hot.buckets[b].ns), played->buckets[b].ns);
            QCOMPARE(hot.buckets[b].layout,
                     parallel::layout_string(played->buckets[b].bucket.layout));
        }
        QCOMPARE(hot.switches.size(), played->switches.size());
        for (const SimulatedSwitch& change : played->switches) {
            const analysis::HotSwitchCost* cell =
                hot.cost(parallel::layout_string(change.from), parallel::layout_string(change.to));
            QVERIFY(cell != nullptr);
            QCOMPARE(cell->count, change.count);
            QCOMPARE(static_cast<double>(cell->ns), change.ns);
            QVERIFY(std::abs(cell->bytes - change.bytes) <= change.count);
            double sent = 0;
            for (double bytes : cell->sent) {
                sent += bytes;
            }
            QVERIFY(std::abs(sent - change.bytes) <= 4.0 * change.count);
        }
        QCOMPARE(static_cast<double>(hot.rest_ns), played->update_ns);
        QVERIFY(analysis::analysis_json(*analysed).find("\"hot_switch\"") != std::string::npos);
    }

    // A simulated hot-switched run has each bucket's passes, as a static run has its step's:
    // every forward and backward inside a `hot-switch bucket` range of its step, on the stage
    // the rank holds under that bucket's layout, each bucket's micro-batches numbered on from
    // the step's earlier ones (unique within the step), no pass outside the buckets; the
    // workload rows belong to the step; run.config names the spec.
    void passesInsideBuckets() {
        QTemporaryDir work;
        SimulationConfig config = test::hot_switch_workload();
        const std::string text = "0-1024:dp4;1024-2048:dp2,pp2;2048-:tp2,pp2";
        config.hot_switch = spec(text);
        auto run = play_and_load(config, work.filePath("hot.fulcrum").toStdString());
        QVERIFY2(run.ok(), run.ok() ? "" : run.error().message.c_str());
        const SimulationResult* played = &run->result;
        const analysis::RunTrace* trace = &run->trace;
        QCOMPARE(trace->config.hot_switch, text);
        std::int64_t forwards = 0;
        for (const analysis::RankTrace& rank : trace->ranks) {
            struct Window {
                std::int32_t step;
                std::int64_t start, end;
                GridShape layout;
            };
            std::vector<Window> windows;
            for (const analysis::LaneTrace& lane : rank.lanes) {
                for (const Event& event : lane.events) {
                    if (trace->name(event.name) != range_name::kHotSwitchBucket) {
                        continue;
                    }
                    const auto args = nlohmann::json::parse(trace->name(event.args));
                    auto parsed = parallel::parse_hot_switch_spec(
                        "0-:" + args["layout"].get<std::string>(), {.world = 4});
                    QVERIFY(parsed.ok());
                    windows.push_back(
                        {event.step, event.start_ns, event.end_ns, parsed->buckets[0].layout});
                }
            }
            QVERIFY(!windows.empty());
            std::set<std::tuple<std::int32_t, std::int32_t, int>> seen;  // step, mb, phase
            for (const analysis::LaneTrace& lane : rank.lanes) {
                for (const Event& event : lane.events) {
                    const std::string_view name = trace->name(event.name);
                    if (name != range_name::kForward && name != range_name::kBackward) {
                        continue;
                    }
                    const auto inside =
                        std::find_if(windows.begin(), windows.end(), [&](const Window& w) {
                            return w.step == event.step && event.start_ns >= w.start &&
                                   event.end_ns <= w.end;
                        });
                    QVERIFY2(inside != windows.end(), "a pass outside every bucket");
                    QCOMPARE(int(event.stage),
                             parallel::coordinates_of(inside->layout, rank.info.rank).pp);
                    QVERIFY2(seen.insert({event.step, event.microbatch, int(event.phase)}).second,
                             qPrintable(QString("rank %1 step %2 mb %3 phase %4 stage %5 at %6")
                                            .arg(rank.info.rank)
                                            .arg(event.step)
                                            .arg(event.microbatch)
                                            .arg(int(event.phase))
                                            .arg(event.stage)
                                            .arg(event.start_ns)));
                    forwards += name == range_name::kForward ? 1 : 0;
                }
            }
        }
        // Every micro-batch of every replica runs forward once on each of its stages' ranks:
        // summed over the ranks, micro-batches × pp × tp of each bucket's layout.
        std::int64_t expected = 0;
        for (const SimulatedBucket& bucket : played->buckets) {
            expected += bucket.microbatches * bucket.bucket.layout.pp * bucket.bucket.layout.tp *
                        bucket.bucket.layout.cp;
        }
        QCOMPARE(forwards, expected);
        std::int32_t last_step = -1;
        for (const auto& step : played->steps) {
            last_step = std::max(last_step, step.step);
        }
        QVERIFY(!trace->workload.empty());
        for (const WorkloadEntry& entry : trace->workload) {
            QVERIFY(entry.step >= 0 && entry.step <= last_step);
        }
        // The analyses see the passes; bubbles are left out with the reason.
        auto analysed = analysis::analyze_run(*trace);
        QVERIFY(analysed.ok());
        QVERIFY(analysed->bubbles.pipelines.empty());
        QVERIFY(std::any_of(analysed->notes.begin(), analysed->notes.end(), [](const auto& note) {
            return note.find("hot-switched run") != std::string::npos;
        }));
        QVERIFY(!analysed->critical_paths.empty());
    }
};

QTEST_GUILESS_MAIN(HotSwitchSimTest)
#include "test_sim_hot_switch.moc"
