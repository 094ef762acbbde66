// A model and the 4D layout that runs it, and the one check of the two together that
// fulcrum-train, the simulator and the planner all make (check_layout), so that a layout one
// of them accepts the others accept too, with the same words.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/parallel/grid.h"
#include "core/parallel/placement.h"
#include "core/parallel/recompute.h"
#include "core/parallel/schedule.h"
#include "core/util/result.h"

namespace fulcrum::parallel {

// The family of a model's transformer layer: what a layer holds besides its GEMMs.
enum class Architecture : std::uint8_t {
    // GPT-2 and GPT-3 (Radford et al. 2019; Brown et al. 2020), Megatron-LM's GPT and
    // fulcrum-train's: LayerNorm, a bias on every linear layer, a learned position embedding,
    // a GeLU MLP of two matrices, the output layer tied to the token embedding.
    gpt,
    // Llama (Touvron et al. 2023; Llama 3, Dubey et al. 2024, Table 3): RMSNorm, no biases,
    // rotary positions (no position embedding), a SwiGLU MLP of three matrices (gate, up,
    // down), an output layer of its own.
    llama,
};
Result<Architecture> parse_architecture(std::string_view name);  // "gpt", "llama"
const char* architecture_name(Architecture architecture);

// The model's shape, with fulcrum-train's defaults.
struct ModelShape {
    int layers = 2;
    int hidden = 64;
    int heads = 4;
    int context = 256;  // tokens of one fixed-length micro-batch; no document is longer
    int vocab = 256;    // fulcrum-train models bytes
    Architecture architecture = Architecture::gpt;
    int kv_heads = 0;    // grouped-query attention's key and value heads; 0: `heads`
    int ffn_hidden = 0;  // the MLP's inner width; 0: 4 · hidden
};

// What the shape's zeros stand for.
int kv_heads_of(const ModelShape& model);
int ffn_hidden_of(const ModelShape& model);
// h_kv: the width of the key (or value) heads, hidden · kv_heads / heads (hidden without
// grouped-query attention).
int kv_hidden_of(const ModelShape& model);
bool tied_embedding(const ModelShape& model);  // GPT's: the token embedding is the LM head

// The weights of one layer's GEMMs, the whole layer's (not a TP rank's): QKV h·(h + 2·h_kv)
// with h_kv = h · kv_heads / heads, the attention's output projection h², the MLP 2·h·f (GPT)
// or 3·h·f (Llama). 12h² for GPT. A token's forward through the layer's GEMMs is twice this
// in FLOPs.
double layer_gemm_weights(const ModelShape& model);
// Every parameter of one layer: the GEMMs' weights, GPT's biases (QKV's h + 2·h_kv, the two
// projections' h each, the MLP's first f) and its two LayerNorms' 4h, or Llama's two
// RMSNorms' 2h. 12h² + 13h for GPT.
double layer_parameters(const ModelShape& model);
// Parameters outside the layers: the token embedding V·h, GPT's position embedding
// context·h, the final norm (2h LayerNorm, h RMSNorm), and an untied output layer V·h.
double embedding_parameters(const ModelShape& model);  // the first stage's: token (+ position)
double head_parameters(const ModelShape& model);       // the last stage's: final norm (+ output)
// Every parameter of the model.
double model_parameters(const ModelShape& model);
// Model FLOPs of training on `tokens` tokens whose attention meets `pairs` causal query·key
// pairs: forward and backward, 3× the forward's 2 FLOPs a GEMM weight and the LM head's 2hV a
// token, and 3 × 4h a pair a layer (Narayanan et al., SC'21, §5.1, without recomputation).
// MFU's numerator, for the planner and the benches alike.
double training_flops(const ModelShape& model, double tokens, double pairs);
// "32 layers, hidden 4096, 32 heads, context 2048, vocab 51200", with the architecture, the
// key-value heads and the MLP's width where they are not GPT's defaults.
std::string describe_model(const ModelShape& model);

// How context parallelism splits a layer's attention over the CP ranks.
enum class ContextParallelism : std::uint8_t {
    // Each rank keeps its tokens' queries and gathers every rank's keys and values
    // (fulcrum-train's all-gather; Megatron-LM's ring passes the same keys round).
    all_gather,
    // DeepSpeed-Ulysses (Jacobs et al. 2023, §3): an all-to-all turns each rank's token shard
    // of Q, K and V into the whole sequence for heads/cp of the heads, attention runs on
    // those heads, and a second all-to-all turns the output back into token shards. CP can
    // be at most the heads (whole heads a rank, after TP's split).
    ulysses,
};
Result<ContextParallelism> parse_context_parallelism(std::string_view name);  // "all-gather", ...
const char* context_parallelism_name(ContextParallelism cp);  // "all-gather", "ulysses"

// A layout: the grid, the pipeline's schedule over its micro-batches and model chunks, the
// layers of each chunk, and the memory knobs that change what a rank holds.
struct Layout {
    GridShape grid{};
    int microbatches = 4;  // per DP replica and step
    PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
    int virtual_stages = 1;
    std::vector<int> stage_layers{};  // one count per model chunk; empty: L/p each
    Recompute recompute = Recompute::none;
    bool sequence_parallel = false;
    // How the framework numbers the ranks, which places the groups on nodes (placement.h):
    // Megatron-LM's by default; fulcrum-train's runs say theirs.
    RankOrder rank_order = kMegatronOrder;
    ContextParallelism context_parallelism = ContextParallelism::all_gather;
    // ZeRO (Rajbhandari et al. 2020, §5) over the DP × CP ranks, which hold the same
    // parameters: stage 1 shards the optimizer state (Megatron-LM's distributed optimizer),
    // 2 also the gradients (reduce-scattered instead of all-reduced), 3 also the parameters
    // (all-gathered layer by layer before its forward and again before its backward).
    int zero_stage = 0;
    // With full recomputation: each layer's checkpointed input copied to pinned host memory
    // after its forward and back before its backward (FPDT, Yao et al. 2024, §4), so a rank
    // keeps no more than the two layers' checkpoints its copies pass through.
    bool offload_checkpoints = false;
};

// Whether `layout` can run `model`, naming the options as the command lines spell them: every
// degree at least 1, every stage and model chunk a layer, whole heads for each TP rank, a
// schedule that suits the stages, micro-batches and chunks (check_pipeline), stage layers that
// add up (check_stage_layers), and TP for sequence parallelism; for grouped-query attention,
// KV heads that divide the heads and that TP divides.
Status check_layout(const Layout& layout, const ModelShape& model);

}  // namespace fulcrum::parallel
