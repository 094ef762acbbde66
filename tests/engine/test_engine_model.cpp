// The whole GPT: its gradient against finite differences, document isolation inside packed
// micro-batches, gradient accumulation, and the parameter layout and initialisation.
#include <QtTest/qtestassert.h>
#include <QTest>

#include <cstring>

#include "engine/backend/cpu_backend.h"
#include "engine/model/attention.h"
#include "engine/model/context_parallel.h"
#include "engine/model/embedding.h"
#include "engine/model/gpt.h"
#include "engine/model/layernorm.h"
#include "engine/model/lm_head.h"
#include "engine/model/matmul.h"
#include "engine/model/mlp.h"
#include "engine/train/trainer.h"
#include "gradient_check.h"

using namespace fulcrum::engine;
using namespace fulcrum::engine::test;

namespace {

// Real text, cut into documents of a few bytes (the tiny configs have a short context).
const char* const kLicenceExcerpt =
    "The GNU General Public License is a free, copyleft license for software and other "
    "kinds of works.";

TokenBatch documents(std::initializer_list<std::pair<int, int>> ranges) {
    TokenBatch b;
    const std::string_view text(kLicenceExcerpt);
    for (auto [begin, length] : ranges)
        b.append_document(text.substr(begin, length));
    return b;
}

// The same GPT written directly against the double-precision kernels and raw vectors: the
// reference the fp32 engine is compared with, and itself checked by finite differences.
class ReferenceGpt {
public:
    explicit ReferenceGpt(const ModelShape& config)
        : config_(config),
          layout_(config),
          params(std::size_t(layout_.total())),
          grads(std::size_t(layout_.total())) {}

    // Returns Σ ℓ; with `backward`, adds loss_scale·∂(Σ ℓ)/∂θ into grads.
    double run(const TokenBatch& batch, double loss_scale, bool backward) {
        using K = ParameterKind;
        const std::int64_t t = batch.size();
        const int c = config_.hidden, v = config_.vocab, nh = config_.heads;
        const int hs = head_size(config_);
        auto p = [&](K kind, int layer = -1) {
            return params.data() + layout_.find(kind, layer).offset;
        };
        auto g = [&](K kind, int layer = -1) {
            return grads.data() + layout_.find(kind, layer).offset;
        };
        auto zeros = [](std::int64_t n) { return std::vector<double>(std::size_t(n), 0.0); };
        const std::vector<std::int32_t> positions = batch.positions();
        const std::vector<AttentionSpan> spans = batch.attention_spans();

        struct Block {
            std::vector<double> ln1, m1, r1, qkv, atty, lse, res2, ln2, m2, r2, fch, fchg, res3;
        };
        std::vector<double> x0 = zeros(t * c);
        kernels::embedding_forward(x0.data(), batch.tokens.data(), positions.data(),
                                   p(K::token_embedding), p(K::position_embedding), t, c);
        std::vector<Block> blocks(std::size_t(config_.layers));
        const double* x = x0.data();
        for (int l = 0; l < config_.layers; ++l) {
            Block& a = blocks[std::size_t(l)];
            a.ln1 = zeros(t * c), a.m1 = zeros(t), a.r1 = zeros(t), a.qkv = zeros(t * 3 * c);
            a.atty = zeros(t * c), a.lse = zeros(t * nh), a.res2 = zeros(t * c);
            a.ln2 = zeros(t * c), a.m2 = zeros(t), a.r2 = zeros(t), a.fch = zeros(t * 4 * c);
            a.fchg = zeros(t * 4 * c), a.res3 = zeros(t * c);
            kernels::layernorm_forward(a.ln1.data(), a.m1.data(), a.r1.data(), x,
                                       p(K::ln1_weight, l), p(K::ln1_bias, l), t, c);
            kernels::matmul_forward(a.qkv.data(), a.ln1.data(), c, p(K::qkv_weight, l),
                                    p(K::qkv_bias, l), t, c, 3 * c);
            kernels::attention_forward<double>({a.atty.data(), c}, a.lse.data(),
                                               {a.qkv.data(), 3 * c}, {a.qkv.data() + c, 3 * c},
                                               {a.qkv.data() + 2 * c, 3 * c}, spans, nh, hs);
            kernels::matmul_forward(a.res2.data(), a.atty.data(), c, p(K::attn_proj_weight, l),
                                    p(K::attn_proj_bias, l), t, c, c);
            kernels::residual_forward(a.res2.data(), x, a.res2.data(), t * c);
            kernels::layernorm_forward(a.ln2.data(), a.m2.data(), a.r2.data(), a.res2.data(),
                                       p(K::ln2_weight, l), p(K::ln2_bias, l), t, c);
            kernels::matmul_forward(a.fch.data(), a.ln2.data(), c, p(K::fc_weight, l),
                                    p(K::fc_bias, l), t, c, 4 * c);
            kernels::gelu_forward(a.fchg.data(), a.fch.data(), t * 4 * c);
            kernels::matmul_forward(a.res3.data(), a.fchg.data(), 4 * c, p(K::fc_proj_weight, l),
                                    p(K::fc_proj_bias, l), t, 4 * c, c);
            kernels::residual_forward(a.res3.data(), a.res2.data(), a.res3.data(), t * c);
            x = a.res3.data();
        }
        std::vector<double> lnf = zeros(t * c), mf = zeros(t), rf = zeros(t);
        std::vector<double> probs = zeros(t * v), losses = zeros(t);
        kernels::layernorm_forward(lnf.data(), mf.data(), rf.data(), x, p(K::lnf_weight),
                                   p(K::lnf_bias), t, c);
        kernels::matmul_forward<double>(probs.data(), lnf.data(), c, p(K::token_embedding), nullptr,
                                        t, c, v);
        kernels::crossentropy_forward(losses.data(), probs.data(), probs.data(),
                                      batch.targets.data(), t, v);
        double loss_sum = 0;
        for (double l : losses)
            loss_sum += l;
        if (!backward)
            return loss_sum;

        std::vector<double> dlogits = zeros(t * v), dln = zeros(t * c), dres = zeros(t * c);
        kernels::crossentropy_backward(dlogits.data(), probs.data(), batch.targets.data(),
                                       loss_scale, t, v);
        kernels::matmul_backward<double>(dln.data(), g(K::token_embedding), nullptr, dlogits.data(),
                                         v, lnf.data(), c, p(K::token_embedding), t, c, v);
        kernels::layernorm_backward(dres.data(), g(K::lnf_weight), g(K::lnf_bias), dln.data(), x,
                                    p(K::lnf_weight), mf.data(), rf.data(), t, c);
        for (int l = config_.layers - 1; l >= 0; --l) {
            const Block& a = blocks[std::size_t(l)];
            const double* xin = l == 0 ? x0.data() : blocks[std::size_t(l - 1)].res3.data();
            std::vector<double> dfchg = zeros(t * 4 * c), dfch = zeros(t * 4 * c);
            kernels::matmul_backward(dfchg.data(), g(K::fc_proj_weight, l), g(K::fc_proj_bias, l),
                                     dres.data(), c, a.fchg.data(), 4 * c, p(K::fc_proj_weight, l),
                                     t, 4 * c, c);
            kernels::gelu_backward(dfch.data(), dfchg.data(), a.fch.data(), t * 4 * c);
            dln = zeros(t * c);
            kernels::matmul_backward(dln.data(), g(K::fc_weight, l), g(K::fc_bias, l), dfch.data(),
                                     4 * c, a.ln2.data(), c, p(K::fc_weight, l), t, c, 4 * c);
            kernels::layernorm_backward(dres.data(), g(K::ln2_weight, l), g(K::ln2_bias, l),
                                        dln.data(), a.res2.data(), p(K::ln2_weight, l), a.m2.data(),
                                        a.r2.data(), t, c);
            std::vector<double> datty = zeros(t * c), dqkv = zeros(t * 3 * c);
            kernels::matmul_backward(datty.data(), g(K::attn_proj_weight, l),
                                     g(K::attn_proj_bias, l), dres.data(), c, a.atty.data(), c,
                                     p(K::attn_proj_weight, l), t, c, c);
            kernels::attention_backward<double>(
                {dqkv.data(), 3 * c}, {dqkv.data() + c, 3 * c}, {dqkv.data() + 2 * c, 3 * c},
                {datty.data(), c}, {a.qkv.data(), 3 * c}, {a.qkv.data() + c, 3 * c},
                {a.qkv.data() + 2 * c, 3 * c}, {a.atty.data(), c}, a.lse.data(), spans, nh, hs);
            dln = zeros(t * c);
            kernels::matmul_backward(dln.data(), g(K::qkv_weight, l), g(K::qkv_bias, l),
                                     dqkv.data(), 3 * c, a.ln1.data(), c, p(K::qkv_weight, l), t, c,
                                     3 * c);
            kernels::layernorm_backward(dres.data(), g(K::ln1_weight, l), g(K::ln1_bias, l),
                                        dln.data(), xin, p(K::ln1_weight, l), a.m1.data(),
                                        a.r1.data(), t, c);
        }
        kernels::embedding_backward(g(K::token_embedding), g(K::position_embedding), dres.data(),
                                    batch.tokens.data(), positions.data(), t, c);
        return loss_sum;
    }

private:
    ModelShape config_;
    ParameterLayout layout_;

public:
    std::vector<double> params, grads;
};

// Parameters far from GPT-2's N(0, 0.02) start, so every path carries a gradient well
// above rounding (at 0.02 attention is nearly uniform and its gradient nearly zero).
std::vector<double> lively_parameters(const ParameterLayout& layout, std::uint64_t seed) {
    std::vector<double> params(std::size_t(layout.total()));
    fulcrum::Random random(seed);
    for (const ParameterTensor& t : layout.tensors()) {
        const bool gain = t.init == InitKind::ones;
        for (std::int64_t i = 0; i < t.numel(); ++i) {
            params[std::size_t(t.offset + i)] = (gain ? 1.0 : 0.0) + 0.3 * random.normal();
        }
    }
    return params;
}

ModelShape tiny_config() {
    ModelShape c;
    c.layers = 2;
    c.hidden = 8;
    c.heads = 2;
    c.context = 16;
    return c;
}

}  // namespace

class EngineModelTest : public QObject {
    Q_OBJECT

private slots:
    void parameterLayout();
    void stageHoldsItsOwnParameters();
    void initializationIsDeterministic();
    void initialLossIsUniform();
    void referenceGradientMatchesFiniteDifferences();
    void engineMatchesReference();
    void engineDirectionalDerivative();
    void documentsDoNotSeeEachOther_data();
    void documentsDoNotSeeEachOther();
    void accumulationEqualsOneBatch();
    void offloadedQkvGivesTheSameGradients_data();
    void offloadedQkvGivesTheSameGradients();
    void offloadedCheckpointsGiveTheSameGradients();
    void recomputationAndSplitBackwardGiveTheSameGradients_data();
    void recomputationAndSplitBackwardGiveTheSameGradients();

private:
    CpuBackend backend_{1};
};

void EngineModelTest::parameterLayout() {
    ModelShape config;
    config.layers = 3;
    config.context = 128;
    const ParameterLayout layout(config);
    const std::int64_t c = config.hidden;
    QCOMPARE(layout.total(), 256 * c + config.context * c + 3 * (12 * c * c + 13 * c) + 2 * c);
    // Tensors tile the buffer in order, with no gaps.
    std::int64_t next = 0;
    for (const ParameterTensor& t : layout.tensors()) {
        QCOMPARE(t.offset, next);
        next += t.numel();
        QCOMPARE(t.weight_decay, t.cols != 0);
    }
    QCOMPARE(next, layout.total());
    QCOMPARE(layout.tensors().front().name, std::string("wte"));
    QCOMPARE(layout.find(ParameterKind::qkv_weight, 1).name, std::string("h.1.attn.qkv.weight"));
    // A pipeline stage's blocks are one contiguous slice.
    const ElementRange middle = layout.block_range(1, 2);
    QCOMPARE(middle.offset, layout.find(ParameterKind::ln1_weight, 1).offset);
    QCOMPARE(middle.count, 12 * c * c + 13 * c);
    const ElementRange all = layout.block_range(0, 3);
    QCOMPARE(all.offset + all.count, layout.find(ParameterKind::lnf_weight).offset);
}

// A pipeline stage's layout holds its tensors alone, packed in the whole layout's order; a
// stage's model initialises them to the whole model's values, and expand_held puts them back.
void EngineModelTest::stageHoldsItsOwnParameters() {
    ModelShape config;
    config.layers = 4;
    config.context = 64;
    const std::int64_t c = config.hidden, block = 12 * c * c + 13 * c;
    // The last of two stages: blocks 2 and 3, the tied wte and lnf; no wpe.
    const StageParameters last{.blocks = {false, false, true, true},
                               .token_embedding = true,
                               .position_embedding = false,
                               .final_norm = true};
    const ParameterLayout held(config, 1, last);
    QCOMPARE(held.total(), 256 * c + 2 * block + 2 * c);
    QVERIFY(!held.holds(ParameterKind::position_embedding));
    QVERIFY(!held.holds(ParameterKind::ln1_weight, 1));
    QCOMPARE(held.block_range(2, 4), (ElementRange{256 * c, 2 * block}));
    std::int64_t next = 0;
    for (const ParameterTensor& t : held.tensors()) {
        QCOMPARE(t.offset, next);
        next += t.numel();
    }
    // The stage's model starts from the whole model's values of its tensors.
    GptModel whole(backend_, config), stage(backend_, config, {}, last);
    whole.initialize(7);
    stage.initialize(7);
    QVERIFY(stage.weights().wpe.empty() && stage.weights().blocks[0].qkv_weight.empty());
    const std::vector<float> all = whole.parameters_to_host();
    const std::vector<float> own = stage.parameters_to_host();
    QCOMPARE(own, take_held(held, all));
    const std::vector<float> expanded = expand_held(held, own);
    const ParameterLayout layout(config);
    for (const ParameterTensor& t : layout.tensors()) {
        const bool kept = held.holds(t.kind, t.layer);
        for (std::int64_t i = 0; i < t.numel(); i += 97) {
            const auto at = std::size_t(t.offset + i);
            QCOMPARE(expanded[at], kept ? all[at] : 0.0f);
        }
    }
}

void EngineModelTest::initializationIsDeterministic() {
    ModelShape config;
    config.context = 128;
    const ParameterLayout layout(config);
    std::vector<float> a(std::size_t(layout.total())), b(a.size()), c(a.size());
    initialize_parameters(layout, 42, a);
    initialize_parameters(layout, 42, b);
    initialize_parameters(layout, 43, c);
    QVERIFY(a == b);
    QVERIFY(a != c);
    // Each tensor has its own stream: a deeper model starts with the same embeddings and
    // the same first block.
    ModelShape deeper = config;
    deeper.layers = 4;
    const ParameterLayout deep_layout(deeper);
    std::vector<float> d(std::size_t(deep_layout.total()));
    initialize_parameters(deep_layout, 42, d);
    const ParameterTensor& qkv = layout.find(ParameterKind::qkv_weight, 0);
    QVERIFY(std::equal(a.begin(), a.begin() + qkv.offset + qkv.numel(), d.begin()));
    // GPT-2's scales: wte ~ N(0, 0.02), residual projections ~ N(0, 0.02/√(2L)).
    auto stddev = [&](const ParameterTensor& t) {
        double s = 0;
        for (std::int64_t i = 0; i < t.numel(); ++i)
            s += double(a[t.offset + i]) * a[t.offset + i];
        return std::sqrt(s / double(t.numel()));
    };
    QVERIFY(std::abs(stddev(layout.find(ParameterKind::token_embedding)) - 0.02) < 0.001);
    const double residual = 0.02 / std::sqrt(2.0 * config.layers);
    QVERIFY(std::abs(stddev(layout.find(ParameterKind::fc_proj_weight, 1)) - residual) <
            0.05 * residual);
    QCOMPARE(a[std::size_t(layout.find(ParameterKind::ln1_weight, 0).offset)], 1.0f);
    QCOMPARE(a[std::size_t(layout.find(ParameterKind::qkv_bias, 0).offset)], 0.0f);
}

void EngineModelTest::initialLossIsUniform() {
    // With N(0, 0.02) weights every byte is about equally likely: loss ≈ ln 256. Not
    // exactly: the tied head gives the current byte a logit of about ‖wte[x]‖²/σ ≈ 0.9
    // (C = 64), which moves the loss by up to ~0.2 nats depending on how often the text
    // repeats a byte; for this text it is within 0.1.
    ModelShape config;
    config.context = 128;
    GptModel model(backend_, config);
    model.initialize(7);
    Activations acts(backend_, config);
    const TokenBatch batch = documents({{0, 40}, {40, 30}, {70, 27}});
    const double mean = model.forward(batch, acts) / double(batch.target_count());
    QVERIFY2(std::abs(mean - std::log(256.0)) < 0.1, qPrintable(QString::number(mean)));
}

void EngineModelTest::referenceGradientMatchesFiniteDifferences() {
    const ModelShape config = tiny_config();
    const ParameterLayout layout(config);
    ReferenceGpt ref(config);
    ref.params = lively_parameters(layout, 5);
    const TokenBatch batch = documents({{4, 9}, {13, 1}, {20, 12}});
    const double scale = 1.0 / double(batch.target_count());
    ref.run(batch, scale, true);
    const std::vector<double> analytic = ref.grads;
    // Every parameter, one at a time (≈4k parameters, 8k tiny forward passes, ~1 s).
    auto objective = [&] { return scale * ref.run(batch, scale, false); };
    for (const ParameterTensor& t : layout.tensors()) {
        std::vector<std::size_t> indices;
        for (std::int64_t i = 0; i < t.numel(); ++i)
            indices.push_back(std::size_t(t.offset + i));
        FULCRUM_VERIFY_GRADIENT(check_gradient(ref.params, analytic, objective, indices),
                                QString::fromStdString(t.name));
    }
}

// The fp32 engine against the double reference, same parameters and batch. fp32 carries
// ~7 digits; through two blocks, softmaxes and a mean over ~40 tokens we measure at most
// 6e-7 relative error per gradient tensor, and bound it at 1e-5: wiring errors are O(1).
void EngineModelTest::engineMatchesReference() {
    const ModelShape config = tiny_config();
    GptModel model(backend_, config);
    ReferenceGpt ref(config);
    ref.params = lively_parameters(model.layout(), 5);
    // Both models start from the same fp32 values.
    const std::vector<float> params32 = to_float(ref.params);
    model.set_parameters(params32);
    ref.params.assign(params32.begin(), params32.end());
    const TokenBatch batch = documents({{4, 9}, {13, 1}, {20, 12}, {40, 16}});
    const double scale = 1.0 / double(batch.target_count());
    const double ref_loss = ref.run(batch, scale, true);

    Activations acts(backend_, config);
    model.zero_gradients();
    const double loss = model.forward(batch, acts);
    model.backward(acts, float(scale));
    QVERIFY2(std::abs(loss - ref_loss) <= 1e-5 * ref_loss,
             qPrintable(QStringLiteral("loss %1 vs %2").arg(loss).arg(ref_loss)));
    const std::vector<float> grads32 = model.gradients_to_host();
    for (const ParameterTensor& t : model.layout().tensors()) {
        const auto begin = std::size_t(t.offset), end = std::size_t(t.offset + t.numel());
        const std::vector<double> engine(grads32.begin() + begin, grads32.begin() + end);
        const std::vector<double> reference(ref.grads.begin() + begin, ref.grads.begin() + end);
        FULCRUM_VERIFY_CLOSE(engine, reference, 1e-5, QString::fromStdString(t.name));
    }
}

// Finite differences of the fp32 engine itself, along the gradient of each tensor:
// (L(θ + εd) − L(θ − εd)) / 2ε ≈ ‖g‖ for d = g/‖g‖. The loss is a mean of fp32 per-token
// losses summed in double, good to ~1e-7 absolute, so with ε = 3e-3 rounding contributes
// ~3e-5 and curvature (ε²·L‴/6) about as much: we measure at most 4e-4 relative against
// ‖g‖ ≥ 0.06 for every tensor of this model. A 1e-2 bound still separates a correct
// gradient from a wrong one, which is off by O(1).
void EngineModelTest::engineDirectionalDerivative() {
    const ModelShape config = tiny_config();
    GptModel model(backend_, config);
    const std::vector<double> params = lively_parameters(model.layout(), 5);
    model.set_parameters(to_float(params));
    const TokenBatch batch = documents({{4, 9}, {13, 1}, {20, 12}, {40, 16}});
    const double scale = 1.0 / double(batch.target_count());
    Activations acts(backend_, config);
    model.zero_gradients();
    model.forward(batch, acts);
    model.backward(acts, float(scale));
    const std::vector<float> grads = model.gradients_to_host();

    constexpr double kEpsilon = 3e-3;
    for (const ParameterTensor& t : model.layout().tensors()) {
        double gnorm = 0;
        for (std::int64_t i = 0; i < t.numel(); ++i) {
            gnorm += double(grads[std::size_t(t.offset + i)]) * grads[std::size_t(t.offset + i)];
        }
        gnorm = std::sqrt(gnorm);
        auto loss_at = [&](double step) {
            std::vector<float> shifted = to_float(params);
            for (std::int64_t i = 0; i < t.numel(); ++i) {
                const std::size_t k = std::size_t(t.offset + i);
                shifted[k] = float(params[k] + step * grads[k] / gnorm);
            }
            model.set_parameters(shifted);
            return scale * model.forward(batch, acts);
        };
        const double numeric = (loss_at(kEpsilon) - loss_at(-kEpsilon)) / (2 * kEpsilon);
        QVERIFY2(gnorm > 1e-3, qPrintable(QString::fromStdString(t.name)));
        QVERIFY2(std::abs(numeric - gnorm) <= 1e-2 * gnorm,
                 qPrintable(QStringLiteral("%1: ‖g‖ %2, finite difference %3")
                                .arg(QString::fromStdString(t.name))
                                .arg(gnorm)
                                .arg(numeric)));
    }
}

void EngineModelTest::documentsDoNotSeeEachOther_data() {
    QTest::addColumn<int>("changed");  // which document of three is rewritten
    QTest::newRow("the document before") << 0;
    QTest::newRow("the document after") << 2;
}

// Rewriting one document of a packed micro-batch must leave every output row of another
// document bit-for-bit unchanged: the same arithmetic on the same values, nothing read
// across the boundary. And a document packed with others must compute what it computes
// alone (to fp32 rounding: the GEMMs see a different row count).
void EngineModelTest::documentsDoNotSeeEachOther() {
    QFETCH(int, changed);
    ModelShape config;
    config.hidden = 32;
    config.context = 32;
    GptModel model(backend_, config);
    model.set_parameters(to_float(lively_parameters(model.layout(), 9)));
    const std::string a = "Everyone is permitted to copy", b = "and distribute verbatim",
                      c = "copies of this license";
    const std::string other = "Preamble: the licenses for most";
    std::vector<std::string_view> original = {a, b, c}, rewritten = original;
    const std::string replacement = other.substr(0, original[std::size_t(changed)].size());
    rewritten[std::size_t(changed)] = replacement;

    auto outputs = [&](const std::vector<std::string_view>& docs) {
        Activations acts(backend_, config);
        model.forward(micro_batch_of(docs), acts);
        std::vector<std::vector<float>> rows;
        for (const Tensor& t : {acts.blocks[0].atty, acts.blocks.back().residual3, acts.probs}) {
            std::vector<float> host(std::size_t(t.numel()));
            backend_.download(host.data(), t, kComputeStream);
            rows.push_back(std::move(host));
        }
        return rows;
    };
    const auto before = outputs(original);
    const auto after = outputs(rewritten);
    const auto alone = outputs({b});
    const std::size_t b_begin = a.size(), b_end = a.size() + b.size();
    for (std::size_t k = 0; k < before.size(); ++k) {
        const std::size_t width = before[k].size() / (a.size() + b.size() + c.size());
        const std::vector<float> b_before(before[k].begin() + b_begin * width,
                                          before[k].begin() + b_end * width);
        const std::vector<float> b_after(after[k].begin() + b_begin * width,
                                         after[k].begin() + b_end * width);
        QVERIFY(std::memcmp(b_before.data(), b_after.data(), b_before.size() * 4) == 0);
        // The rewritten document itself did change (the test can see a difference).
        const std::size_t ch_begin = changed == 0 ? 0 : b_end;
        const std::size_t ch_end = ch_begin + original[std::size_t(changed)].size();
        QVERIFY(!std::equal(before[k].begin() + ch_begin * width,
                            before[k].begin() + ch_end * width,
                            after[k].begin() + ch_begin * width));
        FULCRUM_VERIFY_CLOSE(std::vector<double>(b_before.begin(), b_before.end()),
                             std::vector<double>(alone[k].begin(), alone[k].end()), 1e-5,
                             "packed vs alone");
    }
}

// Two micro-batches accumulated with loss scale 1/N_step give the gradient and loss of one
// micro-batch holding both. Only the summation order differs (fp32 GEMM reductions over
// tokens), so the agreement is ~1e-7 relative; 1e-5 is the bound.
void EngineModelTest::accumulationEqualsOneBatch() {
    ModelShape config;
    config.hidden = 32;
    config.context = 32;
    GptModel model(backend_, config);
    model.initialize(3);
    SerialTrainer trainer(model, TrainConfig{});
    const TokenBatch first = documents({{0, 20}, {20, 32}, {52, 7}});
    const TokenBatch second = documents({{59, 25}, {84, 13}});
    const std::vector<TokenBatch> split = {first, second};
    const std::vector<TokenBatch> joined = {concatenate(split)};
    QCOMPARE(count_target_tokens(split), count_target_tokens(joined));

    const double loss_split = trainer.accumulate_gradients(split);
    const std::vector<float> grads_split = model.gradients_to_host();
    const double loss_joined = trainer.accumulate_gradients(joined);
    const std::vector<float> grads_joined = model.gradients_to_host();
    QVERIFY(std::abs(loss_split - loss_joined) <= 1e-6 * loss_joined);
    FULCRUM_VERIFY_CLOSE(std::vector<double>(grads_split.begin(), grads_split.end()),
                         std::vector<double>(grads_joined.begin(), grads_joined.end()), 1e-5,
                         "accumulated gradient");
    // And the mean is per token of the step, not a mean of micro-batch means: those differ
    // here because the micro-batches hold different numbers of targets.
    Activations acts(backend_, config);
    const double mean_first = model.forward(first, acts) / double(first.target_count());
    const double mean_second = model.forward(second, acts) / double(second.target_count());
    QVERIFY(std::abs(0.5 * (mean_first + mean_second) - loss_joined) > 1e-6);
}

// FPDT's offload (chunked_attention.h): with chunked attention and offload every block's Q,
// K and V wait in pinned host memory between its forward and backward pass, and the device
// holds of them only two chunk slots for all blocks. The loss and gradients are bit for bit
// those of the same chunked model without offload (the same kernels on the same numbers; only
// where Q/K/V wait changes), over two micro-batches in flight at once (the 1F1B case: both
// forwards, then both backwards), with copies that lag so that a missing event shows. And the
// backend's counted device peak falls by exactly what went to pinned memory less the two
// slots [chunk, 3C]. Under CP (here a group of one whose shard lists the document pieces out
// of order, so queries and gathered keys differ) the resident run also keeps each block's
// gathered K|V, and the offloading one a single gathered buffer for all blocks.
void EngineModelTest::offloadedQkvGivesTheSameGradients_data() {
    QTest::addColumn<bool>("long_documents");
    QTest::addColumn<bool>("context_parallel");
    QTest::addColumn<int>("chunk");
    QTest::newRow("long documents") << true << false << 16;
    QTest::newRow("documents within a chunk") << false << false << 16;
    QTest::newRow("long documents, cp shard") << true << true << 16;
    // Two query chunks: no slot is reused within a block, so only the wait before the next
    // block's gather keeps it from overwriting K/V still on their way to the host.
    QTest::newRow("documents within a chunk, cp shard, two chunks") << false << true << 32;
}

void EngineModelTest::offloadedQkvGivesTheSameGradients() {
    QFETCH(bool, long_documents);
    QFETCH(bool, context_parallel);
    QFETCH(int, chunk);
    ModelShape config;
    config.layers = 5;
    config.hidden = 32;
    config.heads = 4;
    config.context = 64;
    // Two micro-batches of equal size, so that no buffer grows between them (a growing
    // buffer briefly holds old and new, which would move the peak).
    const std::vector<std::pair<int, int>> first_documents =
        long_documents ? std::vector<std::pair<int, int>>{{0, 40}, {40, 24}}
                       : std::vector<std::pair<int, int>>{{0, 16}, {16, 12}, {28, 16}, {44, 9}};
    const std::vector<std::pair<int, int>> second_documents =
        long_documents ? std::vector<std::pair<int, int>>{{10, 50}, {60, 14}}
                       : std::vector<std::pair<int, int>>{{3, 14}, {17, 16}, {33, 11}, {50, 12}};
    // A CP shard of one rank holding every token, each document's second half listed first.
    auto shard_of = [](const std::vector<std::pair<int, int>>& ranges) {
        const std::string_view text(kLicenceExcerpt);
        std::vector<std::string_view> bytes;
        std::vector<fulcrum::balance::Document> docs;
        fulcrum::balance::CpPlan plan;
        plan.ranks.resize(1);
        for (auto [begin, length] : ranges) {
            const std::uint64_t id = docs.size();
            bytes.push_back(text.substr(std::size_t(begin), std::size_t(length)));
            docs.push_back({id, length});
            plan.ranks[0].ranges.push_back({id, length / 2, length});
            plan.ranks[0].ranges.push_back({id, 0, length / 2});
        }
        fulcrum::Result<ContextShard> shard = make_context_shard(bytes, docs, plan, 0);
        QTEST_ASSERT(shard.ok());
        return shard.value();
    };
    std::vector<TokenBatch> batches;
    std::vector<ContextShard> shards;
    for (const auto* ranges : {&first_documents, &second_documents}) {
        TokenBatch batch;
        for (auto [begin, length] : *ranges) {
            batch.append_document(
                std::string_view(kLicenceExcerpt).substr(std::size_t(begin), std::size_t(length)));
        }
        batches.push_back(batch);
        shards.push_back(shard_of(*ranges));
    }
    const std::int64_t tokens = batches[0].size();
    QCOMPARE(batches[1].size(), tokens);
    QCOMPARE(shards[0].spans.size(), 2 * first_documents.size());

    struct Outcome {
        double loss = 0;
        std::vector<float> gradients;
        MemoryUse memory;
    };
    auto run = [&](bool offload) {
        CpuBackend backend(1);
        backend.set_copy_delay(std::chrono::milliseconds(2));  // copies lag: races show
        GptModel model(backend, config);
        model.initialize(11);
        model.set_attention_chunking({chunk, offload});
        model.zero_gradients();
        Activations a(model), b(model);
        QTEST_ASSERT(a.offloads_qkv() == offload);
        Outcome result;
        const std::int64_t targets = context_parallel
                                         ? shards[0].target_count() + shards[1].target_count()
                                         : batches[0].target_count() + batches[1].target_count();
        const float scale = 1.0f / float(targets);
        result.loss = context_parallel
                          ? model.forward(shards[0], a) + model.forward(shards[1], b)
                          : model.forward(batches[0], a) + model.forward(batches[1], b);
        model.backward(b, scale);
        model.backward(a, scale);
        result.gradients = model.gradients_to_host();
        result.memory = backend.memory_use();
        return result;
    };
    const Outcome resident = run(false);
    const Outcome offloaded = run(true);
    QCOMPARE(offloaded.loss, resident.loss);
    QVERIFY(offloaded.gradients == resident.gradients);

    // Per block and micro-batch, Q [T, C] and K|V [T_kv, 2C] go to pinned memory (T_kv = T:
    // the shard holds every row).
    const std::int64_t floats = sizeof(float), c = config.hidden;
    const std::int64_t offloaded_bytes = 2 * config.layers * (tokens * c + tokens * 2 * c) * floats;
    QCOMPARE(resident.memory.peak_pinned_bytes, 0);
    QCOMPARE(offloaded.memory.peak_pinned_bytes, offloaded_bytes);
    const std::int64_t double_buffers = 2 * chunk * 3 * c * floats;
    std::int64_t fall = offloaded_bytes - double_buffers;
    if (context_parallel) {
        // Resident: each block also keeps its gathered K|V [T, 2C]. Offloading: one buffer of
        // this rank's K|V and the gathered K|V [T + T, 2C] for all blocks.
        fall += 2 * config.layers * tokens * 2 * c * floats - (tokens + tokens) * 2 * c * floats;
    }
    QCOMPARE(resident.memory.peak_device_bytes - offloaded.memory.peak_device_bytes, fall);
}

// Offloaded checkpoints (checkpoint_offload.h) under full recomputation: the same loss and
// gradients bit for bit, two micro-batches in flight, the copies lagging so that a missing
// event would race (and TSan, scripts/test, sees the copy threads); the device peak falls by
// the block outputs that went to the host less the two slots, and each went out and came back
// once. Also a backward run one block per call, as the overlapped gradient reduction does.
void EngineModelTest::offloadedCheckpointsGiveTheSameGradients() {
    ModelShape config;
    config.layers = 5;
    config.hidden = 32;
    config.heads = 4;
    config.context = 64;
    std::vector<TokenBatch> batches(2);
    for (int b = 0; b < 2; ++b) {
        batches[std::size_t(b)].append_document(
            std::string_view(kLicenceExcerpt).substr(std::size_t(b * 7), 40));
        batches[std::size_t(b)].append_document(
            std::string_view(kLicenceExcerpt).substr(std::size_t(50 + b * 5), 24));
    }
    const std::int64_t tokens = batches[0].size();
    struct Outcome {
        double loss = 0;
        std::vector<float> gradients;
        MemoryUse memory;
        CheckpointMemory checkpoints;
    };
    auto run = [&](bool offload, bool block_by_block) {
        CpuBackend backend(1);
        backend.set_copy_delay(std::chrono::milliseconds(2));  // copies lag: races show
        GptModel model(backend, config);
        model.initialize(5);
        model.set_recompute(Recompute::full);
        model.set_offload_checkpoints(offload);
        model.zero_gradients();
        Activations a(model), b(model);
        QTEST_ASSERT(a.offloads_checkpoints() == offload);
        Outcome result;
        const float scale = 1.0f / float(batches[0].target_count() + batches[1].target_count());
        result.loss = model.forward(batches[0], a) + model.forward(batches[1], b);
        for (Activations* acts : {&b, &a}) {
            if (!block_by_block) {
                model.backward(*acts, scale);
                continue;
            }
            model.backward_head(*acts, scale);
            for (int l = config.layers - 1; l >= 0; --l) {
                model.backward_blocks(l, l + 1, *acts);
            }
            model.backward_embedding(*acts);
        }
        result.gradients = model.gradients_to_host();
        result.memory = backend.memory_use();
        if (offload) {
            result.checkpoints = *model.checkpoint_memory();
        }
        return result;
    };
    const Outcome resident = run(false, false);
    for (bool block_by_block : {false, true}) {
        const Outcome offloaded = run(true, block_by_block);
        QCOMPARE(offloaded.loss, resident.loss);
        QVERIFY(offloaded.gradients == resident.gradients);
        // Every block's output but the last, [T, C], per micro-batch.
        const std::int64_t floats = sizeof(float), c = config.hidden;
        const std::int64_t out_bytes = 2 * (config.layers - 1) * tokens * c * floats;
        QCOMPARE(offloaded.memory.peak_pinned_bytes, out_bytes);
        QCOMPARE(offloaded.checkpoints.offloaded_bytes, out_bytes);
        QCOMPARE(offloaded.checkpoints.prefetched_bytes, out_bytes);
        QCOMPARE(offloaded.checkpoints.slot_bytes, 2 * tokens * c * floats);
        QCOMPARE(resident.memory.peak_device_bytes - offloaded.memory.peak_device_bytes,
                 out_bytes - offloaded.checkpoints.slot_bytes);
    }
}

// Activation recomputation (recompute.h) and Zero Bubble's split backward (gpt.h): the same
// loss and gradients as the whole backward without recomputation, over two micro-batches in
// flight (both forwards, then the backwards in reverse; the split runs both B passes, then
// both W passes, as ZB-H1 may), and the device peak moves by exactly what the memory model
// says. Recomputation runs the same kernels on the same inputs, so every gradient is bit for
// bit the same. The split also, but for wte: it sums the LM head's part (now in W) and the
// embedding's (in B) in another order, one rounding apart per element, so wte is compared
// norm-wise (an element whose two parts nearly cancel keeps only that rounding).
void EngineModelTest::recomputationAndSplitBackwardGiveTheSameGradients_data() {
    QTest::addColumn<int>("recompute");
    QTest::addColumn<bool>("split");
    QTest::addColumn<bool>("context_parallel");
    QTest::addColumn<int>("chunk");
    const int none = int(Recompute::none), selective = int(Recompute::selective),
              full = int(Recompute::full);
    QTest::newRow("selective") << selective << false << false << 0;
    QTest::newRow("full") << full << false << false << 0;
    QTest::newRow("selective, cp shard") << selective << false << true << 0;
    QTest::newRow("full, cp shard") << full << false << true << 0;
    QTest::newRow("full, chunks with offload") << full << false << false << 16;
    QTest::newRow("full, cp shard, chunks with offload") << full << false << true << 16;
    QTest::newRow("split") << none << true << false << 0;
    QTest::newRow("split, cp shard") << none << true << true << 0;
    QTest::newRow("split, cp shard, chunks with offload") << none << true << true << 16;
    QTest::newRow("split, selective") << selective << true << false << 0;
    QTest::newRow("split, full, cp shard") << full << true << true << 0;
}

void EngineModelTest::recomputationAndSplitBackwardGiveTheSameGradients() {
    QFETCH(int, recompute);
    QFETCH(bool, split);
    QFETCH(bool, context_parallel);
    QFETCH(int, chunk);
    ModelShape config;
    config.layers = 3;
    config.hidden = 32;
    config.heads = 4;
    config.context = 64;
    // Two micro-batches of equal size: no buffer grows between them (see above).
    const std::vector<std::vector<std::pair<int, int>>> documents = {{{0, 40}, {40, 24}},
                                                                     {{10, 50}, {60, 14}}};
    std::vector<TokenBatch> batches;
    std::vector<ContextShard> shards;
    for (const auto& ranges : documents) {
        TokenBatch batch;
        std::vector<std::string_view> bytes;
        std::vector<fulcrum::balance::Document> docs;
        fulcrum::balance::CpPlan plan;
        plan.ranks.resize(1);
        for (auto [begin, length] : ranges) {
            const std::string_view text =
                std::string_view(kLicenceExcerpt).substr(std::size_t(begin), std::size_t(length));
            batch.append_document(text);
            const std::uint64_t id = docs.size();
            bytes.push_back(text);
            docs.push_back({id, length});
            // A CP shard of one rank holding every token, each document's second half first.
            plan.ranks[0].ranges.push_back({id, length / 2, length});
            plan.ranks[0].ranges.push_back({id, 0, length / 2});
        }
        batches.push_back(batch);
        fulcrum::Result<ContextShard> shard = make_context_shard(bytes, docs, plan, 0);
        QVERIFY(shard.ok());
        shards.push_back(shard.value());
    }
    const std::int64_t tokens = batches[0].size();
    QCOMPARE(batches[1].size(), tokens);

    struct Outcome {
        double loss = 0;
        std::vector<float> gradients;
        MemoryUse memory;
    };
    auto run = [&](Recompute mode, bool split_backward) {
        CpuBackend backend(1);
        if (chunk > 0) {
            backend.set_copy_delay(std::chrono::milliseconds(1));  // copies lag: races show
        }
        GptModel model(backend, config);
        model.initialize(11);
        model.set_attention_chunking({chunk, true});
        model.set_recompute(mode);
        model.set_split_backward(split_backward);
        model.zero_gradients();
        Activations a(model), b(model);
        Outcome result;
        const std::int64_t targets = context_parallel
                                         ? shards[0].target_count() + shards[1].target_count()
                                         : batches[0].target_count() + batches[1].target_count();
        const float scale = 1.0f / float(targets);
        result.loss = context_parallel
                          ? model.forward(shards[0], a) + model.forward(shards[1], b)
                          : model.forward(batches[0], a) + model.forward(batches[1], b);
        if (split_backward) {
            for (Activations* acts : {&b, &a}) {
                model.backward_head(*acts, scale, BackwardPart::input_gradients);
                model.backward_blocks(0, config.layers, *acts, BackwardPart::input_gradients);
                model.backward_embedding(*acts);
            }
            for (Activations* acts : {&b, &a}) {
                model.backward_weights_blocks(0, config.layers, *acts);
                model.backward_weights_head(*acts);
            }
        } else {
            model.backward(b, scale);
            model.backward(a, scale);
        }
        result.gradients = model.gradients_to_host();
        result.memory = backend.memory_use();
        return result;
    };
    const Outcome reference = run(Recompute::none, false);
    const Outcome tested = run(Recompute(recompute), split);
    QCOMPARE(tested.loss, reference.loss);
    const ParameterLayout layout(config);
    const ParameterTensor& wte = layout.find(ParameterKind::token_embedding);
    double wte_difference = 0, wte_norm = 0;
    for (std::int64_t i = 0; i < layout.total(); ++i) {
        const bool in_wte = i >= wte.offset && i < wte.offset + wte.numel();
        const float want = reference.gradients[std::size_t(i)];
        const float got = tested.gradients[std::size_t(i)];
        if (split && in_wte) {
            wte_difference += (double(got) - want) * (double(got) - want);
            wte_norm += double(want) * want;
        } else if (got != want) {
            QFAIL(qPrintable(QString("gradient %1 differs: %2 vs %3").arg(i).arg(got).arg(want)));
        }
    }
    // A few float roundings of the norm: ~1e-7.
    QVERIFY2(std::sqrt(wte_difference) <= 1e-6 * std::sqrt(wte_norm),
             qPrintable(QString("wte gradients differ by %1 relative")
                            .arg(std::sqrt(wte_difference / wte_norm))));

    // The memory model (recompute.h, gpt.h), per token in floats. Two micro-batches of
    // `tokens` rows are held, each keeping L blocks; recomputation drops a block's tensors
    // from both and the model's workspace holds them once.
    const std::int64_t c = config.hidden, h = config.heads, layers = config.layers;
    const std::int64_t bytes = sizeof(float);
    const bool resident_qkv = chunk == 0;  // with offload Q/K/V are in host memory anyway
    std::int64_t dropped = 0;              // per token and block
    std::int64_t dropped_gathered = 0;     // CP's gathered K|V rows, per block
    if (Recompute(recompute) == Recompute::selective) {
        dropped = c + h;  // atty, lse
    } else if (Recompute(recompute) == Recompute::full) {
        // everything but residual3: ln1, residual2, ln2 [C]; qkv [3C]; atty [C]; fch,
        // fch_gelu [4C]; lse [H]; means and rstds
        dropped = 3 * c + (resident_qkv ? 3 * c : 0) + c + 8 * c + h + 4;
        dropped_gathered = context_parallel && resident_qkv ? tokens * 2 * c : 0;
    }
    std::int64_t fall = (2 * layers - 1) * (tokens * dropped + dropped_gathered) * bytes;
    if (split) {
        // Kept for W by each micro-batch: per block ∂L/∂ of the two projections' outputs [C],
        // ∂L/∂fch [4C] and ∂L/∂qkv [3C], and the head's ∂L/∂logits [V], each unless written
        // over the forward's rows B has read (no recomputation: residual3 and residual2, fch,
        // qkv unless offloaded, probs).
        const bool in_rows = Recompute(recompute) == Recompute::none;
        const std::int64_t per_block =
            (in_rows ? 0 : 2 * c + 4 * c) + (in_rows && resident_qkv ? 0 : 3 * c);
        fall -= 2 * tokens * (layers * per_block + (in_rows ? 0 : config.vocab)) * bytes;
    }
    QCOMPARE(reference.memory.peak_device_bytes - tested.memory.peak_device_bytes, fall);
}

QTEST_GUILESS_MAIN(EngineModelTest)
#include "test_engine_model.moc"
