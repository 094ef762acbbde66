// Structure recovery on real PyTorch traces (core/import/kineto/structure.h): the committed
// fixtures of tests/data/torch (torch.distributed jobs on CPU with gloo, made by
// make_fixtures.sh, whose truth.json says what each ran) imported whole, and Fulcrum's grid,
// stages, micro-batches, phases and schedule checked against what ran; the bubble table
// against the same figures worked out here from the recovered passes; the rules' pieces on
// their own; and a trace with nothing to recognise saying so.
#include <QTest>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/analysis/bubbles.h"
#include "core/analysis/passes.h"
#include "core/analysis/run_analysis.h"
#include "core/analysis/run_trace.h"
#include "core/import/importer.h"
#include "core/import/kineto/structure.h"
#include "core/store/trace_reader.h"

using namespace fulcrum;
using namespace fulcrum::importer::structure;
namespace fs = std::filesystem;

namespace {

const fs::path kTorch = fs::path(FULCRUM_SOURCE_DIR) / "tests" / "data" / "torch";

nlohmann::json truth() {
    std::ifstream in(kTorch / "truth.json");
    return nlohmann::json::parse(in);
}

struct Imported {
    analysis::RunTrace trace;
    std::vector<std::string> notes;
};

Imported import_fixture(const QTemporaryDir& dir, const std::string& name,
                        const nlohmann::json& fixture) {
    std::vector<std::string> inputs;
    for (const auto& file : fixture.at("files")) {
        inputs.push_back((kTorch / file.get<std::string>()).string());
    }
    const std::string out = dir.filePath(QString::fromStdString(name + ".fulcrum")).toStdString();
    auto report = importer::import_files(inputs, out);
    if (!report) {
        qFatal("%s: %s", name.c_str(), report.error().message.c_str());
    }
    auto reader = store::TraceReader::open(out);
    if (!reader) {
        qFatal("%s: %s", name.c_str(), reader.error().message.c_str());
    }
    Imported imported;
    auto trace = analysis::load_run_trace(*reader);
    if (!trace) {
        qFatal("%s: %s", name.c_str(), trace.error().message.c_str());
    }
    imported.trace = std::move(*trace);
    auto log = reader->import_log();
    if (log) {
        for (const ImportLogEntry& entry : *log) {
            imported.notes.push_back(entry.reason);
        }
    }
    return imported;
}

bool any_note(const Imported& imported, std::string_view words) {
    for (const std::string& note : imported.notes) {
        if (note.find(words) != std::string::npos) {
            return true;
        }
    }
    return false;
}

}  // namespace

class KinetoStructureTest : public QObject {
    Q_OBJECT

private slots:
    // Every pipeline fixture: each rank's coordinates are the job's, and its passes are
    // exactly the schedule's actions: per step, the (stage chunk, phase, micro-batch) of each
    // pass in the order the rank ran them (truth.json's compute_order).
    void recoversWhatRan_data() {
        QTest::addColumn<QString>("fixture");
        QTest::addColumn<QString>("schedule");
        QTest::newRow("gpipe") << "gpipe-pp4"
                               << "gpipe";
        QTest::newRow("1f1b") << "1f1b-pp4"
                              << "1f1b";
        QTest::newRow("interleaved") << "interleaved-pp2"
                                     << "interleaved";
        QTest::newRow("zero bubble") << "zb-pp2"
                                     << "";
        QTest::newRow("pp x dp") << "pp2-dp2"
                                 << "1f1b";
    }
    void recoversWhatRan() {
        QFETCH(QString, fixture);
        QFETCH(QString, schedule);
        const std::string name = fixture.toStdString();
        const nlohmann::json job = truth().at("fixtures").at(name);
        QTemporaryDir dir;
        const Imported imported = import_fixture(dir, name, job);
        const int pp = job.at("degrees").at("pp").get<int>();
        const int steps = job.at("steps_profiled").get<int>();
        std::map<int, const analysis::RankTrace*> by_rank;
        for (const analysis::RankTrace& rank : imported.trace.ranks) {
            by_rank[rank.info.rank] = &rank;
        }
        const std::vector<analysis::Pass> passes = analysis::find_passes(imported.trace);
        for (const auto& expected : job.at("per_rank")) {
            const int r = expected.at("rank").get<int>();
            QVERIFY2(by_rank.count(r) == 1, qPrintable(QString("rank %1").arg(r)));
            const RankInfo& info = by_rank[r]->info;
            QCOMPARE(info.pp, expected.at("pp_index").get<int>());
            QCOMPARE(info.dp, expected.at("dp_index").get<int>());
            QCOMPARE(info.tp, expected.at("tp_index").get<int>());
            // What the rank ran, each step: "<stage><F|B|I|W><micro-batch>".
            std::vector<std::string> order;
            for (const auto& action : expected.at("compute_order")) {
                order.push_back(action.get<std::string>());
            }
            for (int step = 1; step <= steps; ++step) {
                std::vector<std::string> found;
                for (const analysis::Pass& pass : passes) {
                    if (pass.rank != r || pass.step != step) {
                        continue;
                    }
                    QCOMPARE(int(pass.stage), info.pp);
                    // The chunk's global stage: the rank's k-th (a loop or a V placement).
                    const int stage_index =
                        expected.at("stages").at(std::size_t(pass.chunk)).get<int>();
                    const bool zero_bubble =
                        job.at("schedule").get<std::string>().find("ZeroBubble") !=
                        std::string::npos;
                    const char kind = pass.phase == Phase::forward       ? 'F'
                                      : pass.phase == Phase::weight_grad ? 'W'
                                      : zero_bubble                      ? 'I'
                                                                         : 'B';
                    found.push_back(std::to_string(stage_index) + kind +
                                    std::to_string(pass.microbatch));
                }
                QVERIFY2(found == order,
                         qPrintable(QString("rank %1 step %2: %3 passes, expected %4")
                                        .arg(r)
                                        .arg(step)
                                        .arg(found.size())
                                        .arg(order.size())));
            }
        }
        // The grid and the schedule in run.config, and the rules in the import log.
        const RunConfig& config = imported.trace.config;
        QCOMPARE(config.layout.grid.pp, pp);
        QCOMPARE(config.layout.grid.dp, job.at("degrees").at("dp").get<int>());
        QCOMPARE(config.layout.microbatches, job.at("microbatches_per_step").get<int>());
        if (!schedule.isEmpty()) {
            QCOMPARE(QString::fromStdString(parallel::schedule_name(config.layout.schedule)),
                     schedule);
        }
        QVERIFY(any_note(imported, "structure: grid"));
        QVERIFY(any_note(imported, "structure: ") &&
                (any_note(imported, "action labels") || any_note(imported, "pipeline sends")));
    }

    // The bubble table is the passes': per stage and step, busy is the union of its passes'
    // time (inside the step's window) and the bubble the rest of the window, as worked out
    // here from the recovered passes.
    void bubblesFromRecoveredPasses() {
        const nlohmann::json job = truth().at("fixtures").at("1f1b-pp4");
        QTemporaryDir dir;
        const Imported imported = import_fixture(dir, "1f1b-pp4", job);
        const std::vector<analysis::Pass> passes = analysis::find_passes(imported.trace);
        const analysis::BubbleAnalysis bubbles = analysis::analyze_bubbles(imported.trace, passes);
        QCOMPARE(bubbles.schedule, std::string("1f1b"));
        QCOMPARE(bubbles.stages.size(), std::size_t(4 * 2));
        for (const analysis::StageBubble& stage : bubbles.stages) {
            std::int64_t busy = 0;
            for (const analysis::Pass& pass : passes) {
                if (pass.step == stage.step && pass.stage == stage.stage) {
                    busy += pass.wall_ns();  // a rank's passes do not overlap
                }
            }
            QCOMPARE(stage.busy_ns, busy);
            QCOMPARE(stage.bubble_ns, stage.window_ns - busy);
            QVERIFY(stage.bubble_fraction.has_value());
            QCOMPARE(*stage.bubble_fraction, double(stage.bubble_ns) / double(busy));
        }
    }

    // What `fulcrum analyze` prints of an imported pipeline, as it does of fulcrum-train's
    // runs: the bubble table for every stage and step, the rank × micro-batch heatmap with a
    // column per micro-batch, the critical path of each step through the stages, and the
    // comparison of two such runs by name.
    void analysesOfImportedPipelines() {
        const nlohmann::json fixtures = truth().at("fixtures");
        QTemporaryDir dir;
        const Imported gpipe = import_fixture(dir, "gpipe-pp4", fixtures.at("gpipe-pp4"));
        const Imported one_f_one_b = import_fixture(dir, "1f1b-pp4", fixtures.at("1f1b-pp4"));
        for (const Imported* imported : {&gpipe, &one_f_one_b}) {
            auto analysis = analysis::analyze_run(imported->trace);
            QVERIFY(analysis.ok());
            QCOMPARE(analysis->bubbles.stages.size(), std::size_t(4 * 2));
            QVERIFY(analysis->bubbles.theory_fraction.has_value());
            QCOMPARE(analysis->imbalance.by_microbatch.size(), std::size_t(2));
            const analysis::Matrix& heatmap = analysis->imbalance.by_microbatch[0].compute_ns;
            QCOMPARE(heatmap.rows.size(), std::size_t(4));
            QCOMPARE(int(heatmap.columns.size()), imported->trace.config.layout.microbatches);
            QCOMPARE(analysis->critical_paths.size(), std::size_t(2));
            for (const analysis::CriticalPath& path : analysis->critical_paths) {
                QVERIFY(!path.by_stage.empty());
                QVERIFY(path.end_ns > path.start_ns);
            }
        }
        const analysis::RunDiff diff =
            analysis::diff_runs({&gpipe.trace, std::nullopt}, {&one_f_one_b.trace, std::nullopt});
        bool forward = false;
        for (const analysis::NameDiff& row : diff.rows) {
            if (row.name == "forward") {
                forward = true;
                QCOMPARE(row.count_a, 4.0 * 4);  // per step: 4 stages × 4 micro-batches
                QCOMPARE(row.count_b, 4.0 * 8);  // 4 stages × 8
            }
        }
        QVERIFY(forward);
    }

    // Megatron-LM's group names (a fixture built from them: make_megatron_like.py gives the
    // real pp2-dp2 traces Megatron-LM's TP 2 × PP 2 × DP 2 groups, tp-cp-dp-pp order): each
    // rank's coordinates from TENSOR_/DATA_/PIPELINE_MODEL_PARALLEL_GROUP, the groups that
    // name no dimension ignored, and the passes of the rank it copies.
    void megatronGroupNames() {
        std::ifstream in(kTorch / "megatron-like.json");
        const nlohmann::json made = nlohmann::json::parse(in);
        nlohmann::json job;
        for (const auto& rank : made.at("ranks")) {
            job["files"].push_back(rank.at("file"));
        }
        QTemporaryDir dir;
        const Imported imported = import_fixture(dir, "megatron-like", job);
        QCOMPARE(imported.trace.config.layout.grid,
                 (parallel::GridShape{.dp = 2, .tp = 2, .pp = 2, .cp = 1}));
        const std::vector<analysis::Pass> passes = analysis::find_passes(imported.trace);
        for (const auto& expected : made.at("ranks")) {
            const int r = expected.at("rank").get<int>();
            for (const analysis::RankTrace& rank : imported.trace.ranks) {
                if (rank.info.rank != r) {
                    continue;
                }
                QCOMPARE(rank.info.tp, expected.at("tp").get<int>());
                QCOMPARE(rank.info.dp, expected.at("dp").get<int>());
                QCOMPARE(rank.info.pp, expected.at("pp").get<int>());
            }
            const auto count = std::count_if(passes.begin(), passes.end(),
                                             [&](const analysis::Pass& p) { return p.rank == r; });
            QCOMPARE(count, std::ptrdiff_t(4 * 2 * 2));  // micro-batches × phases × steps
        }
        QVERIFY(any_note(imported, "TENSOR_MODEL_PARALLEL_GROUP"));
    }

    // A mesh without a pipeline: the grid from DeviceMesh's groups, no passes, and a note.
    void meshWithoutPipeline() {
        const nlohmann::json job = truth().at("fixtures").at("tp2-dp2");
        QTemporaryDir dir;
        const Imported imported = import_fixture(dir, "tp2-dp2", job);
        for (const auto& expected : job.at("per_rank")) {
            const int r = expected.at("rank").get<int>();
            for (const analysis::RankTrace& rank : imported.trace.ranks) {
                if (rank.info.rank == r) {
                    QCOMPARE(rank.info.tp, expected.at("tp_index").get<int>());
                    QCOMPARE(rank.info.dp, expected.at("dp_index").get<int>());
                    QCOMPARE(rank.info.pp, 0);
                }
            }
        }
        QVERIFY(analysis::find_passes(imported.trace).empty());
        QVERIFY(any_note(imported, "mesh_dp, mesh_tp") || any_note(imported, "mesh_tp, mesh_dp"));
    }

    // The rules' pieces.
    void actionLabels() {
        const auto f = parse_pipeline_action("PP:3F12");
        QVERIFY(f && f->kind == PipelineAction::Kind::forward && f->stage_index == 3 &&
                f->microbatch == 12);
        const auto send = parse_pipeline_action("PP:0SEND_B2");
        QVERIFY(send && send->kind == PipelineAction::Kind::send_gradients);
        QCOMPARE(action_range_name(send->kind), std::string_view("send gradients"));
        const auto w = parse_pipeline_action("PP:1W0");
        QVERIFY(w && action_phase(w->kind) == Phase::weight_grad);
        const auto gpipe = parse_pipeline_action("Backward 7");
        QVERIFY(gpipe && gpipe->stage_index == -1 && gpipe->microbatch == 7);
        for (const char* other : {"PP:1UNSHARD", "PP:0WAIT_SEND_F1", "PP:1REDUCE_GRAD", "PP:F0",
                                  "PP:1F", "Forward", "Forward x", "aten::mm", "PP:1F0x"}) {
            QVERIFY2(!parse_pipeline_action(other), other);
        }
    }

    void gridFromGroupNames() {
        // Megatron-LM's names; rank 5 of TP 2 × PP 2 × DP 2 numbered tp-dp-pp.
        const std::vector<ProcessGroup> megatron = {
            {"1", "TENSOR_MODEL_PARALLEL_GROUP", {4, 5}},
            {"2", "DATA_PARALLEL_GROUP", {5, 7}},
            {"3", "PIPELINE_MODEL_PARALLEL_GROUP", {1, 5}},
        };
        const RecoveredGrid grid = recover_grid(5, 8, megatron, true);
        QVERIFY(grid.found);
        QCOMPARE(grid.grid, (Degrees{.dp = 2, .tp = 2, .pp = 2, .cp = 1}));
        QCOMPARE(grid.coordinates, (Coordinates{.dp = 0, .tp = 1, .pp = 1, .cp = 0}));
        QCOMPARE(grid.pipeline, (std::vector<std::int32_t>{1, 5}));
        // FSDP2's hybrid sharding: DP is the replicas of the shards.
        const RecoveredGrid hybrid = recover_grid(
            3, 8, {{"1", "mesh_dp_replicate", {1, 3}}, {"2", "mesh_dp_shard", {2, 3}}}, false);
        QCOMPARE(hybrid.grid.dp, 4);
        QCOMPARE(hybrid.coordinates.dp, 3);
        // Only the world, and sends: one pipeline over it.
        const RecoveredGrid world = recover_grid(2, 4, {{"0", "default_pg", {0, 1, 2, 3}}}, true);
        QVERIFY(world.found);
        QCOMPARE(world.grid.pp, 4);
        QCOMPARE(world.coordinates.pp, 2);
        QVERIFY(world.rule.find("inferred") != std::string::npos);
        // Only the world and no sends: nothing to go on.
        QVERIFY(!recover_grid(2, 4, {{"0", "default_pg", {0, 1, 2, 3}}}, false).found);
        QVERIFY(parse_process_groups("{\"pg_config\": [{\"pg_desc\": \"mesh_tp\", \"ranks\": "
                                     "[0, 1]}, 3, {\"ranks\": \"x\"}]}")
                    .size() == 1);
        QVERIFY(parse_process_groups("not json").empty());
    }

    // A middle stage of 1F1B, by hand: F0 F1 B0 F2 B1 B2 with their hand-overs, and work
    // between passes (buffers for the next receive) that is not a pass.
    void passesFromSends() {
        using K = HostOp::Kind;
        std::vector<HostOp> ops = {
            {0, 10, K::recv, 0},                                // activations 0
            {20, 30, K::send, 2},                               // after F0 (10–20)
            {31, 32, K::compute, -1},                           // a buffer for the next receive
            {32, 40, K::recv, 0},                               // activations 1
            {50, 55, K::send, 2},                               // after F1 (40–50)
            {55, 60, K::recv, 2},                               // gradients 0
            {60, 70, K::autograd, -1},                          // B0
            {70, 75, K::autograd, -1},   {76, 80, K::send, 0},  // gradients of B0
            {80, 85, K::recv, 0},                               // activations 2
            {95, 96, K::send, 2},                               // after F2 (85–95)
            {96, 97, K::recv, 2},        {97, 105, K::autograd, -1},  // B1
            {105, 106, K::send, 0},      {106, 107, K::recv, 2},
            {107, 115, K::autograd, -1},  // B2
            {115, 116, K::send, 0},      {116, 130, K::optimizer, -1},
        };
        const StepPasses step = passes_from_sends(ops, 0, 2, 0);
        QVERIFY(step.consistent);
        QCOMPARE(step.forwards, 3);
        QCOMPARE(step.backwards, 3);
        std::vector<std::string> passes;
        for (const RecoveredRange& range : step.ranges) {
            if (!action_is_communication(range.kind)) {
                passes.push_back((range.kind == PipelineAction::Kind::forward ? "F" : "B") +
                                 std::to_string(range.microbatch) + "@" +
                                 std::to_string(range.start_ns) + "-" +
                                 std::to_string(range.end_ns));
            }
        }
        QCOMPARE(passes, (std::vector<std::string>{"F0@10-20", "F1@40-50", "B0@60-75", "F2@85-95",
                                                   "B1@97-105", "B2@107-115"}));
        // A backward without its forward: the counts differ, nothing is kept.
        const StepPasses odd = passes_from_sends({{0, 5, K::autograd, -1}}, 0, 2, 0);
        QVERIFY(!odd.consistent && odd.ranges.empty());
    }
};

QTEST_MAIN(KinetoStructureTest)
#include "test_kineto_structure.moc"
