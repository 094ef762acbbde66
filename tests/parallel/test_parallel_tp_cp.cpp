// TP = 2 × CP = 2 on 4 ranks (mpirun -np 4) against the serial model, with the grid built by
// Topology as the trainer builds it: loss and gradients under each CP sharding, replication
// across TP, and the pipeline-stage pieces of the passes giving exactly the whole passes.
#include <QtTest/qtestassert.h>
#include <QTest>

#include "parallel_test_support.h"

using namespace fulcrum::engine;
using namespace fulcrum::engine::test;
namespace balance = fulcrum::balance;
using fulcrum::Result;

namespace {

ContextShard shard_for(balance::CpSharding sharding, int cp_size, int cp_rank) {
    const std::vector<std::string_view> texts = document_views();
    const std::vector<balance::Document> docs = document_list();
    balance::CpShardingState state;
    Result<balance::CpPlan> plan = balance::shard_microbatch(docs, cp_size, sharding, state);
    QTEST_ASSERT(plan.ok());
    Result<ContextShard> shard = make_context_shard(texts, docs, *plan, cp_rank);
    QTEST_ASSERT(shard.ok());
    return std::move(shard).value();
}

struct ParallelRun {
    double loss = 0;                  // Σ ℓ over the local targets
    std::vector<float> gradients;     // local layout, this rank's share
    std::vector<float> output;        // head input, local rows
    std::vector<float> first_output;  // block 0's output, local rows
};

std::vector<float> download(Backend& backend, const Tensor& t) {
    std::vector<float> host(std::size_t(t.numel()));
    backend.download(host.data(), t, kComputeStream);
    return host;
}

// As a two-stage pipeline would run it on one rank: embedding, block 0 | block 1, head; head
// backward, block 1 | block 0, embedding.
ParallelRun run_in_pieces(GptModel& model, Activations& acts, const ContextShard& shard,
                          float loss_scale) {
    Backend& backend = model.backend();
    const int layers = model.config().layers;
    ParallelRun run;
    model.zero_gradients();
    model.load_micro_batch(shard, acts);
    model.forward_embedding(acts);
    model.forward_blocks(0, 1, acts);
    model.forward_blocks(1, layers, acts);
    run.loss = model.forward_head(acts);
    model.backward_head(acts, loss_scale);
    model.backward_blocks(1, layers, acts);
    model.backward_blocks(0, 1, acts);
    model.backward_embedding(acts);
    run.gradients = model.gradients_to_host();
    run.output = download(backend, acts.block_input(layers));
    run.first_output = download(backend, acts.block_input(1));
    return run;
}

ParallelRun run_whole(GptModel& model, Activations& acts, const ContextShard& shard,
                      float loss_scale) {
    ParallelRun run;
    model.zero_gradients();
    run.loss = model.forward(shard, acts);
    model.backward(acts, loss_scale);
    run.gradients = model.gradients_to_host();
    run.output = download(model.backend(), acts.block_input(model.config().layers));
    run.first_output = download(model.backend(), acts.block_input(1));
    return run;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

class ParallelTpCpTest : public QObject {
    Q_OBJECT

private slots:
    void matchesSerial_data();
    void matchesSerial();
    void piecesEqualWholePasses();

private:
    CpuBackend backend_{1};
};

void ParallelTpCpTest::matchesSerial_data() {
    add_sharding_rows();
}

// Gradients: gathered over TP (gather_parameters), summed over CP (the trainer's all-reduce).
// Losses: summed over CP only — every TP rank reports the same one. Communication first.
void ParallelTpCpTest::matchesSerial() {
    QFETCH(balance::CpSharding, sharding);
    if (world().size() != 4)
        QSKIP("needs mpirun -np 4");
    const TpCpGroups grid = make_tp_cp_groups(GridShape{.tp = 2, .cp = 2});
    Communicator& tp = *grid.tp;
    Communicator& cp = *grid.cp;
    const ModelShape config = tiny_config();
    const std::vector<float> params = lively_parameters(config, 5);
    const SerialRun serial = run_serial(backend_, config, params, full_micro_batch());
    const ContextShard shard = shard_for(sharding, cp.size(), cp.rank());

    GptModel model(backend_, config, ModelParallel{&tp, &cp});
    model.set_parameters(shard_parameters(params, config, tp.size(), tp.rank()));
    Activations acts(model);
    const ParallelRun run = run_whole(model, acts, shard, float(1.0 / double(serial.targets)));
    const double loss = sum_over(&cp, run.loss);
    std::vector<float> local_grads = run.gradients;
    cp.all_reduce_sum(std::span<float>(local_grads));
    const std::vector<float> grads = gather_parameters(local_grads, config, tp);
    // Replicated gradients identical across TP: rank 0's copy against each rank's own.
    const std::vector<float> reference_grads = [&] {
        std::vector<float> v = local_grads;
        tp.broadcast(v, 0);
        return v;
    }();

    QVERIFY2(std::abs(loss - serial.loss) <= kRelativeTolerance * serial.loss,
             qPrintable(QStringLiteral("loss %1 vs serial %2").arg(loss).arg(serial.loss)));
    const Comparison gradients = compare_parameters(config, grads, serial.gradients);
    report(QStringLiteral("TP=2 x CP=2 %1 gradients").arg(QTest::currentDataTag()), gradients);
    FULCRUM_VERIFY_COMPARISON(gradients, "TP=2 x CP=2 gradients");
    for (const ElementRange& r : tp_replicated_ranges(model.layout())) {
        QVERIFY2(std::memcmp(local_grads.data() + r.offset, reference_grads.data() + r.offset,
                             std::size_t(r.count) * sizeof(float)) == 0,
                 "a replicated parameter's gradient differs between TP ranks");
    }
    std::vector<float> expected;
    const std::int64_t c = config.hidden;
    for (const AttentionSpan& span : shard.spans) {
        const auto begin = serial.output.begin() + (span.kv_begin + span.prefix) * c;
        expected.insert(expected.end(), begin, begin + span.length * c);
    }
    Comparison rows;
    compare_range(rows, "head input", run.output.data(), expected.data(),
                  std::int64_t(expected.size()));
    FULCRUM_VERIFY_COMPARISON(rows, "TP=2 x CP=2 residual stream rows");
}

// The pieces a pipeline stage calls compute exactly what forward()/backward() compute: the
// same kernels and collectives in the same order, so bit for bit.
void ParallelTpCpTest::piecesEqualWholePasses() {
    if (world().size() != 4)
        QSKIP("needs mpirun -np 4");
    const TpCpGroups grid = make_tp_cp_groups(GridShape{.tp = 2, .cp = 2});
    const ModelShape config = tiny_config();
    const std::vector<float> params = lively_parameters(config, 8);
    const ContextShard shard =
        shard_for(balance::CpSharding::per_document, grid.cp->size(), grid.cp->rank());
    GptModel model(backend_, config, ModelParallel{grid.tp.get(), grid.cp.get()});
    model.set_parameters(shard_parameters(params, config, grid.tp->size(), grid.tp->rank()));
    Activations acts(model);
    const float scale = 1.0f / float(full_micro_batch().target_count());
    const ParallelRun whole = run_whole(model, acts, shard, scale);
    const ParallelRun pieces = run_in_pieces(model, acts, shard, scale);

    QCOMPARE(pieces.loss, whole.loss);
    QVERIFY(same_bits(pieces.first_output, whole.first_output));
    QVERIFY(same_bits(pieces.output, whole.output));
    QVERIFY(same_bits(pieces.gradients, whole.gradients));
}

FULCRUM_MPI_TEST_MAIN(ParallelTpCpTest)
#include "test_parallel_tp_cp.moc"
