// Pipeline schedules: the order in which one stage runs the forward (F) and backward (B)
// passes of its micro-batches. p stages, m micro-batches (REFERENCE §2).
//
// GPipe: every F, then every B. Stage 0 holds all m micro-batches' activations at once;
//   bubble fraction (p−1)/m.
// 1F1B: warm-up of min(p−s−1, m) forwards on stage s, then steady state alternating one F
//   and one B, then cool-down of the remaining Bs. The same (p−1)/m bubble as GPipe, but at
//   most p micro-batches in flight on stage 0.
// Backward passes run in micro-batch order in both, so a stage receives gradients in the
// order its successor sends them.
#pragma once

#include <string_view>
#include <vector>

#include "core/util/result.h"

namespace fulcrum::parallel {

enum class PipelineSchedule { gpipe, one_f_one_b };

Result<PipelineSchedule> parse_schedule(std::string_view name);  // "gpipe" or "1f1b"
const char* schedule_name(PipelineSchedule schedule);

struct PipelineOp {
    int microbatch = 0;
    bool forward = true;
    friend bool operator==(const PipelineOp&, const PipelineOp&) = default;
};

std::vector<PipelineOp> stage_ops(PipelineSchedule schedule, int stage, int stages,
                                  int microbatches);

// Layers [first, last) of a stage: L/p each, the first L mod p stages one more.
struct LayerRange {
    int first = 0;
    int last = 0;
};
LayerRange stage_layers(int stage, int stages, int layers);

}  // namespace fulcrum::parallel
