// Each layer's backward pass against finite differences of its forward pass (in double), and
// the CPU backend's fp32 forward and backward against the same layer in double.
// gradient_check.h explains both tolerances.
#include <QtTest>

#include "engine/backend/cpu_backend.h"
#include "engine/model/attention.h"
#include "engine/model/chunked_attention.h"
#include "engine/model/embedding.h"
#include "engine/model/layernorm.h"
#include "engine/model/lm_head.h"
#include "engine/model/matmul.h"
#include "engine/model/micro_batch.h"
#include "engine/model/mlp.h"
#include "gradient_check.h"

using namespace fulcrum::engine;
using namespace fulcrum::engine::test;

Q_DECLARE_METATYPE(std::vector<std::int32_t>)

namespace {

// fp32 kernels against double: layers whose outputs are sums of a few to a few hundred
// products of O(1) values, so √K·u ≲ 1e-6 is the expected error (we measure ≤ 1.5e-7) and
// 2e-5 the bound; a wrong index or formula shows up as an O(1) relative error.
constexpr double kFp32Tolerance = 2e-5;

std::vector<std::int32_t> positions_of(const std::vector<std::int32_t>& doc_lengths) {
    MicroBatch b;
    b.doc_lengths = doc_lengths;
    return b.positions();
}

std::vector<AttentionSpan> spans_of(const std::vector<std::int32_t>& doc_lengths) {
    MicroBatch b;
    b.doc_lengths = doc_lengths;
    return b.attention_spans();
}

// Attention over a fused [T, 3C] buffer, as the model calls it, in double.
struct AttentionCase {
    int n_head, head_size;
    std::vector<AttentionSpan> spans;
    std::int64_t tokens;
    std::int64_t channels() const { return std::int64_t(n_head) * head_size; }

    void forward(const std::vector<double>& qkv, std::vector<double>& out,
                 std::vector<double>& lse) const {
        const std::int64_t c = channels();
        out.assign(std::size_t(tokens * c), 0.0);
        lse.assign(std::size_t(tokens * n_head), 0.0);
        kernels::attention_forward<double>({out.data(), c}, lse.data(), {qkv.data(), 3 * c},
                                           {qkv.data() + c, 3 * c}, {qkv.data() + 2 * c, 3 * c},
                                           spans, n_head, head_size);
    }
    void backward(std::vector<double>& dqkv, const std::vector<double>& dout,
                  const std::vector<double>& qkv, const std::vector<double>& out,
                  const std::vector<double>& lse) const {
        const std::int64_t c = channels();
        kernels::attention_backward<double>(
            {dqkv.data(), 3 * c}, {dqkv.data() + c, 3 * c}, {dqkv.data() + 2 * c, 3 * c},
            {dout.data(), c}, {qkv.data(), 3 * c}, {qkv.data() + c, 3 * c},
            {qkv.data() + 2 * c, 3 * c}, {out.data(), c}, lse.data(), spans, n_head, head_size);
    }
};

}  // namespace

class EngineLayersTest : public QObject {
    Q_OBJECT

private slots:
    void embedding();
    void layernorm();
    void attention_data();
    void attention();
    void attentionShardsMatchWholeDocument();
    void mlp();
    void lmHeadCrossEntropy();
    void backendKnowsItsAllocations();
    void chunkedAttentionMatchesWhole_data();
    void chunkedAttentionMatchesWhole();

private:
    CpuBackend backend_{1};
};

void EngineLayersTest::embedding() {
    const int vocab = 11, channels = 6, max_context = 8;
    const std::vector<std::int32_t> doc_lengths = {5, 4};
    // Repeated ids, so the scatter-add of the backward pass is exercised.
    const std::vector<std::int32_t> tokens = {3, 7, 3, 0, 10, 7, 7, 1, 3};
    const std::vector<std::int32_t> positions = positions_of(doc_lengths);
    const std::int64_t n = std::int64_t(tokens.size());
    std::vector<double> wte = random_values(vocab * channels, 1);
    std::vector<double> wpe = random_values(max_context * channels, 2);
    const std::vector<double> w = random_values(std::size_t(n * channels), 3);

    auto objective = [&] {
        std::vector<double> out(std::size_t(n * channels));
        kernels::embedding_forward(out.data(), tokens.data(), positions.data(), wte.data(),
                                   wpe.data(), n, channels);
        return dot(w, out);
    };
    std::vector<double> dwte(wte.size()), dwpe(wpe.size());
    kernels::embedding_backward(dwte.data(), dwpe.data(), w.data(), tokens.data(), positions.data(),
                                n, channels);
    FULCRUM_VERIFY_GRADIENT(check_gradient(wte, dwte, objective), "dwte");
    FULCRUM_VERIFY_GRADIENT(check_gradient(wpe, dwpe, objective), "dwpe");

    // fp32 through the backend.
    DeviceArray t = upload_i32(backend_, tokens), p = upload_i32(backend_, positions);
    DeviceArray wte32 = upload_f32(backend_, wte, {vocab, channels});
    DeviceArray wpe32 = upload_f32(backend_, wpe, {max_context, channels});
    DeviceArray out32 = zeros_f32(backend_, {n, channels});
    DeviceArray dout32 = upload_f32(backend_, w, {n, channels});
    DeviceArray dwte32 = zeros_f32(backend_, {vocab, channels});
    DeviceArray dwpe32 = zeros_f32(backend_, {max_context, channels});
    backend_.embedding_forward(out32.tensor, t.tensor, p.tensor, wte32.tensor, wpe32.tensor);
    backend_.embedding_backward(dwte32.tensor, dwpe32.tensor, dout32.tensor, t.tensor, p.tensor);
    std::vector<double> out(std::size_t(n * channels));
    kernels::embedding_forward(out.data(), tokens.data(), positions.data(), wte.data(), wpe.data(),
                               n, channels);
    FULCRUM_VERIFY_CLOSE(download_f64(backend_, out32.tensor), out, kFp32Tolerance, "out fp32");
    FULCRUM_VERIFY_CLOSE(download_f64(backend_, dwte32.tensor), dwte, kFp32Tolerance, "dwte fp32");
    FULCRUM_VERIFY_CLOSE(download_f64(backend_, dwpe32.tensor), dwpe, kFp32Tolerance, "dwpe fp32");
}

void EngineLayersTest::layernorm() {
    const int rows = 5, channels = 7;
    // Rows with a non-zero mean and unequal spread, as residual streams have.
    std::vector<double> inp = random_values(rows * channels, 10, 2.0, 0.5);
    std::vector<double> weight = random_values(channels, 11, 0.3, 1.0);
    std::vector<double> bias = random_values(channels, 12, 0.3);
    const std::vector<double> w = random_values(rows * channels, 13);

    auto forward = [&](std::vector<double>& out, std::vector<double>& mean,
                       std::vector<double>& rstd) {
        out.assign(inp.size(), 0);
        mean.assign(rows, 0);
        rstd.assign(rows, 0);
        kernels::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                                   bias.data(), rows, channels);
    };
    auto objective = [&] {
        std::vector<double> out, mean, rstd;
        forward(out, mean, rstd);
        return dot(w, out);
    };
    std::vector<double> out, mean, rstd;
    forward(out, mean, rstd);
    std::vector<double> dinp(inp.size()), dweight(channels), dbias(channels);
    kernels::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), w.data(), inp.data(),
                                weight.data(), mean.data(), rstd.data(), rows, channels);
    FULCRUM_VERIFY_GRADIENT(check_gradient(inp, dinp, objective), "dinp");
    FULCRUM_VERIFY_GRADIENT(check_gradient(weight, dweight, objective), "dweight");
    FULCRUM_VERIFY_GRADIENT(check_gradient(bias, dbias, objective), "dbias");

    DeviceArray inp32 = upload_f32(backend_, inp, {rows, channels});
    DeviceArray weight32 = upload_f32(backend_, weight, {channels});
    DeviceArray bias32 = upload_f32(backend_, bias, {channels});
    DeviceArray out32 = zeros_f32(backend_, {rows, channels});
    DeviceArray mean32 = zeros_f32(backend_, {rows}), rstd32 = zeros_f32(backend_, {rows});
    DeviceArray dout32 = upload_f32(backend_, w, {rows, channels});
    DeviceArray dinp32 = zeros_f32(backend_, {rows, channels});
    DeviceArray dweight32 = zeros_f32(backend_, {channels}),
                dbias32 = zeros_f32(backend_, {channels});
    backend_.layernorm_forward(out32.tensor, mean32.tensor, rstd32.tensor, inp32.tensor,
                               weight32.tensor, bias32.tensor);
    backend_.layernorm_backward(dinp32.tensor, dweight32.tensor, dbias32.tensor, dout32.tensor,
                                inp32.tensor, weight32.tensor, mean32.tensor, rstd32.tensor);
    FULCRUM_VERIFY_CLOSE(download_f64(backend_, out32.tensor), out, kFp32Tolerance, "out fp32");
    FULCRUM_VERIFY_CLOSE(download_f64(backend_, dinp32.tensor), dinp, kFp32Tolerance, "dinp fp32");
    FULCRUM_VERIFY_CLOSE(download_f64(backend_, dweight32.tensor), dweight, kFp32Tolerance,
                         "dweight fp32");
    FULCRUM_VERIFY_CLOSE(download_f64(backend_, dbias32.tensor), dbias, kFp32Tolerance,
                         "dbias fp32");
}

void EngineLayersTest::attention_data() {
    QTest::addColumn<std::vector<std::int32_t>>("doc_lengths");
    QTest::addColumn<int>("n_head");
    QTest::newRow("two documents") << std::vector<std::int32_t>{5, 3} << 2;
    QTest::newRow("three, one of a single token") << std::vector<std::int32_t>{4, 1, 6} << 2;
    QTest::newRow("one document, four heads") << std::vector<std::int32_t>{7} << 4;
}

void EngineLayersTest::attention() {
    QFETCH(std::vector<std::int32_t>, doc_lengths);
    QFETCH(int, n_head);
    AttentionCase ac{n_head, 3, spans_of(doc_lengths), 0};
    for (std::int32_t d : doc_lengths)
        ac.tokens += d;
    const std::int64_t t = ac.tokens, c = ac.channels();
    std::vector<double> qkv = random_values(std::size_t(t * 3 * c), 20);
    const std::vector<double> w = random_values(std::size_t(t * c), 21);

    auto objective = [&] {
        std::vector<double> out, lse;
        ac.forward(qkv, out, lse);
        return dot(w, out);
    };
    std::vector<double> out, lse;
    ac.forward(qkv, out, lse);
    std::vector<double> dqkv(qkv.size(), 0.0);
    ac.backward(dqkv, w, qkv, out, lse);
    FULCRUM_VERIFY_GRADIENT(check_gradient(qkv, dqkv, objective), "dqkv");

    // fp32 through the backend, with Q/K/V as strided column blocks of one [T, 3C] buffer.
    DeviceArray qkv32 = upload_f32(backend_, qkv, {t, 3 * c});
    DeviceArray dqkv32 = zeros_f32(backend_, {t, 3 * c});
    DeviceArray out32 = zeros_f32(backend_, {t, c}), lse32 = zeros_f32(backend_, {t, n_head});
    DeviceArray dout32 = upload_f32(backend_, w, {t, c});
    const Tensor& q = qkv32.tensor;
    const Tensor& dq = dqkv32.tensor;
    backend_.attention_forward(out32.tensor, lse32.tensor, q.columns(0, c), q.columns(c, c),
                               q.columns(2 * c, c), ac.spans, n_head);
    backend_.attention_backward(dq.columns(0, c), dq.columns(c, c), dq.columns(2 * c, c),
                                dout32.tensor, q.columns(0, c), q.columns(c, c),
                                q.columns(2 * c, c), out32.tensor, lse32.tensor, ac.spans, n_head);
    FULCRUM_VERIFY_CLOSE(download_f64(backend_, out32.tensor), out, kFp32Tolerance, "out fp32");
    FULCRUM_VERIFY_CLOSE(download_f64(backend_, lse32.tensor), lse, kFp32Tolerance, "lse fp32");
    FULCRUM_VERIFY_CLOSE(download_f64(backend_, dqkv32.tensor), dqkv, kFp32Tolerance, "dqkv fp32");
}

// The context-parallel contract of attention.h: query rows of a chunk of a document, with
// their prefix offset, against the K/V of the whole document prefix, give the rows the whole
// document would; dk/dv summed over the chunks give the whole document's.
void EngineLayersTest::attentionShardsMatchWholeDocument() {
    const int n_head = 2, head_size = 4, c = n_head * head_size, length = 11;
    const std::vector<double> q = random_values(length * c, 30);
    const std::vector<double> k = random_values(length * c, 31);
    const std::vector<double> v = random_values(length * c, 32);
    const std::vector<double> dout = random_values(length * c, 33);
    const std::vector<AttentionSpan> whole = {{0, 0, 0, length}};
    std::vector<double> out(length * c), lse(length * n_head);
    kernels::attention_forward<double>({out.data(), c}, lse.data(), {q.data(), c}, {k.data(), c},
                                       {v.data(), c}, whole, n_head, head_size);
    std::vector<double> dq(q.size()), dk(k.size()), dv(v.size());
    kernels::attention_backward<double>(
        {dq.data(), c}, {dk.data(), c}, {dv.data(), c}, {dout.data(), c}, {q.data(), c},
        {k.data(), c}, {v.data(), c}, {out.data(), c}, lse.data(), whole, n_head, head_size);

    // Chunks 0 and 3 of 4 on one "rank", chunks 1 and 2 on another: the per-document
    // sharding of REFERENCE §1 with CP = 2. Each rank holds only its own query rows.
    const std::vector<std::vector<std::pair<int, int>>> ranks = {{{0, 3}, {8, 3}},
                                                                 {{3, 3}, {6, 2}}};
    std::vector<double> dk_sum(k.size()), dv_sum(v.size());
    for (const auto& chunks : ranks) {
        std::vector<AttentionSpan> spans;
        std::vector<double> q_local;
        int row = 0;
        for (auto [begin, count] : chunks) {
            spans.push_back({row, 0, begin, count});
            q_local.insert(q_local.end(), q.begin() + begin * c, q.begin() + (begin + count) * c);
            row += count;
        }
        std::vector<double> dout_local;
        for (auto [begin, count] : chunks) {
            dout_local.insert(dout_local.end(), dout.begin() + begin * c,
                              dout.begin() + (begin + count) * c);
        }
        std::vector<double> out_local(std::size_t(row * c)), lse_local(std::size_t(row * n_head));
        kernels::attention_forward<double>({out_local.data(), c}, lse_local.data(),
                                           {q_local.data(), c}, {k.data(), c}, {v.data(), c}, spans,
                                           n_head, head_size);
        std::vector<double> dq_local(q_local.size());
        kernels::attention_backward<double>(
            {dq_local.data(), c}, {dk_sum.data(), c}, {dv_sum.data(), c}, {dout_local.data(), c},
            {q_local.data(), c}, {k.data(), c}, {v.data(), c}, {out_local.data(), c},
            lse_local.data(), spans, n_head, head_size);
        row = 0;
        for (auto [begin, count] : chunks) {
            for (int i = 0; i < count * c; ++i) {
                QCOMPARE(out_local[std::size_t(row * c + i)], out[std::size_t(begin * c + i)]);
                QCOMPARE(dq_local[std::size_t(row * c + i)], dq[std::size_t(begin * c + i)]);
            }
            row += count;
        }
    }
    // Summation order differs between the shards and the whole (dk_j collects over queries).
    FULCRUM_VERIFY_CLOSE(dk_sum, dk, 1e-12, "dk summed over shards");
    FULCRUM_VERIFY_CLOSE(dv_sum, dv, 1e-12, "dv summed over shards");
}

void EngineLayersTest::mlp() {
    const int rows = 4, c = 5, hidden = 4 * c;
    std::vector<double> x = random_values(rows * c, 40);
    std::vector<double> fc_w = random_values(hidden * c, 41, 0.5);
    std::vector<double> fc_b = random_values(hidden, 42, 0.5);
    std::vector<double> proj_w = random_values(c * hidden, 43, 0.5);
    std::vector<double> proj_b = random_values(c, 44, 0.5);
    const std::vector<double> w = random_values(rows * c, 45);

    auto forward = [&](std::vector<double>& h, std::vector<double>& g, std::vector<double>& y) {
        h.assign(rows * hidden, 0);
        g.assign(rows * hidden, 0);
        y.assign(rows * c, 0);
        kernels::matmul_forward(h.data(), x.data(), c, fc_w.data(), fc_b.data(), rows, c, hidden);
        kernels::gelu_forward(g.data(), h.data(), rows * hidden);
        kernels::matmul_forward(y.data(), g.data(), hidden, proj_w.data(), proj_b.data(), rows,
                                hidden, c);
    };
    auto objective = [&] {
        std::vector<double> h, g, y;
        forward(h, g, y);
        return dot(w, y);
    };
    std::vector<double> h, g, y;
    forward(h, g, y);
    std::vector<double> dg(g.size()), dh(h.size()), dx(x.size());
    std::vector<double> dfc_w(fc_w.size()), dfc_b(fc_b.size());
    std::vector<double> dproj_w(proj_w.size()), dproj_b(proj_b.size());
    kernels::matmul_backward(dg.data(), dproj_w.data(), dproj_b.data(), w.data(), c, g.data(),
                             hidden, proj_w.data(), rows, hidden, c);
    kernels::gelu_backward(dh.data(), dg.data(), h.data(), rows * hidden);
    kernels::matmul_backward(dx.data(), dfc_w.data(), dfc_b.data(), dh.data(), hidden, x.data(), c,
                             fc_w.data(), rows, c, hidden);
    FULCRUM_VERIFY_GRADIENT(check_gradient(x, dx, objective), "dx");
    FULCRUM_VERIFY_GRADIENT(check_gradient(fc_w, dfc_w, objective), "dfc_w");
    FULCRUM_VERIFY_GRADIENT(check_gradient(fc_b, dfc_b, objective), "dfc_b");
    FULCRUM_VERIFY_GRADIENT(check_gradient(proj_w, dproj_w, objective), "dproj_w");
    FULCRUM_VERIFY_GRADIENT(check_gradient(proj_b, dproj_b, objective), "dproj_b");

    // fp32: the same composite through the backend.
    DeviceArray x32 = upload_f32(backend_, x, {rows, c});
    DeviceArray fc_w32 = upload_f32(backend_, fc_w, {hidden, c});
    DeviceArray fc_b32 = upload_f32(backend_, fc_b, {hidden});
    DeviceArray proj_w32 = upload_f32(backend_, proj_w, {c, hidden});
    DeviceArray proj_b32 = upload_f32(backend_, proj_b, {c});
    DeviceArray h32 = zeros_f32(backend_, {rows, hidden}),
                g32 = zeros_f32(backend_, {rows, hidden});
    DeviceArray y32 = zeros_f32(backend_, {rows, c}), dy32 = upload_f32(backend_, w, {rows, c});
    DeviceArray dg32 = zeros_f32(backend_, {rows, hidden}),
                dh32 = zeros_f32(backend_, {rows, hidden});
    DeviceArray dx32 = zeros_f32(backend_, {rows, c});
    DeviceArray dfc_w32 = zeros_f32(backend_, {hidden, c}), dfc_b32 = zeros_f32(backend_, {hidden});
    DeviceArray dproj_w32 = zeros_f32(backend_, {c, hidden}), dproj_b32 = zeros_f32(backend_, {c});
    backend_.matmul_forward(h32.tensor, x32.tensor, fc_w32.tensor, fc_b32.tensor);
    backend_.gelu_forward(g32.tensor, h32.tensor);
    backend_.matmul_forward(y32.tensor, g32.tensor, proj_w32.tensor, proj_b32.tensor);
    backend_.matmul_backward(dg32.tensor, dproj_w32.tensor, dproj_b32.tensor, dy32.tensor,
                             g32.tensor, proj_w32.tensor);
    backend_.gelu_backward(dh32.tensor, dg32.tensor, h32.tensor);
    backend_.matmul_backward(dx32.tensor, dfc_w32.tensor, dfc_b32.tensor, dh32.tensor, x32.tensor,
                             fc_w32.tensor);
    FULCRUM_VERIFY_CLOSE(download_f64(backend_, y32.tensor), y, kFp32Tolerance, "y fp32");
    FULCRUM_VERIFY_CLOSE(download_f64(backend_, dx32.tensor), dx, kFp32Tolerance, "dx fp32");
    FULCRUM_VERIFY_CLOSE(download_f64(backend_, dfc_w32.tensor), dfc_w, kFp32Tolerance,
                         "dfc_w fp32");
    FULCRUM_VERIFY_CLOSE(download_f64(backend_, dfc_b32.tensor), dfc_b, kFp32Tolerance,
                         "dfc_b fp32");
    FULCRUM_VERIFY_CLOSE(download_f64(backend_, dproj_w32.tensor), dproj_w, kFp32Tolerance,
                         "dproj_w fp32");
    FULCRUM_VERIFY_CLOSE(download_f64(backend_, dproj_b32.tensor), dproj_b, kFp32Tolerance,
                         "dproj_b fp32");
}

void EngineLayersTest::lmHeadCrossEntropy() {
    const int rows = 6, c = 5, vocab = 13;
    std::vector<double> x = random_values(rows * c, 50);
    std::vector<double> wte = random_values(vocab * c, 51);
    // Two rows without a target: the last token of each of two documents.
    const std::vector<std::int32_t> targets = {4, 12, kernels::kNoTarget, 0, 7, kernels::kNoTarget};
    const double scale = 1.0 / 4.0;  // 1 / (number of targets): the mean loss

    auto forward = [&](std::vector<double>& probs, std::vector<double>& losses) {
        probs.assign(rows * vocab, 0);
        losses.assign(rows, 0);
        kernels::matmul_forward<double>(probs.data(), x.data(), c, wte.data(), nullptr, rows, c,
                                        vocab);
        kernels::crossentropy_forward(losses.data(), probs.data(), probs.data(), targets.data(),
                                      rows, vocab);
    };
    auto objective = [&] {
        std::vector<double> probs, losses;
        forward(probs, losses);
        double sum = 0;
        for (double l : losses)
            sum += l;
        return scale * sum;
    };
    std::vector<double> probs, losses;
    forward(probs, losses);
    QCOMPARE(losses[2], 0.0);
    QCOMPARE(losses[5], 0.0);
    std::vector<double> dlogits(probs.size()), dx(x.size()), dwte(wte.size());
    kernels::crossentropy_backward(dlogits.data(), probs.data(), targets.data(), scale, rows,
                                   vocab);
    kernels::matmul_backward<double>(dx.data(), dwte.data(), nullptr, dlogits.data(), vocab,
                                     x.data(), c, wte.data(), rows, c, vocab);
    FULCRUM_VERIFY_GRADIENT(check_gradient(x, dx, objective), "dx");
    FULCRUM_VERIFY_GRADIENT(check_gradient(wte, dwte, objective), "dwte");

    DeviceArray x32 = upload_f32(backend_, x, {rows, c});
    DeviceArray wte32 = upload_f32(backend_, wte, {vocab, c});
    DeviceArray t32 = upload_i32(backend_, targets);
    DeviceArray probs32 = zeros_f32(backend_, {rows, vocab});
    DeviceArray losses32 = zeros_f32(backend_, {rows});
    DeviceArray dlogits32 = zeros_f32(backend_, {rows, vocab});
    DeviceArray dx32 = zeros_f32(backend_, {rows, c}), dwte32 = zeros_f32(backend_, {vocab, c});
    backend_.matmul_forward(probs32.tensor, x32.tensor, wte32.tensor, Tensor{});
    backend_.crossentropy_forward(losses32.tensor, probs32.tensor, probs32.tensor, t32.tensor);
    backend_.crossentropy_backward(dlogits32.tensor, probs32.tensor, t32.tensor, float(scale));
    backend_.matmul_backward(dx32.tensor, dwte32.tensor, Tensor{}, dlogits32.tensor, x32.tensor,
                             wte32.tensor);
    FULCRUM_VERIFY_CLOSE(download_f64(backend_, losses32.tensor), losses, kFp32Tolerance,
                         "losses fp32");
    FULCRUM_VERIFY_CLOSE(download_f64(backend_, probs32.tensor), probs, kFp32Tolerance,
                         "probs fp32");
    FULCRUM_VERIFY_CLOSE(download_f64(backend_, dx32.tensor), dx, kFp32Tolerance, "dx fp32");
    FULCRUM_VERIFY_CLOSE(download_f64(backend_, dwte32.tensor), dwte, kFp32Tolerance, "dwte fp32");
}

QTEST_GUILESS_MAIN(EngineLayersTest)
// The staged communicator moves a span through host memory only when the backend holds it
// (Backend::holds): inside one live allocation, whole.
void EngineLayersTest::backendKnowsItsAllocations() {
    std::vector<float> host(64);
    QVERIFY(!backend_.holds(host.data(), 4));
    const float* first = nullptr;
    {
        DeviceBuffer a = backend_.allocate(256 * sizeof(float));
        DeviceBuffer b = backend_.allocate(16 * sizeof(float));
        const float* pa = a.f32(0, {256}).f32();
        const float* pb = b.f32(0, {16}).f32();
        first = pa;
        QVERIFY(backend_.holds(pa, 256 * sizeof(float)));
        QVERIFY(backend_.holds(pa + 100, 156 * sizeof(float)));
        QVERIFY(!backend_.holds(pa + 100, 157 * sizeof(float)));  // runs past the end
        QVERIFY(backend_.holds(pb + 15, sizeof(float)));
        QVERIFY(!backend_.holds(pb + 16, sizeof(float)) || pb + 16 == pa);
        DeviceBuffer moved = std::move(a);  // ownership moves, the allocation stays
        QVERIFY(backend_.holds(pa, sizeof(float)));
    }
    QVERIFY(!backend_.holds(first, sizeof(float)));  // released
}

// FPDT-style chunked attention (chunked_attention.h) against one whole attention call on the
// same backend, forward and backward, with and without the K/V offload: the key windows and
// their merge are exact up to float rounding. Q/K/V are column blocks of one fused [T, 3C]
// buffer (row stride 3C), as the model passes them, so the strided copies are exercised too.
void EngineLayersTest::chunkedAttentionMatchesWhole_data() {
    QTest::addColumn<int>("chunk");
    QTest::addColumn<bool>("offload");
    QTest::addColumn<bool>("sharded");
    for (int chunk : {4, 7, 16}) {
        for (bool offload : {false, true}) {
            for (bool sharded : {false, true}) {
                QTest::addRow("chunk %d%s%s", chunk, offload ? " offload" : "",
                              sharded ? " cp shard" : "")
                    << chunk << offload << sharded;
            }
        }
    }
}

void EngineLayersTest::chunkedAttentionMatchesWhole() {
    QFETCH(int, chunk);
    QFETCH(bool, offload);
    QFETCH(bool, sharded);
    const int n_head = 2, c = 8, rows = 43;
    // Serial: a 37-token document (long) and a 6-token one (short). CP shard: this rank's query
    // rows are positions 0-8 and 28-36 of the 37-token document (per-document sharding) plus
    // the whole short one, against K/V of every position.
    std::vector<AttentionSpan> spans = {{0, 0, 0, 37}, {37, 37, 0, 6}};
    if (sharded) {
        spans = {{0, 0, 0, 9}, {9, 0, 28, 9}, {18, 37, 0, 6}};
    }
    const std::vector<double> values = random_values(std::size_t(rows) * 3 * c, 90);
    const std::vector<double> upstream = random_values(std::size_t(rows) * c, 91);
    auto upload = [&](DeviceBuffer& buffer, const std::vector<double>& from) {
        std::vector<float> f(from.begin(), from.end());
        backend_.upload(buffer.f32(0, {std::int64_t(f.size())}), f.data(), kComputeStream);
    };
    DeviceBuffer qkv = backend_.allocate(values.size() * sizeof(float));
    DeviceBuffer dout = backend_.allocate(upstream.size() * sizeof(float));
    upload(qkv, values);
    upload(dout, upstream);
    const Tensor fused = qkv.f32(0, {rows, 3 * c});
    const Tensor q = fused.columns(0, c), k = fused.columns(c, c), v = fused.columns(2 * c, c);
    const Tensor dout_t = dout.f32(0, {rows, c});

    struct Result {
        std::vector<float> out, lse, dqkv;
    };
    auto run = [&](ChunkedAttention& attention) {
        DeviceBuffer out = backend_.allocate(std::size_t(rows) * c * sizeof(float));
        DeviceBuffer lse = backend_.allocate(std::size_t(rows) * n_head * sizeof(float));
        DeviceBuffer dqkv = backend_.allocate(std::size_t(rows) * 3 * c * sizeof(float));
        const Tensor out_t = out.f32(0, {rows, c}), lse_t = lse.f32(0, {rows, n_head});
        const Tensor grads = dqkv.f32(0, {rows, 3 * c});
        attention.forward(out_t, lse_t, q, k, v, spans);
        attention.backward(grads.columns(0, c), grads.columns(c, c), grads.columns(2 * c, c),
                           dout_t, q, k, v, out_t, lse_t, spans);
        Result result{std::vector<float>(std::size_t(rows) * c),
                      std::vector<float>(std::size_t(rows) * n_head),
                      std::vector<float>(std::size_t(rows) * 3 * c)};
        backend_.download(result.out.data(), out_t, kComputeStream);
        backend_.download(result.lse.data(), lse_t, kComputeStream);
        backend_.download(result.dqkv.data(), grads, kComputeStream);
        return result;
    };
    // The copy streams are threads; lagging copies make a missing event show as wrong numbers.
    backend_.set_copy_delay(std::chrono::microseconds(300));
    ChunkedAttention whole(backend_, c, n_head, {});
    ChunkedAttention chunked(backend_, c, n_head, {chunk, offload});
    QVERIFY(!whole.enabled() && chunked.enabled());
    const Result expected = run(whole);
    const Result got = run(chunked);
    auto max_difference = [](const std::vector<float>& a, const std::vector<float>& b) {
        double worst = 0;
        for (std::size_t i = 0; i < a.size(); ++i) {
            worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
        }
        return worst;
    };
    // Unused rows of a shard's Q (rows 24-42 hold no span) stay zero in both.
    QVERIFY2(max_difference(got.out, expected.out) < 1e-5, "out");
    QVERIFY2(max_difference(got.lse, expected.lse) < 1e-5, "lse");
    QVERIFY2(max_difference(got.dqkv, expected.dqkv) < 1e-5, "dq, dk, dv");
    // The gradients are not trivially zero.
    QVERIFY(max_difference(got.dqkv, std::vector<float>(got.dqkv.size())) > 1e-3);
    backend_.set_copy_delay(std::chrono::microseconds(0));

    const AttentionMemory& memory = chunked.memory();
    QCOMPARE(memory.resident_kv_bytes, std::int64_t(2 * 37 * c * sizeof(float)));
    if (offload) {
        // Forward and backward each offload the K/V prefix of every span longer than a chunk
        // (a shard's two spans of one document each offload their own prefix).
        std::int64_t offloaded = 0;
        for (const AttentionSpan& span : spans) {
            if (span.prefix + span.length > chunk) {
                offloaded += 2 * 2 * std::int64_t(span.prefix + span.length) * c * sizeof(float);
            }
        }
        QCOMPARE(memory.offloaded_bytes, offloaded);
        QVERIFY(memory.prefetched_bytes >= offloaded);
        QCOMPARE(memory.host_bytes, memory.resident_kv_bytes);
        if (chunk == 4) {
            QVERIFY(memory.device_bytes < memory.resident_kv_bytes);
        }
    } else {
        QCOMPARE(memory.offloaded_bytes, 0);
        QCOMPARE(memory.host_bytes, 0);
    }
}

#include "test_engine_layers.moc"
