// One training step of the serial (single-rank) engine.
//
//     zero gradients
//     for each micro-batch b:  forward(b); backward(b, loss_scale = 1/N_step)
//     ‖g‖ = global gradient norm;  c = clip coefficient (adamw.h)
//     AdamW update with gradients scaled by c
//
// N_step is the number of target tokens in ALL micro-batches of the step, so the reported
// loss is the mean per-token cross-entropy of the step and gradient accumulation over any
// split of the same documents gives the gradient of one big batch (lm_head.h). The parallel
// trainer keeps this skeleton and inserts its communication: data-parallel gradient
// reduction after the last backward, pipeline sends/receives around the block ranges,
// partial norms summed across ranks before the clip.
#pragma once

#include <cstdint>
#include <span>

#include "engine/model/gpt.h"
#include "engine/train/adamw.h"

namespace fulcrum::engine {

struct TrainConfig {
    AdamWConfig adamw;
    float max_grad_norm = 1.0f;  // <= 0: no clipping
    int warmup_steps = 0;        // linear learning-rate warm-up, then constant
};

struct StepReport {
    std::int64_t step = 0;   // 1-based
    double loss = 0.0;       // mean cross-entropy (nats) over the step's target tokens
    double grad_norm = 0.0;  // before clipping
    float clip_coefficient = 1.0f;
    float learning_rate = 0.0f;
    std::int64_t tokens = 0;
    std::int64_t target_tokens = 0;
    int micro_batches = 0;
};

std::int64_t count_target_tokens(std::span<const TokenBatch> micro_batches);
float learning_rate_at(const TrainConfig& config, std::int64_t step);

class SerialTrainer {
public:
    SerialTrainer(GptModel& model, TrainConfig config);

    GptModel& model() { return model_; }
    const AdamW& optimizer() const { return optimizer_; }

    // A whole step: accumulate, clip, update. Aborts if no micro-batch has a target token.
    StepReport step(std::span<const TokenBatch> micro_batches);

    // The step's first half on its own (tests, and evaluation without an update): zeroes the
    // gradients, runs every micro-batch forward and backward with loss scale 1/N_step, and
    // returns the mean loss.
    double accumulate_gradients(std::span<const TokenBatch> micro_batches);
    // Mean loss over the target tokens of `micro_batches`, forward only; gradients untouched.
    double evaluate(std::span<const TokenBatch> micro_batches);
    double gradient_norm();

private:
    GptModel& model_;
    TrainConfig config_;
    AdamW optimizer_;
    Activations activations_;
};

}  // namespace fulcrum::engine
