#include "core/parallel/schedule.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <deque>
#include <map>
#include <numeric>
#include <string>
#include <tuple>

namespace fulcrum::parallel {

Result<PipelineSchedule> parse_schedule(std::string_view name) {
    if (name == "gpipe")
        return PipelineSchedule::gpipe;
    if (name == "1f1b")
        return PipelineSchedule::one_f_one_b;
    if (name == "interleaved")
        return PipelineSchedule::interleaved;
    if (name == "zb-h1")
        return PipelineSchedule::zero_bubble_h1;
    return Error{ErrorCode::invalid_input, "unknown pipeline schedule '" + std::string(name) +
                                               "' (choose " + std::string(kScheduleNames) + ")"};
}

const char* schedule_name(PipelineSchedule schedule) {
    switch (schedule) {
        case PipelineSchedule::gpipe:
            return "gpipe";
        case PipelineSchedule::one_f_one_b:
            return "1f1b";
        case PipelineSchedule::interleaved:
            return "interleaved";
        case PipelineSchedule::zero_bubble_h1:
            return "zb-h1";
    }
    return "1f1b";
}

Status check_pipeline(PipelineSchedule schedule, const PipelineShape& shape) {
    if (shape.stages < 1 || shape.microbatches < 1 || shape.virtual_stages < 1) {
        return Error{ErrorCode::invalid_input,
                     "a pipeline needs at least one stage, micro-batch and model chunk"};
    }
    if (schedule == PipelineSchedule::interleaved) {
        if (shape.virtual_stages < 2) {
            return Error{
                ErrorCode::invalid_input,
                "the interleaved schedule needs at least 2 virtual stages (model chunks) per "
                "pipeline stage: give --virtual-stages 2 or more"};
        }
        if (shape.microbatches % shape.stages != 0) {
            return Error{ErrorCode::invalid_input,
                         "the interleaved schedule runs micro-batches in groups of the " +
                             std::to_string(shape.stages) +
                             " pipeline stages: " + std::to_string(shape.microbatches) +
                             " micro-batches is not a multiple of " + std::to_string(shape.stages)};
        }
    } else if (shape.virtual_stages != 1) {
        return Error{ErrorCode::invalid_input,
                     std::string("virtual stages are for the interleaved schedule; ") +
                         schedule_name(schedule) + " runs one model chunk per stage"};
    }
    return {};
}

namespace {

std::vector<PipelineOp> gpipe_ops(int m) {
    std::vector<PipelineOp> ops;
    for (int j = 0; j < m; ++j)
        ops.push_back({j, Phase::forward});
    for (int j = 0; j < m; ++j)
        ops.push_back({j, Phase::backward});
    return ops;
}

std::vector<PipelineOp> one_f_one_b_ops(int stage, int p, int m) {
    std::vector<PipelineOp> ops;
    const int warmup = std::min(p - stage - 1, m);
    int next_forward = 0;
    for (; next_forward < warmup; ++next_forward)
        ops.push_back({next_forward, Phase::forward});
    for (int next_backward = 0; next_backward < m; ++next_backward) {
        if (next_forward < m)
            ops.push_back({next_forward++, Phase::forward});
        ops.push_back({next_backward, Phase::backward});
    }
    return ops;
}

// Megatron-LM's order (forward_backward_pipelining_with_interleaving): virtual step k of a
// stage runs micro-batch (k div p·v)·p + k mod p through chunk (k mod p·v) div p, backward
// steps through the chunks in reverse.
std::vector<PipelineOp> interleaved_ops(int stage, int p, int m, int v) {
    const int total = m * v;
    const int warmup = m == p ? total : std::min((p - stage - 1) * 2 + (v - 1) * p, total);
    auto at = [&](int k, Phase kind) {
        const int chunk = (k % (p * v)) / p;
        return PipelineOp{(k / (p * v)) * p + k % p, kind,
                          kind == Phase::forward ? chunk : v - 1 - chunk};
    };
    std::vector<PipelineOp> ops;
    for (int k = 0; k < warmup; ++k)
        ops.push_back(at(k, Phase::forward));
    const int steady = total - warmup;
    for (int i = 0; i < steady; ++i) {
        ops.push_back(at(warmup + i, Phase::forward));
        ops.push_back(at(i, Phase::backward));
    }
    for (int i = steady; i < total; ++i)
        ops.push_back(at(i, Phase::backward));
    return ops;
}

// ZB-H1's order, for every stage at once (Qi et al., ICLR'24, §2.1, Figure 3 top): 1F1B's F
// and B, played with every pass one time unit long; a stage runs its oldest pending W whenever
// its next F or B is not ready, and before a forward that would put more than p micro-batches
// in flight (forward run, W not yet), and the rest at the end. p in flight is 1F1B's count on
// stage 0, so every stage holds at most what 1F1B's first stage holds: stage 0 runs each W
// right after its B in the steady state, the last stage delays its Ws by up to p − 1 passes and
// fills the cool-down with them. Played with equal pass times, as the paper draws its hand-made
// schedule; the replay then times it with the real ones.
std::vector<std::vector<PipelineOp>> zero_bubble_h1_ops(int p, int m) {
    std::vector<std::vector<PipelineOp>> order(p), out(p);
    for (int s = 0; s < p; ++s)
        order[s] = one_f_one_b_ops(s, p, m);
    std::vector<std::size_t> next(p, 0);
    std::vector<int> in_flight(p, 0);  // forwards run whose W has not
    std::vector<std::deque<int>> pending(p);
    std::map<std::tuple<Phase, int, int>, int> done_at;  // (kind, stage, micro-batch) -> end
    auto finished = [&](int s) { return next[s] >= order[s].size() && pending[s].empty(); };
    for (int time = 0;; ++time) {
        bool all = true;
        std::vector<std::tuple<Phase, int, int>> ended;
        for (int s = 0; s < p; ++s) {
            if (finished(s))
                continue;
            all = false;
            if (next[s] < order[s].size()) {
                const PipelineOp op = order[s][next[s]];
                std::tuple<Phase, int, int> needs{Phase::forward, -1, -1};
                if (op.kind == Phase::forward && s > 0)
                    needs = {Phase::forward, s - 1, op.microbatch};
                if (op.kind == Phase::backward) {
                    needs = s < p - 1 ? std::tuple{Phase::backward, s + 1, op.microbatch}
                                      : std::tuple{Phase::forward, s, op.microbatch};
                }
                const bool ready = std::get<1>(needs) < 0 ||
                                   (done_at.count(needs) != 0 && done_at.at(needs) <= time);
                const bool room = op.kind != Phase::forward || in_flight[s] < p;
                if (ready && room) {
                    out[s].push_back(op);
                    ended.push_back({op.kind, s, op.microbatch});
                    if (op.kind == Phase::backward)
                        pending[s].push_back(op.microbatch);
                    else
                        ++in_flight[s];
                    ++next[s];
                    continue;
                }
            }
            if (!pending[s].empty()) {
                out[s].push_back({pending[s].front(), Phase::weight_grad});
                pending[s].pop_front();
                --in_flight[s];
            }
        }
        if (all)
            break;
        for (const auto& key : ended)
            done_at[key] = time + 1;
    }
    return out;
}

}  // namespace

std::vector<PipelineOp> stage_ops(PipelineSchedule schedule, int stage,
                                  const PipelineShape& shape) {
    switch (schedule) {
        case PipelineSchedule::gpipe:
            return gpipe_ops(shape.microbatches);
        case PipelineSchedule::one_f_one_b:
            return one_f_one_b_ops(stage, shape.stages, shape.microbatches);
        case PipelineSchedule::interleaved:
            return interleaved_ops(stage, shape.stages, shape.microbatches, shape.virtual_stages);
        case PipelineSchedule::zero_bubble_h1:
            return zero_bubble_h1_ops(shape.stages,
                                      shape.microbatches)[static_cast<std::size_t>(stage)];
    }
    return {};
}

std::optional<double> bubble_fraction(double bubble, double busy) {
    if (!(busy > 0)) {
        return std::nullopt;
    }
    return bubble / busy;
}

double theory_bubble_fraction(PipelineSchedule schedule, const PipelineShape& shape,
                              const PassTimes& times) {
    const double p = shape.stages, m = shape.microbatches, v = shape.virtual_stages;
    switch (schedule) {
        case PipelineSchedule::gpipe:
        case PipelineSchedule::one_f_one_b:
            return (p - 1) / m;
        case PipelineSchedule::interleaved:
            return (p - 1) / (v * m);
        case PipelineSchedule::zero_bubble_h1: {
            const double busy = times.forward + times.backward + times.weight;
            return busy > 0
                       ? (p - 1) * std::max(0.0, times.forward + times.backward - times.weight) /
                             (m * busy)
                       : 0.0;
        }
    }
    return 0;
}

LayerRange stage_layers(int stage, int stages, int layers) {
    const int base = layers / stages;
    const int extra = layers % stages;
    const int first = stage * base + std::min(stage, extra);
    return {first, first + base + (stage < extra ? 1 : 0)};
}

Status check_stage_layers(std::span<const int> counts, int chunks, int layers) {
    if (int(counts.size()) != chunks) {
        return Error{ErrorCode::invalid_input,
                     "--stage-layers gives " + std::to_string(counts.size()) +
                         " layer counts for " + std::to_string(chunks) +
                         " model chunks (one per pipeline stage, p·v with virtual stages)"};
    }
    int sum = 0;
    for (std::size_t i = 0; i < counts.size(); ++i) {
        if (counts[i] < 1) {
            return Error{ErrorCode::invalid_input,
                         "--stage-layers: model chunk " + std::to_string(i) + " has " +
                             std::to_string(counts[i]) + " layers; every one needs at least 1"};
        }
        sum += counts[i];
    }
    if (sum != layers) {
        return Error{ErrorCode::invalid_input, "--stage-layers sums to " + std::to_string(sum) +
                                                   " layers, but the model has --layers " +
                                                   std::to_string(layers)};
    }
    return {};
}

Result<std::vector<int>> parse_stage_layers(std::string_view text) {
    std::vector<int> counts;
    std::size_t begin = 0;
    while (begin <= text.size()) {
        const std::size_t end = std::min(text.find(',', begin), text.size());
        const std::string_view piece = text.substr(begin, end - begin);
        int value = 0;
        const auto [next, error] =
            std::from_chars(piece.data(), piece.data() + piece.size(), value);
        if (piece.empty() || error != std::errc{} || next != piece.data() + piece.size()) {
            return Error{ErrorCode::invalid_input, "--stage-layers: '" + std::string(piece) +
                                                       "' is not a layer count (expected "
                                                       "comma-separated integers, e.g. 3,5)"};
        }
        counts.push_back(value);
        begin = end + 1;
    }
    return counts;
}

LayerRange model_chunk_layers(int chunk, int chunks, int layers, std::span<const int> counts) {
    if (counts.empty()) {
        return stage_layers(chunk, chunks, layers);
    }
    assert(chunk >= 0 && std::size_t(chunk) < counts.size());
    const int first = std::accumulate(counts.begin(), counts.begin() + chunk, 0);
    return {first, first + counts[std::size_t(chunk)]};
}

int stage_layer_total(int stage, int stages, int virtual_stages, int layers,
                      std::span<const int> counts) {
    const int p = std::max(stages, 1), v = std::max(virtual_stages, 1);
    if (counts.size() != std::size_t(p) * std::size_t(v)) {
        counts = {};
    }
    int total = 0;
    for (int k = 0; k < v; ++k) {
        const LayerRange range = model_chunk_layers(k * p + stage, p * v, layers, counts);
        total += range.last - range.first;
    }
    return total;
}

std::vector<PipelineOp> step_ops(PipelineSchedule schedule, int stage, const PipelineShape& shape) {
    if (check_pipeline(schedule, shape).ok() || schedule != PipelineSchedule::interleaved) {
        return stage_ops(schedule, stage, shape);
    }
    std::vector<PipelineOp> ops;
    for (int k = 0; k < shape.virtual_stages; ++k) {
        for (int j = 0; j < shape.microbatches; ++j) {
            ops.push_back({j, Phase::forward, k});
        }
    }
    for (int k = shape.virtual_stages - 1; k >= 0; --k) {
        for (int j = 0; j < shape.microbatches; ++j) {
            ops.push_back({j, Phase::backward, k});
        }
    }
    return ops;
}

}  // namespace fulcrum::parallel
