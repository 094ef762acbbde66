// The memory model (core/parallel/memory_model.h) against what Korthikanti et al. 2022 ("Reducing
// Activation Recomputation in Large Transformer Models", Table 3 and §6) report per A100 for
// Megatron-LM's 22B, 175B, 530B and 1T runs: model state (weights, fp32 gradients and Adam's
// state: 18 bytes a parameter) and activations without recomputation and with sequence
// parallelism plus selective recompute. Each within 10%; the hand arithmetic for the 22B row is
// in the first test.
#include <QTest>

#include "core/parallel/layout.h"
#include "core/parallel/memory_model.h"

using namespace fulcrum;
using namespace fulcrum::parallel;

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct Published {
    const char* name;
    int layers, hidden, heads, tp, pp, virtual_stages, microbatch_size;
    double model_state_gib, activations_gib, activations_seq_sel_gib;
};

// Sequence 2048, vocabulary 51200, GPUs = TP × PP, no data parallelism (Korthikanti et al.
// 2022, Table 3).
constexpr Published kPublished[] = {
    {"22B", 48, 6144, 64, 8, 1, 1, 4, 45.6, 59.3, 9.6},
    {"175B", 96, 12288, 96, 8, 8, 3, 1, 45.6, 66.8, 12.4},
    {"530B", 105, 20480, 128, 8, 35, 3, 1, 31.6, 114.0, 23.1},
    {"1T", 128, 25600, 160, 8, 64, 1, 1, 33.0, 131.3, 26.6},
};

MemoryShape shape_of(const Published& run, bool seq_sel) {
    MemoryShape shape;
    shape.model.layers = run.layers;
    shape.model.hidden = run.hidden;
    shape.model.heads = run.heads;
    shape.model.vocab = 51200;
    shape.model.context = 2048;
    shape.microbatch_size = run.microbatch_size;
    shape.layout.grid.tp = run.tp;
    shape.layout.grid.pp = run.pp;
    shape.layout.virtual_stages = run.virtual_stages;
    shape.layout.schedule = run.virtual_stages > 1 ? parallel::PipelineSchedule::interleaved
                                                   : parallel::PipelineSchedule::one_f_one_b;
    shape.layout.microbatches = std::max(run.pp * 8, 1);
    shape.layout.recompute = seq_sel ? Recompute::selective : Recompute::none;
    shape.layout.sequence_parallel = seq_sel;
    return shape;
}

bool within(double predicted, double published, double tolerance) {
    return std::abs(predicted - published) <= tolerance * published;
}

}  // namespace

class PlanMemoryTest : public QObject {
    Q_OBJECT

private slots:
    // 22B: s·b·h = 2048 · 4 · 6144 = 50,331,648. Per layer without recompute, TP 8:
    // 10 + 24/8 + 5·64·2048/(6144·8) = 26.33 bytes per s·b·h → 1,325,400,064 bytes; 48 layers
    // → 59.25 GiB (published 59.3). With sequence parallelism and selective recompute 34/8 =
    // 4.25 → 213,909,504 bytes a layer, 9.56 GiB (published 9.6). The one stage is also the
    // last, which keeps the fp32 softmax of its logits: 4·s·b·V/t = 4·2048·4·51200/8 bytes.
    void handArithmeticOf22B() {
        const StageMemory none = stage_memory(shape_of(kPublished[0], false), 0);
        QCOMPARE(none.activations_per_layer_bytes,
                 50331648.0 * (10 + 3 + 5.0 * 64 * 2048 / (6144 * 8)));
        QCOMPARE(none.layers_in_flight, 48.0);
        QCOMPARE(none.logits_bytes, 4.0 * 2048 * 4 * 51200 / 8);
        QVERIFY(std::abs((none.activations_bytes - none.logits_bytes) / kGiB - 59.25) < 0.01);
        const StageMemory seq_sel = stage_memory(shape_of(kPublished[0], true), 0);
        QCOMPARE(seq_sel.activations_per_layer_bytes, 50331648.0 * 4.25);
        QVERIFY(std::abs((seq_sel.activations_bytes - seq_sel.logits_bytes) / kGiB - 9.56) < 0.01);
    }

    void publishedRunsWithinTenPercent_data() {
        QTest::addColumn<int>("row");
        for (int i = 0; i < 4; ++i)
            QTest::newRow(kPublished[i].name) << i;
    }
    void publishedRunsWithinTenPercent() {
        QFETCH(int, row);
        const Published& run = kPublished[row];
        const StageMemory none = stage_memory(shape_of(run, false), 0);
        const StageMemory seq_sel = stage_memory(shape_of(run, true), 0);
        // A middle stage's model state: the published figure leaves out the embeddings.
        const StageMemory middle = stage_memory(shape_of(run, false), run.pp > 2 ? 1 : 0);
        const QString figures =
            QString("model state %1 GiB (published %2), activations %3 (%4), seq+sel %5 (%6)")
                .arg(middle.model_state_bytes() / kGiB)
                .arg(run.model_state_gib)
                .arg(none.activations_bytes / kGiB)
                .arg(run.activations_gib)
                .arg(seq_sel.activations_bytes / kGiB)
                .arg(run.activations_seq_sel_gib);
        QVERIFY2(within(middle.model_state_bytes() / kGiB, run.model_state_gib, 0.10),
                 qPrintable(figures));
        QVERIFY2(within(none.activations_bytes / kGiB, run.activations_gib, 0.10),
                 qPrintable(figures));
        QVERIFY2(within(seq_sel.activations_bytes / kGiB, run.activations_seq_sel_gib, 0.10),
                 qPrintable(figures));
        qInfo("%s: %s", run.name, qPrintable(figures));
    }

    // Stage 0 of an interleaved pipeline keeps L·(1 + (p−1)/(p·v)) layers' worth; the last stage
    // of 1F1B one micro-batch; GPipe m; full recompute only each layer's input.
    void inFlightByScheduleAndRecompute() {
        MemoryShape shape = shape_of(kPublished[1], false);  // 96 layers, p 8, v 3
        QCOMPARE(stage_memory(shape, 0).layers_in_flight, 96.0 * (1 + 7.0 / 24));
        shape.layout.schedule = parallel::PipelineSchedule::one_f_one_b;
        shape.layout.virtual_stages = 1;
        QCOMPARE(stage_memory(shape, 0).layers_in_flight, 96.0);
        QCOMPARE(stage_memory(shape, 7).layers_in_flight, 12.0);
        shape.layout.schedule = parallel::PipelineSchedule::gpipe;
        QCOMPARE(stage_memory(shape, 7).layers_in_flight, 12.0 * shape.layout.microbatches);
        shape.layout.recompute = Recompute::full;
        QCOMPARE(stage_memory(shape, 0).activations_per_layer_bytes, 2.0 * 2048 * 12288);
        shape.layout.zero_stage = 1;
        shape.layout.grid.dp = 4;
        const StageMemory sharded = stage_memory(shape, 1);
        QCOMPARE(sharded.optimizer_bytes, sharded.parameters * 12 / 4);
    }

    // The engine's count replays the stage's passes (engine_stage_memory); on a stage without
    // the head, whose model chunks are alike, its activations at the peak are the schedule's
    // count of chunks in flight (plus each micro-batch's token ids, < 1% here): GPipe m,
    // 1F1B min(p − s, m), interleaved Megatron-LM's min((p − s − 1)·2 + (v − 1)·p + 1, m·v).
    // Uneven stage_layers move parameters and activations with the layers.
    void engineReplayCountsTheScheduleInFlight() {
        MemoryShape shape;
        shape.model.layers = 8;
        shape.model.hidden = 64;
        shape.model.heads = 4;
        shape.model.context = 1024;
        shape.layout.grid.pp = 4;
        shape.layout.microbatches = 8;
        shape.precision = Precision::fp32();
        auto chunks_in_flight = [&](int stage) {
            const EngineMemory memory = engine_stage_memory(shape, stage);
            return memory.activations_bytes / (memory.activations_per_microbatch_bytes /
                                               std::max(shape.layout.virtual_stages, 1));
        };
        auto near = [](double value, double expected) {
            return std::abs(value - expected) < 0.01 * expected;
        };
        shape.layout.schedule = parallel::PipelineSchedule::gpipe;
        QVERIFY(near(chunks_in_flight(1), 8));
        shape.layout.schedule = parallel::PipelineSchedule::one_f_one_b;
        QVERIFY(near(chunks_in_flight(0), 4));
        QVERIFY(near(chunks_in_flight(2), 2));
        shape.layout.schedule = parallel::PipelineSchedule::interleaved;
        shape.layout.virtual_stages = 2;
        QVERIFY2(near(chunks_in_flight(0), 3 * 2 + 1 * 4 + 1),
                 qPrintable(QString::number(chunks_in_flight(0))));
        QVERIFY(near(chunks_in_flight(1), 2 * 2 + 1 * 4 + 1));

        shape = MemoryShape{};
        shape.model.layers = 8;
        shape.layout.grid.pp = 2;
        shape.layout.stage_layers = {2, 6};
        QCOMPARE(stage_layer_count(shape, 0), 2.0);
        QCOMPARE(stage_memory(shape, 1).parameters - stage_memory(shape, 0).parameters,
                 4 * layer_parameters(shape.model) + 2.0 * shape.model.hidden + 64.0 * 256 -
                     (256.0 * 64 + 2048.0 * 64));
        QVERIFY(engine_stage_memory(shape, 1).activations_per_microbatch_bytes >
                2.5 * engine_stage_memory(shape, 0).activations_per_microbatch_bytes);
    }

    // Llama 3 8B (Dubey et al. 2024, Table 3: 32 layers, 4096 wide, 32 heads of which 8 key-value,
    // a SwiGLU MLP of 14336, vocabulary 128256): 8,030,261,248 parameters, as its released
    // checkpoint has. GPT's layer is 12h² + 13h, and keeps Korthikanti's (10 + 24/t)·h bytes a
    // token, 34·h/t with sequence parallelism.
    void modelShapesCountTheirParameters() {
        const ModelShape llama{.layers = 32,
                               .hidden = 4096,
                               .heads = 32,
                               .context = 8192,
                               .vocab = 128256,
                               .architecture = Architecture::llama,
                               .kv_heads = 8,
                               .ffn_hidden = 14336};
        QCOMPARE(model_parameters(llama), 8030261248.0);
        QCOMPARE(layer_gemm_weights(llama),
                 4096.0 * (4096 + 2 * 1024) + 4096.0 * 4096 + 3 * 4096.0 * 14336);
        QCOMPARE(parallel::embedding_parameters(llama), 128256.0 * 4096);
        QVERIFY(!tied_embedding(llama));
        const ModelShape gpt{.layers = 2, .hidden = 64, .heads = 4, .context = 256, .vocab = 256};
        QCOMPARE(layer_parameters(gpt), 12.0 * 64 * 64 + 13 * 64);
        QCOMPARE(kept_bytes_per_token(gpt, 8, false), (10 + 24.0 / 8) * 64);
        QCOMPARE(kept_bytes_per_token(gpt, 8, true), 34.0 * 64 / 8);
        // Llama, no TP: norms' and linears' inputs 8h, Q 2h, K and V 4·h_kv, the projection's
        // input 2h, the MLP's gate, up and product 6f.
        QCOMPARE(kept_bytes_per_token(llama, 1, false),
                 8 * 4096.0 + 2 * 4096 + 4 * 1024 + 2 * 4096 + 6 * 14336);
        // A layout checks the key-value heads as it checks the heads.
        Layout tp16{.grid = {.tp = 16}};
        const Status refused = check_layout(tp16, llama);
        QVERIFY(!refused.ok());
        QVERIFY(refused.error().message.find("--kv-heads 8") != std::string::npos);
    }

    // ZeRO over DP × CP: stage 1 the optimizer state, 2 also the gradients (with one layer's
    // whole until reduce-scattered), 3 also the weights (with two layers gathered whole).
    void zeroStagesShardOverDataAndContextRanks() {
        MemoryShape shape = shape_of(kPublished[0], false);
        shape.layout.grid.dp = 4;
        shape.layout.grid.cp = 2;
        const StageMemory none = stage_memory(shape, 0);
        QCOMPARE(none.optimizer_bytes, none.parameters * 12);
        QCOMPARE(none.buffers_bytes, 0.0);
        const double layer = layer_parameters(shape.model) / 8;  // TP 8
        shape.layout.zero_stage = 1;
        const StageMemory one = stage_memory(shape, 0);
        QCOMPARE(one.optimizer_bytes, none.optimizer_bytes / 8);
        QCOMPARE(one.gradients_bytes, none.gradients_bytes);
        shape.layout.zero_stage = 2;
        const StageMemory two = stage_memory(shape, 0);
        QCOMPARE(two.gradients_bytes, none.gradients_bytes / 8);
        QCOMPARE(two.buffers_bytes, layer * 4);
        QCOMPARE(two.weights_bytes, none.weights_bytes);
        shape.layout.zero_stage = 3;
        const StageMemory three = stage_memory(shape, 0);
        QCOMPARE(three.weights_bytes, none.weights_bytes / 8);
        QCOMPARE(three.buffers_bytes, layer * 4 + 2 * layer * 2);
        QCOMPARE(three.activations_bytes, none.activations_bytes);
        shape.layout.zero_stage = 4;
        QVERIFY(!check_layout(shape.layout, shape.model).ok());
    }

    // Gradients the backward allocates as it writes them (PyTorch's .grad, DeepSpeed's
    // ZeRO-1, and ZeRO-2's shard) fill as the activations are freed: the peak holds the
    // larger of the two, not both; a buffer held from the start (Megatron-LM's) holds both.
    // ZeRO-2's bucket is held from the start, and ZeRO-3's partitions are buffers.
    void gradientsWrittenByTheBackwardTakeTheActivationsPlace() {
        MemoryShape shape;
        shape.model = {.layers = 8, .hidden = 4096, .heads = 32, .context = 8192};
        shape.layout.grid = {.dp = 8, .tp = 1, .pp = 1, .cp = 1};
        shape.layout.zero_stage = 1;
        const StageMemory held = stage_memory(shape, 0);
        QVERIFY(!held.gradients_replace_activations);
        QCOMPARE(held.total_bytes(), held.model_state_bytes() + held.activations_bytes);
        shape.gradients_as_written = true;
        const StageMemory written = stage_memory(shape, 0);
        QVERIFY(written.gradients_replace_activations);
        QCOMPARE(written.gradients_bytes, held.gradients_bytes);
        QVERIFY(written.activations_bytes > written.gradients_bytes);  // 8K tokens, 8 layers
        QCOMPARE(written.total_bytes(), held.total_bytes() - held.gradients_bytes);
        shape.model.context = 512;  // now the gradients are the larger
        const StageMemory few = stage_memory(shape, 0);
        QVERIFY(few.gradients_bytes > few.activations_bytes);
        QCOMPARE(few.total_bytes(), few.model_state_bytes());
        // ZeRO-2: the shard fills in the activations' place, the layer's bucket does not;
        // so a rank never holds more under ZeRO-2 than under ZeRO-1 but that bucket.
        shape.model.context = 8192;
        shape.layout.zero_stage = 2;
        const StageMemory two = stage_memory(shape, 0);
        QVERIFY(two.gradients_replace_activations);
        QCOMPARE(two.gradients_bytes, written.gradients_bytes / 8);
        QCOMPARE(two.total_bytes(),
                 two.model_state_bytes() - two.gradients_bytes + two.activations_bytes);
        QCOMPARE(two.total_bytes(), written.total_bytes() + two.buffers_bytes);
        shape.layout.zero_stage = 3;
        QVERIFY(!stage_memory(shape, 0).gradients_replace_activations);
    }

    // Full recomputation keeps each layer's input plus one layer's whole forward for the
    // backward that re-runs it; offloaded, two inputs stay on the device and the rest wait in
    // host memory.
    void offloadedCheckpointsLeaveTwoOnTheDevice() {
        MemoryShape shape = shape_of(kPublished[0], false);  // 48 layers, one stage
        const double whole = stage_memory(shape, 0).activations_per_layer_bytes;
        shape.layout.recompute = Recompute::full;
        const StageMemory full = stage_memory(shape, 0);
        const double input = 2.0 * 2048 * 4 * 6144;
        QCOMPARE(full.activations_per_layer_bytes, input);
        QCOMPARE(full.activations_bytes, 48 * input + whole + full.logits_bytes);
        QCOMPARE(full.host_bytes, 0.0);
        shape.layout.offload_checkpoints = true;
        QVERIFY(check_layout(shape.layout, shape.model).ok());
        const StageMemory offloaded = stage_memory(shape, 0);
        QCOMPARE(offloaded.activations_bytes, 2 * input + whole + offloaded.logits_bytes);
        QCOMPARE(offloaded.host_bytes, 46 * input);
        shape.layout.recompute = Recompute::selective;
        const Status refused = check_layout(shape.layout, shape.model);
        QVERIFY(!refused.ok());
        QVERIFY(refused.error().message.find("--recompute full") != std::string::npos);
    }

    // Ulysses holds the same tokens a rank as all-gather CP, with the attention's output kept
    // twice, and needs whole heads on every TP × CP rank.
    void ulyssesKeepsTheOutputTwiceAndWholeHeads() {
        MemoryShape shape = shape_of(kPublished[0], false);  // 64 heads, TP 8
        shape.flash_attention = true;
        shape.layout.grid.cp = 4;
        const double all_gather = stage_memory(shape, 0).activations_per_layer_bytes;
        shape.layout.context_parallelism = ContextParallelism::ulysses;
        QVERIFY(check_layout(shape.layout, shape.model).ok());
        const double ulysses = stage_memory(shape, 0).activations_per_layer_bytes;
        QCOMPARE(ulysses - all_gather, 2.0 * 2048 / 4 * 4 * 6144 / 8);
        shape.layout.grid.cp = 16;  // 8 × 16 = 128 ranks for 64 heads
        const Status refused = check_layout(shape.layout, shape.model);
        QVERIFY(!refused.ok());
        QVERIFY(refused.error().message.find("whole heads") != std::string::npos);
        for (const char* name : {"all-gather", "ulysses"}) {
            auto parsed = parse_context_parallelism(name);
            QVERIFY(parsed);
            QCOMPARE(std::string(context_parallelism_name(*parsed)), std::string(name));
        }
        QVERIFY(!parse_context_parallelism("ring"));
    }

    void recomputeNames() {
        for (const char* name : {"none", "selective", "full"}) {
            auto parsed = parse_recompute(name);
            QVERIFY(parsed);
            QCOMPARE(std::string(recompute_name(*parsed)), std::string(name));
        }
        QVERIFY(!parse_recompute("some"));
    }
};

QTEST_GUILESS_MAIN(PlanMemoryTest)
#include "test_plan_memory.moc"
