#include "core/analysis/passes.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "core/balance/cp_shard.h"

namespace fulcrum::analysis {

namespace {

// An open range on the walk down one lane.
struct Open {
    std::int64_t end_ns;
    Role role;
    std::int64_t pass = -1;       // index into the result when this range is a pass
    std::int64_t attention_ns = 0;  // attention ranges: time less nested communication
};

void walk_lane(const RunTrace& trace, const LaneTrace& lane, std::vector<Pass>& passes) {
    std::vector<Open> stack;
    std::int64_t current_pass = -1;
    int open_communication = 0;
    int open_attention = 0;
    auto pop = [&] {
        const Open& top = stack.back();
        if (top.pass >= 0) {
            current_pass = -1;
        }
        if (is_communication(top.role)) {
            --open_communication;
        }
        if (top.role == Role::attention) {
            --open_attention;
            if (current_pass >= 0 && open_attention == 0) {
                passes[static_cast<std::size_t>(current_pass)].attention_ns += top.attention_ns;
            }
        }
        stack.pop_back();
    };
    for (const Event& event : lane.events) {
        if (event.kind == EventKind::mark) {
            continue;
        }
        while (!stack.empty() && stack.back().end_ns <= event.start_ns) {
            pop();
        }
        const Role role = trace.role(event);
        Open open{event.end_ns, role};
        if ((role == Role::forward || role == Role::backward) && current_pass < 0) {
            Pass pass;
            pass.rank = lane.info.rank;
            pass.step = event.step;
            pass.microbatch = event.microbatch;
            pass.stage = event.stage;
            pass.phase = role == Role::forward ? Phase::forward : Phase::backward;
            pass.start_ns = event.start_ns;
            pass.end_ns = event.end_ns;
            open.pass = static_cast<std::int64_t>(passes.size());
            current_pass = open.pass;
            passes.push_back(pass);
        } else if (current_pass >= 0) {
            Pass& pass = passes[static_cast<std::size_t>(current_pass)];
            // A child that outlives its pass (clock damage) counts only inside it.
            const std::int64_t inside = std::max<std::int64_t>(
                0, std::min(event.end_ns, pass.end_ns) - std::max(event.start_ns, pass.start_ns));
            if (is_communication(role) && open_communication == 0) {
                (role == Role::pipeline_recv ? pass.pipeline_wait_ns : pass.collective_ns) += inside;
                for (auto it = stack.rbegin(); it != stack.rend(); ++it) {
                    if (it->role == Role::attention) {
                        it->attention_ns -= inside;
                    }
                }
            } else if (role == Role::attention && open_attention == 0) {
                open.attention_ns = inside;
            }
        }
        if (is_communication(role)) {
            ++open_communication;
        }
        if (role == Role::attention) {
            ++open_attention;
        }
        stack.push_back(open);
    }
    while (!stack.empty()) {
        pop();
    }
}

}  // namespace

std::int64_t causal_pairs(std::int64_t prefix, std::int64_t length) {
    return balance::causal_pair_work(prefix, length) / 2;  // always even: (2p + 1 + ℓ)·ℓ
}

std::vector<Pass> find_passes(const RunTrace& trace) {
    std::vector<Pass> passes;
    for (const RankTrace& rank : trace.ranks) {
        for (const LaneTrace& lane : rank.lanes) {
            if (lane.info.kind == LaneKind::host_thread) {
                walk_lane(trace, lane, passes);
            }
        }
    }
    for (Pass& pass : passes) {
        pass.attention_ns = std::max<std::int64_t>(pass.attention_ns, 0);
        pass.compute_ns = std::max<std::int64_t>(
            0, pass.wall_ns() - pass.pipeline_wait_ns - pass.collective_ns);
    }
    std::stable_sort(passes.begin(), passes.end(), [](const Pass& a, const Pass& b) {
        return std::tie(a.rank, a.step, a.start_ns) < std::tie(b.rank, b.step, b.start_ns);
    });
    return passes;
}

std::vector<HeldWork> held_work(const RunTrace& trace) {
    std::map<std::tuple<std::int32_t, std::int32_t, std::int32_t>, HeldWork> rows;
    for (const WorkloadEntry& entry : trace.workload) {
        HeldWork& row = rows[{entry.rank, entry.step, entry.microbatch}];
        row.rank = entry.rank;
        row.step = entry.step;
        row.microbatch = entry.microbatch;
        const std::int64_t length = std::max(0, entry.token_end - entry.token_begin);
        row.tokens += length;
        row.pairs += causal_pairs(entry.token_begin, length);
        ++row.documents;
    }
    std::vector<HeldWork> result;
    result.reserve(rows.size());
    for (auto& [key, row] : rows) {
        result.push_back(row);
    }
    return result;
}

}  // namespace fulcrum::analysis
