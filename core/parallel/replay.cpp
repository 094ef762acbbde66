#include "core/parallel/replay.h"

#include <algorithm>
#include <stdexcept>

namespace fulcrum::parallel {

std::int64_t ReplayResult::bubble_ns(int stage) const {
    std::int64_t busy = 0;
    for (const ReplayedOp& op : stages[static_cast<std::size_t>(stage)]) {
        busy += op.end_ns - op.start_ns;
    }
    return makespan_ns - busy;
}

ReplayResult replay_pipeline(const ReplayInput& input) {
    const int p = input.stages;
    const int m = input.microbatches;
    constexpr std::int64_t kNotDone = -1;
    // end times: [stage][microbatch]
    std::vector<std::vector<std::int64_t>> forward_end(p, std::vector<std::int64_t>(m, kNotDone));
    std::vector<std::vector<std::int64_t>> backward_end(p, std::vector<std::int64_t>(m, kNotDone));
    std::vector<std::vector<PipelineOp>> ops(p);
    std::vector<std::size_t> next(p, 0);
    std::vector<std::int64_t> free_at(p, 0);
    for (int s = 0; s < p; ++s) {
        ops[s] = stage_ops(input.schedule, s, p, m);
        if (!input.stage_ready_ns.empty()) {
            free_at[s] = input.stage_ready_ns[static_cast<std::size_t>(s)];
        }
    }
    ReplayResult result;
    result.stages.resize(p);
    result.stage_end_ns.assign(p, 0);

    // Each sweep runs, on every stage, every op whose input is ready; a valid schedule makes
    // progress in every sweep (it is deadlock-free), so at most 2·m·p sweeps are needed.
    std::size_t remaining = 0;
    for (const auto& list : ops) {
        remaining += list.size();
    }
    while (remaining > 0) {
        bool progressed = false;
        for (int s = 0; s < p; ++s) {
            while (next[s] < ops[s].size()) {
                const PipelineOp op = ops[s][next[s]];
                const int j = op.microbatch;
                std::int64_t input_ready = 0;
                if (op.forward) {
                    if (s > 0) {
                        if (forward_end[s - 1][j] == kNotDone) {
                            break;
                        }
                        input_ready = forward_end[s - 1][j] + input.p2p_latency_ns;
                    }
                } else if (s < p - 1) {
                    if (backward_end[s + 1][j] == kNotDone) {
                        break;
                    }
                    input_ready = backward_end[s + 1][j] + input.p2p_latency_ns;
                } else if (forward_end[s][j] == kNotDone) {
                    break;
                } else {
                    input_ready = forward_end[s][j];
                }
                const std::int64_t start = std::max(free_at[s], input_ready);
                const std::int64_t duration =
                    op.forward ? input.forward_ns[s][j] : input.backward_ns[s][j];
                const std::int64_t end = start + duration;
                result.stages[s].push_back({j, op.forward, start, end, start - free_at[s]});
                (op.forward ? forward_end : backward_end)[s][j] = end;
                free_at[s] = end;
                ++next[s];
                --remaining;
                progressed = true;
            }
        }
        if (!progressed) {
            // Only reachable with a schedule that deadlocks, which stage_ops never produces.
            throw std::logic_error("replay_pipeline: the schedule cannot make progress");
        }
    }
    for (int s = 0; s < p; ++s) {
        result.stage_end_ns[s] = free_at[s];
        result.makespan_ns = std::max(result.makespan_ns, free_at[s]);
    }
    return result;
}

}  // namespace fulcrum::parallel
