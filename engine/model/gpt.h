// The GPT: a decoder-only transformer over bytes (GPT-2's architecture, Radford et al. 2019).
//
//     x⁰ = wte[token] + wpe[position in document]                        embedding.h
//     for each block l:  x ← x + AttnProj(Attention(QKV(LN₁(x))))       layernorm.h, matmul.h,
//                        x ← x + MlpProj(GELU(Fc(LN₂(x))))                attention.h, mlp.h
//     logits = LN_f(x) · wteᵀ;   loss = mean cross-entropy of next bytes  lm_head.h
//
// GptModel owns the parameters and their gradients (params.h layout) on a backend; an
// Activations object holds what the forward pass of ONE micro-batch saves for its backward
// pass. They are separate so that a pipeline stage can keep several micro-batches in flight
// (one Activations each) over one set of weights.
//
// The passes are split into the pieces a pipeline stage runs: the embedding (first stage),
// a range of blocks, and the head (last stage). Between stages travel the residual stream
// `block_input(l)` forward and `residual_gradient()` backward. forward()/backward() run all
// pieces in order, which is the serial model.
//
// Tensor and context parallelism (parallel_context.h) live inside the same pieces. With a TP
// communicator the parameters are the rank's local layout (params.h) and each block all-
// reduces over TP after its two row-parallel GEMMs and, backward, the input gradients of its
// two column-parallel ones (tensor_parallel.h); the residual stream and so block_input() and
// residual_gradient() stay [T, C] and identical on every TP rank. With a CP communicator a
// rank loads a ContextShard (its tokens only: block_input() is [T_local, C]) and each block
// exchanges K/V over CP (context_parallel.h). The head and forward() then give the sum of ℓ
// over the LOCAL target tokens, and gradients are this rank's share: the trainer adds losses
// over CP (not over TP: every TP rank reports the same sum) and all-reduces gradients over CP.
//
// Sequence parallelism (set_sequence_parallel, tensor_parallel.h) splits the residual stream
// over TP by rows: block_input() and residual_gradient() are then this TP rank's rows
// [n_r, C], the head's loss is the sum over them (the trainer adds it over TP too), and the
// LayerNorm, lnf, wte and wpe gradients are partial per TP rank until
// reduce_sequence_parallel_gradients().
//
// Activation recomputation (set_recompute, recompute.h) changes what an Activations keeps;
// the passes recompute the rest into a workspace of the model's when they need it.
//
// Split backward (Zero Bubble, Qi et al., ICLR'24, §2). backward_head/backward_blocks with
// BackwardPart::input_gradients compute only what the previous stage waits for, ∂L/∂input of
// every GEMM and LayerNorm (the B pass), and keep the gradient at every GEMM's and
// LayerNorm's output in the Activations (output_gradients); backward_weights_blocks/_head
// later turn those and the forward's activations into the weight and bias gradients (the W
// pass). B then W gives the gradients of the whole backward: every one bit for bit but the
// tied wte's, which sums the LM head's part (now in W) and the embedding's (in B) in the other
// order, one rounding apart per element (test_engine_model compares it norm-wise). The
// embedding's gradient (a scatter-add, no GEMM) stays in B.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/checkpoint_offload.h"
#include "engine/model/chunked_attention.h"
#include "engine/model/config.h"
#include "engine/model/micro_batch.h"
#include "engine/model/parallel_context.h"
#include "engine/model/params.h"
#include "engine/model/recompute.h"

namespace fulcrum::engine {

// Saved by the forward pass of one block, all with n_tokens rows. Layout (per row): ln1,
// atty, residual2, ln2, residual3 [T, C]; qkv [T, 3C] (Q | K | V); fch, fch_gelu [T, 4C];
// att_lse [T, n_head]; ln*_mean, ln*_rstd [T]. Under TP, qkv, atty, fch, fch_gelu and att_lse
// are the rank's share: C_l = C/tp columns (its n_head/tp heads) instead of C. Under sequence
// parallelism ln1, residual2, ln2, residual3 and the statistics hold the TP rank's rows only.
// With recomputation (recompute.h) the Activations keep only some of these (atty and att_lse
// empty with selective, everything but residual3 with full); GptModel fills the others from
// its recompute workspace while a pass needs them.
// Under CP (a ContextShard loaded) or with chunked attention the memory of qkv holds Q
// [T, C_l] and then K|V [T, 2C_l] (this rank's under CP), each contiguous (the K|V block is
// what the all-gather sends), and under CP kv holds every CP rank's K|V rows in document order
// [T_total, 2C_l] (saved for the backward pass, which needs the gathered keys again;
// re-gathering would trade that memory for traffic). With chunked attention and offload, qkv
// and kv are empty: the block's Q and K|V wait in pinned host memory (Activations::qkv_store).
// Under DeepSpeed-Ulysses (context_parallel.h; P = the CP degree, w = C_l/P) qkv is the serial
// [T, 3C_l] of this rank's tokens, kv the head shard [T_total, 3w] (Q|K|V of this rank's heads
// over every token, document order), heads_out the attention's output there [T_total, w] and
// att_lse [T_total, n_head/(tp·P)]; atty is the output brought back to this rank's tokens.
struct BlockActivations {
    Tensor ln1, ln1_mean, ln1_rstd;
    Tensor qkv;
    Tensor kv;         // CP only
    Tensor heads_out;  // Ulysses only
    Tensor atty, att_lse;
    Tensor residual2;  // x after the attention branch
    Tensor ln2, ln2_mean, ln2_rstd;
    Tensor fch, fch_gelu;
    Tensor residual3;  // x after the MLP branch: the block's output
};

// Kept by the input-gradient pass (B) of a split backward for the weight-gradient pass (W):
// the gradient at the output of each of the block's GEMMs (Zero Bubble, §2: W is the GEMMs' dW;
// the LayerNorms' few weight gradients are left in B, so W reads no LayerNorm input). Rows as
// the tensor they are the gradient of: fc_proj_out and attn_proj_out [T, C] (∂L/∂ the
// row-parallel products, all-gathered under sequence parallelism), fch [T, 4C_l] and qkv
// [T, 3C_l] (CP's layout when qkv has it). Without recomputation fch and qkv are the forward's
// own fch and qkv rows, overwritten by B once it has read them (Activations, below), and
// without sequence parallelism fc_proj_out and attn_proj_out those of residual3 and residual2.
struct BlockOutputGradients {
    Tensor fc_proj_out, fch;
    Tensor attn_proj_out, qkv;
};
// The same for the head: ∂L/∂logits [T, V] (a TP rank's rows under sequence parallelism), in
// the rows of probs without recomputation.
struct HeadOutputGradients {
    Tensor logits;
};

// Which part of the backward pass a call runs (Zero Bubble's split, above).
enum class BackwardPart : std::uint8_t {
    whole,            // input and weight gradients
    input_gradients,  // B: input gradients; what W needs is kept in the Activations
};

class GptModel;
class Carver;  // gpt.cpp: hands out consecutive views of one allocation

class Activations {
public:
    // tp_size: the TP degree of the model that will use it (GptModel checks); no
    // recomputation, sequence parallelism or split backward.
    Activations(Backend& backend, const ModelShape& config, int tp_size = 1);
    // For `model`: its backend, config, TP degree and its settings of offload, recomputation,
    // sequence parallelism and split backward at this point (set them first). `blocks_held`
    // (one flag per block; empty: all) are the blocks a pipeline stage runs: only they get
    // device memory, with the output of the block before each run of them (what the stage
    // receives into), the embedding's output when block 0 is held and the head's tensors when
    // the last block is.
    explicit Activations(const GptModel& model, std::vector<bool> blocks_held = {});

    int tp_size() const { return tp_size_; }
    std::int64_t n_tokens() const { return n_tokens_; }
    // The rows of the residual stream this TP rank holds: all n_tokens() rows, or its shard
    // under sequence parallelism (tensor_parallel.h).
    SequenceShard sequence_shard() const { return shard_; }
    bool sequence_parallel() const { return sequence_parallel_; }
    Recompute recompute() const { return recompute_; }
    // Whether B passes keep what W passes need (output_gradients, head_output_gradients).
    bool keeps_output_gradients() const { return keeps_output_gradients_; }
    std::int64_t target_count() const { return target_count_; }

    // Inputs of the micro-batch (device), and its attention spans (host).
    Tensor tokens, targets, positions;
    std::vector<AttentionSpan> spans;
    // Set when a ContextShard was loaded (empty rows_per_rank: a whole micro-batch).
    ContextExchange exchange;
    bool context_parallel() const { return !exchange.rows_per_rank.empty(); }
    // A ContextShard loaded into Activations of a model with Ulysses' context parallelism.
    bool ulysses() const { return ulysses_ && context_parallel(); }

    Tensor encoded;  // x⁰ [T, C]
    std::vector<BlockActivations> blocks;
    Tensor lnf, lnf_mean, lnf_rstd;
    Tensor probs;   // [T, V]: logits, overwritten with softmax probabilities
    Tensor losses;  // [T] per-token cross-entropy, 0 where there is no target
    // Split backward only: what the B pass keeps for the W pass.
    std::vector<BlockOutputGradients> output_gradients;
    HeadOutputGradients head_output_gradients;

    // The residual stream entering block l (l == n_layer: entering the head).
    Tensor block_input(int layer) const;

    // Sizes the views for `n_tokens` rows, growing the storage when needed; gathered_rows > 0
    // also sizes every block's kv for that many CP-gathered rows. Every held block's memory is
    // allocated here, unless it is allocated by the schedule (below).
    void resize(std::int64_t n_tokens, std::int64_t gathered_rows = 0);
    void set_target_count(std::int64_t n) { target_count_ = n; }

    // Memory by the schedule (ParallelTrainer): a pipeline stage holds device memory only for
    // the passes in flight, so its peak follows the schedule (m micro-batches under GPipe,
    // min(p − s, m) under 1F1B, Megatron-LM's count of model chunks interleaved). Then
    // resize() allocates only the inputs (tokens, targets, positions), and a model chunk's
    // blocks [first, last) — one run of consecutive held blocks, with the residual stream it
    // receives into, the embedding's output or the head's tensors where it holds them — are
    // allocated by allocate_blocks() before its forward pass and released by release_blocks()
    // after its backward pass. Under a split backward allocate_output_gradients() comes before
    // B, and release_input_gradient_inputs() after it frees what only the forward and B read,
    // so between B and W a micro-batch keeps what W needs and the gradients B kept for it.
    // Without recomputation that is the GEMMs' inputs (ln1, atty, ln2, fch_gelu) and their
    // output gradients, which B writes over what it has read: dfch and dQKV over fch and qkv
    // (no offload), ∂L/∂ the two row-parallel products over residual3 and residual2 (no
    // sequence parallelism), ∂L/∂logits over probs. B frees the chunk's input, the LayerNorm
    // statistics, lse, CP's K|V and the losses, so a micro-batch waiting for W holds what one
    // waiting for B does less lse, 16·C floats a token a block — Zero Bubble's (§2.1) premise
    // that ZB-H1's peak is 1F1B's. With recomputation B frees qkv, lse and fch only when W does
    // not re-read them (W recomputes from what stays).
    void allocate_by_schedule() { by_schedule_ = true; }
    void allocate_blocks(int first, int last);
    void allocate_output_gradients(int first, int last);
    void release_input_gradient_inputs(int first, int last);
    void release_blocks(int first, int last);  // the inputs too, once no chunk is held

    // FPDT's offload (on for a model with chunked attention and offload): every block's Q and
    // K|V wait in pinned host memory between its forward and backward pass, and none of them
    // is on the device except the chunks being computed (chunked_attention.h).
    bool offloads_qkv() const { return offload_qkv_; }
    // Where block l's Q and K|V are kept: the device views of `block`'s qkv (and kv under CP),
    // or with offload block l's pinned host rows.
    QkvStore qkv_store(int layer, const BlockActivations& block) const;
    // Offloaded checkpoints (a model with set_offload_checkpoints): the pinned host rows
    // [n_s, C] where block l's output waits between its passes, or null when it stays on the
    // device (the last block of a model chunk; checkpoint_offload.h). Between the passes such
    // a block's residual3 is empty; GptModel points it at a device slot while it is needed.
    float* host_checkpoint(int layer) const;
    bool offloads_checkpoints() const { return offload_checkpoints_; }

private:
    friend class GptModel;
    // A run of consecutive held blocks [first, last): one model chunk of a stage. Its device
    // memory is three allocations, by how long they are read: `kept` until the backward pass
    // is done (W under a split backward), `until_input_gradients` until B, `gradients` (the
    // output gradients of a split backward) from B to W; with offload, pinned host rows of
    // Q [q_rows, C_l] and K|V [kv_rows, 2C_l] for each of its blocks.
    struct Run {
        int first = 0, last = 0;
        DeviceBuffer kept, until_input_gradients, gradients;
        PinnedBuffer host_q, host_kv;
        std::int64_t q_rows = 0, kv_rows = 0;
        // Ulysses with offload: each block's head-shard output [out_rows, W] and lse
        // [out_rows, H_s] (FPDT's output offload), freed with host_q (a W that recomputes
        // the block writes them again).
        PinnedBuffer host_out;
        std::int64_t out_rows = 0;
        PinnedBuffer host_checkpoints;  // [last − first − 1][checkpoint_rows, C]
        std::int64_t checkpoint_rows = 0;
        bool live = false;  // allocated (always, unless by the schedule)
    };
    Run& run_of(int first, int last);
    // Pinned host copies of block l's Q [q_rows, W] and K|V [kv_rows, 2W], W the attention's
    // width: C_l, or the head shard's C_l/cp under Ulysses.
    float* host_q(int layer) const;
    float* host_kv(int layer) const;
    std::int64_t attention_width() const;
    // FPDT's output offload: Ulysses with offload keeps the head shard's attention output and
    // lse in pinned host memory (host_out, host_lse), not in the blocks' device views.
    bool offloads_attention_output() const { return offload_qkv_ && ulysses(); }
    std::int64_t head_shard_heads() const;
    float* host_out(int layer) const;
    float* host_lse(int layer) const;
    // Whether a split backward frees the blocks' qkv, K|V and their pinned copies after B:
    // not when W recomputes from them.
    bool qkv_freed_after_input_gradients() const;
    // Whether B's dfch and dQKV overwrite the forward's fch and qkv, which then live until W,
    // and B frees the residual stream and LayerNorm statistics (split backward, no
    // recomputation; qkv only without offload, which keeps it in pinned memory).
    bool output_gradients_in_forward_rows() const;
    // Lays out the views of one run for n rows (a carver counts when it has no buffer).
    void carve_run(const Run& run, Carver& kept, Carver& until_input_gradients, std::int64_t n,
                   std::int64_t gathered_rows);
    void carve_output_gradients(const Run& run, Carver& gradients, std::int64_t n);
    // Empties the views into one of a run's allocations, or all of them, before it is freed.
    enum class Part : std::uint8_t { until_input_gradients, all };
    void empty_views(const Run& run, Part part);
    // Allocates (or, growing, reallocates) the run's memory for the current size and lays
    // it out; `output_gradients` the split backward's buffer, else the activations.
    void allocate_run(Run& run, bool output_gradients);

    Backend& backend_;
    ModelShape config_;
    int tp_size_ = 1;
    int tp_rank_ = 0;
    std::int64_t n_tokens_ = 0;
    std::int64_t gathered_rows_ = 0;
    std::int64_t capacity_ = 0;  // rows of ints_
    std::int64_t target_count_ = 0;
    SequenceShard shard_;
    DeviceBuffer ints_;
    std::vector<Run> runs_;
    std::vector<int> held_runs_;  // per held block, its run's index; -1 elsewhere
    bool offload_qkv_ = false;
    bool offload_checkpoints_ = false;
    bool ulysses_ = false;
    int cp_size_ = 1;
    bool sequence_parallel_ = false;
    Recompute recompute_ = Recompute::none;
    bool keeps_output_gradients_ = false;
    bool by_schedule_ = false;
};

class GptModel {
public:
    // `config` describes the whole model; with parallel.tp the parameters are that TP rank's
    // local layout (params.h). Aborts when TP does not divide the heads.
    // `held`: the tensors a pipeline stage holds (params.h, StageParameters); its parameters,
    // gradients and the optimizer state over them are those alone, packed. Default: all.
    GptModel(Backend& backend, const ModelShape& config, ModelParallel parallel = {},
             StageParameters held = {});

    Backend& backend() const { return backend_; }
    const ModelShape& config() const { return config_; }
    const ModelParallel& parallel() const { return parallel_; }
    const ParameterLayout& layout() const { return layout_; }  // the local layout

    // FPDT-style chunked attention: each block's QKV projection and attention in chunks of
    // options.chunk rows, with every block's Q, K and V in pinned host memory between its
    // forward and backward pass when options.offload (chunked_attention.h); chunk 0 (the
    // default) is whole-document attention.
    void set_attention_chunking(ChunkedAttentionOptions options);
    const AttentionMemory& attention_memory() const { return attention_->memory(); }
    // Whether Activations made for this model offload their qkv (Activations::offloads_qkv).
    bool offloads_qkv() const { return attention_->offloads(); }

    // What the forward pass keeps of each block (recompute.h). Selective recomputation re-runs
    // attention_forward on kept Q, K, V, which chunked attention does not keep on the device:
    // it aborts with chunking on (fulcrum-train refuses the combination first).
    void set_recompute(Recompute recompute);
    Recompute recompute() const { return recompute_; }
    // Sequence parallelism (tensor_parallel.h); needs a TP group of more than one rank.
    void set_sequence_parallel(bool on);
    bool sequence_parallel() const { return sequence_parallel_; }
    // Offloaded activation checkpoints (checkpoint_offload.h): under full recomputation every
    // block's output but a model chunk's last waits in pinned host memory between its forward
    // and backward pass, two on the device at a time. Needs Recompute::full and no split
    // backward (whose W pass would recompute from them a second time); aborts otherwise
    // (fulcrum-train refuses first).
    void set_offload_checkpoints(bool on);
    bool offloads_checkpoints() const { return checkpoints_ != nullptr; }
    // Null without offloaded checkpoints.
    const CheckpointMemory* checkpoint_memory() const {
        return checkpoints_ ? &checkpoints_->memory() : nullptr;
    }
    // Whether Activations made for this model keep the output gradients that a split
    // backward's W pass needs (BackwardPart::input_gradients).
    void set_split_backward(bool on);
    bool splits_backward() const { return split_backward_; }
    // Under sequence parallelism the gradients that each TP rank holds only its rows' share
    // of (the LayerNorms, lnf, wte, wpe), as element ranges of the local layout; empty
    // otherwise. reduce_sequence_parallel_gradients() sums them over TP.
    const std::vector<ElementRange>& sequence_parallel_gradient_ranges() const {
        return sequence_parallel_ranges_;
    }
    void reduce_sequence_parallel_gradients();

    // Flat 1-D buffers in the layout order, and structured views of them. With sharded
    // parameters (ModelParallel::sharded) parameters() is empty and weights() holds only what
    // a pass is using; with sharded gradients (ModelParallel::sharded_gradients) gradients()
    // is empty and weight_gradients() holds wte's, wpe's and lnf's, and a block's while its
    // backward runs.
    Tensor parameters() const { return params_; }
    Tensor gradients() const { return grads_; }
    const GptWeights& weights() const { return weights_; }
    const GptWeights& weight_gradients() const { return weight_grads_; }
    ShardedParameters* sharded_parameters() const { return parallel_.sharded; }
    ShardedGradients* sharded_gradients() const { return parallel_.sharded_gradients; }
    // The gradients of a range of the layout: a view of gradients(), or with sharded gradients
    // of the shard, which must hold the range.
    Tensor gradients_in(ElementRange range) const;

    // The serial initial values for `seed`; under TP this rank's part of them.
    void initialize(std::uint64_t seed);
    void set_parameters(std::span<const float> host);  // local layout
    void set_gradients(std::span<const float> host);   // local layout; not sharded
    // With sharded parameters a collective over the ranks that share them.
    std::vector<float> parameters_to_host() const;
    std::vector<float> gradients_to_host() const;  // not with sharded gradients
    void zero_gradients();

    // The serial model. forward() returns Σ ℓ over the micro-batch's target tokens (the
    // host waits for it); backward() adds loss_scale · ∂(Σ ℓ)/∂θ to gradients(). With
    // loss_scale = 1/N_step over all micro-batches of a step, the gradients end up as those
    // of the step's mean loss (lm_head.h).
    double forward(const TokenBatch& batch, Activations& acts);
    double forward(const ContextShard& shard, Activations& acts);  // Σ ℓ over local targets
    void backward(Activations& acts, float loss_scale);

    // Pieces, for pipeline stages. Blocks run over [first, last). load_micro_batch() aborts
    // on a batch that fails validate(batch, config): data from outside the engine's own
    // packer should be validated (and the error reported) before it gets here.
    // A whole micro-batch; only without CP (or CP of one rank).
    void load_micro_batch(const TokenBatch& batch, Activations& acts);
    // This CP rank's share (make_context_shard): its exchange must be for this CP group.
    void load_micro_batch(const ContextShard& shard, Activations& acts);
    void forward_embedding(Activations& acts);
    void forward_blocks(int first, int last, Activations& acts);
    double forward_head(Activations& acts);
    // Sizes the activation-gradient scratch for `acts` and zeroes residual_gradient(); a
    // stage that does not run the head calls it, then receives into residual_gradient().
    void begin_backward(const Activations& acts);
    // calls begin_backward()
    void backward_head(Activations& acts, float loss_scale,
                       BackwardPart part = BackwardPart::whole);
    // last−1 down to first
    void backward_blocks(int first, int last, Activations& acts,
                         BackwardPart part = BackwardPart::whole);
    void backward_embedding(Activations& acts);
    // The W pass of a split backward: the weight and bias gradients of blocks [first, last)
    // and of the head (lnf, the tied wte), from what backward_*(…, input_gradients) kept.
    void backward_weights_blocks(int first, int last, Activations& acts);
    void backward_weights_head(Activations& acts);
    // The collectives of sharded parameters and gradients a pass makes, without the pass: a
    // forward gathers the embedding's tensors (`embedding`), blocks first … last−1, the
    // head's (`head`); a backward or W pass (`backward`) the head's, then for blocks last−1 …
    // first each block's and the reduce-scatter of its (zero) gradients (backward_embedding
    // reads no weights). A DP replica with no micro-batch in a step makes them for the others'
    // passes, which wait for its part. Nothing without sharded parameters or gradients.
    void gather_as_pass(bool backward, int first, int last, bool embedding, bool head);
    // ∂L/∂(residual stream) at the current point of the backward pass, [n_tokens, C] (a TP
    // rank's rows under sequence parallelism). backward_blocks(first, last) turns ∂L/∂(output
    // of block last−1) into ∂L/∂(input of block first); backward_embedding consumes it.
    Tensor residual_gradient() const { return scratch_.dresidual; }

private:
    // Gradients of activations, reused by every block (gradient kernels accumulate, so
    // each is zeroed before use). Sized for the largest micro-batch seen.
    // Under CP, dqkv's memory holds dQ [T, C_l] and this rank's dK|dV [T, 2C_l] (as qkv in
    // BlockActivations), and dkv is ∂L/∂(gathered K|V) [T_total, 2C_l] in document order.
    // Under sequence parallelism dresidual and dlogits hold the TP rank's rows, dln the whole
    // [T, C] partial sums and dln_shard their reduce-scattered rows.
    // Under Ulysses dqkv is serial [T, 3C_l], and dheads_out [T_total, w], dheads_qkv
    // [T_total, 3w] are the head shard's (BlockActivations); with chunked attention (FPDT)
    // dheads_qkv holds dQ [T_total, w] and the dK|dV of one chunk [min(chunk, T_total), 2w],
    // and with offload only dQ|dK|dV of one chunk (∂L/∂o and dQ wait in host memory; no
    // dheads_out). heads_rows: the head shard's rows begin_backward() sized for.
    struct BackwardScratch {
        Tensor dresidual, dln, dln_shard, datty, dqkv, dfch, dfch_gelu, dlogits;
        Tensor dkv;
        Tensor dheads_out, dheads_qkv;
        std::int64_t heads_rows = 0;
    };

    // Sharded parameters: a range's weights whole while a pass reads them, from acquire to the
    // end of the object's life (release). Empty without sharding, or for an empty range.
    class WeightsInUse {
    public:
        WeightsInUse(GptModel& model, ElementRange first, ElementRange second = {});
        ~WeightsInUse();
        WeightsInUse(const WeightsInUse&) = delete;
        WeightsInUse& operator=(const WeightsInUse&) = delete;

    private:
        GptModel& model_;
        ElementRange ranges_[2];
    };
    WeightsInUse block_weights(int layer) {
        return WeightsInUse(*this, layout_.block_range(layer, layer + 1));
    }
    // wte, wpe and lnf: the embedding's and the head's.
    WeightsInUse outer_weights() {
        return WeightsInUse(*this, layout_.before_blocks(), layout_.after_blocks());
    }
    // Sharded gradients: block l's gradients written into a zeroed buffer while its backward
    // runs, reduce-scattered into the shards at the end of the object's life. Nothing without
    // sharding.
    class GradientsInUse {
    public:
        GradientsInUse(GptModel& model, int layer);
        ~GradientsInUse();
        GradientsInUse(const GradientsInUse&) = delete;
        GradientsInUse& operator=(const GradientsInUse&) = delete;

    private:
        GptModel& model_;
        int layer_;
    };

    void check_activations(const Activations& acts) const;
    // Block l's activations: the Activations' own, and where recomputation dropped some, views
    // of the recompute workspace (sized for `acts` here).
    BlockActivations block_activations(const Activations& acts, int layer);
    // One block's forward pass into `a`. `for_backward`: a recomputation, which stops after
    // the last tensor the backward pass reads (fch_gelu): the block's output is kept anyway.
    void forward_block(int layer, Activations& acts, const BlockActivations& a, bool for_backward);
    // Before block l's B or W pass: what recomputation dropped, computed again.
    void recompute_block(int layer, Activations& acts, const BlockActivations& a);
    void backward_block(int layer, Activations& acts, const BlockActivations& a, BackwardPart part);
    void backward_weights_block(int layer, Activations& acts, const BlockActivations& a);
    // Sequence parallelism: the [T, C] buffer that all-gathered rows and row-parallel products
    // go through, one for all blocks.
    Tensor sequence_buffer(const Activations& acts);
    // `rows` (a TP rank's rows under sequence parallelism) made whole: all-gathered over TP into
    // `into`, or the sequence buffer; `rows` itself without sequence parallelism.
    Tensor gather_rows(Tensor rows, const Activations& acts, Tensor into = {});
    // The [T, C] output of a row-parallel GEMM (g): all-reduced over TP in place when it is
    // `out` itself; under sequence parallelism `partial` is the sequence buffer and its sum is
    // reduce-scattered into this rank's rows `out`.
    void sum_row_parallel(Tensor partial, Tensor out);
    // The partial ∂L/∂input [T, C] of a column-parallel GEMM (f backward): all-reduced in
    // place, or reduce-scattered into `rows`. Returns the summed gradient of this rank's rows.
    Tensor sum_input_gradient(Tensor partial, Tensor rows);
    // Where the backward pass writes ∂L/∂(row-parallel output) for `part`: the residual
    // gradient made whole (gather_rows), kept in `keep` for W when the pass is a B.
    Tensor row_parallel_output_gradient(const Activations& acts, Tensor keep);
    // Rank-major K|V rows of every CP rank [T_total, 2C_l], for the collectives.
    Tensor exchange_staging(std::int64_t rows);
    // Ulysses: the staging of an exchange (the micro-batch's, or one chunk's window) of
    // `blocks` column blocks (context_parallel.h).
    Tensor heads_staging(const ContextExchange& exchange, int blocks);
    // The same `offset` floats into the staging, which must already be large enough: it is
    // never grown while an exchange is in flight (FPDT's chunks).
    Tensor staging_region(std::int64_t offset, const ContextExchange& exchange, int blocks);
    // Ulysses: the attention core on a block's head shard `heads` [T_total, 3w], whole, and
    // its output back to this rank's rows.
    void ulysses_attention_forward(Activations& acts, const BlockActivations& a, Tensor heads);
    // Ulysses with chunked attention, FPDT's own forward (Yao et al. 2024, §3.2): each chunk of
    // the head shard made only when its pairs come — the local rows of `ln1` that land in it
    // projected and traded for its head shard — then the output back to this rank's rows.
    void fpdt_attention_forward(int layer, Activations& acts, const BlockActivations& a,
                                Tensor ln1);
    // Ulysses: the attention's output, a.heads_out, back to this rank's rows a.atty.
    void heads_output_to_rows(Activations& acts, const BlockActivations& a);
    // Ulysses with chunked attention, FPDT's own backward (§3.3) from ∂L/∂o on the head shard
    // (scratch_.dheads_out): dQ accumulated whole, dK|dV a chunk at a time, and each chunk's
    // dQ|dK|dV traded back to `dlocal` (this rank's dQ, dK, dV rows) once final. With offload
    // FPDT's offloading backward: ∂L/∂o traded a chunk at a time from this rank's rows
    // (scratch_.datty) to pinned host memory, dQ's partial sums there too.
    void fpdt_attention_backward(int layer, Activations& acts, const BlockActivations& a,
                                 std::span<const Tensor> dlocal);
    // FPDT: the head shard's rows of one chunk, min(chunk, T_total).
    std::int64_t fpdt_chunk_rows(const Activations& acts) const;
    // FPDT with offload: this rank's Q|K|V rows of one chunk, [min(chunk, T), 3C_l], one buffer
    // for all blocks (without offload they go to the block's own Q|K|V rows).
    Tensor fpdt_chunk_scratch(const Activations& acts);
    std::int64_t query_rows(const Activations& acts) const;  // rows of Q attention sees
    // Whether qkv and dqkv hold Q [T, C_l] then K|V [T, 2C_l] (chunked attention, all-gather
    // CP) rather than the serial [T, 3C_l] rows.
    bool split_qkv_layout(const Activations& acts) const;
    int n_head_shard() const;  // Ulysses: the heads of this rank's shard, n_head/(tp·P)
    std::int64_t head_shard_width() const;  // Ulysses: its columns w = C/(tp·P)
    // CP with offload: this rank's K|V [T, 2C_l] and the gathered K|V [T_total, 2C_l] of the
    // block being computed, one buffer for all blocks (each block's go to the host).
    std::pair<Tensor, Tensor> offload_kv_scratch(const Activations& acts);
    std::int64_t kv_rows(const Activations& acts) const;  // rows of K/V attention sees
    int n_head_local() const;

    Backend& backend_;
    ModelShape config_;
    ModelParallel parallel_;
    ParameterLayout layout_;
    DeviceBuffer param_storage_;
    DeviceBuffer grad_storage_;
    Tensor params_, grads_;
    GptWeights weights_, weight_grads_;
    DeviceBuffer scratch_storage_;
    std::int64_t scratch_capacity_ = 0;
    DeviceBuffer gathered_scratch_storage_;  // dkv
    std::int64_t gathered_scratch_capacity_ = 0;
    DeviceBuffer staging_storage_;
    std::int64_t staging_capacity_ = 0;
    DeviceBuffer offload_kv_storage_;
    std::int64_t offload_kv_capacity_ = 0;
    DeviceBuffer recompute_storage_;  // the recompute workspace: one block's dropped tensors
    std::int64_t recompute_capacity_ = 0;
    DeviceBuffer sequence_storage_;  // sequence_buffer()
    std::int64_t sequence_capacity_ = 0;
    BackwardScratch scratch_;
    std::unique_ptr<ChunkedAttention> attention_;
    std::unique_ptr<CheckpointOffload> checkpoints_;
    Recompute recompute_ = Recompute::none;
    bool sequence_parallel_ = false;
    bool split_backward_ = false;
    std::vector<ElementRange> sequence_parallel_ranges_;
};

}  // namespace fulcrum::engine
