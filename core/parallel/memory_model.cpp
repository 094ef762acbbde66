#include "core/parallel/memory_model.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace fulcrum::parallel {

Precision Precision::megatron_mixed() {
    return {};
}

Precision Precision::fp32() {
    Precision precision;
    precision.weight_bytes = 4;
    precision.gradient_bytes = 4;
    precision.optimizer_bytes = 8;  // AdamW's first and second moments; the weights are the master
    precision.activation_bytes = 4;
    return precision;
}

double stage_layer_count(const MemoryShape& shape, int stage) {
    const int p = std::max(shape.layout.grid.pp, 1);
    if (shape.layout.stage_layers.empty()) {
        return double(shape.model.layers) / p;
    }
    double layers = 0;
    for (std::size_t c = std::size_t(stage); c < shape.layout.stage_layers.size();
         c += std::size_t(p)) {
        layers += shape.layout.stage_layers[c];
    }
    return layers;
}

double kept_bytes_per_token(const ModelShape& model, int tp, bool sequence_parallel) {
    const double h = model.hidden, f = ffn_hidden_of(model), t = std::max(tp, 1);
    const double h_kv = kv_hidden_of(model);
    const bool llama = model.architecture == Architecture::llama;
    const double replicated = 8 * h + (llama ? 0 : 2 * h);
    const double split = 2 * h + 4 * h_kv + 2 * h + (llama ? 3 : 2) * 2 * f;
    return (sequence_parallel ? replicated / t : replicated) + split / t;
}

namespace {

// The 16-bit bytes of Q, K and V one token keeps a layer on a TP rank, (2h + 4·h_kv)/t: what
// offloading them moves to host memory (Korthikanti et al. 2022, Table 2: QKᵀ's inputs and V).
double qkv_bytes_per_token(const ModelShape& model, int tp) {
    return (2.0 * model.hidden + 4.0 * kv_hidden_of(model)) / std::max(tp, 1);
}

// Forwards a stage has run and not yet backpropagated at its peak, in layers' worth.
double layers_in_flight(const MemoryShape& shape, int stage) {
    const int p = std::max(shape.layout.grid.pp, 1), m = std::max(shape.layout.microbatches, 1);
    const int v = std::max(shape.layout.virtual_stages, 1);
    const double stage_layers = stage_layer_count(shape, stage);
    switch (shape.layout.schedule) {
        case parallel::PipelineSchedule::gpipe:
            return stage_layers * m;
        case parallel::PipelineSchedule::one_f_one_b:
        case parallel::PipelineSchedule::zero_bubble_h1:
            return stage_layers * std::min(p - stage, m);
        case parallel::PipelineSchedule::interleaved: {
            const int chunks = std::min((p - stage - 1) * 2 + (v - 1) * p + 1, m * v);
            return stage_layers / v * chunks;
        }
    }
    return stage_layers;
}

// Korthikanti et al. 2022, Table 2: bytes of 16-bit activations one layer keeps under
// `recompute`; see the header.
double activations_per_layer(const MemoryShape& shape, Recompute recompute) {
    const double s = shape.model.context, b = shape.microbatch_size, h = shape.model.hidden,
                 a = shape.model.heads;
    const double t = std::max(shape.layout.grid.tp, 1), c = std::max(shape.layout.grid.cp, 1);
    const double local = s / c;  // tokens this rank holds
    const double sbh = local * b * h;
    if (recompute == Recompute::full) {
        return 2 * sbh / (shape.layout.sequence_parallel ? t : 1.0);
    }
    double linear =
        kept_bytes_per_token(shape.model, shape.layout.grid.tp, shape.layout.sequence_parallel) / h;
    // Offloaded (fulcrum-train --attention-chunk --offload on, no recomputation): Q, K and V,
    // (2h + 4·h_kv)/t of those bytes (6h/t without grouped-query attention: Table 2's QKᵀ
    // inputs 4sbh/t and V 2sbh/t), wait in pinned host memory.
    if (shape.offload && shape.attention_chunk > 0 && recompute == Recompute::none) {
        linear -= qkv_bytes_per_token(shape.model, shape.layout.grid.tp) / h;
    }
    // Ulysses keeps the attention's output twice: in head shards for the attention's backward
    // and, after the all-to-all back, in token shards as the projection's input.
    if (shape.layout.context_parallelism == ContextParallelism::ulysses && c > 1) {
        linear += 2 / t;
    }
    // Chunked attention scores a chunk at a time and keeps no score matrix, as flash does.
    const bool scores =
        recompute == Recompute::none && !shape.flash_attention && shape.attention_chunk == 0;
    const double score_elements = scores ? 5 * a * local * s * b / t : 0.0;
    return sbh * linear + score_elements;
}

}  // namespace

StageMemory stage_memory(const MemoryShape& shape, int stage) {
    const int p = std::max(shape.layout.grid.pp, 1);
    const double t = std::max(shape.layout.grid.tp, 1);
    const Precision& precision = shape.precision;
    StageMemory memory;
    memory.stage = stage;
    double parameters = layer_parameters(shape.model) * stage_layer_count(shape, stage);
    if (stage == 0) {
        parameters += embedding_parameters(shape.model);
    }
    if (stage == p - 1) {
        parameters += head_parameters(shape.model);
        if (tied_embedding(shape.model) && p > 1) {
            // With PP a tied embedding is copied to the last stage as its output layer.
            parameters += double(shape.model.vocab) * shape.model.hidden;
        }
    }
    memory.parameters = parameters / t;
    // ZeRO shards over the ranks that hold the same parameters: DP × CP.
    const int zero = shape.layout.zero_stage;
    const double shards =
        double(std::max(shape.layout.grid.dp, 1)) * std::max(shape.layout.grid.cp, 1);
    memory.weights_bytes = memory.parameters * precision.weight_bytes / (zero >= 3 ? shards : 1);
    memory.gradients_bytes =
        memory.parameters * precision.gradient_bytes / (zero >= 2 ? shards : 1);
    memory.optimizer_bytes =
        memory.parameters * precision.optimizer_bytes / (zero >= 1 ? shards : 1);
    memory.gradients_replace_activations = shape.gradients_as_written && zero < 3;
    const double layer_local = layer_parameters(shape.model) / t;
    if (zero >= 3) {
        // The layer being computed gathered whole, and the next one prefetched.
        memory.buffers_bytes += 2 * layer_local * precision.weight_bytes;
    }
    if (zero >= 2) {
        // A layer's gradients whole until their reduce-scatter is done.
        memory.buffers_bytes += layer_local * precision.gradient_bytes;
    }
    const double scale = precision.activation_bytes / 2;
    const Recompute recompute = shape.layout.recompute;
    memory.activations_per_layer_bytes = activations_per_layer(shape, recompute) * scale;
    memory.layers_in_flight = layers_in_flight(shape, stage);
    // Offloaded checkpoints: the device holds the one being copied and the one being made
    // (or, in the backward, the one in use and the one prefetched); the rest wait on the host.
    const double on_device = shape.layout.offload_checkpoints
                                 ? std::min(2.0, memory.layers_in_flight)
                                 : memory.layers_in_flight;
    memory.activations_bytes = memory.activations_per_layer_bytes * on_device;
    memory.host_bytes = memory.activations_per_layer_bytes * (memory.layers_in_flight - on_device);
    const double local_tokens =
        double(shape.model.context) / std::max(shape.layout.grid.cp, 1) * shape.microbatch_size;
    if (recompute == Recompute::full) {
        // The layer whose backward runs holds its whole forward again (Korthikanti et al.
        // 2022, §4: recomputation's working set, one layer's activations without it); FPDT
        // (Yao et al. 2024, §4) runs the recomputed layer a chunk of the sequence at a time.
        const double share =
            shape.attention_chunk > 0 ? std::min(1.0, shape.attention_chunk / local_tokens) : 1.0;
        memory.activations_bytes += activations_per_layer(shape, Recompute::none) * scale * share;
    }
    if (shape.offload && shape.attention_chunk > 0 && recompute == Recompute::none) {
        // Q, K and V of every layer in flight wait on the host.
        memory.host_bytes += local_tokens * qkv_bytes_per_token(shape.model, shape.layout.grid.tp) *
                             scale * memory.layers_in_flight;
    }
    if (shape.offload && shape.attention_chunk > 0) {
        // The two device slots the copies double-buffer through: [chunk, 3h/t] each (during
        // the recomputed layer's attention under full recomputation).
        memory.activations_bytes +=
            2.0 * shape.attention_chunk * 3 * shape.model.hidden / t * precision.activation_bytes;
    }
    if (stage == p - 1) {
        // The cross-entropy's fp32 softmax over the vocabulary-parallel logits, kept for its
        // backward (Korthikanti et al. 2022, §4.3: 4·s·b·V/t bytes).
        const double tokens =
            shape.loss_chunk > 0 ? std::min<double>(shape.loss_chunk, local_tokens) : local_tokens;
        memory.logits_bytes = 4.0 * tokens * shape.model.vocab / t;
        memory.activations_bytes += memory.logits_bytes;
    }
    return memory;
}

StageMemory peak_stage_memory(const MemoryShape& shape) {
    StageMemory peak = stage_memory(shape, 0);
    for (int stage = 1; stage < std::max(shape.layout.grid.pp, 1); ++stage) {
        const StageMemory memory = stage_memory(shape, stage);
        if (memory.total_bytes() > peak.total_bytes()) {
            peak = memory;
        }
    }
    return peak;
}

}  // namespace fulcrum::parallel

// ---- fulcrum-train's counted memory (docs/plan.md, "The engine's own count") ----------------

namespace fulcrum::parallel {
namespace {

constexpr double kFloatBytes = 4;  // the engine's tensors are fp32 (and its int32 token ids)

// One rank's rows and widths as engine/model lays its tensors out (gpt.h, BlockActivations).
struct EngineRows {
    double n = 0;   // query rows of a micro-batch: s/c under CP
    double ns = 0;  // rows of the residual stream: n, or tp rank 0's ⌈n/t⌉ sequence-parallel
    double g = 0;   // gathered K|V rows under CP (all s), else none
    double c = 0, cl = 0, hl = 0, v = 0;  // C, C/t, heads/t, vocabulary
    // Ulysses (cp > 1): the head shard's width C/(t·cp) and heads, and the cp ranks' rows
    // its staging sends (context_parallel.h).
    bool ulysses = false;
    double w = 0, hs = 0, cp = 1;

    // Per block, what attention keeps of the whole micro-batch's rows: CP's gathered K|V, or
    // Ulysses' head shard of Q, K, V.
    double gathered_qkv() const { return ulysses ? 3 * g * w : 2 * g * cl; }
    // The attention's output and lse the backward reads: this rank's rows, or the head shard's.
    double attention_saved() const { return ulysses ? g * w + g * hs : n * hl; }
};

EngineRows engine_rows(const MemoryShape& shape) {
    EngineRows r;
    const double t = std::max(shape.layout.grid.tp, 1), cp = std::max(shape.layout.grid.cp, 1);
    const double tokens = double(shape.model.context) * std::max(shape.microbatch_size, 1);
    r.n = std::ceil(tokens / cp);
    r.ns = shape.layout.sequence_parallel ? std::ceil(r.n / t) : r.n;
    r.g = cp > 1 ? tokens : 0;
    r.c = shape.model.hidden;
    r.cl = shape.model.hidden / t;
    r.hl = shape.model.heads / t;
    r.v = shape.model.vocab;
    r.ulysses = cp > 1 && shape.layout.context_parallelism == ContextParallelism::ulysses;
    r.cp = cp;
    r.w = r.cl / cp;
    r.hs = r.hl / cp;
    return r;
}

bool offloads(const MemoryShape& shape) {
    return shape.attention_chunk > 0 && shape.offload;
}

// FPDT's output offload (Ulysses with offload): the head shard's attention output and lse in
// pinned host memory with the block's Q, K, V (engine/model/gpt.h, Activations::host_out).
bool offloads_attention_output(const MemoryShape& shape, const EngineRows& r) {
    return r.ulysses && offloads(shape);
}

// One model chunk's memory for one micro-batch, in elements, by how long it lives
// (engine/model/gpt.h, Activations::Run): `kept` until its backward (W), `until_input_
// gradients` until B, the split backward's output gradients from B to W.
struct ChunkElements {
    double kept = 0, until_input_gradients = 0, output_gradients = 0;
    double pinned_kept = 0, pinned_until_input_gradients = 0;
};

ChunkElements chunk_elements(const MemoryShape& shape, const EngineRows& r, double layers,
                             bool head) {
    const bool split = parallel::splits_backward(shape.layout.schedule);
    const bool none = shape.layout.recompute == Recompute::none;
    const bool full = shape.layout.recompute == Recompute::full;
    const bool offload = offloads(shape);
    // A split backward without recomputation writes its output gradients over what B has
    // read, which then lives until W: dfch and dQKV over fch and qkv, ∂L/∂ the row-parallel
    // products over residual3 and residual2 (without sequence parallelism, where those are
    // [n, C] too), ∂L/∂logits over probs; it frees the chunk's input, the LayerNorm statistics,
    // lse, CP's K|V and the losses after B (Activations::output_gradients_in_forward_rows).
    const bool in_rows = split && none;
    const bool in_residual = in_rows && !shape.layout.sequence_parallel;
    ChunkElements e;
    double kept = 0, until = 0;
    double& stream = in_rows ? until : kept;
    double& residual = in_rows && !in_residual ? until : kept;
    residual += r.ns * r.c;  // per block: the residual stream out (residual3)
    double qkv = 0, kv = 0;
    if (!full) {
        kept += 2 * r.ns * r.c;                      // ln1, ln2
        residual += r.ns * r.c;                      // residual2
        stream += 4 * r.ns;                          // both LayerNorms' statistics
        kept += 4 * r.n * r.cl;                      // GELU's output, the MLP projection's input
        (in_rows ? kept : until) += 4 * r.n * r.cl;  // fch, GELU's input (dfch after B)
        qkv = offload ? 0 : 3 * r.n * r.cl;          // Q|K|V
        kv = offload ? 0 : r.gathered_qkv();         // CP's gathered K|V, Ulysses' Q|K|V
        if (none) {
            kept += r.n * r.cl;  // the attention output
            // Its log-sum-exp (and Ulysses' head-shard output; with offload on the host).
            until += offloads_attention_output(shape, r) ? 0 : r.attention_saved();
        }
    }
    // B frees Q, K, V only when W does not recompute from them: with offload; without, dQKV
    // takes their rows.
    const bool qkv_until = split && none && offload;
    e.kept = layers * (kept + (qkv_until ? 0 : qkv) + (in_rows ? 0 : kv));
    if (full && shape.layout.offload_checkpoints) {
        // Every block's output but the chunk's last in pinned host memory
        // (engine/model/checkpoint_offload.h).
        e.kept -= (layers - 1) * r.ns * r.c;
        e.pinned_kept += (layers - 1) * r.ns * r.c;
    }
    e.until_input_gradients = layers * (until + (qkv_until ? qkv : 0) + (in_rows ? kv : 0));
    (in_rows ? e.until_input_gradients : e.kept) += r.ns * r.c;  // the chunk's input
    if (head) {
        e.kept += r.ns * r.c + 2 * r.ns;                             // lnf and its statistics
        (in_rows ? e.kept : e.until_input_gradients) += r.ns * r.v;  // probabilities
        e.until_input_gradients += r.ns;                             // per-token losses
    }
    if (split) {
        // ∂L/∂ the two row-parallel products, dfch, dQKV and ∂L/∂logits, each unless in the
        // rows of what B has read.
        e.output_gradients =
            layers * ((in_residual ? 0 : 2 * r.n * r.c) + (in_rows ? 0 : 4 * r.n * r.cl) +
                      (in_rows && !offload ? 0 : 3 * r.n * r.cl)) +
            (head && !in_rows ? r.ns * r.v : 0);
    }
    if (offload) {
        // Q and K|V in pinned host memory: this rank's queries and the gathered or own K|V,
        // or under Ulysses the head shard's Q, K, V over every token and its attention output
        // and lse (freed together: a W that recomputes the block writes them again).
        const double pinned = r.ulysses ? layers * (3 * r.g * r.w + r.attention_saved())
                                        : layers * (r.n * r.cl + (r.g > 0 ? r.g : r.n) * 2 * r.cl);
        (qkv_until ? e.pinned_until_input_gradients : e.pinned_kept) += pinned;
    }
    return e;
}

// The model's buffers for one micro-batch, shared by all (gpt.h: the backward scratch, the
// recompute workspace, the sequence buffer, CP's staging; chunked_attention.h).
double workspace_elements(const MemoryShape& shape, const EngineRows& r) {
    const bool offload = offloads(shape);
    // dresidual, dln, dln_shard, datty, dqkv, dfch, dfch_gelu, dlogits (on every stage)
    double w = r.ns * r.c + r.n * r.c + (shape.layout.sequence_parallel ? r.ns * r.c : 0) +
               12 * r.n * r.cl + r.ns * r.v;
    if (r.ulysses && shape.attention_chunk > 0) {
        // FPDT (engine/model/gpt.h, fpdt_attention_forward and _backward): ∂L/∂ the head
        // shard's output and its dQ whole, dK|dV of one chunk, and the all-to-all staging for
        // the larger of a whole exchange of one block and a chunk's of three. With offload
        // dQ|dK|dV of one chunk and two slots of ∂L/∂o, dQ, the output and lse
        // (chunked_attention.h; the rest in pinned memory), the staging for a chunk's
        // exchange alone (none is whole) and beside it one for a chunk's output, traded back
        // while the next chunk's Q|K|V are in flight, and this rank's Q|K|V rows of the chunk
        // being made (the head shard goes to the chunk slots).
        const double chunk = std::min<double>(shape.attention_chunk, r.g);
        const double sent = std::min<double>(shape.attention_chunk, r.n);
        const double output_staging = (r.cp * sent + chunk) * r.w;
        const double chunk_staging = 3 * output_staging;
        if (offload) {
            w += 3 * chunk * r.w + 2 * double(shape.attention_chunk) * (3 * r.w + r.hs);
            w += chunk_staging + output_staging + 3 * sent * r.cl;
        } else {
            w += 2 * r.g * r.w + 2 * chunk * r.w;
            w += std::max((r.cp * r.n + r.g) * r.w, chunk_staging);
        }
    } else if (r.ulysses) {
        w += 4 * r.g * r.w;                 // ∂L/∂ the head shard's output and Q|K|V
        w += (r.cp * r.n + r.g) * 3 * r.w;  // all-to-all staging (context_parallel.h)
    } else if (r.g > 0) {
        w += 2 * (2 * r.g * r.cl);                  // dK|dV gathered, exchange staging
        w += offload ? (r.n + r.g) * 2 * r.cl : 0;  // this rank's and the gathered K|V
    }
    // The recomputed attention output and lse (on the host under FPDT's output offload).
    const double saved = offloads_attention_output(shape, r) ? 0 : r.attention_saved();
    if (shape.layout.recompute == Recompute::selective) {
        w += r.n * r.cl + saved;
    } else if (shape.layout.recompute == Recompute::full) {
        w += 3 * r.ns * r.c + 4 * r.ns + r.n * r.cl + saved + 8 * r.n * r.cl;
        w += offload ? 0 : 3 * r.n * r.cl + r.gathered_qkv();
    }
    if (shape.layout.sequence_parallel) {
        w += r.n * r.c;  // all-gathered rows and row-parallel products
    }
    if (shape.layout.offload_checkpoints && shape.layout.recompute == Recompute::full) {
        w += 2 * r.ns * r.c;  // the two checkpoint slots
    }
    if (shape.attention_chunk > 0) {
        // The chunks' width and heads: the head shard's under Ulysses.
        const double chunk = shape.attention_chunk;
        const double width = r.ulysses ? r.w : r.cl, heads = r.ulysses ? r.hs : r.hl;
        w += chunk * (width + heads) + (offload ? 2 * chunk * 3 * width : 0);
    }
    return w;
}

// The model's pinned host buffers shared by all micro-batches: FPDT's offloading backward's
// ∂L/∂o and dQ of the head shard (chunked_attention.h).
double workspace_pinned_elements(const MemoryShape& shape, const EngineRows& r) {
    return r.ulysses && offloads(shape) ? 2 * r.g * r.w : 0;
}

// Replays the stage's passes (parallel::step_ops, as ParallelTrainer runs them) and returns
// the peak of what the micro-batches in flight hold, device and pinned, in elements.
std::pair<double, double> in_flight_peak(const MemoryShape& shape, int stage,
                                         const std::vector<ChunkElements>& chunks, double inputs) {
    const int p = std::max(shape.layout.grid.pp, 1), m = std::max(shape.layout.microbatches, 1);
    const parallel::PipelineShape pipeline{p, m, int(chunks.size())};
    std::vector<int> chunks_held(std::size_t(m), 0);
    double device = 0, pinned = 0, device_peak = 0, pinned_peak = 0;
    auto release_chunk = [&](int microbatch) {
        if (--chunks_held[std::size_t(microbatch)] == 0) {
            device -= inputs;  // tokens, targets, positions
        }
    };
    for (const parallel::PipelineOp& op :
         parallel::step_ops(shape.layout.schedule, stage, pipeline)) {
        const ChunkElements& e = chunks[std::size_t(op.chunk)];
        switch (op.kind) {
            case Phase::none:  // not a pass
                break;
            case Phase::forward:
                device += (chunks_held[std::size_t(op.microbatch)]++ == 0 ? inputs : 0) + e.kept +
                          e.until_input_gradients;
                pinned += e.pinned_kept + e.pinned_until_input_gradients;
                break;
            case Phase::backward:
                if (parallel::splits_backward(shape.layout.schedule)) {
                    device += e.output_gradients;
                    device_peak = std::max(device_peak, device);
                    device -= e.until_input_gradients;
                    pinned -= e.pinned_until_input_gradients;
                } else {
                    device -= e.kept + e.until_input_gradients;
                    pinned -= e.pinned_kept + e.pinned_until_input_gradients;
                    release_chunk(op.microbatch);
                }
                break;
            case Phase::weight_grad:
                device -= e.kept + e.output_gradients;
                pinned -= e.pinned_kept;
                release_chunk(op.microbatch);
                break;
        }
        device_peak = std::max(device_peak, device);
        pinned_peak = std::max(pinned_peak, pinned);
    }
    return {device_peak, pinned_peak};
}

}  // namespace

MemoryShape engine_memory_shape(const ModelShape& model, const Layout& layout, int attention_chunk,
                                bool offload) {
    MemoryShape shape;
    shape.precision = Precision::fp32();
    shape.model = model;
    shape.layout = layout;
    shape.attention_chunk = attention_chunk;
    shape.offload = attention_chunk > 0 && offload;
    return shape;
}

EngineMemory engine_stage_memory(const MemoryShape& shape, int stage) {
    const int p = std::max(shape.layout.grid.pp, 1), v = std::max(shape.layout.virtual_stages, 1);
    const EngineRows r = engine_rows(shape);
    EngineMemory memory;
    memory.stage = stage;
    // What the stage holds (engine/model/params.h, StageParameters): its blocks' 12·C·C_l +
    // 7C_l + 6C each, wte (V·C) on the first and the last stage, wpe (S·C) on the first, lnf
    // (2C) on the last; fp32 weights, gradients and two moments. Under ZeRO over d = DP × CP
    // ranks a rank keeps the moments of its shard (the first P mod d shards one element
    // longer: rank 0's is ⌈P/d⌉); under ZeRO-1 a staging copy of it for the all-gather
    // (parallel_trainer.h); under ZeRO-2 also only the shard of the gradients, besides one
    // block's and the tensors' around the blocks (zero_gradients.h), or the whole gradients
    // under a split backward;
    // under ZeRO-3 also the shard instead of the whole parameters, besides one block and the
    // tensors around the blocks gathered whole (zero_parameters.h).
    double stage_blocks = 0;
    for (int k = 0; k < v; ++k) {
        const parallel::LayerRange layers = parallel::model_chunk_layers(
            k * p + stage, p * v, shape.model.layers, shape.layout.stage_layers);
        stage_blocks += layers.last - layers.first;
    }
    const bool first = stage == 0, last = stage == p - 1;
    const double block = 12 * r.c * r.cl + 7 * r.cl + 6 * r.c;
    const double before =
        (first || last ? r.v * r.c : 0) + (first ? double(shape.model.context) * r.c : 0);
    const double after = last ? 2 * r.c : 0;
    const double local_parameters = before + stage_blocks * block + after;
    const int shards = std::max(shape.layout.grid.dp, 1) * std::max(shape.layout.grid.cp, 1);
    const int zero = shards > 1 ? shape.layout.zero_stage : 0;
    const double shard = std::ceil(local_parameters / shards);
    const bool sharded_gradients = zero >= 2 && !parallel::splits_backward(shape.layout.schedule);
    // Parameters, gradients, moments, staging.
    const double parameters = zero == 3 ? shard + block + before + after : local_parameters;
    const double gradients = sharded_gradients ? shard + block + before + after : local_parameters;
    const double moments = zero >= 1 ? 2 * shard : 2 * local_parameters;
    const double staging = zero >= 1 && !(zero == 3 && sharded_gradients) ? shard : 0;
    memory.model_state_bytes = (parameters + gradients + moments + staging) * kFloatBytes;
    memory.workspace_bytes = workspace_elements(shape, r) * kFloatBytes;
    std::vector<ChunkElements> chunks;
    for (int k = 0; k < v; ++k) {
        const int model_chunk = k * p + stage;
        const parallel::LayerRange layers = parallel::model_chunk_layers(
            model_chunk, p * v, shape.model.layers, shape.layout.stage_layers);
        chunks.push_back(
            chunk_elements(shape, r, layers.last - layers.first, model_chunk == p * v - 1));
        memory.activations_per_microbatch_bytes +=
            (chunks.back().kept + chunks.back().until_input_gradients) * kFloatBytes;
    }
    const auto [device, pinned] = in_flight_peak(shape, stage, chunks, 3 * r.n);
    memory.activations_bytes = device * kFloatBytes;
    memory.pinned_bytes = (pinned + workspace_pinned_elements(shape, r)) * kFloatBytes;
    return memory;
}

}  // namespace fulcrum::parallel
