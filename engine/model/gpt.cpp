#include "engine/model/gpt.h"

#include "engine/instrument/annotations.h"

#include <numeric>
#include <tuple>

#include "engine/parallel/context_parallel.h"
#include "engine/parallel/tensor_parallel.h"

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

// Per block: ln1, residual2, ln2, residual3 [C]; qkv [3C_l], atty [C_l], fch, fch_gelu [4C_l];
// lse [n_head/tp]; two means and rstds. C_l = C/tp (C serially: 16C + n_head + 4). Without qkv
// when it is offloaded (it waits in pinned host memory then).
std::int64_t floats_per_token(const GptConfig& c, int tp_size, bool offload_qkv) {
    const std::int64_t cl = c.channels / tp_size;
    const std::int64_t per_block = 4 * std::int64_t(c.channels) + (offload_qkv ? 9 : 12) * cl +
                                   c.n_head / tp_size + 4;
    return c.channels + c.n_layer * per_block + c.channels + 2 + c.vocab_size + 1;
}

// CP layout of a [T, 3C_l] qkv (or dqkv) buffer: Q [T, C_l], then this rank's K|V [T, 2C_l].
Tensor cp_queries(const Tensor& qkv) {
    const std::int64_t t = qkv.rows(), cl = qkv.cols() / 3;
    return qkv.reshaped({t * 3 * cl}).slice(0, t * cl).reshaped({t, cl});
}
Tensor cp_local_kv(const Tensor& qkv) {
    const std::int64_t t = qkv.rows(), cl = qkv.cols() / 3;
    return qkv.reshaped({t * 3 * cl}).slice(t * cl, 2 * t * cl).reshaped({t, 2 * cl});
}

// The layout is built in the constructor's initialiser list: the config is checked first.
const GptConfig& validated(const GptConfig& config) {
    const Status valid = validate(config);
    FULCRUM_CHECK(valid.ok(), valid.ok() ? "" : valid.error().message.c_str());
    return config;
}

void reserve(Backend& backend, DeviceBuffer& storage, std::int64_t& capacity, std::int64_t floats) {
    if (floats > capacity) {
        storage = backend.allocate(std::size_t(floats) * sizeof(float));
        capacity = floats;
    }
}

constexpr std::int64_t kIntsPerToken = 3;  // tokens, targets, positions

}  // namespace

// ---- Activations --------------------------------------------------------------------------

Activations::Activations(Backend& backend, const GptConfig& config, int tp_size)
    : backend_(backend), config_(config), tp_size_(tp_size) {
    const Status valid = validate_tensor_parallel(config, tp_size);
    FULCRUM_CHECK(valid.ok(), valid.ok() ? "" : valid.error().message.c_str());
}

Activations::Activations(const GptModel& model)
    : Activations(model.backend(), model.config(), model.parallel().tp_size()) {
    offload_qkv_ = model.offloads_qkv();
}

float* Activations::host_q(int layer) const {
    return host_q_.get() + std::int64_t(layer) * capacity_ * (config_.channels / tp_size_);
}

float* Activations::host_kv(int layer) const {
    return host_kv_.get() + std::int64_t(layer) * kv_capacity_ * 2 * (config_.channels / tp_size_);
}

QkvStore Activations::qkv_store(int layer) const {
    FULCRUM_CHECK(layer >= 0 && layer < config_.n_layer, "no such block");
    if (offload_qkv_) {
        return {Tensor{}, Tensor{}, host_q(layer), host_kv(layer)};
    }
    const BlockActivations& b = blocks[std::size_t(layer)];
    return {cp_queries(b.qkv), context_parallel() ? b.kv : cp_local_kv(b.qkv), nullptr, nullptr};
}

Tensor Activations::block_input(int layer) const {
    FULCRUM_CHECK(layer >= 0 && layer <= config_.n_layer, "no such block");
    return layer == 0 ? encoded : blocks[layer - 1].residual3;
}

void Activations::resize(std::int64_t n, std::int64_t gathered_rows) {
    FULCRUM_CHECK(n >= 1, "a micro-batch needs at least one token");
    FULCRUM_CHECK(gathered_rows >= 0, "negative gathered rows");
    const std::int64_t c = config_.channels;
    const std::int64_t cl = c / tp_size_;
    const std::int64_t layers = config_.n_layer;
    // Freeing the old buffers waits for the copies in flight to or from them (backend.h).
    if (n > capacity_) {
        floats_ = backend_.allocate(
            std::size_t(n * floats_per_token(config_, tp_size_, offload_qkv_)) * sizeof(float));
        ints_ = backend_.allocate(std::size_t(n * kIntsPerToken) * sizeof(std::int32_t));
        capacity_ = n;
        if (offload_qkv_) {
            host_q_ = backend_.allocate_pinned(std::size_t(layers * n * cl));
        }
    }
    if (gathered_rows > gathered_capacity_ && !offload_qkv_) {
        gathered_ = backend_.allocate(std::size_t(layers * gathered_rows * 2 * cl) * sizeof(float));
        gathered_capacity_ = gathered_rows;
    }
    // K/V rows: the query rows' own serially, the gathered ones under CP.
    const std::int64_t kv_rows = gathered_rows > 0 ? gathered_rows : n;
    if (offload_qkv_ && kv_rows > kv_capacity_) {
        host_kv_ = backend_.allocate_pinned(std::size_t(layers * kv_rows * 2 * cl));
        kv_capacity_ = kv_rows;
    }
    n_tokens_ = n;
    Carver ints(ints_, DType::i32);
    tokens = ints.take({n});
    targets = ints.take({n});
    positions = ints.take({n});
    Carver f(floats_, DType::f32);
    encoded = f.take({n, c});
    blocks.resize(std::size_t(config_.n_layer));
    Carver gathered(gathered_, DType::f32);
    for (std::size_t l = 0; l < blocks.size(); ++l) {
        BlockActivations& b = blocks[l];
        b.ln1 = f.take({n, c});
        b.ln1_mean = f.take({n});
        b.ln1_rstd = f.take({n});
        if (offload_qkv_) {
            b.qkv = Tensor{};  // in pinned host memory: host_q / host_kv
            b.kv = Tensor{};
        } else {
            b.qkv = f.take({n, 3 * cl});
            b.kv = gathered_rows > 0 ? gathered.take({gathered_rows, 2 * cl}) : Tensor{};
        }
        b.atty = f.take({n, cl});
        b.att_lse = f.take({n, config_.n_head / tp_size_});
        b.residual2 = f.take({n, c});
        b.ln2 = f.take({n, c});
        b.ln2_mean = f.take({n});
        b.ln2_rstd = f.take({n});
        b.fch = f.take({n, 4 * cl});
        b.fch_gelu = f.take({n, 4 * cl});
        b.residual3 = f.take({n, c});
    }
    lnf = f.take({n, c});
    lnf_mean = f.take({n});
    lnf_rstd = f.take({n});
    probs = f.take({n, config_.vocab_size});
    losses = f.take({n});
}

// ---- GptModel -----------------------------------------------------------------------------

GptModel::GptModel(Backend& backend, const GptConfig& config, ModelParallel parallel)
    : backend_(backend),
      config_(config),
      parallel_(parallel),
      layout_(validated(config), parallel.tp_size()) {
    const std::int64_t n = layout_.total();
    param_storage_ = backend_.allocate(std::size_t(n) * sizeof(float));
    grad_storage_ = backend_.allocate(std::size_t(n) * sizeof(float));
    params_ = param_storage_.f32(0, {n});
    grads_ = grad_storage_.f32(0, {n});
    weights_ = map_weights(layout_, params_);
    weight_grads_ = map_weights(layout_, grads_);
    set_attention_chunking({});
}

void GptModel::set_attention_chunking(ChunkedAttentionOptions options) {
    const int tp = parallel_.tp_size();
    attention_ = std::make_unique<ChunkedAttention>(backend_, int(config_.channels / tp),
                                                    config_.n_head / tp, options);
}

void GptModel::initialize(std::uint64_t seed) {
    const ParameterLayout serial(config_);
    std::vector<float> host(std::size_t(serial.total()));
    initialize_parameters(serial, seed, host);
    if (parallel_.tp_size() == 1) {
        set_parameters(host);
    } else {
        set_parameters(shard_parameters(host, config_, parallel_.tp_size(), parallel_.tp_rank()));
    }
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

void GptModel::check_activations(const Activations& acts) const {
    FULCRUM_CHECK(acts.tp_size() == parallel_.tp_size(),
                  "Activations made for another TP degree than the model's");
    FULCRUM_CHECK(acts.offloads_qkv() == offloads_qkv(),
                  "Activations made before the model's attention chunking was set");
}

void GptModel::begin_backward(const Activations& acts) {
    check_activations(acts);
    const std::int64_t n = acts.n_tokens();
    const std::int64_t c = config_.channels;
    const std::int64_t cl = c / parallel_.tp_size();
    const std::int64_t per_token = c + c + cl + 3 * cl + 4 * cl + 4 * cl + config_.vocab_size;
    if (n > scratch_capacity_) {
        scratch_storage_ = backend_.allocate(std::size_t(n * per_token) * sizeof(float));
        scratch_capacity_ = n;
    }
    Carver f(scratch_storage_, DType::f32);
    scratch_.dresidual = f.take({n, c});
    scratch_.dln = f.take({n, c});
    scratch_.datty = f.take({n, cl});
    scratch_.dqkv = f.take({n, 3 * cl});
    scratch_.dfch = f.take({n, 4 * cl});
    scratch_.dfch_gelu = f.take({n, 4 * cl});
    scratch_.dlogits = f.take({n, config_.vocab_size});
    scratch_.dkv = Tensor{};
    if (acts.context_parallel()) {
        const std::int64_t rows = acts.exchange.total_rows();
        reserve(backend_, gathered_scratch_storage_, gathered_scratch_capacity_, rows * 2 * cl);
        scratch_.dkv = gathered_scratch_storage_.f32(0, {rows, 2 * cl});
    }
    backend_.fill_zero(scratch_.dresidual);
}

void GptModel::load_micro_batch(const MicroBatch& batch, Activations& acts) {
    const Status valid = validate(batch, config_);
    FULCRUM_CHECK(valid.ok(), valid.ok() ? "" : valid.error().message.c_str());
    FULCRUM_CHECK(parallel_.cp_size() == 1,
                  "under CP every rank loads its ContextShard (make_context_shard), not the "
                  "whole micro-batch");
    check_activations(acts);
    acts.exchange = {};
    acts.resize(batch.size());
    backend_.upload(acts.tokens, batch.tokens.data(), kComputeStream);
    backend_.upload(acts.targets, batch.targets.data(), kComputeStream);
    const std::vector<std::int32_t> positions = batch.positions();
    backend_.upload(acts.positions, positions.data(), kComputeStream);
    acts.spans = batch.attention_spans();
    acts.set_target_count(batch.target_count());
}

void GptModel::load_micro_batch(const ContextShard& shard, Activations& acts) {
    const Status valid = validate(shard, config_);
    FULCRUM_CHECK(valid.ok(), valid.ok() ? "" : valid.error().message.c_str());
    FULCRUM_CHECK(int(shard.exchange.rows_per_rank.size()) == parallel_.cp_size(),
                  "the context shard was made for another CP degree");
    FULCRUM_CHECK(shard.exchange.rows_per_rank[std::size_t(parallel_.cp_rank())] == shard.size(),
                  "the context shard was made for another CP rank");
    check_activations(acts);
    acts.exchange = shard.exchange;
    acts.resize(shard.size(), shard.exchange.total_rows());
    backend_.upload(acts.tokens, shard.tokens.data(), kComputeStream);
    backend_.upload(acts.targets, shard.targets.data(), kComputeStream);
    backend_.upload(acts.positions, shard.positions.data(), kComputeStream);
    acts.spans = shard.spans;
    acts.set_target_count(shard.target_count());
}

double GptModel::forward(const MicroBatch& batch, Activations& acts) {
    load_micro_batch(batch, acts);
    forward_embedding(acts);
    forward_blocks(0, config_.n_layer, acts);
    return forward_head(acts);
}

double GptModel::forward(const ContextShard& shard, Activations& acts) {
    load_micro_batch(shard, acts);
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
    check_activations(acts);
    const std::int64_t cl = config_.channels / parallel_.tp_size();
    // Row-parallel biases are added once, by TP rank 0, before the all-reduce (tensor_parallel.h).
    const bool adds_row_parallel_bias = parallel_.tp_rank() == 0;
    Communicator* tp = parallel_.tp;
    Backend& be = backend_;
    for (int l = first; l < last; ++l) {
        const BlockWeights& w = weights_.blocks[l];
        BlockActivations& a = acts.blocks[l];
        const Tensor x = acts.block_input(l);
        instrument::Range attention_range("attention", Category::attention);
        be.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_weight, w.ln1_bias);
        // Column-parallel QKV (Megatron's f: identity forward).
        if (attention_->enabled()) {
            // FPDT: Q (and serially K|V) projected chunk by chunk inside the attention;
            // under CP this rank's K|V first, whole, for the all-gather.
            QkvProjection projection{a.ln1, w.qkv_weight.slice(0, cl), w.qkv_bias.slice(0, cl),
                                     Tensor{}, Tensor{}};
            Tensor gathered;
            if (acts.context_parallel()) {
                // With offload both live in one buffer for all blocks, not in the block's own.
                Tensor kv_local;
                if (acts.offloads_qkv()) {
                    std::tie(kv_local, gathered) = offload_kv_scratch(acts);
                    attention_->await_gathered_offload();  // the last block's K/V have left it
                } else {
                    kv_local = cp_local_kv(a.qkv);
                    gathered = a.kv;
                }
                be.matmul_forward(kv_local, a.ln1, w.qkv_weight.slice(cl, 2 * cl),
                                  w.qkv_bias.slice(cl, 2 * cl));
                gather_context_rows(be, parallel_.cp, acts.exchange, kv_local,
                                    exchange_staging(gathered.rows()), gathered);
            } else {
                projection.kv_weight = w.qkv_weight.slice(cl, 2 * cl);
                projection.kv_bias = w.qkv_bias.slice(cl, 2 * cl);
            }
            attention_->forward(projection, gathered, acts.qkv_store(l), a.atty, a.att_lse,
                                acts.spans);
        } else if (acts.context_parallel()) {
            // Q and this rank's K|V as two GEMMs into contiguous blocks, K|V gathered over CP.
            const Tensor q = cp_queries(a.qkv), kv_local = cp_local_kv(a.qkv);
            be.matmul_forward(q, a.ln1, w.qkv_weight.slice(0, cl), w.qkv_bias.slice(0, cl));
            be.matmul_forward(kv_local, a.ln1, w.qkv_weight.slice(cl, 2 * cl),
                              w.qkv_bias.slice(cl, 2 * cl));
            gather_context_rows(be, parallel_.cp, acts.exchange, kv_local,
                                exchange_staging(a.kv.rows()), a.kv);
            be.attention_forward(a.atty, a.att_lse, q, a.kv.columns(0, cl), a.kv.columns(cl, cl),
                                 acts.spans, n_head_local());
        } else {
            be.matmul_forward(a.qkv, a.ln1, w.qkv_weight, w.qkv_bias);
            be.attention_forward(a.atty, a.att_lse, a.qkv.columns(0, cl), a.qkv.columns(cl, cl),
                                 a.qkv.columns(2 * cl, cl), acts.spans, n_head_local());
        }
        // Row-parallel projection, then g: all-reduce forward. residual2 first holds the
        // projection, then x + projection (in place).
        be.matmul_forward(a.residual2, a.atty, w.attn_proj_weight,
                          adds_row_parallel_bias ? w.attn_proj_bias : Tensor{});
        all_reduce_sum(tp, a.residual2);
        be.residual_forward(a.residual2, x, a.residual2);
        attention_range.end();
        instrument::Range mlp_range("mlp", Category::compute);
        be.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2_weight, w.ln2_bias);
        be.matmul_forward(a.fch, a.ln2, w.fc_weight, w.fc_bias);  // column-parallel (f)
        be.gelu_forward(a.fch_gelu, a.fch);
        be.matmul_forward(a.residual3, a.fch_gelu, w.fc_proj_weight,
                          adds_row_parallel_bias ? w.fc_proj_bias : Tensor{});
        all_reduce_sum(tp, a.residual3);  // g
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
    check_activations(acts);
    const std::int64_t cl = config_.channels / parallel_.tp_size();
    Communicator* tp = parallel_.tp;
    Backend& be = backend_;
    BackwardScratch& s = scratch_;
    FULCRUM_CHECK(s.dresidual.rows() == acts.n_tokens(), "begin_backward() not called");
    FULCRUM_CHECK(!acts.context_parallel() || s.dkv.rows() == acts.exchange.total_rows(),
                  "begin_backward() not called for this micro-batch");
    for (int l = last - 1; l >= first; --l) {
        const BlockWeights& w = weights_.blocks[l];
        const BlockWeights& g = weight_grads_.blocks[l];
        const BlockActivations& a = acts.blocks[l];
        const Tensor x = acts.block_input(l);
        if (acts.offloads_qkv()) {
            // The attention backward's first K/V and Q chunks come in while the MLP computes.
            attention_->prefetch_backward(acts.qkv_store(l), acts.n_tokens(), kv_rows(acts),
                                          acts.spans);
        }
        // dresidual holds ∂L/∂residual3. MLP branch; its LayerNorm adds into dresidual,
        // which then holds ∂L/∂residual2 (identity path + branch). Under TP the row-parallel
        // projection needs no exchange (g: identity backward) and the column-parallel fc
        // leaves a partial ∂L/∂ln2 that is summed over TP (f: all-reduce backward).
        instrument::Range mlp_range("mlp", Category::compute);
        be.fill_zero(s.dfch_gelu);
        be.matmul_backward(s.dfch_gelu, g.fc_proj_weight, g.fc_proj_bias, s.dresidual, a.fch_gelu,
                           w.fc_proj_weight);
        be.fill_zero(s.dfch);
        be.gelu_backward(s.dfch, s.dfch_gelu, a.fch);
        be.fill_zero(s.dln);
        be.matmul_backward(s.dln, g.fc_weight, g.fc_bias, s.dfch, a.ln2, w.fc_weight);
        all_reduce_sum(tp, s.dln);
        be.layernorm_backward(s.dresidual, g.ln2_weight, g.ln2_bias, s.dln, a.residual2,
                              w.ln2_weight, a.ln2_mean, a.ln2_rstd);
        mlp_range.end();
        // Attention branch; afterwards dresidual holds ∂L/∂x.
        instrument::Range attention_range("attention", Category::attention);
        be.fill_zero(s.datty);
        be.matmul_backward(s.datty, g.attn_proj_weight, g.attn_proj_bias, s.dresidual, a.atty,
                           w.attn_proj_weight);
        be.fill_zero(s.dqkv);
        be.fill_zero(s.dln);
        if (attention_->enabled()) {
            // K/V chunks outer, Q chunks inner (chunked_attention.h); dQ into the Q block of
            // dqkv, dK|dV into its K|V block (serial) or into the gathered rows (CP), which
            // are then summed over CP onto the ranks that own them.
            const Tensor dq = cp_queries(s.dqkv);
            const Tensor dkv = acts.context_parallel() ? s.dkv : cp_local_kv(s.dqkv);
            if (acts.context_parallel()) {
                be.fill_zero(s.dkv);
            }
            attention_->backward(acts.qkv_store(l), dq, dkv.columns(0, cl), dkv.columns(cl, cl),
                                 s.datty, a.atty, a.att_lse, acts.spans);
            if (acts.context_parallel()) {
                reduce_scatter_context_rows(be, parallel_.cp, acts.exchange, s.dkv,
                                            exchange_staging(s.dkv.rows()), cp_local_kv(s.dqkv));
            }
            be.matmul_backward(s.dln, g.qkv_weight.slice(0, cl), g.qkv_bias.slice(0, cl), dq, a.ln1,
                               w.qkv_weight.slice(0, cl));
            be.matmul_backward(s.dln, g.qkv_weight.slice(cl, 2 * cl), g.qkv_bias.slice(cl, 2 * cl),
                               cp_local_kv(s.dqkv), a.ln1, w.qkv_weight.slice(cl, 2 * cl));
        } else if (acts.context_parallel()) {
            // dK|dV of the gathered rows from this rank's queries, summed over CP onto the
            // ranks that own the rows: the one cross-rank sum of CP (context_parallel.h).
            const Tensor q = cp_queries(a.qkv), dq = cp_queries(s.dqkv);
            const Tensor dkv_local = cp_local_kv(s.dqkv);
            be.fill_zero(s.dkv);
            be.attention_backward(dq, s.dkv.columns(0, cl), s.dkv.columns(cl, cl), s.datty, q,
                                  a.kv.columns(0, cl), a.kv.columns(cl, cl), a.atty, a.att_lse,
                                  acts.spans, n_head_local());
            reduce_scatter_context_rows(be, parallel_.cp, acts.exchange, s.dkv,
                                        exchange_staging(s.dkv.rows()), dkv_local);
            be.matmul_backward(s.dln, g.qkv_weight.slice(0, cl), g.qkv_bias.slice(0, cl), dq, a.ln1,
                               w.qkv_weight.slice(0, cl));
            be.matmul_backward(s.dln, g.qkv_weight.slice(cl, 2 * cl), g.qkv_bias.slice(cl, 2 * cl),
                               dkv_local, a.ln1, w.qkv_weight.slice(cl, 2 * cl));
        } else {
            be.attention_backward(s.dqkv.columns(0, cl), s.dqkv.columns(cl, cl),
                                  s.dqkv.columns(2 * cl, cl), s.datty, a.qkv.columns(0, cl),
                                  a.qkv.columns(cl, cl), a.qkv.columns(2 * cl, cl), a.atty,
                                  a.att_lse, acts.spans, n_head_local());
            be.matmul_backward(s.dln, g.qkv_weight, g.qkv_bias, s.dqkv, a.ln1, w.qkv_weight);
        }
        all_reduce_sum(tp, s.dln);  // f
        be.layernorm_backward(s.dresidual, g.ln1_weight, g.ln1_bias, s.dln, x, w.ln1_weight,
                              a.ln1_mean, a.ln1_rstd);
    }
}

Tensor GptModel::exchange_staging(std::int64_t rows) {
    const std::int64_t width = 2 * (config_.channels / parallel_.tp_size());
    reserve(backend_, staging_storage_, staging_capacity_, rows * width);
    return staging_storage_.f32(0, {rows, width});
}

std::pair<Tensor, Tensor> GptModel::offload_kv_scratch(const Activations& acts) {
    const std::int64_t width = 2 * (config_.channels / parallel_.tp_size());
    const std::int64_t local = acts.n_tokens(), total = acts.exchange.total_rows();
    reserve(backend_, offload_kv_storage_, offload_kv_capacity_, (local + total) * width);
    return {offload_kv_storage_.f32(0, {local, width}),
            offload_kv_storage_.f32(local * width, {total, width})};
}

std::int64_t GptModel::kv_rows(const Activations& acts) const {
    return acts.context_parallel() ? acts.exchange.total_rows() : acts.n_tokens();
}

int GptModel::n_head_local() const { return config_.n_head / parallel_.tp_size(); }

void GptModel::backward_embedding(Activations& acts) {
    backend_.embedding_backward(weight_grads_.wte, weight_grads_.wpe, scratch_.dresidual,
                                acts.tokens, acts.positions);
}

}  // namespace fulcrum::engine
