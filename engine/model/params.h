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
// Gradients and the AdamW moments use the same layout, so one offset names a parameter in all
// four buffers.
#pragma once

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

struct ParameterTensor {
    ParameterKind kind;
    int layer;         // block index, −1 for wte, wpe, lnf
    std::string name;  // "h.3.attn.qkv.weight", "wte", ...
    std::int64_t offset;
    std::int64_t rows;  // 1-D tensors: rows = element count, cols = 0
    std::int64_t cols;
    bool weight_decay;  // AdamW decays matrices only
    InitKind init;

    std::int64_t numel() const { return cols == 0 ? rows : rows * cols; }
};

struct ElementRange {
    std::int64_t offset = 0;
    std::int64_t count = 0;
};

class ParameterLayout {
public:
    explicit ParameterLayout(const GptConfig& config);

    const GptConfig& config() const { return config_; }
    std::span<const ParameterTensor> tensors() const { return tensors_; }
    std::int64_t total() const { return total_; }
    const ParameterTensor& find(ParameterKind kind, int layer = -1) const;
    // The contiguous slice of blocks [first, last).
    ElementRange block_range(int first, int last) const;

private:
    GptConfig config_;
    std::vector<ParameterTensor> tensors_;
    std::int64_t total_ = 0;
};

// Tensor views of one flat buffer laid out as above: parameters, gradients, or moments.
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

// Deterministic initial values for `seed`, written to host memory (layout.total() floats).
// Every tensor draws from its own generator, seeded by derive_seed(seed, tensor index), so a
// rank that owns only some tensors (pipeline) or rows of them (tensor parallel) can produce
// exactly the serial values for its part.
void initialize_parameters(const ParameterLayout& layout, std::uint64_t seed,
                           std::span<float> host_params);

}  // namespace fulcrum::engine
