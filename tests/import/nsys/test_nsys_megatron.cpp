// Megatron-LM's pipeline in Nsight Systems exports (core/import/nsys/megatron.h): the order of
// its hand-over calls read by hand, then the committed exports of a pp 4 × dp 2 1F1B job and a
// pp 4 interleaved one of 2 chunks a stage (tests/data/megatron, played from Megatron-LM's
// schedules by make_nsys_megatron.py, with their truth; an export per rank, and one of every
// process) imported as a user imports them: every rank's stage and DP place, every step's
// passes in the order each rank ran them with their micro-batch, chunk and the GPU time each
// spans, the bubble table worked out from those passes, and what is said when a rank's file is
// missing or the schedule is one that is not read.
#include <sqlite3.h>

#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QTest>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/analysis/bubbles.h"
#include "core/analysis/passes.h"
#include "core/analysis/run_analysis.h"
#include "core/analysis/run_trace.h"
#include "core/import/importer.h"
#include "core/import/nsys/megatron.h"
#include "tests/support/imported_run.h"

using namespace fulcrum;
using namespace fulcrum::importer::megatron;
using fulcrum::test::any_note;
using fulcrum::test::import_inputs;
using fulcrum::test::Imported;
using Kind = fulcrum::importer::structure::PipelineAction::Kind;
namespace fs = std::filesystem;

namespace {

const fs::path kMegatron = fs::path(FULCRUM_SOURCE_DIR) / "tests" / "data" / "megatron";

nlohmann::json truth() {
    std::ifstream in(kMegatron / "truth.json");
    return nlohmann::json::parse(in);
}

std::vector<std::string> rank_files(int ranks) {
    std::vector<std::string> files;
    for (int rank = 0; rank < ranks; ++rank) {
        files.push_back((kMegatron / ("rank" + std::to_string(rank) + ".sqlite")).string());
    }
    return files;
}

// Each call of a stage's step, 10 µs long, 1 ms apart.
std::vector<P2pRange> calls_of(const std::vector<P2pCall>& order) {
    std::vector<P2pRange> calls;
    std::int64_t at = 0;
    for (P2pCall call : order) {
        calls.push_back({at, at + 10'000, call});
        at += 1'000'000;
    }
    return calls;
}

// A copy of `from` in `dir`, named PREFIX-NAME, changed by `sql`.
std::string edited_copy(const QTemporaryDir& dir, const std::string& from,
                        const std::string& prefix, const std::string& sql) {
    const std::string to =
        dir.filePath(QString::fromStdString(prefix + "-" + fs::path(from).filename().string()))
            .toStdString();
    fs::copy_file(from, to, fs::copy_options::overwrite_existing);
    sqlite3* db = nullptr;
    sqlite3_open(to.c_str(), &db);
    if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) {
        qFatal("cannot edit %s: %s", to.c_str(), sqlite3_errmsg(db));
    }
    sqlite3_close(db);
    return to;
}

// A copy of `from` whose hand-over ranges are renamed (old function -> new).
std::string renamed_copy(const QTemporaryDir& dir, const std::string& from,
                         const std::string& old_function, const std::string& new_function) {
    return edited_copy(dir, from, "renamed",
                       "UPDATE NVTX_EVENTS SET text = replace(text, 'p2p_communication." +
                           old_function + "', 'p2p_communication." + new_function + "')");
}

// A copy of `from` whose NVTX texts are registered strings (StringIds, by textId), as nsys
// writes the names a program registered (nvtxDomainRegisterString).
std::string registered_copy(const QTemporaryDir& dir, const std::string& from) {
    return edited_copy(
        dir, from, "registered",
        "INSERT INTO StringIds (id, value) SELECT 100000 + row_number() OVER (), t FROM "
        "(SELECT DISTINCT text AS t FROM NVTX_EVENTS WHERE text IS NOT NULL);"
        "UPDATE NVTX_EVENTS SET textId = (SELECT id FROM StringIds WHERE value = "
        "NVTX_EVENTS.text AND id > 100000), text = NULL WHERE text IS NOT NULL;");
}

}  // namespace

class NsysMegatronTest : public QObject {
    Q_OBJECT

private slots:
    // The range names Megatron-LM's nvtx_decorator gives: the module's path and the
    // function's, from the class methods of today as from the module functions before them.
    void handOverNames() {
        QCOMPARE(parse_p2p_range("megatron.core.pipeline_parallel.p2p_communication.recv_forward"),
                 std::optional(P2pCall::recv_forward));
        QCOMPARE(
            parse_p2p_range(
                "megatron.core.pipeline_parallel.p2p_communication.send_forward_recv_backward"),
            std::optional(P2pCall::send_forward_recv_backward));
        QCOMPARE(parse_p2p_range("p2p_communication.send_forward_backward_recv_forward_backward"),
                 std::optional(P2pCall::send_forward_backward_recv_forward_backward));
        QVERIFY(!parse_p2p_range("megatron.core.pipeline_parallel.p2p_communication._communicate"));
        QVERIFY(!parse_p2p_range("recv_forward"));
        QVERIFY(!parse_p2p_range("megatron.core.pipeline_parallel.schedules.forward_step"));
    }

    // Stage 1 of 4 with 4 micro-batches, by hand: two warm-up forwards, two steady pairs, two
    // cool-down backwards; then the next step. Each pass lies between the call that feeds it
    // and the next; each call is named for what it receives, else for what it sends.
    void oneStepOfOneStageByHand() {
        using C = P2pCall;
        const std::vector<C> step = {
            C::recv_forward,
            C::send_forward,  // F0
            C::recv_forward,
            C::send_forward,                // F1
            C::recv_forward,                // (steady) F2
            C::send_forward_recv_backward,  // B0
            C::send_backward_recv_forward,  // F3
            C::send_forward_recv_backward,  // B1
            C::send_backward,               // (cool-down)
            C::recv_backward,
            C::send_backward,  // B2
            C::recv_backward,
            C::send_backward,  // B3
        };
        std::vector<C> two = step;
        two.insert(two.end(), step.begin(), step.end());
        const MegatronThread thread = megatron_passes(calls_of(two));
        QCOMPARE(thread.schedule, MegatronSchedule::one_f_one_b);
        QCOMPARE(thread.steps.size(), std::size_t(2));
        const MegatronStep& first = thread.steps[0];
        QVERIFY(first.consistent);
        QCOMPARE(first.warmup, 2);
        QCOMPARE(first.microbatches, 4);
        std::vector<std::pair<Kind, std::int32_t>> passes;
        for (const auto& pass : first.passes) {
            passes.emplace_back(pass.kind, pass.microbatch);
        }
        const std::vector<std::pair<Kind, std::int32_t>> expected = {
            {Kind::forward, 0}, {Kind::forward, 1},  {Kind::forward, 2},  {Kind::backward, 0},
            {Kind::forward, 3}, {Kind::backward, 1}, {Kind::backward, 2}, {Kind::backward, 3}};
        QCOMPARE(passes, expected);
        // F2 runs from its receive (call 4) to its send (call 5).
        QCOMPARE(first.passes[2].start_ns, 4'000'000);
        QCOMPARE(first.passes[2].end_ns, 5'000'000);
        const std::vector<std::pair<Kind, std::int32_t>> handovers = {
            {Kind::recv_activations, 0}, {Kind::send_activations, 0}, {Kind::recv_activations, 1},
            {Kind::send_activations, 1}, {Kind::recv_activations, 2}, {Kind::recv_gradients, 0},
            {Kind::recv_activations, 3}, {Kind::recv_gradients, 1},   {Kind::send_gradients, 1},
            {Kind::recv_gradients, 2},   {Kind::send_gradients, 2},   {Kind::recv_gradients, 3},
            {Kind::send_gradients, 3}};
        std::vector<std::pair<Kind, std::int32_t>> calls;
        for (const auto& call : first.calls) {
            calls.emplace_back(call.kind, call.microbatch);
        }
        QCOMPARE(calls, handovers);
        QCOMPARE(thread.steps[1].start_ns, std::int64_t(step.size()) * 1'000'000);
        const auto warmup = warmup_of(thread);
        QVERIFY(warmup.has_value());
        QCOMPARE(warmup->forwards, 2);
        QVERIFY(!warmup->saturated);
    }

    // The last of 2 stages of an interleaved schedule, 2 chunks, 4 micro-batches in groups of
    // 2, by hand: 2 warm-up forwards ((p − s − 1)·2 + (v − 1)·g), the first backward's receive
    // posted, 6 steady pairs, 2 cool-down backwards; each pass between two calls, from the end
    // of the one before; micro-batches and chunks by Megatron-LM's schedule table.
    void interleavedStepByHand() {
        using C = P2pCall;
        std::vector<C> order = {C::recv_forward, C::send_forward_recv_forward,
                                C::send_forward_recv_forward, C::send_backward_recv_backward};
        for (int pair = 0; pair < 6; ++pair) {
            order.push_back(C::send_forward_recv_forward);
            order.push_back(C::send_backward_recv_backward);
        }
        order.push_back(C::send_backward_recv_backward);
        order.push_back(C::send_backward_recv_backward);
        const MegatronThread thread = megatron_passes(calls_of(order));
        QCOMPARE(thread.schedule, MegatronSchedule::interleaved);
        QCOMPARE(thread.steps.size(), std::size_t(1));
        const MegatronStep& step = thread.steps[0];
        QVERIFY(step.consistent);
        QCOMPARE(step.warmup, 2);
        QCOMPARE(step.microbatches, 8);
        std::string kinds;
        for (const auto& pass : step.passes) {
            kinds += pass.kind == Kind::forward ? 'F' : 'B';
        }
        QCOMPARE(kinds, std::string("FFFBFBFBFBFBFBBB"));
        // F0 from the end of recv_forward to the start of the first send_forward_recv_forward.
        QCOMPARE(step.passes[0].start_ns, 10'000);
        QCOMPARE(step.passes[0].end_ns, 1'000'000);
        // The third forward follows the posted receive, not the second forward's send.
        QCOMPARE(step.passes[2].start_ns, 3'010'000);
        QCOMPARE(step.calls[3].kind, Kind::recv_gradients);
        const auto warmup = warmup_of(thread);
        QVERIFY(warmup.has_value());
        QCOMPARE(warmup->forwards, 2);
        QCOMPARE(warmup->microbatches, 8);
        QVERIFY(!warmup->saturated);
        // Forwards: (0,0) (1,0) (0,1) (1,1) (2,0) (3,0) (2,1) (3,1); backwards the chunks
        // the other way round.
        QCOMPARE(interleaved_place(2, false, 4, 2, 2), std::optional(std::pair{0, 1}));
        QCOMPARE(interleaved_place(4, false, 4, 2, 2), std::optional(std::pair{2, 0}));
        QCOMPARE(interleaved_place(2, true, 4, 2, 2), std::optional(std::pair{0, 0}));
        QCOMPARE(interleaved_place(7, true, 4, 2, 2), std::optional(std::pair{3, 0}));
        QVERIFY(!interleaved_place(8, false, 4, 2, 2));
    }

    // What is not read: the interleaved schedule without overlap_p2p_comm (a forward and a
    // backward between two calls), a forward-only (evaluation) step, a call out of order.
    void otherOrdersAreNotPasses() {
        using C = P2pCall;
        const MegatronThread combined = megatron_passes(
            calls_of({C::recv_forward, C::send_forward_backward_recv_forward_backward}));
        QCOMPARE(combined.schedule, MegatronSchedule::interleaved_without_overlap);
        QVERIFY(combined.steps.empty());
        QVERIFY(!warmup_of(combined).has_value());
        const MegatronThread eval = megatron_passes(
            calls_of({C::recv_forward, C::send_forward, C::recv_forward, C::send_forward}));
        QCOMPARE(eval.steps.size(), std::size_t(1));
        QVERIFY(!eval.steps[0].consistent);  // forwards without backwards
        QVERIFY(!warmup_of(eval).has_value());
        const MegatronThread shuffled = megatron_passes(
            calls_of({C::recv_forward, C::recv_backward, C::send_forward, C::send_backward}));
        QVERIFY(!shuffled.steps.empty());
        QVERIFY(!shuffled.steps[0].consistent);
    }

    // The jobs as a user imports them: one export per rank (`nsys profile -o rank%q{RANK}`
    // under the launcher), or one export of every process (`nsys profile torchrun …`); the
    // 1F1B job of pp 4 × dp 2 and the interleaved one of pp 4 with 2 chunks a stage. Each
    // rank's stage (from its warm-up) and DP place, the run's schedule, chunks and
    // micro-batches, and every step's passes in the order the rank ran them with their
    // micro-batch and chunk, each spanning on the GPU from the first kernel its host window
    // launched (under 1F1B the receive's SendRecv, where it moved anything) to the end of its
    // last.
    void recoversTheJobAsItRan_data() {
        QTest::addColumn<QString>("name");
        QTest::addColumn<QString>("files");
        QTest::newRow("1F1B, an export per rank") << "1f1b-pp4-dp2"
                                                  << "per rank";
        QTest::newRow("1F1B, one export of every process") << "1f1b-pp4-dp2"
                                                           << "one";
        QTest::newRow("1F1B, names as registered strings") << "1f1b-pp4-dp2"
                                                           << "registered";
        QTest::newRow("interleaved, an export per rank") << "interleaved-pp4-v2"
                                                         << "per rank";
        QTest::newRow("interleaved, names as registered strings") << "interleaved-pp4-v2"
                                                                  << "registered";
    }
    void recoversTheJobAsItRan() {
        QFETCH(QString, name);
        QFETCH(QString, files);
        const nlohmann::json job = truth().at("jobs").at(name.toStdString());
        const bool interleaved = job.at("schedule") == "interleaved";
        QTemporaryDir dir;
        std::vector<std::string> inputs;
        for (const auto& file : job.at("files")) {
            const std::string path = (kMegatron / file.get<std::string>()).string();
            inputs.push_back(files == "registered" ? registered_copy(dir, path) : path);
        }
        if (files == "one") {
            inputs = {(kMegatron / "job.sqlite").string()};
        }
        const Imported imported = import_inputs(dir, "megatron", inputs);
        const analysis::RunTrace& trace = imported.trace;
        const int pp = job.at("pp").get<int>(), dp = job.at("dp").get<int>();
        QCOMPARE(trace.config.layout.grid.pp, pp);
        QCOMPARE(trace.config.layout.grid.dp, dp);
        QCOMPARE(trace.config.layout.grid.tp, 1);
        QCOMPARE(trace.config.layout.grid.cp, 1);
        QCOMPARE(trace.config.layout.schedule, interleaved
                                                   ? parallel::PipelineSchedule::interleaved
                                                   : parallel::PipelineSchedule::one_f_one_b);
        QCOMPARE(trace.config.layout.virtual_stages, job.at("virtual_stages").get<int>());
        QCOMPARE(trace.config.layout.microbatches, job.at("microbatches").get<int>());
        QVERIFY(any_note(imported, "structure: grid dp" + std::to_string(dp) + " tp1 pp" +
                                       std::to_string(pp) + " cp1, from Megatron-LM's"));
        QCOMPARE(trace.ranks.size(), std::size_t(pp * dp));
        for (const auto& rank : trace.ranks) {
            const nlohmann::json& expected = job.at("ranks").at(std::to_string(rank.info.rank));
            QCOMPARE(rank.info.pp, expected.at("stage").get<int>());
            QCOMPARE(rank.info.dp, expected.at("dp").get<int>());
        }
        // The run's clock: the exports' nanoseconds, every rank's session starting alike.
        const std::vector<analysis::Pass> passes = analysis::find_passes(trace);
        std::int64_t first_truth = INT64_MAX, first_pass = INT64_MAX;
        std::size_t truth_passes = 0;
        for (const auto& [rank, expected] : job.at("ranks").items()) {
            for (const auto& step : expected.at("steps")) {
                for (const auto& pass : step) {
                    first_truth = std::min(first_truth, pass.at(3).get<std::int64_t>());
                    ++truth_passes;
                }
            }
        }
        for (const analysis::Pass& pass : passes) {
            first_pass = std::min(first_pass, pass.start_ns);
        }
        QCOMPARE(passes.size(), truth_passes);
        using Row = std::tuple<std::string, int, int, std::int64_t, std::int64_t>;
        for (const auto& [rank_text, expected] : job.at("ranks").items()) {
            const int rank = std::stoi(rank_text);
            for (int step = 0; step < job.at("steps").get<int>(); ++step) {
                std::vector<Row> want, got;
                for (const auto& pass : expected.at("steps").at(step)) {
                    want.emplace_back(pass.at(0).get<std::string>(), pass.at(1).get<int>(),
                                      pass.at(2).get<int>(),
                                      pass.at(3).get<std::int64_t>() - first_truth,
                                      pass.at(4).get<std::int64_t>() - first_truth);
                }
                for (const analysis::Pass& pass : passes) {
                    if (pass.rank == rank && pass.step == step + 1) {
                        QCOMPARE(int(pass.stage), expected.at("stage").get<int>());
                        got.emplace_back(pass.phase == Phase::forward ? "forward" : "backward",
                                         pass.microbatch, int(pass.chunk),
                                         pass.start_ns - first_pass, pass.end_ns - first_pass);
                    }
                }
                QCOMPARE(got, want);
            }
        }
    }

    // The bubble table of the recovered passes: per pipeline, stage and step, busy is the
    // passes' time less their pipeline waits and the bubble the rest of the window. Under 1F1B
    // a pass holds the receive that feeds it, so the first stage waits only on the next and
    // the last only on the previous; under the interleaved schedule the receive was posted
    // ahead and the pass waits on its stream, where no range shows it (bubble, not wait).
    void bubblesFromRecoveredPasses_data() {
        QTest::addColumn<QString>("name");
        QTest::addColumn<int>("pipelines");
        QTest::addColumn<double>("theory");
        QTest::newRow("1F1B") << "1f1b-pp4-dp2" << 2 << 3.0 / 8.0;
        QTest::newRow("interleaved") << "interleaved-pp4-v2" << 1 << 3.0 / (2 * 8);
    }
    void bubblesFromRecoveredPasses() {
        QFETCH(QString, name);
        QFETCH(int, pipelines);
        QFETCH(double, theory);
        const nlohmann::json job = truth().at("jobs").at(name.toStdString());
        const bool interleaved = job.at("schedule") == "interleaved";
        std::vector<std::string> files;
        for (const auto& file : job.at("files")) {
            files.push_back((kMegatron / file.get<std::string>()).string());
        }
        QTemporaryDir dir;
        const Imported imported = import_inputs(dir, "megatron", files);
        const std::vector<analysis::Pass> passes = analysis::find_passes(imported.trace);
        const analysis::BubbleAnalysis bubbles = analysis::analyze_bubbles(imported.trace, passes);
        QCOMPARE(QString::fromStdString(bubbles.schedule),
                 interleaved ? QString("interleaved") : QString("1f1b"));
        QVERIFY(!bubbles.schedule_assumed);
        QCOMPARE(bubbles.stages.size(), std::size_t(4 * pipelines * 2));  // × steps
        fulcrum::test::compare_bubbles_with_passes(bubbles, passes, 3, !interleaved);
        QVERIFY(!QTest::currentTestFailed());
        // What `fulcrum analyze` prints beside it: a heatmap row per rank and column per
        // micro-batch, a critical path through the stages for each step.
        auto analysis = analysis::analyze_run(imported.trace);
        QVERIFY(analysis.ok());
        QVERIFY(analysis->bubbles.theory_fraction.has_value());
        QCOMPARE(*analysis->bubbles.theory_fraction, theory);
        QCOMPARE(analysis->imbalance.by_microbatch.size(), std::size_t(2));
        const analysis::Matrix& heatmap = analysis->imbalance.by_microbatch[0].compute_ns;
        QCOMPARE(heatmap.rows.size(), std::size_t(4 * pipelines));
        QCOMPARE(heatmap.columns.size(), std::size_t(8));
        QCOMPARE(analysis->critical_paths.size(), std::size_t(2));
        for (const analysis::CriticalPath& path : analysis->critical_paths) {
            QVERIFY(path.by_stage.size() >= 2);
        }
    }

    // Part of the job: Megatron-LM's releases core_r0.8 to 0.12 profile rank 0 alone unless
    // told otherwise (--profile-ranks), and a file may be missing. A rank whose recv_forward
    // launches nothing is the first stage, which with its warm-up tells the pipeline's depth: the
    // ranks given are placed by their own warm-ups, and the log says the job is not whole. Without
    // the first stage's file, the depth is not told: no grid, and the log says why in one line.
    void partOfTheJob() {
        QTemporaryDir dir;
        std::vector<std::string> files = rank_files(8);
        files.erase(files.begin() + 5);
        const Imported seven = import_inputs(dir, "seven", files);
        QVERIFY(any_note(seven,
                         "of the ranks given, which are not the whole job (2 at stage 0, "
                         "2 at stage 1, 1 at stage 2, 2 at stage 3): pp 4"));
        QCOMPARE(seven.trace.config.layout.grid.pp, 4);
        QCOMPARE(seven.trace.config.layout.grid.dp, 2);
        QCOMPARE(analysis::find_passes(seven.trace).size(), std::size_t(7 * 2 * 16));

        const Imported first = import_inputs(dir, "first", {rank_files(1).front()});
        QCOMPARE(first.trace.config.layout.grid.pp, 4);
        QCOMPARE(first.trace.config.layout.grid.dp, 1);
        QCOMPARE(first.trace.ranks.size(), std::size_t(1));
        QCOMPARE(first.trace.ranks[0].info.pp, 0);
        const std::vector<analysis::Pass> passes = analysis::find_passes(first.trace);
        QCOMPARE(passes.size(), std::size_t(2 * 16));
        const analysis::BubbleAnalysis bubbles = analysis::analyze_bubbles(first.trace, passes);
        QCOMPARE(bubbles.stages.size(), std::size_t(4 * 2));  // 4 stages a step, 3 without rank
        int with_rank = 0;
        for (const analysis::StageBubble& stage : bubbles.stages) {
            with_rank += stage.rank.has_value() ? 1 : 0;
            QCOMPARE(stage.rank.has_value(), stage.stage == 0);
        }
        QCOMPARE(with_rank, 2);
        // The stages given no rank measured nothing: the table and the fraction are stage 0's.
        const auto by_stage = analysis::bubble_by_stage(bubbles);
        QCOMPARE(by_stage.size(), std::size_t(1));
        QCOMPARE(by_stage.begin()->first, 0);
        for (const analysis::PipelineBubble& pipeline : bubbles.pipelines) {
            const analysis::StageBubble& stage0 = *std::find_if(
                bubbles.stages.begin(), bubbles.stages.end(),
                [&](const auto& row) { return row.step == pipeline.step && row.stage == 0; });
            QVERIFY(pipeline.measured_fraction.has_value());
            QCOMPARE(*pipeline.measured_fraction, *stage0.bubble_fraction);
            QVERIFY(!pipeline.replay_fraction.has_value());  // the replay needs every stage
        }

        const Imported middle = import_inputs(dir, "middle", {rank_files(3).back()});
        QVERIFY(any_note(middle,
                         "no rank given is the first stage's (whose recv_forward "
                         "receives nothing), so the pipeline's depth is not told"));
        QVERIFY(analysis::find_passes(middle.trace).empty());
        QCOMPARE(middle.trace.config.layout.grid.pp, 1);
    }

    // A shell's `rank*.sqlite` gives rank10 before rank2; the files' names number the ranks,
    // so they are imported in that order whatever order they are given in. Names whose last
    // numbers are not 0 … N − 1 (process ids here) keep the order given.
    void filesInRankOrderByName() {
        QTemporaryDir dir;
        std::vector<std::string> reversed = rank_files(8);
        std::reverse(reversed.begin(), reversed.end());
        const Imported imported = import_inputs(dir, "reversed", reversed);
        const nlohmann::json job = truth().at("jobs").at("1f1b-pp4-dp2");
        for (const auto& rank : imported.trace.ranks) {
            const nlohmann::json& expected = job.at("ranks").at(std::to_string(rank.info.rank));
            QCOMPARE(rank.info.pp, expected.at("stage").get<int>());
            QCOMPARE(rank.info.dp, expected.at("dp").get<int>());
        }
        std::vector<std::string> by_pid;
        for (int rank = 0; rank < 2; ++rank) {
            by_pid.push_back(dir.filePath(QString("pid%1.sqlite").arg(4101 - rank)).toStdString());
            fs::copy_file(rank_files(2)[static_cast<std::size_t>(rank)], by_pid.back());
        }
        const Imported as_given = import_inputs(dir, "as-given", by_pid);
        QCOMPARE(as_given.trace.ranks[0].info.pid, 4100);  // pid4101.sqlite holds rank 0's run
    }

    // The interleaved schedule without overlap_p2p_comm (a forward and a backward between two
    // of its calls) is said, not read as another schedule.
    void theInterleavedScheduleWithoutOverlapIsSaid() {
        QTemporaryDir dir;
        std::vector<std::string> files;
        for (const std::string& file : rank_files(2)) {
            files.push_back(renamed_copy(dir, file, "send_forward_recv_backward",
                                         "send_forward_backward_recv_forward_backward"));
        }
        const Imported imported = import_inputs(dir, "interleaved", files);
        QVERIFY(any_note(imported,
                         "interleaved schedule without overlap_p2p_comm "
                         "(send_forward_backward_recv_forward_backward) in 2 processes"));
        QVERIFY(analysis::find_passes(imported.trace).empty());
    }

    // As a user runs it: `fulcrum import` says the grid and schedule it recovered, and
    // `fulcrum analyze` prints the grid, the setup and the bubble table per stage.
    void theCommandLine() {
        QTemporaryDir dir;
        const auto run = [&](const QStringList& arguments) {
            QProcess process;
            process.setWorkingDirectory(dir.path());
            process.start(QStringLiteral(FULCRUM_BINARY_DIR) + "/app/fulcrum", arguments);
            if (!process.waitForFinished(120'000) || process.exitCode() != 0) {
                qFatal("fulcrum %s failed", qPrintable(arguments.join(' ')));
            }
            return QString::fromUtf8(process.readAllStandardOutput());
        };
        QStringList import = {"import"};
        for (int stage = 0; stage < 4; ++stage) {
            import << QString::fromStdString(
                (kMegatron / ("interleaved-rank" + std::to_string(stage) + ".sqlite")).string());
        }
        import << "-o"
               << "interleaved.fulcrum";
        const QString imported = run(import);
        QVERIFY2(imported.contains("grid dp 1 × tp 1 × pp 4 × cp 1, schedule interleaved (2 "
                                   "chunks a stage), 8 micro-batches"),
                 qPrintable(imported));
        const QString analysed = run({"analyze", "interleaved.fulcrum"});
        QVERIFY2(analysed.contains("grid     dp 1 × tp 1 × pp 4 × cp 1"), qPrintable(analysed));
        QVERIFY2(analysed.contains("setup    schedule interleaved"), qPrintable(analysed));
        QVERIFY2(analysed.contains("pipeline bubbles (interleaved, theory (p−1)/(v·m) = 0.188"),
                 qPrintable(analysed));
        for (int stage = 0; stage < 4; ++stage) {
            QVERIFY(analysed.contains(QRegularExpression(
                QString("\\n +%1 +[0-9.]+ ms +[0-9.]+ ms +[0-9.]+ ").arg(stage))));
        }
    }
};

QTEST_MAIN(NsysMegatronTest)
#include "test_nsys_megatron.moc"
