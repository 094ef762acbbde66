#include "core/parallel/schedule.h"

#include <algorithm>

namespace fulcrum::parallel {

Result<PipelineSchedule> parse_schedule(std::string_view name) {
    if (name == "gpipe") {
        return PipelineSchedule::gpipe;
    }
    if (name == "1f1b") {
        return PipelineSchedule::one_f_one_b;
    }
    return Error{ErrorCode::invalid_input,
                 "unknown pipeline schedule '" + std::string(name) + "' (choose gpipe or 1f1b)"};
}

const char* schedule_name(PipelineSchedule schedule) {
    return schedule == PipelineSchedule::gpipe ? "gpipe" : "1f1b";
}

std::vector<PipelineOp> stage_ops(PipelineSchedule schedule, int stage, int stages,
                                  int microbatches) {
    std::vector<PipelineOp> ops;
    if (schedule == PipelineSchedule::gpipe) {
        for (int j = 0; j < microbatches; ++j) {
            ops.push_back({j, true});
        }
        for (int j = 0; j < microbatches; ++j) {
            ops.push_back({j, false});
        }
        return ops;
    }
    const int warmup = std::min(stages - stage - 1, microbatches);
    int next_forward = 0;
    for (; next_forward < warmup; ++next_forward) {
        ops.push_back({next_forward, true});
    }
    for (int next_backward = 0; next_backward < microbatches; ++next_backward) {
        if (next_forward < microbatches) {
            ops.push_back({next_forward++, true});
        }
        ops.push_back({next_backward, false});
    }
    return ops;
}

LayerRange stage_layers(int stage, int stages, int layers) {
    const int base = layers / stages;
    const int extra = layers % stages;
    const int first = stage * base + std::min(stage, extra);
    return {first, first + base + (stage < extra ? 1 : 0)};
}

}  // namespace fulcrum::parallel
