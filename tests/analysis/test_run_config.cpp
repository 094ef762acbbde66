// run.config's one reader and one writer (core/parallel/run_config.h): everything written is read
// back, fields missing or of the wrong type keep their defaults and are unsaid (and a writer
// leaves out what is unsaid), and a foreign run's grid comes from its ranks' coordinates.
#include <QTest>

#include <nlohmann/json.hpp>

#include "core/parallel/run_config.h"

using namespace fulcrum;

namespace {

// A configuration in which every field differs from its default.
RunConfig every_field_set() {
    RunConfig c;
    c.layout.grid = {.dp = 2, .tp = 3, .pp = 4, .cp = 5};
    c.model = {.layers = 6,
               .hidden = 64,
               .heads = 8,
               .context = 1024,
               .vocab = 512,
               .architecture = parallel::Architecture::llama,
               .kv_heads = 2,
               .ffn_hidden = 160};
    c.layout.schedule = parallel::PipelineSchedule::interleaved;
    c.layout.virtual_stages = 2;
    c.layout.recompute = parallel::Recompute::selective;
    c.layout.sequence_parallel = true;
    c.layout.rank_order = parallel::kFulcrumOrder;
    c.layout.context_parallelism = parallel::ContextParallelism::ulysses;
    c.layout.zero_stage = 3;
    c.layout.offload_checkpoints = true;
    c.overlap_grad_reduce = true;
    c.overlap_param_gather = true;
    c.packed_attention = true;
    c.dtype = "bf16";
    c.grad_reduce_dtype = "fp32";
    c.balancer = "wlb";
    c.cp_shard = "zigzag";
    c.layout.microbatches = 8;
    c.layout.stage_layers = {1, 2, 2, 1};
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
    c.tp_comm_overlap = true;
    c.attention_backend = "unfused";
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
        QCOMPARE(read.layout.grid.tp, 3);
        QCOMPARE(read.layout.grid.cp, 5);
        QCOMPARE(read.model.hidden, 64);
        QCOMPARE(read.layout.schedule, parallel::PipelineSchedule::interleaved);
        QCOMPARE(read.layout.recompute, parallel::Recompute::selective);
        QVERIFY(read.layout.rank_order == parallel::kFulcrumOrder);
        QVERIFY(read.unsaid.empty());
        QCOMPARE(read.wlb_max_delay, 2);
        QCOMPARE(read.layout.stage_layers, (std::vector<int>{1, 2, 2, 1}));
        QCOMPARE(read.cost_model, std::string("analytic"));
        QCOMPARE(read.grad_reduce_dtype, std::string("fp32"));
        QCOMPARE(read.hot_switch, std::string("0-2048:dp2;2048-:pp2"));
        QCOMPARE(read.gemm_gflops, 75.5);
        QCOMPARE(read.gemm_gflops_cold, 55.25);
        QCOMPARE(read.host_cores, 2);
        QCOMPARE(read.layout.context_parallelism, parallel::ContextParallelism::ulysses);
        QCOMPARE(read.layout.zero_stage, 3);
        QVERIFY(read.layout.offload_checkpoints);
        QCOMPARE(read.model.architecture, parallel::Architecture::llama);
        QCOMPARE(read.model.kv_heads, 2);
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

    void emptyStringsAndUnsaidKeysAreLeftOut() {
        const auto json = nlohmann::json::parse(run_config_json(RunConfig{}));
        QCOMPARE(json["schedule"].get<std::string>(), std::string("1f1b"));
        QVERIFY(!json.contains("balancer"));
        QVERIFY(!json.contains("cost_model"));
        QVERIFY(!json.contains("gemm_gflops"));  // not measured
        QCOMPARE(json["dp"].get<int>(), 1);
        QCOMPARE(json["simulated"].get<bool>(), false);
        RunConfig unsaid;
        unsaid.unsaid = {"schedule", "dp"};
        const auto without = nlohmann::json::parse(run_config_json(unsaid));
        QVERIFY(!without.contains("schedule"));
        QVERIFY(!without.contains("dp"));
        QVERIFY(without.contains("tp"));
    }

    void wrongTypesKeepTheirDefaults() {
        const RunConfig read = parse_run_config(
            R"({"pp": "two", "tp": 2, "schedule": 3, "offload": 1, "model": [1, 2], "stage_layers": [1, "x"]})",
            {});
        QCOMPARE(read.layout.grid.pp, 1);
        QCOMPARE(read.layout.grid.tp, 2);
        QVERIFY(!read.says("schedule"));  // a number is no schedule: 1F1B, unsaid
        QCOMPARE(read.layout.schedule, parallel::PipelineSchedule::one_f_one_b);
        QCOMPARE(schedule_text(read), std::string());
        QVERIFY(!read.says("pp"));
        QVERIFY(read.says("tp"));
        QCOMPARE(read.offload, false);
        QVERIFY(!read.has_model());
        QVERIFY(read.layout.stage_layers.empty());
        // A schedule named in words no Fulcrum tool reads is unsaid too.
        const RunConfig foreign = parse_run_config(R"({"schedule": "1F1B-interleaved"})", {});
        QVERIFY(!foreign.says("schedule"));
        QVERIFY(!foreign.says("recompute"));  // not there at all
    }

    void aForeignRunTakesItsGridFromItsRanks() {
        RankInfo a, b;
        a.rank = 0;
        b.rank = 3;
        b.dp = 1, b.pp = 1;
        const RunConfig read = parse_run_config("not json", {a, b});
        QVERIFY(read.grid_known);
        QCOMPARE(read.layout.grid.dp, 2);
        QCOMPARE(read.layout.grid.pp, 2);
        QCOMPARE(read.layout.grid.tp, 1);
        QCOMPARE(describe_grid(read), std::string("dp 2 × tp 1 × pp 2 × cp 1"));

        const RunConfig unknown = parse_run_config("{}", {});
        QVERIFY(!unknown.grid_known);
        QVERIFY(describe_grid(unknown).starts_with("unknown"));
    }
};

QTEST_GUILESS_MAIN(TestRunConfig)
#include "test_run_config.moc"
