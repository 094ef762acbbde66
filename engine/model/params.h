// The parameters of a GPT in one contiguous fp32 buffer.
//
// Layout (offsets in floats, C = channels, V = vocab, S = max_context, in this order):
//     wte                 [V, C]     token embedding, also the LM head (tied)
//     wpe                 [S, C]     position embedding
//     for each block l = 0 … n_layer−1, contiguous:
//         ln1.weight      [C]        ln1.bias        [C]
//         attn.qkv.weight [3C, C]    attn.qkv.bias   [3C]   rows: Q (C), then K (C), then V (C);
//                                                           within each, head h = rows h·hs…
//         attn.proj.weight[C, C]     attn.proj.bias  [C]
//         ln2.weight      [C]        ln2.bias        [C]
//         mlp.fc.weight   [4C, C]    mlp.fc.bias     [4C]
//         mlp.proj.weight [C, 4C]    mlp.proj.bias   [C]
//     lnf.weight [C], lnf.bias [C]
// Total = V·C + S·C + n_layer·(12C² + 13C) + 2C.
//
// Why this order: a pipeline stage owns a contiguous range of blocks, and with blocks stored
// one after another its parameters, gradients and optimizer moments are each one contiguous
// slice of the serial buffers (`block_range`), which makes "parallel equals serial" a
// memcmp-able comparison. The embedding sits with the first stage and lnf with the last; the
// tied wte is needed by both, so the pipeline keeps a copy on the last stage and sums the two
// wte gradients across first and last stage (Megatron's word-embedding all-reduce). Tensor
// parallelism splits inside tensors (qkv and fc by output rows — head-aligned for qkv — and
// the projections by input columns), so a TP shard is a per-tensor row or column block of
// this layout, not a contiguous range.
//
// Tensor-parallel (local) layout. ParameterLayout(config, tp_size) is ONE TP rank's layout:
// the same tensors in the same order, with the split ones shrunk (Megatron-LM, Shoeybi et al.
// 2019 §3; C_l = C/tp, the rank's n_head/tp heads):
//     attn.qkv.weight [3C_l, C]  attn.qkv.bias [3C_l]   rows: its heads' Q, then K, then V
//     attn.proj.weight[C, C_l]                          its input columns
//     mlp.fc.weight   [4C_l, C]  mlp.fc.bias   [4C_l]   its output rows
//     mlp.proj.weight [C, 4C_l]                         its input columns
// Everything else — wte, wpe, the LayerNorms, lnf, and the biases of the two row-parallel
// projections — is replicated on every TP rank (`TpSplit::replicated`): its gradient comes
// out identical on all of them, so a global gradient norm must count it once.
// engine/model/tensor_parallel.h maps between the full and the local layouts.
//
// Gradients and the AdamW moments use the same layout, so one offset names a parameter in all
// four buffers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/config.h"

namespace fulcrum::engine {

enum class ParameterKind : std::uint8_t {
    token_embedding,
    position_embedding,
    ln1_weight,
    ln1_bias,
    qkv_weight,
    qkv_bias,
    attn_proj_weight,
    attn_proj_bias,
    ln2_weight,
    ln2_bias,
    fc_weight,
    fc_bias,
    fc_proj_weight,
    fc_proj_bias,
    lnf_weight,
    lnf_bias,
};

// How a tensor is initialised (GPT-2, Radford et al. 2019 §2.3 and its released code):
// N(0, 0.02) for embeddings and GEMM weights, N(0, 0.02/√(2·n_layer)) for the two projections
// that write into the residual stream, zeros for biases, ones for LayerNorm gains.
enum class InitKind : std::uint8_t { normal, residual_normal, zeros, ones };

// How tensor parallelism splits a tensor across the TP ranks (rank r of tp):
enum class TpSplit : std::uint8_t {
    replicated,     // whole on every rank
    output_rows,    // column-parallel linear: rows [r·R/tp, (r+1)·R/tp)       (mlp.fc)
    head_rows,      // fused QKV: those rows of each of the Q, K and V blocks  (attn.qkv)
    input_columns,  // row-parallel linear: columns [r·K/tp, (r+1)·K/tp)       (the projections)
};

struct ParameterTensor {
    ParameterKind kind;
    int layer;         // block index, −1 for wte, wpe, lnf
    std::string name;  // "h.3.attn.qkv.weight", "wte", ...
    std::int64_t offset;
    std::int64_t rows;  // 1-D tensors: rows = element count, cols = 0
    std::int64_t cols;
    bool weight_decay;  // AdamW decays matrices only
    InitKind init;
    TpSplit tp_split;  // rows/cols above are this TP rank's (local) sizes

    std::int64_t numel() const { return cols == 0 ? rows : rows * cols; }
    bool tp_replicated() const { return tp_split == TpSplit::replicated; }
};

struct ElementRange {
    std::int64_t offset = 0;
    std::int64_t count = 0;

    std::int64_t end() const { return offset + count; }
    friend bool operator==(const ElementRange&, const ElementRange&) = default;
};

// The elements `a` and `b` share (count 0 where none).
inline ElementRange overlap(ElementRange a, ElementRange b) {
    const std::int64_t begin = std::max(a.offset, b.offset);
    return {begin, std::max<std::int64_t>(std::min(a.end(), b.end()) - begin, 0)};
}

// Which tensors a pipeline stage holds (Megatron-LM's stages hold their own layers): its
// blocks, wte where it embeds or (tied) where it runs the LM head, wpe where it embeds, lnf
// where it runs the head. The default holds the whole model.
struct StageParameters {
    std::vector<bool> blocks;  // one flag per block; empty: all
    bool token_embedding = true;
    bool position_embedding = true;
    bool final_norm = true;

    bool holds_block(int layer) const {
        return blocks.empty() || blocks[static_cast<std::size_t>(layer)];
    }
};

class ParameterLayout {
public:
    // The layout of one TP rank out of tp_size (1: the serial layout) holding `held`: the same
    // tensors in the same order, less those not held, packed (so a stage's buffers, and its
    // optimizer state, are only what it owns). Aborts when validate_tensor_parallel(config,
    // tp_size) fails.
    explicit ParameterLayout(const ModelShape& config, int tp_size = 1, StageParameters held = {});

    const ModelShape& config() const { return config_; }  // the whole model's sizes
    int tp_size() const { return tp_size_; }
    const StageParameters& held() const { return held_; }
    std::span<const ParameterTensor> tensors() const { return tensors_; }
    std::int64_t total() const { return total_; }
    bool holds(ParameterKind kind, int layer = -1) const;
    const ParameterTensor& find(ParameterKind kind, int layer = -1) const;  // aborts if not held
    // The contiguous slice of blocks [first, last), all held.
    ElementRange block_range(int first, int last) const;
    // What lies outside the held blocks: wte and wpe before them, lnf after (empty where none
    // is held).
    ElementRange before_blocks() const;
    ElementRange after_blocks() const;

private:
    ModelShape config_;
    int tp_size_ = 1;
    StageParameters held_;
    std::vector<ParameterTensor> tensors_;
    std::int64_t total_ = 0;
};

// A held layout's values placed into the whole layout of the same TP degree (zeros where
// nothing is held), and the whole layout's values of the tensors `held` holds.
std::vector<float> expand_held(const ParameterLayout& held, std::span<const float> values);
std::vector<float> take_held(const ParameterLayout& held, std::span<const float> whole);

// Tensor views of one flat buffer laid out as above: parameters, gradients, or moments. A
// tensor the layout does not hold is an empty view.
struct BlockWeights {
    Tensor ln1_weight, ln1_bias;
    Tensor qkv_weight, qkv_bias;
    Tensor attn_proj_weight, attn_proj_bias;
    Tensor ln2_weight, ln2_bias;
    Tensor fc_weight, fc_bias;
    Tensor fc_proj_weight, fc_proj_bias;
};

struct GptWeights {
    Tensor wte, wpe;
    std::vector<BlockWeights> blocks;
    Tensor lnf_weight, lnf_bias;
};

// `flat` is a 1-D f32 tensor of layout.total() elements.
GptWeights map_weights(const ParameterLayout& layout, Tensor flat);
Tensor view_of(const ParameterTensor& tensor, Tensor flat);
// The tensors of `layout` that lie in `range` (whole tensors: a block's range, or one outside
// the blocks) as views of `part`, which holds that range alone (range.count elements); with
// an empty `part`, empty views. The other tensors of `weights` are left as they are.
void map_weights_in(const ParameterLayout& layout, ElementRange range, Tensor part,
                    GptWeights& weights);

// Parameters no rank holds whole between uses (ZeRO-3, Rajbhandari et al. 2020, §5.3;
// engine/distributed/zero_parameters.h). A model given one (ModelParallel::sharded) allocates
// no parameter buffer: it acquires a range — a block's, before_blocks() or after_blocks() —
// just before a pass reads it and releases it after. Each acquire is a collective over the
// ranks that share the shards, so every one of them makes the same calls in the same order.
class ShardedParameters {
public:
    virtual ~ShardedParameters() = default;
    // The layout's values, the same on every member: each keeps its shard.
    virtual void set_whole(std::span<const float> host) = 0;
    // The whole layout's values on every member, a range at a time.
    virtual std::vector<float> whole_to_host() = 0;
    // `range` whole on the device until release(range); at most one block's at a time.
    virtual Tensor acquire(ElementRange range) = 0;
    virtual void release(ElementRange range) = 0;
    // This member's shard: the range of the layout it keeps (and its optimizer updates), and
    // its values.
    virtual ElementRange shard_range() const = 0;
    virtual Tensor shard() const = 0;
};

// Gradients no rank holds whole (ZeRO-2, Rajbhandari et al. 2020, §5.2;
// engine/distributed/zero_gradients.h). A model given one (ModelParallel::sharded_gradients)
// allocates no gradient buffer for its blocks: a block's backward writes into a buffer
// acquired for it, zeroed, and releasing it reduce-scatters it into the members' shards, where
// the passes' sums accumulate. That is a collective over the ranks that share the shards, so
// every one of them makes the same calls in the same order. The tensors around the blocks
// (wte, wpe, lnf) keep whole gradients until the step's end: the first stage's embedding and
// the last stage's head both write wte's, summed between the stages before they are reduced.
class ShardedGradients {
public:
    virtual ~ShardedGradients() = default;
    // The gradients of before_blocks() or after_blocks(), whole on the device for the step.
    virtual Tensor outer(ElementRange range) = 0;
    // One block's gradients, zeroed, on the device until release(range) reduce-scatters them.
    virtual Tensor acquire(ElementRange range) = 0;
    virtual void release(ElementRange range) = 0;
    // Zeroes the shard and the outer gradients: a step's start.
    virtual void zero() = 0;
    // The step's end: the outer gradients reduce-scattered into the shards, which then hold
    // every sum of this member's range.
    virtual void reduce_outer() = 0;
    virtual ElementRange shard_range() const = 0;
    virtual Tensor shard() const = 0;  // shard_range().count elements
};

// invalid_input unless heads (and so the QKV, MLP and projection splits) divide evenly over
// tp_size ranks.
Status validate_tensor_parallel(const ModelShape& config, int tp_size);

// Deterministic initial values for `seed`, written to host memory (layout.total() floats).
// Every tensor draws from its own generator, seeded by derive_seed(seed, tensor index), so a
// rank that owns only some tensors (pipeline) or rows of them (tensor parallel) can produce
// exactly the serial values for its part. `layout` must be the serial one (tp_size 1): a TP
// rank initialises the full buffer and takes its part with shard_parameters.
void initialize_parameters(const ParameterLayout& layout, std::uint64_t seed,
                           std::span<float> host_params);

}  // namespace fulcrum::engine
