// Each layer's backward pass against finite differences of its forward pass (in double), and
// the CPU backend's fp32 forward and backward against the same layer in double.
// gradient_check.h explains both tolerances.
#include <QTest>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <set>

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
    TokenBatch b;
    b.doc_lengths = doc_lengths;
    return b.positions();
}

std::vector<AttentionSpan> spans_of(const std::vector<std::int32_t>& doc_lengths) {
    TokenBatch b;
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
    void chunkedBackwardLoopsKeysOuter_data();
    void chunkedBackwardLoopsKeysOuter();
    void offloadingBackwardMatchesResident_data();
    void offloadingBackwardMatchesResident();
    void offloadingPassesMoveWhatTheSimulatorPrices();
    void chunkCopiesOverlapCompute();
    void chunksArePreparedAhead_data();
    void chunksArePreparedAhead();

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
    // sharding of WLB-LLM §4 with CP = 2. Each rank holds only its own query rows.
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

// ---- FPDT-style chunked attention (chunked_attention.h) ------------------------------------

namespace {

// One block's attention core as the model runs it: Q (and serially K|V) projected from x,
// attention, and back. Serially the query rows are the K/V rows; under CP ("sharded") this
// rank's query rows are pieces of documents whose K/V come gathered, in document order.
struct ChunkCase {
    static constexpr int n_head = 2, c = 8;
    bool sharded = false;
    std::int64_t q_rows = 0, kv_rows = 0;
    std::vector<AttentionSpan> spans;
    std::vector<double> x, weight, bias, gathered, dout;

    ChunkCase(const QString& documents, bool sharded_) : sharded(sharded_) {
        const bool long_and_short = documents == "long and short";
        if (!sharded) {
            const std::vector<std::int32_t> lengths =
                long_and_short                       ? std::vector<std::int32_t>{37, 6}
                : documents == "pieces out of order" ? std::vector<std::int32_t>{22, 22}
                : documents == "one document"        ? std::vector<std::int32_t>{40}
                                                     : std::vector<std::int32_t>{5, 9, 3, 11, 6, 9};
            spans = spans_of(lengths);
            q_rows = kv_rows = std::accumulate(lengths.begin(), lengths.end(), 0);
        } else if (documents == "pieces out of order") {
            // Two 22-token documents at gathered rows 0 and 22; this rank holds the second
            // one first, so the first K/V chunk meets only the last query chunk.
            spans = {{0, 22, 0, 11}, {11, 22, 11, 11}, {22, 0, 0, 22}};
            q_rows = 44, kv_rows = 44;
        } else if (long_and_short) {
            // Positions 0-8 and 28-36 of the 37-token document (per-document sharding) and the
            // whole 6-token one, against K/V of every position.
            spans = {{0, 0, 0, 9}, {9, 0, 28, 9}, {18, 37, 0, 6}};
            q_rows = 24, kv_rows = 43;
        } else {
            // Documents of 11, 3 and 29 tokens at gathered rows 0, 11 and 14.
            spans = {{0, 0, 0, 3}, {3, 0, 8, 3}, {6, 11, 0, 3}, {9, 14, 0, 7}, {16, 14, 22, 7}};
            q_rows = 23, kv_rows = 43;
        }
        x = random_values(std::size_t(q_rows * c), 90);
        weight = random_values(std::size_t(3 * c * c), 91, 0.4);
        bias = random_values(std::size_t(3 * c), 92, 0.1);
        gathered = random_values(std::size_t(kv_rows * 2 * c), 93);
        dout = random_values(std::size_t(q_rows * c), 94);
    }
};

// Q, K|V as projected (or gathered), the attention's output and lse, and the gradients.
struct ChunkResult {
    std::vector<float> q, kv, out, lse, dq, dkv;
};

std::vector<float> floats_of(Backend& backend, const Tensor& t) {
    std::vector<float> host(std::size_t(t.numel()));
    backend.download(host.data(), t, kComputeStream);
    return host;
}

struct ChunkInputs {
    DeviceArray x, weight, bias, gathered, dout;
    ChunkInputs(Backend& backend, const ChunkCase& k)
        : x(upload_f32(backend, k.x, {k.q_rows, k.c})),
          weight(upload_f32(backend, k.weight, {3 * k.c, k.c})),
          bias(upload_f32(backend, k.bias, {3 * k.c})),
          gathered(upload_f32(backend, k.gathered, {k.kv_rows, 2 * k.c})),
          dout(upload_f32(backend, k.dout, {k.q_rows, k.c})) {}
    QkvProjection projection(const ChunkCase& k) const {
        QkvProjection p;
        p.input = x.tensor;
        p.q_weight = weight.tensor.slice(0, k.c);
        p.q_bias = bias.tensor.slice(0, k.c);
        if (!k.sharded) {
            p.kv_weight = weight.tensor.slice(k.c, 2 * k.c);
            p.kv_bias = bias.tensor.slice(k.c, 2 * k.c);
        }
        return p;
    }
};

// The reference: whole GEMMs and one attention call each way.
ChunkResult run_whole(Backend& backend, const ChunkCase& k) {
    const ChunkInputs in(backend, k);
    const std::int64_t c = k.c;
    DeviceArray q = zeros_f32(backend, {k.q_rows, c}), kv = zeros_f32(backend, {k.kv_rows, 2 * c});
    DeviceArray out = zeros_f32(backend, {k.q_rows, c}),
                lse = zeros_f32(backend, {k.q_rows, k.n_head});
    DeviceArray dq = zeros_f32(backend, {k.q_rows, c}),
                dkv = zeros_f32(backend, {k.kv_rows, 2 * c});
    const QkvProjection p = in.projection(k);
    backend.matmul_forward(q.tensor, p.input, p.q_weight, p.q_bias);
    if (k.sharded) {
        backend.copy(kv.tensor, in.gathered.tensor);
    } else {
        backend.matmul_forward(kv.tensor, p.input, p.kv_weight, p.kv_bias);
    }
    const Tensor keys = kv.tensor.columns(0, c), values = kv.tensor.columns(c, c);
    backend.attention_forward(out.tensor, lse.tensor, q.tensor, keys, values, k.spans, k.n_head);
    backend.attention_backward(dq.tensor, dkv.tensor.columns(0, c), dkv.tensor.columns(c, c),
                               in.dout.tensor, q.tensor, keys, values, out.tensor, lse.tensor,
                               k.spans, k.n_head);
    return {floats_of(backend, q.tensor),   floats_of(backend, kv.tensor),
            floats_of(backend, out.tensor), floats_of(backend, lse.tensor),
            floats_of(backend, dq.tensor),  floats_of(backend, dkv.tensor)};
}

// ChunkedAttention's forward and backward; Q and K|V read back from where they waited.
ChunkResult run_chunked(CpuBackend& backend, ChunkedAttention& attention, const ChunkCase& k) {
    const ChunkInputs in(backend, k);
    const std::int64_t c = k.c;
    DeviceArray q = zeros_f32(backend, {k.q_rows, c}), kv = zeros_f32(backend, {k.kv_rows, 2 * c});
    PinnedBuffer host_q = backend.allocate_pinned(std::size_t(k.q_rows * c));
    PinnedBuffer host_kv = backend.allocate_pinned(std::size_t(k.kv_rows * 2 * c));
    // Resident, under CP the K|V wait where they were gathered (as the model's do).
    const QkvStore store =
        attention.offloads()
            ? QkvStore{Tensor{}, Tensor{}, host_q.get(), host_kv.get()}
            : QkvStore{q.tensor, k.sharded ? in.gathered.tensor : kv.tensor, nullptr, nullptr};
    DeviceArray out = zeros_f32(backend, {k.q_rows, c}),
                lse = zeros_f32(backend, {k.q_rows, k.n_head});
    DeviceArray dq = zeros_f32(backend, {k.q_rows, c}),
                dkv = zeros_f32(backend, {k.kv_rows, 2 * c});
    attention.forward(in.projection(k), k.sharded ? in.gathered.tensor : Tensor{}, store,
                      out.tensor, lse.tensor, k.spans);
    attention.backward(store, dq.tensor, dkv.tensor.columns(0, c), dkv.tensor.columns(c, c),
                       in.dout.tensor, out.tensor, lse.tensor, k.spans);
    ChunkResult result{{},
                       {},
                       floats_of(backend, out.tensor),
                       floats_of(backend, lse.tensor),
                       floats_of(backend, dq.tensor),
                       floats_of(backend, dkv.tensor)};
    if (attention.offloads()) {
        backend.synchronize(attention.offload_stream());  // the host copies are complete
        result.q.assign(host_q.get(), host_q.get() + k.q_rows * c);
        result.kv.assign(host_kv.get(), host_kv.get() + k.kv_rows * 2 * c);
    } else {
        result.q = floats_of(backend, store.q);
        result.kv = floats_of(backend, store.kv);
    }
    return result;
}

// Largest difference relative to the reference's largest magnitude (at least 1).
double relative_difference(const std::vector<float>& got, const std::vector<float>& expected) {
    double worst = 0, scale = 1;
    for (std::size_t i = 0; i < expected.size(); ++i) {
        worst = std::max(worst, std::abs(double(got[i]) - double(expected[i])));
        scale = std::max(scale, std::abs(double(expected[i])));
    }
    return worst / scale;
}

// The pairs that must exist, from the documents alone: query chunk i meets K/V chunk j when a
// span's query rows in chunk i see keys in rows of chunk j.
std::set<std::pair<int, int>> expected_pairs(const ChunkCase& k, int chunk) {
    std::set<std::pair<int, int>> pairs;
    for (const AttentionSpan& span : k.spans) {
        for (std::int32_t r = 0; r < span.length; ++r) {
            const int i = (span.q_begin + r) / chunk;
            for (std::int32_t p = 0; p <= span.prefix + r; ++p) {
                pairs.insert({i, (span.kv_begin + p) / chunk});
            }
        }
    }
    return pairs;
}

}  // namespace

// Chunked against whole attention, forward and backward, with and without offload: chunk
// sizes below, between and above the document lengths, documents longer and shorter than a
// chunk and crossing chunk boundaries, serial rows and CP shards. The copy streams are threads
// whose copies lag here, so a missing event shows as wrong numbers. Offload on and off give
// the same bits (the same kernels on the same numbers; only where Q/K/V wait differs).
// With offload, either every copy lags (a compute that does not wait for its fetch reads a
// stale slot) or only the copies to the host do (a fetch that does not wait for them reads
// host rows not yet written, or overwrites a slot still being copied out).
void EngineLayersTest::chunkedAttentionMatchesWhole_data() {
    QTest::addColumn<int>("chunk");
    QTest::addColumn<bool>("offload");
    QTest::addColumn<bool>("offload_lags");
    QTest::addColumn<bool>("sharded");
    QTest::addColumn<QString>("documents");
    for (const char* documents : {"long and short", "short documents", "pieces out of order"}) {
        for (int chunk : {3, 4, 7, 16, 22, 64}) {
            for (int mode : {0, 1, 2}) {  // resident, offload, offload with slow copies out
                for (bool sharded : {false, true}) {
                    QTest::addRow("%s, chunk %d%s%s", documents, chunk,
                                  mode == 0   ? ""
                                  : mode == 1 ? " offload"
                                              : " offload lagging",
                                  sharded ? " cp shard" : "")
                        << chunk << (mode > 0) << (mode == 2) << sharded << QString(documents);
                }
            }
        }
    }
}

void EngineLayersTest::chunkedAttentionMatchesWhole() {
    QFETCH(int, chunk);
    QFETCH(bool, offload);
    QFETCH(bool, offload_lags);
    QFETCH(bool, sharded);
    QFETCH(QString, documents);
    const ChunkCase k(documents, sharded);
    CpuBackend backend(1);
    const ChunkResult expected = run_whole(backend, k);
    ChunkedAttention chunked(backend, k.c, k.n_head, {chunk, offload});
    QVERIFY(chunked.enabled() && chunked.offloads() == offload);
    if (offload_lags) {
        backend.set_copy_delay(chunked.offload_stream(), std::chrono::milliseconds(2));
        backend.set_copy_delay(chunked.prefetch_stream(), std::chrono::microseconds(0));
    } else {
        backend.set_copy_delay(std::chrono::microseconds(300));
    }
    const ChunkResult got = run_chunked(backend, chunked, k);
    // fp32 sums in another order (per-chunk GEMMs, merged windows): rounding only.
    QVERIFY2(relative_difference(got.q, expected.q) < 1e-6, "q");
    QVERIFY2(relative_difference(got.kv, expected.kv) < 1e-6, "k|v");
    QVERIFY2(relative_difference(got.out, expected.out) < 1e-5, "out");
    QVERIFY2(relative_difference(got.lse, expected.lse) < 1e-5, "lse");
    QVERIFY2(relative_difference(got.dq, expected.dq) < 1e-5, "dq");
    QVERIFY2(relative_difference(got.dkv, expected.dkv) < 1e-5, "dk, dv");
    QVERIFY(relative_difference(got.dkv, std::vector<float>(got.dkv.size())) > 1e-3);  // not 0

    const AttentionMemory& memory = chunked.memory();
    QCOMPARE(memory.partial_bytes, std::int64_t(chunk * (k.c + k.n_head) * sizeof(float)));
    if (!offload) {
        QCOMPARE(memory.double_buffer_bytes, 0);
        QCOMPARE(memory.offloaded_bytes, 0);
        QCOMPARE(memory.prefetched_bytes, 0);
        return;
    }
    // Two slots of one chunk's Q, K and V are all the device holds of them.
    QCOMPARE(memory.double_buffer_bytes, std::int64_t(2 * chunk * 3 * k.c * sizeof(float)));
    // Every Q row and K/V row went to the host once.
    QCOMPARE(memory.offloaded_bytes,
             std::int64_t((k.q_rows * k.c + k.kv_rows * 2 * k.c) * sizeof(float)));
    // And the same bits as without offload.
    ChunkedAttention resident(backend, k.c, k.n_head, {chunk, false});
    const ChunkResult in_place = run_chunked(backend, resident, k);
    QVERIFY(got.q == in_place.q && got.kv == in_place.kv);
    QVERIFY(got.out == in_place.out && got.lse == in_place.lse);
    QVERIFY(got.dq == in_place.dq && got.dkv == in_place.dkv);
}

// The pairs are exactly those the documents need (the work stays Σ dᵢ²), every piece of a
// document meets its first window once, and the backward runs K/V chunks outer and query
// chunks inner, FPDT's order: each K/V chunk crosses to the device once, each query chunk once
// per pair, so the prefetched bytes are exactly that.
void EngineLayersTest::chunkedBackwardLoopsKeysOuter_data() {
    QTest::addColumn<int>("chunk");
    QTest::addColumn<bool>("sharded");
    QTest::addColumn<QString>("documents");
    for (const char* documents : {"long and short", "short documents", "pieces out of order"}) {
        for (int chunk : {3, 7, 16, 22}) {
            for (bool sharded : {false, true}) {
                QTest::addRow("%s, chunk %d%s", documents, chunk, sharded ? " cp shard" : "")
                    << chunk << sharded << QString(documents);
            }
        }
    }
}

void EngineLayersTest::chunkedBackwardLoopsKeysOuter() {
    QFETCH(int, chunk);
    QFETCH(bool, sharded);
    QFETCH(QString, documents);
    const ChunkCase k(documents, sharded);
    CpuBackend backend(1);
    ChunkedAttention chunked(backend, k.c, k.n_head, {chunk, true});
    const std::set<std::pair<int, int>> needed = expected_pairs(k, chunk);

    const std::vector<ChunkPair> forward =
        chunked.forward_order(k.q_rows, k.kv_rows, !sharded, k.spans);
    std::set<std::pair<int, int>> seen;
    std::map<std::pair<std::int32_t, std::int32_t>, int> first_windows;  // (row, prefix) → count
    for (std::size_t n = 0; n < forward.size(); ++n) {
        const ChunkPair& pair = forward[n];
        QVERIFY(seen.insert({pair.q_chunk, pair.kv_chunk}).second);
        QVERIFY(n == 0 || forward[n - 1].q_chunk <= pair.q_chunk);  // query chunks in order
        if (!sharded && (n == 0 || forward[n - 1].q_chunk != pair.q_chunk)) {
            QCOMPARE(pair.kv_chunk, pair.q_chunk);  // its own K/V first, just projected
        }
        for (const AttentionSpan& piece : pair.first) {
            ++first_windows[{pair.q_chunk * chunk + piece.q_begin, piece.prefix}];
        }
    }
    QCOMPARE(seen, needed);
    for (const auto& [piece, count] : first_windows) {
        QCOMPARE(count, 1);
    }

    const std::vector<ChunkPair> backward = chunked.backward_order(k.q_rows, k.kv_rows, k.spans);
    QCOMPARE(backward.size(), forward.size());
    for (std::size_t n = 1; n < backward.size(); ++n) {
        const ChunkPair &before = backward[n - 1], &pair = backward[n];
        QVERIFY(before.kv_chunk <= pair.kv_chunk);                                   // K/V outer
        QVERIFY(before.kv_chunk != pair.kv_chunk || before.q_chunk < pair.q_chunk);  // Q inner
        if (!sharded) {
            QVERIFY(pair.q_chunk >= pair.kv_chunk);  // causal: Q chunks ≥ the K/V chunk
        }
    }

    // Traffic, from the needed pairs alone.
    auto rows = [&](int index, std::int64_t total) {
        return std::min<std::int64_t>(chunk, total - std::int64_t(index) * chunk);
    };
    const std::int64_t q_row = k.c * sizeof(float), kv_row = 2 * k.c * sizeof(float);
    std::int64_t forward_fetch = 0, backward_fetch = 0;
    std::set<int> kv_chunks;
    for (const auto& [i, j] : needed) {
        if (!sharded && i != j) {
            forward_fetch += rows(j, k.kv_rows) * kv_row;  // earlier K/V chunks come back
        }
        backward_fetch += rows(i, k.q_rows) * q_row;  // a query chunk per pair
        kv_chunks.insert(j);
    }
    for (int j : kv_chunks) {
        backward_fetch += rows(j, k.kv_rows) * kv_row;  // each K/V chunk once
    }
    const ChunkInputs in(backend, k);
    PinnedBuffer host_q = backend.allocate_pinned(std::size_t(k.q_rows * k.c));
    PinnedBuffer host_kv = backend.allocate_pinned(std::size_t(k.kv_rows * 2 * k.c));
    const QkvStore store{Tensor{}, Tensor{}, host_q.get(), host_kv.get()};
    DeviceArray out = zeros_f32(backend, {k.q_rows, k.c}),
                lse = zeros_f32(backend, {k.q_rows, k.n_head});
    DeviceArray dq = zeros_f32(backend, {k.q_rows, k.c}),
                dkv = zeros_f32(backend, {k.kv_rows, 2 * k.c});
    chunked.forward(in.projection(k), sharded ? in.gathered.tensor : Tensor{}, store, out.tensor,
                    lse.tensor, k.spans);
    QCOMPARE(chunked.memory().prefetched_bytes, forward_fetch);
    chunked.backward(store, dq.tensor, dkv.tensor.columns(0, k.c), dkv.tensor.columns(k.c, k.c),
                     in.dout.tensor, out.tensor, lse.tensor, k.spans);
    QCOMPARE(chunked.memory().prefetched_bytes - forward_fetch, backward_fetch);
}

// FPDT's offloading backward (chunked_attention.h): ∂L/∂o made a chunk at a time and kept on
// the host with dQ's partial sums, dQ|dK|dV handed over a chunk at a time. Against the whole
// attention (rounding) and against the resident chunked backward (the same pairs in the same
// order: the same bits), with every copy lagging or only those to the host, so that a fetch
// of dQ that does not wait for the last write-back, or a slot reused before its copy out is
// done, shows as wrong numbers. Serial rows: the query rows are the K/V rows, as under Ulysses.
// With the output on the host too (FPDT's output offload), the forward hands each chunk's
// final output to a sink and the backward fetches it with lse a query chunk at a time.
void EngineLayersTest::offloadingBackwardMatchesResident_data() {
    QTest::addColumn<int>("chunk");
    QTest::addColumn<bool>("offload_lags");
    QTest::addColumn<bool>("host_output");
    QTest::addColumn<QString>("documents");
    // One document of many chunks: every pair after a query chunk's first fetches dQ written
    // back from the other slot, and the last chunk's dQ passes from one K/V chunk's last pair
    // to the next one's first on the device.
    for (const char* documents :
         {"long and short", "short documents", "pieces out of order", "one document"}) {
        for (int chunk : {3, 4, 7, 16, 64}) {
            for (bool offload_lags : {false, true}) {
                for (bool host_output : {false, true}) {
                    QTest::addRow("%s, chunk %d%s%s", documents, chunk,
                                  offload_lags ? " offload lagging" : "",
                                  host_output ? " output on the host" : "")
                        << chunk << offload_lags << host_output << QString(documents);
                }
            }
        }
    }
}

void EngineLayersTest::offloadingBackwardMatchesResident() {
    QFETCH(int, chunk);
    QFETCH(bool, offload_lags);
    QFETCH(bool, host_output);
    QFETCH(QString, documents);
    const ChunkCase k(documents, false);
    CpuBackend backend(1);
    const ChunkResult expected = run_whole(backend, k);
    ChunkedAttention resident(backend, k.c, k.n_head, {chunk, false});
    const ChunkResult in_place = run_chunked(backend, resident, k);

    ChunkedAttention chunked(backend, k.c, k.n_head, {chunk, true});
    if (offload_lags) {
        backend.set_copy_delay(chunked.offload_stream(), std::chrono::milliseconds(2));
        backend.set_copy_delay(chunked.prefetch_stream(), std::chrono::microseconds(0));
    } else {
        backend.set_copy_delay(std::chrono::microseconds(300));
    }
    const ChunkInputs in(backend, k);
    const std::int64_t c = k.c, rows = k.q_rows;
    PinnedBuffer host_q = backend.allocate_pinned(std::size_t(rows * c));
    PinnedBuffer host_kv = backend.allocate_pinned(std::size_t(rows * 2 * c));
    PinnedBuffer host_out = backend.allocate_pinned(std::size_t(rows * (c + k.n_head)));
    const QkvStore store{Tensor{},
                         Tensor{},
                         host_q.get(),
                         host_kv.get(),
                         host_output ? host_out.get() : nullptr,
                         host_output ? host_out.get() + rows * c : nullptr};
    DeviceArray out = zeros_f32(backend, {rows, c}), lse = zeros_f32(backend, {rows, k.n_head});
    QkvProjection projection = in.projection(k);
    std::int64_t out_rows = 0;
    if (host_output) {
        projection.output = [&](std::int64_t first, std::int64_t count, Tensor chunk_out) {
            QCOMPARE(first, out_rows);  // chunk after chunk, each once, final
            out_rows += count;
            backend.copy(out.tensor.slice(first, count), chunk_out);
        };
    }
    chunked.forward(projection, Tensor{}, store, host_output ? Tensor{} : out.tensor,
                    host_output ? Tensor{} : lse.tensor, k.spans);
    if (host_output) {
        QCOMPARE(out_rows, rows);
        QVERIFY(floats_of(backend, out.tensor) == in_place.out);
        backend.synchronize(chunked.offload_stream());
        QVERIFY(std::vector<float>(host_out.get(), host_out.get() + rows * c) == in_place.out);
        QVERIFY(std::vector<float>(host_out.get() + rows * c,
                                   host_out.get() + rows * (c + k.n_head)) == in_place.lse);
    }
    // One chunk's dQ|dK|dV, copied into whole tensors as each is handed over.
    DeviceArray grads = zeros_f32(backend, {chunk, 3 * c});
    DeviceArray dq = zeros_f32(backend, {rows, c}), dkv = zeros_f32(backend, {rows, 2 * c});
    std::vector<int> handed;
    KvGradientChunks chunks;
    chunks.kv_rows = rows;
    chunks.rows = [&](int, std::int64_t count) {
        const Tensor g = grads.tensor.slice(0, count);
        backend.fill_zero(g);
        return ChunkGradients{g.columns(0, c), g.columns(c, c), g.columns(2 * c, c)};
    };
    chunks.done = [&](int index, std::int64_t first, std::int64_t count) {
        handed.push_back(index);
        const Tensor g = grads.tensor.slice(0, count);
        backend.copy(dq.tensor.slice(first, count), g.columns(0, c));
        backend.copy(dkv.tensor.slice(first, count), g.columns(c, 2 * c));
    };
    std::int64_t dout_rows = 0;
    const OutputGradientSource dout = [&](std::int64_t first, std::int64_t count,
                                          Tensor chunk_out) {
        QCOMPARE(first, dout_rows);  // chunk after chunk, each once
        dout_rows += count;
        backend.copy(chunk_out, in.dout.tensor.slice(first, count));
    };
    const std::int64_t offloaded = chunked.memory().offloaded_bytes;
    chunked.backward(store, chunks, dout, host_output ? Tensor{} : out.tensor,
                     host_output ? Tensor{} : lse.tensor, k.spans);
    QCOMPARE(dout_rows, rows);
    const std::vector<float> got_dq = floats_of(backend, dq.tensor),
                             got_dkv = floats_of(backend, dkv.tensor);
    QVERIFY2(relative_difference(got_dq, expected.dq) < 1e-5, "dq");
    QVERIFY2(relative_difference(got_dkv, expected.dkv) < 1e-5, "dk, dv");
    QVERIFY(got_dq == in_place.dq && got_dkv == in_place.dkv);
    // Every chunk handed over once; ∂L/∂o went to the host whole, and the device held two
    // chunk slots of it, of dQ and of the output and lse.
    std::sort(handed.begin(), handed.end());
    std::vector<int> every(std::size_t((rows + chunk - 1) / chunk));
    std::iota(every.begin(), every.end(), 0);
    QCOMPARE(handed, every);
    QVERIFY(chunked.memory().offloaded_bytes - offloaded >= rows * c * std::int64_t(sizeof(float)));
    QCOMPARE(chunked.memory().gradient_buffer_bytes,
             std::int64_t(2 * chunk * (3 * c + k.n_head) * sizeof(float)));
}

// The bytes FPDT's offloading passes move for one document of u chunks, as the simulator
// prices them (core/sim/pass_pricing.cpp, offload_bytes under Ulysses): forward Q|K|V out, the
// u(u − 1)/2 earlier K|V chunks in, the output and lse out; backward each K|V chunk in once,
// ∂L/∂o out once, and for each of the u(u + 1)/2 pairs Q, ∂L/∂o, output and lse in, and dQ in
// and out for all but a chunk's first and last pair and the one pair that hands it on.
void EngineLayersTest::offloadingPassesMoveWhatTheSimulatorPrices() {
    const ChunkCase k("one document", false);
    constexpr int chunk = 10;
    const std::int64_t c = k.c, heads = k.n_head, rows = k.q_rows, u = rows / chunk;
    QCOMPARE(rows, 40);
    CpuBackend backend(1);
    ChunkedAttention chunked(backend, c, heads, {chunk, true});
    const ChunkInputs in(backend, k);
    PinnedBuffer host_q = backend.allocate_pinned(std::size_t(rows * c));
    PinnedBuffer host_kv = backend.allocate_pinned(std::size_t(rows * 2 * c));
    PinnedBuffer host_out = backend.allocate_pinned(std::size_t(rows * (c + heads)));
    const QkvStore store{Tensor{},      Tensor{},       host_q.get(),
                         host_kv.get(), host_out.get(), host_out.get() + rows * c};
    QkvProjection projection = in.projection(k);
    projection.output = [](std::int64_t, std::int64_t, Tensor) {};
    chunked.forward(projection, Tensor{}, store, Tensor{}, Tensor{}, k.spans);
    const AttentionMemory forward = chunked.memory();
    const std::int64_t f = sizeof(float), pairs = u * (u + 1) / 2, dq_moves = pairs - u - 1;
    QCOMPARE(forward.offloaded_bytes, (rows * 3 * c + rows * (c + heads)) * f);
    QCOMPARE(forward.prefetched_bytes, u * (u - 1) / 2 * chunk * 2 * c * f);

    DeviceArray grads = zeros_f32(backend, {chunk, 3 * c});
    KvGradientChunks chunks;
    chunks.kv_rows = rows;
    chunks.rows = [&](int, std::int64_t count) {
        const Tensor g = grads.tensor.slice(0, count);
        return ChunkGradients{g.columns(0, c), g.columns(c, c), g.columns(2 * c, c)};
    };
    chunks.done = [](int, std::int64_t, std::int64_t) {};
    const OutputGradientSource dout = [&](std::int64_t first, std::int64_t count, Tensor to) {
        backend.copy(to, in.dout.tensor.slice(first, count));
    };
    chunked.backward(store, chunks, dout, Tensor{}, Tensor{}, k.spans);
    const AttentionMemory& total = chunked.memory();
    QCOMPARE(total.offloaded_bytes - forward.offloaded_bytes,
             (rows * c + dq_moves * chunk * c) * f);
    QCOMPARE(total.prefetched_bytes - forward.prefetched_bytes,
             (rows * 2 * c + pairs * chunk * (c + 2 * c + heads) + dq_moves * chunk * c) * f);
}

namespace {

// A backend that runs everything on a CpuBackend and writes down, in issue order, what orders
// the streams: kernels, copies, event records and waits, and host synchronisations.
class IssueLog final : public Backend {
public:
    struct Entry {
        std::string op;
        std::uint32_t stream = 0;
        std::uint32_t event = 0;
    };
    explicit IssueLog(CpuBackend& inner) : inner_(inner) {}
    std::vector<Entry> entries;

    Device device() const override { return Device::cpu; }
    std::string_view name() const override { return "issue log"; }
    void upload(Tensor dst, const void* host, StreamId s) override {
        log("upload", s);
        inner_.upload(dst, host, s);
    }
    void download(void* host, Tensor src, StreamId s) override {
        log("download", s);
        inner_.download(host, src, s);
    }
    void copy(Tensor dst, Tensor src) override { inner_.copy(dst, src); }
    void fill_zero(Tensor t) override { inner_.fill_zero(t); }
    StreamId create_stream(std::string_view name) override {
        streams_.push_back(inner_.create_stream(name));
        return streams_.back();
    }
    std::string_view stream_name(StreamId s) const override { return inner_.stream_name(s); }
    EventId create_event() override { return inner_.create_event(); }
    void record_event(EventId e, StreamId s) override {
        log("record", s, e);
        inner_.record_event(e, s);
    }
    void wait_event(StreamId s, EventId e) override {
        log("wait", s, e);
        inner_.wait_event(s, e);
    }
    void synchronize(StreamId s) override {
        log("synchronize", s);
        inner_.synchronize(s);
    }
    void embedding_forward(Tensor o, Tensor t, Tensor p, Tensor wte, Tensor wpe) override {
        inner_.embedding_forward(o, t, p, wte, wpe);
    }
    void embedding_backward(Tensor a, Tensor b, Tensor d, Tensor t, Tensor p) override {
        inner_.embedding_backward(a, b, d, t, p);
    }
    void layernorm_forward(Tensor o, Tensor m, Tensor r, Tensor i, Tensor w, Tensor b) override {
        inner_.layernorm_forward(o, m, r, i, w, b);
    }
    void layernorm_backward(Tensor di, Tensor dw, Tensor db, Tensor d, Tensor i, Tensor w, Tensor m,
                            Tensor r) override {
        inner_.layernorm_backward(di, dw, db, d, i, w, m, r);
    }
    void residual_forward(Tensor o, Tensor a, Tensor b) override {
        inner_.residual_forward(o, a, b);
    }
    void matmul_forward(Tensor o, Tensor i, Tensor w, Tensor b) override {
        log("matmul_forward", kComputeStream);
        inner_.matmul_forward(o, i, w, b);
    }
    void matmul_backward(Tensor di, Tensor dw, Tensor db, Tensor d, Tensor i, Tensor w) override {
        inner_.matmul_backward(di, dw, db, d, i, w);
    }
    void attention_forward(Tensor o, Tensor l, Tensor q, Tensor k, Tensor v,
                           std::span<const AttentionSpan> spans, int n_head) override {
        log("attention", kComputeStream);
        inner_.attention_forward(o, l, q, k, v, spans, n_head);
    }
    void attention_backward(Tensor dq, Tensor dk, Tensor dv, Tensor d, Tensor q, Tensor k, Tensor v,
                            Tensor o, Tensor l, std::span<const AttentionSpan> spans,
                            int n_head) override {
        log("attention", kComputeStream);
        inner_.attention_backward(dq, dk, dv, d, q, k, v, o, l, spans, n_head);
    }
    void attention_merge(Tensor o, Tensor l, Tensor po, Tensor pl, int n_head) override {
        inner_.attention_merge(o, l, po, pl, n_head);
    }
    void gelu_forward(Tensor o, Tensor i) override { inner_.gelu_forward(o, i); }
    void gelu_backward(Tensor di, Tensor d, Tensor i) override { inner_.gelu_backward(di, d, i); }
    void crossentropy_forward(Tensor l, Tensor p, Tensor g, Tensor t) override {
        inner_.crossentropy_forward(l, p, g, t);
    }
    void crossentropy_backward(Tensor d, Tensor p, Tensor t, float s) override {
        inner_.crossentropy_backward(d, p, t, s);
    }
    double sum_of_squares(Tensor x) override { return inner_.sum_of_squares(x); }
    void adamw_update(Tensor p, Tensor g, Tensor m, Tensor v, const AdamWStep& s) override {
        inner_.adamw_update(p, g, m, v, s);
    }

protected:
    void* allocate_raw(std::size_t bytes) override {
        void* data = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
        std::memset(data, 0, bytes);
        return data;
    }
    void release_raw(void* data) override {
        for (StreamId s : streams_) {
            inner_.synchronize(s);  // as CUDA's free: no copy still reads or writes it
        }
        std::free(data);
    }

private:
    void log(const char* op, StreamId s, EventId e = {}) {
        entries.push_back({op, s.index, e.index});
    }
    CpuBackend& inner_;
    std::vector<StreamId> streams_;
};

}  // namespace

// What the host issues with offload on, for one long document in five chunks: every copy to
// the host is followed by the next chunk's projection and attention before the compute stream
// waits for it (which it does only when it reuses the slot), every fetch is issued while
// attention it does not feed can still run, and nothing waits on the host.
void EngineLayersTest::chunkCopiesOverlapCompute() {
    CpuBackend cpu(1);
    cpu.set_copy_delay(std::chrono::microseconds(200));
    IssueLog log(cpu);
    const ChunkCase k("long and short", false);
    const int chunk = 8;  // the 37-token document in 5 chunks, 6 with the short one
    ChunkedAttention chunked(log, k.c, k.n_head, {chunk, true});
    const ChunkInputs in(log, k);
    PinnedBuffer host_q = cpu.allocate_pinned(std::size_t(k.q_rows * k.c));
    PinnedBuffer host_kv = cpu.allocate_pinned(std::size_t(k.kv_rows * 2 * k.c));
    const QkvStore store{Tensor{}, Tensor{}, host_q.get(), host_kv.get()};
    DeviceArray out = zeros_f32(log, {k.q_rows, k.c}), lse = zeros_f32(log, {k.q_rows, k.n_head});
    DeviceArray dq = zeros_f32(log, {k.q_rows, k.c}), dkv = zeros_f32(log, {k.kv_rows, 2 * k.c});
    log.entries.clear();
    chunked.forward(in.projection(k), Tensor{}, store, out.tensor, lse.tensor, k.spans);
    const std::size_t backward_begins = log.entries.size();
    chunked.backward(store, dq.tensor, dkv.tensor.columns(0, k.c), dkv.tensor.columns(k.c, k.c),
                     in.dout.tensor, out.tensor, lse.tensor, k.spans);
    const auto& e = log.entries;
    const std::uint32_t offload = chunked.offload_stream().index;
    const std::uint32_t prefetch = chunked.prefetch_stream().index;
    auto count = [&](std::size_t from, std::size_t to, const char* op) {
        return std::count_if(e.begin() + std::ptrdiff_t(from), e.begin() + std::ptrdiff_t(to),
                             [&](const IssueLog::Entry& x) { return x.op == op; });
    };
    // The compute stream's first wait for this record, before the event is recorded again.
    auto compute_wait = [&](std::size_t record) -> std::size_t {
        for (std::size_t n = record + 1; n < e.size(); ++n) {
            if (e[n].event != e[record].event) {
                continue;
            }
            if (e[n].op == "record") {
                return e.size();
            }
            if (e[n].op == "wait" && e[n].stream == 0) {
                return n;
            }
        }
        return e.size();
    };
    QCOMPARE(count(0, e.size(), "synchronize"), 0);
    int offloads = 0, waited_offloads = 0, fetches = 0;
    for (std::size_t n = 0; n < e.size(); ++n) {
        if (e[n].op != "record" || (e[n].stream != offload && e[n].stream != prefetch)) {
            continue;
        }
        const std::size_t wait = compute_wait(n);
        if (e[n].stream == offload) {
            ++offloads;
            if (wait < e.size()) {
                ++waited_offloads;
                // The next chunk's Q and K|V projections and its attention ran in between.
                QVERIFY2(count(n, wait, "matmul_forward") >= 2, "offload waited before reuse");
                QVERIFY(count(n, wait, "attention") >= 1);
            }
            continue;
        }
        ++fetches;
        QVERIFY2(wait < e.size(), "a fetch nobody waits for");
        // The first fetches of the backward have nothing before them here (the model's MLP
        // backward hides them); every other one overlaps an attention call.
        const bool first_of_backward =
            n >= backward_begins && count(backward_begins, n, "attention") == 0;
        if (!first_of_backward) {
            QVERIFY2(count(n, wait, "attention") >= 1, "a fetch waited for at once");
        }
    }
    QCOMPARE(offloads, 6);          // one per query chunk
    QVERIFY(waited_offloads >= 4);  // slots reused by chunks 2…5
    QVERIFY(fetches > 6);
}

// FPDT's pipeline (Ulysses): chunk i + 1 is prepared — its projection, and in the model its
// all-to-all left in flight — after chunk i's source and before chunk i's first attention
// call, once each, and the first chunk is sourced unprepared. Sourcing what the preparation
// made gives the same output bit for bit.
void EngineLayersTest::chunksArePreparedAhead_data() {
    QTest::addColumn<bool>("offload");
    QTest::newRow("offload") << true;
    QTest::newRow("resident") << false;
}

void EngineLayersTest::chunksArePreparedAhead() {
    QFETCH(bool, offload);
    CpuBackend cpu(1);
    IssueLog log(cpu);
    const ChunkCase k("long and short", false);
    const int chunk = 8;
    ChunkedAttention reference(cpu, k.c, k.n_head, {chunk, false});
    const ChunkResult expected = run_chunked(cpu, reference, k);
    ChunkedAttention chunked(log, k.c, k.n_head, {chunk, offload});
    const ChunkInputs in(log, k);
    const std::int64_t c = k.c, rows = k.q_rows;
    PinnedBuffer host_q = cpu.allocate_pinned(std::size_t(rows * c));
    PinnedBuffer host_kv = cpu.allocate_pinned(std::size_t(rows * 2 * c));
    DeviceArray q = zeros_f32(log, {rows, c}), kv = zeros_f32(log, {rows, 2 * c});
    const QkvStore store = offload ? QkvStore{Tensor{}, Tensor{}, host_q.get(), host_kv.get()}
                                   : QkvStore{q.tensor, kv.tensor, nullptr, nullptr};
    DeviceArray out = zeros_f32(log, {rows, c}), lse = zeros_f32(log, {rows, k.n_head});
    // What a preparation leaves.
    DeviceArray made_q = zeros_f32(log, {chunk, c}), made_kv = zeros_f32(log, {chunk, 2 * c});
    const QkvProjection whole = in.projection(k);
    QkvProjection projection;
    projection.rows = rows;
    std::int64_t prepared = -1;
    std::vector<std::int64_t> prepared_firsts, sourced_firsts;
    projection.prepare = [&](std::int64_t first, std::int64_t count) {
        QCOMPARE(prepared, std::int64_t(-1));  // one in flight at a time
        log.entries.push_back({"prepare"});
        prepared_firsts.push_back(first);
        const Tensor x = whole.input.slice(first, count);
        log.matmul_forward(made_q.tensor.slice(0, count), x, whole.q_weight, whole.q_bias);
        log.matmul_forward(made_kv.tensor.slice(0, count), x, whole.kv_weight, whole.kv_bias);
        prepared = first;
    };
    projection.source = [&](std::int64_t first, std::int64_t count, Tensor q_rows, Tensor kv_rows) {
        log.entries.push_back({"source"});
        sourced_firsts.push_back(first);
        if (prepared != first) {
            projection.prepare(first, count);
        }
        log.copy(q_rows, made_q.tensor.slice(0, count));
        log.copy(kv_rows, made_kv.tensor.slice(0, count));
        prepared = -1;
    };
    log.entries.clear();
    chunked.forward(projection, Tensor{}, store, out.tensor, lse.tensor, k.spans);
    QVERIFY(floats_of(cpu, out.tensor) == expected.out);
    QVERIFY(floats_of(cpu, lse.tensor) == expected.lse);
    const std::int64_t chunks = (rows + chunk - 1) / chunk;
    std::vector<std::int64_t> firsts;
    for (std::int64_t i = 0; i < chunks; ++i)
        firsts.push_back(i * chunk);
    QCOMPARE(sourced_firsts, firsts);
    QCOMPARE(prepared_firsts, firsts);  // the first by its source, every other ahead of it
    // In the log: source 0, prepare 0 (the source's own), then per chunk i: prepare i + 1
    // before chunk i's first attention call, and chunk i + 1's source only after that call.
    const auto& e = log.entries;
    std::vector<std::size_t> sources, prepares;
    for (std::size_t n = 0; n < e.size(); ++n) {
        if (e[n].op == "source")
            sources.push_back(n);
        if (e[n].op == "prepare")
            prepares.push_back(n);
    }
    QCOMPARE(std::int64_t(sources.size()), chunks);
    QVERIFY(prepares[0] > sources[0]);
    for (std::int64_t i = 0; i + 1 < chunks; ++i) {
        const std::size_t ahead = prepares[std::size_t(i + 1)];
        QVERIFY2(ahead > sources[std::size_t(i)] && ahead < sources[std::size_t(i + 1)],
                 qPrintable(QStringLiteral("chunk %1 prepared out of turn").arg(i + 1)));
        const auto attention =
            std::find_if(e.begin() + std::ptrdiff_t(sources[std::size_t(i)]), e.end(),
                         [](const IssueLog::Entry& x) { return x.op == "attention"; });
        QVERIFY(attention != e.end());
        QVERIFY2(std::size_t(attention - e.begin()) > ahead,
                 qPrintable(QStringLiteral("chunk %1's attention before chunk %2 was prepared")
                                .arg(i)
                                .arg(i + 1)));
    }
}

#include "test_engine_layers.moc"
