// The CUDA backend against the CPU backend (the reference): every kernel on the same small
// random inputs, forward and backward, with gradients ACCUMULATING into buffers that already
// hold values; then the whole model trained for a few steps on both. fp32 mode throughout
// except one bf16 GEMM check. Without a GPU (CI) these tests skip with the reason CUDA gave;
// only the fulcrum-train backend-selection tests run everywhere.
#include <QRegularExpression>
#include <QScopeGuard>
#include <QTest>

#include <QProcess>

#include <cmath>
#include <memory>
#include <string>

#include "../train/mpi_environment.h"
#include "engine/backend/cpu_backend.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/data/corpus.h"
#include "engine/data/packer.h"
#include "engine/model/chunked_attention.h"
#include "engine/model/gpt.h"
#include "engine/train/trainer.h"
#include "gradient_check.h"

using namespace fulcrum::engine;
using namespace fulcrum::engine::test;

namespace {

const QString kTrain = QStringLiteral(FULCRUM_BINARY_DIR "/engine/fulcrum-train");

// The same values on both backends.
struct Both {
    DeviceArray cpu, gpu;
};

}  // namespace

class CudaBackendTest : public QObject {
    Q_OBJECT

private slots:
    void initTestCase();
    void embedding();
    void layernorm();
    void residual();
    void matmul_data();
    void matmul();
    void matmulBf16();
    void attention_data();
    void attention();
    void attentionWithNoVisibleKey_data();
    void attentionWithNoVisibleKey();
    void chunkedAttentionWithOffload_data();
    void chunkedAttentionWithOffload();
    void gelu();
    void crossentropy();
    void sumOfSquares();
    void adamw();
    void streamsAndEvents();
    void modelTrainsLikeCpu();
    void modelPassesLikeCpu_data();
    void modelPassesLikeCpu();
    void autoFallsBackToCpu();
    void cudaWithoutGpuFails();
    void ranksSharingTheGpuTrainLikeCpu_data();
    void ranksSharingTheGpuTrainLikeCpu();
    void bf16LossTracksFp32();

private:
    bool gpu_ = false;
    std::string no_gpu_reason_;
    CpuBackend cpu_{1};
    std::unique_ptr<CudaBackend> cuda_;

    Both both(const std::vector<double>& values, std::initializer_list<std::int64_t> shape) {
        return {upload_f32(cpu_, values, shape), upload_f32(*cuda_, values, shape)};
    }
    Both both_i32(const std::vector<std::int32_t>& values) {
        return {upload_i32(cpu_, values), upload_i32(*cuda_, values)};
    }
    // ‖cuda − cpu‖ / ‖cpu‖ of one tensor.
    double error(const Both& b) { return error(b.cpu.tensor, b.gpu.tensor); }
    double error(const Tensor& cpu, const Tensor& gpu) {
        return relative_error(download_f64(*cuda_, gpu), download_f64(cpu_, cpu));
    }
};

#define REQUIRE_GPU()                                                                            \
    do {                                                                                         \
        if (!gpu_)                                                                               \
            QSKIP(qPrintable(                                                                    \
                QStringLiteral("needs a GPU: %1").arg(QString::fromStdString(no_gpu_reason_)))); \
    } while (false)

#define VERIFY_ERROR(value, tolerance, what)                             \
    do {                                                                 \
        const double fulcrum_err = (value);                              \
        QVERIFY2(fulcrum_err <= (tolerance),                             \
                 qPrintable(QStringLiteral("%1: relative error %2 > %3") \
                                .arg(what)                               \
                                .arg(fulcrum_err, 0, 'g', 3)             \
                                .arg(double(tolerance), 0, 'g', 3)));    \
    } while (false)

void CudaBackendTest::initTestCase() {
    gpu_ = cuda_device_available(&no_gpu_reason_);
    if (gpu_) {
        cuda_ = std::make_unique<CudaBackend>(Precision::fp32);
        qInfo("%s", cuda_->description().c_str());
    } else {
        qInfo("no GPU: %s", no_gpu_reason_.c_str());
    }
}

// Forward: one fp32 add per element, the same on both — identical up to nothing, 1e-7 leaves
// room only for a wrong index. Backward: atomics reorder the sums of the ~T/V rows that hit a
// byte; a few ulp of fp32 on sums of O(10) terms.
void CudaBackendTest::embedding() {
    REQUIRE_GPU();
    const int n = 96, c = 24, vocab = 256, context = 40;
    std::vector<std::int32_t> tokens(n), positions(n);
    for (int t = 0; t < n; ++t) {
        tokens[t] = (t * 37 + 11) % vocab;
        positions[t] = t % context;
    }
    Both tok = both_i32(tokens), pos = both_i32(positions);
    Both wte = both(random_values(vocab * c, 1), {vocab, c});
    Both wpe = both(random_values(context * c, 2), {context, c});
    Both out = both(std::vector<double>(n * c, 0.0), {n, c});
    cpu_.embedding_forward(out.cpu.tensor, tok.cpu.tensor, pos.cpu.tensor, wte.cpu.tensor,
                           wpe.cpu.tensor);
    cuda_->embedding_forward(out.gpu.tensor, tok.gpu.tensor, pos.gpu.tensor, wte.gpu.tensor,
                             wpe.gpu.tensor);
    VERIFY_ERROR(error(out), 1e-7, "embedding out");
    Both dout = both(random_values(n * c, 3), {n, c});
    Both dwte = both(random_values(vocab * c, 4), {vocab, c});  // accumulate onto these
    Both dwpe = both(random_values(context * c, 5), {context, c});
    cpu_.embedding_backward(dwte.cpu.tensor, dwpe.cpu.tensor, dout.cpu.tensor, tok.cpu.tensor,
                            pos.cpu.tensor);
    cuda_->embedding_backward(dwte.gpu.tensor, dwpe.gpu.tensor, dout.gpu.tensor, tok.gpu.tensor,
                              pos.gpu.tensor);
    VERIFY_ERROR(error(dwte), 1e-6, "dwte");
    VERIFY_ERROR(error(dwpe), 1e-6, "dwpe");
}

// Reductions over C = 72 channels in another order (warp tree vs sequential): relative
// differences of a few 1e-7 per statistic; dweight/dbias also sum 50 rows through atomics.
void CudaBackendTest::layernorm() {
    REQUIRE_GPU();
    const int n = 50, c = 72;
    Both inp = both(random_values(n * c, 10, 2.0, 0.5), {n, c});
    Both w = both(random_values(c, 11, 0.3, 1.0), {c});
    Both b = both(random_values(c, 12, 0.1), {c});
    Both out = both(std::vector<double>(n * c, 0.0), {n, c});
    Both mean = both(std::vector<double>(n, 0.0), {n});
    Both rstd = both(std::vector<double>(n, 0.0), {n});
    cpu_.layernorm_forward(out.cpu.tensor, mean.cpu.tensor, rstd.cpu.tensor, inp.cpu.tensor,
                           w.cpu.tensor, b.cpu.tensor);
    cuda_->layernorm_forward(out.gpu.tensor, mean.gpu.tensor, rstd.gpu.tensor, inp.gpu.tensor,
                             w.gpu.tensor, b.gpu.tensor);
    VERIFY_ERROR(error(out), 1e-5, "layernorm out");
    VERIFY_ERROR(error(mean), 1e-5, "layernorm mean");
    VERIFY_ERROR(error(rstd), 1e-5, "layernorm rstd");
    Both dout = both(random_values(n * c, 13), {n, c});
    Both dinp = both(random_values(n * c, 14), {n, c});
    Both dw = both(random_values(c, 15), {c});
    Both db = both(random_values(c, 16), {c});
    cpu_.layernorm_backward(dinp.cpu.tensor, dw.cpu.tensor, db.cpu.tensor, dout.cpu.tensor,
                            inp.cpu.tensor, w.cpu.tensor, mean.cpu.tensor, rstd.cpu.tensor);
    cuda_->layernorm_backward(dinp.gpu.tensor, dw.gpu.tensor, db.gpu.tensor, dout.gpu.tensor,
                              inp.gpu.tensor, w.gpu.tensor, mean.gpu.tensor, rstd.gpu.tensor);
    VERIFY_ERROR(error(dinp), 1e-5, "layernorm dinp");
    VERIFY_ERROR(error(dw), 1e-5, "layernorm dweight");
    VERIFY_ERROR(error(db), 1e-5, "layernorm dbias");
    // Zero Bubble's halves (layernorm.h): dinp alone, then dweight and dbias alone.
    Both dinp_only = both(random_values(n * c, 17), {n, c});
    Both dw_only = both(random_values(c, 18), {c});
    Both db_only = both(random_values(c, 19), {c});
    for (Backend* be : {static_cast<Backend*>(&cpu_), static_cast<Backend*>(cuda_.get())}) {
        const bool gpu = be != &cpu_;
        auto at = [gpu](const Both& x) { return gpu ? x.gpu.tensor : x.cpu.tensor; };
        be->layernorm_backward(at(dinp_only), Tensor{}, Tensor{}, at(dout), at(inp), at(w),
                               at(mean), at(rstd));
        be->layernorm_backward(Tensor{}, at(dw_only), at(db_only), at(dout), at(inp), at(w),
                               at(mean), at(rstd));
    }
    VERIFY_ERROR(error(dinp_only), 1e-5, "layernorm dinp alone");
    VERIFY_ERROR(error(dw_only), 1e-5, "layernorm dweight alone");
    VERIFY_ERROR(error(db_only), 1e-5, "layernorm dbias alone");
}

void CudaBackendTest::residual() {
    REQUIRE_GPU();
    const int n = 1000;
    Both a = both(random_values(n, 20), {n});
    Both b = both(random_values(n, 21), {n});
    cpu_.residual_forward(a.cpu.tensor, a.cpu.tensor, b.cpu.tensor);  // in place, as the model
    cuda_->residual_forward(a.gpu.tensor, a.gpu.tensor, b.gpu.tensor);
    VERIFY_ERROR(error(a), 1e-7, "residual");
}

void CudaBackendTest::matmul_data() {
    QTest::addColumn<int>("rows");
    QTest::addColumn<int>("in_ch");
    QTest::addColumn<int>("out_ch");
    QTest::addColumn<int>("stride");  // of inp and dout; 0: contiguous
    QTest::addColumn<bool>("bias");
    QTest::newRow("mlp, bias") << 37 << 48 << 192 << 0 << true;
    QTest::newRow("lm head, no bias") << 29 << 32 << 256 << 0 << false;
    // The attention output projection reads a column block of a wider array.
    QTest::newRow("strided input") << 33 << 40 << 24 << 120 << true;
}

// cuBLAS in CUBLAS_COMPUTE_32F against OpenBLAS: both fp32 FMAs over K ≤ 192 terms in
// different blockings; 1e-5 relative is ~100 ulp of headroom on the norm.
void CudaBackendTest::matmul() {
    REQUIRE_GPU();
    QFETCH(int, rows);
    QFETCH(int, in_ch);
    QFETCH(int, out_ch);
    QFETCH(int, stride);
    QFETCH(bool, bias);
    const int inp_cols = stride > 0 ? stride : in_ch;
    const int dout_cols = stride > 0 ? std::max(stride, out_ch) : out_ch;
    Both inp_full = both(random_values(rows * inp_cols, 30), {rows, inp_cols});
    Both dout_full = both(random_values(rows * dout_cols, 31), {rows, dout_cols});
    const Tensor inp_cpu = inp_full.cpu.tensor.columns(0, in_ch);
    const Tensor inp_gpu = inp_full.gpu.tensor.columns(0, in_ch);
    const Tensor dout_cpu = dout_full.cpu.tensor.columns(0, out_ch);
    const Tensor dout_gpu = dout_full.gpu.tensor.columns(0, out_ch);
    Both w = both(random_values(out_ch * in_ch, 32, 0.2), {out_ch, in_ch});
    Both b = both(random_values(out_ch, 33), {out_ch});
    Both out = both(std::vector<double>(rows * out_ch, 0.0), {rows, out_ch});
    cpu_.matmul_forward(out.cpu.tensor, inp_cpu, w.cpu.tensor, bias ? b.cpu.tensor : Tensor{});
    cuda_->matmul_forward(out.gpu.tensor, inp_gpu, w.gpu.tensor, bias ? b.gpu.tensor : Tensor{});
    VERIFY_ERROR(error(out), 1e-5, "matmul out");
    Both dinp = both(random_values(rows * in_ch, 34), {rows, in_ch});
    Both dw = both(random_values(out_ch * in_ch, 35), {out_ch, in_ch});
    Both db = both(random_values(out_ch, 36), {out_ch});
    cpu_.matmul_backward(dinp.cpu.tensor, dw.cpu.tensor, bias ? db.cpu.tensor : Tensor{}, dout_cpu,
                         inp_cpu, w.cpu.tensor);
    cuda_->matmul_backward(dinp.gpu.tensor, dw.gpu.tensor, bias ? db.gpu.tensor : Tensor{},
                           dout_gpu, inp_gpu, w.gpu.tensor);
    VERIFY_ERROR(error(dinp), 1e-5, "matmul dinp");
    VERIFY_ERROR(error(dw), 1e-5, "matmul dweight");
    VERIFY_ERROR(error(db), 1e-5, "matmul dbias");
    // Zero Bubble's halves (matmul.h): dinp alone (no input needed), then dW and db alone.
    Both dinp_only = both(random_values(rows * in_ch, 37), {rows, in_ch});
    Both dw_only = both(random_values(out_ch * in_ch, 38), {out_ch, in_ch});
    Both db_only = both(random_values(out_ch, 39), {out_ch});
    cpu_.matmul_backward(dinp_only.cpu.tensor, Tensor{}, Tensor{}, dout_cpu, Tensor{},
                         w.cpu.tensor);
    cuda_->matmul_backward(dinp_only.gpu.tensor, Tensor{}, Tensor{}, dout_gpu, Tensor{},
                           w.gpu.tensor);
    cpu_.matmul_backward(Tensor{}, dw_only.cpu.tensor, bias ? db_only.cpu.tensor : Tensor{},
                         dout_cpu, inp_cpu, w.cpu.tensor);
    cuda_->matmul_backward(Tensor{}, dw_only.gpu.tensor, bias ? db_only.gpu.tensor : Tensor{},
                           dout_gpu, inp_gpu, w.gpu.tensor);
    VERIFY_ERROR(error(dinp_only), 1e-5, "matmul dinp alone");
    VERIFY_ERROR(error(dw_only), 1e-5, "matmul dweight alone");
    VERIFY_ERROR(error(db_only), 1e-5, "matmul dbias alone");
}

// bf16 mode: operands rounded to bf16 (8 significant bits: relative error ≤ 2⁻⁹ each), fp32
// accumulation. Over random-sign sums the error of the result's norm is about 2⁻⁹·√2 ≈ 3e-3;
// 1e-2 bounds it, and a mapping error (wrong transpose) would give O(1).
void CudaBackendTest::matmulBf16() {
    REQUIRE_GPU();
    CudaBackend bf16(Precision::bf16);
    const int rows = 64, in_ch = 128, out_ch = 96;
    const auto inp_values = random_values(rows * in_ch, 40);
    const auto w_values = random_values(out_ch * in_ch, 41, 0.1);
    DeviceArray inp_cpu = upload_f32(cpu_, inp_values, {rows, in_ch});
    DeviceArray w_cpu = upload_f32(cpu_, w_values, {out_ch, in_ch});
    DeviceArray out_cpu = zeros_f32(cpu_, {rows, out_ch});
    DeviceArray inp_gpu = upload_f32(bf16, inp_values, {rows, in_ch});
    DeviceArray w_gpu = upload_f32(bf16, w_values, {out_ch, in_ch});
    DeviceArray out_gpu = zeros_f32(bf16, {rows, out_ch});
    cpu_.matmul_forward(out_cpu.tensor, inp_cpu.tensor, w_cpu.tensor, Tensor{});
    bf16.matmul_forward(out_gpu.tensor, inp_gpu.tensor, w_gpu.tensor, Tensor{});
    const double err =
        relative_error(download_f64(bf16, out_gpu.tensor), download_f64(cpu_, out_cpu.tensor));
    qInfo("bf16 GEMM vs fp32: relative error %.2e", err);
    VERIFY_ERROR(err, 1e-2, "bf16 matmul out");
}

// Each case on both paths: the tiled kernels alone (dense rows 0), and cuBLAS for every span
// of 16 rows or more (dense_attention.cuh), the shorter ones tiled in the same call.
void CudaBackendTest::attention_data() {
    QTest::addColumn<int>("n_head");
    QTest::addColumn<int>("head_size");
    QTest::addColumn<bool>("context_parallel");
    QTest::addColumn<QList<int>>("lengths");  // the packed documents (not cp)
    QTest::addColumn<int>("dense_rows");
    const QList<int> packed = {70, 1, 33, 96};
    for (const auto& [path, rows] : {std::pair{"tiled", 0}, std::pair{"cuBLAS", 16}}) {
        auto name = [&](const char* what) { return QString("%1, %2").arg(what, path).toUtf8(); };
        QTest::newRow(name("hs 16, packed documents").constData())
            << 4 << 16 << false << packed << rows;
        QTest::newRow(name("hs 64, packed documents").constData())
            << 2 << 64 << false << packed << rows;
        QTest::newRow(name("hs 24 (padded to 32), cp spans").constData())
            << 3 << 24 << true << packed << rows;
        QTest::newRow(name("hs 128, cp spans").constData()) << 1 << 128 << true << packed << rows;
        // Three blocks of query rows on the cuBLAS path (512, 512, 76), each with its own keys.
        QTest::newRow(name("hs 32, a 1100-token document").constData())
            << 3 << 32 << false << QList<int>{1100, 5} << rows;
    }
}

// Packed documents longer than one tile (70 > 64 query rows, > 32-row key tiles) and a
// one-token document; Q/K/V as column blocks of one [T, 3C] array, as the model passes them.
// The cp rows: a rank's two chunks of one document (prefix 0 and 50) against K/V gathered for
// the whole document, so dk/dv rows receive gradients from two spans. fp32 both; the online
// softmax rescales once per 32 keys where the CPU normalises once: 1e-5 forward; backward
// sums ~100 terms per element in another order, dk/dv through atomics: 1e-5.
void CudaBackendTest::attention() {
    REQUIRE_GPU();
    QFETCH(int, n_head);
    QFETCH(int, head_size);
    QFETCH(bool, context_parallel);
    QFETCH(QList<int>, lengths);
    QFETCH(int, dense_rows);
    cuda_->set_dense_attention_rows(dense_rows);
    const auto restore =
        qScopeGuard([&] { cuda_->set_dense_attention_rows(CudaBackend::kDenseAttentionRows); });
    const int c = n_head * head_size;
    std::vector<AttentionSpan> spans;
    int tq = 0, tkv = 0;
    if (!context_parallel) {
        for (int length : lengths) {
            spans.push_back({tq, tq, 0, length});
            tq += length;
        }
        tkv = tq;
    } else {
        // Document A of 120 tokens: chunks [0, 30) and [50, 100) on this rank; document B of 40
        // tokens: chunk [10, 40).
        spans = {{0, 0, 0, 30}, {30, 0, 50, 50}, {80, 120, 10, 30}};
        tq = 110;
        tkv = 160;
    }
    Both qkv = both(random_values(tq * 3 * c, 50, 0.8), {tq, 3 * c});
    Both kv = both(random_values(tkv * 2 * c, 51, 0.8), {tkv, 2 * c});
    auto views = [&](DeviceArray& q_array, DeviceArray& kv_array) {
        const Tensor q = q_array.tensor.columns(0, c);
        if (!context_parallel)
            return std::array<Tensor, 3>{q, q_array.tensor.columns(c, c),
                                         q_array.tensor.columns(2 * c, c)};
        return std::array<Tensor, 3>{q, kv_array.tensor.columns(0, c),
                                     kv_array.tensor.columns(c, c)};
    };
    const auto [q_cpu, k_cpu, v_cpu] = views(qkv.cpu, kv.cpu);
    const auto [q_gpu, k_gpu, v_gpu] = views(qkv.gpu, kv.gpu);
    Both out = both(std::vector<double>(tq * c, 0.0), {tq, c});
    Both lse = both(std::vector<double>(tq * n_head, 0.0), {tq, n_head});
    cpu_.attention_forward(out.cpu.tensor, lse.cpu.tensor, q_cpu, k_cpu, v_cpu, spans, n_head);
    cuda_->attention_forward(out.gpu.tensor, lse.gpu.tensor, q_gpu, k_gpu, v_gpu, spans, n_head);
    VERIFY_ERROR(error(out), 1e-5, "attention out");
    VERIFY_ERROR(error(lse), 1e-5, "attention lse");

    Both dout = both(random_values(tq * c, 52), {tq, c});
    // Gradients into one [rows, 3C] (or Q [Tq, C] + KV [Tkv, 2C]) array holding values already.
    Both dqkv = both(random_values(tq * 3 * c, 53), {tq, 3 * c});
    Both dkv = both(random_values(tkv * 2 * c, 54), {tkv, 2 * c});
    const auto [dq_cpu, dk_cpu, dv_cpu] = views(dqkv.cpu, dkv.cpu);
    const auto [dq_gpu, dk_gpu, dv_gpu] = views(dqkv.gpu, dkv.gpu);
    cpu_.attention_backward(dq_cpu, dk_cpu, dv_cpu, dout.cpu.tensor, q_cpu, k_cpu, v_cpu,
                            out.cpu.tensor, lse.cpu.tensor, spans, n_head);
    cuda_->attention_backward(dq_gpu, dk_gpu, dv_gpu, dout.gpu.tensor, q_gpu, k_gpu, v_gpu,
                              out.gpu.tensor, lse.gpu.tensor, spans, n_head);
    VERIFY_ERROR(error(dqkv), 1e-5, "attention dq/dk/dv");
    VERIFY_ERROR(error(dkv), 1e-5, "attention dk/dv (gathered)");
}

// A key window that starts after the span's last query (check_attention_spans allows it): no
// query sees a key, so out = 0, lse = −inf, and the backward adds nothing to the gradients. On
// the GPU the backward then has no key tiles, and an empty dk/dv grid fails to launch: the
// launcher must skip it. Both backends from the same values; the gradients, which hold values
// already, must come back bit for bit.
void CudaBackendTest::attentionWithNoVisibleKey_data() {
    QTest::addColumn<int>("dense_rows");
    QTest::newRow("tiled") << 0;
    QTest::newRow("cuBLAS path asked") << 16;  // a block that sees nothing goes to the tiles
}

void CudaBackendTest::attentionWithNoVisibleKey() {
    REQUIRE_GPU();
    QFETCH(int, dense_rows);
    cuda_->set_dense_attention_rows(dense_rows);
    const auto restore =
        qScopeGuard([&] { cuda_->set_dense_attention_rows(CudaBackend::kDenseAttentionRows); });
    const int n_head = 2, head_size = 16, c = n_head * head_size, tq = 20, tkv = 60;
    AttentionSpan span{0, 0, 0, tq};
    span.key_begin = 30;
    span.key_end = 60;
    const std::vector<AttentionSpan> spans = {span};
    Both q = both(random_values(tq * c, 70), {tq, c});
    Both kv = both(random_values(tkv * 2 * c, 71), {tkv, 2 * c});
    Both out = both(random_values(tq * c, 72), {tq, c});
    Both lse = both(std::vector<double>(tq * n_head, 0.0), {tq, n_head});
    const Tensor k_gpu = kv.gpu.tensor.columns(0, c), v_gpu = kv.gpu.tensor.columns(c, c);
    cuda_->attention_forward(out.gpu.tensor, lse.gpu.tensor, q.gpu.tensor, k_gpu, v_gpu, spans,
                             n_head);
    for (double value : download_f64(*cuda_, out.gpu.tensor))
        QCOMPARE(value, 0.0);
    for (double value : download_f64(*cuda_, lse.gpu.tensor))
        QVERIFY(std::isinf(value) && value < 0);

    Both dout = both(random_values(tq * c, 73), {tq, c});
    Both dq = both(random_values(tq * c, 74), {tq, c});
    Both dkv = both(random_values(tkv * 2 * c, 75), {tkv, 2 * c});
    cuda_->attention_backward(dq.gpu.tensor, dkv.gpu.tensor.columns(0, c),
                              dkv.gpu.tensor.columns(c, c), dout.gpu.tensor, q.gpu.tensor, k_gpu,
                              v_gpu, out.gpu.tensor, lse.gpu.tensor, spans, n_head);
    QCOMPARE(error(dq), 0.0);  // the CPU copies were never touched: the values uploaded
    QCOMPARE(error(dkv), 0.0);
}

// FPDT-style chunks on the GPU (chunked_attention.h: per-chunk QKV projection, key windows,
// merge, every chunk's Q/K/V to pinned memory on the "offload" stream, double-buffered fetches
// on "prefetch", the backward with K/V chunks outer and query chunks inner) against whole GEMMs
// and one attention call on the CPU; the same comparison the CPU-only test makes
// (test_engine_layers), now with real asynchronous copies: a missing event would let a chunk
// compute on a half-copied slot, or a slot be overwritten while it is copied out.
void CudaBackendTest::chunkedAttentionWithOffload_data() {
    QTest::addColumn<int>("dense_rows");
    QTest::newRow("tiled") << 0;
    QTest::newRow("cuBLAS") << 16;  // 64-row chunks against key windows
}

void CudaBackendTest::chunkedAttentionWithOffload() {
    REQUIRE_GPU();
    QFETCH(int, dense_rows);
    cuda_->set_dense_attention_rows(dense_rows);
    const auto restore =
        qScopeGuard([&] { cuda_->set_dense_attention_rows(CudaBackend::kDenseAttentionRows); });
    const int n_head = 2, head_size = 32, c = n_head * head_size;
    // A 700-token document (11 chunks of 64) and a 40-token one across a chunk boundary.
    const std::vector<AttentionSpan> spans = {{0, 0, 0, 700}, {700, 700, 0, 40}};
    const int rows = 740, chunk = 64;
    Both x = both(random_values(rows * c, 60, 0.8), {rows, c});
    Both weight = both(random_values(3 * c * c, 62, 0.15), {3 * c, c});
    Both bias = both(random_values(3 * c, 63, 0.1), {3 * c});
    Both dout = both(random_values(rows * c, 61), {rows, c});
    Both q = both(std::vector<double>(rows * c, 0.0), {rows, c});
    Both kv = both(std::vector<double>(rows * 2 * c, 0.0), {rows, 2 * c});
    Both out = both(std::vector<double>(rows * c, 0.0), {rows, c});
    Both lse = both(std::vector<double>(rows * n_head, 0.0), {rows, n_head});
    Both dq = both(std::vector<double>(rows * c, 0.0), {rows, c});
    Both dkv = both(std::vector<double>(rows * 2 * c, 0.0), {rows, 2 * c});
    auto half = [&](const Tensor& t, int block) { return t.columns(block * c, c); };
    const Tensor& w = weight.cpu.tensor;
    const Tensor& b = bias.cpu.tensor;
    cpu_.matmul_forward(q.cpu.tensor, x.cpu.tensor, w.slice(0, c), b.slice(0, c));
    cpu_.matmul_forward(kv.cpu.tensor, x.cpu.tensor, w.slice(c, 2 * c), b.slice(c, 2 * c));
    cpu_.attention_forward(out.cpu.tensor, lse.cpu.tensor, q.cpu.tensor, half(kv.cpu.tensor, 0),
                           half(kv.cpu.tensor, 1), spans, n_head);
    cpu_.attention_backward(dq.cpu.tensor, half(dkv.cpu.tensor, 0), half(dkv.cpu.tensor, 1),
                            dout.cpu.tensor, q.cpu.tensor, half(kv.cpu.tensor, 0),
                            half(kv.cpu.tensor, 1), out.cpu.tensor, lse.cpu.tensor, spans, n_head);

    ChunkedAttention chunked(*cuda_, c, n_head, {chunk, true});
    PinnedBuffer host_q = cuda_->allocate_pinned(std::size_t(rows) * c);
    PinnedBuffer host_kv = cuda_->allocate_pinned(std::size_t(rows) * 2 * c);
    const QkvStore store{Tensor{}, Tensor{}, host_q.get(), host_kv.get()};
    const Tensor& gw = weight.gpu.tensor;
    const Tensor& gb = bias.gpu.tensor;
    QkvProjection projection;
    projection.input = x.gpu.tensor;
    projection.q_weight = gw.slice(0, c);
    projection.q_bias = gb.slice(0, c);
    projection.kv_weight = gw.slice(c, 2 * c);
    projection.kv_bias = gb.slice(c, 2 * c);
    chunked.forward(projection, Tensor{}, store, out.gpu.tensor, lse.gpu.tensor, spans);
    chunked.backward(store, dq.gpu.tensor, half(dkv.gpu.tensor, 0), half(dkv.gpu.tensor, 1),
                     dout.gpu.tensor, out.gpu.tensor, lse.gpu.tensor, spans);
    // What waited in pinned memory is the projection.
    cuda_->synchronize(chunked.offload_stream());
    cuda_->upload(q.gpu.tensor, host_q.get(), kComputeStream);
    cuda_->upload(kv.gpu.tensor, host_kv.get(), kComputeStream);
    VERIFY_ERROR(error(q), 1e-5, "chunked attention q");
    VERIFY_ERROR(error(kv), 1e-5, "chunked attention k|v");
    VERIFY_ERROR(error(out), 1e-5, "chunked attention out");
    VERIFY_ERROR(error(lse), 1e-5, "chunked attention lse");
    VERIFY_ERROR(error(dq), 1e-5, "chunked attention dq");
    VERIFY_ERROR(error(dkv), 1e-5, "chunked attention dk/dv");
    QCOMPARE(chunked.memory().offloaded_bytes, std::int64_t(rows) * 3 * c * 4);
    QCOMPARE(chunked.memory().double_buffer_bytes, std::int64_t(2) * chunk * 3 * c * 4);
}

// tanhf against glibc's tanh: ≤ 2 ulp apart.
void CudaBackendTest::gelu() {
    REQUIRE_GPU();
    const int n = 4096;
    Both inp = both(random_values(n, 60, 3.0), {n});
    Both out = both(std::vector<double>(n, 0.0), {n});
    cpu_.gelu_forward(out.cpu.tensor, inp.cpu.tensor);
    cuda_->gelu_forward(out.gpu.tensor, inp.gpu.tensor);
    VERIFY_ERROR(error(out), 1e-6, "gelu out");
    Both dout = both(random_values(n, 61), {n});
    Both dinp = both(random_values(n, 62), {n});
    cpu_.gelu_backward(dinp.cpu.tensor, dout.cpu.tensor, inp.cpu.tensor);
    cuda_->gelu_backward(dinp.gpu.tensor, dout.gpu.tensor, inp.gpu.tensor);
    VERIFY_ERROR(error(dinp), 1e-6, "gelu dinp");
}

// Softmax over V = 256 with a block reduction vs a sequential one; rows without a target.
void CudaBackendTest::crossentropy() {
    REQUIRE_GPU();
    const int n = 20, vocab = 256;
    std::vector<std::int32_t> targets(n);
    for (int r = 0; r < n; ++r)
        targets[r] = r % 7 == 3 ? kernels::kNoTarget : (r * 53) % vocab;
    Both tgt = both_i32(targets);
    Both logits = both(random_values(n * vocab, 70, 3.0), {n, vocab});
    Both losses = both(std::vector<double>(n, 0.0), {n});
    // probs aliases logits, as in the model.
    cpu_.crossentropy_forward(losses.cpu.tensor, logits.cpu.tensor, logits.cpu.tensor,
                              tgt.cpu.tensor);
    cuda_->crossentropy_forward(losses.gpu.tensor, logits.gpu.tensor, logits.gpu.tensor,
                                tgt.gpu.tensor);
    VERIFY_ERROR(error(losses), 1e-6, "losses");
    VERIFY_ERROR(error(logits), 1e-6, "probs");
    Both dlogits = both(random_values(n * vocab, 71, 0.01), {n, vocab});
    cpu_.crossentropy_backward(dlogits.cpu.tensor, logits.cpu.tensor, tgt.cpu.tensor, 0.05f);
    cuda_->crossentropy_backward(dlogits.gpu.tensor, logits.gpu.tensor, tgt.gpu.tensor, 0.05f);
    VERIFY_ERROR(error(dlogits), 1e-6, "dlogits");
}

// Both sum exact fp32 squares in double; only the order differs (≈ 1e-16 relative).
void CudaBackendTest::sumOfSquares() {
    REQUIRE_GPU();
    for (int n : {1, 1000, 300001}) {
        Both x = both(random_values(n, 80 + n), {n});
        const double cpu = cpu_.sum_of_squares(x.cpu.tensor);
        const double gpu = cuda_->sum_of_squares(x.gpu.tensor);
        QVERIFY2(
            std::abs(gpu - cpu) <= 1e-12 * cpu,
            qPrintable(
                QStringLiteral("n %1: %2 vs %3").arg(n).arg(gpu, 0, 'g', 17).arg(cpu, 0, 'g', 17)));
    }
}

// The same float operations; sqrt and division are correctly rounded on both.
void CudaBackendTest::adamw() {
    REQUIRE_GPU();
    const int n = 5000;
    Both p = both(random_values(n, 90), {n});
    Both m = both(std::vector<double>(n, 0.0), {n});
    Both v = both(std::vector<double>(n, 0.0), {n});
    AdamWStep step;
    step.learning_rate = 0.01f;
    step.weight_decay = 0.1f;
    step.grad_scale = 0.7f;
    for (int t = 1; t <= 3; ++t) {
        Both g = both(random_values(n, 90 + t), {n});
        step.step = t;
        cpu_.adamw_update(p.cpu.tensor, g.cpu.tensor, m.cpu.tensor, v.cpu.tensor, step);
        cuda_->adamw_update(p.gpu.tensor, g.gpu.tensor, m.gpu.tensor, v.gpu.tensor, step);
    }
    VERIFY_ERROR(error(p), 1e-6, "parameters");
    VERIFY_ERROR(error(m), 1e-6, "first moment");
    VERIFY_ERROR(error(v), 1e-6, "second moment");
}

// A copy on a second stream ordered after compute work by an event, without a host wait.
void CudaBackendTest::streamsAndEvents() {
    REQUIRE_GPU();
    const StreamId side = cuda_->create_stream("copy");
    QCOMPARE(std::string(cuda_->stream_name(side)), std::string("copy"));
    QCOMPARE(std::string(cuda_->stream_name(kComputeStream)), std::string("compute"));
    const int n = 1 << 20;
    DeviceArray a = upload_f32(*cuda_, random_values(n, 100), {n});
    DeviceArray b = upload_f32(*cuda_, random_values(n, 101), {n});
    cuda_->residual_forward(a.tensor, a.tensor, b.tensor);
    const EventId done = cuda_->create_event();
    cuda_->record_event(done, kComputeStream);
    cuda_->wait_event(side, done);
    std::vector<float> host(n);
    cuda_->download(host.data(), a.tensor, side);
    const std::vector<double> expected = download_f64(*cuda_, a.tensor);
    QCOMPARE(double(host[12345]), expected[12345]);
}

// The whole model, 3 AdamW steps on real text, fp32 on both: every kernel above in sequence,
// plus the model's own use of views and accumulation. Losses agree to ~1e-6 relative at
// step 1 and drift apart slowly through the optimizer (AdamW's m/√v amplifies tiny gradient
// differences of near-zero entries), so 1e-4 on losses and 1e-3 on the final parameters.
void CudaBackendTest::modelTrainsLikeCpu() {
    REQUIRE_GPU();
    auto corpus = load_text_corpus("/usr/share/common-licenses", DocumentSplit::file);
    QVERIFY(corpus.ok());
    ModelShape config;
    config.layers = 2;
    config.hidden = 64;
    config.heads = 4;
    config.context = 128;
    TrainConfig train;
    train.adamw.learning_rate = 1e-3f;
    GptModel cpu_model(cpu_, config), gpu_model(*cuda_, config);
    cpu_model.initialize(7);
    gpu_model.initialize(7);
    SerialTrainer cpu_trainer(cpu_model, train), gpu_trainer(gpu_model, train);
    MicroBatchSampler sampler(*corpus, PackingConfig{128, 2, 3});
    for (int s = 0; s < 3; ++s) {
        const std::vector<TokenBatch> batches = {sampler.next(), sampler.next()};
        const StepReport cpu = cpu_trainer.step(batches);
        const StepReport gpu = gpu_trainer.step(batches);
        qInfo("step %d: loss cpu %.7f cuda %.7f, grad norm cpu %.6f cuda %.6f", s + 1, cpu.loss,
              gpu.loss, cpu.grad_norm, gpu.grad_norm);
        QVERIFY(std::abs(gpu.loss - cpu.loss) <= 1e-4 * cpu.loss);
        QVERIFY(std::abs(gpu.grad_norm - cpu.grad_norm) <= 1e-3 * cpu.grad_norm);
    }
    const std::vector<float> p_cpu = cpu_model.parameters_to_host();
    const std::vector<float> p_gpu = gpu_model.parameters_to_host();
    VERIFY_ERROR(relative_error(std::vector<double>(p_gpu.begin(), p_gpu.end()),
                                std::vector<double>(p_cpu.begin(), p_cpu.end())),
                 1e-3, "parameters after 3 steps");
}

// Recomputation and the split backward (gpt.h, recompute.h) on the GPU against the CPU: one
// micro-batch's forward and backward (B then W when split), gradients compared norm-wise as
// the kernels above are (fp32 mode; reductions in other orders).
void CudaBackendTest::modelPassesLikeCpu_data() {
    QTest::addColumn<int>("recompute");
    QTest::addColumn<bool>("split");
    QTest::addColumn<int>("chunk");
    QTest::newRow("selective") << int(Recompute::selective) << false << 0;
    QTest::newRow("full, chunks with offload") << int(Recompute::full) << false << 16;
    QTest::newRow("split") << int(Recompute::none) << true << 0;
    QTest::newRow("split, full") << int(Recompute::full) << true << 0;
}

void CudaBackendTest::modelPassesLikeCpu() {
    REQUIRE_GPU();
    QFETCH(int, recompute);
    QFETCH(bool, split);
    QFETCH(int, chunk);
    auto corpus = load_text_corpus("/usr/share/common-licenses", DocumentSplit::file);
    QVERIFY(corpus.ok());
    ModelShape config;
    config.layers = 2;
    config.hidden = 64;
    config.heads = 4;
    config.context = 128;
    MicroBatchSampler sampler(*corpus, PackingConfig{128, 1, 5});
    const TokenBatch batch = sampler.next();
    auto gradients = [&](Backend& backend) {
        GptModel model(backend, config);
        model.initialize(9);
        model.set_attention_chunking({chunk, true});
        model.set_recompute(Recompute(recompute));
        model.set_split_backward(split);
        model.zero_gradients();
        Activations acts(model);
        model.forward(batch, acts);
        const float scale = 1.0f / float(batch.target_count());
        if (split) {
            model.backward_head(acts, scale, BackwardPart::input_gradients);
            model.backward_blocks(0, config.layers, acts, BackwardPart::input_gradients);
            model.backward_embedding(acts);
            model.backward_weights_blocks(0, config.layers, acts);
            model.backward_weights_head(acts);
        } else {
            model.backward(acts, scale);
        }
        const std::vector<float> g = model.gradients_to_host();
        return std::vector<double>(g.begin(), g.end());
    };
    VERIFY_ERROR(relative_error(gradients(*cuda_), gradients(cpu_)), 1e-4, "gradients");
}

namespace {

struct Run {
    int exit_code = -1;
    QString output;
};

Run run_train(const QStringList& args) {
    QProcess process;
    process.setProcessEnvironment(mpi_environment());
    process.setProcessChannelMode(QProcess::MergedChannels);
    process.start(kTrain,
                  QStringList{"--steps", "1", "--layers", "1", "--hidden", "32", "--heads", "2",
                              "--context", "64", "--micro-batches", "1", "--documents", "64"} +
                      args);
    Run run;
    if (!process.waitForFinished(120000)) {
        process.kill();
        process.waitForFinished();
        return run;
    }
    run.exit_code = process.exitStatus() == QProcess::NormalExit ? process.exitCode() : -1;
    run.output = QString::fromUtf8(process.readAll());
    return run;
}

}  // namespace

// Runs everywhere: without a GPU, --backend auto says so once and trains on the CPU; with one,
// it trains on CUDA and says nothing about falling back.
void CudaBackendTest::autoFallsBackToCpu() {
    const Run run = run_train({"--backend", "auto"});
    QVERIFY2(run.exit_code == 0, qPrintable(run.output));
    QCOMPARE(run.output.count("no GPU found; using the CPU backend"), gpu_ ? 0 : 1);
    QVERIFY2(run.output.contains("done: 1 steps"), qPrintable(run.output));
    if (gpu_)
        QVERIFY2(run.output.contains("backend: cuda"), qPrintable(run.output));
}

void CudaBackendTest::cudaWithoutGpuFails() {
    if (gpu_)
        QSKIP("a GPU is present: --backend cuda trains (modelTrainsLikeCpu covers the backend)");
    const Run run = run_train({"--backend", "cuda"});
    QCOMPARE(run.exit_code, 2);
    QCOMPARE(run.output.count("fulcrum-train: error: --backend cuda: no usable GPU"), 1);
}

void CudaBackendTest::ranksSharingTheGpuTrainLikeCpu_data() {
    QTest::addColumn<QStringList>("layout");
    QTest::newRow("pp2") << QStringList{"--pp", "2"};
    // Ulysses' all-to-alls (strided copies into the staging: cudaMemcpy2DAsync) and the
    // checkpoints' copies on their own streams, each waiting on the compute stream's events;
    // ZeRO-3's gathers of unequal parts into the buffers the next pass reads.
    QTest::newRow("cp2 ulysses, offloaded checkpoints, zero 3") << QStringList{
        "--cp",     "2", "--cp-impl", "ulysses", "--recompute", "full", "--offload-checkpoints",
        "--layers", "4", "--zero",    "3"};
    // FPDT's pipeline: each chunk's all-to-all into the attention's slot, its Q, K, V copied
    // out on the offload stream, dQ|dK|dV back a chunk at a time, on FPDT's input order.
    QTest::newRow("cp2 ulysses fpdt chunks 32 chunked shards") << QStringList{
        "--cp",       "2",       "--cp-impl",   "ulysses", "--attention-chunk",    "32",
        "--cp-shard", "chunked", "--recompute", "full",    "--offload-checkpoints"};
}

// Two ranks on one GPU, device buffers staged through host memory over MPI (NCCL refuses two
// ranks on one GPU), in fp32 against the same layout on the CPU: the same losses.
void CudaBackendTest::ranksSharingTheGpuTrainLikeCpu() {
    REQUIRE_GPU();
    QFETCH(QStringList, layout);
    // The row's options replace the common ones they name: fulcrum-train refuses one twice.
    QStringList common = {"--steps", "3", "--layers",  "2",   "--hidden",    "64",
                          "--heads", "2", "--context", "128", "--documents", "256"};
    for (qsizetype i = 0; i < layout.size(); ++i) {
        const bool flag = i + 1 == layout.size() || layout[i + 1].startsWith("--");
        if (flag) {
            common << layout[i];
        } else if (const auto at = common.indexOf(layout[i]); at >= 0) {
            common[at + 1] = layout[++i];
        } else {
            common << layout[i] << layout[i + 1];
            ++i;
        }
    }
    auto losses = [&](const QStringList& args) {
        QProcess process;
        process.setProcessEnvironment(mpi_environment());
        process.setProcessChannelMode(QProcess::MergedChannels);
        process.start(FULCRUM_MPIRUN, QStringList{"-np", "2", kTrain} + common + args);
        process.waitForFinished(300000);
        const QString output = QString::fromUtf8(process.readAll());
        std::vector<double> values;
        static const QRegularExpression loss("\\| loss ([0-9.]+)");
        for (auto it = loss.globalMatch(output); it.hasNext();)
            values.push_back(it.next().captured(1).toDouble());
        return std::pair{values, output};
    };
    const auto [gpu, gpu_output] =
        losses({"--backend", "cuda", "--precision", "fp32", "--comm", "staged"});
    const auto [cpu, cpu_output] = losses({"--backend", "cpu"});
    QVERIFY2(gpu_output.contains("staged through host memory"), qPrintable(gpu_output));
    QCOMPARE(gpu.size(), std::size_t(3));
    QCOMPARE(cpu.size(), std::size_t(3));
    for (std::size_t s = 0; s < 3; ++s)
        QVERIFY2(std::abs(gpu[s] - cpu[s]) <= 1e-3 * std::abs(cpu[s]),
                 qPrintable(gpu_output + cpu_output));
}

// bf16 GEMMs (fp32 master weights) against fp32 over 30 steps of the same data, and both
// learn. bf16 rounds each GEMM operand to 8 mantissa bits, ~0.4% per product; training must
// not drift away from that. Two checks, from the curves seen on an H200 (bench/README.md, "The
// CUDA engine on a GPU"): the first 15 steps within 1% at every step (seen: 0.26% at most), and
// the mean of the last 10 within 5% (seen: 2.4%). Not every step: at this learning rate the
// loss spikes (step 17 and 27 there), and after a spike the two runs part by up to 9% at one
// step and meet again; with the tiled attention kernels they happened to stay within 2%, with
// the cuBLAS path (the same attention within the kernel tests' 1e-5) they did not.
void CudaBackendTest::bf16LossTracksFp32() {
    REQUIRE_GPU();
    auto losses = [](const QString& precision) {
        QProcess process;
        process.setProcessEnvironment(mpi_environment());
        process.setProcessChannelMode(QProcess::MergedChannels);
        process.start(kTrain, {"--backend", "cuda", "--precision", precision, "--steps", "30",
                               "--layers", "2", "--hidden", "128", "--heads", "4", "--context",
                               "256", "--documents", "2048", "--lr", "3e-3"});
        process.waitForFinished(300000);
        const QString output = QString::fromUtf8(process.readAll());
        std::vector<double> values;
        static const QRegularExpression loss("\\| loss ([0-9.]+)");
        for (auto it = loss.globalMatch(output); it.hasNext();)
            values.push_back(it.next().captured(1).toDouble());
        return std::pair{values, output};
    };
    const auto [bf16, bf16_output] = losses("bf16");
    const auto [fp32, fp32_output] = losses("fp32");
    QCOMPARE(bf16.size(), std::size_t(30));
    QCOMPARE(fp32.size(), std::size_t(30));
    for (std::size_t s = 0; s < fp32.size(); ++s)
        qInfo("step %2zu: bf16 %.4f, fp32 %.4f (%+.2f%%)", s, bf16[s], fp32[s],
              100 * (bf16[s] - fp32[s]) / fp32[s]);
    for (std::size_t s = 0; s < 15; ++s) {
        QVERIFY2(std::abs(bf16[s] - fp32[s]) <= 0.01 * fp32[s],
                 qPrintable(QString("step %1: bf16 %2, fp32 %3").arg(s).arg(bf16[s]).arg(fp32[s])));
    }
    double bf16_tail = 0, fp32_tail = 0;
    for (std::size_t s = 20; s < 30; ++s) {
        bf16_tail += bf16[s] / 10;
        fp32_tail += fp32[s] / 10;
    }
    QVERIFY2(std::abs(bf16_tail - fp32_tail) <= 0.05 * fp32_tail,
             qPrintable(QString("last 10 steps: bf16 %1, fp32 %2").arg(bf16_tail).arg(fp32_tail)));
    QVERIFY(fp32.back() < 0.9 * fp32.front());
    QVERIFY(bf16.back() < 0.9 * bf16.front());
}

QTEST_GUILESS_MAIN(CudaBackendTest)
#include "test_cuda_backend.moc"
