#include "core/parallel/replay.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

namespace fulcrum::parallel {

std::int64_t ReplayResult::bubble_ns(int stage) const {
    std::int64_t busy = 0;
    for (const ReplayedOp& op : stages[static_cast<std::size_t>(stage)]) {
        busy += op.end_ns - op.start_ns;
    }
    return makespan_ns - busy;
}

std::optional<double> ReplayResult::bubble_fraction() const {
    std::int64_t busy = 0, bubble = 0;
    for (std::size_t s = 0; s < stages.size(); ++s) {
        const std::int64_t idle = bubble_ns(static_cast<int>(s));
        busy += makespan_ns - idle;
        bubble += idle;
    }
    return parallel::bubble_fraction(static_cast<double>(bubble), static_cast<double>(busy));
}

namespace {

using Table = std::vector<std::vector<std::int64_t>>;
using WorkTable = std::vector<std::vector<std::vector<std::int64_t>>>;

bool shaped(const Table& durations, int p, int m) {
    return static_cast<int>(durations.size()) == p &&
           std::all_of(durations.begin(), durations.end(),
                       [&](const std::vector<std::int64_t>& row) {
                           return static_cast<int>(row.size()) == m;
                       });
}

bool work_shaped(const WorkTable& work, int p, int m) {
    return work.empty() || (static_cast<int>(work.size()) == p &&
                            std::all_of(work.begin(), work.end(), [&](const auto& row) {
                                return static_cast<int>(row.size()) == m;
                            }));
}

// One pipeline's replay in progress: each stage's passes in schedule order (stage_ops), the
// next one to run, and when every pass that ran ended. Both replays drive it: which pass a
// stage runs next and what it waits for is said here once.
class PipelineState {
public:
    static Result<PipelineState> start(const ReplayInput& input) {
        const PipelineShape shape{input.stages, input.microbatches, input.virtual_stages};
        if (auto status = check_pipeline(input.schedule, shape); !status) {
            const bool engine_order = input.as_engine_runs &&
                                      input.schedule == PipelineSchedule::interleaved &&
                                      input.virtual_stages >= 2 && input.microbatches >= 1;
            if (!engine_order) {
                return status.error();
            }
        }
        const int p = input.stages, m = input.microbatches;
        const bool split = splits_backward(input.schedule);
        if (!shaped(input.forward_ns, p, m) || !shaped(input.backward_ns, p, m) ||
            (split && !shaped(input.weight_ns, p, m)) || !work_shaped(input.forward_work, p, m) ||
            !work_shaped(input.backward_work, p, m) || !work_shaped(input.weight_work, p, m)) {
            return Error{ErrorCode::invalid_input,
                         "pipeline replay: durations for " + std::to_string(p) + " stages × " +
                             std::to_string(m) + " micro-batches expected" +
                             (split ? " (forward, input- and weight-gradient)" : "")};
        }
        return PipelineState(input, shape);
    }

    int stages() const { return input_->stages; }
    std::size_t remaining() const { return remaining_; }
    bool stage_done(int s) const { return next_[s] >= ops_[s].size(); }
    std::int64_t free_at(int s) const { return free_at_[s]; }

    // When stage s's next pass has its input: a forward the forward through the chunk
    // before, a backward the backward through the chunk after (on the last chunk its own
    // forward), a W its own B; plus the send's latency between stages. nullopt while that
    // pass has not run.
    std::optional<std::int64_t> input_ready(int s) const {
        const PipelineOp& op = ops_[s][next_[s]];
        const int p = input_->stages, j = op.microbatch, c = op.chunk * p + s;
        const auto ended = [&](Phase kind, int chunk,
                               std::int64_t latency) -> std::optional<std::int64_t> {
            const std::int64_t end = end_of(kind, chunk, j);
            return end == kNotDone ? std::nullopt : std::optional(end + latency);
        };
        switch (op.kind) {
            case Phase::none:  // not a pass
                break;
            case Phase::forward:
                return c > 0 ? ended(Phase::forward, c - 1, input_->p2p_latency_ns)
                             : std::optional<std::int64_t>(0);
            case Phase::backward:
                return c < chunks_ - 1 ? ended(Phase::backward, c + 1, input_->p2p_latency_ns)
                                       : ended(Phase::forward, c, 0);
            case Phase::weight_grad:
                return ended(Phase::backward, c, 0);
        }
        return std::nullopt;
    }

    // The next pass's duration on stage s: its chunk's 1/v of the stage's.
    std::int64_t duration(int s) const {
        const PipelineOp& op = ops_[s][next_[s]];
        return table(op.kind)[s][op.microbatch] / input_->virtual_stages;
    }

    // The parameters stage s's next pass waits for as they arrive: micro-batch 0's forward
    // through a chunk that has them (ReplayInput::parameters); null for any other pass.
    const ParameterArrival* arrival(int s) const {
        const PipelineOp& op = ops_[s][next_[s]];
        if (op.kind != Phase::forward || op.microbatch != 0 || input_->parameters.empty()) {
            return nullptr;
        }
        const auto& chunks = input_->parameters[static_cast<std::size_t>(s)];
        return static_cast<std::size_t>(op.chunk) < chunks.size() ? &chunks[op.chunk] : nullptr;
    }

    // What each member of the next pass computes, its chunk's 1/v; empty without work tables.
    std::vector<double> work(int s) const {
        const PipelineOp& op = ops_[s][next_[s]];
        const WorkTable& all = op.kind == Phase::forward    ? input_->forward_work
                               : op.kind == Phase::backward ? input_->backward_work
                                                            : input_->weight_work;
        std::vector<double> out;
        if (!all.empty()) {
            for (std::int64_t ns : all[s][op.microbatch]) {
                out.push_back(static_cast<double>(ns) / input_->virtual_stages);
            }
        }
        return out;
    }

    void finish(int s, std::int64_t start, std::int64_t end, std::int64_t parameter_wait = 0,
                std::int64_t parameter_bytes = 0) {
        const PipelineOp op = ops_[s][next_[s]];
        result_.stages[s].push_back({op.microbatch, op.kind, op.chunk, start, end,
                                     start - free_at_[s], parameter_wait, parameter_bytes});
        end_of(op.kind, op.chunk * input_->stages + s, op.microbatch) = end;
        free_at_[s] = end;
        ++next_[s];
        --remaining_;
    }

    ReplayResult take_result() {
        for (int s = 0; s < input_->stages; ++s) {
            result_.stage_end_ns[s] = free_at_[s];
            result_.makespan_ns = std::max(result_.makespan_ns, free_at_[s]);
        }
        return std::move(result_);
    }

private:
    static constexpr std::int64_t kNotDone = -1;

    PipelineState(const ReplayInput& input, const PipelineShape& shape)
        : input_(&input), chunks_(input.virtual_stages * input.stages) {
        const int p = input.stages;
        // end times by [kind][model chunk][microbatch]
        done_.assign(3, Table(static_cast<std::size_t>(chunks_),
                              std::vector<std::int64_t>(input.microbatches, kNotDone)));
        ops_.resize(p);
        next_.assign(p, 0);
        free_at_.assign(p, 0);
        for (int s = 0; s < p; ++s) {
            ops_[s] = step_ops(input.schedule, s, shape);
            remaining_ += ops_[s].size();
            if (!input.stage_ready_ns.empty()) {
                free_at_[s] = input.stage_ready_ns[static_cast<std::size_t>(s)];
            }
        }
        result_.stages.resize(p);
        result_.stage_end_ns.assign(p, 0);
    }

    const Table& table(Phase kind) const {
        return kind == Phase::forward    ? input_->forward_ns
               : kind == Phase::backward ? input_->backward_ns
                                         : input_->weight_ns;
    }
    std::int64_t& end_of(Phase kind, int chunk, int j) {
        return done_[static_cast<std::size_t>(kind)][chunk][j];
    }
    std::int64_t end_of(Phase kind, int chunk, int j) const {
        return done_[static_cast<std::size_t>(kind)][chunk][j];
    }

    const ReplayInput* input_;
    int chunks_;
    std::vector<Table> done_;
    std::vector<std::vector<PipelineOp>> ops_;
    std::vector<std::size_t> next_;
    std::vector<std::int64_t> free_at_;
    std::size_t remaining_ = 0;
    ReplayResult result_;
};

Error stuck(PipelineSchedule schedule) {
    return Error{ErrorCode::invalid_input,
                 std::string("pipeline replay: the ") + schedule_name(schedule) +
                     " schedule cannot make progress (a bug in its order)"};
}

// A pass running on shared cores: what each of its members has left to compute, then its
// transfers.
struct RunningPass {
    std::size_t pipeline = 0;
    int stage = 0;
    std::int64_t start_ns = 0;
    std::vector<double> left;  // per member, ns at a whole core
    int copies = 1;            // ranks per member
    double transfer_ns = 0;
    double computed_at = -1;  // when the last member finished; −1: still computing

    bool computing() const { return computed_at < 0; }
    int computing_ranks() const {
        return copies * static_cast<int>(std::count_if(left.begin(), left.end(),
                                                       [](double ns) { return ns > 0; }));
    }
};

}  // namespace

Result<ReplayResult> replay_pipeline(const ReplayInput& input) {
    auto state = PipelineState::start(input);
    if (!state) {
        return state.error();
    }
    // Each sweep runs, on every stage, every op whose input is ready; a valid schedule makes
    // progress in every sweep (it is deadlock-free).
    while (state->remaining() > 0) {
        bool progressed = false;
        for (int s = 0; s < state->stages(); ++s) {
            while (!state->stage_done(s)) {
                const auto ready = state->input_ready(s);
                if (!ready) {
                    break;
                }
                const std::int64_t start = std::max(state->free_at(s), *ready);
                const std::int64_t duration = state->duration(s);
                if (const ParameterArrival* arrival = state->arrival(s)) {
                    const std::int64_t end = arrival->pass_end(start, duration);
                    const std::int64_t wait = end - start - duration;
                    // What the arrivals moved while the pass waited, at their pace.
                    const std::int64_t moving =
                        std::max<std::int64_t>(std::max(arrival->layers, 1) * arrival->layer_ns, 1);
                    const std::int64_t bytes = static_cast<std::int64_t>(std::llround(
                        double(arrival->bytes) * std::min(1.0, double(wait) / double(moving))));
                    state->finish(s, start, end, wait, bytes);
                } else {
                    state->finish(s, start, start + duration);
                }
                progressed = true;
            }
        }
        if (!progressed) {
            return stuck(input.schedule);
        }
    }
    return state->take_result();
}

Result<std::vector<ReplayResult>> replay_on_shared_cores(const std::vector<ReplayInput>& inputs,
                                                         double cores) {
    std::vector<PipelineState> states;
    std::vector<std::vector<bool>> busy;  // [pipeline][stage]
    std::size_t remaining = 0;
    for (const ReplayInput& input : inputs) {
        auto state = PipelineState::start(input);
        if (!state) {
            return state.error();
        }
        remaining += state->remaining();
        busy.emplace_back(static_cast<std::size_t>(input.stages), false);
        states.push_back(std::move(*state));
    }
    constexpr double kNever = std::numeric_limits<double>::infinity();
    constexpr double kDone = 1e-6;  // ns of work left that count as none
    std::vector<RunningPass> running;
    double now = 0;
    while (remaining > 0) {
        // Start every pass whose stage is free and whose input is ready by now.
        double next_start = kNever;
        for (std::size_t k = 0; k < states.size(); ++k) {
            PipelineState& state = states[k];
            for (int s = 0; s < state.stages(); ++s) {
                if (busy[k][s] || state.stage_done(s)) {
                    continue;
                }
                const auto ready = state.input_ready(s);
                if (!ready) {
                    continue;
                }
                const auto begin = static_cast<double>(std::max(state.free_at(s), *ready));
                if (begin > now + 0.5) {
                    next_start = std::min(next_start, begin);
                    continue;
                }
                RunningPass pass{k, s, std::llround(now), state.work(s), 1, 0, -1};
                const auto duration = static_cast<double>(state.duration(s));
                if (pass.left.empty()) {
                    pass.left.push_back(duration);
                } else {
                    pass.copies = std::max(inputs[k].work_copies, 1);
                }
                const double slowest = *std::max_element(pass.left.begin(), pass.left.end());
                pass.transfer_ns = std::max(duration - slowest, 0.0);
                if (pass.computing_ranks() == 0) {
                    pass.computed_at = now;  // nothing to compute: straight to its transfers
                }
                busy[k][s] = true;
                running.push_back(std::move(pass));
            }
        }
        int computing = 0;
        for (const RunningPass& pass : running) {
            computing += pass.computing() ? pass.computing_ranks() : 0;
        }
        const double rate = computing > cores ? cores / computing : 1.0;
        double next = next_start;
        for (const RunningPass& pass : running) {
            if (!pass.computing()) {
                next = std::min(next, pass.computed_at + pass.transfer_ns);
                continue;
            }
            for (double left : pass.left) {
                if (left > 0) {
                    next = std::min(next, now + left / rate);
                }
            }
        }
        if (next == kNever) {
            return stuck(inputs[0].schedule);
        }
        next = std::max(next, now);
        // Compute until then; a pass whose members are all done goes on to its transfers,
        // and one whose transfers are done ends.
        for (RunningPass& pass : running) {
            if (pass.computing()) {
                for (double& left : pass.left) {
                    left = left - rate * (next - now) <= kDone ? 0 : left - rate * (next - now);
                }
                if (pass.computing_ranks() == 0) {
                    pass.computed_at = next;
                }
            }
        }
        now = next;
        std::erase_if(running, [&](const RunningPass& pass) {
            if (pass.computing() || pass.computed_at + pass.transfer_ns > now + 0.5) {
                return false;
            }
            const std::int64_t end = std::max<std::int64_t>(
                pass.start_ns, std::llround(pass.computed_at + pass.transfer_ns));
            states[pass.pipeline].finish(pass.stage, pass.start_ns, end);
            busy[pass.pipeline][pass.stage] = false;
            --remaining;
            return true;
        });
    }
    std::vector<ReplayResult> results;
    for (PipelineState& state : states) {
        results.push_back(state.take_result());
    }
    return results;
}

}  // namespace fulcrum::parallel
