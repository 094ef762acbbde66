// The memory one rank needs to train a GPT or Llama layout: model state (weights, gradients,
// optimizer state) and the activations it keeps for the micro-batches in flight. The planner
// drops the layouts that do not fit with it; docs/plan.md gives every formula.
//
// Model state, for the P parameters a rank holds (its stage's layers, split over TP), with
// ZeRO (Rajbhandari et al. 2020, §5) over the d = DP × CP ranks that hold the same ones:
//   weights     = P · weight bytes,    / d at stage 3, plus the two layers gathered whole
//   gradients   = P · gradient bytes,  / d at stage 2 and 3, plus a layer's before its
//                                         reduce-scatter
//   optimizer   = P · optimizer bytes, / d at stage 1 (Megatron-LM's distributed optimizer) on
// Mixed precision with Adam (Rajbhandari et al., ZeRO, §3.1) is 2 + 2 + 12 = 16 bytes a
// parameter; Megatron-LM keeps fp32 gradients for its accumulation, 2 + 4 + 12 = 18.
//
// Activations of one transformer layer for one micro-batch of b sequences of s tokens, h
// hidden, a heads, tensor parallelism t, 16-bit (Korthikanti et al., "Reducing Activation
// Recomputation in Large Transformer Models", 2022, Table 2; kept_bytes_per_token generalises
// its terms to grouped-query attention and Llama's SwiGLU MLP):
//   no recompute              s·b·h·(10 + 24/t + 5·a·s/(h·t))
//   + sequence parallelism    s·b·h·(34/t + 5·a·s/(h·t))
//   selective recompute       the 5·a·s/(h·t) term (the attention core's score matrices) goes
//   full recompute            2·s·b·h (the layer's input only; /t with sequence parallelism),
//                             plus one layer without recomputation for the backward that
//                             re-runs it; with offloaded checkpoints two layers' inputs on the
//                             device, the rest in pinned host memory (FPDT, Yao et al. 2024)
// Flash-style attention keeps no score matrix either, nor does chunked attention
// (`attention_chunk`). Offloading Q, K and V to pinned host memory (`offload`, with chunks and
// no recomputation) takes their (2h + 4·h_kv)·s·b/t bytes off and adds the two device slots the
// copies pass through, 2·chunk·3h/t elements. With context parallelism c a rank holds s/c of
// the tokens, whose queries meet all s keys: the score term is 5·a·(s/c)·s·b/t; under Ulysses
// the same count, heads/c of them for all s queries, and the attention's output kept twice
// (2·s·b·h/(c·t) more). The last stage keeps the cross-entropy's fp32 softmax, 4·s·b·V/t
// (Korthikanti et al. 2022, §4.3).
// A stage keeps one micro-batch's activations for each forward it has run and not yet
// backpropagated: m under GPipe, min(p − stage, m) under 1F1B and ZB-H1, and under
// interleaved 1F1B min((p − stage − 1)·2 + (v − 1)·p + 1, m·v) chunks of L/(p·v) layers
// (stage 0: L·(1 + (p − 1)/(p·v)) layers' worth, Megatron-LM's interleaving factor).
#pragma once

#include <algorithm>
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
    double weight_bytes = 2;      // the working copy the GEMMs read
    double gradient_bytes = 4;    // Megatron-LM accumulates gradients in fp32
    double optimizer_bytes = 12;  // fp32 master weights and Adam's two moments
    double activation_bytes = 2;  // per element of a kept activation

    static Precision megatron_mixed();  // 2 + 4 + 12 = 18 bytes a parameter, 16-bit activations
    static Precision fp32();            // fulcrum-train's CPU backend: 4 + 4 + 8 (AdamW moments)
};

// A model and its layout as the memory model takes them, with what else changes a rank's
// memory. The defaults: one sequence of 2048 tokens a micro-batch, one micro-batch a step.
struct MemoryShape {
    ModelShape model{.context = 2048};  // context: s, the tokens of one sequence
    Layout layout{.microbatches = 1};   // microbatches: m, per step and DP replica
    int microbatch_size = 1;            // b: sequences per micro-batch
    bool flash_attention = false;       // no attention score matrix kept
    // FPDT's chunked attention (fulcrum-train --attention-chunk): QKV projection and attention
    // in chunks of this many rows; 0: whole documents. `offload`: Q, K, V wait in pinned host
    // memory between a block's forward and backward pass.
    int attention_chunk = 0;
    bool offload = false;
    // Tokens the LM head and the loss take at a time (FPDT's and ALST's tiled loss); 0: the
    // whole micro-batch at once, as Megatron-LM does.
    int loss_chunk = 0;
    // Whether the backward allocates the gradients as it first writes them rather than
    // holding a gradient buffer from the start (Megatron-LM's, fulcrum-train's): PyTorch's
    // `.grad`, which DeepSpeed's ZeRO-1 keeps and reduces at the accumulation boundary, and
    // ZeRO-2's shard, which deepspeed/runtime/zero/stage_1_and_2.py allocates at the
    // backward's first reduction and frees after the step. The gradients then fill as the
    // activations are freed, layer by layer: the peak holds the larger of the two, not both.
    // ZeRO-2's bucket (buffers_bytes) is held from the backward's start. Not for ZeRO-3.
    bool gradients_as_written = false;
    Precision precision = Precision::megatron_mixed();
};

struct StageMemory {
    int stage = 0;
    double parameters = 0;  // held by one rank of the stage
    double weights_bytes = 0;
    double gradients_bytes = 0;
    double optimizer_bytes = 0;
    double activations_per_layer_bytes = 0;  // one layer, one micro-batch
    double layers_in_flight = 0;   // layers' worth of micro-batch activations kept at the peak
    double activations_bytes = 0;  // with the logits and recomputation's working set
    double logits_bytes = 0;       // the last stage's
    // ZeRO's whole copies of sharded state: stage 3's gathered layers, stage 2's gradients
    // of a layer before their reduce-scatter.
    double buffers_bytes = 0;
    double host_bytes = 0;  // checkpoints offloaded to pinned host memory, at the peak
    // MemoryShape::gradients_as_written: the gradients and the activations are not held at
    // once; the peak is the larger.
    bool gradients_replace_activations = false;
    double model_state_bytes() const {
        return weights_bytes + gradients_bytes + optimizer_bytes + buffers_bytes;
    }
    double total_bytes() const {
        return gradients_replace_activations ? model_state_bytes() - gradients_bytes +
                                                   std::max(gradients_bytes, activations_bytes)
                                             : model_state_bytes() + activations_bytes;
    }
};

// The shape of `model` under `layout`: one sequence of the context a micro-batch, the other
// knobs (attention, offload, precision) at their defaults for the caller to set.
inline MemoryShape memory_shape(const ModelShape& model, const Layout& layout) {
    return {.model = model, .layout = layout};
}

// Layers stage `stage` holds: the sum of its model chunks' stage_layers, or L/p.
double stage_layer_count(const MemoryShape& shape, int stage);

// The 16-bit bytes one token leaves in one layer for its backward pass, besides the attention
// core's scores (Korthikanti et al. 2022, Table 2, its terms generalised): replicated over TP,
// the two norms' inputs 4h, the two linear inputs 4h (QKV's, the MLP's) and GPT's two dropout
// masks 2h; split over TP, Q 2h, K and V 4·h_kv, the projection's input 2h, and the MLP's
// kept 2f per matrix-wide tensor, two for GPT (the first GEMM's output and GeLU's) and three
// for Llama (gate, up and their product). GPT: (10 + 24/t)·h. With sequence parallelism the
// replicated part is split over TP too: 34·h/t for GPT.
double kept_bytes_per_token(const ModelShape& model, int tp, bool sequence_parallel);

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
    // Parameters, gradients and AdamW's two moments of what the stage holds (its blocks, wte
    // on the first and last stage, wpe on the first, lnf on the last; its TP shard of them):
    // 4 · P_local floats. Over d = DP × CP ranks, with S = ⌈P_local / d⌉ and O the tensors
    // around the blocks (wte, wpe, lnf): ZeRO-1 2 · P_local + 3 · S (the shard's moments and
    // its staging copy); ZeRO-2 P_local + 4 · S + block + O (the gradients' shard, and one
    // block's and O's whole); ZeRO-3 4 · S + 2 · (block + O) (the parameters' shard too, one
    // block and O gathered whole, and no staging). Under a split backward the gradients stay
    // whole: ZeRO-2 as ZeRO-1, ZeRO-3 P_local + 4 · S + block + O.
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
    // Offloaded Q, K, V and checkpoints of the passes in flight, at their peak.
    double pinned_bytes = 0;
    double peak_bytes() const { return model_state_bytes + workspace_bytes + activations_bytes; }
};

// The engine's peak on a rank of `stage` (tp rank 0, cp rank 0), from the second step on: the
// shape must pass fulcrum-train's checks, with stage_layers empty or one count per model chunk.
EngineMemory engine_stage_memory(const MemoryShape& shape, int stage);

// The shape engine_stage_memory takes for a fulcrum-train run: fp32 (the engine's tensors), its
// model, its layout (grid included) and FPDT's chunking (`offload` only with a chunk). The
// prediction holds for micro-batches that all fill the context: where they vary, a buffer that
// grows for a longer one is briefly held twice, so a run may measure more or less.
MemoryShape engine_memory_shape(const ModelShape& model, const Layout& layout, int attention_chunk,
                                bool offload);

}  // namespace fulcrum::parallel
