// Tensor parallelism against the serial model, on 2 ranks (mpirun -np 2): the parameter
// mapping between the serial and the local layouts, the initial weights, and one forward and
// backward pass — loss, every gathered gradient, and the replication of everything that TP
// does not split.
#include <QTest>

#include "parallel_test_support.h"

using namespace fulcrum::engine;
using namespace fulcrum::engine::test;

namespace {

// Every member's `values`, concatenated (all of equal length).
std::vector<float> all_gathered(Communicator& comm, const std::vector<float>& values) {
    std::vector<float> out(values.size() * std::size_t(comm.size()));
    comm.all_gather(values, out, std::vector<int>(std::size_t(comm.size()), int(values.size())));
    return out;
}

// A double's bytes as two floats, so that an all-gather (which copies, never adds) can show
// whether the members hold bit-identical values.
std::vector<float> bytes_of(double value) {
    std::vector<float> out(2);
    std::memcpy(out.data(), &value, sizeof(double));
    return out;
}

bool all_members_equal(const std::vector<float>& gathered, std::size_t member_size,
                       std::span<const ElementRange> ranges) {
    const std::size_t members = gathered.size() / member_size;
    for (std::size_t m = 1; m < members; ++m) {
        for (const ElementRange& r : ranges) {
            if (std::memcmp(gathered.data() + r.offset,
                            gathered.data() + m * member_size + r.offset,
                            std::size_t(r.count) * sizeof(float)) != 0) {
                return false;
            }
        }
    }
    return true;
}

}  // namespace

class ParallelTpTest : public QObject {
    Q_OBJECT

private slots:
    void shardGatherRoundTrip_data();
    void shardGatherRoundTrip();
    void initializeGivesTheSerialWeights();
    void matchesSerial();
    void sequenceParallelMatchesSerial_data();
    void sequenceParallelMatchesSerial();

private:
    CpuBackend backend_{1};
};

void ParallelTpTest::shardGatherRoundTrip_data() {
    QTest::addColumn<int>("tp");
    QTest::newRow("TP 1") << 1;
    QTest::newRow("TP 2") << 2;
    QTest::newRow("TP 4") << 4;
}

// Pure host functions; every rank checks the same thing.
void ParallelTpTest::shardGatherRoundTrip() {
    QFETCH(int, tp);
    const ModelShape config = tiny_config();
    const ParameterLayout serial(config), local(config, tp);
    const std::vector<float> full = lively_parameters(config, 11);
    std::vector<std::vector<float>> locals;
    for (int r = 0; r < tp; ++r) {
        locals.push_back(shard_parameters(full, config, tp, r));
        QCOMPARE(std::int64_t(locals.back().size()), local.total());
    }
    QVERIFY(gather_parameters(locals, config) == full);

    // Split tensors add up to the serial ones; replicated ones are whole and equal.
    std::int64_t split = 0, replicated = 0;
    for (const ParameterTensor& t : local.tensors())
        (t.tp_replicated() ? replicated : split) += t.numel();
    QCOMPARE(replicated + tp * split, serial.total());
    std::int64_t listed = 0;
    for (const ElementRange& r : tp_replicated_ranges(local)) {
        listed += r.count;
        for (int rank = 0; rank < tp; ++rank) {
            QVERIFY(std::equal(locals[std::size_t(rank)].begin() + r.offset,
                               locals[std::size_t(rank)].begin() + r.offset + r.count,
                               locals[0].begin() + r.offset));
        }
    }
    QCOMPARE(listed, replicated);

    // Where the pieces come from, for the last rank: its heads' rows of Q, K and V, its rows
    // of fc, and its input columns of both projections.
    const int r = tp - 1;
    const std::vector<float>& mine = locals.back();
    const std::int64_t c = config.hidden, cl = c / tp;
    const int l = 1;
    auto at = [](const std::vector<float>& v, const ParameterTensor& t, std::int64_t row,
                 std::int64_t col) { return v[std::size_t(t.offset + row * t.cols + col)]; };
    using K = ParameterKind;
    const ParameterTensor &fq = serial.find(K::qkv_weight, l), &lq = local.find(K::qkv_weight, l);
    for (int block = 0; block < 3; ++block) {
        QCOMPARE(at(mine, lq, block * cl, 5), at(full, fq, block * c + r * cl, 5));
        QCOMPARE(at(mine, lq, block * cl + cl - 1, 0),
                 at(full, fq, block * c + r * cl + cl - 1, 0));
    }
    const ParameterTensor &fqb = serial.find(K::qkv_bias, l), &lqb = local.find(K::qkv_bias, l);
    QCOMPARE(mine[std::size_t(lqb.offset + 2 * cl)],
             full[std::size_t(fqb.offset + 2 * c + r * cl)]);
    const ParameterTensor &ff = serial.find(K::fc_weight, l), &lf = local.find(K::fc_weight, l);
    QCOMPARE(at(mine, lf, 0, 3), at(full, ff, r * 4 * cl, 3));
    const ParameterTensor &fp = serial.find(K::attn_proj_weight, l),
                          &lp = local.find(K::attn_proj_weight, l);
    QCOMPARE(at(mine, lp, 7, 1), at(full, fp, 7, r * cl + 1));
    const ParameterTensor &fm = serial.find(K::fc_proj_weight, l),
                          &lm = local.find(K::fc_proj_weight, l);
    QCOMPARE(at(mine, lm, c - 1, 4 * cl - 1), at(full, fm, c - 1, r * 4 * cl + 4 * cl - 1));
}

void ParallelTpTest::initializeGivesTheSerialWeights() {
    const ModelShape config = tiny_config();
    GptModel serial(backend_, config);
    serial.initialize(2024);
    GptModel sharded(backend_, config, ModelParallel{&world(), nullptr});
    sharded.initialize(2024);
    QVERIFY(sharded.parameters_to_host() ==
            shard_parameters(serial.parameters_to_host(), config, world().size(), world().rank()));
}

// One forward and backward pass with TP = 2 against the serial model on the same weights and
// the same micro-batch. Communication first, checks after (parallel_test_support.h).
void ParallelTpTest::matchesSerial() {
    if (world().size() != 2)
        QSKIP("needs mpirun -np 2");
    const ModelShape config = tiny_config();
    const std::vector<float> params = lively_parameters(config, 5);
    const TokenBatch batch = full_micro_batch();
    const SerialRun serial = run_serial(backend_, config, params, batch);

    Communicator& tp = world();
    GptModel model(backend_, config, ModelParallel{&tp, nullptr});
    model.set_parameters(shard_parameters(params, config, tp.size(), tp.rank()));
    Activations acts(backend_, config, tp.size());
    model.zero_gradients();
    const double loss = model.forward(batch, acts);
    model.backward(acts, float(1.0 / double(serial.targets)));
    const std::vector<float> local_grads = model.gradients_to_host();
    const std::vector<float> grads = gather_parameters(local_grads, config, tp);
    std::vector<float> output(std::size_t(acts.block_input(config.layers).numel()));
    backend_.download(output.data(), acts.block_input(config.layers), kComputeStream);
    // What every TP rank must hold bit for bit: the loss, the residual stream, and the
    // gradients of the replicated parameters.
    const std::vector<float> losses = all_gathered(tp, bytes_of(loss));
    const std::vector<float> outputs = all_gathered(tp, output);
    const std::vector<float> all_local_grads = all_gathered(tp, local_grads);

    QVERIFY2(std::abs(loss - serial.loss) <= kRelativeTolerance * serial.loss,
             qPrintable(QStringLiteral("loss %1 vs serial %2").arg(loss).arg(serial.loss)));
    const Comparison gradients = compare_parameters(config, grads, serial.gradients);
    report("TP=2 gradients", gradients);
    FULCRUM_VERIFY_COMPARISON(gradients, "TP=2 gradients");
    Comparison residual;
    compare_range(residual, "head input", output.data(), serial.output.data(),
                  std::int64_t(output.size()));
    FULCRUM_VERIFY_COMPARISON(residual, "TP=2 residual stream");

    const ElementRange whole{0, 2};
    QVERIFY2(all_members_equal(losses, 2, std::span(&whole, 1)), "TP ranks report other losses");
    const ElementRange stream{0, std::int64_t(output.size())};
    QVERIFY2(all_members_equal(outputs, output.size(), std::span(&stream, 1)),
             "TP ranks hold different residual streams");
    QVERIFY2(all_members_equal(all_local_grads, local_grads.size(),
                               tp_replicated_ranges(model.layout())),
             "a replicated parameter's gradient differs between TP ranks");
}

// Sequence parallelism (tensor_parallel.h, Korthikanti et al. 2022 §4.2.2) against the serial
// model: the 101 rows split 51 + 50, the loss summed over TP, the LayerNorm and embedding
// gradients summed over TP (reduce_sequence_parallel_gradients), the gradients gathered into
// the serial layout — alone, with the split backward (B then W) and with recomputation. And the
// device peak falls by exactly the rows this rank no longer holds of the residual-stream
// tensors (the LayerNorms' inputs, outputs and statistics, the embedding's output, the head's,
// the residual gradient and ∂L/∂logits), less the [T, C] buffer that gathers go through and the
// reduce-scattered [n_r, C] gradient, and under the split backward without recomputation less
// the two [T, C] output gradients a block that take residual3's and residual2's rows only
// while those are [T, C].
void ParallelTpTest::sequenceParallelMatchesSerial_data() {
    QTest::addColumn<bool>("split");
    QTest::addColumn<int>("recompute");
    QTest::newRow("sequence parallel") << false << int(Recompute::none);
    QTest::newRow("sequence parallel, split backward") << true << int(Recompute::none);
    QTest::newRow("sequence parallel, full recompute") << false << int(Recompute::full);
    QTest::newRow("sequence parallel, selective recompute, split")
        << true << int(Recompute::selective);
}

void ParallelTpTest::sequenceParallelMatchesSerial() {
    if (world().size() != 2)
        QSKIP("needs mpirun -np 2");
    QFETCH(bool, split);
    QFETCH(int, recompute);
    const ModelShape config = tiny_config();
    const std::vector<float> params = lively_parameters(config, 5);
    const TokenBatch batch = full_micro_batch();
    const SerialRun serial = run_serial(backend_, config, params, batch);

    Communicator& tp = world();
    struct Outcome {
        double loss = 0;
        std::vector<float> local_gradients;
        std::int64_t peak = 0;
    };
    auto run = [&](bool sequence_parallel) {
        CpuBackend backend(1);
        GptModel model(backend, config, ModelParallel{&tp, nullptr});
        model.set_parameters(shard_parameters(params, config, tp.size(), tp.rank()));
        model.set_recompute(Recompute(recompute));
        model.set_sequence_parallel(sequence_parallel);
        model.set_split_backward(split);
        Activations acts(model);
        model.zero_gradients();
        Outcome out;
        out.loss = model.forward(batch, acts);
        const float scale = float(1.0 / double(serial.targets));
        if (split) {
            model.backward_head(acts, scale, BackwardPart::input_gradients);
            model.backward_blocks(0, config.layers, acts, BackwardPart::input_gradients);
            model.backward_embedding(acts);
            model.backward_weights_blocks(0, config.layers, acts);
            model.backward_weights_head(acts);
        } else {
            model.backward(acts, scale);
        }
        model.reduce_sequence_parallel_gradients();
        out.local_gradients = model.gradients_to_host();
        out.peak = backend.memory_use().peak_device_bytes;
        return out;
    };
    const Outcome whole_rows = run(false);
    const Outcome rows = run(true);
    double loss[1] = {rows.loss};  // this rank's rows' Σ ℓ
    tp.all_reduce_sum(std::span<double>(loss));
    const std::vector<float> grads = gather_parameters(rows.local_gradients, config, tp);
    const std::vector<float> all_local_grads = all_gathered(tp, rows.local_gradients);

    QVERIFY2(std::abs(loss[0] - serial.loss) <= kRelativeTolerance * serial.loss,
             qPrintable(QStringLiteral("loss %1 vs serial %2").arg(loss[0]).arg(serial.loss)));
    const Comparison gradients = compare_parameters(config, grads, serial.gradients);
    report("sequence-parallel gradients", gradients);
    FULCRUM_VERIFY_COMPARISON(gradients, "sequence-parallel gradients");
    QVERIFY2(
        all_members_equal(
            all_local_grads, rows.local_gradients.size(),
            tp_replicated_ranges(GptModel(backend_, config, ModelParallel{&tp, nullptr}).layout())),
        "a replicated parameter's gradient differs between TP ranks");

    const std::int64_t t = batch.size(), c = config.hidden, v = config.vocab;
    const std::int64_t n = sequence_shard(t, tp.size(), tp.rank()).rows;
    QCOMPARE(t, 101);
    std::int64_t per_row = c + config.layers * (4 * c + 4) + c + 2 + v + 1;  // activations
    per_row += c + v;  // the backward's residual gradient and ∂L/∂logits
    // A split backward keeps for W ∂L/∂ of each GEMM's output (gpt.h, BlockOutputGradients).
    // The blocks' are [T, ·] with and without sequence parallelism, so they cancel, but for
    // where they take the rows of a forward tensor B has read. Without recomputation ∂L/∂ of
    // the two row-parallel products [T, C] take residual3's and residual2's rows, which are
    // [T, C] only without sequence parallelism: with it this rank keeps both [T, C] a block
    // beside its [n, C] residual rows (dfch and dQKV take fch's and qkv's rows in both runs).
    // The head's ∂L/∂logits [n, V] takes the probabilities' rows without recomputation; with
    // it, it is a buffer of its own.
    std::int64_t split_gathered = 0;  // [T, C] tensors kept only with sequence parallelism
    if (split) {
        if (Recompute(recompute) == Recompute::none) {
            split_gathered = config.layers * 2;
        } else {
            per_row += v;
        }
    }
    if (Recompute(recompute) == Recompute::full) {
        // The Activations keep residual3 only; the workspace's one block keeps 3C + 4 of them.
        per_row -= config.layers * (3 * c + 4) - (3 * c + 4);
    }
    const std::int64_t fall =
        ((t - n) * per_row - n * c - t * c - split_gathered * t * c) * std::int64_t(sizeof(float));
    QCOMPARE(whole_rows.peak - rows.peak, fall);
}

FULCRUM_MPI_TEST_MAIN(ParallelTpTest)
#include "test_parallel_tp.moc"
