// Activation recomputation: what the forward pass of a block keeps for its backward pass, and
// what the backward pass computes again instead (Chen et al. 2016, "Training Deep Nets with
// Sublinear Memory Cost"; Korthikanti et al. 2022, "Reducing Activation Recomputation in
// Large Transformer Models", §5).
//
// Memory, per token of a micro-batch and block, in floats (C channels, C_l = C/tp, H_l = the
// rank's heads; gpt.h lists the tensors; under sequence parallelism the [C] ones are a TP
// shard's rows, tensor_parallel.h):
//
//   none       ln1, residual2, ln2, residual3 [C]; qkv [3C_l]; atty [C_l]; fch, fch_gelu
//              [4C_l]; lse [H_l]; two means and rstds        4C + 12C_l + H_l + 4
//   selective  the same less the attention core's outputs atty and lse: Korthikanti's
//              selective recompute drops the s²-sized scores, softmax and dropout mask, which
//              a flash-style kernel never stores; here the core's outputs are what it keeps,
//              and its backward re-runs attention_forward on the kept Q, K, V first
//                                                             4C + 11C_l + 4
//   full       only the block's input, the residual stream (the previous block's residual3):
//              the backward re-runs the block's forward up to its last GEMM first     C
//
// What is dropped still has to exist for one block at a time: the model holds one block's
// worth of the dropped tensors (a recompute workspace for the largest micro-batch), shared by
// every block and micro-batch. So against `none` the device peak falls by
//     (micro-batches held × blocks − 1) × tokens × (dropped floats per token) × 4 bytes
// for micro-batches of equal size (tests/engine/test_engine_model.cpp checks that equality on
// the CPU backend's counts).
//
// Cost. selective re-runs attention once per block in the backward pass (with flash-style
// attention that is a fraction of the block's FLOPs); full re-runs the forward up to the MLP's
// second GEMM: about a third more compute (the forward is ⅓ of forward + backward), and under
// TP one more all-reduce per block (the attention projection's), under CP one more K/V
// all-gather. The recomputed values are the same kernels on the same inputs, so training gives
// the same bits as without recomputation.
#pragma once

#include "core/parallel/recompute.h"

namespace fulcrum::engine {

// One enum and one parser for the engine, the simulator and the planner.
using parallel::parse_recompute;
using parallel::Recompute;
using parallel::recompute_name;

}  // namespace fulcrum::engine
