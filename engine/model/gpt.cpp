#include "engine/model/gpt.h"

#include <numeric>

namespace fulcrum::engine {

namespace {

// Hands out consecutive views of one allocation.
class Carver {
public:
    Carver(const DeviceBuffer& buffer, DType dtype) : buffer_(buffer), dtype_(dtype) {}
    Tensor take(std::initializer_list<std::int64_t> shape) {
        Tensor t = buffer_.view(dtype_, offset_, shape);
        offset_ += t.numel();
        return t;
    }

private:
    const DeviceBuffer& buffer_;
    DType dtype_;
    std::int64_t offset_ = 0;
};

std::int64_t floats_per_token(const GptConfig& c) {
    const std::int64_t per_block = 16 * std::int64_t(c.channels) + c.n_head + 4;
    return c.channels + c.n_layer * per_block + c.channels + 2 + c.vocab_size + 1;
}

constexpr std::int64_t kIntsPerToken = 3;  // tokens, targets, positions

}  // namespace

// ---- Activations --------------------------------------------------------------------------

Activations::Activations(Backend& backend, const GptConfig& config)
    : backend_(backend), config_(config) {}

Tensor Activations::block_input(int layer) const {
    FULCRUM_CHECK(layer >= 0 && layer <= config_.n_layer, "no such block");
    return layer == 0 ? encoded : blocks[layer - 1].residual3;
}

void Activations::resize(std::int64_t n) {
    FULCRUM_CHECK(n >= 1, "a micro-batch needs at least one token");
    if (n > capacity_) {
        floats_ = backend_.allocate(std::size_t(n * floats_per_token(config_)) * sizeof(float));
        ints_ = backend_.allocate(std::size_t(n * kIntsPerToken) * sizeof(std::int32_t));
        capacity_ = n;
    }
    n_tokens_ = n;
    const std::int64_t c = config_.channels;
    Carver ints(ints_, DType::i32);
    tokens = ints.take({n});
    targets = ints.take({n});
    positions = ints.take({n});
    Carver f(floats_, DType::f32);
    encoded = f.take({n, c});
    blocks.resize(std::size_t(config_.n_layer));
    for (BlockActivations& b : blocks) {
        b.ln1 = f.take({n, c});
        b.ln1_mean = f.take({n});
        b.ln1_rstd = f.take({n});
        b.qkv = f.take({n, 3 * c});
        b.atty = f.take({n, c});
        b.att_lse = f.take({n, config_.n_head});
        b.residual2 = f.take({n, c});
        b.ln2 = f.take({n, c});
        b.ln2_mean = f.take({n});
        b.ln2_rstd = f.take({n});
        b.fch = f.take({n, 4 * c});
        b.fch_gelu = f.take({n, 4 * c});
        b.residual3 = f.take({n, c});
    }
    lnf = f.take({n, c});
    lnf_mean = f.take({n});
    lnf_rstd = f.take({n});
    probs = f.take({n, config_.vocab_size});
    losses = f.take({n});
}

// ---- GptModel -----------------------------------------------------------------------------

GptModel::GptModel(Backend& backend, const GptConfig& config)
    : backend_(backend), config_(config), layout_(config) {
    const Status valid = validate(config);
    FULCRUM_CHECK(valid.ok(), valid.ok() ? "" : valid.error().message.c_str());
    const std::int64_t n = layout_.total();
    param_storage_ = backend_.allocate(std::size_t(n) * sizeof(float));
    grad_storage_ = backend_.allocate(std::size_t(n) * sizeof(float));
    params_ = param_storage_.f32(0, {n});
    grads_ = grad_storage_.f32(0, {n});
    weights_ = map_weights(layout_, params_);
    weight_grads_ = map_weights(layout_, grads_);
}

void GptModel::initialize(std::uint64_t seed) {
    std::vector<float> host(std::size_t(layout_.total()));
    initialize_parameters(layout_, seed, host);
    set_parameters(host);
}

void GptModel::set_parameters(std::span<const float> host) {
    FULCRUM_CHECK(std::int64_t(host.size()) == layout_.total(), "wrong parameter count");
    backend_.upload(params_, host.data(), kComputeStream);
}

std::vector<float> GptModel::parameters_to_host() const {
    std::vector<float> host(std::size_t(layout_.total()));
    backend_.download(host.data(), params_, kComputeStream);
    return host;
}

std::vector<float> GptModel::gradients_to_host() const {
    std::vector<float> host(std::size_t(layout_.total()));
    backend_.download(host.data(), grads_, kComputeStream);
    return host;
}

void GptModel::zero_gradients() {
    backend_.fill_zero(grads_);
}

void GptModel::begin_backward(const Activations& acts) {
    const std::int64_t n = acts.n_tokens();
    if (n > scratch_capacity_) {
        const std::int64_t c = config_.channels;
        const std::int64_t per_token = c + c + c + 3 * c + 4 * c + 4 * c + config_.vocab_size;
        scratch_storage_ = backend_.allocate(std::size_t(n * per_token) * sizeof(float));
        scratch_capacity_ = n;
    }
    const std::int64_t c = config_.channels;
    Carver f(scratch_storage_, DType::f32);
    scratch_.dresidual = f.take({n, c});
    scratch_.dln = f.take({n, c});
    scratch_.datty = f.take({n, c});
    scratch_.dqkv = f.take({n, 3 * c});
    scratch_.dfch = f.take({n, 4 * c});
    scratch_.dfch_gelu = f.take({n, 4 * c});
    scratch_.dlogits = f.take({n, config_.vocab_size});
    backend_.fill_zero(scratch_.dresidual);
}

void GptModel::load_micro_batch(const MicroBatch& batch, Activations& acts) {
    const Status valid = validate(batch, config_);
    FULCRUM_CHECK(valid.ok(), valid.ok() ? "" : valid.error().message.c_str());
    acts.resize(batch.size());
    backend_.upload(acts.tokens, batch.tokens.data(), kComputeStream);
    backend_.upload(acts.targets, batch.targets.data(), kComputeStream);
    const std::vector<std::int32_t> positions = batch.positions();
    backend_.upload(acts.positions, positions.data(), kComputeStream);
    acts.spans = batch.attention_spans();
    acts.set_target_count(batch.target_count());
}

double GptModel::forward(const MicroBatch& batch, Activations& acts) {
    load_micro_batch(batch, acts);
    forward_embedding(acts);
    forward_blocks(0, config_.n_layer, acts);
    return forward_head(acts);
}

void GptModel::backward(Activations& acts, float loss_scale) {
    backward_head(acts, loss_scale);
    backward_blocks(0, config_.n_layer, acts);
    backward_embedding(acts);
}

void GptModel::forward_embedding(Activations& acts) {
    backend_.embedding_forward(acts.encoded, acts.tokens, acts.positions, weights_.wte,
                               weights_.wpe);
}

void GptModel::forward_blocks(int first, int last, Activations& acts) {
    FULCRUM_CHECK(0 <= first && first <= last && last <= config_.n_layer, "bad block range");
    const std::int64_t c = config_.channels;
    Backend& be = backend_;
    for (int l = first; l < last; ++l) {
        const BlockWeights& w = weights_.blocks[l];
        BlockActivations& a = acts.blocks[l];
        const Tensor x = acts.block_input(l);
        be.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_weight, w.ln1_bias);
        be.matmul_forward(a.qkv, a.ln1, w.qkv_weight, w.qkv_bias);
        be.attention_forward(a.atty, a.att_lse, a.qkv.columns(0, c), a.qkv.columns(c, c),
                             a.qkv.columns(2 * c, c), acts.spans, config_.n_head);
        // residual2 first holds the projection, then x + projection (in place).
        be.matmul_forward(a.residual2, a.atty, w.attn_proj_weight, w.attn_proj_bias);
        be.residual_forward(a.residual2, x, a.residual2);
        be.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2_weight, w.ln2_bias);
        be.matmul_forward(a.fch, a.ln2, w.fc_weight, w.fc_bias);
        be.gelu_forward(a.fch_gelu, a.fch);
        be.matmul_forward(a.residual3, a.fch_gelu, w.fc_proj_weight, w.fc_proj_bias);
        be.residual_forward(a.residual3, a.residual2, a.residual3);
    }
}

double GptModel::forward_head(Activations& acts) {
    Backend& be = backend_;
    be.layernorm_forward(acts.lnf, acts.lnf_mean, acts.lnf_rstd, acts.block_input(config_.n_layer),
                         weights_.lnf_weight, weights_.lnf_bias);
    be.matmul_forward(acts.probs, acts.lnf, weights_.wte, Tensor{});  // logits
    be.crossentropy_forward(acts.losses, acts.probs, acts.probs, acts.targets);
    std::vector<float> losses(std::size_t(acts.n_tokens()));
    be.download(losses.data(), acts.losses, kComputeStream);
    // Summed in double: the step's mean is formed over many micro-batches (lm_head.h).
    return std::accumulate(losses.begin(), losses.end(), 0.0);
}

void GptModel::backward_head(Activations& acts, float loss_scale) {
    Backend& be = backend_;
    begin_backward(acts);
    be.fill_zero(scratch_.dlogits);
    be.fill_zero(scratch_.dln);
    be.crossentropy_backward(scratch_.dlogits, acts.probs, acts.targets, loss_scale);
    be.matmul_backward(scratch_.dln, weight_grads_.wte, Tensor{}, scratch_.dlogits, acts.lnf,
                       weights_.wte);
    be.layernorm_backward(scratch_.dresidual, weight_grads_.lnf_weight, weight_grads_.lnf_bias,
                          scratch_.dln, acts.block_input(config_.n_layer), weights_.lnf_weight,
                          acts.lnf_mean, acts.lnf_rstd);
}

void GptModel::backward_blocks(int first, int last, Activations& acts) {
    FULCRUM_CHECK(0 <= first && first <= last && last <= config_.n_layer, "bad block range");
    const std::int64_t c = config_.channels;
    Backend& be = backend_;
    BackwardScratch& s = scratch_;
    FULCRUM_CHECK(s.dresidual.rows() == acts.n_tokens(), "begin_backward() not called");
    for (int l = last - 1; l >= first; --l) {
        const BlockWeights& w = weights_.blocks[l];
        const BlockWeights& g = weight_grads_.blocks[l];
        const BlockActivations& a = acts.blocks[l];
        const Tensor x = acts.block_input(l);
        // dresidual holds ∂L/∂residual3. MLP branch; its LayerNorm adds into dresidual,
        // which then holds ∂L/∂residual2 (identity path + branch).
        be.fill_zero(s.dfch_gelu);
        be.matmul_backward(s.dfch_gelu, g.fc_proj_weight, g.fc_proj_bias, s.dresidual, a.fch_gelu,
                           w.fc_proj_weight);
        be.fill_zero(s.dfch);
        be.gelu_backward(s.dfch, s.dfch_gelu, a.fch);
        be.fill_zero(s.dln);
        be.matmul_backward(s.dln, g.fc_weight, g.fc_bias, s.dfch, a.ln2, w.fc_weight);
        be.layernorm_backward(s.dresidual, g.ln2_weight, g.ln2_bias, s.dln, a.residual2,
                              w.ln2_weight, a.ln2_mean, a.ln2_rstd);
        // Attention branch; afterwards dresidual holds ∂L/∂x.
        be.fill_zero(s.datty);
        be.matmul_backward(s.datty, g.attn_proj_weight, g.attn_proj_bias, s.dresidual, a.atty,
                           w.attn_proj_weight);
        be.fill_zero(s.dqkv);
        be.attention_backward(s.dqkv.columns(0, c), s.dqkv.columns(c, c), s.dqkv.columns(2 * c, c),
                              s.datty, a.qkv.columns(0, c), a.qkv.columns(c, c),
                              a.qkv.columns(2 * c, c), a.atty, a.att_lse, acts.spans,
                              config_.n_head);
        be.fill_zero(s.dln);
        be.matmul_backward(s.dln, g.qkv_weight, g.qkv_bias, s.dqkv, a.ln1, w.qkv_weight);
        be.layernorm_backward(s.dresidual, g.ln1_weight, g.ln1_bias, s.dln, x, w.ln1_weight,
                              a.ln1_mean, a.ln1_rstd);
    }
}

void GptModel::backward_embedding(Activations& acts) {
    backend_.embedding_backward(weight_grads_.wte, weight_grads_.wpe, scratch_.dresidual,
                                acts.tokens, acts.positions);
}

}  // namespace fulcrum::engine
