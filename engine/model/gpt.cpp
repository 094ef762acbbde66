#include "engine/model/gpt.h"

#include "core/trace/annotations.h"
#include "engine/instrument/annotations.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <tuple>

#include "engine/model/context_parallel.h"
#include "engine/model/tensor_parallel.h"

namespace fulcrum::engine {

// Hands out consecutive views of one allocation. Without a buffer it only counts the elements,
// so that one function both sizes an allocation and lays it out.
class Carver {
public:
    Carver(const DeviceBuffer* buffer, DType dtype) : buffer_(buffer), dtype_(dtype) {}
    Tensor take(std::initializer_list<std::int64_t> shape) {
        std::int64_t count = 1;
        for (std::int64_t d : shape) {
            count *= d;
        }
        Tensor t = buffer_ != nullptr ? buffer_->view(dtype_, offset_, shape) : Tensor{};
        offset_ += count;
        return t;
    }
    std::int64_t used() const { return offset_; }
    std::size_t bytes() const { return std::size_t(offset_) * dtype_size(dtype_); }

private:
    const DeviceBuffer* buffer_;
    DType dtype_;
    std::int64_t offset_ = 0;
};

namespace {

// CP layout of a [T, 3C_l] qkv (or dqkv) buffer: Q [T, C_l], then this rank's K|V [T, 2C_l].
Tensor cp_queries(const Tensor& qkv) {
    const std::int64_t t = qkv.rows(), cl = qkv.cols() / 3;
    return qkv.reshaped({t * 3 * cl}).slice(0, t * cl).reshaped({t, cl});
}
Tensor cp_local_kv(const Tensor& qkv) {
    const std::int64_t t = qkv.rows(), cl = qkv.cols() / 3;
    return qkv.reshaped({t * 3 * cl}).slice(t * cl, 2 * t * cl).reshaped({t, 2 * cl});
}

// Ulysses' head shard in a [T_total, 3w] buffer (context_parallel.h): Q [T_total, w], then
// K|V [T_total, 2w], each contiguous; its three blocks Q, K, V as the exchange takes them.
struct HeadBlocks {
    Tensor blocks[3];
};
HeadBlocks head_blocks(const Tensor& heads) {
    const Tensor kv = cp_local_kv(heads);
    const std::int64_t w = kv.cols() / 2;
    return {{cp_queries(heads), kv.columns(0, w), kv.columns(w, w)}};
}

// FPDT's chunk of head-shard rows [first, first + rows): the exchange that carries it
// (exchange_window, context_parallel.h) and this CP rank's local rows in it, [begin, begin +
// count).
struct ChunkExchange {
    ContextExchange exchange;
    std::int64_t begin = 0, count = 0;
};
ChunkExchange chunk_exchange(const ContextExchange& exchange, int cp_rank, std::int64_t first,
                             std::int64_t rows) {
    Result<ExchangeWindow> window = exchange_window(exchange, first, rows);
    FULCRUM_CHECK(window.ok(), window.error().message.c_str());
    const auto me = std::size_t(cp_rank);
    ChunkExchange chunk;
    chunk.begin = window->local_first[me];
    chunk.count = window->exchange.rows_per_rank[me];
    chunk.exchange = std::move(window->exchange);
    return chunk;
}

// The layout is built in the constructor's initialiser list: the config is checked first.
const ModelShape& validated(const ModelShape& config) {
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

// Grows `storage` to what `carver` counted.
void reserve(Backend& backend, DeviceBuffer& storage, const Carver& carver) {
    if (carver.bytes() > storage.bytes()) {
        storage = backend.allocate(carver.bytes());
    }
}

constexpr std::int64_t kIntsPerToken = 3;  // tokens, targets, positions

}  // namespace

// ---- Activations --------------------------------------------------------------------------

Activations::Activations(Backend& backend, const ModelShape& config, int tp_size)
    : backend_(backend), config_(config), tp_size_(tp_size) {
    const Status valid = validate_tensor_parallel(config, tp_size);
    FULCRUM_CHECK(valid.ok(), valid.ok() ? "" : valid.error().message.c_str());
    blocks.resize(std::size_t(config_.layers));
    Run whole;
    whole.last = config_.layers;
    runs_.push_back(std::move(whole));
    held_runs_.assign(std::size_t(config_.layers), 0);
}

Activations::Activations(const GptModel& model, std::vector<bool> blocks_held)
    : Activations(model.backend(), model.config(), model.parallel().tp_size()) {
    FULCRUM_CHECK(blocks_held.empty() || int(blocks_held.size()) == config_.layers,
                  "one flag per block");
    if (!blocks_held.empty()) {
        runs_.clear();
        held_runs_.assign(std::size_t(config_.layers), -1);
        for (int l = 0; l < config_.layers; ++l) {
            if (!blocks_held[std::size_t(l)]) {
                continue;
            }
            if (l == 0 || !blocks_held[std::size_t(l - 1)]) {
                Run run;
                run.first = l;
                run.last = l + 1;
                runs_.push_back(std::move(run));
            }
            runs_.back().last = l + 1;
            held_runs_[std::size_t(l)] = int(runs_.size()) - 1;
        }
    }
    tp_rank_ = model.parallel().tp_rank();
    offload_qkv_ = model.offloads_qkv();
    offload_checkpoints_ = model.offloads_checkpoints();
    ulysses_ = model.parallel().ulysses();
    cp_size_ = model.parallel().cp_size();
    sequence_parallel_ = model.sequence_parallel();
    recompute_ = model.recompute();
    keeps_output_gradients_ = model.splits_backward();
    if (keeps_output_gradients_) {
        output_gradients.resize(std::size_t(config_.layers));
    }
}

Activations::Run& Activations::run_of(int first, int last) {
    for (Run& run : runs_) {
        if (run.first == first && run.last == last) {
            return run;
        }
    }
    FULCRUM_CHECK(false, "blocks [first, last) are not a run of the blocks these Activations hold");
    return runs_.front();
}

std::int64_t Activations::attention_width() const {
    const std::int64_t cl = config_.hidden / tp_size_;
    return ulysses() ? cl / cp_size_ : cl;
}

float* Activations::host_q(int layer) const {
    const Run& run = runs_[std::size_t(held_runs_[std::size_t(layer)])];
    return run.host_q.get() + std::int64_t(layer - run.first) * run.q_rows * attention_width();
}

float* Activations::host_kv(int layer) const {
    const Run& run = runs_[std::size_t(held_runs_[std::size_t(layer)])];
    return run.host_kv.get() +
           std::int64_t(layer - run.first) * run.kv_rows * 2 * attention_width();
}

std::int64_t Activations::head_shard_heads() const {
    return config_.heads / tp_size_ / cp_size_;
}

float* Activations::host_out(int layer) const {
    const Run& run = runs_[std::size_t(held_runs_[std::size_t(layer)])];
    if (!run.host_out) {
        return nullptr;
    }
    return run.host_out.get() + std::int64_t(layer - run.first) * run.out_rows *
                                    (attention_width() + head_shard_heads());
}

float* Activations::host_lse(int layer) const {
    float* out = host_out(layer);
    return out == nullptr ? nullptr
                          : out + runs_[std::size_t(held_runs_[std::size_t(layer)])].out_rows *
                                      attention_width();
}

QkvStore Activations::qkv_store(int layer, const BlockActivations& block) const {
    FULCRUM_CHECK(layer >= 0 && layer < config_.layers, "no such block");
    if (offload_qkv_) {
        FULCRUM_CHECK(held_runs_[std::size_t(layer)] >= 0 && host_q(layer) != nullptr,
                      "block's Q, K and V have no host memory: not held, or released");
        if (offloads_attention_output()) {
            FULCRUM_CHECK(host_out(layer) != nullptr,
                          "block's attention output has no host memory: not held, or released");
            return {Tensor{},       Tensor{},        host_q(layer),
                    host_kv(layer), host_out(layer), host_lse(layer)};
        }
        return {Tensor{}, Tensor{}, host_q(layer), host_kv(layer)};
    }
    if (ulysses()) {  // the head shard: Q, then K|V (context_parallel.h)
        return {cp_queries(block.kv), cp_local_kv(block.kv), nullptr, nullptr};
    }
    return {cp_queries(block.qkv), context_parallel() ? block.kv : cp_local_kv(block.qkv), nullptr,
            nullptr};
}

float* Activations::host_checkpoint(int layer) const {
    if (!offload_checkpoints_) {
        return nullptr;
    }
    const int held = layer >= 0 ? held_runs_[std::size_t(layer)] : -1;
    if (held < 0) {
        return nullptr;  // another stage's block, or the embedding
    }
    const Run& run = runs_[std::size_t(held)];
    if (layer == run.last - 1) {
        return nullptr;  // the model chunk's output stays on the device
    }
    FULCRUM_CHECK(run.host_checkpoints != nullptr, "checkpoints not allocated, or released");
    return run.host_checkpoints.get() +
           std::int64_t(layer - run.first) * run.checkpoint_rows * config_.hidden;
}

Tensor Activations::block_input(int layer) const {
    FULCRUM_CHECK(layer >= 0 && layer <= config_.layers, "no such block");
    return layer == 0 ? encoded : blocks[layer - 1].residual3;
}

bool Activations::qkv_freed_after_input_gradients() const {
    // Selective recomputation re-runs attention on the kept Q, K, V before W too, and full
    // recomputation with offload writes its Q, K, V to the same host rows again. Without
    // recomputation and offload B's dQKV overwrites them (output_gradients_in_forward_rows).
    return keeps_output_gradients_ && recompute_ == Recompute::none && offload_qkv_;
}

bool Activations::output_gradients_in_forward_rows() const {
    return keeps_output_gradients_ && recompute_ == Recompute::none;
}

void Activations::carve_run(const Run& run, Carver& kept, Carver& until_input_gradients,
                            std::int64_t n, std::int64_t gathered_rows) {
    const std::int64_t c = config_.hidden;
    const std::int64_t cl = c / tp_size_;
    const std::int64_t ns = shard_.rows;  // rows of the residual stream: n, or a TP shard
    // Ulysses: the head shard's rows and width (gpt.h, BlockActivations).
    const bool heads = ulysses_ && gathered_rows > 0;
    const std::int64_t w = cl / cp_size_;
    Carver& f = kept;
    Carver& b_only = until_input_gradients;
    Carver& q = qkv_freed_after_input_gradients() ? b_only : kept;
    // What W does not read when B keeps its gradients in the forward's rows: the residual
    // stream and the LayerNorm statistics (B computes the LayerNorms' weight gradients) and
    // CP's gathered K|V.
    const bool in_rows = output_gradients_in_forward_rows();
    Carver& stream = in_rows ? b_only : kept;
    Carver& fch = in_rows ? kept : b_only;
    Carver& kv = in_rows ? b_only : q;
    // ∂L/∂ of the two row-parallel products [n, C] take the rows of residual2 and residual3
    // when those are [n, C] too (no sequence parallelism), and ∂L/∂logits those of probs.
    Carver& residual = in_rows && !sequence_parallel_ ? kept : stream;
    Carver& probabilities = in_rows ? kept : b_only;
    // The run's input: the embedding's output, or the previous block's, received.
    (run.first == 0 ? encoded : blocks[std::size_t(run.first - 1)].residual3) =
        stream.take({ns, c});
    for (int l = run.first; l < run.last; ++l) {
        BlockActivations& b = blocks[std::size_t(l)];
        b = BlockActivations{};
        if (recompute_ != Recompute::full) {
            b.ln1 = f.take({ns, c});
            b.ln1_mean = stream.take({ns});
            b.ln1_rstd = stream.take({ns});
            if (!offload_qkv_) {  // else in pinned host memory: host_q / host_kv
                b.qkv = q.take({n, 3 * cl});
                b.kv =
                    gathered_rows > 0 ? kv.take({gathered_rows, heads ? 3 * w : 2 * cl}) : Tensor{};
            }
            if (recompute_ == Recompute::none) {
                b.atty = f.take({n, cl});
                // Under Ulysses the attention's output and lse are the head shard's, which
                // only B reads; with offload they wait in pinned host memory (host_out).
                if (!heads) {
                    b.att_lse = b_only.take({n, config_.heads / tp_size_});
                } else if (!offloads_attention_output()) {
                    b.heads_out = b_only.take({gathered_rows, w});
                    b.att_lse = b_only.take({gathered_rows, head_shard_heads()});
                }
            }
            b.residual2 = residual.take({ns, c});
            b.ln2 = f.take({ns, c});
            b.ln2_mean = stream.take({ns});
            b.ln2_rstd = stream.take({ns});
            b.fch = fch.take({n, 4 * cl});
            b.fch_gelu = f.take({n, 4 * cl});
        }
        // Offloaded checkpoints: only the chunk's output has device rows of its own.
        const bool offloaded = offload_checkpoints_ && l < run.last - 1;
        b.residual3 = offloaded ? Tensor{} : residual.take({ns, c});
    }
    if (run.last == config_.layers) {
        lnf = f.take({ns, c});
        lnf_mean = f.take({ns});
        lnf_rstd = f.take({ns});
        probs = probabilities.take({ns, config_.vocab});
        losses = b_only.take({ns});
    }
}

void Activations::carve_output_gradients(const Run& run, Carver& d, std::int64_t n) {
    const std::int64_t c = config_.hidden;
    const std::int64_t cl = c / tp_size_;
    const std::int64_t ns = shard_.rows;
    const bool in_rows = output_gradients_in_forward_rows();
    for (int l = run.first; l < run.last; ++l) {
        BlockOutputGradients& o = output_gradients[std::size_t(l)];
        const BlockActivations& b = blocks[std::size_t(l)];
        const bool in_residual = in_rows && !sequence_parallel_;
        o.fc_proj_out = in_residual ? b.residual3 : d.take({n, c});
        o.fch = in_rows ? b.fch : d.take({n, 4 * cl});
        o.attn_proj_out = in_residual ? b.residual2 : d.take({n, c});
        o.qkv = in_rows && !offload_qkv_ ? b.qkv : d.take({n, 3 * cl});
    }
    if (run.last == config_.layers) {
        head_output_gradients.logits = in_rows ? probs : d.take({ns, config_.vocab});
    }
}

void Activations::allocate_run(Run& run, bool output_gradients_buffer) {
    const std::int64_t n = n_tokens_, gathered_rows = gathered_rows_;
    if (output_gradients_buffer) {
        Carver count(nullptr, DType::f32);
        carve_output_gradients(run, count, n);
        reserve(backend_, run.gradients, count);
        Carver d(&run.gradients, DType::f32);
        carve_output_gradients(run, d, n);
        return;
    }
    Carver count_kept(nullptr, DType::f32), count_until(nullptr, DType::f32);
    carve_run(run, count_kept, count_until, n, gathered_rows);
    // Freeing the old buffers waits for the copies in flight to or from them (backend.h).
    reserve(backend_, run.kept, count_kept);
    reserve(backend_, run.until_input_gradients, count_until);
    if (offload_qkv_) {
        const std::int64_t width = attention_width(), blocks_in_run = run.last - run.first;
        // K/V rows: the query rows' own serially, the gathered ones under CP; Q rows: this
        // rank's, or under Ulysses every token's (its heads').
        const std::int64_t kv_rows = gathered_rows > 0 ? gathered_rows : n;
        const std::int64_t q_rows = ulysses() ? gathered_rows : n;
        if (q_rows > run.q_rows) {
            run.host_q = backend_.allocate_pinned(std::size_t(blocks_in_run * q_rows * width));
            run.q_rows = q_rows;
        }
        if (kv_rows > run.kv_rows) {
            run.host_kv =
                backend_.allocate_pinned(std::size_t(blocks_in_run * kv_rows * 2 * width));
            run.kv_rows = kv_rows;
        }
        if (offloads_attention_output() && (!run.host_out || gathered_rows > run.out_rows)) {
            run.host_out = backend_.allocate_pinned(
                std::size_t(blocks_in_run * gathered_rows * (width + head_shard_heads())));
            run.out_rows = gathered_rows;
        }
    }
    if (offload_checkpoints_ && run.last - run.first > 1 && shard_.rows > run.checkpoint_rows) {
        run.host_checkpoints = backend_.allocate_pinned(
            std::size_t((run.last - run.first - 1) * shard_.rows * config_.hidden));
        run.checkpoint_rows = shard_.rows;
    }
    Carver kept(&run.kept, DType::f32), until(&run.until_input_gradients, DType::f32);
    carve_run(run, kept, until, n, gathered_rows);
    run.live = true;
}

void Activations::resize(std::int64_t n, std::int64_t gathered_rows) {
    FULCRUM_CHECK(n >= 1, "a micro-batch needs at least one token");
    FULCRUM_CHECK(gathered_rows >= 0, "negative gathered rows");
    FULCRUM_CHECK(!by_schedule_ || std::none_of(runs_.begin(), runs_.end(),
                                                [](const Run& run) { return run.live; }),
                  "a micro-batch loaded while the last one's activations are still held");
    shard_ =
        sequence_parallel_ ? engine::sequence_shard(n, tp_size_, tp_rank_) : SequenceShard{0, n};
    n_tokens_ = n;
    gathered_rows_ = gathered_rows;
    if (n > capacity_) {
        ints_ = backend_.allocate(std::size_t(n * kIntsPerToken) * sizeof(std::int32_t));
        capacity_ = n;
    }
    Carver ints(&ints_, DType::i32);
    tokens = ints.take({n});
    targets = ints.take({n});
    positions = ints.take({n});
    if (by_schedule_) {
        return;  // allocate_blocks() does the rest
    }
    for (Run& run : runs_) {
        allocate_run(run, false);
        if (keeps_output_gradients_) {
            allocate_run(run, true);
        }
    }
}

void Activations::allocate_blocks(int first, int last) {
    Run& run = run_of(first, last);
    FULCRUM_CHECK(by_schedule_ && !run.live && n_tokens_ > 0,
                  "allocate_blocks: by the schedule only, once per forward, after resize()");
    allocate_run(run, false);
}

void Activations::allocate_output_gradients(int first, int last) {
    Run& run = run_of(first, last);
    FULCRUM_CHECK(keeps_output_gradients_ && run.live,
                  "output gradients are for a split backward of held blocks");
    allocate_run(run, true);
}

void Activations::empty_views(const Run& run, Part part) {
    const bool head = run.last == config_.layers;
    if (part == Part::until_input_gradients) {
        const bool in_rows = output_gradients_in_forward_rows();
        if (in_rows) {
            (run.first == 0 ? encoded : blocks[std::size_t(run.first - 1)].residual3) = Tensor{};
        }
        for (int l = run.first; l < run.last; ++l) {
            BlockActivations& b = blocks[std::size_t(l)];
            b.att_lse = b.heads_out = Tensor{};
            if (in_rows) {  // fch and qkv hold the output gradients now (output_gradients)
                b.ln1_mean = b.ln1_rstd = b.ln2_mean = b.ln2_rstd = Tensor{};
                b.residual2 = b.residual3 = b.kv = b.fch = b.qkv = Tensor{};
            } else {
                b.fch = Tensor{};
            }
            if (qkv_freed_after_input_gradients()) {
                b.qkv = b.kv = Tensor{};
            }
        }
        if (head) {
            probs = losses = Tensor{};
        }
        return;
    }
    (run.first == 0 ? encoded : blocks[std::size_t(run.first - 1)].residual3) = Tensor{};
    for (int l = run.first; l < run.last; ++l) {
        blocks[std::size_t(l)] = BlockActivations{};
        if (keeps_output_gradients_) {
            output_gradients[std::size_t(l)] = {};
        }
    }
    if (head) {
        lnf = lnf_mean = lnf_rstd = probs = losses = Tensor{};
        head_output_gradients = {};
    }
}

void Activations::release_input_gradient_inputs(int first, int last) {
    Run& run = run_of(first, last);
    FULCRUM_CHECK(by_schedule_ && run.live, "release_input_gradient_inputs: blocks not held");
    empty_views(run, Part::until_input_gradients);
    run.until_input_gradients = DeviceBuffer{};
    if (qkv_freed_after_input_gradients()) {
        run.host_out.reset();
        run.out_rows = 0;
        run.host_q.reset();
        run.host_kv.reset();
        run.q_rows = run.kv_rows = 0;
    }
}

void Activations::release_blocks(int first, int last) {
    Run& run = run_of(first, last);
    FULCRUM_CHECK(by_schedule_ && run.live, "release_blocks: blocks not held");
    empty_views(run, Part::all);
    run.kept = DeviceBuffer{};
    run.until_input_gradients = DeviceBuffer{};
    run.gradients = DeviceBuffer{};
    run.host_q.reset();
    run.host_kv.reset();
    run.q_rows = run.kv_rows = 0;
    run.host_out.reset();
    run.out_rows = 0;
    run.host_checkpoints.reset();
    run.checkpoint_rows = 0;
    run.live = false;
    if (std::none_of(runs_.begin(), runs_.end(), [](const Run& r) { return r.live; })) {
        tokens = targets = positions = Tensor{};
        ints_ = DeviceBuffer{};
        capacity_ = 0;
    }
}

// ---- GptModel -----------------------------------------------------------------------------

GptModel::GptModel(Backend& backend, const ModelShape& config, ModelParallel parallel,
                   StageParameters held)
    : backend_(backend),
      config_(config),
      parallel_(parallel),
      layout_(validated(config), parallel.tp_size(), std::move(held)) {
    const std::int64_t n = layout_.total();
    if (ShardedGradients* sharded = parallel_.sharded_gradients) {
        FULCRUM_CHECK(sharded->shard_range().offset + sharded->shard_range().count <= n,
                      "sharded gradients of another layout");
        weight_grads_.blocks.resize(std::size_t(config_.layers));  // empty until a backward
        for (const ElementRange range : {layout_.before_blocks(), layout_.after_blocks()}) {
            if (range.count > 0) {
                map_weights_in(layout_, range, sharded->outer(range), weight_grads_);
            }
        }
    } else {
        grad_storage_ = backend_.allocate(std::size_t(n) * sizeof(float));
        grads_ = grad_storage_.f32(0, {n});
        weight_grads_ = map_weights(layout_, grads_);
    }
    if (parallel_.sharded != nullptr) {
        FULCRUM_CHECK(
            parallel_.sharded->shard_range().offset + parallel_.sharded->shard_range().count <= n,
            "sharded parameters of another layout");
        weights_.blocks.resize(std::size_t(config_.layers));  // empty until a pass acquires
    } else {
        param_storage_ = backend_.allocate(std::size_t(n) * sizeof(float));
        params_ = param_storage_.f32(0, {n});
        weights_ = map_weights(layout_, params_);
    }
    FULCRUM_CHECK(
        !parallel_.ulysses() || (config_.heads / parallel_.tp_size()) % parallel_.cp_size() == 0,
        "Ulysses gives each CP rank whole heads: TP x CP must divide the heads");
    set_attention_chunking({});
}

void GptModel::set_attention_chunking(ChunkedAttentionOptions options) {
    FULCRUM_CHECK(options.chunk == 0 || recompute_ != Recompute::selective,
                  "selective recomputation needs the attention's Q, K, V on the device: not "
                  "with chunked attention");
    // Under Ulysses the attention runs on the head shard: C/(tp·cp) columns, heads/(tp·cp).
    const int split = parallel_.tp_size() * (parallel_.ulysses() ? parallel_.cp_size() : 1);
    attention_ = std::make_unique<ChunkedAttention>(backend_, int(config_.hidden / split),
                                                    config_.heads / split, options);
}

void GptModel::set_recompute(Recompute recompute) {
    FULCRUM_CHECK(recompute != Recompute::selective || !attention_->enabled(),
                  "selective recomputation needs the attention's Q, K, V on the device: not "
                  "with chunked attention");
    FULCRUM_CHECK(recompute == Recompute::full || !checkpoints_,
                  "offloaded checkpoints are full recomputation's");
    recompute_ = recompute;
}

void GptModel::set_offload_checkpoints(bool on) {
    FULCRUM_CHECK(!on || (recompute_ == Recompute::full && !split_backward_),
                  "offloaded checkpoints need full recomputation and no split backward");
    checkpoints_ = on ? std::make_unique<CheckpointOffload>(backend_) : nullptr;
}

void GptModel::set_split_backward(bool on) {
    FULCRUM_CHECK(!on || !checkpoints_,
                  "a split backward recomputes twice from checkpoints: not with them offloaded");
    FULCRUM_CHECK(!on || parallel_.sharded_gradients == nullptr,
                  "sharded gradients are reduced after each block's whole backward: not with a "
                  "split backward");
    split_backward_ = on;
}

void GptModel::set_sequence_parallel(bool on) {
    FULCRUM_CHECK(!on || parallel_.tp_size() > 1, "sequence parallelism needs a TP group");
    sequence_parallel_ = on;
    sequence_parallel_ranges_.clear();
    if (!on) {
        return;
    }
    // What sees only this rank's rows of the tokens (tensor_parallel.h): the LayerNorms and
    // the embedding and head, whose work sequence parallelism splits.
    for (const ParameterTensor& t : layout_.tensors()) {
        using K = ParameterKind;
        const bool on_rows = t.kind == K::ln1_weight || t.kind == K::ln1_bias ||
                             t.kind == K::ln2_weight || t.kind == K::ln2_bias ||
                             t.kind == K::lnf_weight || t.kind == K::lnf_bias ||
                             t.kind == K::token_embedding || t.kind == K::position_embedding;
        if (!on_rows) {
            continue;
        }
        auto& ranges = sequence_parallel_ranges_;
        if (!ranges.empty() && ranges.back().offset + ranges.back().count == t.offset) {
            ranges.back().count += t.numel();
        } else {
            ranges.push_back({t.offset, t.numel()});
        }
    }
}

void GptModel::reduce_sequence_parallel_gradients() {
    const ShardedGradients* sharded = parallel_.sharded_gradients;
    for (const ElementRange& range : sequence_parallel_ranges_) {
        if (sharded == nullptr) {
            all_reduce_sum(parallel_.tp, grads_.slice(range.offset, range.count));
            continue;
        }
        // The shard's part of the range: the TP ranks' layouts have the same size, so their
        // shards are the same ranges.
        const ElementRange part = overlap(range, sharded->shard_range());
        if (part.count > 0) {
            all_reduce_sum(parallel_.tp, gradients_in(part));
        }
    }
}

void GptModel::initialize(std::uint64_t seed) {
    const ParameterLayout serial(config_);
    std::vector<float> host(std::size_t(serial.total()));
    initialize_parameters(serial, seed, host);
    if (parallel_.tp_size() > 1) {
        host = shard_parameters(host, config_, parallel_.tp_size(), parallel_.tp_rank());
    }
    set_parameters(layout_.total() == std::int64_t(host.size()) ? host : take_held(layout_, host));
}

void GptModel::set_parameters(std::span<const float> host) {
    FULCRUM_CHECK(std::int64_t(host.size()) == layout_.total(), "wrong parameter count");
    if (parallel_.sharded != nullptr) {
        parallel_.sharded->set_whole(host);
        return;
    }
    backend_.upload(params_, host.data(), kComputeStream);
}

void GptModel::set_gradients(std::span<const float> host) {
    FULCRUM_CHECK(parallel_.sharded_gradients == nullptr, "set_gradients: gradients sharded");
    FULCRUM_CHECK(std::int64_t(host.size()) == layout_.total(), "wrong gradient count");
    backend_.upload(grads_, host.data(), kComputeStream);
}

std::vector<float> GptModel::parameters_to_host() const {
    if (parallel_.sharded != nullptr) {
        return parallel_.sharded->whole_to_host();
    }
    std::vector<float> host(std::size_t(layout_.total()));
    backend_.download(host.data(), params_, kComputeStream);
    return host;
}

Tensor GptModel::gradients_in(ElementRange range) const {
    if (const ShardedGradients* sharded = parallel_.sharded_gradients) {
        const ElementRange shard = sharded->shard_range();
        FULCRUM_CHECK(overlap(range, shard) == range, "gradients_in: a range outside the shard");
        return sharded->shard().slice(range.offset - shard.offset, range.count);
    }
    return grads_.slice(range.offset, range.count);
}

std::vector<float> GptModel::gradients_to_host() const {
    FULCRUM_CHECK(parallel_.sharded_gradients == nullptr, "gradients_to_host: gradients sharded");
    std::vector<float> host(std::size_t(layout_.total()));
    backend_.download(host.data(), grads_, kComputeStream);
    return host;
}

void GptModel::zero_gradients() {
    if (parallel_.sharded_gradients != nullptr) {
        parallel_.sharded_gradients->zero();
        return;
    }
    backend_.fill_zero(grads_);
}

void GptModel::check_activations(const Activations& acts) const {
    FULCRUM_CHECK(acts.tp_size() == parallel_.tp_size(),
                  "Activations made for another TP degree than the model's");
    FULCRUM_CHECK(acts.offloads_qkv() == offloads_qkv(),
                  "Activations made before the model's attention chunking was set");
    FULCRUM_CHECK(acts.recompute() == recompute_,
                  "Activations made before the model's recomputation was set");
    FULCRUM_CHECK(acts.sequence_parallel() == sequence_parallel_,
                  "Activations made before the model's sequence parallelism was set");
    FULCRUM_CHECK(acts.offloads_checkpoints() == offloads_checkpoints(),
                  "Activations made before the model's checkpoint offload was set");
    FULCRUM_CHECK(acts.ulysses_ == parallel_.ulysses() && acts.cp_size_ == parallel_.cp_size(),
                  "Activations made for another context parallelism than the model's "
                  "(make them from the model)");
}

void GptModel::begin_backward(const Activations& acts) {
    check_activations(acts);
    const std::int64_t n = acts.n_tokens();
    const std::int64_t ns = acts.sequence_shard().rows;
    const std::int64_t c = config_.hidden;
    const std::int64_t cl = c / parallel_.tp_size();
    auto carve = [&](Carver& f) {
        scratch_.dresidual = f.take({ns, c});
        scratch_.dln = f.take({n, c});
        scratch_.dln_shard = sequence_parallel_ ? f.take({ns, c}) : Tensor{};
        scratch_.datty = f.take({n, cl});
        scratch_.dqkv = f.take({n, 3 * cl});
        scratch_.dfch = f.take({n, 4 * cl});
        scratch_.dfch_gelu = f.take({n, 4 * cl});
        scratch_.dlogits = f.take({ns, config_.vocab});
    };
    Carver count(nullptr, DType::f32);
    carve(count);
    reserve(backend_, scratch_storage_, scratch_capacity_, count.used());
    Carver f(&scratch_storage_, DType::f32);
    carve(f);
    scratch_.dkv = scratch_.dheads_out = scratch_.dheads_qkv = Tensor{};
    scratch_.heads_rows = 0;
    if (acts.ulysses() && attention_->offloads()) {
        // FPDT's offloading backward: ∂L/∂o and dQ through the host a chunk at a time, dQ|dK|dV
        // of one chunk here (fpdt_attention_backward).
        const std::int64_t dqkv = 3 * fpdt_chunk_rows(acts) * head_shard_width();
        reserve(backend_, gathered_scratch_storage_, gathered_scratch_capacity_, dqkv);
        scratch_.dheads_qkv = gathered_scratch_storage_.f32(0, {dqkv});
        scratch_.heads_rows = acts.exchange.total_rows();
    } else if (acts.ulysses()) {
        const std::int64_t rows = acts.exchange.total_rows(), w = head_shard_width();
        // FPDT without offload: dQ whole, dK|dV a chunk at a time (fpdt_attention_backward).
        const std::int64_t dqkv =
            attention_->enabled() ? rows * w + 2 * fpdt_chunk_rows(acts) * w : rows * 3 * w;
        reserve(backend_, gathered_scratch_storage_, gathered_scratch_capacity_, rows * w + dqkv);
        scratch_.dheads_out = gathered_scratch_storage_.f32(0, {rows, w});
        scratch_.dheads_qkv = attention_->enabled()
                                  ? gathered_scratch_storage_.f32(rows * w, {dqkv})
                                  : gathered_scratch_storage_.f32(rows * w, {rows, 3 * w});
        scratch_.heads_rows = rows;
    } else if (acts.context_parallel()) {
        const std::int64_t rows = acts.exchange.total_rows();
        reserve(backend_, gathered_scratch_storage_, gathered_scratch_capacity_, rows * 2 * cl);
        scratch_.dkv = gathered_scratch_storage_.f32(0, {rows, 2 * cl});
    }
    backend_.fill_zero(scratch_.dresidual);
}

void GptModel::load_micro_batch(const TokenBatch& batch, Activations& acts) {
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

double GptModel::forward(const TokenBatch& batch, Activations& acts) {
    load_micro_batch(batch, acts);
    forward_embedding(acts);
    forward_blocks(0, config_.layers, acts);
    return forward_head(acts);
}

double GptModel::forward(const ContextShard& shard, Activations& acts) {
    load_micro_batch(shard, acts);
    forward_embedding(acts);
    forward_blocks(0, config_.layers, acts);
    return forward_head(acts);
}

void GptModel::backward(Activations& acts, float loss_scale) {
    backward_head(acts, loss_scale);
    backward_blocks(0, config_.layers, acts);
    backward_embedding(acts);
}

GptModel::WeightsInUse::WeightsInUse(GptModel& model, ElementRange first, ElementRange second)
    : model_(model), ranges_{first, second} {
    ShardedParameters* sharded = model_.parallel_.sharded;
    if (sharded == nullptr) {
        return;
    }
    for (const ElementRange& range : ranges_) {
        if (range.count > 0) {
            map_weights_in(model_.layout_, range, sharded->acquire(range), model_.weights_);
        }
    }
}

GptModel::WeightsInUse::~WeightsInUse() {
    ShardedParameters* sharded = model_.parallel_.sharded;
    if (sharded == nullptr) {
        return;
    }
    for (const ElementRange& range : ranges_) {
        if (range.count > 0) {
            map_weights_in(model_.layout_, range, Tensor{}, model_.weights_);
            sharded->release(range);
        }
    }
}

GptModel::GradientsInUse::GradientsInUse(GptModel& model, int layer)
    : model_(model), layer_(layer) {
    if (ShardedGradients* sharded = model_.parallel_.sharded_gradients) {
        const ElementRange range = model_.layout_.block_range(layer, layer + 1);
        map_weights_in(model_.layout_, range, sharded->acquire(range), model_.weight_grads_);
    }
}

GptModel::GradientsInUse::~GradientsInUse() {
    if (ShardedGradients* sharded = model_.parallel_.sharded_gradients) {
        const ElementRange range = model_.layout_.block_range(layer_, layer_ + 1);
        map_weights_in(model_.layout_, range, Tensor{}, model_.weight_grads_);
        sharded->release(range);
    }
}

void GptModel::gather_as_pass(bool backward, int first, int last, bool embedding, bool head) {
    if (parallel_.sharded == nullptr && parallel_.sharded_gradients == nullptr) {
        return;
    }
    if (!backward) {
        if (embedding) {
            const WeightsInUse outer = outer_weights();
        }
        for (int l = first; l < last; ++l) {
            const WeightsInUse block = block_weights(l);
        }
        if (head) {
            const WeightsInUse outer = outer_weights();
        }
        return;
    }
    if (head) {
        const WeightsInUse outer = outer_weights();
    }
    for (int l = last - 1; l >= first; --l) {
        const WeightsInUse block = block_weights(l);
        const GradientsInUse gradients(*this, l);
    }
}

void GptModel::forward_embedding(Activations& acts) {
    const WeightsInUse outer = outer_weights();
    const SequenceShard rows = acts.sequence_shard();
    backend_.embedding_forward(acts.encoded, acts.tokens.slice(rows.begin, rows.rows),
                               acts.positions.slice(rows.begin, rows.rows), weights_.wte,
                               weights_.wpe);
}

// ---- sequence parallelism (tensor_parallel.h) ----------------------------------------------

Tensor GptModel::sequence_buffer(const Activations& acts) {
    const std::int64_t n = acts.n_tokens(), c = config_.hidden;
    reserve(backend_, sequence_storage_, sequence_capacity_, n * c);
    return sequence_storage_.f32(0, {n, c});
}

Tensor GptModel::gather_rows(Tensor rows, const Activations& acts, Tensor into) {
    if (!sequence_parallel_) {
        return rows;
    }
    const Tensor whole = into.empty() ? sequence_buffer(acts) : into;
    all_gather_sequence(*parallel_.tp, rows, whole);
    return whole;
}

void GptModel::sum_row_parallel(Tensor partial, Tensor out) {
    if (!sequence_parallel_) {
        all_reduce_sum(parallel_.tp, out);  // g: the partial products are `out` itself
        return;
    }
    reduce_scatter_sequence(*parallel_.tp, partial, out);
}

Tensor GptModel::sum_input_gradient(Tensor partial, Tensor rows) {
    if (!sequence_parallel_) {
        all_reduce_sum(parallel_.tp, partial);  // f
        return partial;
    }
    reduce_scatter_sequence(*parallel_.tp, partial, rows);
    return rows;
}

Tensor GptModel::row_parallel_output_gradient(const Activations& acts, Tensor keep) {
    if (sequence_parallel_) {
        return gather_rows(scratch_.dresidual, acts, keep);  // g backward
    }
    if (keep.empty()) {
        return scratch_.dresidual;
    }
    // The residual gradient changes as the backward goes on; W needs it as it is now.
    backend_.copy(keep, scratch_.dresidual);
    return keep;
}

// ---- blocks -------------------------------------------------------------------------------

BlockActivations GptModel::block_activations(const Activations& acts, int layer) {
    BlockActivations a = acts.blocks[std::size_t(layer)];
    if (recompute_ == Recompute::none) {
        return a;
    }
    // The recompute workspace: one block's worth of what the Activations do not keep
    // (recompute.h), in the same shapes.
    const std::int64_t n = acts.n_tokens(), ns = acts.sequence_shard().rows;
    const std::int64_t c = config_.hidden, cl = c / parallel_.tp_size();
    const bool full = recompute_ == Recompute::full;
    const std::int64_t gathered =
        full && acts.context_parallel() && !acts.offloads_qkv() ? acts.exchange.total_rows() : 0;
    const bool heads = acts.ulysses();  // gpt.h, BlockActivations
    const std::int64_t total = acts.exchange.total_rows(), w = head_shard_width();
    auto carve = [&](Carver& f) {
        if (full) {
            a.ln1 = f.take({ns, c});
            a.ln1_mean = f.take({ns});
            a.ln1_rstd = f.take({ns});
            if (!acts.offloads_qkv()) {
                a.qkv = f.take({n, 3 * cl});
                a.kv = gathered > 0 ? f.take({gathered, heads ? 3 * w : 2 * cl}) : Tensor{};
            }
        }
        a.atty = f.take({n, cl});
        if (heads && acts.offloads_attention_output()) {
            a.heads_out = a.att_lse = Tensor{};  // in pinned host memory (Activations::host_out)
        } else if (heads) {
            a.heads_out = f.take({total, w});
            a.att_lse = f.take({total, n_head_shard()});
        } else {
            a.att_lse = f.take({n, n_head_local()});
        }
        if (full) {
            a.residual2 = f.take({ns, c});
            a.ln2 = f.take({ns, c});
            a.ln2_mean = f.take({ns});
            a.ln2_rstd = f.take({ns});
            a.fch = f.take({n, 4 * cl});
            a.fch_gelu = f.take({n, 4 * cl});
        }
    };
    Carver count(nullptr, DType::f32);
    carve(count);
    reserve(backend_, recompute_storage_, recompute_capacity_, count.used());
    Carver f(&recompute_storage_, DType::f32);
    carve(f);
    return a;
}

void GptModel::forward_blocks(int first, int last, Activations& acts) {
    FULCRUM_CHECK(0 <= first && first <= last && last <= config_.layers, "bad block range");
    check_activations(acts);
    const std::int64_t ns = acts.sequence_shard().rows, c = config_.hidden;
    for (int l = first; l < last; ++l) {
        float* host = acts.host_checkpoint(l);  // null: the output stays on the device
        if (host != nullptr) {
            acts.blocks[std::size_t(l)].residual3 = checkpoints_->output_rows(l, ns, c);
        }
        {
            const WeightsInUse weights = block_weights(l);
            forward_block(l, acts, block_activations(acts, l), false);
        }
        if (host != nullptr) {
            checkpoints_->offload(l, acts.blocks[std::size_t(l)].residual3, host);
        }
    }
    for (int l = first; l < last; ++l) {
        if (acts.host_checkpoint(l) != nullptr) {
            acts.blocks[std::size_t(l)].residual3 = Tensor{};  // the slot is the next block's
        }
    }
}

void GptModel::forward_block(int l, Activations& acts, const BlockActivations& a,
                             bool for_backward) {
    const std::int64_t cl = config_.hidden / parallel_.tp_size();
    // Row-parallel biases are added once, by TP rank 0, before the all-reduce (tensor_parallel.h).
    const bool adds_row_parallel_bias = parallel_.tp_rank() == 0;
    Backend& be = backend_;
    const BlockWeights& w = weights_.blocks[l];
    const Tensor x = acts.block_input(l);
    instrument::Range attention_range(range_name::kAttention, Category::attention);
    be.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_weight, w.ln1_bias);
    // Column-parallel QKV (Megatron's f: identity forward; all-gather of the rows under
    // sequence parallelism).
    const Tensor ln1 = gather_rows(a.ln1, acts);
    if (acts.ulysses() && attention_->enabled()) {
        fpdt_attention_forward(l, acts, a, ln1);
    } else if (acts.ulysses()) {
        // Serial Q|K|V rows of this rank's tokens, traded for the head shard (all-to-all).
        be.matmul_forward(a.qkv, ln1, w.qkv_weight, w.qkv_bias);
        const Tensor local[] = {a.qkv.columns(0, cl), a.qkv.columns(cl, cl),
                                a.qkv.columns(2 * cl, cl)};
        scatter_heads(be, parallel_.cp, acts.exchange, local, heads_staging(acts.exchange, 3),
                      head_blocks(a.kv).blocks);
        ulysses_attention_forward(acts, a, a.kv);
    } else if (attention_->enabled()) {
        // FPDT: Q (and serially K|V) projected chunk by chunk inside the attention;
        // under CP this rank's K|V first, whole, for the all-gather.
        QkvProjection projection;
        projection.input = ln1;
        projection.q_weight = w.qkv_weight.slice(0, cl);
        projection.q_bias = w.qkv_bias.slice(0, cl);
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
            be.matmul_forward(kv_local, ln1, w.qkv_weight.slice(cl, 2 * cl),
                              w.qkv_bias.slice(cl, 2 * cl));
            gather_context_rows(be, parallel_.cp, acts.exchange, kv_local,
                                exchange_staging(gathered.rows()), gathered);
        } else {
            projection.kv_weight = w.qkv_weight.slice(cl, 2 * cl);
            projection.kv_bias = w.qkv_bias.slice(cl, 2 * cl);
        }
        attention_->forward(projection, gathered, acts.qkv_store(l, a), a.atty, a.att_lse,
                            acts.spans);
    } else if (acts.context_parallel()) {
        // Q and this rank's K|V as two GEMMs into contiguous blocks, K|V gathered over CP.
        const Tensor q = cp_queries(a.qkv), kv_local = cp_local_kv(a.qkv);
        be.matmul_forward(q, ln1, w.qkv_weight.slice(0, cl), w.qkv_bias.slice(0, cl));
        be.matmul_forward(kv_local, ln1, w.qkv_weight.slice(cl, 2 * cl),
                          w.qkv_bias.slice(cl, 2 * cl));
        gather_context_rows(be, parallel_.cp, acts.exchange, kv_local,
                            exchange_staging(a.kv.rows()), a.kv);
        be.attention_forward(a.atty, a.att_lse, q, a.kv.columns(0, cl), a.kv.columns(cl, cl),
                             acts.spans, n_head_local());
    } else {
        be.matmul_forward(a.qkv, ln1, w.qkv_weight, w.qkv_bias);
        be.attention_forward(a.atty, a.att_lse, a.qkv.columns(0, cl), a.qkv.columns(cl, cl),
                             a.qkv.columns(2 * cl, cl), acts.spans, n_head_local());
    }
    // Row-parallel projection, then g: all-reduce forward (residual2 first holds the
    // projection, then x + projection, in place), or under sequence parallelism the products
    // [T, C] in the sequence buffer (the gathered LN output is no longer needed) reduce-
    // scattered to this rank's rows.
    const Tensor attention_out = sequence_parallel_ ? sequence_buffer(acts) : a.residual2;
    be.matmul_forward(attention_out, a.atty, w.attn_proj_weight,
                      adds_row_parallel_bias ? w.attn_proj_bias : Tensor{});
    sum_row_parallel(attention_out, a.residual2);
    be.residual_forward(a.residual2, x, a.residual2);
    attention_range.end();
    instrument::Range mlp_range("mlp", Category::compute);
    be.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2_weight, w.ln2_bias);
    const Tensor ln2 = gather_rows(a.ln2, acts);
    be.matmul_forward(a.fch, ln2, w.fc_weight, w.fc_bias);  // column-parallel (f)
    be.gelu_forward(a.fch_gelu, a.fch);
    if (for_backward) {
        return;  // the rest only makes the block's output, which is kept
    }
    const Tensor mlp_out = sequence_parallel_ ? sequence_buffer(acts) : a.residual3;
    be.matmul_forward(mlp_out, a.fch_gelu, w.fc_proj_weight,
                      adds_row_parallel_bias ? w.fc_proj_bias : Tensor{});
    sum_row_parallel(mlp_out, a.residual3);  // g
    be.residual_forward(a.residual3, a.residual2, a.residual3);
}

double GptModel::forward_head(Activations& acts) {
    const WeightsInUse outer = outer_weights();
    Backend& be = backend_;
    const SequenceShard rows = acts.sequence_shard();
    be.layernorm_forward(acts.lnf, acts.lnf_mean, acts.lnf_rstd, acts.block_input(config_.layers),
                         weights_.lnf_weight, weights_.lnf_bias);
    be.matmul_forward(acts.probs, acts.lnf, weights_.wte, Tensor{});  // logits
    be.crossentropy_forward(acts.losses, acts.probs, acts.probs,
                            acts.targets.slice(rows.begin, rows.rows));
    std::vector<float> losses(std::size_t(rows.rows));
    be.download(losses.data(), acts.losses, kComputeStream);
    // Summed in double: the step's mean is formed over many micro-batches (lm_head.h).
    return std::accumulate(losses.begin(), losses.end(), 0.0);
}

void GptModel::backward_head(Activations& acts, float loss_scale, BackwardPart part) {
    const WeightsInUse outer = outer_weights();
    Backend& be = backend_;
    begin_backward(acts);
    const bool split = part == BackwardPart::input_gradients;
    FULCRUM_CHECK(!split || acts.keeps_output_gradients(),
                  "a split backward needs Activations made after set_split_backward(true)");
    const SequenceShard rows = acts.sequence_shard();
    const Tensor dlogits = scratch_.dlogits;
    const Tensor dln = scratch_.dln.slice(0, rows.rows);
    be.fill_zero(dlogits);
    be.fill_zero(dln);
    be.crossentropy_backward(dlogits, acts.probs, acts.targets.slice(rows.begin, rows.rows),
                             loss_scale);
    be.matmul_backward(dln, split ? Tensor{} : weight_grads_.wte, Tensor{}, dlogits, acts.lnf,
                       weights_.wte);
    if (split) {
        be.copy(acts.head_output_gradients.logits, dlogits);  // over probs: read above
    }
    // The final LayerNorm's weight gradients in B too (backward_block says why).
    be.layernorm_backward(scratch_.dresidual, weight_grads_.lnf_weight, weight_grads_.lnf_bias, dln,
                          acts.block_input(config_.layers), weights_.lnf_weight, acts.lnf_mean,
                          acts.lnf_rstd);
}

void GptModel::backward_weights_head(Activations& acts) {
    check_activations(acts);
    FULCRUM_CHECK(acts.keeps_output_gradients(),
                  "a split backward needs Activations made after set_split_backward(true)");
    const HeadOutputGradients& o = acts.head_output_gradients;
    const WeightsInUse outer = outer_weights();
    backend_.matmul_backward(Tensor{}, weight_grads_.wte, Tensor{}, o.logits, acts.lnf,
                             weights_.wte);
}

void GptModel::backward_blocks(int first, int last, Activations& acts, BackwardPart part) {
    FULCRUM_CHECK(0 <= first && first <= last && last <= config_.layers, "bad block range");
    check_activations(acts);
    FULCRUM_CHECK(part == BackwardPart::whole || acts.keeps_output_gradients(),
                  "a split backward needs Activations made after set_split_backward(true)");
    const BackwardScratch& s = scratch_;
    FULCRUM_CHECK(
        s.dresidual.rows() == acts.sequence_shard().rows && s.dln.rows() == acts.n_tokens(),
        "begin_backward() not called");
    FULCRUM_CHECK(!acts.context_parallel() ||
                      (acts.ulysses() ? s.heads_rows : s.dkv.rows()) == acts.exchange.total_rows(),
                  "begin_backward() not called for this micro-batch");
    // Offloaded checkpoints: block l's input, checkpoint l − 1, fetched while block l + 1's
    // backward runs (checkpoint_offload.h), or now when no block before asked for it (the
    // chunk's last block, or the first of a call that runs one block).
    const std::int64_t ns = acts.sequence_shard().rows, c = config_.hidden;
    auto offloaded = [&](int layer) { return acts.host_checkpoint(layer) != nullptr; };
    if (acts.offloads_checkpoints()) {
        checkpoints_->begin_backward();
    }
    for (int l = last - 1; l >= first; --l) {
        if (offloaded(l - 1)) {
            float* host = acts.host_checkpoint(l - 1);
            if (!checkpoints_->prefetched(l - 1, host)) {
                checkpoints_->prefetch(l - 1, host, ns, c);
            }
            acts.blocks[std::size_t(l - 1)].residual3 = checkpoints_->fetched(l - 1, ns, c);
            if (offloaded(l - 2)) {
                checkpoints_->prefetch(l - 2, acts.host_checkpoint(l - 2), ns, c);
            }
        }
        const BlockActivations a = block_activations(acts, l);
        {
            const WeightsInUse weights = block_weights(l);
            const GradientsInUse gradients(*this, l);
            recompute_block(l, acts, a);
            backward_block(l, acts, a, part);
        }
        if (offloaded(l - 1)) {
            checkpoints_->release(l - 1);
            acts.blocks[std::size_t(l - 1)].residual3 = Tensor{};
        }
    }
}

void GptModel::backward_weights_blocks(int first, int last, Activations& acts) {
    FULCRUM_CHECK(0 <= first && first <= last && last <= config_.layers, "bad block range");
    check_activations(acts);
    FULCRUM_CHECK(acts.keeps_output_gradients(),
                  "a split backward needs Activations made after set_split_backward(true)");
    for (int l = last - 1; l >= first; --l) {
        const BlockActivations a = block_activations(acts, l);
        const WeightsInUse weights = block_weights(l);
        recompute_block(l, acts, a);
        backward_weights_block(l, acts, a);
    }
}

void GptModel::recompute_block(int l, Activations& acts, const BlockActivations& a) {
    if (recompute_ == Recompute::none) {
        return;
    }
    instrument::Range range(range_name::kRecompute, Category::compute);
    if (recompute_ == Recompute::full) {
        forward_block(l, acts, a, true);
        return;
    }
    // Selective: only the attention core, from the kept Q, K and V (this rank's queries and
    // the gathered K|V under CP).
    const std::int64_t cl = config_.hidden / parallel_.tp_size();
    instrument::Range attention_range(range_name::kAttention, Category::attention);
    if (acts.ulysses()) {
        ulysses_attention_forward(acts, a, a.kv);
    } else if (acts.context_parallel()) {
        backend_.attention_forward(a.atty, a.att_lse, cp_queries(a.qkv), a.kv.columns(0, cl),
                                   a.kv.columns(cl, cl), acts.spans, n_head_local());
    } else {
        backend_.attention_forward(a.atty, a.att_lse, a.qkv.columns(0, cl), a.qkv.columns(cl, cl),
                                   a.qkv.columns(2 * cl, cl), acts.spans, n_head_local());
    }
}

void GptModel::backward_block(int l, Activations& acts, const BlockActivations& a,
                              BackwardPart part) {
    const std::int64_t cl = config_.hidden / parallel_.tp_size();
    Backend& be = backend_;
    BackwardScratch& s = scratch_;
    const BlockWeights& w = weights_.blocks[l];
    const BlockWeights& g = weight_grads_.blocks[l];
    const Tensor x = acts.block_input(l);
    // A B pass (split backward) leaves every weight and bias gradient to the W pass: empty
    // gradient tensors are not computed (backend.h), and what W needs is kept in `keep`.
    const bool split = part == BackwardPart::input_gradients;
    const BlockOutputGradients keep =
        split ? acts.output_gradients[std::size_t(l)] : BlockOutputGradients{};
    auto grad = [split](const Tensor& t) { return split ? Tensor{} : t; };
    if (acts.offloads_qkv()) {
        // The attention backward's first K/V and Q chunks come in while the MLP computes.
        attention_->prefetch_backward(acts.qkv_store(l, a), query_rows(acts), kv_rows(acts),
                                      acts.ulysses() ? acts.exchange.document_spans : acts.spans);
    }
    // dresidual holds ∂L/∂residual3. MLP branch; its LayerNorm adds into dresidual,
    // which then holds ∂L/∂residual2 (identity path + branch). Under TP the row-parallel
    // projection needs no exchange (g: identity backward; all-gather of the rows under
    // sequence parallelism) and the column-parallel fc leaves a partial ∂L/∂ln2 that is
    // summed over TP (f: all-reduce backward; reduce-scatter to the rows).
    instrument::Range mlp_range("mlp", Category::compute);
    const Tensor dmlp_out = row_parallel_output_gradient(acts, keep.fc_proj_out);
    be.fill_zero(s.dfch_gelu);
    be.matmul_backward(s.dfch_gelu, grad(g.fc_proj_weight), grad(g.fc_proj_bias), dmlp_out,
                       a.fch_gelu, w.fc_proj_weight);
    be.fill_zero(s.dfch);
    be.gelu_backward(s.dfch, s.dfch_gelu, a.fch);
    if (split) {
        be.copy(keep.fch, s.dfch);  // over a.fch without recomputation: B has read it
    }
    be.fill_zero(s.dln);  // the partial ∂L/∂ln2 [T, C]
    // The weight gradient needs the whole LN output (gathered again under sequence
    // parallelism); the input gradient does not.
    const Tensor ln2 = split ? Tensor{} : gather_rows(a.ln2, acts);
    be.matmul_backward(s.dln, grad(g.fc_weight), grad(g.fc_bias), s.dfch, ln2, w.fc_weight);
    // The LayerNorm's weight gradients too under a split backward: a few FLOPs an element,
    // and W then reads no LayerNorm input.
    const Tensor dln2 = sum_input_gradient(s.dln, s.dln_shard);
    be.layernorm_backward(s.dresidual, g.ln2_weight, g.ln2_bias, dln2, a.residual2, w.ln2_weight,
                          a.ln2_mean, a.ln2_rstd);
    mlp_range.end();
    // Attention branch; afterwards dresidual holds ∂L/∂x.
    instrument::Range attention_range(range_name::kAttention, Category::attention);
    const Tensor dattention_out = row_parallel_output_gradient(acts, keep.attn_proj_out);
    be.fill_zero(s.datty);
    be.matmul_backward(s.datty, grad(g.attn_proj_weight), grad(g.attn_proj_bias), dattention_out,
                       a.atty, w.attn_proj_weight);
    const Tensor dqkv = s.dqkv;
    be.fill_zero(dqkv);
    const Tensor dln1_partial = s.dln;
    be.fill_zero(dln1_partial);
    if (acts.ulysses()) {
        // ∂L/∂o to the head shard, the attention backward there, dQ|dK|dV back to this rank's
        // tokens (context_parallel.h): no sum across ranks.
        if (!attention_->offloads()) {  // else a chunk at a time (fpdt_attention_backward)
            const Tensor dout[] = {s.datty}, dout_heads[] = {s.dheads_out};
            scatter_heads(be, parallel_.cp, acts.exchange, dout, heads_staging(acts.exchange, 1),
                          dout_heads);
        }
        be.fill_zero(s.dheads_qkv);
        const Tensor dlocal[] = {dqkv.columns(0, cl), dqkv.columns(cl, cl),
                                 dqkv.columns(2 * cl, cl)};
        if (attention_->enabled()) {
            fpdt_attention_backward(l, acts, a, dlocal);
        } else {
            const HeadBlocks d = head_blocks(s.dheads_qkv), h = head_blocks(a.kv);
            be.attention_backward(d.blocks[0], d.blocks[1], d.blocks[2], s.dheads_out, h.blocks[0],
                                  h.blocks[1], h.blocks[2], a.heads_out, a.att_lse,
                                  acts.exchange.document_spans, n_head_shard());
            gather_heads(be, parallel_.cp, acts.exchange, d.blocks, heads_staging(acts.exchange, 3),
                         dlocal);
        }
        const Tensor ln1 = split ? Tensor{} : gather_rows(a.ln1, acts);
        be.matmul_backward(dln1_partial, grad(g.qkv_weight), grad(g.qkv_bias), dqkv, ln1,
                           w.qkv_weight);
    } else if (attention_->enabled() || acts.context_parallel()) {
        // dQ into the Q block of dqkv; dK|dV into its K|V block (serial) or into the gathered
        // rows (CP), which are then summed over CP onto the ranks that own them: the one
        // cross-rank sum of CP (context_parallel.h).
        const Tensor dq = cp_queries(dqkv);
        const Tensor dkv = acts.context_parallel() ? s.dkv : cp_local_kv(dqkv);
        if (acts.context_parallel()) {
            be.fill_zero(s.dkv);
        }
        if (attention_->enabled()) {
            // K/V chunks outer, Q chunks inner (chunked_attention.h).
            attention_->backward(acts.qkv_store(l, a), dq, dkv.columns(0, cl), dkv.columns(cl, cl),
                                 s.datty, a.atty, a.att_lse, acts.spans);
        } else {
            be.attention_backward(dq, dkv.columns(0, cl), dkv.columns(cl, cl), s.datty,
                                  cp_queries(a.qkv), a.kv.columns(0, cl), a.kv.columns(cl, cl),
                                  a.atty, a.att_lse, acts.spans, n_head_local());
        }
        if (acts.context_parallel()) {
            reduce_scatter_context_rows(be, parallel_.cp, acts.exchange, s.dkv,
                                        exchange_staging(s.dkv.rows()), cp_local_kv(dqkv));
        }
        const Tensor ln1 = split ? Tensor{} : gather_rows(a.ln1, acts);
        be.matmul_backward(dln1_partial, grad(g.qkv_weight.slice(0, cl)),
                           grad(g.qkv_bias.slice(0, cl)), dq, ln1, w.qkv_weight.slice(0, cl));
        be.matmul_backward(dln1_partial, grad(g.qkv_weight.slice(cl, 2 * cl)),
                           grad(g.qkv_bias.slice(cl, 2 * cl)), cp_local_kv(dqkv), ln1,
                           w.qkv_weight.slice(cl, 2 * cl));
    } else {
        be.attention_backward(dqkv.columns(0, cl), dqkv.columns(cl, cl), dqkv.columns(2 * cl, cl),
                              s.datty, a.qkv.columns(0, cl), a.qkv.columns(cl, cl),
                              a.qkv.columns(2 * cl, cl), a.atty, a.att_lse, acts.spans,
                              n_head_local());
        const Tensor ln1 = split ? Tensor{} : gather_rows(a.ln1, acts);
        be.matmul_backward(dln1_partial, grad(g.qkv_weight), grad(g.qkv_bias), dqkv, ln1,
                           w.qkv_weight);
    }
    if (split) {
        be.copy(keep.qkv, dqkv);  // over a.qkv without recomputation: attention has read it
    }
    const Tensor dln1 = sum_input_gradient(dln1_partial, s.dln_shard);  // f
    be.layernorm_backward(s.dresidual, g.ln1_weight, g.ln1_bias, dln1, x, w.ln1_weight, a.ln1_mean,
                          a.ln1_rstd);
}

void GptModel::backward_weights_block(int l, Activations& acts, const BlockActivations& a) {
    const std::int64_t cl = config_.hidden / parallel_.tp_size();
    Backend& be = backend_;
    const BlockWeights& w = weights_.blocks[l];
    const BlockWeights& g = weight_grads_.blocks[l];
    const BlockOutputGradients& o = acts.output_gradients[std::size_t(l)];
    // Each product of the B pass's weight half: dW += doutᵀ · inp, db += Σ dout (matmul.h),
    // and the LayerNorms' dweight, dbias (layernorm.h), from the kept output gradients.
    instrument::Range mlp_range("mlp", Category::compute);
    be.matmul_backward(Tensor{}, g.fc_proj_weight, g.fc_proj_bias, o.fc_proj_out, a.fch_gelu,
                       w.fc_proj_weight);
    be.matmul_backward(Tensor{}, g.fc_weight, g.fc_bias, o.fch, gather_rows(a.ln2, acts),
                       w.fc_weight);
    mlp_range.end();
    instrument::Range attention_range(range_name::kAttention, Category::attention);
    be.matmul_backward(Tensor{}, g.attn_proj_weight, g.attn_proj_bias, o.attn_proj_out, a.atty,
                       w.attn_proj_weight);
    const Tensor ln1 = gather_rows(a.ln1, acts);
    if (split_qkv_layout(acts)) {
        be.matmul_backward(Tensor{}, g.qkv_weight.slice(0, cl), g.qkv_bias.slice(0, cl),
                           cp_queries(o.qkv), ln1, w.qkv_weight.slice(0, cl));
        be.matmul_backward(Tensor{}, g.qkv_weight.slice(cl, 2 * cl), g.qkv_bias.slice(cl, 2 * cl),
                           cp_local_kv(o.qkv), ln1, w.qkv_weight.slice(cl, 2 * cl));
    } else {
        be.matmul_backward(Tensor{}, g.qkv_weight, g.qkv_bias, o.qkv, ln1, w.qkv_weight);
    }
}

Tensor GptModel::exchange_staging(std::int64_t rows) {
    const std::int64_t width = 2 * (config_.hidden / parallel_.tp_size());
    reserve(backend_, staging_storage_, staging_capacity_, rows * width);
    return staging_storage_.f32(0, {rows, width});
}

Tensor GptModel::heads_staging(const ContextExchange& exchange, int blocks) {
    const std::int64_t width = blocks * head_shard_width();
    const std::int64_t floats = heads_staging_elements(exchange, parallel_.cp_rank(), width);
    reserve(backend_, staging_storage_, staging_capacity_, floats);
    return staging_storage_.f32(0, {floats});
}

Tensor GptModel::staging_region(std::int64_t offset, const ContextExchange& exchange, int blocks) {
    const std::int64_t floats =
        heads_staging_elements(exchange, parallel_.cp_rank(), blocks * head_shard_width());
    FULCRUM_CHECK(offset + floats <= staging_capacity_,
                  "Ulysses staging reserved too small for an exchange in flight");
    return staging_storage_.f32(offset, {floats});
}

void GptModel::ulysses_attention_forward(Activations& acts, const BlockActivations& a,
                                         Tensor heads) {
    FULCRUM_CHECK(!attention_->enabled(), "chunked attention under Ulysses is FPDT's forward");
    const HeadBlocks h = head_blocks(heads);
    backend_.attention_forward(a.heads_out, a.att_lse, h.blocks[0], h.blocks[1], h.blocks[2],
                               acts.exchange.document_spans, n_head_shard());
    heads_output_to_rows(acts, a);
}

void GptModel::fpdt_attention_forward(int layer, Activations& acts, const BlockActivations& a,
                                      Tensor ln1) {
    const BlockWeights& w = weights_.blocks[layer];
    const std::int64_t cl = config_.hidden / parallel_.tp_size(), hw = head_shard_width();
    const int me = parallel_.cp_rank();
    const Tensor scratch = acts.offloads_qkv() ? fpdt_chunk_scratch(acts) : Tensor{};
    // The staging at the largest size this block's exchanges take — ∂L/∂o and the output whole
    // (without offload), a chunk's Q|K|V or dQ|dK|dV — now: grown later, the old buffer and
    // the new would meet at the backward's peak. A rank sends at most min(chunk, T) rows of a
    // chunk.
    const std::int64_t p = parallel_.cp_size(), c = fpdt_chunk_rows(acts);
    const std::int64_t output_staging = (p * std::min(c, acts.n_tokens()) + c) * hw;
    const std::int64_t chunk_staging = 3 * output_staging;
    const bool host_output = acts.offloads_attention_output();
    // FPDT's output offload trades each chunk's output back while the next chunk's Q|K|V are
    // in flight: its own staging, after theirs.
    reserve(backend_, staging_storage_, staging_capacity_,
            host_output ? chunk_staging + output_staging
                        : std::max(chunk_staging, heads_staging_elements(acts.exchange, me, hw)));
    // FPDT's pipeline (§3.2, Fig. 4): chunk i + 1's rows projected and their all-to-all
    // started before chunk i's pairs compute (prepare), finished when its pairs come (source).
    PendingHeadsExchange qkv_exchange;
    QkvProjection projection;
    projection.rows = acts.exchange.total_rows();
    projection.prepare = [&](std::int64_t first, std::int64_t rows) {
        const ChunkExchange chunk = chunk_exchange(acts.exchange, me, first, rows);
        const Tensor qkv =
            scratch.empty() ? a.qkv.slice(chunk.begin, chunk.count) : scratch.slice(0, chunk.count);
        if (chunk.count > 0) {
            backend_.matmul_forward(qkv, ln1.slice(chunk.begin, chunk.count), w.qkv_weight,
                                    w.qkv_bias);
        }
        const Tensor local[] = {qkv.columns(0, cl), qkv.columns(cl, cl), qkv.columns(2 * cl, cl)};
        qkv_exchange = start_scatter_heads(backend_, parallel_.cp, chunk.exchange, local,
                                           staging_region(0, chunk.exchange, 3));
    };
    projection.source = [&](std::int64_t first, std::int64_t rows, Tensor q, Tensor kv) {
        if (!qkv_exchange.started) {
            projection.prepare(first, rows);  // the first chunk: nothing started it
        }
        const Tensor heads[] = {q, kv.columns(0, hw), kv.columns(hw, hw)};
        finish_heads_exchange(backend_, qkv_exchange, heads);
    };
    PendingHeadsExchange out_exchange;
    Tensor out_rows;
    const auto finish_output = [&] {
        if (out_exchange.started) {
            const Tensor local[] = {out_rows};
            finish_heads_exchange(backend_, out_exchange, local);
        }
    };
    if (host_output) {
        // FPDT's output offload: each chunk's output back to the local rows that sent it, by
        // the same window's all-to-all, before it leaves for the host; in flight until the
        // next chunk's output comes.
        projection.output = [&](std::int64_t first, std::int64_t rows, Tensor out) {
            finish_output();
            const ChunkExchange chunk = chunk_exchange(acts.exchange, me, first, rows);
            const Tensor heads[] = {out};
            out_rows = a.atty.slice(chunk.begin, chunk.count);
            out_exchange = start_gather_heads(backend_, parallel_.cp, chunk.exchange, heads,
                                              staging_region(chunk_staging, chunk.exchange, 1));
        };
    }
    attention_->forward(projection, Tensor{}, acts.qkv_store(layer, a), a.heads_out, a.att_lse,
                        acts.exchange.document_spans);
    finish_output();
    if (!host_output) {
        heads_output_to_rows(acts, a);
    }
}

void GptModel::fpdt_attention_backward(int layer, Activations& acts, const BlockActivations& a,
                                       std::span<const Tensor> dlocal) {
    const std::int64_t total = acts.exchange.total_rows(), w = head_shard_width();
    const std::int64_t chunk_rows = fpdt_chunk_rows(acts);
    const int me = parallel_.cp_rank();
    const bool offloads = attention_->offloads();
    // dQ|dK|dV of one chunk (dQ's columns only under the offloading backward, where dQ is not
    // whole here).
    const std::int64_t blocks = offloads ? 3 : 2;
    const Tensor dq =
        offloads ? Tensor{} : scratch_.dheads_qkv.slice(0, total * w).reshaped({total, w});
    const Tensor chunk_grads =
        scratch_.dheads_qkv.slice(offloads ? 0 : total * w, chunk_rows * blocks * w)
            .reshaped({chunk_rows, blocks * w});
    KvGradientChunks chunks;
    chunks.kv_rows = total;
    ChunkGradients given;  // what rows(j) gave, which done(j) then hands over
    chunks.rows = [&](int, std::int64_t rows) {
        const Tensor g = chunk_grads.slice(0, rows);
        backend_.fill_zero(g);
        given = offloads ? ChunkGradients{g.columns(0, w), g.columns(w, w), g.columns(2 * w, w)}
                         : ChunkGradients{Tensor{}, g.columns(0, w), g.columns(w, w)};
        return given;
    };
    // Chunk j's dQ|dK|dV are final: back to the local rows that sent it (exchange_window), by
    // an all-to-all in flight while the next K/V chunk's pairs compute (FPDT §3.3).
    PendingHeadsExchange grads_exchange;
    std::array<Tensor, 3> grads_local;
    const auto finish_grads = [&] {
        if (grads_exchange.started) {
            finish_heads_exchange(backend_, grads_exchange, grads_local);
        }
    };
    chunks.done = [&](int, std::int64_t first, std::int64_t rows) {
        finish_grads();
        const ChunkExchange chunk = chunk_exchange(acts.exchange, me, first, rows);
        const Tensor heads[] = {offloads ? given.dq : dq.slice(first, rows), given.dk, given.dv};
        grads_local = {dlocal[0].slice(chunk.begin, chunk.count),
                       dlocal[1].slice(chunk.begin, chunk.count),
                       dlocal[2].slice(chunk.begin, chunk.count)};
        grads_exchange = start_gather_heads(backend_, parallel_.cp, chunk.exchange, heads,
                                            staging_region(0, chunk.exchange, 3));
    };
    // K/V chunks outer, Q chunks inner (chunked_attention.h), on the head shard.
    if (!offloads) {
        attention_->backward(acts.qkv_store(layer, a), dq, chunks, scratch_.dheads_out, a.heads_out,
                             a.att_lse, acts.exchange.document_spans);
        finish_grads();
        return;
    }
    // FPDT's offloading backward: ∂L/∂o's head shard made a chunk at a time, by the window's
    // all-to-all of this rank's rows of it.
    const OutputGradientSource dout = [&](std::int64_t first, std::int64_t rows, Tensor heads) {
        const ChunkExchange chunk = chunk_exchange(acts.exchange, me, first, rows);
        const Tensor local[] = {scratch_.datty.slice(chunk.begin, chunk.count)};
        const Tensor shard[] = {heads};
        scatter_heads(backend_, parallel_.cp, chunk.exchange, local,
                      heads_staging(chunk.exchange, 1), shard);
    };
    attention_->backward(acts.qkv_store(layer, a), chunks, dout, a.heads_out, a.att_lse,
                         acts.exchange.document_spans);
    finish_grads();
}

void GptModel::heads_output_to_rows(Activations& acts, const BlockActivations& a) {
    const Tensor out[] = {a.atty}, out_heads[] = {a.heads_out};
    gather_heads(backend_, parallel_.cp, acts.exchange, out_heads, heads_staging(acts.exchange, 1),
                 out);
}

Tensor GptModel::fpdt_chunk_scratch(const Activations& acts) {
    const std::int64_t cl = config_.hidden / parallel_.tp_size();
    const std::int64_t rows = std::min<std::int64_t>(attention_->options().chunk, acts.n_tokens());
    reserve(backend_, offload_kv_storage_, offload_kv_capacity_, rows * 3 * cl);
    return offload_kv_storage_.f32(0, {rows, 3 * cl});
}

std::int64_t GptModel::fpdt_chunk_rows(const Activations& acts) const {
    return std::min<std::int64_t>(attention_->options().chunk, acts.exchange.total_rows());
}

std::int64_t GptModel::query_rows(const Activations& acts) const {
    return acts.ulysses() ? acts.exchange.total_rows() : acts.n_tokens();
}

bool GptModel::split_qkv_layout(const Activations& acts) const {
    return !acts.ulysses() && (attention_->enabled() || acts.context_parallel());
}

int GptModel::n_head_shard() const {
    return config_.heads / parallel_.tp_size() / parallel_.cp_size();
}

std::int64_t GptModel::head_shard_width() const {
    return config_.hidden / parallel_.tp_size() / parallel_.cp_size();
}

std::pair<Tensor, Tensor> GptModel::offload_kv_scratch(const Activations& acts) {
    const std::int64_t width = 2 * (config_.hidden / parallel_.tp_size());
    const std::int64_t local = acts.n_tokens(), total = acts.exchange.total_rows();
    reserve(backend_, offload_kv_storage_, offload_kv_capacity_, (local + total) * width);
    return {offload_kv_storage_.f32(0, {local, width}),
            offload_kv_storage_.f32(local * width, {total, width})};
}

std::int64_t GptModel::kv_rows(const Activations& acts) const {
    return acts.context_parallel() ? acts.exchange.total_rows() : acts.n_tokens();
}

int GptModel::n_head_local() const {
    return config_.heads / parallel_.tp_size();
}

void GptModel::backward_embedding(Activations& acts) {
    const SequenceShard rows = acts.sequence_shard();
    backend_.embedding_backward(weight_grads_.wte, weight_grads_.wpe, scratch_.dresidual,
                                acts.tokens.slice(rows.begin, rows.rows),
                                acts.positions.slice(rows.begin, rows.rows));
}

}  // namespace fulcrum::engine
