// run.config's one reader and one writer (core/trace/run_config.h): everything written is read
// back, fields missing or of the wrong type keep their defaults, and a foreign run's grid comes
// from its ranks' coordinates.
#include <QtTest>

#include <nlohmann/json.hpp>

#include "core/trace/run_config.h"

using namespace fulcrum;

namespace {

// A configuration in which every field differs from its default.
RunConfig every_field_set() {
    RunConfig c;
    c.dp = 2, c.tp = 3, c.pp = 4, c.cp = 5;
    c.layers = 6, c.hidden = 64, c.heads = 8, c.context = 1024, c.vocab = 512;
    c.schedule = "interleaved";
    c.virtual_stages = 2;
    c.recompute = "selective";
    c.sequence_parallel = true;
    c.overlap_grad_reduce = true;
    c.dtype = "bf16";
    c.balancer = "wlb";
    c.cp_shard = "zigzag";
    c.microbatches = 8;
    c.stage_layers = {1, 2, 2, 1};
    c.steps = 0;
    c.epochs = 3;
    c.seed = 42;
    c.ilp_window = 4;
    c.wlb_max_tokens = 2048;
    c.wlb_max_delay = 2;
    c.wlb_thresholds = "256,512";
    c.packing_cost = "fitted";
    c.attention_kernel = "cuda";
    c.attention_chunk = 128;
    c.offload = true;
    c.data = "200 synthetic documents";
    c.lengths = "long-tail:context=1024";
    c.documents = 200;
    c.backend = "simulated";
    c.gemm_gflops = 75.5;
    c.gemm_gflops_cold = 55.25;
    c.host_cores = 2;
    c.comm = "nccl";
    c.simulated = true;
    c.cost_model = "analytic";
    c.hot_switch = "0-2048:dp2;2048-:pp2";
    return c;
}

}  // namespace

class TestRunConfig : public QObject {
    Q_OBJECT
private slots:
    void everyFieldIsWrittenAndReadBack() {
        const RunConfig written = every_field_set();
        const std::string json = run_config_json(written);
        const RunConfig read = parse_run_config(json, {});
        // The same text again: no field is written and not read, or read into another.
        QCOMPARE(run_config_json(read), json);
        QCOMPARE(read.tp, 3);
        QCOMPARE(read.cp, 5);
        QCOMPARE(read.hidden, 64);
        QCOMPARE(read.wlb_max_delay, 2);
        QCOMPARE(read.stage_layers, (std::vector<int>{1, 2, 2, 1}));
        QCOMPARE(read.cost_model, std::string("analytic"));
        QCOMPARE(read.hot_switch, std::string("0-2048:dp2;2048-:pp2"));
        QCOMPARE(read.gemm_gflops, 75.5);
        QCOMPARE(read.gemm_gflops_cold, 55.25);
        QCOMPARE(read.host_cores, 2);
        QVERIFY(read.grid_known);
        // Every field set is a key of its own: a default configuration writes each of them
        // with another value, or (an empty string) not at all.
        const auto set = nlohmann::json::parse(json);
        const auto defaults = nlohmann::json::parse(run_config_json(RunConfig{}));
        int differing = 0;
        for (const auto& [key, value] : set.items()) {
            if (!defaults.contains(key) || defaults[key] != value) {
                ++differing;
            }
        }
        QCOMPARE(differing, int(set.size()) - 1);  // all but "steps", 0 in both
        QCOMPARE(set["model"]["layers"].get<int>(), 6);
    }

    void emptyStringsAreLeftOut() {
        const auto json = nlohmann::json::parse(run_config_json(RunConfig{}));
        QVERIFY(!json.contains("schedule"));
        QVERIFY(!json.contains("cost_model"));
        QVERIFY(!json.contains("gemm_gflops"));  // not measured
        QCOMPARE(json["dp"].get<int>(), 1);
        QCOMPARE(json["simulated"].get<bool>(), false);
    }

    void wrongTypesKeepTheirDefaults() {
        const RunConfig read = parse_run_config(
            R"({"pp": "two", "tp": 2, "schedule": 3, "offload": 1, "model": [1, 2], "stage_layers": [1, "x"]})",
            {});
        QCOMPARE(read.pp, 1);
        QCOMPARE(read.tp, 2);
        QCOMPARE(read.schedule, std::string());
        QCOMPARE(read.offload, false);
        QVERIFY(!read.has_model());
        QVERIFY(read.stage_layers.empty());
    }

    void aForeignRunTakesItsGridFromItsRanks() {
        RankInfo a, b;
        a.rank = 0;
        b.rank = 3;
        b.dp = 1, b.pp = 1;
        const RunConfig read = parse_run_config("not json", {a, b});
        QVERIFY(read.grid_known);
        QCOMPARE(read.dp, 2);
        QCOMPARE(read.pp, 2);
        QCOMPARE(read.tp, 1);
        QCOMPARE(describe_grid(read), std::string("dp 2 × tp 1 × pp 2 × cp 1"));

        const RunConfig unknown = parse_run_config("{}", {});
        QVERIFY(!unknown.grid_known);
        QVERIFY(describe_grid(unknown).starts_with("unknown"));
    }
};

QTEST_GUILESS_MAIN(TestRunConfig)
#include "test_run_config.moc"
