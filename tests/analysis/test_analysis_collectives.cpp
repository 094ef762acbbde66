// Matching collectives across ranks on hand-built traces: which ranks form a communicator for
// each dimension, the k-th occurrence, who arrived last and how long the others waited. Every
// expected value is worked out in the comment above its test.
#include <QTest>

#include <algorithm>
#include <limits>
#include <span>
#include <string>

#include "core/analysis/collectives.h"
#include "core/analysis/matched_collectives.h"
#include "tests/analysis/missing_tmpdir.h"
#include "tests/analysis/trace_builders.h"

using namespace fulcrum;
using namespace fulcrum::analysis;
using namespace fulcrum::analysis::builders;

namespace {

void collective(RunTrace& trace, int rank, std::string_view name, std::int64_t start,
                std::int64_t end, int step, int microbatch, Phase phase, std::int64_t bytes = -1) {
    Event& e = trace.add_range(host(trace, rank), name, Category::communication, start, end, step,
                               microbatch, -1, phase);
    e.bytes = bytes;
}

// Ranks 0..n-1 of an imported trace: no 4D coordinates (all -1).
void add_ranks_without_coordinates(RunTrace& trace, int n) {
    for (int r = 0; r < n; ++r) {
        RankInfo info;
        info.rank = r;
        trace.add_rank(info);
    }
}

std::vector<std::int32_t> ranks_of(const CollectiveInstance& instance) {
    std::vector<std::int32_t> ranks;
    for (const auto& p : instance.participants) {
        ranks.push_back(p.rank);
    }
    return ranks;
}

const CollectiveInstance* find(const RunTrace& trace,
                               const std::vector<CollectiveInstance>& instances,
                               std::string_view name, int occurrence, std::int32_t some_rank) {
    for (const auto& instance : instances) {
        const auto ranks = ranks_of(instance);
        if (trace.name(instance.name) == name && instance.occurrence == occurrence &&
            std::find(ranks.begin(), ranks.end(), some_rank) != ranks.end()) {
            return &instance;
        }
    }
    return nullptr;
}

}  // namespace

class CollectivesTest : public QObject {
    Q_OBJECT

private slots:
    // cp = 2, tp = 2 (dp = pp = 1); rank = 2·cp + tp. TP groups {0,1} {2,3}; CP groups {0,2}
    // {1,3}. Two tp all-reduces per rank in forward (step 0, mb 0):
    //   {0,1} k0: starts 100, 120 → last rank 1, wait 20     k1: 300, 290 → last rank 0, wait 10
    //   {2,3} k0: starts 100, 150 → last rank 3, wait 50     k1: 300, 300 → tie, rank 2, wait 0
    // One cp all-gather per rank: {0,2} starts 50, 60 → last 2, wait 10; {1,3} 55, 55 → wait 0.
    void tpAndCpGroupsFromCoordinates() {
        RunTrace trace;
        for (int r = 0; r < 4; ++r) {
            add_rank(trace, r, 0, r % 2, 0, r / 2);
        }
        const std::int64_t tp_starts[4][2] = {{100, 300}, {120, 290}, {100, 300}, {150, 300}};
        const std::int64_t cp_starts[4] = {50, 55, 60, 55};
        for (int r = 0; r < 4; ++r) {
            collective(trace, r, "cp all-gather kv", cp_starts[r], 80, 0, 0, Phase::forward, 4096);
            for (int k = 0; k < 2; ++k) {
                collective(trace, r, "tp all-reduce", tp_starts[r][k], tp_starts[r][k] + 40, 0, 0,
                           Phase::forward, 1024);
            }
        }
        trace.finish();
        const auto instances = match_collectives(trace);
        QCOMPARE(instances.size(), 6u);

        const auto* tp01_k0 = find(trace, instances, "tp all-reduce", 0, 0);
        QVERIFY(tp01_k0 != nullptr);
        QCOMPARE(ranks_of(*tp01_k0), (std::vector<std::int32_t>{0, 1}));
        QCOMPARE(tp01_k0->role, Role::tp_collective);
        QCOMPARE(tp01_k0->phase, Phase::forward);
        QCOMPARE(tp01_k0->last_arrival().rank, 1);
        QCOMPARE(tp01_k0->total_wait_ns(), 20);
        const auto* tp01_k1 = find(trace, instances, "tp all-reduce", 1, 0);
        QCOMPARE(tp01_k1->last_arrival().rank, 0);
        QCOMPARE(tp01_k1->total_wait_ns(), 10);
        const auto* tp23_k0 = find(trace, instances, "tp all-reduce", 0, 2);
        QCOMPARE(ranks_of(*tp23_k0), (std::vector<std::int32_t>{2, 3}));
        QCOMPARE(tp23_k0->last_arrival().rank, 3);
        QCOMPARE(tp23_k0->last_arrival().bytes, 1024);
        QCOMPARE(tp23_k0->total_wait_ns(), 50);
        const auto* tp23_k1 = find(trace, instances, "tp all-reduce", 1, 2);
        QCOMPARE(tp23_k1->last_arrival().rank, 2);
        QCOMPARE(tp23_k1->total_wait_ns(), 0);

        const auto* cp02 = find(trace, instances, "cp all-gather kv", 0, 0);
        QCOMPARE(ranks_of(*cp02), (std::vector<std::int32_t>{0, 2}));
        QCOMPARE(cp02->role, Role::cp_collective);
        QCOMPARE(cp02->last_arrival().rank, 2);
        QCOMPARE(cp02->total_wait_ns(), 10);
        const auto* cp13 = find(trace, instances, "cp all-gather kv", 0, 1);
        QCOMPARE(ranks_of(*cp13), (std::vector<std::int32_t>{1, 3}));
        QCOMPARE(cp13->total_wait_ns(), 0);

        // Ordered by (step, first start): the cp all-gathers (50, 55) come before the
        // all-reduces (100, 100, 290, 300).
        QCOMPARE(trace.name(instances[0].name), std::string_view("cp all-gather kv"));
        QCOMPARE(trace.name(instances[1].name), std::string_view("cp all-gather kv"));
        std::int64_t previous = 0;
        for (const auto& instance : instances) {
            std::int64_t first = instance.participants[0].start_ns;
            for (const auto& p : instance.participants) {
                first = std::min(first, p.start_ns);
            }
            QVERIFY(first >= previous);
            previous = first;
        }
    }

    // Sequence parallelism's pair, "tp all-gather" and "tp reduce-scatter", are TP collectives
    // too: tp = 2 over pp = 2 (rank = 2·pp + tp), groups {0,1} and {2,3}, never the two
    // stages together (they run the same micro-batch's pass at different times).
    void sequenceParallelCollectivesStayInTheirTpGroup() {
        RunTrace trace;
        for (int r = 0; r < 4; ++r) {
            add_rank(trace, r, 0, r % 2, r / 2, 0);
        }
        for (int r = 0; r < 4; ++r) {
            const std::int64_t stage_start = r < 2 ? 100 : 1000;
            collective(trace, r, "tp all-gather", stage_start, stage_start + 40, 0, 0,
                       Phase::forward, 2048);
            collective(trace, r, "tp reduce-scatter", stage_start + 50, stage_start + 80, 0, 0,
                       Phase::forward, 2048);
        }
        trace.finish();
        const auto instances = match_collectives(trace);
        QCOMPARE(instances.size(), 4u);
        for (const std::string_view name : {"tp all-gather", "tp reduce-scatter"}) {
            for (const std::int32_t rank : {0, 2}) {
                const auto* instance = find(trace, instances, name, 0, rank);
                QVERIFY(instance != nullptr);
                QCOMPARE(instance->role, Role::tp_collective);
                QCOMPARE(ranks_of(*instance), (std::vector<std::int32_t>{rank, rank + 1}));
                QCOMPARE(instance->total_wait_ns(), 0);
            }
        }
    }

    // A simulated run's `offload wait` is communication time inside its pass, not a
    // collective: nobody else waits in it, so it is never matched (it was, across every rank).
    // Nor is fulcrum-train's `dp all-reduce wait`, the wait for reductions the passes started.
    void copyWaitsAreNotCollectives() {
        for (const auto& [name, role] : {std::pair{"offload wait", Role::copy_wait},
                                         std::pair{"dp all-reduce wait", Role::reduction_wait}}) {
            RunTrace trace;
            for (int r = 0; r < 2; ++r) {
                add_rank(trace, r, r, 0, 0, 0);
                collective(trace, r, name, 100 + 50 * r, 300, 0, 0, Phase::forward, 4096);
            }
            trace.finish();
            QCOMPARE(trace.role(trace.ranks[0].lanes[0].events[0]), role);
            QVERIFY(is_communication(role));
            QVERIFY(match_collectives(trace).empty());
        }
    }

    // fulcrum-train's overlapped DP reduction starts each layer's all-reduce with a short
    // runtime range, "dp all-reduce start". On a CPU rank that is host work, nothing to match.
    // On a GPU rank the NCCL kernel it launched is the layer's collective as it ran: dp = 2
    // (ranks 0 and 1), kernels at 1000 and 1030 → one instance over the DP group, last rank 1,
    // wait 30, and the kernels are not matched again on their own. A start that launched
    // nothing (a staged communicator) is not a collective either.
    void startedReductionsAreTheirKernelsOnAGpu() {
        const auto build = [](bool gpu) {
            RunTrace trace;
            for (int r = 0; r < 2; ++r) {
                add_rank(trace, r, r, 0, 0, 0);
            }
            for (int r = 0; r < 2; ++r) {
                Event& start =
                    trace.add_range(host(trace, r), "dp all-reduce start", Category::runtime, 100,
                                    120, 0, 3, -1, Phase::backward);
                start.bytes = 4096;
                // A second start that launches nothing.
                trace.add_range(host(trace, r), "dp all-reduce start", Category::runtime, 200, 220,
                                0, 3, -1, Phase::backward);
                if (gpu) {
                    Event& call = trace.add_range(host(trace, r), "cudaLaunchKernel",
                                                  Category::runtime, 105, 110, 0, 3);
                    call.kind = EventKind::api;
                    call.correlation = 1;
                    LaneTrace& nccl = trace.add_lane(r, LaneKind::gpu_stream, "stream 13");
                    Event& kernel = trace.add_range(nccl, "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                                                    Category::communication, 1000 + 30 * r, 1500, 0,
                                                    3, -1, Phase::backward);
                    kernel.kind = EventKind::collective;
                    kernel.correlation = 1;
                }
            }
            trace.finish();
            return trace;
        };
        QVERIFY(match_collectives(build(false)).empty());
        const RunTrace gpu = build(true);
        const auto instances = match_collectives(gpu);
        QCOMPARE(instances.size(), 1u);
        QCOMPARE(gpu.name(instances[0].name), std::string_view("dp all-reduce start"));
        QCOMPARE(instances[0].role, Role::dp_collective);
        QCOMPARE(ranks_of(instances[0]), (std::vector<std::int32_t>{0, 1}));
        QCOMPARE(instances[0].participants[0].start_ns, 1000);
        QCOMPARE(instances[0].last_arrival().rank, 1);
        QCOMPARE(instances[0].total_wait_ns(), 30);
        QCOMPARE(instances[0].last_arrival().bytes, 4096);
    }

    // dp = 2, pp = 2, cp = 2 (tp = 1): rank = ((dp·2 + pp)·2 + cp). The engine's DP all-reduce
    // runs over DP × CP, so its groups are the ranks of one stage: pp 0 = {0,1,4,5}, pp 1 =
    // {2,3,6,7}. The embedding all-reduce runs on the first and last stage of one (dp, cp):
    // {0,2} {1,3} {4,6} {5,7}. Step 1, no micro-batch, no phase.
    void dpAndEmbeddingGroups() {
        RunTrace trace;
        for (int r = 0; r < 8; ++r) {
            add_rank(trace, r, r / 4, 0, (r / 2) % 2, r % 2);
        }
        for (int r = 0; r < 8; ++r) {
            collective(trace, r, "pp all-reduce embedding", 1000 + r, 1100, 1, -1, Phase::none);
            collective(trace, r, "dp all-reduce gradients", 2000 + 10 * r, 2500, 1, -1, Phase::none,
                       1 << 20);
        }
        trace.finish();
        const auto instances = match_collectives(trace);
        QCOMPARE(instances.size(), 6u);
        const auto* dp_stage0 = find(trace, instances, "dp all-reduce gradients", 0, 0);
        QCOMPARE(ranks_of(*dp_stage0), (std::vector<std::int32_t>{0, 1, 4, 5}));
        QCOMPARE(dp_stage0->role, Role::dp_collective);
        QCOMPARE(dp_stage0->step, 1);
        QCOMPARE(dp_stage0->microbatch, -1);
        // last = rank 5 at 2050; waits 50 + 40 + 10 + 0
        QCOMPARE(dp_stage0->last_arrival().rank, 5);
        QCOMPARE(dp_stage0->total_wait_ns(), 100);
        const auto* dp_stage1 = find(trace, instances, "dp all-reduce gradients", 0, 2);
        QCOMPARE(ranks_of(*dp_stage1), (std::vector<std::int32_t>{2, 3, 6, 7}));
        for (const int r : {0, 1, 4, 5}) {
            const auto* embedding = find(trace, instances, "pp all-reduce embedding", 0, r);
            QVERIFY(embedding != nullptr);
            QCOMPARE(embedding->role, Role::embedding_collective);
            QCOMPARE(ranks_of(*embedding), (std::vector<std::int32_t>{r, r + 2}));
            QCOMPARE(embedding->last_arrival().rank, r + 2);
            QCOMPARE(embedding->total_wait_ns(), 2);
        }
    }

    // Pipeline send/recv are point-to-point, not collectives; an event on one rank only has
    // nobody to match; a collective of unknown name spans all ranks; occurrences are counted
    // per key, so a second micro-batch or phase starts again at k = 0.
    void whatIsNotMatchedAndUnknownNames() {
        RunTrace trace;
        for (int r = 0; r < 3; ++r) {
            add_rank(trace, r, 0, 0, r, 0);  // pp = 3
        }
        for (int r = 0; r < 3; ++r) {
            collective(trace, r, "send activations", 10, 20, 0, 0, Phase::forward, 64);
            collective(trace, r, "recv activations", 10, 20, 0, 0, Phase::forward, 64);
            collective(trace, r, "ncclDevKernel_AllReduce_Sum_f32", 100 + r, 200, 0, -1,
                       Phase::none);
            collective(trace, r, "tp all-reduce", 300, 310, 0, 0, Phase::forward);
            collective(trace, r, "tp all-reduce", 320, 330, 0, 0, Phase::backward);
            collective(trace, r, "tp all-reduce", 340, 350, 0, 1, Phase::forward);
        }
        collective(trace, 1, "cp all-gather kv", 400, 410, 0, 0, Phase::forward);
        trace.finish();
        const auto instances = match_collectives(trace);
        // 1 NCCL kernel instance over all 3 ranks; tp groups are single ranks (pp differs)
        QCOMPARE(instances.size(), 1u);
        QCOMPARE(trace.name(instances[0].name),
                 std::string_view("ncclDevKernel_AllReduce_Sum_f32"));
        QCOMPARE(instances[0].role, Role::collective);
        QCOMPARE(ranks_of(instances[0]), (std::vector<std::int32_t>{0, 1, 2}));
        QCOMPARE(instances[0].last_arrival().rank, 2);
        QCOMPARE(instances[0].total_wait_ns(), 3);  // 2 + 1 + 0

        // Same tp group now (pp = 0 for all): forward mb 0, backward mb 0 and forward mb 1
        // are three keys, each k = 0, each with 3 participants.
        RunTrace flat;
        for (int r = 0; r < 3; ++r) {
            add_rank(flat, r, 0, r, 0, 0);
        }
        for (int r = 0; r < 3; ++r) {
            collective(flat, r, "tp all-reduce", 300, 310, 0, 0, Phase::forward);
            collective(flat, r, "tp all-reduce", 320, 330, 0, 0, Phase::backward);
            collective(flat, r, "tp all-reduce", 340, 350, 0, 1, Phase::forward);
        }
        flat.finish();
        const auto tp = match_collectives(flat);
        QCOMPARE(tp.size(), 3u);
        for (const auto& instance : tp) {
            QCOMPARE(instance.occurrence, 0);
            QCOMPARE(instance.participants.size(), 3u);
        }
        QCOMPARE(tp[0].phase, Phase::forward);
        QCOMPARE(tp[1].phase, Phase::backward);
        QCOMPARE(tp[2].microbatch, 1);
    }

    // Occurrences are numbered in start order across a rank's lanes, and an imported trace
    // without coordinates (all −1) puts every rank in one group. Rank 0 emits its two
    // all-reduces on two lanes, the later one on the first lane.
    //   k0: rank 0 at 100 (lane b), rank 1 at 130 → last 1, wait 30
    //   k1: rank 0 at 500 (lane a), rank 1 at 480 → last 0, wait 20
    void occurrencesAcrossLanesWithoutCoordinates() {
        RunTrace trace;
        add_ranks_without_coordinates(trace, 2);
        trace.add_lane(0, LaneKind::host_thread, "a");
        trace.add_lane(0, LaneKind::host_thread, "b");
        trace.add_lane(1, LaneKind::host_thread, "main");
        RankTrace& rank0 = *trace.find_rank(0);
        trace.add_range(rank0.lanes[0], "tp all-reduce", Category::communication, 500, 600, 2, 0,
                        -1, Phase::forward);
        trace.add_range(rank0.lanes[1], "tp all-reduce", Category::communication, 100, 200, 2, 0,
                        -1, Phase::forward);
        collective(trace, 1, "tp all-reduce", 130, 200, 2, 0, Phase::forward);
        collective(trace, 1, "tp all-reduce", 480, 600, 2, 0, Phase::forward);
        trace.finish();
        const auto instances = match_collectives(trace);
        QCOMPARE(instances.size(), 2u);
        QCOMPARE(instances[0].occurrence, 0);
        QCOMPARE(instances[0].participants[0].start_ns, 100);
        QCOMPARE(instances[0].last_arrival().rank, 1);
        QCOMPARE(instances[0].total_wait_ns(), 30);
        QCOMPARE(instances[1].occurrence, 1);
        QCOMPARE(instances[1].last_arrival().rank, 0);
        QCOMPARE(instances[1].total_wait_ns(), 20);
    }

    // A captured GPU run. An engine range ("tp all-reduce") times the host call that enqueued
    // NCCL's kernel; the kernel it launched (joined by correlation id) is the collective as it
    // ran, and its name ("ncclDevKernel_AllReduce_…") does not say its group.
    // tp = 2, pp = 2; rank = 2·pp + tp; TP groups {0,1} (stage 0) and {2,3} (stage 1). On each
    // rank, in forward of step 0 mb 0: "tp all-reduce" [100, 200) launches an AllReduce kernel
    // (id 1), "send activations" launches a SendRecv kernel (id 2), a launch outside any
    // engine range starts a Broadcast kernel (id 3), and "pp all-reduce embedding" (first and
    // last stage) launches nothing (an MPI collective: its host times stand).
    //   tp all-reduce at the kernels' times: {0,1} 1000, 1040 → last 1, wait 40, ran 500;
    //     {2,3} 5000, 5010 → last 3, wait 10 (host times would say a tie, wait 0)
    //   the AllReduce kernels are those ranges, not instances of their own (one group of all
    //     four would say last 3, wait 4010 + 3970 + 10 = 7990); SendRecv is point to point
    //   Broadcast: nothing says its group, so all four ranks, wait 3 + 2 + 1
    //   pp all-reduce embedding: {0,2} at 900, 902 → last 2, wait 2
    void gpuCollectivesAreTheKernelsTheirRangesLaunched() {
        RunTrace trace;
        const std::int64_t all_reduce_start[] = {1000, 1040, 5000, 5010};
        for (int r = 0; r < 4; ++r) {
            add_rank(trace, r, 0, r % 2, r / 2, 0);
        }
        for (int r = 0; r < 4; ++r) {
            LaneTrace& cpu = host(trace, r);
            LaneTrace& nccl = trace.add_lane(r, LaneKind::gpu_stream, "stream 13");
            const auto launch = [&](std::int64_t at, std::int64_t correlation) {
                Event& call =
                    trace.add_range(cpu, "cudaLaunchKernel", Category::runtime, at, at + 5, 0, 0);
                call.kind = EventKind::api;
                call.correlation = correlation;
            };
            const auto kernel = [&](std::string_view name, std::int64_t start,
                                    std::int64_t correlation) {
                Event& work = trace.add_range(nccl, name, Category::communication, start,
                                              start + 500, 0, 0, -1, Phase::forward);
                work.kind = EventKind::collective;
                work.correlation = correlation;
            };
            collective(trace, r, "tp all-reduce", 100, 200, 0, 0, Phase::forward);
            launch(110, 1);
            collective(trace, r, "send activations", 300, 400, 0, 0, Phase::forward);
            launch(310, 2);
            launch(600, 3);
            collective(trace, r, "pp all-reduce embedding", 900 + r, 950, 0, -1, Phase::none);
            kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", all_reduce_start[r], 1);
            kernel("ncclDevKernel_SendRecv", 7000, 2);
            kernel("ncclDevKernel_Broadcast_RING_LL", 8000 + r, 3);
        }
        trace.finish();
        const auto instances = match_collectives(trace);
        // tp all-reduce in each TP group, the embedding's in {0,2} and {1,3}, one Broadcast
        QCOMPARE(instances.size(), 5u);
        const auto* stage0 = find(trace, instances, "tp all-reduce", 0, 0);
        const auto* stage1 = find(trace, instances, "tp all-reduce", 0, 2);
        QVERIFY(stage0 && stage1);
        QCOMPARE(ranks_of(*stage0), (std::vector<std::int32_t>{0, 1}));
        QCOMPARE(stage0->participants[0].start_ns, 1000);
        QCOMPARE(stage0->participants[0].end_ns, 1500);
        QCOMPARE(stage0->last_arrival().rank, 1);
        QCOMPARE(stage0->total_wait_ns(), 40);
        QCOMPARE(ranks_of(*stage1), (std::vector<std::int32_t>{2, 3}));
        QCOMPARE(stage1->last_arrival().rank, 3);
        QCOMPARE(stage1->total_wait_ns(), 10);
        QVERIFY(!find(trace, instances, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 0, 0));
        QVERIFY(!find(trace, instances, "ncclDevKernel_SendRecv", 0, 0));
        const auto* broadcast = find(trace, instances, "ncclDevKernel_Broadcast_RING_LL", 0, 0);
        QVERIFY(broadcast);
        QCOMPARE(ranks_of(*broadcast), (std::vector<std::int32_t>{0, 1, 2, 3}));
        QCOMPARE(broadcast->total_wait_ns(), 3 + 2 + 1);
        const auto* embedding = find(trace, instances, "pp all-reduce embedding", 0, 0);
        QVERIFY(embedding);
        QCOMPARE(ranks_of(*embedding), (std::vector<std::int32_t>{0, 2}));
        QCOMPARE(embedding->participants[1].start_ns, 902);
        QCOMPARE(embedding->total_wait_ns(), 2);
    }

    // A PyTorch trace imported without coordinates: its NCCL kernels name their process group
    // in the args (Kineto's "Process Group Name"), and ranks in different groups must not be
    // matched together. Groups "1" = {0,1} and "2" = {2,3}, then "0" = all four:
    //   "1": 100, 130 → last 1, wait 30     "2": 200, 210 → last 3, wait 10
    //   "0": 500 + r → last 3, wait 3 + 2 + 1
    // (without the groups, the first kernel of each rank would form one instance of four)
    void importedKernelsMatchWithinTheirProcessGroup() {
        RunTrace trace;
        add_ranks_without_coordinates(trace, 4);
        const auto kernel = [&](int rank, std::string_view group, std::int64_t start) {
            RankTrace& r = *trace.find_rank(rank);
            LaneTrace& stream = r.lanes.empty()
                                    ? trace.add_lane(rank, LaneKind::gpu_stream, "stream 20")
                                    : r.lanes.front();
            Event& work = trace.add_range(stream, "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                                          Category::communication, start, start + 50, 0);
            work.kind = EventKind::collective;
            work.args = trace.intern(
                "{\"External id\": 12, \"Collective name\": \"allreduce\", \"Group size\": 2, "
                "\"Process Group Name\": \"" +
                std::string(group) + "\", \"Process Group Ranks\": \"[...]\"}");
        };
        kernel(0, "1", 100);
        kernel(1, "1", 130);
        kernel(2, "2", 200);
        kernel(3, "2", 210);
        for (int r = 0; r < 4; ++r) {
            kernel(r, "0", 500 + r);
        }
        trace.finish();
        const auto instances = match_collectives(trace);
        QCOMPARE(instances.size(), 3u);
        QCOMPARE(ranks_of(instances[0]), (std::vector<std::int32_t>{0, 1}));
        QCOMPARE(instances[0].last_arrival().rank, 1);
        QCOMPARE(instances[0].total_wait_ns(), 30);
        QCOMPARE(ranks_of(instances[1]), (std::vector<std::int32_t>{2, 3}));
        QCOMPARE(instances[1].total_wait_ns(), 10);
        QCOMPARE(ranks_of(instances[2]), (std::vector<std::int32_t>{0, 1, 2, 3}));
        QCOMPARE(instances[2].occurrence, 0);
        QCOMPARE(instances[2].total_wait_ns(), 3 + 2 + 1);
    }

    // The matcher holds only open instances: it hands one over as soon as the last rank of its
    // communicator has been added (tp groups {0,1} {2,3}, cp groups {0,2} {1,3} as above; rank
    // 1 closes tp {0,1}, rank 2 cp {0,2}, rank 3 the rest), and the folded totals equal those
    // of the instances held whole, whatever order they are folded in.
    // The cost model's transfer times (one a single-rank instance here: its duration) are kept
    // in 4 bytes each while they fit and every one exactly once one does not (a collective
    // slower than 2.1 s), and read back in ascending order — from memory, and where the
    // budget is spent (0 bytes: every instance a run of its own in the file, or 24 bytes: runs
    // of a few) merged from the temporary file, with the same values.
    void transferTimesKeepEveryValueExactly() {
        RunTrace trace;
        add_rank(trace, 0, 0, 0, 0, 0);
        const StringId name = trace.intern("tp all-reduce");
        const std::int64_t slow = std::int64_t{1} << 40;
        const std::vector<std::int64_t> narrow = {900, -3, 2'000'000'000, 5, 900, 17, 4};
        std::vector<std::int64_t> wide = narrow;
        wide.insert(wide.begin() + 3, slow);
        const auto times_of = [&](const std::vector<std::int64_t>& durations,
                                  std::int64_t memory_bytes) {
            MatchedCollectives kept(trace, memory_bytes);
            for (std::size_t i = 0; i < durations.size(); ++i) {
                CollectiveInstance instance;
                instance.name = name;
                instance.sequence = static_cast<std::uint32_t>(i);
                instance.participants.push_back({0, 1000, 1000 + durations[i], 4096, {}});
                kept.add(std::move(instance));
            }
            if (!kept.finish()) {
                return std::vector<std::int64_t>{};
            }
            const auto& times = kept.transfers().at(name.value).by_bytes.at({4096, 0});
            std::vector<std::int64_t> read;
            const Status status = times.for_each([&](std::span<const std::int64_t> run) {
                read.insert(read.end(), run.begin(), run.end());
                return true;
            });
            return status && read.size() == times.size() ? read : std::vector<std::int64_t>{};
        };
        for (const auto& durations : {narrow, wide}) {
            std::vector<std::int64_t> ascending = durations;
            std::sort(ascending.begin(), ascending.end());
            for (const std::int64_t memory_bytes :
                 {std::numeric_limits<std::int64_t>::max(), std::int64_t{24}, std::int64_t{0}}) {
                QCOMPARE(times_of(durations, memory_bytes), ascending);
            }
        }
        QVERIFY(MatchedCollectives(trace).transfers().empty());
    }

    // Where the times cannot go to a file, finish() says so (the first failure, named).
    void transferTimesSayWhereTheyCannotSpill() {
        RunTrace trace;
        add_rank(trace, 0, 0, 0, 0, 0);
        Status status;
        std::string missing;
        {
            const MissingTmpdir tmpdir;
            QVERIFY(tmpdir.valid());
            missing = tmpdir.path();
            MatchedCollectives collectives(trace, 0);
            for (int i = 0; i < 3; ++i) {
                CollectiveInstance instance;
                instance.name = trace.intern("tp all-reduce");
                instance.participants.push_back({0, 0, 10 + i, 4096, {}});
                collectives.add(std::move(instance));
            }
            status = collectives.finish();
        }
        QVERIFY(!status);
        QCOMPARE(status.error().code, ErrorCode::io);
        QVERIFY2(status.error().message.find("collective times") != std::string::npos,
                 status.error().message.c_str());
        QVERIFY(status.error().message.find(missing) != std::string::npos);
    }

    void instancesCloseWithTheirCommunicatorsLastRank() {
        RunTrace trace;
        for (int r = 0; r < 4; ++r) {
            add_rank(trace, r, 0, r % 2, 0, r / 2);
        }
        for (int r = 0; r < 4; ++r) {
            collective(trace, r, "cp all-gather kv", 50 + r, 80, 0, 0, Phase::forward, 4096);
            for (int k = 0; k < 2; ++k) {
                collective(trace, r, "tp all-reduce", 100 + 200 * k + 10 * r, 150 + 200 * k, 0, 0,
                           Phase::forward, 1024);
            }
        }
        trace.finish();
        std::vector<std::string> closed;
        CollectiveMatcher matcher(trace, [&](CollectiveInstance&& instance) {
            std::string group;
            for (const auto& p : instance.participants) {
                group += std::to_string(p.rank);
            }
            closed.push_back(std::string(trace.name(instance.name)) + " " + group);
        });
        const std::vector<std::vector<std::string>> expected = {
            {},
            {"tp all-reduce 01", "tp all-reduce 01"},
            {"tp all-reduce 01", "tp all-reduce 01", "cp all-gather kv 02"},
        };
        for (int r = 0; r < 4; ++r) {
            matcher.add(r, collective_calls(trace, trace.ranks[static_cast<std::size_t>(r)]));
            if (r < 3) {
                QCOMPARE(closed, expected[static_cast<std::size_t>(r)]);
            }
        }
        QCOMPARE(closed.size(), 6u);
        matcher.finish();
        QCOMPARE(closed.size(), 6u);

        std::vector<CollectiveInstance> held = match_collectives(trace);
        const MatchedCollectives folded = matched_collectives(trace);
        std::reverse(held.begin(), held.end());
        const MatchedCollectives reversed(trace, held);
        QCOMPARE(folded.groups().size(), 4u);
        QCOMPARE(reversed.groups().size(), folded.groups().size());
        for (std::size_t i = 0; i < folded.groups().size(); ++i) {
            const auto& a = folded.groups()[i];
            const auto& b = reversed.groups()[i];
            QCOMPARE(trace.name(a.name), trace.name(b.name));
            QCOMPARE(a.ranks, b.ranks);
            QCOMPARE(a.calls, b.calls);
            QCOMPARE(a.transfer_ns, b.transfer_ns);
            QCOMPARE(a.wait_ns, b.wait_ns);
        }
        // In the order of the first call: cp {0,2} at 50, cp {1,3} at 51, tp {0,1} at 100, tp
        // {2,3} at 120.
        QCOMPARE(folded.groups()[0].ranks, (std::vector<std::int32_t>{0, 2}));
        QCOMPARE(folded.groups()[1].ranks, (std::vector<std::int32_t>{1, 3}));
        QCOMPARE(folded.groups()[2].ranks, (std::vector<std::int32_t>{0, 1}));
        QCOMPARE(folded.groups()[3].ranks, (std::vector<std::int32_t>{2, 3}));
        // Rank 1 arrives 10 ns after rank 0 at both tp all-reduces; rank 3 after rank 2.
        QCOMPARE(folded.arrivals().at(1).last_arrivals, 2);
        QCOMPARE(folded.arrivals().at(1).caused_wait_ns, 20);
        QCOMPARE(folded.arrivals().at(1).instances, 3);
        QCOMPARE(reversed.arrivals().at(1).caused_wait_ns, 20);
    }
};

QTEST_GUILESS_MAIN(CollectivesTest)
#include "test_analysis_collectives.moc"
