// What one transformer layer's passes cost and move under the training knobs the engine has:
// the pipeline schedule's split backward (ZB-H1's B and W), activation recomputation, sequence
// parallelism and the element size of activations and gradients. docs/simulate.md, "Knobs",
// gives every rule; the engine's ranges are the reference (engine/model/gpt.cpp,
// engine/model/tensor_parallel.cpp, engine/distributed/parallel_trainer.cpp).
//
// TP collectives of one layer, each moving the layer's whole [T, h] activation (T = the rank's
// tokens), as the engine records them (bytes = the gathered or reduced tensor):
//
//                        forward      backward (whole)   B (split)     W (split)
//   tensor parallel      2 all-reduce 2 all-reduce       2 all-reduce  none
//   + sequence parallel  2 AG + 2 RS  4 AG + 2 RS        2 AG + 2 RS   2 AG
//
// (Korthikanti et al. 2022, §4.2.2: g is an all-gather forward and a reduce-scatter backward, ḡ
// the reverse; the weight gradient gathers the LayerNorm output again.) Full recomputation
// re-runs the layer's forward in the backward pass (Megatron-LM's activation checkpointing),
// with its collectives; selective recomputation re-runs only the attention core (Korthikanti et
// al. 2022, §5), which has no collective.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/parallel/memory_model.h"
#include "core/parallel/schedule.h"
#include "core/util/result.h"

namespace fulcrum::sim {

// The element type of activations, activation gradients and weight gradients.
enum class DType { fp32, bf16, fp16 };
Result<DType> parse_dtype(std::string_view name);  // "fp32", "bf16", "fp16"
const char* dtype_name(DType dtype);
inline constexpr std::string_view kDTypeNames = "bf16, fp16, fp32";
// Bytes of one element: 2 for bf16 and fp16, 4 for fp32.
std::int64_t element_bytes(DType dtype);

// The passes of a simulated pipeline, Phase's forward, backward (the whole one, or B when the
// schedule splits off W) and weight_grad (W): tables of passes are indexed by them.
inline constexpr int kPassPhases = 3;

// TP collectives one layer runs in one pass (the table above); recompute's are counted apart.
struct TpCollectives {
    int all_reduce = 0;
    int all_gather = 0;
    int reduce_scatter = 0;
    friend bool operator==(const TpCollectives&, const TpCollectives&) = default;
};
TpCollectives tp_collectives_per_layer(Phase phase, bool split_backward, bool sequence_parallel);
// The collectives full recomputation adds to each pass that recomputes (those of a forward);
// none for selective or no recomputation.
TpCollectives tp_recompute_collectives_per_layer(parallel::Recompute recompute,
                                                 bool sequence_parallel);

// Passes that recompute: the backward, and under a split backward also W (fulcrum-train
// recomputes a layer before each of its B and W, engine/model/gpt.cpp).
bool recomputes(Phase phase, parallel::Recompute recompute);

}  // namespace fulcrum::sim
