// Context parallelism against the serial model, on 2 ranks (mpirun -np 2): the local
// micro-batch a CP rank builds from a balance::CpPlan, and one forward and backward pass under
// each sharding — the summed loss, the summed gradients, and every local row of the residual
// stream against the serial row of the same token.
#include <QtTest/qtestassert.h>
#include <QTest>

#include <set>

#include "parallel_test_support.h"

using namespace fulcrum::engine;
using namespace fulcrum::engine::test;
namespace balance = fulcrum::balance;
namespace parallel = fulcrum::parallel;
using fulcrum::Result;

Q_DECLARE_METATYPE(fulcrum::parallel::ContextParallelism)
Q_DECLARE_METATYPE(fulcrum::parallel::Recompute)

namespace {

balance::CpPlan plan_for(balance::CpSharding sharding, int cp_size) {
    const std::vector<balance::Document> docs = document_list();
    balance::CpShardingState state;
    Result<balance::CpPlan> plan = balance::shard_microbatch(docs, cp_size, sharding, state);
    QTEST_ASSERT(plan.ok());
    return std::move(plan).value();
}

ContextShard shard_for(const balance::CpPlan& plan, int cp_rank) {
    const std::vector<std::string_view> texts = document_views();
    const std::vector<balance::Document> docs = document_list();
    Result<ContextShard> shard = make_context_shard(texts, docs, plan, cp_rank);
    QTEST_ASSERT(shard.ok());
    return std::move(shard).value();
}

// Where each document starts in the packed (serial) micro-batch.
std::vector<std::int64_t> document_starts() {
    std::vector<std::int64_t> starts;
    std::int64_t at = 0;
    for (const std::string& text : document_texts()) {
        starts.push_back(at);
        at += std::int64_t(text.size());
    }
    return starts;
}

// The document row of each of this rank's local rows, from the exchange's runs.
std::vector<std::int64_t> local_document_rows(const ContextExchange& exchange, int cp_rank) {
    std::int64_t start = 0;
    for (int r = 0; r < cp_rank; ++r)
        start += exchange.rows_per_rank[std::size_t(r)];
    const std::int64_t n = exchange.rows_per_rank[std::size_t(cp_rank)];
    std::vector<std::int64_t> document_row(std::size_t(n), -1);
    for (const RowRun& run : exchange.runs)
        for (std::int64_t i = 0; i < run.count; ++i)
            if (run.gathered_row + i - start >= 0 && run.gathered_row + i - start < n)
                document_row[std::size_t(run.gathered_row + i - start)] = run.document_row + i;
    return document_row;
}

// A value that names its own document row, column and block.
float named_value(std::int64_t row, std::int64_t column, int block) {
    return float(1000 * row + 10 * column + block);
}

// A rank's shard under `sharding` and its local rows [n, 4] named by named_value (block 0).
struct NamedRows {
    static constexpr std::int64_t h = 4;
    ContextShard shard;
    std::vector<std::int64_t> document_row;
    std::vector<float> host;
    NamedRows(balance::CpSharding sharding, int cp_rank)
        : shard(shard_for(plan_for(sharding, 2), cp_rank)),
          document_row(local_document_rows(shard.exchange, cp_rank)),
          host(std::size_t(shard.size() * h)) {
        for (std::int64_t r = 0; r < shard.size(); ++r)
            for (std::int64_t c = 0; c < h; ++c)
                host[std::size_t(r * h + c)] = named_value(document_row[std::size_t(r)], c, 0);
    }
};

}  // namespace

class ParallelCpTest : public QObject {
    Q_OBJECT

private slots:
    void contextShardRows_data();
    void contextShardRows();
    void contextShardRejectsBadPlans();
    void contextPathOnOneRankEqualsSerial_data();
    void contextPathOnOneRankEqualsSerial();
    void matchesSerial_data();
    void matchesSerial();
    void ulyssesExchangeRoundTrips();
    void ulyssesExchangeByChunks();
    void ulyssesExchangesInFlight();

private:
    CpuBackend backend_{1};
};

void ParallelCpTest::contextShardRows_data() {
    add_sharding_rows();
}

// Host-only: every rank builds both ranks' shards and checks them against the serial batch.
void ParallelCpTest::contextShardRows() {
    QFETCH(balance::CpSharding, sharding);
    constexpr int kCp = 2;
    const balance::CpPlan plan = plan_for(sharding, kCp);
    const TokenBatch serial = full_micro_batch();
    const std::vector<std::int32_t> serial_positions = serial.positions();
    const std::vector<std::int64_t> starts = document_starts();

    std::vector<int> owner(std::size_t(serial.size()), -1);
    std::int64_t targets = 0;
    ContextExchange first_exchange;
    bool crosses_ranks = false;
    for (int rank = 0; rank < kCp; ++rank) {
        const ContextShard shard = shard_for(plan, rank);
        if (rank == 0)
            first_exchange = shard.exchange;
        // The exchange is the same on every rank.
        QVERIFY(shard.exchange.rows_per_rank == first_exchange.rows_per_rank);
        QVERIFY(shard.exchange.runs == first_exchange.runs);
        QCOMPARE(std::int64_t(shard.exchange.rows_per_rank[std::size_t(rank)]), shard.size());
        QVERIFY(validate(shard, tiny_config()).ok());
        targets += shard.target_count();
        // Every local row is the serial row kv_begin + prefix + i: same token, target and
        // position, even when the target token is another rank's.
        std::int64_t row = 0;
        for (const AttentionSpan& span : shard.spans) {
            QCOMPARE(std::int64_t(span.q_begin), row);
            QVERIFY(std::find(starts.begin(), starts.end(), span.kv_begin) != starts.end());
            for (std::int32_t i = 0; i < span.length; ++i, ++row) {
                const std::size_t s = std::size_t(span.kv_begin + span.prefix + i);
                QCOMPARE(shard.tokens[std::size_t(row)], serial.tokens[s]);
                QCOMPARE(shard.targets[std::size_t(row)], serial.targets[s]);
                QCOMPARE(shard.positions[std::size_t(row)], serial_positions[s]);
                QCOMPARE(owner[s], -1);
                owner[s] = rank;
            }
        }
        QCOMPARE(row, shard.size());
    }
    QVERIFY(std::find(owner.begin(), owner.end(), -1) == owner.end());
    QCOMPARE(targets, serial.target_count());
    for (std::size_t s = 0; s + 1 < owner.size(); ++s) {
        if (serial.targets[s] != -1 && owner[s] != owner[s + 1])
            crosses_ranks = true;
    }
    QVERIFY2(crosses_ranks, "no target lies on another rank: the test data is too easy");
    // The runs map rank-major gathered rows one-to-one onto document rows.
    std::set<std::int64_t> gathered, document;
    for (const RowRun& run : first_exchange.runs) {
        for (std::int64_t i = 0; i < run.count; ++i) {
            QVERIFY(gathered.insert(run.gathered_row + i).second);
            QVERIFY(document.insert(run.document_row + i).second);
            QCOMPARE(owner[std::size_t(run.document_row + i)],
                     run.gathered_row + i < first_exchange.rows_per_rank[0] ? 0 : 1);
        }
    }
    QCOMPARE(std::int64_t(gathered.size()), serial.size());
    QCOMPARE(*document.rbegin(), serial.size() - 1);
}

void ParallelCpTest::contextShardRejectsBadPlans() {
    const std::vector<std::string_view> texts = document_views();
    const std::vector<balance::Document> docs = document_list();
    const balance::CpPlan good = plan_for(balance::CpSharding::per_document, 2);
    auto fails = [&](const balance::CpPlan& plan, std::span<const balance::Document> documents) {
        const Result<ContextShard> shard = make_context_shard(texts, documents, plan, 0);
        return !shard.ok() && shard.error().code == fulcrum::ErrorCode::invalid_input;
    };
    QVERIFY(!fails(good, docs));

    balance::CpPlan missing = good;  // a token in no range
    missing.ranks[1].ranges.back().end -= 1;
    QVERIFY(fails(missing, docs));
    balance::CpPlan twice = good;  // a token in two ranges
    twice.ranks[0].ranges.push_back(good.ranks[1].ranges.front());
    QVERIFY(fails(twice, docs));
    balance::CpPlan unknown = good;
    unknown.ranks[0].ranges.front().document_id = 3;
    QVERIFY(fails(unknown, docs));
    std::vector<balance::Document> wrong_length = docs;
    wrong_length[2].length += 1;
    QVERIFY(fails(good, wrong_length));
    QVERIFY(!make_context_shard(texts, docs, good, 2).ok());  // no such rank

    // One token over two ranks: one of them would have nothing to compute.
    const std::vector<std::string_view> one_text = {"x"};
    const std::vector<balance::Document> one_doc = {{1, 1}};
    balance::CpShardingState state;
    const Result<balance::CpPlan> tiny =
        balance::shard_microbatch(one_doc, 2, balance::CpSharding::contiguous, state);
    QVERIFY(tiny.ok());
    QCOMPARE(int(make_context_shard(one_text, one_doc, *tiny, 0).ok()) +
                 int(make_context_shard(one_text, one_doc, *tiny, 1).ok()),
             1);
}

void ParallelCpTest::contextPathOnOneRankEqualsSerial_data() {
    QTest::addColumn<parallel::ContextParallelism>("implementation");
    QTest::newRow("all-gather") << parallel::ContextParallelism::all_gather;
    QTest::newRow("ulysses") << parallel::ContextParallelism::ulysses;
}

// The CP code path (split Q and K|V GEMMs, exchange, document-ordered K/V; or Ulysses' head
// shard and its attention over document spans) without any communication: a plan of one rank
// on a model without a CP communicator.
void ParallelCpTest::contextPathOnOneRankEqualsSerial() {
    QFETCH(parallel::ContextParallelism, implementation);
    const ModelShape config = tiny_config();
    const std::vector<float> params = lively_parameters(config, 5);
    const SerialRun serial = run_serial(backend_, config, params, full_micro_batch());
    const ContextShard shard = shard_for(plan_for(balance::CpSharding::contiguous, 1), 0);
    GptModel model(backend_, config, ModelParallel{nullptr, nullptr, implementation});
    model.set_parameters(params);
    Activations acts(model);
    model.zero_gradients();
    const double loss = model.forward(shard, acts);
    QVERIFY(acts.context_parallel());
    model.backward(acts, float(1.0 / double(serial.targets)));
    QVERIFY(std::abs(loss - serial.loss) <= kRelativeTolerance * serial.loss);
    FULCRUM_VERIFY_COMPARISON(
        compare_parameters(config, model.gradients_to_host(), serial.gradients), "CP=1");
}

void ParallelCpTest::matchesSerial_data() {
    QTest::addColumn<balance::CpSharding>("sharding");
    QTest::addColumn<parallel::ContextParallelism>("implementation");
    QTest::addColumn<Recompute>("recompute");
    using CP = parallel::ContextParallelism;
    const std::pair<const char*, balance::CpSharding> shardings[] = {
        {"contiguous", balance::CpSharding::contiguous},
        {"zigzag", balance::CpSharding::zigzag},
        {"per-doc", balance::CpSharding::per_document}};
    for (const auto& [name, sharding] : shardings) {
        QTest::newRow(name) << sharding << CP::all_gather << Recompute::none;
        QTest::newRow((std::string("ulysses ") + name).c_str())
            << sharding << CP::ulysses << Recompute::none;
    }
    // Ulysses' attention recomputed from the kept head shard (its all-to-all back again), and
    // the whole block recomputed (both all-to-alls again).
    QTest::newRow("ulysses zigzag selective")
        << balance::CpSharding::zigzag << CP::ulysses << Recompute::selective;
    QTest::newRow("ulysses per-doc full")
        << balance::CpSharding::per_document << CP::ulysses << Recompute::full;
}

// One forward and backward pass with CP = 2. As the trainer will, the test adds the local
// losses and all-reduces the gradients over CP; the loss scale is 1/N of the whole
// micro-batch's targets. Communication first, checks after.
void ParallelCpTest::matchesSerial() {
    QFETCH(balance::CpSharding, sharding);
    QFETCH(parallel::ContextParallelism, implementation);
    QFETCH(Recompute, recompute);
    if (world().size() != 2)
        QSKIP("needs mpirun -np 2");
    Communicator& cp = world();
    const ModelShape config = tiny_config();
    const std::vector<float> params = lively_parameters(config, 5);
    const SerialRun serial = run_serial(backend_, config, params, full_micro_batch());
    const ContextShard shard = shard_for(plan_for(sharding, cp.size()), cp.rank());

    GptModel model(backend_, config, ModelParallel{nullptr, &cp, implementation});
    model.set_recompute(recompute);
    model.set_parameters(params);
    Activations acts(model);
    model.zero_gradients();
    const double local_loss = model.forward(shard, acts);
    model.backward(acts, float(1.0 / double(serial.targets)));
    const double loss = sum_over(&cp, local_loss);
    const double targets = sum_over(&cp, double(shard.target_count()));
    std::vector<float> grads = model.gradients_to_host();
    cp.all_reduce_sum(std::span<float>(grads));
    std::vector<float> output(std::size_t(acts.block_input(config.layers).numel()));
    backend_.download(output.data(), acts.block_input(config.layers), kComputeStream);

    QCOMPARE(targets, double(serial.targets));
    QVERIFY2(std::abs(loss - serial.loss) <= kRelativeTolerance * serial.loss,
             qPrintable(QStringLiteral("loss %1 vs serial %2").arg(loss).arg(serial.loss)));
    const Comparison gradients = compare_parameters(config, grads, serial.gradients);
    report(QStringLiteral("CP=2 %1 gradients").arg(QTest::currentDataTag()), gradients);
    FULCRUM_VERIFY_COMPARISON(gradients, "CP=2 gradients");
    // Local row i of span s is serial row kv_begin + prefix + i.
    std::vector<float> expected;
    const std::int64_t c = config.hidden;
    for (const AttentionSpan& span : shard.spans) {
        const auto begin = serial.output.begin() + (span.kv_begin + span.prefix) * c;
        expected.insert(expected.end(), begin, begin + span.length * c);
    }
    Comparison rows;
    compare_range(rows, "head input", output.data(), expected.data(), std::int64_t(output.size()));
    FULCRUM_VERIFY_COMPARISON(rows, "CP=2 residual stream rows");
}

// Ulysses' two exchanges are inverses: token shards to head shards and back give the same
// columns, and each rank's head shard holds every token's columns of its heads, in document
// order (checked against values that name their own row and column).
void ParallelCpTest::ulyssesExchangeRoundTrips() {
    if (world().size() != 2)
        QSKIP("needs mpirun -np 2");
    Communicator& cp = world();
    const ContextShard shard = shard_for(plan_for(balance::CpSharding::zigzag, 2), cp.rank());
    const ContextExchange& exchange = shard.exchange;
    const std::int64_t n = shard.size(), total = exchange.total_rows(), h = 6, w = h / 2;
    // The local block b's element (row, column) is 1000·(document row) + 10·column + b.
    const std::vector<std::int64_t> document_row = local_document_rows(exchange, cp.rank());
    const auto value = named_value;
    const std::int64_t staging = heads_staging_elements(exchange, cp.rank(), 2 * w);
    DeviceBuffer storage =
        backend_.allocate(std::size_t(4 * n * h + 2 * total * w + staging) * sizeof(float));
    const Tensor local = storage.f32(0, {n, 2 * h});  // two blocks side by side: strided views
    const Tensor back = storage.f32(2 * n * h, {n, 2 * h});
    const Tensor heads = storage.f32(4 * n * h, {total, 2 * w});
    const Tensor scratch = storage.f32(4 * n * h + 2 * total * w, {staging});
    std::vector<float> host(std::size_t(2 * n * h));
    for (std::int64_t r = 0; r < n; ++r)
        for (int b = 0; b < 2; ++b)
            for (std::int64_t c = 0; c < h; ++c)
                host[std::size_t(r * 2 * h + b * h + c)] =
                    value(document_row[std::size_t(r)], c, b);
    backend_.upload(local, host.data(), kComputeStream);
    const Tensor blocks[] = {local.columns(0, h), local.columns(h, h)};
    const Tensor head_blocks[] = {heads.columns(0, w), heads.columns(w, w)};
    scatter_heads(backend_, &cp, exchange, blocks, scratch, head_blocks);
    const Tensor returned[] = {back.columns(0, h), back.columns(h, h)};
    gather_heads(backend_, &cp, exchange, head_blocks, scratch, returned);

    std::vector<float> shard_values(std::size_t(total * 2 * w)), round_trip(host.size());
    backend_.download(shard_values.data(), heads, kComputeStream);
    backend_.download(round_trip.data(), back, kComputeStream);
    for (std::int64_t r = 0; r < total; ++r)
        for (int b = 0; b < 2; ++b)
            for (std::int64_t c = 0; c < w; ++c)
                QCOMPARE(shard_values[std::size_t(r * 2 * w + b * w + c)],
                         value(r, cp.rank() * w + c, b));
    QCOMPARE(round_trip, host);
}

// FPDT's all-to-all a chunk at a time (exchange_window): under every sharding, each window of
// document rows is one run of each rank's local rows, the windows of a tiling cover every
// local row once, and scattering window after window builds the same head shard as the whole
// exchange does.
void ParallelCpTest::ulyssesExchangeByChunks() {
    if (world().size() != 2)
        QSKIP("needs mpirun -np 2");
    Communicator& cp = world();
    for (balance::CpSharding sharding :
         {balance::CpSharding::contiguous, balance::CpSharding::zigzag,
          balance::CpSharding::per_document}) {
        const NamedRows rows(sharding, cp.rank());
        const ContextExchange& exchange = rows.shard.exchange;
        const std::int64_t n = rows.shard.size(), total = exchange.total_rows(), h = rows.h,
                           w = h / 2;
        const std::vector<std::int64_t>& document_row = rows.document_row;
        const std::vector<float>& host = rows.host;
        QVERIFY(!exchange_window(exchange, total - 3, 4).ok());  // past the micro-batch
        QVERIFY(!exchange_window(exchange, -1, 2).ok());
        for (std::int64_t chunk : {std::int64_t(5), std::int64_t(16), total}) {
            const std::int64_t staging = heads_staging_elements(exchange, cp.rank(), w);
            DeviceBuffer storage =
                backend_.allocate(std::size_t(n * h + total * w + staging) * sizeof(float));
            const Tensor local = storage.f32(0, {n, h});
            const Tensor heads = storage.f32(n * h, {total, w});
            const Tensor scratch = storage.f32(n * h + total * w, {staging});
            backend_.upload(local, host.data(), kComputeStream);
            std::vector<int> seen(std::size_t(n), 0);
            for (std::int64_t first = 0; first < total; first += chunk) {
                const std::int64_t rows = std::min(chunk, total - first);
                const Result<ExchangeWindow> window = exchange_window(exchange, first, rows);
                QVERIFY(window.ok());
                QCOMPARE(window->exchange.total_rows(), rows);
                const auto me = std::size_t(cp.rank());
                const std::int64_t begin = window->local_first[me];
                const std::int64_t count = window->exchange.rows_per_rank[me];
                for (std::int64_t r = begin; r < begin + count; ++r) {
                    ++seen[std::size_t(r)];
                    QVERIFY(document_row[std::size_t(r)] >= first &&
                            document_row[std::size_t(r)] < first + rows);
                }
                const Tensor from[] = {local.slice(begin, count)};
                const Tensor to[] = {heads.slice(first, rows)};
                scatter_heads(backend_, &cp, window->exchange, from, scratch, to);
            }
            QCOMPARE(seen, std::vector<int>(std::size_t(n), 1));
            std::vector<float> shard_values(std::size_t(total * w));
            backend_.download(shard_values.data(), heads, kComputeStream);
            for (std::int64_t r = 0; r < total; ++r)
                for (std::int64_t c = 0; c < w; ++c)
                    QCOMPARE(shard_values[std::size_t(r * w + c)],
                             named_value(r, cp.rank() * w + c, 0));
        }
    }
}

// FPDT's exchanges left in flight (start_scatter_heads, start_gather_heads): every window's
// all-to-all started before any is finished, each in its own staging, and finished last to
// first. The head shard and the round trip back to the rows come out as the blocking exchange
// makes them. Per-document sharding with small windows gives windows a rank sends nothing to
// or receives nothing from (a send half that starts where the receive half does: Open MPI's
// non-blocking all-to-all took that for MPI_IN_PLACE and hung).
void ParallelCpTest::ulyssesExchangesInFlight() {
    if (world().size() != 2)
        QSKIP("needs mpirun -np 2");
    Communicator& cp = world();
    for (balance::CpSharding sharding :
         {balance::CpSharding::contiguous, balance::CpSharding::zigzag,
          balance::CpSharding::per_document}) {
        const NamedRows rows(sharding, cp.rank());
        const ContextExchange& exchange = rows.shard.exchange;
        const std::int64_t n = rows.shard.size(), total = exchange.total_rows(), h = rows.h,
                           w = h / 2;
        const std::vector<std::int64_t>& document_row = rows.document_row;
        const std::vector<float>& host = rows.host;
        for (std::int64_t chunk : {std::int64_t(3), std::int64_t(16), total}) {
            std::vector<ExchangeWindow> windows;
            std::vector<std::int64_t> firsts, offsets{0};
            for (std::int64_t first = 0; first < total; first += chunk) {
                Result<ExchangeWindow> window =
                    exchange_window(exchange, first, std::min(chunk, total - first));
                QVERIFY(window.ok());
                offsets.push_back(offsets.back() +
                                  heads_staging_elements(window->exchange, cp.rank(), w));
                firsts.push_back(first);
                windows.push_back(std::move(window).value());
            }
            DeviceBuffer storage = backend_.allocate(
                std::size_t(2 * n * h + total * w + offsets.back()) * sizeof(float));
            const Tensor local = storage.f32(0, {n, h});
            const Tensor back = storage.f32(n * h, {n, h});
            const Tensor heads = storage.f32(2 * n * h, {total, w});
            const std::int64_t staging = 2 * n * h + total * w;
            backend_.upload(local, host.data(), kComputeStream);
            const auto me = std::size_t(cp.rank());
            const auto rows_of = [&](std::size_t i, const Tensor& t) {
                return t.slice(windows[i].local_first[me], windows[i].exchange.rows_per_rank[me]);
            };
            const auto region = [&](std::size_t i) {
                return storage.f32(staging + offsets[i], {offsets[i + 1] - offsets[i]});
            };
            std::vector<PendingHeadsExchange> pending;
            for (std::size_t i = 0; i < windows.size(); ++i) {
                const Tensor from[] = {rows_of(i, local)};
                pending.push_back(
                    start_scatter_heads(backend_, &cp, windows[i].exchange, from, region(i)));
            }
            for (std::size_t i = windows.size(); i-- > 0;) {
                const Tensor to[] = {heads.slice(firsts[i], windows[i].exchange.total_rows())};
                finish_heads_exchange(backend_, pending[i], to);
                QVERIFY(!pending[i].started);
            }
            std::vector<float> shard_values(std::size_t(total * w));
            backend_.download(shard_values.data(), heads, kComputeStream);
            for (std::int64_t r = 0; r < total; ++r)
                for (std::int64_t c = 0; c < w; ++c)
                    QCOMPARE(shard_values[std::size_t(r * w + c)],
                             named_value(r, cp.rank() * w + c, 0));
            pending.clear();
            for (std::size_t i = 0; i < windows.size(); ++i) {
                const Tensor from[] = {heads.slice(firsts[i], windows[i].exchange.total_rows())};
                pending.push_back(
                    start_gather_heads(backend_, &cp, windows[i].exchange, from, region(i)));
            }
            for (std::size_t i = windows.size(); i-- > 0;) {
                const Tensor to[] = {rows_of(i, back)};
                finish_heads_exchange(backend_, pending[i], to);
            }
            std::vector<float> round_trip(host.size());
            backend_.download(round_trip.data(), back, kComputeStream);
            QCOMPARE(round_trip, host);
        }
    }
}

FULCRUM_MPI_TEST_MAIN(ParallelCpTest)
#include "test_parallel_cp.moc"
