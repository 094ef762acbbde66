// Passes and the step breakdown on hand-built traces; every expected value is worked out
// in the comment above its test.
#include <QTest>

#include <optional>

#include "core/analysis/pass_table.h"
#include "core/analysis/passes.h"
#include "core/analysis/step_breakdown.h"
#include "core/trace/annotations.h"
#include "tests/analysis/missing_tmpdir.h"

using namespace fulcrum;
using namespace fulcrum::analysis;
using fulcrum::analysis::builders::MissingTmpdir;

class PassesTest : public QObject {
    Q_OBJECT

private slots:
    // forward [0,12): recv activations [0,2), attention [2,7) holding cp all-gather [3,4),
    // mlp [7,12) with a tp all-reduce [10,11).
    //   pipeline wait 2; collectives 1 + 1 = 2; compute 12 − 2 − 2 = 8; attention 5 − 1 = 4.
    void passSplitsComputeFromWaits() {
        RunTrace trace;
        auto& lane = trace.add_lane(0, LaneKind::host_thread, "main");
        trace.add_range(lane, "forward", Category::compute, 0, 12, 3, 1, 1, Phase::forward);
        trace.add_range(lane, "recv activations", Category::communication, 0, 2, 3, 1, 1);
        trace.add_range(lane, "attention", Category::attention, 2, 7, 3, 1, 1);
        trace.add_range(lane, "cp all-gather kv", Category::communication, 3, 4, 3, 1, 1);
        trace.add_range(lane, "mlp", Category::compute, 7, 12, 3, 1, 1);
        trace.add_range(lane, "tp all-reduce", Category::communication, 10, 11, 3, 1, 1);
        trace.finish();
        const auto passes = find_passes(trace);
        QCOMPARE(passes.size(), 1u);
        const Pass& pass = passes[0];
        QCOMPARE(pass.step, 3);
        QCOMPARE(pass.microbatch, 1);
        QCOMPARE(pass.stage, std::int16_t{1});
        QCOMPARE(pass.phase, Phase::forward);
        QCOMPARE(pass.wall_ns(), 12);
        QCOMPARE(pass.pipeline_wait_ns, 2);
        QCOMPARE(pass.collective_ns, 2);
        QCOMPARE(pass.compute_ns, 8);
        QCOMPARE(pass.attention_ns, 4);
    }

    // ZB-H1 on one stage (the engine's names): forward [0,10) mb 0; backward (B) [10,18) mb 0
    // holding recv gradients [10,12); weight gradients (W, phase wgrad) [18,24) mb 0 holding a
    // recompute [18,21) with a tp all-gather [19,20) inside; forward [24,34) mb 1; backward
    // [34,42) mb 1; W [42,48) mb 1, of model chunk 1 (args {"chunk":1}).
    //   six passes, W as weight_grad: B mb 0 compute 8 − 2 = 6, W mb 0 compute 6 − 1 = 5 with
    //   collective 1; nothing counted twice: Σ wall = 48, every instant of the lane once, and
    //   the step breakdown's compute is Σ wall − waits − collectives = 48 − 2 − 1 = 45.
    void weightGradientPassesAreBackwardWorkOfTheirOwn() {
        RunTrace trace;
        auto& lane = trace.add_lane(0, LaneKind::host_thread, "main");
        trace.add_range(lane, "step", Category::schedule, 0, 48, 5);
        trace.add_range(lane, "forward", Category::compute, 0, 10, 5, 0, 0, Phase::forward);
        trace.add_range(lane, "backward", Category::compute, 10, 18, 5, 0, 0, Phase::backward);
        trace.add_range(lane, "recv gradients", Category::communication, 10, 12, 5, 0, 0);
        trace.add_range(lane, "weight gradients", Category::compute, 18, 24, 5, 0, 0,
                        Phase::weight_grad);
        trace.add_range(lane, "recompute", Category::compute, 18, 21, 5, 0, 0, Phase::weight_grad);
        trace.add_range(lane, "tp all-gather", Category::communication, 19, 20, 5, 0, 0);
        trace.add_range(lane, "forward", Category::compute, 24, 34, 5, 1, 0, Phase::forward);
        trace.add_range(lane, "backward", Category::compute, 34, 42, 5, 1, 0, Phase::backward);
        Event& w = trace.add_range(lane, "weight gradients", Category::compute, 42, 48, 5, 1, 0,
                                   Phase::weight_grad);
        w.args = trace.intern(R"({"chunk":1})");
        trace.finish();
        const auto passes = find_passes(trace);
        QCOMPARE(passes.size(), 6u);
        const Phase expected[] = {Phase::forward, Phase::backward, Phase::weight_grad,
                                  Phase::forward, Phase::backward, Phase::weight_grad};
        std::int64_t wall = 0;
        for (std::size_t i = 0; i < passes.size(); ++i) {
            QCOMPARE(passes[i].phase, expected[i]);
            QCOMPARE(passes[i].microbatch, i < 3 ? 0 : 1);
            wall += passes[i].wall_ns();
        }
        QCOMPARE(wall, 48);
        QCOMPARE(passes[1].compute_ns, 6);
        QCOMPARE(passes[1].pipeline_wait_ns, 2);
        QCOMPARE(passes[2].compute_ns, 5);
        QCOMPARE(passes[2].collective_ns, 1);
        QCOMPARE(passes[5].compute_ns, 6);
        // The pass's chunk stays in its event's args.
        const Event* last_w = nullptr;
        for (const Event& e : trace.ranks[0].lanes[0].events) {
            if (e.start_ns == 42) {
                last_w = &e;
            }
        }
        QVERIFY(last_w != nullptr);
        QCOMPARE(chunk_of_args(trace.name(last_w->args)), 1);
        const auto rows = step_breakdown(trace);
        QCOMPARE(rows.size(), 1u);
        QCOMPARE(rows[0].compute_ns, 45);
        QCOMPARE(rows[0].exposed_communication_ns, 3);
    }

    // The engine's `fulcrum.cpu` mark right after a pass gives that pass its thread CPU time:
    // forward [0,10) then a mark at 10 with 7 ns; backward [10,20) with no mark, then the
    // optimizer [20,25) and its mark at 25 with 4 ns, which is not the backward's; a mark at 30
    // with no pass before it. So 7, then −1 (unknown).
    void cpuMarkGivesThePassBeforeItsCpuTime() {
        RunTrace trace;
        auto& lane = trace.add_lane(0, LaneKind::host_thread, "main");
        trace.add_range(lane, "forward", Category::compute, 0, 10, 1, 0, 0, Phase::forward);
        const auto cpu_mark = [&](std::int64_t at, std::int64_t ns) {
            Event& mark = trace.add_range(lane, kCpuMark, Category::schedule, at, at);
            mark.kind = EventKind::mark;
            mark.bytes = ns;
        };
        cpu_mark(10, 7);
        trace.add_range(lane, "backward", Category::compute, 10, 20, 1, 0, 0, Phase::backward);
        trace.add_range(lane, "optimizer", Category::optimizer, 20, 25, 1);
        cpu_mark(25, 4);
        cpu_mark(30, 9);
        trace.finish();
        const auto passes = find_passes(trace);
        QCOMPARE(passes.size(), 2u);
        QCOMPARE(passes[0].cpu_ns, 7);
        QCOMPARE(passes[1].cpu_ns, -1);
    }

    // A rank's document ranges [0,100) and [100,150) of a 150-token document, and a whole
    // 10-token document: pairs = Σ (2p + 1 + ℓ)ℓ/2 = 5050 + (201+50)·50/2 + 55 = 11380.
    void heldWorkCountsCausalPairs() {
        RunTrace trace;
        trace.workload.push_back({0, 1, 0, 7, 150, 0, 100, "fixed"});
        trace.workload.push_back({0, 1, 0, 7, 150, 100, 150, "fixed"});
        trace.workload.push_back({0, 1, 0, 8, 10, 0, 10, "fixed"});
        trace.workload.push_back({0, 1, 1, 9, 4, 0, 4, "fixed"});
        const auto held = held_work(trace);
        QCOMPARE(held.size(), 2u);
        QCOMPARE(held[0].tokens, 160);
        QCOMPARE(held[0].pairs, 5050 + 6275 + 55);
        QCOMPARE(held[0].documents, 3);
        QCOMPARE(held[1].pairs, 10);  // 4·5/2
    }

    // CPU rank, one thread: step [0,100) ⊃ forward [10,50) ⊃ recv [10,20);
    // backward [50,90) ⊃ cp reduce-scatter [60,70); optimizer [90,95).
    //   compute  = (50−20) + (90−50−10) + 5 = 65
    //   exposed  = 10 + 10 = 20, overlapped 0
    //   idle     = 100 − 85 = 15  ([0,10) and [95,100))
    void breakdownOfACpuRank() {
        RunTrace trace;
        auto& lane = trace.add_lane(0, LaneKind::host_thread, "main");
        trace.add_range(lane, "step", Category::schedule, 0, 100, 0);
        trace.add_range(lane, "forward", Category::compute, 10, 50, 0, 0, 0, Phase::forward);
        trace.add_range(lane, "recv activations", Category::communication, 10, 20, 0, 0, 0);
        trace.add_range(lane, "backward", Category::compute, 50, 90, 0, 0, 0, Phase::backward);
        trace.add_range(lane, "cp reduce-scatter dkv", Category::communication, 60, 70, 0, 0, 0);
        trace.add_range(lane, "optimizer", Category::optimizer, 90, 95, 0);
        trace.finish();
        const auto rows = step_breakdown(trace);
        QCOMPARE(rows.size(), 1u);
        const auto& row = rows[0];
        QCOMPARE(row.wall_ns(), 100);
        QCOMPARE(row.compute_ns, 65);
        QCOMPARE(row.overlapped_communication_ns, 0);
        QCOMPARE(row.exposed_communication_ns, 20);
        QCOMPARE(row.other_ns, 0);
        QCOMPARE(row.idle_ns, 15);
    }

    // A program's own step ranges (not the fulcrum annotation): "train_step 7" [0,50) and
    // "Iteration 8" [50,100), each holding a forward and a backward with no step of their own.
    // Each is a step window with its number, and its passes take that number. Names that only
    // look alike are not steps.
    void handMadeStepRangesAreSteps() {
        QCOMPARE(hand_made_step("train_step 7"), std::optional<std::int32_t>(7));
        QCOMPARE(hand_made_step("Training step 12"), std::optional<std::int32_t>(12));
        QCOMPARE(hand_made_step("iter_3"), std::optional<std::int32_t>(3));
        QCOMPARE(hand_made_step("step#0"), std::optional<std::int32_t>(0));
        for (const char* other : {"step", "steps 3", "step 3a", "stepper 3", "train_step",
                                  "step 1234567890", "optimizer.step", "step -1"}) {
            QVERIFY2(!hand_made_step(other), other);
        }
        RunTrace trace;
        auto& lane = trace.add_lane(0, LaneKind::host_thread, "main");
        trace.add_range(lane, "train_step 7", Category::other, 0, 50);
        trace.add_range(lane, "forward", Category::other, 0, 20);
        trace.add_range(lane, "backward", Category::other, 20, 45);
        trace.add_range(lane, "Iteration 8", Category::other, 50, 100);
        trace.add_range(lane, "forward", Category::other, 50, 70);
        trace.add_range(lane, "backward", Category::other, 70, 95);
        trace.finish();
        const auto rows = step_breakdown(trace);
        QCOMPARE(rows.size(), 2u);
        QCOMPARE(rows[0].step, 7);
        QCOMPARE(rows[1].step, 8);
        QCOMPARE(rows[1].start_ns, 50);
        QCOMPARE(rows[0].wall_ns(), 50);
        const auto passes = find_passes(trace);
        QCOMPARE(passes.size(), 4u);
        QCOMPARE(passes[0].step, 7);
        QCOMPARE(passes[1].step, 7);
        QCOMPARE(passes[2].step, 8);
        QCOMPARE(passes[3].step, 8);
    }

    // GPU rank: host step [0,100); compute stream kernels [0,40) and [70,80);
    // NCCL stream collective kernel [30,60); copy stream memcpy [85,95).
    //   compute 50; communication [30,60): 10 under compute, 20 exposed;
    //   other (the copy) 10; idle = 100 − 50 − 20 − 10 = 20.
    // Host ranges do not count on a rank with streams.
    void breakdownOfAGpuRankUsesStreams() {
        RunTrace trace;
        auto& host = trace.add_lane(0, LaneKind::host_thread, "main");
        trace.add_range(host, "step", Category::schedule, 0, 100, 0);
        trace.add_range(host, "forward", Category::compute, 0, 100, 0, 0, 0, Phase::forward);
        auto& compute = trace.add_lane(0, LaneKind::gpu_stream, "stream 7");
        auto& nccl = trace.add_lane(0, LaneKind::gpu_stream, "stream 13");
        auto& copies = trace.add_lane(0, LaneKind::gpu_stream, "stream 14");
        trace.add_range(compute, "gemm", Category::compute, 0, 40).kind = EventKind::kernel;
        trace.add_range(compute, "flash_attn", Category::attention, 70, 80).kind =
            EventKind::kernel;
        trace.add_range(nccl, "ncclDevKernel_AllReduce", Category::communication, 30, 60);
        Event& copy = trace.add_range(copies, "memcpy HtoD", Category::offload, 85, 95);
        copy.kind = EventKind::memcpy;
        trace.finish();
        const auto rows = step_breakdown(trace);
        QCOMPARE(rows.size(), 1u);
        QCOMPARE(rows[0].compute_ns, 50);
        QCOMPARE(rows[0].overlapped_communication_ns, 10);
        QCOMPARE(rows[0].exposed_communication_ns, 20);
        QCOMPARE(rows[0].other_ns, 10);
        QCOMPARE(rows[0].idle_ns, 20);
    }

    // Each rank's step is its own window; parts always add up to the wall time.
    void partsAddUpOnEveryRank() {
        RunTrace trace;
        for (int rank = 0; rank < 3; ++rank) {
            auto& lane = trace.add_lane(rank, LaneKind::host_thread, "main");
            for (int step = 0; step < 2; ++step) {
                const std::int64_t t = step * 1000 + rank * 7;
                trace.add_range(lane, "step", Category::schedule, t, t + 900, step);
                trace.add_range(lane, "forward", Category::compute, t + 10, t + 400, step, 0, 0,
                                Phase::forward);
                trace.add_range(lane, "dp all-reduce gradients", Category::communication,
                                t + 500 + rank * 50, t + 850, step);
            }
        }
        trace.finish();
        const auto rows = step_breakdown(trace);
        QCOMPARE(rows.size(), 6u);
        for (const auto& row : rows) {
            QCOMPARE(row.compute_ns + row.exposed_communication_ns + row.other_ns + row.idle_ns,
                     row.wall_ns());
            QCOMPARE(row.compute_ns, 390);
            QCOMPARE(row.exposed_communication_ns, 350 - row.rank * 50);
        }
    }

    // A table of three ranks' passes over steps −1 (no step), 0, 1 and 2 (rank 1 has no step 1),
    // held and spilled from the first pass: both hand the same passes in the same order, whole
    // and rank by rank; the spilled one by windows of steps that each hold its budget, one step
    // at a time at budget 0, skipping the passes without a step.
    void passTableReadsBackWhatItTook() {
        std::vector<std::vector<Pass>> ranks;
        std::int64_t start = 0;
        for (std::int32_t rank = 0; rank < 3; ++rank) {
            auto& list = ranks.emplace_back();
            for (std::int32_t step : {-1, 0, 1, 2}) {
                if (rank == 1 && step == 1) {
                    continue;
                }
                for (std::int32_t mb = 0; mb < 2; ++mb) {
                    Pass pass;
                    pass.rank = rank;
                    pass.step = step;
                    pass.microbatch = mb;
                    pass.start_ns = start;
                    pass.end_ns = ++start;
                    list.push_back(pass);
                }
            }
        }
        const auto starts = [](const std::vector<Pass>& passes) {
            std::vector<std::int64_t> out;
            for (const Pass& pass : passes) {
                out.push_back(pass.start_ns);
            }
            return out;
        };
        std::vector<Pass> all;
        for (const auto& list : ranks) {
            all.insert(all.end(), list.begin(), list.end());
        }
        for (const std::int64_t budget : {std::int64_t{1} << 20, std::int64_t{0}}) {
            PassTable table(budget);
            for (const auto& list : ranks) {
                QVERIFY(bool(table.append(list)));
            }
            QCOMPARE(table.spilled(), budget == 0);
            QCOMPARE(table.size(), all.size());
            QVERIFY(table.sorted_by_rank_and_step());
            QCOMPARE(starts(table.all()), starts(all));
            std::vector<std::vector<Pass>> by_rank;
            table.for_each_rank([&](std::span<const Pass> rank) {
                by_rank.emplace_back(rank.begin(), rank.end());
            });
            QCOMPARE(by_rank.size(), ranks.size());
            for (std::size_t r = 0; r < ranks.size(); ++r) {
                QCOMPARE(starts(by_rank[r]), starts(ranks[r]));
            }
            std::vector<std::vector<Pass>> windows;
            table.for_each_step_window(
                [&](const std::vector<Pass>& window) { windows.push_back(window); });
            if (budget > 0) {  // held: the table whole, as the analyses took it before
                QCOMPARE(windows.size(), 1u);
                QCOMPARE(starts(windows[0]), starts(all));
                continue;
            }
            QCOMPARE(windows.size(), 3u);  // steps 0, 1, 2
            for (std::int32_t step = 0; step < 3; ++step) {
                std::vector<Pass> expected;
                for (const Pass& pass : all) {
                    if (pass.step == step) {
                        expected.push_back(pass);
                    }
                }
                QCOMPARE(starts(windows[static_cast<std::size_t>(step)]), starts(expected));
            }
            QVERIFY(bool(table.read_status()));
        }
        // Ranks out of order are told, so that an analysis that folds a (rank, step) at a time
        // gathers them instead.
        PassTable reversed(0);
        QVERIFY(bool(reversed.append(ranks[1])));
        QVERIFY(bool(reversed.append(ranks[0])));
        QVERIFY(!reversed.sorted_by_rank_and_step());
    }

    // Where the scratch file cannot be made, the error names the folder and what to do.
    void passTableSaysWhereItCannotSpill() {
        Status status;
        std::string missing;
        {
            const MissingTmpdir tmpdir;
            QVERIFY(tmpdir.valid());
            missing = tmpdir.path();
            PassTable table(0);
            const Pass pass;
            status = table.append(std::span<const Pass>(&pass, 1));
        }
        QVERIFY(!status);
        QCOMPARE(status.error().code, ErrorCode::io);
        QVERIFY2(status.error().message.find(missing) != std::string::npos,
                 status.error().message.c_str());
        QVERIFY(status.error().message.find("TMPDIR") != std::string::npos);
    }
};

QTEST_GUILESS_MAIN(PassesTest)
#include "test_analysis_passes.moc"
