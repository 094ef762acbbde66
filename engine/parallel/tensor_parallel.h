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
// Memory convention: the parameter buffers are in the local layout of params.h (per tensor,
// row or column blocks of the serial one); functions below translate. Host vectors of floats.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/comm/communicator.h"
#include "engine/model/config.h"
#include "engine/model/params.h"

namespace fulcrum::engine {

// TP rank tp_rank's local buffer (ParameterLayout(config, tp_size).total() floats) cut out of
// a serial one (config.parameter_count() floats). Works for parameters, gradients and AdamW
// moments alike.
std::vector<float> shard_parameters(std::span<const float> full, const GptConfig& config,
                                    int tp_size, int tp_rank);

// The inverse: every TP rank's local buffer (index = TP rank) → the serial buffer. Replicated
// tensors are taken from rank 0.
std::vector<float> gather_parameters(std::span<const std::vector<float>> locals,
                                     const GptConfig& config);

// The same through the TP communicator: every member passes its local buffer and gets the
// serial one back (an all-gather; for tests and checkpoints, not for the training loop).
std::vector<float> gather_parameters(std::span<const float> local, const GptConfig& config,
                                     Communicator& tp);

// The local element ranges of `layout` that are replicated across the TP group. A gradient
// norm sums the squares of these once and all-reduces the squares of the rest over TP.
std::vector<ElementRange> tp_replicated_ranges(const ParameterLayout& layout);

// In-place sum over `comm` of a contiguous f32 tensor; nothing when comm is null or of size 1.
// Both of Megatron's operators are this call, at different places (gpt.cpp).
void all_reduce_sum(Communicator* comm, Tensor t);

}  // namespace fulcrum::engine
