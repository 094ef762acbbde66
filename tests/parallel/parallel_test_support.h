// Shared by the parallel-engine suites (picotron's rule: every parallel dimension against the
// serial model): an MPI-aware Qt Test main, the tiny model and micro-batch they all use, the
// serial reference run, and the comparison of gradients tensor by tensor.
//
// Every rank runs every test function. A QVERIFY that fails returns from the function on that
// rank only, so each test does all of its communication first and verifies afterwards: a
// failure must never leave the other ranks waiting in a collective.
//
// Tolerances. A parallel run computes the same sums as the serial one in another order: TP
// splits the C-long dot products of the row-parallel GEMMs into tp partial sums added by the
// all-reduce, and sums the input gradients of the column-parallel GEMMs the same way; CP sums
// a K/V row's gradient over the ranks whose queries used it (reduce-scatter), and each
// parameter gradient's sum over tokens splits into per-rank sums (added by the test's all-
// reduce, as the trainer will). GEMMs over fewer rows may also block their reductions
// differently. Reordering an fp32 sum of K terms moves it by about √K·u·Σ|terms| (u = 6e-8);
// with K ≤ 128 here that is ~1e-6 relative to the terms, and through two blocks we measure
// at most a few 1e-7 norm-wise relative error per tensor (printed by rank 0). We bound it at
// 1e-5, the bound the serial engine's tests use, while a wiring error (a wrong row, head,
// rank or a missing or doubled sum) is O(1). Element-wise we also require
// |a − b| ≤ 1e-4 · max|b| over the tensor, so one wrong element cannot hide in a big norm.
#pragma once

#include <QtTest/qtestassert.h>
#include <QTest>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/balance/cp_shard.h"
#include "core/balance/packing.h"
#include "core/util/random.h"
#include "engine/backend/cpu_backend.h"
#include "engine/comm/mpi_communicator.h"
#include "engine/distributed/topology.h"
#include "engine/model/context_parallel.h"
#include "engine/model/gpt.h"
#include "engine/model/tensor_parallel.h"

Q_DECLARE_METATYPE(fulcrum::balance::CpSharding)

namespace fulcrum::engine::test {

inline Communicator*& world_slot() {
    static Communicator* world = nullptr;
    return world;
}
inline Communicator& world() {
    return *world_slot();
}
inline bool is_root() {
    return world().rank() == 0;
}

// L2 C32 H4: small enough for 4 ranks on 2 cores, with 8-wide heads so TP=2 splits 2+2.
// The CP shardings every CP suite runs, as data rows of a column "sharding" (adaptive picks
// one of these per micro-batch, so it adds no code path here).
inline void add_sharding_rows() {
    QTest::addColumn<balance::CpSharding>("sharding");
    QTest::newRow("contiguous") << balance::CpSharding::contiguous;
    QTest::newRow("zigzag") << balance::CpSharding::zigzag;
    QTest::newRow("per-doc") << balance::CpSharding::per_document;
}

inline ModelShape tiny_config() {
    ModelShape c;
    c.layers = 2;
    c.hidden = 32;
    c.heads = 4;
    c.context = 32;
    return c;
}

// Real text (the GPL's preamble), cut into documents of different lengths: most are not
// multiples of 2·CP = 4, 1 and 3 are shorter than 2·CP (per-doc sharding leaves some ranks
// without a piece of them), a length-1 document has no target at all, and the 101 tokens
// make contiguous and zigzag cuts fall inside documents.
inline const std::vector<std::string>& document_texts() {
    static const std::vector<std::string> texts = [] {
        const std::string_view text =
            "The GNU General Public License is a free, copyleft license for software and other "
            "kinds of works. The licenses for most software and other practical works are "
            "designed to take away your freedom to share and change the works.";
        std::vector<std::string> out;
        std::size_t at = 0;
        for (std::size_t length : {13, 1, 7, 22, 5, 3, 19, 31}) {
            out.emplace_back(text.substr(at, length));
            at += length;
        }
        return out;
    }();
    return texts;
}

inline std::vector<std::string_view> document_views() {
    return {document_texts().begin(), document_texts().end()};
}

// Ids deliberately not 0, 1, 2 …: the plan names documents by id, the texts by position.
inline std::vector<balance::Document> document_list() {
    std::vector<balance::Document> docs;
    std::uint64_t id = 100;
    for (const std::string& text : document_texts())
        docs.push_back({id += 7, std::int64_t(text.size())});
    return docs;
}

inline TokenBatch full_micro_batch() {
    const std::vector<std::string_view> views = document_views();
    return micro_batch_of(views);
}

// Far from GPT-2's N(0, 0.02) start so that attention is far from uniform and every path
// carries a gradient well above rounding (as in test_engine_model).
inline std::vector<float> lively_parameters(const ModelShape& config, std::uint64_t seed) {
    const ParameterLayout layout(config);
    std::vector<float> params(std::size_t(layout.total()));
    Random random(seed);
    for (const ParameterTensor& t : layout.tensors()) {
        const bool gain = t.init == InitKind::ones;
        for (std::int64_t i = 0; i < t.numel(); ++i)
            params[std::size_t(t.offset + i)] = float((gain ? 1.0 : 0.0) + 0.3 * random.normal());
    }
    return params;
}

struct SerialRun {
    double loss = 0;  // Σ ℓ
    std::int64_t targets = 0;
    std::vector<float> gradients;  // of the mean loss
    std::vector<float> output;     // the residual stream entering the head [T, C]
};

inline SerialRun run_serial(Backend& backend, const ModelShape& config,
                            const std::vector<float>& params, const TokenBatch& batch) {
    GptModel model(backend, config);
    model.set_parameters(params);
    Activations acts(backend, config);
    SerialRun run;
    run.targets = batch.target_count();
    model.zero_gradients();
    run.loss = model.forward(batch, acts);
    model.backward(acts, float(1.0 / double(run.targets)));
    run.gradients = model.gradients_to_host();
    const Tensor out = acts.block_input(config.layers);
    run.output.resize(std::size_t(out.numel()));
    backend.download(run.output.data(), out, kComputeStream);
    return run;
}

// The worst tensor of a comparison against the serial reference.
struct Comparison {
    double worst_relative = 0;  // ‖a − b‖ / ‖b‖
    std::string worst_relative_name;
    double worst_elementwise = 0;  // max |a − b| / max |b|
    std::string worst_elementwise_name;
};

inline void compare_range(Comparison& c, const std::string& name, const float* a, const float* b,
                          std::int64_t n) {
    double diff = 0, ref = 0, max_diff = 0, max_ref = 0;
    for (std::int64_t i = 0; i < n; ++i) {
        const double d = double(a[i]) - double(b[i]);
        diff += d * d;
        ref += double(b[i]) * b[i];
        max_diff = std::max(max_diff, std::abs(d));
        max_ref = std::max(max_ref, std::abs(double(b[i])));
    }
    const double relative = std::sqrt(diff) / std::max(std::sqrt(ref), 1e-30);
    const double elementwise = max_diff / std::max(max_ref, 1e-30);
    if (relative >= c.worst_relative) {
        c.worst_relative = relative;
        c.worst_relative_name = name;
    }
    if (elementwise >= c.worst_elementwise) {
        c.worst_elementwise = elementwise;
        c.worst_elementwise_name = name;
    }
}

// Per tensor of the serial layout.
inline Comparison compare_parameters(const ModelShape& config, const std::vector<float>& got,
                                     const std::vector<float>& reference) {
    Comparison c;
    const ParameterLayout layout(config);
    if (got.size() != reference.size() || std::int64_t(got.size()) != layout.total()) {
        c.worst_relative = c.worst_elementwise = INFINITY;
        c.worst_relative_name = c.worst_elementwise_name = "sizes differ";
        return c;
    }
    for (const ParameterTensor& t : layout.tensors())
        compare_range(c, t.name, got.data() + t.offset, reference.data() + t.offset, t.numel());
    return c;
}

inline constexpr double kRelativeTolerance = 1e-5;
inline constexpr double kElementTolerance = 1e-4;

#define FULCRUM_VERIFY_COMPARISON(comparison, what)                                            \
    do {                                                                                       \
        const auto& fulcrum_c = (comparison);                                                  \
        QVERIFY2(fulcrum_c.worst_relative <= ::fulcrum::engine::test::kRelativeTolerance,      \
                 qPrintable(QStringLiteral("%1: %2 relative error %3")                         \
                                .arg(what)                                                     \
                                .arg(QString::fromStdString(fulcrum_c.worst_relative_name))    \
                                .arg(fulcrum_c.worst_relative, 0, 'g', 3)));                   \
        QVERIFY2(fulcrum_c.worst_elementwise <= ::fulcrum::engine::test::kElementTolerance,    \
                 qPrintable(QStringLiteral("%1: %2 element error %3 of max")                   \
                                .arg(what)                                                     \
                                .arg(QString::fromStdString(fulcrum_c.worst_elementwise_name)) \
                                .arg(fulcrum_c.worst_elementwise, 0, 'g', 3)));                \
    } while (false)

inline void report(const QString& what, const Comparison& c) {
    if (is_root()) {
        qInfo().noquote() << QStringLiteral("%1: worst relative %2 (%3), worst element %4 (%5)")
                                 .arg(what)
                                 .arg(c.worst_relative, 0, 'g', 2)
                                 .arg(QString::fromStdString(c.worst_relative_name))
                                 .arg(c.worst_elementwise, 0, 'g', 2)
                                 .arg(QString::fromStdString(c.worst_elementwise_name));
    }
}

inline double sum_over(Communicator* comm, double value) {
    if (comm != nullptr)
        comm->all_reduce_sum(std::span<double>(&value, 1));
    return value;
}

// The TP and CP communicators of `shape` over the world, through Topology (the engine's one
// place for the grid).
struct TpCpGroups {
    Topology topology;
    std::unique_ptr<Communicator> tp, cp;
};

inline TpCpGroups make_tp_cp_groups(GridShape shape) {
    Result<Topology> topology = Topology::create(shape, world().size(), world().rank());
    QTEST_ASSERT(topology.ok());
    const GridCoordinates me = topology->coordinates();
    auto tp = world().split(topology->tp_group().front(), me.tp, "tp");
    auto cp = world().split(topology->cp_group().front(), me.cp, "cp");
    return TpCpGroups{std::move(*topology), std::move(tp), std::move(cp)};
}

// A Qt Test main under MPI: MPI lives for the whole run, every rank runs the suite, ranks
// other than 0 print only failures, and all ranks exit with the same status.
template <typename Suite>
int run_mpi_suite(int argc, char** argv) {
    MpiSession session(&argc, &argv);
    int status = 0;
    {
        std::unique_ptr<MpiCommunicator> world_comm = MpiCommunicator::world();
        world_slot() = world_comm.get();
        QCoreApplication app(argc, argv);
        QStringList arguments = app.arguments();
        if (world_comm->rank() != 0)
            arguments << QStringLiteral("-silent");
        Suite suite;
        double failed = QTest::qExec(&suite, arguments) != 0 ? 1 : 0;
        world_comm->all_reduce_sum(std::span<double>(&failed, 1));
        status = failed > 0 ? 1 : 0;
        world_slot() = nullptr;
    }
    return status;
}

}  // namespace fulcrum::engine::test

#define FULCRUM_MPI_TEST_MAIN(Suite)                                      \
    int main(int argc, char** argv) {                                     \
        return ::fulcrum::engine::test::run_mpi_suite<Suite>(argc, argv); \
    }
