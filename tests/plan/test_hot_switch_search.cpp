// fulcrum plan --hot-switch auto (core/plan/hot_switch_search.h): on a long-tailed workload
// whose long documents need TP while short ones run best under DP, the search returns a
// valid spec at least as fast as the best static layout, whose tokens/s the simulator
// reproduces from the printed settings; its command lines carry the spec; a static best that
// no spec beats is reported as such; bad options are refused with the option's name.
#include <QTest>

#include "app/launch/command_line.h"
#include "core/plan/hot_switch_search.h"
#include "core/sim/hardware.h"
#include "core/sim/simulator.h"

using namespace fulcrum;
using namespace fulcrum::plan;
using namespace fulcrum::parallel;

namespace {

// A 7B-like model at a 128K context on one node of 8 H100s: the best static layout needs TP
// (a 128K sequence does not fit under pure DP), which the many short documents do not need.
// Without offloading: checkpoints offloaded to host memory let the long sequences fit under
// DP and CP alone, and then no layout is worth switching to.
PlanRequest long_context_request() {
    PlanRequest request;
    request.model = {.layers = 32, .hidden = 4096, .heads = 32, .context = 131072, .vocab = 32000};
    request.world_sizes = {8};
    request.gpus_per_node = 8;
    request.global_batch = 8;
    request.steps = 2;
    request.lengths = "long-tail:context=131072,median=1900";
    request.top_k = 1;
    request.space.offload = false;
    auto hardware = sim::hardware_preset("h100");
    request.hardware = hardware.ok() ? *hardware : sim::HardwareAssumptions{};
    request.hardware.gpus_per_node = request.gpus_per_node;
    return request;
}

}  // namespace

class HotSwitchSearchTest : public QObject {
    Q_OBJECT

private slots:
    void beatsTheBestStaticLayoutOnLongTails() {
        const PlanRequest request = long_context_request();
        auto planned = plan::plan(request);
        QVERIFY2(planned.ok(), planned.ok() ? "" : planned.error().message.c_str());
        QVERIFY(!planned->ranked.empty());
        auto searched = search_hot_switch(request, *planned);
        QVERIFY2(searched.ok(), searched.ok() ? "" : searched.error().message.c_str());
        launch::write_commands(request, *planned);
        launch::write_commands(request, *planned, *searched);
        QCOMPARE(searched->size(), std::size_t(1));
        const HotSwitchSearch& search = searched->front();
        QCOMPARE(search.static_candidate, planned->ranked.front());
        QCOMPARE(search.static_tokens_per_second,
                 planned->candidates[planned->ranked.front()].tokens_per_second);
        QVERIFY(search.found());
        const HotSwitchChoice& best = search.best();
        // A valid spec: it parses back against the world and the model, 2 or 3 buckets.
        const std::string text = hot_switch_spec_string(best.spec);
        auto parsed = parse_hot_switch_spec(
            text, {.world = 8, .heads = request.model.heads, .layers = request.model.layers});
        QVERIFY2(parsed.ok(), text.c_str());
        QVERIFY(best.spec.buckets.size() >= 2 && best.spec.buckets.size() <= 3);
        // At least as fast as the best static layout (here faster: the short buckets drop TP).
        QVERIFY2(search.speedup() >= 1.0, qPrintable(QString::number(search.speedup())));
        QVERIFY(best.tokens_per_second >= search.static_tokens_per_second);
        // The played list is best first, and the winner is what the simulator plays from the
        // settings the command lines name.
        for (std::size_t i = 1; i < search.played.size(); ++i) {
            QVERIFY(search.played[i - 1].tokens_per_second >= search.played[i].tokens_per_second);
        }
        Candidate base = planned->candidates[search.static_candidate];
        base.layout.stage_layers.clear();
        base.layout.virtual_stages = 1;
        base.layout.recompute = best.recompute;
        base.layout.sequence_parallel = best.sequence_parallel;
        if (base.layout.schedule == parallel::PipelineSchedule::interleaved) {
            base.layout.schedule = parallel::PipelineSchedule::one_f_one_b;
        }
        sim::SimulationConfig config = simulation_config(request, base);
        config.hot_switch = best.spec;
        auto replayed = sim::simulate(config, nullptr);
        QVERIFY(replayed.ok());
        QCOMPARE(replayed->tokens_per_second, best.tokens_per_second);
        // The command lines: the spec quoted; fulcrum-train's without the static degrees.
        QVERIFY(search.simulate_command.find("--hot-switch '" + text + "'") != std::string::npos);
        QVERIFY(search.simulate_command.find("--stage-layers") == std::string::npos);
        if (const HotSwitchChoice* runnable = search.best_runnable()) {
            QVERIFY(!runnable->sequence_parallel);
            QVERIFY(search.train_command.find("--hot-switch '") != std::string::npos);
            QVERIFY(search.train_command.find("--dp ") == std::string::npos);
            QVERIFY(search.train_command.find("--sequence-parallel") == std::string::npos);
            QVERIFY(search.train_command.find("--overlap-grad-reduce off") != std::string::npos);
        }
        const std::string json = hot_switch_search_json(*planned, *searched);
        QVERIFY(json.find("\"spec\":\"" + text + "\"") != std::string::npos);
        QVERIFY(json.find("\"speedup\":") != std::string::npos);
    }

    // Pure DP is best for a small model: the search says so (speedup below 1 or none played),
    // and never reports a spec it did not play.
    void smallModelStaysStatic() {
        PlanRequest request;
        request.model = {.layers = 4, .hidden = 256, .heads = 8, .context = 4096, .vocab = 256};
        request.world_sizes = {4};
        request.gpus_per_node = 4;
        request.global_batch = 8;
        request.lengths = "long-tail:context=4096,median=512";
        request.top_k = 1;
        auto planned = plan::plan(request);
        QVERIFY(planned.ok());
        const Candidate& best = planned->candidates[planned->ranked.front()];
        auto searched = search_hot_switch(request, *planned, {.max_buckets = 2});
        QVERIFY(searched.ok());
        const HotSwitchSearch& search = searched->front();
        for (const HotSwitchChoice& choice : search.played) {
            QCOMPARE(choice.spec.buckets.size(), std::size_t(2));
            QVERIFY(choice.tokens_per_second > 0);
        }
        QCOMPARE(layout_string(best.layout.grid), std::string("dp4"));
        QVERIFY(!search.found() || search.speedup() < 1.05);
    }

    void badOptionsAreRefused() {
        const PlanRequest request = long_context_request();
        PlanResult empty;
        auto many = search_hot_switch(request, empty, {.max_buckets = 5});
        QVERIFY(!many.ok());
        QVERIFY(many.error().message.find("--hot-switch-buckets") != std::string::npos);
        auto none = search_hot_switch(request, empty, {.played = 0});
        QVERIFY(!none.ok());
    }
};

QTEST_MAIN(HotSwitchSearchTest)
#include "test_hot_switch_search.moc"
