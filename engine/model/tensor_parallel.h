// Tensor parallelism (Megatron-LM, Shoeybi et al. 2019 §3) inside a transformer block.
//
// Math. With TP ranks r = 0 … tp−1, each holding C_l = C/tp columns of the attention (its
// n_head/tp heads) and 4C/tp of the MLP:
//
//   attention   qkv_r = LN₁(x) · W_qkv,rᵀ + b_qkv,r     column-parallel (its heads' Q, K, V)
//               y_r   = Attention(qkv_r)                 heads are independent: no exchange
//               x    += Σ_r y_r · W_proj,rᵀ + b_proj     row-parallel: all-reduce, bias once
//   MLP         h_r   = GELU(LN₂(x) · W_fc,rᵀ + b_fc,r)  column-parallel
//               x    += Σ_r h_r · W_fc_proj,rᵀ + b       row-parallel: all-reduce, bias once
//
// Megatron's two conjugate operators place the only communication:
//   f (before a column-parallel GEMM):  forward identity,   backward all-reduce of ∂L/∂input
//   g (after a row-parallel GEMM):      forward all-reduce, backward identity
// so a block costs two all-reduces of [T, C] forward and two backward. The residual stream,
// the LayerNorms, the embedding and the head are replicated: every TP rank computes them on
// identical inputs, so their outputs and their parameters' gradients are identical across
// the TP group (the all-reduce hands every rank the same sum).
//
// The row-parallel biases are added once: rank 0 adds them to its partial product before the
// all-reduce (Σ_r p_r + b = (p_0 + b) + Σ_{r>0} p_r); their gradient Σ_rows ∂L/∂out needs the
// replicated ∂L/∂out only, so every rank computes the same one.
//
// Sequence parallelism (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
// Transformer Models", §4.2.2). Outside the two GEMM pairs the block is element-wise per token
// (LayerNorm, residual add, dropout), so TP's replicated work there can be split over the
// tokens instead: TP rank r holds rows [b_r, b_r + n_r) of the micro-batch's T rows (the first
// T mod tp ranks one row more) of the residual stream, the LayerNorm inputs, outputs and
// statistics, the embedding and the head. The conjugate operators become
//   f (before a column-parallel GEMM):  forward all-gather of the LN output's rows,
//                                        backward reduce-scatter of ∂L/∂input to the rows
//   g (after a row-parallel GEMM):      forward reduce-scatter of the partial products to rows,
//                                        backward all-gather of ∂L/∂output's rows
// A ring all-reduce is a reduce-scatter followed by an all-gather, so the traffic is the same
// as TP's; what falls is the activation memory: the LayerNorm/residual tensors ([T, C] ×4 per
// block, the embedding's and the head's) and the backward's residual gradient are stored per
// shard, 1/tp of them. The column-parallel GEMMs' weight gradients need the whole LN output
// [T, C]: it is all-gathered again in the backward pass (Korthikanti §4.2.2 does the same rather
// than keep the gathered copy), into one buffer that every block reuses.
// Parameters whose gradient used to come out identical on every TP rank from replicated work
// now see only their rows' tokens: the LayerNorm gains and biases, lnf, wte and wpe get a
// partial gradient per TP rank, summed over TP before the optimizer (Megatron-LM's all-reduce
// of sequence-parallel gradients). The row-parallel biases are still added once, by rank 0,
// before the reduce-scatter; their gradient comes from the all-gathered ∂L/∂output, identical
// on every rank, as without sequence parallelism.
//
// Memory convention: the parameter buffers are in the local layout of params.h (per tensor,
// row or column blocks of the serial one); functions below translate. Host vectors of floats.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/comm/communicator.h"
#include "engine/model/config.h"
#include "engine/model/parallel_context.h"
#include "engine/model/params.h"

namespace fulcrum::engine {

// TP rank tp_rank's local buffer (ParameterLayout(config, tp_size).total() floats) cut out of
// a serial one (parameter_count(config) floats). Works for parameters, gradients and AdamW
// moments alike.
std::vector<float> shard_parameters(std::span<const float> full, const ModelShape& config,
                                    int tp_size, int tp_rank);

// The inverse: every TP rank's local buffer (index = TP rank) → the serial buffer. Replicated
// tensors are taken from rank 0.
std::vector<float> gather_parameters(std::span<const std::vector<float>> locals,
                                     const ModelShape& config);

// The same through the TP communicator: every member passes its local buffer and gets the
// serial one back (an all-gather; for tests and checkpoints, not for the training loop).
std::vector<float> gather_parameters(std::span<const float> local, const ModelShape& config,
                                     Communicator& tp);

// The local element ranges of `layout` that are replicated across the TP group. A gradient
// norm sums the squares of these once and all-reduces the squares of the rest over TP.
std::vector<ElementRange> tp_replicated_ranges(const ParameterLayout& layout);

// In-place sum over `comm` of a contiguous f32 tensor; nothing when comm is null or of size 1.
// Both of Megatron's operators are this call, at different places (gpt.cpp).
void all_reduce_sum(Communicator* comm, Tensor t);

// Sequence parallelism (sequence_shard in parallel_context.h says which rows a rank holds):
// every rank's row count, in elements of `width` columns: the counts of the collectives below.
std::vector<int> sequence_counts(std::int64_t rows, int tp, std::int64_t width);

// f forward and g backward: every TP rank's rows `shard` [n_r, C] into `full` [T, C].
void all_gather_sequence(Communicator& tp, Tensor shard, Tensor full);
// g forward and f backward: the sum over TP of `full` [T, C], this rank's rows into `shard`.
void reduce_scatter_sequence(Communicator& tp, Tensor full, Tensor shard);

}  // namespace fulcrum::engine
