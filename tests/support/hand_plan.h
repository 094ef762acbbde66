// A PlanResult built by hand for the Plan view's and the report's tests: three ranked
// candidates (top k = 2), one estimated, one that does not fit in memory (with a hostile
// reason, to check escaping) and one invalid layout without memory figures.
#pragma once

#include "core/plan/planner.h"

namespace fulcrum::test {

struct HandPlan {
    plan::PlanRequest request;
    plan::PlanResult result;
};

inline plan::Candidate hand_candidate(parallel::GridShape grid, plan::CandidateStatus status,
                                      double gib, double tokens_per_second) {
    plan::Candidate c;
    c.layout.grid = grid;
    c.status = status;
    c.layout.microbatches = 8;
    c.memory.total_gib = gib;
    c.tokens_per_second = tokens_per_second;
    c.step_ns = tokens_per_second > 0 ? 1e9 * 65536 / tokens_per_second : 0;
    c.mfu = tokens_per_second / 20000;
    c.bubble_fraction = 0.1;
    c.imbalance = 1.05;
    c.train_command = "mpirun -np " + std::to_string(grid.world()) + " fulcrum-train --dp " +
                      std::to_string(grid.dp);
    return c;
}

inline HandPlan hand_plan() {
    using plan::CandidateStatus;
    HandPlan p;
    p.request.model = {.layers = 4, .hidden = 256, .heads = 8, .context = 1024, .vocab = 512};
    p.request.world_sizes = {8};
    p.request.gpu_memory_gib = 80;
    p.request.usable_memory_fraction = 0.9;
    p.request.top_k = 2;
    p.request.space.schedules = {parallel::PipelineSchedule::one_f_one_b,
                                 parallel::PipelineSchedule::interleaved};
    auto& c = p.result.candidates;
    c.push_back(
        hand_candidate({.dp = 4, .tp = 2, .pp = 1, .cp = 1}, CandidateStatus::ranked, 40, 1000));
    c.push_back(
        hand_candidate({.dp = 2, .tp = 2, .pp = 2, .cp = 1}, CandidateStatus::ranked, 60, 1200));
    c[1].layout.schedule = parallel::PipelineSchedule::interleaved;
    c[1].layout.virtual_stages = 2;
    c[1].layout.stage_layers = {1, 1, 1, 1};
    c[1].balancer = balance::Balancer::wlb;
    c.push_back(
        hand_candidate({.dp = 1, .tp = 2, .pp = 2, .cp = 2}, CandidateStatus::ranked, 30, 800));
    c[2].sharding = balance::CpSharding::zigzag;
    c.push_back(
        hand_candidate({.dp = 8, .tp = 1, .pp = 1, .cp = 1}, CandidateStatus::estimated, 50, 700));
    c.push_back(
        hand_candidate({.dp = 8, .tp = 1, .pp = 1, .cp = 1}, CandidateStatus::infeasible, 120, 0));
    c[4].reason = "activations <b>120 GiB</b> > 72 GiB";
    c[4].reason_kind = "activations";
    c.push_back(
        hand_candidate({.dp = 1, .tp = 8, .pp = 1, .cp = 1}, CandidateStatus::infeasible, 0, 0));
    c[5].reason = "tp 8 > heads 4";
    c[5].reason_kind = "tp > heads";
    p.result.ranked = {1, 0, 2};
    p.result.counts = {.enumerated = 6,
                       .infeasible = 2,
                       .dominated = 0,
                       .estimated = 1,
                       .simulated = 3,
                       .infeasible_by_reason = {{"activations", 1}, {"tp > heads", 1}}};
    p.result.cost_source = "h100 preset";
    return p;
}

}  // namespace fulcrum::test
