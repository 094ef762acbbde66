#include "core/parallel/replay.h"

#include <algorithm>

namespace fulcrum::parallel {

std::int64_t ReplayResult::bubble_ns(int stage) const {
    std::int64_t busy = 0;
    for (const ReplayedOp& op : stages[static_cast<std::size_t>(stage)]) {
        busy += op.end_ns - op.start_ns;
    }
    return makespan_ns - busy;
}

namespace {

bool shaped(const std::vector<std::vector<std::int64_t>>& durations, int p, int m) {
    return static_cast<int>(durations.size()) == p &&
           std::all_of(durations.begin(), durations.end(),
                       [&](const std::vector<std::int64_t>& row) {
                           return static_cast<int>(row.size()) == m;
                       });
}

}  // namespace

Result<ReplayResult> replay_pipeline(const ReplayInput& input) {
    const PipelineShape shape{input.stages, input.microbatches, input.virtual_stages};
    if (auto status = check_pipeline(input.schedule, shape); !status) {
        const bool engine_order = input.as_engine_runs &&
                                  input.schedule == PipelineSchedule::interleaved &&
                                  input.virtual_stages >= 2 && input.microbatches >= 1;
        if (!engine_order) {
            return status.error();
        }
    }
    const int p = input.stages, m = input.microbatches, v = input.virtual_stages;
    const bool split = splits_backward(input.schedule);
    if (!shaped(input.forward_ns, p, m) || !shaped(input.backward_ns, p, m) ||
        (split && !shaped(input.weight_ns, p, m))) {
        return Error{ErrorCode::invalid_input,
                     "pipeline replay: durations for " + std::to_string(p) + " stages × " +
                         std::to_string(m) + " micro-batches expected" +
                         (split ? " (forward, input- and weight-gradient)" : "")};
    }
    const int chunks = v * p;
    constexpr std::int64_t kNotDone = -1;
    // end times by [kind][model chunk][microbatch]
    std::vector<std::vector<std::vector<std::int64_t>>> done(
        3, std::vector<std::vector<std::int64_t>>(chunks, std::vector<std::int64_t>(m, kNotDone)));
    auto end_of = [&](PassKind kind, int chunk, int j) -> std::int64_t& {
        return done[static_cast<std::size_t>(kind)][chunk][j];
    };
    std::vector<std::vector<PipelineOp>> ops(p);
    std::vector<std::size_t> next(p, 0);
    std::vector<std::int64_t> free_at(p, 0);
    std::size_t remaining = 0;
    for (int s = 0; s < p; ++s) {
        ops[s] = step_ops(input.schedule, s, shape);
        remaining += ops[s].size();
        if (!input.stage_ready_ns.empty()) {
            free_at[s] = input.stage_ready_ns[static_cast<std::size_t>(s)];
        }
    }
    ReplayResult result;
    result.stages.resize(p);
    result.stage_end_ns.assign(p, 0);

    // Each sweep runs, on every stage, every op whose input is ready; a valid schedule makes
    // progress in every sweep (it is deadlock-free).
    while (remaining > 0) {
        bool progressed = false;
        for (int s = 0; s < p; ++s) {
            while (next[s] < ops[s].size()) {
                const PipelineOp op = ops[s][next[s]];
                const int j = op.microbatch;
                const int c = op.chunk * p + s;
                std::int64_t input_ready = 0;
                if (op.kind == PassKind::forward) {
                    if (c > 0) {
                        if (end_of(PassKind::forward, c - 1, j) == kNotDone)
                            break;
                        input_ready = end_of(PassKind::forward, c - 1, j) + input.p2p_latency_ns;
                    }
                } else if (op.kind == PassKind::backward) {
                    if (c < chunks - 1) {
                        if (end_of(PassKind::backward, c + 1, j) == kNotDone)
                            break;
                        input_ready = end_of(PassKind::backward, c + 1, j) + input.p2p_latency_ns;
                    } else {
                        if (end_of(PassKind::forward, c, j) == kNotDone)
                            break;
                        input_ready = end_of(PassKind::forward, c, j);
                    }
                } else {
                    if (end_of(PassKind::backward, c, j) == kNotDone)
                        break;
                    input_ready = end_of(PassKind::backward, c, j);
                }
                const auto& table = op.kind == PassKind::forward    ? input.forward_ns
                                    : op.kind == PassKind::backward ? input.backward_ns
                                                                    : input.weight_ns;
                const std::int64_t duration = table[s][j] / v;
                const std::int64_t start = std::max(free_at[s], input_ready);
                const std::int64_t end = start + duration;
                result.stages[s].push_back({j, op.kind, op.chunk, start, end, start - free_at[s]});
                end_of(op.kind, c, j) = end;
                free_at[s] = end;
                ++next[s];
                --remaining;
                progressed = true;
            }
        }
        if (!progressed) {
            return Error{ErrorCode::invalid_input,
                         std::string("pipeline replay: the ") + schedule_name(input.schedule) +
                             " schedule cannot make progress (a bug in its order)"};
        }
    }
    for (int s = 0; s < p; ++s) {
        result.stage_end_ns[s] = free_at[s];
        result.makespan_ns = std::max(result.makespan_ns, free_at[s]);
    }
    return result;
}

}  // namespace fulcrum::parallel
