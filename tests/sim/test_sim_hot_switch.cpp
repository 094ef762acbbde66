// Hot-switched steps (HotSPa, SOSP'24): the switch cost from the planner's bytes over the
// links, a step as its buckets, switches and one update, and bad specs refused before any work.
#include <QtTest>

#include "core/sim/hot_switch_play.h"
#include "core/sim/simulator.h"

using namespace fulcrum;
using namespace fulcrum::sim;
using parallel::GridShape;

namespace {

SimulationConfig small_config() {
    SimulationConfig config;
    config.model = {.layers = 4, .hidden = 256, .heads = 8, .context = 4096, .vocab = 256};
    config.grid = GridShape{.tp = 4};
    config.microbatches = 4;
    config.lengths = "long-tail:context=4096,median=512";
    config.documents = 256;
    config.steps = 3;
    config.dtype = DType::bf16;
    return config;
}

plan::HotSwitchSpec spec(const std::string& text) {
    auto parsed = plan::parse_hot_switch_spec(text, {.world = 4});
    return parsed.ok() ? *parsed : plan::HotSwitchSpec{};
}

}  // namespace

class HotSwitchSimTest : public QObject {
    Q_OBJECT

private slots:
    // TP 4 → DP 4 in one node: every rank sends and receives 3/4 of the model (parameters
    // only), over NVLink; the time is that over nvlink_gbs plus one latency.
    void switchCostIsBytesOverLinks() {
        const SimulationConfig config = small_config();
        const SwitchCost cost = switch_cost(config, GridShape{.tp = 4}, GridShape{.dp = 4}, false);
        const double h = 256;
        const double model_bytes = (4 * (12 * h * h + 13 * h) + (256 + 4096) * h) * 2;
        QVERIFY(std::abs(cost.plan.sent[0] - 0.75 * model_bytes) < 8);
        QCOMPARE(cost.plan.inter_node_bytes, 0.0);
        const double expected =
            0.75 * model_bytes / config.hardware.nvlink_gbs + config.hardware.p2p_latency_us * 1e3;
        QVERIFY(std::abs(static_cast<double>(cost.ns) - expected) < 2);
        // With the gradient accumulators, twice the bytes.
        const SwitchCost both = switch_cost(config, GridShape{.tp = 4}, GridShape{.dp = 4}, true);
        QVERIFY(std::abs(both.plan.total_bytes - 2 * cost.plan.total_bytes) < 16);
        // Across nodes (one GPU a node), the network's bandwidth.
        SimulationConfig spread = config;
        spread.hardware.gpus_per_node = 1;
        const SwitchCost far = switch_cost(spread, GridShape{.tp = 4}, GridShape{.dp = 4}, false);
        QVERIFY(far.ns > cost.ns * 5);
    }

    // Each step is its buckets in order, the switches between them and back, and one update:
    // the segments add up to the step, the buckets' tokens to the step's.
    void stepIsBucketsSwitchesAndUpdate() {
        SimulationConfig config = small_config();
        config.hot_switch = spec("0-1024:dp4;1024-2048:dp2,tp2;2048-:tp4");
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
        // dp4 → dp2,tp2 moves nothing (DP holds everything); tp4 → dp4 (back) moves most.
        bool back = false;
        for (const SimulatedSwitch& change : result->switches) {
            if (change.from == GridShape{.dp = 4}) {
                QCOMPARE(change.bytes, 0.0);
            }
            if (change.from == GridShape{.tp = 4} && change.to == GridShape{.dp = 4}) {
                back = true;
                QVERIFY(change.bytes > 0);
            }
        }
        QVERIFY(back);
    }

    // The same documents as the static layout: the same tokens over an epoch.
    void sameDocumentsAsStatic() {
        SimulationConfig config = small_config();
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
        SimulationConfig config = small_config();
        config.hot_switch = spec("0-1024:dp4;1024-:tp4");
        config.hot_switch->buckets[1].layout = GridShape{.tp = 2};
        auto result = simulate(config, nullptr);
        QVERIFY(!result.ok());
        QVERIFY2(result.error().message.find("the world of 4") != std::string::npos,
                 result.error().message.c_str());
    }
};

QTEST_GUILESS_MAIN(HotSwitchSimTest)
#include "test_sim_hot_switch.moc"
