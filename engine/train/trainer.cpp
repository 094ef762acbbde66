#include "engine/train/trainer.h"

#include <cmath>

namespace fulcrum::engine {

std::int64_t count_target_tokens(std::span<const TokenBatch> micro_batches) {
    std::int64_t n = 0;
    for (const TokenBatch& b : micro_batches)
        n += b.target_count();
    return n;
}

float learning_rate_at(const TrainConfig& config, std::int64_t step) {
    const float lr = config.adamw.learning_rate;
    if (config.warmup_steps <= 0 || step > config.warmup_steps)
        return lr;
    return lr * float(step) / float(config.warmup_steps);
}

SerialTrainer::SerialTrainer(GptModel& model, TrainConfig config)
    : model_(model),
      config_(config),
      optimizer_(model.backend(), model.layout(), config.adamw),
      activations_(model.backend(), model.config()) {}

double SerialTrainer::accumulate_gradients(std::span<const TokenBatch> micro_batches) {
    const std::int64_t n_targets = count_target_tokens(micro_batches);
    FULCRUM_CHECK(n_targets > 0, "a step needs at least one target token");
    const float loss_scale = float(1.0 / double(n_targets));
    model_.zero_gradients();
    double loss_sum = 0.0;
    for (const TokenBatch& batch : micro_batches) {
        loss_sum += model_.forward(batch, activations_);
        model_.backward(activations_, loss_scale);
    }
    return loss_sum / double(n_targets);
}

double SerialTrainer::evaluate(std::span<const TokenBatch> micro_batches) {
    const std::int64_t n_targets = count_target_tokens(micro_batches);
    FULCRUM_CHECK(n_targets > 0, "evaluation needs at least one target token");
    double loss_sum = 0.0;
    for (const TokenBatch& batch : micro_batches)
        loss_sum += model_.forward(batch, activations_);
    return loss_sum / double(n_targets);
}

double SerialTrainer::gradient_norm() {
    return std::sqrt(model_.backend().sum_of_squares(model_.gradients()));
}

StepReport SerialTrainer::step(std::span<const TokenBatch> micro_batches) {
    StepReport report;
    report.step = optimizer_.steps_taken() + 1;
    report.micro_batches = int(micro_batches.size());
    for (const TokenBatch& b : micro_batches)
        report.tokens += b.size();
    report.target_tokens = count_target_tokens(micro_batches);
    report.loss = accumulate_gradients(micro_batches);
    report.grad_norm = gradient_norm();
    report.clip_coefficient = clip_coefficient(report.grad_norm, config_.max_grad_norm);
    report.learning_rate = learning_rate_at(config_, report.step);
    optimizer_.update(model_.parameters(), model_.gradients(), report.clip_coefficient,
                      report.learning_rate);
    return report;
}

}  // namespace fulcrum::engine
