// The optimizer, and the serial engine learning real text.
#include <QTest>

#include <QElapsedTimer>

#include <cmath>

#include "engine/backend/cpu_backend.h"
#include "engine/data/corpus.h"
#include "engine/data/packer.h"
#include "engine/model/gpt.h"
#include "engine/train/trainer.h"
#include "gradient_check.h"

using namespace fulcrum::engine;
using namespace fulcrum::engine::test;

class EngineTrainingTest : public QObject {
    Q_OBJECT

private slots:
    void adamwMatchesFormula();
    void clipCoefficient_data();
    void clipCoefficient();
    void lossFallsOnRealText();

private:
    CpuBackend backend_{1};
};

// Three AdamW steps through the backend against the formula of adamw.h evaluated in double.
// Each update is a handful of fp32 operations per element, so 1e-6 relative is ample.
void EngineTrainingTest::adamwMatchesFormula() {
    const int n = 50;
    std::vector<double> p = random_values(n, 60), m(n, 0.0), v(n, 0.0);
    DeviceArray p32 = upload_f32(backend_, p, {n});
    DeviceArray m32 = zeros_f32(backend_, {n}), v32 = zeros_f32(backend_, {n});
    AdamWStep step;
    step.learning_rate = 0.01f;
    step.weight_decay = 0.1f;
    step.grad_scale = 0.5f;
    for (int t = 1; t <= 3; ++t) {
        const std::vector<double> g = random_values(n, 60 + t);
        DeviceArray g32 = upload_f32(backend_, g, {n});
        step.step = t;
        backend_.adamw_update(p32.tensor, g32.tensor, m32.tensor, v32.tensor, step);
        const double b1 = step.beta1, b2 = step.beta2;
        for (int i = 0; i < n; ++i) {
            const double gi = double(float(g[i])) * step.grad_scale;
            m[i] = b1 * m[i] + (1 - b1) * gi;
            v[i] = b2 * v[i] + (1 - b2) * gi * gi;
            const double m_hat = m[i] / (1 - std::pow(b1, t));
            const double v_hat = v[i] / (1 - std::pow(b2, t));
            p[i] -= step.learning_rate *
                    (m_hat / (std::sqrt(v_hat) + step.epsilon) + step.weight_decay * p[i]);
        }
    }
    FULCRUM_VERIFY_CLOSE(download_f64(backend_, p32.tensor), p, 1e-6, "parameters");
    FULCRUM_VERIFY_CLOSE(download_f64(backend_, m32.tensor), m, 1e-6, "first moment");
    FULCRUM_VERIFY_CLOSE(download_f64(backend_, v32.tensor), v, 1e-6, "second moment");
}

void EngineTrainingTest::clipCoefficient_data() {
    QTest::addColumn<double>("norm");
    QTest::addColumn<float>("max_norm");
    QTest::addColumn<float>("expected");
    QTest::newRow("under the limit") << 0.5 << 1.0f << 1.0f;
    QTest::newRow("over the limit") << 4.0 << 1.0f << 0.25f;
    QTest::newRow("clipping off") << 100.0 << 0.0f << 1.0f;
}

void EngineTrainingTest::clipCoefficient() {
    QFETCH(double, norm);
    QFETCH(float, max_norm);
    QFETCH(float, expected);
    QVERIFY(std::abs(clip_coefficient(norm, max_norm) - expected) < 1e-6f);
}

// A 2-layer, 64-wide, 4-head model with a 128-byte context, trained for 200 steps of
// 4 × 128 bytes on the licence texts every Debian system has, and measured on the same 16
// evaluation micro-batches (32 K bytes) before and after. It starts near ln 256 ≈ 5.55
// nats (a little below: the tied head favours repeating the current byte). The corpus's
// unigram entropy is 3.21 nats and its bigram conditional entropy 2.44, so ending under 2.9
// means the model has learned to use context. We measure 2.67 (2.67–2.72 over four seeds;
// the bound leaves room for other BLAS kernels, whose rounding changes the trajectory). A fixed
// evaluation set, not the training loss, because single training batches of all-caps warranty
// disclaimers ("THE ENTIRE RISK AS TO THE QUALITY...") cost 1–2 nats more than lower-case prose at
// this stage.
void EngineTrainingTest::lossFallsOnRealText() {
    auto corpus = load_text_corpus("/usr/share/common-licenses", DocumentSplit::file);
    QVERIFY(corpus.ok());
    ModelShape config;
    config.layers = 2;
    config.hidden = 64;
    config.heads = 4;
    config.context = 128;
    GptModel model(backend_, config);
    model.initialize(1);
    TrainConfig train;
    train.adamw.learning_rate = 1e-3f;
    train.warmup_steps = 10;
    SerialTrainer trainer(model, train);
    MicroBatchSampler sampler(*corpus, PackingConfig{128, 4, 1});
    MicroBatchSampler eval_sampler(*corpus, PackingConfig{128, 4, 1000});
    std::vector<TokenBatch> eval_batches;
    for (int i = 0; i < 16; ++i)
        eval_batches.push_back(eval_sampler.next());

    QElapsedTimer timer;
    timer.start();
    const double before = trainer.evaluate(eval_batches);
    constexpr int kSteps = 200;
    std::int64_t tokens = 0;
    for (int s = 0; s < kSteps; ++s) {
        const std::vector<TokenBatch> batches = {sampler.next()};
        const StepReport report = trainer.step(batches);
        QVERIFY(std::isfinite(report.loss) && std::isfinite(report.grad_norm));
        tokens += report.tokens;
    }
    const double train_seconds = double(timer.elapsed()) / 1000.0;
    const double after = trainer.evaluate(eval_batches);
    qInfo("evaluation loss %.3f -> %.3f nats after %d steps; %.1f s, %.0f training tokens/s",
          before, after, kSteps, train_seconds, double(tokens) / train_seconds);
    QVERIFY(before > 5.0 && before < std::log(256.0) + 0.1);
    QVERIFY2(after < 2.9, qPrintable(QString::number(after)));
}

QTEST_GUILESS_MAIN(EngineTrainingTest)
#include "test_engine_training.moc"
