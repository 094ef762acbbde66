// The GPT: a decoder-only transformer over bytes (GPT-2's architecture, Radford et al. 2019).
//
//     x⁰ = wte[token] + wpe[position in document]                        embedding.h
//     for each block l:  x ← x + AttnProj(Attention(QKV(LN₁(x))))       layernorm.h, matmul.h,
//                        x ← x + MlpProj(GELU(Fc(LN₂(x))))                attention.h, mlp.h
//     logits = LN_f(x) · wteᵀ;   loss = mean cross-entropy of next bytes  lm_head.h
//
// GptModel owns the parameters and their gradients (params.h layout) on a backend; an
// Activations object holds what the forward pass of ONE micro-batch saves for its backward
// pass. They are separate so that a pipeline stage can keep several micro-batches in flight
// (one Activations each) over one set of weights.
//
// The passes are split into the pieces a pipeline stage runs: the embedding (first stage),
// a range of blocks, and the head (last stage). Between stages travel the residual stream
// `block_input(l)` forward and `residual_gradient()` backward. forward()/backward() run all
// pieces in order, which is the serial model.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/config.h"
#include "engine/model/micro_batch.h"
#include "engine/model/params.h"

namespace fulcrum::engine {

// Saved by the forward pass of one block, all with n_tokens rows. Layout (per row): ln1,
// atty, residual2, ln2, residual3 [T, C]; qkv [T, 3C] (Q | K | V); fch, fch_gelu [T, 4C];
// att_lse [T, n_head]; ln*_mean, ln*_rstd [T].
struct BlockActivations {
    Tensor ln1, ln1_mean, ln1_rstd;
    Tensor qkv;
    Tensor atty, att_lse;
    Tensor residual2;  // x after the attention branch
    Tensor ln2, ln2_mean, ln2_rstd;
    Tensor fch, fch_gelu;
    Tensor residual3;  // x after the MLP branch: the block's output
};

class Activations {
public:
    Activations(Backend& backend, const GptConfig& config);

    std::int64_t n_tokens() const { return n_tokens_; }
    std::int64_t capacity() const { return capacity_; }
    std::int64_t target_count() const { return target_count_; }

    // Inputs of the micro-batch (device), and its attention spans (host).
    Tensor tokens, targets, positions;
    std::vector<AttentionSpan> spans;

    Tensor encoded;  // x⁰ [T, C]
    std::vector<BlockActivations> blocks;
    Tensor lnf, lnf_mean, lnf_rstd;
    Tensor probs;   // [T, V]: logits, overwritten with softmax probabilities
    Tensor losses;  // [T] per-token cross-entropy, 0 where there is no target

    // The residual stream entering block l (l == n_layer: entering the head).
    Tensor block_input(int layer) const;

    // Sizes the views for `n_tokens` rows, growing the storage when needed.
    void resize(std::int64_t n_tokens);
    void set_target_count(std::int64_t n) { target_count_ = n; }

private:
    Backend& backend_;
    GptConfig config_;
    std::int64_t n_tokens_ = 0;
    std::int64_t capacity_ = 0;
    std::int64_t target_count_ = 0;
    DeviceBuffer floats_;
    DeviceBuffer ints_;
};

class GptModel {
public:
    GptModel(Backend& backend, const GptConfig& config);

    Backend& backend() const { return backend_; }
    const GptConfig& config() const { return config_; }
    const ParameterLayout& layout() const { return layout_; }

    // Flat 1-D buffers in the layout order, and structured views of them.
    Tensor parameters() const { return params_; }
    Tensor gradients() const { return grads_; }
    const GptWeights& weights() const { return weights_; }
    const GptWeights& weight_gradients() const { return weight_grads_; }

    void initialize(std::uint64_t seed);
    void set_parameters(std::span<const float> host);
    std::vector<float> parameters_to_host() const;
    std::vector<float> gradients_to_host() const;
    void zero_gradients();

    // The serial model. forward() returns Σ ℓ over the micro-batch's target tokens (the
    // host waits for it); backward() adds loss_scale · ∂(Σ ℓ)/∂θ to gradients(). With
    // loss_scale = 1/N_step over all micro-batches of a step, the gradients end up as those
    // of the step's mean loss (lm_head.h).
    double forward(const MicroBatch& batch, Activations& acts);
    void backward(Activations& acts, float loss_scale);

    // Pieces, for pipeline stages. Blocks run over [first, last). load_micro_batch() aborts
    // on a batch that fails validate(batch, config): data from outside the engine's own
    // packer should be validated (and the error reported) before it gets here.
    void load_micro_batch(const MicroBatch& batch, Activations& acts);
    void forward_embedding(Activations& acts);
    void forward_blocks(int first, int last, Activations& acts);
    double forward_head(Activations& acts);
    // Sizes the activation-gradient scratch for `acts` and zeroes residual_gradient(); a
    // stage that does not run the head calls it, then receives into residual_gradient().
    void begin_backward(const Activations& acts);
    void backward_head(Activations& acts, float loss_scale);       // calls begin_backward()
    void backward_blocks(int first, int last, Activations& acts);  // last−1 down to first
    void backward_embedding(Activations& acts);
    // ∂L/∂(residual stream) at the current point of the backward pass, [n_tokens, C].
    // backward_blocks(first, last) turns ∂L/∂(output of block last−1) into ∂L/∂(input of
    // block first); backward_embedding consumes it.
    Tensor residual_gradient() const { return scratch_.dresidual; }

private:
    // Gradients of activations, reused by every block (gradient kernels accumulate, so
    // each is zeroed before use). Sized for the largest micro-batch seen.
    struct BackwardScratch {
        Tensor dresidual, dln, datty, dqkv, dfch, dfch_gelu, dlogits;
    };

    Backend& backend_;
    GptConfig config_;
    ParameterLayout layout_;
    DeviceBuffer param_storage_;
    DeviceBuffer grad_storage_;
    Tensor params_, grads_;
    GptWeights weights_, weight_grads_;
    DeviceBuffer scratch_storage_;
    std::int64_t scratch_capacity_ = 0;
    BackwardScratch scratch_;
};

}  // namespace fulcrum::engine
