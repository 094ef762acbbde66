// The memory one rank needs to train a GPT layout: model state (weights, gradients, optimizer
// state) and the activations it keeps for the micro-batches in flight. The planner drops the
// layouts that do not fit with it; docs/plan.md gives every formula.
//
// Model state, for the P parameters a rank holds (its stage's layers, split over TP):
//   weights + gradients = P · (weight bytes + gradient bytes)
//   optimizer state     = P · optimizer bytes, over DP with a distributed optimizer (ZeRO-1)
// Mixed precision with Adam (Rajbhandari et al., ZeRO, §3.1) is 2 + 2 + 12 = 16 bytes a
// parameter; Megatron-LM keeps fp32 gradients for its accumulation, 2 + 4 + 12 = 18.
//
// Activations of one transformer layer for one micro-batch of b sequences of s tokens, h
// hidden, a heads, tensor parallelism t, 16-bit (Korthikanti et al., "Reducing Activation
// Recomputation in Large Transformer Models", 2022, Table 2):
//   no recompute              s·b·h·(10 + 24/t + 5·a·s/(h·t))
//   + sequence parallelism    s·b·h·(34/t + 5·a·s/(h·t))
//   selective recompute       the 5·a·s/(h·t) term (the attention core's score matrices) goes
//   full recompute            2·s·b·h (the layer's input only; /t with sequence parallelism)
// Flash-style attention keeps no score matrix either, nor does chunked attention
// (`attention_chunk`). Offloading Q, K and V to pinned host memory (`offload`, with chunks and
// no recomputation) takes their 6·s·b·h/t bytes off and adds the two device slots the copies
// pass through, 2·chunk·3h/t elements. With context parallelism c a rank
// holds s/c of the tokens, whose queries meet all s keys: the score term is 5·a·(s/c)·s·b/t.
// A stage keeps one micro-batch's activations for each forward it has run and not yet
// backpropagated: m under GPipe, min(p − stage, m) under 1F1B and ZB-H1, and under
// interleaved 1F1B min((p − stage − 1)·2 + (v − 1)·p + 1, m·v) chunks of L/(p·v) layers
// (stage 0: L·(1 + (p − 1)/(p·v)) layers' worth, Megatron-LM's interleaving factor).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/parallel/layout.h"
#include "core/parallel/recompute.h"
#include "core/parallel/schedule.h"
#include "core/util/result.h"

namespace fulcrum::parallel {

// What one parameter costs in bytes, by where it is kept.
struct Precision {
    double weight_bytes = 2;             // the working copy the GEMMs read
    double gradient_bytes = 4;           // Megatron-LM accumulates gradients in fp32
    double optimizer_bytes = 12;         // fp32 master weights and Adam's two moments
    double activation_bytes = 2;         // per element of a kept activation
    bool distributed_optimizer = false;  // optimizer state sharded over data parallelism

    static Precision megatron_mixed();  // 2 + 4 + 12 = 18 bytes a parameter, 16-bit activations
    static Precision fp32();            // fulcrum-train's CPU backend: 4 + 4 + 8 (AdamW moments)
};

// A model and its layout as the memory model takes them, with what else changes a rank's
// memory. The defaults: one sequence of 2048 tokens a micro-batch, one micro-batch a step.
struct MemoryShape {
    ModelShape model{.context = 2048};  // context: s, the tokens of one sequence
    Layout layout{.microbatches = 1};   // microbatches: m, per step and DP replica
    int ffn_hidden = 0;                 // 0: 4 · hidden
    int microbatch_size = 1;            // b: sequences per micro-batch
    bool tied_embedding = true;
    bool flash_attention = false;  // no attention score matrix kept
    // FPDT's chunked attention (fulcrum-train --attention-chunk): QKV projection and attention
    // in chunks of this many rows; 0: whole documents. `offload`: Q, K, V wait in pinned host
    // memory between a block's forward and backward pass.
    int attention_chunk = 0;
    bool offload = false;
    Precision precision = Precision::megatron_mixed();
};

struct StageMemory {
    int stage = 0;
    double parameters = 0;  // held by one rank of the stage
    double weights_bytes = 0;
    double gradients_bytes = 0;
    double optimizer_bytes = 0;
    double activations_per_layer_bytes = 0;  // one layer, one micro-batch
    double layers_in_flight = 0;  // layers' worth of micro-batch activations kept at the peak
    double activations_bytes = 0;
    double model_state_bytes() const { return weights_bytes + gradients_bytes + optimizer_bytes; }
    double total_bytes() const { return model_state_bytes() + activations_bytes; }
};

// The shape of `model` under `layout`: one sequence of the context a micro-batch, the other
// knobs (attention, offload, precision) at their defaults for the caller to set.
inline MemoryShape memory_shape(const ModelShape& model, const Layout& layout) {
    return {.model = model, .layout = layout};
}

// Parameters of one transformer layer: 4h² + 4h (QKV and output projection with biases),
// 2h·f + f + h (the MLP), 4h (two LayerNorms).
double layer_parameters(const MemoryShape& shape);

// Layers stage `stage` holds: the sum of its model chunks' stage_layers, or L/p.
double stage_layer_count(const MemoryShape& shape, int stage);

// One rank of `stage`. The shape must be a valid layout (layers ≥ p·v, t divides the heads,
// stage_layers empty or passing parallel::check_stage_layers).
StageMemory stage_memory(const MemoryShape& shape, int stage);

// The layout's peak over its stages (the rank that needs the most).
StageMemory peak_stage_memory(const MemoryShape& shape);

// What fulcrum-train's backend counts on one rank (Backend::memory_use, engine/backend), the
// CPU backend's fp32 engine: docs/plan.md derives each term from engine/model. Every
// micro-batch holds `sequence` tokens (b = 1, a packed micro-batch), split over CP into s/c
// rows a rank and, under sequence parallelism, the residual stream over TP.
struct EngineMemory {
    int stage = 0;
    // Parameters, gradients and AdamW's two moments. The engine keeps the whole model's
    // (its TP shard) on every stage, the other stages' blocks idle: 4 · P_local floats.
    double model_state_bytes = 0;
    // Buffers of the model sized for one micro-batch and shared by all: the backward scratch,
    // the recompute workspace, the sequence-parallel buffer, CP's K|V exchange staging and
    // gathered gradients, the chunked attention's partial output and offload slots.
    double workspace_bytes = 0;
    // One micro-batch's kept tensors on this stage (all its model chunks), and the peak of the
    // schedule's passes in flight: each chunk from its forward to its backward (W under ZB-H1,
    // after B only what W reads: the GEMMs' inputs and the output gradients B keeps for it,
    // dfch and dQKV in the rows of fch and qkv without recomputation).
    double activations_per_microbatch_bytes = 0;
    double activations_bytes = 0;
    double pinned_bytes = 0;  // offloaded Q, K, V of the passes in flight, at their peak
    double peak_bytes() const { return model_state_bytes + workspace_bytes + activations_bytes; }
};

// The engine's peak on a rank of `stage` (tp rank 0, cp rank 0), from the second step on: the
// shape must pass fulcrum-train's checks, with stage_layers empty or one count per model chunk.
EngineMemory engine_stage_memory(const MemoryShape& shape, int stage);

}  // namespace fulcrum::parallel
