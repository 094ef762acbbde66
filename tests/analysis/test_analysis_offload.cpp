// Offload overlap on a hand-built GPU rank.
#include <QTest>

#include "core/analysis/offload.h"

using namespace fulcrum;
using namespace fulcrum::analysis;

namespace {

// Compute stream: kernel [0,100); copy stream: host→device [50,150) of 1000 bytes and
// device→host [160,170) of 100 bytes.
//   copy 110; overlapped 50 ([50,100)); exposed 60
//   bandwidth (1000 + 100) B / 110 ns = 10 GB/s
RunTrace offloading_rank(
    std::string config = R"({"pp":1,"dp":1,"tp":1,"cp":1,"model":{"layers":2,"hidden":64}})") {
    RunTrace trace;
    trace.run.config_json = std::move(config);
    auto& compute = trace.add_lane(0, LaneKind::gpu_stream, "compute");
    auto& copies = trace.add_lane(0, LaneKind::gpu_stream, "prefetch");
    trace.add_range(compute, "attention kernel", Category::attention, 0, 100).kind =
        EventKind::kernel;
    Event& in = trace.add_range(copies, "kv prefetch", Category::offload, 50, 150);
    in.kind = EventKind::memcpy;
    in.copy_kind = CopyKind::host_to_device;
    in.bytes = 1000;
    Event& out = trace.add_range(copies, "kv offload", Category::offload, 160, 170);
    out.kind = EventKind::memcpy;
    out.copy_kind = CopyKind::device_to_host;
    out.bytes = 100;
    trace.finish();
    return trace;
}

// A cost model of one pass, stage 0's forward, at `per_pair_ns` a causal pair.
CostModel forward_pair_cost(double per_pair_ns) {
    CostModel cost;
    PassCost forward;
    forward.stage = 0;
    forward.phase = Phase::forward;
    forward.per_pair_ns = per_pair_ns;
    cost.passes.push_back(forward);
    return cost;
}

}  // namespace

class OffloadTest : public QObject {
    Q_OBJECT

private slots:
    // Pinned copies judged by what the rank sends out (offload.h): rank 0 only uploads from
    // pinned memory [0,10) and reads 8 bytes back into pinned memory [20,21): both staging,
    // no offload. Rank 1 sends 1 MiB out [0,10) and brings it back [20,30): offload, its
    // 8-byte read-back [40,41) staging. A copy of unrecorded host memory stays offload.
    void pinnedUploadsAndReadBacksAreStaging() {
        RunTrace trace;
        const auto pinned = [&](int rank, CopyKind kind, std::int64_t start, std::int64_t bytes) {
            auto& lane =
                trace.add_lane(rank, LaneKind::gpu_stream, "copy " + std::to_string(start));
            Event& copy = trace.add_range(lane, "Memcpy", Category::offload, start, start + 10);
            copy.kind = EventKind::memcpy;
            copy.copy_kind = kind;
            copy.bytes = bytes;
            (kind == CopyKind::host_to_device ? copy.src_memory : copy.dst_memory) =
                MemoryKind::pinned;
            (kind == CopyKind::host_to_device ? copy.dst_memory : copy.src_memory) =
                MemoryKind::device;
            return &copy;
        };
        pinned(0, CopyKind::host_to_device, 0, 1 << 20);
        pinned(0, CopyKind::device_to_host, 20, 8)->end_ns = 21;
        pinned(1, CopyKind::device_to_host, 0, 1 << 20);
        pinned(1, CopyKind::host_to_device, 20, 1 << 20);
        pinned(1, CopyKind::device_to_host, 40, 8)->end_ns = 41;
        trace.finish();
        const auto result = analyze_offload(trace, nullptr, 2);
        QCOMPARE(result.ranks.size(), 1u);
        QCOMPARE(result.ranks[0].rank, 1);
        QCOMPARE(result.ranks[0].copies, std::int64_t{2});
        QCOMPARE(result.copy_ns, std::int64_t{20});
        QCOMPARE(result.staging_copies, std::int64_t{3});
        QCOMPARE(result.staging_copy_ns, std::int64_t{10 + 1 + 1});
        // The hand-built rank below records no memory kinds: all its copies stay offload.
        QCOMPARE(analyze_offload(offloading_rank(), nullptr, 2).staging_copies, std::int64_t{0});
    }

    void copiesSplitIntoHiddenAndExposed() {
        const RunTrace trace = offloading_rank();
        const auto result = analyze_offload(trace, nullptr, 4);
        QCOMPARE(result.ranks.size(), 1u);
        const auto& rank = result.ranks[0];
        QCOMPARE(rank.copy_ns, 110);
        QCOMPARE(rank.overlapped_ns, 50);
        QCOMPARE(rank.exposed_ns, 60);
        QCOMPARE(rank.host_to_device_ns, 100);
        QCOMPARE(rank.device_to_host_ns, 10);
        QCOMPARE(rank.bandwidth_gb_s.value(), 10.0);
        QVERIFY(!result.min_hidden_chunk_tokens);  // no cost model
    }

    // bytes per token = 2 (K, V) · 64 · 4 = 512; per pair and layer = 0.02 / 2 layers = 0.01
    // ns; chunk ≥ 512 / (10 GB/s · 0.01 ns) = 5120 tokens.
    void chunkSizeWhereCopiesHide() {
        const RunTrace trace = offloading_rank();
        const CostModel cost = forward_pair_cost(0.02);
        const auto result = analyze_offload(trace, &cost, 4);
        QVERIFY(result.min_hidden_chunk_tokens.has_value());
        QCOMPARE(*result.min_hidden_chunk_tokens, 5120);
    }

    // Under grouped-query attention a token's K and V are h_kv = h · kv_heads / heads wide
    // each: 8 heads sharing 2 key-value heads move a quarter of the bytes, so a quarter of
    // the chunk hides them (5120 / 4 = 1280 tokens); a config without heads keeps h.
    void groupedQueryAttentionCopiesLessAChunk() {
        const CostModel cost = forward_pair_cost(0.02);
        const RunTrace gqa = offloading_rank(
            R"({"pp":1,"dp":1,"tp":1,"cp":1,"model":{"layers":2,"hidden":64,"heads":8,"kv_heads":2}})");
        QCOMPARE(*analyze_offload(gqa, &cost, 4).min_hidden_chunk_tokens, 1280);
        const RunTrace mha = offloading_rank(
            R"({"pp":1,"dp":1,"tp":1,"cp":1,"model":{"layers":2,"hidden":64,"heads":8}})");
        QCOMPARE(*analyze_offload(mha, &cost, 4).min_hidden_chunk_tokens, 5120);
        QVERIFY(analyze_offload(gqa, &cost, 4).chunk_note.find("10 GB/s and 0.01 ns") !=
                std::string::npos);
    }

    // The pass cost is stage 0's, over stage 0's layers: with --stage-layers 1,3 one layer,
    // so 0.02 ns a pair and layer and a chunk of ≥ 2560 tokens; a split that does not add up
    // to the layers is not the run's, and the even split (2 layers) stands.
    void unevenStagesDivideByStageZerosLayers() {
        const CostModel cost = forward_pair_cost(0.02);
        const std::string uneven =
            R"({"pp":2,"dp":1,"tp":1,"cp":1,"stage_layers":[1,3],"model":{"layers":4,"hidden":64}})";
        const RunTrace trace = offloading_rank(uneven);
        QCOMPARE(trace.config.layout.stage_layers, std::vector<int>({1, 3}));
        QCOMPARE(stage_layer_count(trace.config, 1), 3);
        QCOMPARE(*analyze_offload(trace, &cost, 4).min_hidden_chunk_tokens, 2560);
        const std::string wrong =
            R"({"pp":2,"dp":1,"tp":1,"cp":1,"stage_layers":[1,2],"model":{"layers":4,"hidden":64}})";
        QCOMPARE(*analyze_offload(offloading_rank(wrong), &cost, 4).min_hidden_chunk_tokens, 5120);
    }

    void aRunWithoutCopiesSaysSo() {
        RunTrace trace;
        auto& lane = trace.add_lane(0, LaneKind::host_thread, "main");
        trace.add_range(lane, "forward", Category::compute, 0, 10, 0, 0, 0, Phase::forward);
        trace.finish();
        const auto result = analyze_offload(trace, nullptr, 4);
        QVERIFY(result.ranks.empty());
        QCOMPARE(result.chunk_note, std::string("the run has no host/device copies"));
    }
};

QTEST_GUILESS_MAIN(OffloadTest)
#include "test_analysis_offload.moc"
