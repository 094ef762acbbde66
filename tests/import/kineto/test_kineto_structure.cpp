// Structure recovery on real PyTorch traces (core/import/kineto/structure.h): the committed
// fixtures of tests/data/torch (torch.distributed jobs on CPU with gloo, made by
// make_fixtures.sh, whose truth.json says what each ran) imported whole, and Fulcrum's grid,
// stages, micro-batches, phases and schedule checked against what ran; the bubble table
// against the same figures worked out here from the recovered passes; the rules' pieces on
// their own; and a trace with nothing to recognise saying so.
#include <QTest>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "core/analysis/bubbles.h"
#include "core/analysis/cp_load.h"
#include "core/analysis/passes.h"
#include "core/analysis/run_analysis.h"
#include "core/analysis/run_trace.h"
#include "core/import/importer.h"
#include "core/import/kineto/structure.h"
#include "core/store/trace_reader.h"
#include "tests/support/imported_run.h"
#include "tests/support/trace_json.h"

using namespace fulcrum;
using namespace fulcrum::importer::structure;
using fulcrum::test::any_note;
using fulcrum::test::drop_events;
using fulcrum::test::import_inputs;
using fulcrum::test::Imported;
using fulcrum::test::read_gzip;
namespace fs = std::filesystem;

namespace {

const fs::path kTorch = fs::path(FULCRUM_SOURCE_DIR) / "tests" / "data" / "torch";

nlohmann::json truth() {
    std::ifstream in(kTorch / "truth.json");
    return nlohmann::json::parse(in);
}

// The fixture's traces as other runs record them. kAutogradThread: a GPU run's, the autograd
// engine's operators on a thread of their own (its device thread), not on the Python thread
// that called backward. kNoShapes: a profile taken without record_shapes (torch.profiler's
// default), so with no "Concrete Inputs" and no peer for a send or receive.
// kContextParallel (tp2-dp2 only): its TP mesh named cp, and each aten::relu renamed as the
// flash attention operator, so a dp2 × cp2 grid with "attention" inside its forwards.
// kNotStepped: a profile whose profiler was never stepped, so without ProfilerStep#N.
// kUnlabelled: without torch.distributed.pipelining's action labels (PP:…), as Megatron-LM's
// interleaved schedule records none.
enum Variant {
    kAsRecorded = 0,
    kAutogradThread = 1,
    kNoShapes = 2,
    kContextParallel = 4,
    kNotStepped = 8,
    kUnlabelled = 16
};

std::vector<std::string> variant_of(const QTemporaryDir& dir, const nlohmann::json& fixture,
                                    int variant) {
    std::vector<std::string> inputs;
    for (const auto& file : fixture.at("files")) {
        nlohmann::json trace = nlohmann::json::parse(read_gzip(kTorch / file.get<std::string>()));
        for (auto& e : trace.at("traceEvents")) {
            if ((variant & kAutogradThread) != 0 &&
                e.value("name", "").starts_with("autograd::engine::evaluate_function")) {
                e["tid"] = 999999;
            }
            if ((variant & kNoShapes) != 0 && e.contains("args")) {
                e["args"].erase("Concrete Inputs");
                e["args"].erase("Input Dims");
            }
            if ((variant & kContextParallel) != 0 && e.value("name", "") == "aten::relu") {
                e["name"] = "aten::_scaled_dot_product_flash_attention";
            }
        }
        if ((variant & kUnlabelled) != 0) {
            drop_events(trace, "PP:");
        }
        if ((variant & kNotStepped) != 0) {
            drop_events(trace, "ProfilerStep#");
        }
        if ((variant & kContextParallel) != 0) {
            for (auto& group : trace.at("distributedInfo").at("pg_config")) {
                if (group.value("pg_desc", "") == "mesh_tp") {
                    group["pg_desc"] = "mesh_cp";
                }
            }
        }
        const std::string path =
            dir.filePath(QString("variant-%1-").arg(variant) +
                         QString::fromStdString(file.get<std::string>() + ".json"))
                .toStdString();
        std::ofstream(path) << trace.dump();
        inputs.push_back(path);
    }
    return inputs;
}

Imported import_fixture(const QTemporaryDir& dir, const std::string& name,
                        const nlohmann::json& fixture, int variant = kAsRecorded) {
    std::vector<std::string> inputs;
    for (const auto& file : fixture.at("files")) {
        inputs.push_back((kTorch / file.get<std::string>()).string());
    }
    if (variant != kAsRecorded) {
        inputs = variant_of(dir, fixture, variant);
    }
    return import_inputs(dir, name, inputs);
}

// The ProfilerStep#N step a raw trace's event starting at `ts` (µs, as in the file) is in, if
// any.
class RawSteps {
public:
    explicit RawSteps(const nlohmann::json& raw) {
        for (const auto& e : raw.at("traceEvents")) {
            const std::string name = e.value("name", "");
            if (e.value("ph", "") == "X" && name.starts_with("ProfilerStep#")) {
                const double ts = e.at("ts").get<double>();
                windows_.push_back(
                    {std::stoi(name.substr(13)), ts, ts + e.at("dur").get<double>()});
            }
        }
    }
    std::optional<int> step_at(double ts) const {
        for (const Window& window : windows_) {
            if (ts >= window.from && ts < window.to) {
                return window.step;
            }
        }
        return std::nullopt;
    }

private:
    struct Window {
        int step;
        double from, to;
    };
    std::vector<Window> windows_;
};

}  // namespace

class KinetoStructureTest : public QObject {
    Q_OBJECT

private slots:
    // One plain PyTorch loop on a GPU (tests/data/torch/cuda_train.py), traced twice: by
    // PyTorch's profiler (cuda-train-kineto.json.gz, imported here) and by fulcrum capture
    // (tests/data/gpu-torch-train.fulcrum). Each kernel PyTorch saw, the collector saw as often,
    // by name; the collector's only extra kernels are the two it saw before the loop, outside
    // the profiler (the attention mask's). The import finds the loop's four steps from its
    // optimizer steps, the profiler having been stepped without a schedule.
    void aGpuLoopTracedTwiceHasTheSameKernels() {
        QTemporaryDir dir;
        const Imported imported =
            import_inputs(dir, "kineto", {(kTorch / "cuda-train-kineto.json.gz").string()});
        auto reader =
            store::TraceReader::open((kTorch.parent_path() / "gpu-torch-train.fulcrum").string());
        QVERIFY(reader.ok());
        auto captured = analysis::load_run_trace(*reader);
        QVERIFY(captured.ok());
        const auto kernels = [](const analysis::RunTrace& trace, std::int64_t from_ns) {
            std::map<std::string, int> by_name;
            for (const auto& rank : trace.ranks) {
                for (const auto& lane : rank.lanes) {
                    for (const Event& event : lane.events) {
                        if (event.kind == EventKind::kernel && event.start_ns >= from_ns) {
                            ++by_name[std::string(trace.name(event.name))];
                        }
                    }
                }
            }
            return by_name;
        };
        std::int64_t loop_start = INT64_MAX;
        for (const auto& lane : captured->ranks.front().lanes) {
            for (const Event& event : lane.events) {
                if (captured->name(event.name) == "train_step 0") {
                    loop_start = event.start_ns;
                }
            }
        }
        QVERIFY(loop_start < INT64_MAX);
        const auto seen_by_pytorch = kernels(imported.trace, INT64_MIN);
        const auto seen_in_loop = kernels(*captured, loop_start);
        const auto seen_by_collector = kernels(*captured, INT64_MIN);
        int total = 0;
        for (const auto& [name, count] : seen_by_pytorch) {
            total += count;
        }
        QVERIFY(total > 2000);
        QCOMPARE(seen_in_loop, seen_by_pytorch);
        int extra = 0;
        for (const auto& [name, count] : seen_by_collector) {
            extra += count - (seen_in_loop.contains(name) ? seen_in_loop.at(name) : 0);
        }
        QCOMPARE(extra, 2);
        const auto breakdown = analysis::analyze_run(imported.trace);
        QVERIFY(breakdown.ok());
        QCOMPARE(breakdown->breakdown.size(), std::size_t{4});
        QVERIFY(std::any_of(imported.notes.begin(), imported.notes.end(), [](const auto& note) {
            return note.find("from the optimizer's") != std::string::npos;
        }));
        // One process, so the grid of one; its passes from the autograd work, which ran on a
        // thread of its own and is told apart by the forwards' operators on the loop's thread:
        // two micro-batches' forward and backward in each of the four steps (the first from
        // the loop thread's first operator, though nothing of that thread but its optimizer
        // was kept), each backward timed by the kernels the autograd thread launched
        // (cuDNN's attention backward).
        QCOMPARE(imported.trace.config.layout.grid.dp * imported.trace.config.layout.grid.pp, 1);
        const auto passes = analysis::find_passes(imported.trace);
        QCOMPARE(passes.size(), std::size_t{4 * 2 * 2});
        std::vector<std::pair<std::int64_t, std::int64_t>> backward_kernels;
        for (const auto& lane : imported.trace.ranks.front().lanes) {
            for (const Event& event : lane.events) {
                if (event.kind == EventKind::kernel &&
                    imported.trace.name(event.name).find("sdpa") != std::string_view::npos &&
                    imported.trace.name(event.name).find("bprop") != std::string_view::npos)
                    backward_kernels.push_back({event.start_ns, event.end_ns});
            }
        }
        int inside = 0;
        for (const auto& pass : passes) {
            QVERIFY(pass.step >= 1 && pass.step <= 4);
            QVERIFY(pass.microbatch == 0 || pass.microbatch == 1);
            for (const auto& [start, end] : backward_kernels) {
                if (start >= pass.start_ns && end <= pass.end_ns) {
                    QCOMPARE(pass.phase, Phase::backward);
                    ++inside;
                }
            }
        }
        QCOMPARE(inside, 4 * 2 * 4);  // 4 steps, 2 micro-batches, 4 layers
    }

    // Every pipeline fixture: each rank's coordinates are the job's, and its passes are
    // exactly the schedule's actions: per step, the (stage chunk, phase, micro-batch) of each
    // pass in the order the rank ran them (truth.json's compute_order).
    // The unlabelled ones again as a GPU run records them (the autograd work on a thread of
    // its own) and as a profile without record_shapes does (no peer for a send), and both.
    void recoversWhatRan_data() {
        QTest::addColumn<QString>("fixture");
        QTest::addColumn<QString>("schedule");
        QTest::addColumn<int>("variant");
        QTest::newRow("gpipe") << "gpipe-pp4"
                               << "gpipe" << int(kAsRecorded);
        QTest::newRow("1f1b") << "1f1b-pp4"
                              << "1f1b" << int(kAsRecorded);
        QTest::newRow("interleaved") << "interleaved-pp2"
                                     << "interleaved" << int(kAsRecorded);
        QTest::newRow("zero bubble") << "zb-pp2"
                                     << "" << int(kAsRecorded);
        QTest::newRow("pp x dp") << "pp2-dp2"
                                 << "1f1b" << int(kAsRecorded);
        // The interleaved schedule without its labels: its passes from their order.
        QTest::newRow("interleaved, unlabelled") << "interleaved-pp2"
                                                 << "interleaved" << int(kUnlabelled);
        QTest::newRow("interleaved, unlabelled, autograd on its own thread, no shapes")
            << "interleaved-pp2"
            << "interleaved" << int(kUnlabelled | kAutogradThread | kNoShapes);
        for (const std::string fixture : {"1f1b-pp4", "pp2-dp2"}) {
            QTest::addRow("%s, autograd on its own thread", fixture.c_str())
                << QString::fromStdString(fixture) << "1f1b" << int(kAutogradThread);
            QTest::addRow("%s, no shapes", fixture.c_str())
                << QString::fromStdString(fixture) << "1f1b" << int(kNoShapes);
            QTest::addRow("%s, both", fixture.c_str())
                << QString::fromStdString(fixture) << "1f1b" << int(kAutogradThread | kNoShapes);
            QTest::addRow("%s, profiler not stepped", fixture.c_str())
                << QString::fromStdString(fixture) << "1f1b" << int(kNotStepped);
        }
    }
    void recoversWhatRan() {
        QFETCH(QString, fixture);
        QFETCH(QString, schedule);
        QFETCH(int, variant);
        const std::string name = fixture.toStdString();
        const nlohmann::json job = truth().at("fixtures").at(name);
        QTemporaryDir dir;
        const Imported imported = import_fixture(dir, name, job, variant);
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
        if ((variant & kUnlabelled) != 0) {
            QVERIFY(any_note(imported, "interleaved schedule of 2 model chunks"));
            QCOMPARE(config.layout.virtual_stages, 2);
        }
    }

    // The bubble table is the passes': per stage and step, busy is its passes' time less their
    // pipeline waits (inside the step's window) and the bubble the rest of the window, as
    // worked out here from the recovered passes. A gloo receive lasts until the wait on its
    // request returns, inside the pass it feeds: the first stage waits only on the next, the
    // last only on the previous, the middle ones on both.
    void bubblesFromRecoveredPasses() {
        const nlohmann::json job = truth().at("fixtures").at("1f1b-pp4");
        QTemporaryDir dir;
        const Imported imported = import_fixture(dir, "1f1b-pp4", job);
        const std::vector<analysis::Pass> passes = analysis::find_passes(imported.trace);
        const analysis::BubbleAnalysis bubbles = analysis::analyze_bubbles(imported.trace, passes);
        QCOMPARE(bubbles.schedule, std::string("1f1b"));
        QCOMPARE(bubbles.stages.size(), std::size_t(4 * 2));
        QVERIFY(any_note(imported, "receives last until their gloo request's wait returns"));
        fulcrum::test::compare_bubbles_with_passes(bubbles, passes, 3);
    }

    // A rank's file cut short (the profiler killed, a disk full) ends inside its last step:
    // that step is left without passes and said to be cut, and the steps before it keep the
    // passes the whole file gives; the cut is not taken for an interleaved order.
    void aFileCutShortKeepsItsWholeSteps() {
        const nlohmann::json job = truth().at("fixtures").at("1f1b-pp4");
        QTemporaryDir dir;
        const Imported whole = import_fixture(dir, "1f1b-pp4", job);
        std::vector<std::string> inputs = variant_of(dir, job, kAsRecorded);
        std::string text;
        {
            std::ifstream in(inputs[1], std::ios::binary);
            text.assign(std::istreambuf_iterator<char>(in), {});
        }
        std::ofstream(inputs[1], std::ios::binary | std::ios::trunc)
            << text.substr(0, text.size() * 4 / 5);
        const Imported cut = import_inputs(dir, "cut", inputs);
        QVERIFY(any_note(cut, "the last step left without passes: the file ends inside it"));
        QVERIFY(!any_note(cut, "forward and backward counts differ"));
        QVERIFY(!any_note(cut, "interleaved"));
        const auto passes_of = [](const Imported& imported, std::int32_t rank) {
            std::map<std::int32_t, std::vector<std::tuple<Phase, std::int32_t, std::int64_t>>>
                by_step;
            for (const analysis::Pass& pass : analysis::find_passes(imported.trace)) {
                if (pass.rank == rank) {
                    by_step[pass.step].emplace_back(pass.phase, pass.microbatch, pass.start_ns);
                }
            }
            return by_step;
        };
        const auto cut_passes = passes_of(cut, 1), whole_passes = passes_of(whole, 1);
        QCOMPARE(whole_passes.size(), std::size_t(2));
        QCOMPARE(cut_passes.size(), std::size_t(1));  // the first step's, the second cut
        QCOMPARE(cut_passes.begin()->second, whole_passes.begin()->second);
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
            QVERIFY(!analysis->bubbles.schedule_assumed);  // told from labels or sends
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

    // Zero-bubble labels (I and W): one model chunk a stage is ZB-H1, which the run's
    // schedule says; ScheduleZBVZeroBubble's two chunks a stage in a V (the zb-pp2 fixture)
    // are no schedule of Fulcrum's, said in the log with the placement.
    void zeroBubbleSchedules() {
        QTemporaryDir dir;
        std::vector<std::string> inputs;
        for (int rank = 0; rank < 2; ++rank) {
            nlohmann::json events = nlohmann::json::array();
            const auto range = [&](const std::string& name, double ts, double dur) {
                events.push_back({{"ph", "X"},
                                  {"cat", "user_annotation"},
                                  {"name", name},
                                  {"pid", 1},
                                  {"tid", 1},
                                  {"ts", ts},
                                  {"dur", dur}});
            };
            range("ProfilerStep#1", 0, 1000);
            const std::string stage = "PP:" + std::to_string(rank);
            double t = 10;
            for (const std::string action : {"F0", "F1", "I0", "W0", "I1", "W1"}) {
                range(stage + action, t, 8);
                t += 10;
            }
            const nlohmann::json trace = {{"schemaVersion", 1},
                                          {"baseTimeNanoseconds", 0},
                                          {"distributedInfo",
                                           {{"backend", "gloo"},
                                            {"rank", rank},
                                            {"world_size", 2},
                                            {"pg_config",
                                             {{{"pg_name", "1"},
                                               {"pg_desc", "mesh_pp"},
                                               {"pg_size", 2},
                                               {"ranks", {0, 1}}}}}}},
                                          {"traceEvents", events}};
            const std::string path =
                dir.filePath(QString("zbh1-rank%1.json").arg(rank)).toStdString();
            std::ofstream(path) << trace.dump();
            inputs.push_back(path);
        }
        const std::string out = dir.filePath("zbh1.fulcrum").toStdString();
        QVERIFY(importer::import_files(inputs, out));
        auto reader = store::TraceReader::open(out);
        QVERIFY(reader);
        auto trace = analysis::load_run_trace(*reader);
        QVERIFY(trace);
        QCOMPARE(trace->config.layout.schedule, parallel::PipelineSchedule::zero_bubble_h1);
        QCOMPARE(trace->config.layout.microbatches, 2);

        const nlohmann::json job = truth().at("fixtures").at("zb-pp2");
        const Imported zbv = import_fixture(dir, "zb-pp2", job);
        QVERIFY(any_note(zbv, "a zero-bubble schedule over 2 model chunks a stage (V placement"));
        // Its bubbles are replayed as 1F1B, and say that this is an assumption.
        auto analysis = analysis::analyze_run(zbv.trace);
        QVERIFY(analysis.ok());
        QVERIFY(!analysis->bubbles.stages.empty());
        QCOMPARE(analysis->bubbles.schedule, std::string("1f1b"));
        QVERIFY(analysis->bubbles.schedule_assumed);
    }

    // A mesh without a pipeline (FSDP2 over dp, DTensor TP): the grid from DeviceMesh's
    // groups, and each step's one forward and one backward per rank, micro-batch 0 on stage 0
    // (the job runs one batch a step). The backward is exactly the rank's autograd work of the
    // step, from the first autograd operator's start to the last one's end, read here from the
    // trace itself; the forward runs from the end of zero_grad to the backward. No pipeline,
    // so no bubble table; the critical path and the heatmap's one micro-batch column are there.
    // PyTorch's attention operators are attention to the analyses: the tp2-dp2 fixture made
    // a dp2 × cp2 run whose forwards hold two flash attention operators each (its ReLUs,
    // renamed), so CP load has a group per DP replica and step, each rank's attention the sum
    // of those operators' time in its forward, read here from the trace.
    void cpLoadFromAttentionOperators() {
        const nlohmann::json job = truth().at("fixtures").at("tp2-dp2");
        QTemporaryDir dir;
        const Imported imported = import_fixture(dir, "tp2-dp2", job, kContextParallel);
        QCOMPARE(imported.trace.config.layout.grid.cp, 2);
        QCOMPARE(imported.trace.config.layout.grid.tp, 1);
        // Each rank's attention per step: the renamed operators' time inside its forward.
        const std::vector<analysis::Pass> passes = analysis::find_passes(imported.trace);
        std::map<std::pair<int, int>, std::int64_t> expected;  // (rank, step) -> ns
        for (const auto& file : job.at("files")) {
            const nlohmann::json raw =
                nlohmann::json::parse(read_gzip(kTorch / file.get<std::string>()));
            const int r = raw.at("distributedInfo").at("rank").get<int>();
            const RawSteps steps(raw);
            for (const auto& e : raw.at("traceEvents")) {
                if (e.value("name", "") != "aten::relu") {
                    continue;
                }
                if (const auto step = steps.step_at(e.at("ts").get<double>())) {
                    expected[{r, *step}] += std::llround(e.at("dur").get<double>() * 1e3);
                }
            }
        }
        QCOMPARE(expected.size(), std::size_t(4 * 2));
        for (const analysis::Pass& pass : passes) {
            const std::int64_t want =
                pass.phase == Phase::forward ? expected.at({pass.rank, pass.step}) : 0;
            QVERIFY2(std::abs(pass.attention_ns - want) <= 2,
                     qPrintable(QString("rank %1 step %2: %3 ns, expected %4")
                                    .arg(pass.rank)
                                    .arg(pass.step)
                                    .arg(pass.attention_ns)
                                    .arg(want)));
        }
        const auto result = analysis::analyze_run(imported.trace);
        QVERIFY(result);
        QCOMPARE(result->cp_load.cp, 2);
        QCOMPARE(result->cp_load.groups.size(), std::size_t(2 * 2));  // DP replicas × steps
        for (const analysis::CpGroupLoad& group : result->cp_load.groups) {
            QCOMPARE(group.ranks.size(), std::size_t(2));
            QVERIFY(group.measured_imbalance.has_value());
            QVERIFY(!group.predicted_imbalance.has_value());  // no workload table
        }
    }

    // Again with the autograd work on a thread of its own, as on a GPU.
    void meshWithoutPipeline_data() {
        QTest::addColumn<int>("variant");
        QTest::newRow("cpu") << int(kAsRecorded);
        QTest::newRow("autograd on its own thread") << int(kAutogradThread);
        QTest::newRow("profiler not stepped") << int(kNotStepped);
    }
    void meshWithoutPipeline() {
        QFETCH(int, variant);
        const nlohmann::json job = truth().at("fixtures").at("tp2-dp2");
        QTemporaryDir dir;
        const Imported imported = import_fixture(dir, "tp2-dp2", job, variant);
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
        QVERIFY(any_note(imported, "mesh_dp, mesh_tp") || any_note(imported, "mesh_tp, mesh_dp"));
        QVERIFY(any_note(imported, "passes from the autograd work (no pipeline"));
        if ((variant & kNotStepped) != 0) {
            QVERIFY(any_note(imported, "2 steps from the optimizer's (Optimizer.step#)"));
        }

        const std::vector<analysis::Pass> passes = analysis::find_passes(imported.trace);
        const int steps = job.at("steps_profiled").get<int>();
        QCOMPARE(passes.size(), std::size_t(4 * steps * 2));  // ranks × steps × (F, B)
        for (const auto& file : job.at("files")) {
            // The trace's own autograd extent and zero_grad's end, per step, on the thread that
            // ran the step (µs in the file; the importer's nanoseconds are the same instants).
            const nlohmann::json raw =
                nlohmann::json::parse(read_gzip(kTorch / file.get<std::string>()));
            const int r = raw.at("distributedInfo").at("rank").get<int>();
            std::map<int, std::pair<double, double>> autograd;  // step -> first start, last end
            std::map<int, double> zero_grad_end;
            const RawSteps steps_of_file(raw);
            for (const auto& e : raw.at("traceEvents")) {
                const std::string name = e.value("name", "");
                if (e.value("ph", "") != "X") {
                    continue;
                }
                const double start = e.at("ts").get<double>(),
                             end = start + e.at("dur").get<double>();
                const auto step = steps_of_file.step_at(start);
                if (!step) {
                    continue;
                }
                if (name.starts_with("autograd::engine::evaluate_function")) {
                    auto [it, added] = autograd.try_emplace(*step, start, end);
                    it->second.first = std::min(it->second.first, start);
                    it->second.second = std::max(it->second.second, end);
                } else if (name.starts_with("Optimizer.zero_grad")) {
                    zero_grad_end[*step] = end;
                }
            }
            QCOMPARE(int(autograd.size()), steps);
            for (const auto& [step, extent] : autograd) {
                std::map<Phase, const analysis::Pass*> found;
                for (const analysis::Pass& pass : passes) {
                    if (pass.rank == r && pass.step == step) {
                        QCOMPARE(pass.stage, 0);
                        QCOMPARE(pass.microbatch, 0);
                        found[pass.phase] = &pass;
                    }
                }
                QCOMPARE(found.size(), std::size_t(2));
                const analysis::Pass& backward = *found.at(Phase::backward);
                const analysis::Pass& forward = *found.at(Phase::forward);
                // The importer's time origin is its own: compare lengths and offsets.
                const auto ns = [](double us) { return std::llround(us * 1e3); };
                QVERIFY(std::abs(backward.wall_ns() - ns(extent.second - extent.first)) <= 1);
                QVERIFY(std::abs(backward.start_ns - forward.start_ns -
                                 ns(extent.first - zero_grad_end.at(step))) <= 1);
                QCOMPARE(forward.end_ns, backward.start_ns);
            }
        }

        const auto result = analysis::analyze_run(imported.trace);
        QVERIFY(result);
        const analysis::RunAnalysis& analysed = *result;
        QVERIFY(analysed.bubbles.stages.empty());
        QCOMPARE(int(analysed.critical_paths.size()), steps);
        QCOMPARE(int(analysed.imbalance.by_microbatch.size()), steps);
        for (const analysis::StepMatrices& step : analysed.imbalance.by_microbatch) {
            QCOMPARE(step.compute_ns.columns, std::vector<std::int32_t>{0});
        }
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
        // One process in no distributed world: the grid of one rank; the second of several
        // such files is no rank of one run.
        const RecoveredGrid alone = recover_grid(0, -1, {}, false);
        QVERIFY(alone.found);
        QCOMPARE(alone.grid, (Degrees{1, 1, 1, 1}));
        QCOMPARE(alone.pipeline, std::vector<std::int32_t>{0});
        QVERIFY(recover_grid(0, 1, {}, false).found);
        QVERIFY(!recover_grid(1, -1, {}, false).found);
        QVERIFY(!recover_grid(0, 4, {}, false).found);
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

    // A gloo receive posted at 0–10 whose request is waited on until 40: the receive lasts
    // until 40 and its forward starts with it; a receive whose request ends after the pass it
    // feeds, or whose request started elsewhere, stays as it was.
    void receivesWaitOnTheirRequests() {
        using Kind = PipelineAction::Kind;
        StepPasses step;
        step.ranges = {
            {50, 60, Kind::send_activations, 0},  // out of order: sorted by the call
            {0, 10, Kind::recv_activations, 0},  {42, 50, Kind::forward, 0},
            {60, 62, Kind::recv_gradients, 0},   {70, 80, Kind::backward, 0},
            {80, 82, Kind::recv_activations, 1}, {90, 95, Kind::forward, 1},
        };
        const std::vector<std::pair<std::int64_t, std::int64_t>> requests = {
            {5, 40},   // inside the first receive, waited on until 40
            {61, 99},  // the gradients' request outlasts their backward
            {85, 89},  // starts after the third receive: not its request
        };
        QCOMPARE(wait_for_receives(step, requests), std::int64_t(1));
        std::vector<std::string> found;
        for (const RecoveredRange& range : step.ranges) {
            found.push_back(std::string(action_range_name(range.kind)) + "@" +
                            std::to_string(range.start_ns) + "-" + std::to_string(range.end_ns));
        }
        QCOMPARE(found, (std::vector<std::string>{"recv activations@0-40", "forward@0-50",
                                                  "send activations@50-60", "recv gradients@60-62",
                                                  "backward@70-80", "recv activations@80-82",
                                                  "forward@90-95"}));
    }

    // Megatron-LM's own example of its schedule table (schedules.py, PP2 N3M5 with VP2: five
    // micro-batches in groups of three, two chunks).
    void interleavedForwardOrder() {
        std::vector<std::pair<std::int32_t, std::int32_t>> expected;
        const int microbatch[] = {0, 1, 2, 0, 1, 2, 3, 4, 3, 4};
        const int chunk[] = {0, 0, 0, 1, 1, 1, 0, 0, 1, 1};
        for (int k = 0; k < 10; ++k) {
            expected.emplace_back(microbatch[k], chunk[k]);
        }
        QCOMPARE(interleaved_forward_order(5, 2, 3), expected);
        QVERIFY(interleaved_forward_order(0, 2, 2).empty());
    }

    // The last of two stages of Megatron-LM's interleaved schedule, two chunks and two
    // micro-batches, by hand: two warm-up forwards, each followed by its send and the next
    // receive; two steady pairs of a forward and a backward with the four hand-overs batched
    // after both; two cool-down backwards. The forwards' operators are in `starts` only, as
    // pass 1 keeps no compute operator; the gaps between the batched hand-overs hold none.
    void interleavedPasses() {
        using K = HostOp::Kind;
        const std::vector<HostOp> ops = {
            {0, 5, K::optimizer, -1},                              // zero_grad
            {22, 24, K::send, -1},       {24, 26, K::recv, -1},    // after F (5–22)
            {42, 44, K::send, -1},       {44, 46, K::recv, -1},    // after F (26–42)
            {60, 70, K::autograd, -1},                             // F (46–60), then B
            {72, 74, K::send, -1},       {74, 76, K::recv, -1},    // batched
            {76, 78, K::send, -1},       {78, 80, K::recv, -1},    //
            {94, 104, K::autograd, -1},                            // F (80–94), then B
            {106, 108, K::send, -1},     {108, 110, K::recv, -1},  // batched
            {110, 112, K::send, -1},     {112, 114, K::recv, -1},  //
            {114, 124, K::autograd, -1},                           // cool-down B
            {126, 128, K::send, -1},     {128, 130, K::recv, -1},  //
            {130, 140, K::autograd, -1},                           // cool-down B
            {142, 144, K::send, -1},     {150, 160, K::optimizer, -1},
        };
        std::vector<std::int64_t> starts;
        for (const std::int64_t first : {10, 28, 48, 82}) {  // five operators a forward
            for (int k = 0; k < 5; ++k) {
                starts.push_back(first + 2 * k);
            }
        }
        // A receive's buffer: an operator alone between a send and a receive.
        starts.push_back(21);
        std::sort(starts.begin(), starts.end());
        const InterleavedPasses step = interleaved_passes(ops, starts, 1, 2, 0);
        QVERIFY(step.found);
        QCOMPARE(step.chunks, 2);
        QCOMPARE(step.microbatches, 2);
        std::vector<std::string> passes;
        for (const RecoveredRange& range : step.ranges) {
            passes.push_back((range.kind == PipelineAction::Kind::forward ? "F" : "B") +
                             std::to_string(range.microbatch) + "." + std::to_string(range.chunk) +
                             "@" + std::to_string(range.start_ns) + "-" +
                             std::to_string(range.end_ns));
        }
        QCOMPARE(passes, (std::vector<std::string>{"F0.0@5-22", "F1.0@26-42", "F0.1@46-60",
                                                   "B0.1@60-70", "F1.1@80-94", "B1.1@94-104",
                                                   "B0.0@114-124", "B1.0@130-140"}));
        // Four forwards before any backward: on the first of two stages, two chunks of two
        // micro-batches and four chunks of one give that order alike, so nothing is found; on
        // the last stage only four chunks do (two would start alternating after two).
        const std::vector<HostOp> warmup_only = {
            {10, 12, K::send, -1},      {30, 32, K::send, -1},       {50, 52, K::send, -1},
            {70, 72, K::send, -1},      {72, 80, K::autograd, -1},   {80, 90, K::recv, -1},
            {90, 100, K::autograd, -1}, {100, 110, K::recv, -1},     {110, 120, K::autograd, -1},
            {120, 130, K::recv, -1},    {130, 140, K::autograd, -1},
        };
        const std::vector<std::int64_t> one_each = {1, 21, 41, 61};
        const InterleavedPasses last = interleaved_passes(warmup_only, one_each, 1, 2, 0);
        QVERIFY(last.found);
        QCOMPARE(last.chunks, 4);
        const InterleavedPasses ambiguous = interleaved_passes(warmup_only, one_each, 0, 2, 0);
        QVERIFY(!ambiguous.found && ambiguous.ranges.empty());
    }

    // A rank without a pipeline (no neighbours): each autograd run is a backward and the work
    // before it its forward, all-gathers inside that forward included; a reduction inside the
    // backward does not split it, a forward label between two backwards does; the work after
    // the last backward (FSDP's post-backward callback) is no forward. So two micro-batches of
    // gradient accumulation give F0 B0 F1 B1.
    void passesWithoutPipeline() {
        using K = HostOp::Kind;
        const std::vector<HostOp> ops = {
            {5, 8, K::optimizer, -1},     // zero_grad
            {10, 12, K::collective, -1},  // an FSDP all-gather in the forward
            {20, 22, K::collective, -1},  // another one
            {30, 40, K::autograd, -1},    // B0
            {40, 42, K::collective, -1},  // a gradient reduction inside B0
            {42, 50, K::autograd, -1},    // B0, continued
            {52, 58, K::compute, -1},     // DDP's forward label: F1 (50–60)
            {60, 70, K::autograd, -1},    // B1
            {75, 78, K::collective, -1},  // the last reduction
            {90, 99, K::optimizer, -1},   // step, after the post-backward callback (78–90)
        };
        const StepPasses step = passes_from_sends(ops, -1, -1, 0);
        QVERIFY(step.consistent);
        std::vector<std::string> passes;
        for (const RecoveredRange& range : step.ranges) {
            passes.push_back((range.kind == PipelineAction::Kind::forward ? "F" : "B") +
                             std::to_string(range.microbatch) + "@" +
                             std::to_string(range.start_ns) + "-" + std::to_string(range.end_ns));
        }
        QCOMPARE(passes, (std::vector<std::string>{"F0@8-30", "B0@30-50", "F1@50-60", "B1@60-70"}));
    }
};

QTEST_MAIN(KinetoStructureTest)
#include "test_kineto_structure.moc"
