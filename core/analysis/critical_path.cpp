#include "core/analysis/critical_path.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <tuple>

#include "core/analysis/collectives.h"
#include "core/analysis/host_ranges.h"
#include "core/parallel/grid.h"
#include "core/parallel/replay.h"
#include "core/trace/annotations.h"

namespace fulcrum::analysis {

namespace {

using parallel::GridCoordinates;

// The pass's rank's coordinates; unknown ones 0, and the pass's stage when the rank has none.
GridCoordinates coordinates_of(const RunTrace& trace, const Pass& pass) {
    const RankTrace* rank = trace.find_rank(pass.rank);
    GridCoordinates c;
    if (rank != nullptr) {
        c.dp = std::max(rank->info.dp, 0);
        c.pp = rank->info.pp >= 0 ? rank->info.pp : std::max<int>(pass.stage, 0);
        c.cp = std::max(rank->info.cp, 0);
        c.tp = std::max(rank->info.tp, 0);
    }
    return c;
}

std::int64_t busy_of(const Pass& pass) {
    return std::max<std::int64_t>(0, pass.wall_ns() - pass.pipeline_wait_ns);
}

std::string phase_name(Phase phase) {
    return std::string(phase == Phase::forward ? range_name::kForward : range_name::kBackward);
}

// One step's passes, indexed for the walk.
class StepPasses {
public:
    StepPasses(const RunTrace& trace, const std::vector<const Pass*>& passes) : trace_(trace) {
        for (const Pass* pass : passes) {
            by_rank_[pass->rank].push_back(pass);
            const GridCoordinates c = coordinates_of(trace, *pass);
            pipeline_[{c.dp, c.cp, c.tp, c.pp, pass->chunk, pass->microbatch, pass->phase}] = pass;
            lockstep_[{c.dp, c.pp, pass->chunk, pass->microbatch, pass->phase}].push_back(pass);
        }
        for (auto& [rank, list] : by_rank_) {
            std::sort(list.begin(), list.end(),
                      [](const Pass* a, const Pass* b) { return a->start_ns < b->start_ns; });
        }
    }

    // The pass before `pass` on its rank, or null.
    const Pass* previous_on_rank(const Pass& pass) const {
        const auto& list = by_rank_.at(pass.rank);
        const Pass* before = nullptr;
        for (const Pass* p : list) {
            if (p == &pass)
                break;
            before = p;
        }
        return before;
    }

    // The pass whose output `pass` receives through the pipeline, or null. Under interleaved
    // 1F1B (Narayanan et al. 2021, §2.2) model chunk v of the first stage takes its input from
    // chunk v − 1 of the last stage, and the last stage's backward of chunk v from chunk v + 1
    // of the first; a W pass (zb-h1) waits only for its own B, on its rank.
    const Pass* pipeline_input(const Pass& pass) const {
        if (pass.phase == Phase::weight_grad)
            return nullptr;
        const GridCoordinates c = coordinates_of(trace_, pass);
        const int stages = std::max(trace_.config.layout.grid.pp, 1);
        int from = pass.phase == Phase::forward ? c.pp - 1 : c.pp + 1;
        int chunk = pass.chunk;
        if (from < 0) {
            from = stages - 1;
            --chunk;
        } else if (from >= stages) {
            from = 0;
            ++chunk;
        }
        if (chunk < 0)
            return nullptr;  // the first stage's first chunk: the data loader
        auto at = pipeline_.find({c.dp, c.cp, c.tp, from, chunk, pass.microbatch, pass.phase});
        return at != pipeline_.end() ? at->second : nullptr;
    }

    // Of a CP/TP group's passes of one micro-batch, the one that waited least in their
    // collectives: it held the others up.
    const Pass* slowest_in_lockstep(const Pass& pass) const {
        const GridCoordinates c = coordinates_of(trace_, pass);
        auto at = lockstep_.find({c.dp, c.pp, pass.chunk, pass.microbatch, pass.phase});
        if (at == lockstep_.end())
            return &pass;
        const Pass* slowest = &pass;
        for (const Pass* member : at->second) {
            if (member->collective_ns < slowest->collective_ns ||
                (member->collective_ns == slowest->collective_ns && member->rank < slowest->rank)) {
                slowest = member;
            }
        }
        return slowest;
    }

    // The last pass on `rank` that ends by `time`.
    const Pass* last_before(std::int32_t rank, std::int64_t time) const {
        auto at = by_rank_.find(rank);
        if (at == by_rank_.end())
            return nullptr;
        const Pass* last = nullptr;
        for (const Pass* p : at->second) {
            if (p->end_ns <= time && (last == nullptr || p->end_ns >= last->end_ns))
                last = p;
        }
        return last;
    }

    // The passes of `pass`'s pipeline (its dp, cp and tp), in key order: one range of
    // pipeline_, whose keys lead with them.
    std::vector<const Pass*> pipeline_of(const Pass& pass) const {
        const GridCoordinates c = coordinates_of(trace_, pass);
        constexpr int kLeast = std::numeric_limits<int>::min();
        std::vector<const Pass*> members;
        for (auto at = pipeline_.lower_bound(
                 {c.dp, c.cp, c.tp, kLeast, kLeast, kLeast, static_cast<Phase>(INT8_MIN)});
             at != pipeline_.end() && std::get<0>(at->first) == c.dp &&
             std::get<1>(at->first) == c.cp && std::get<2>(at->first) == c.tp;
             ++at) {
            members.push_back(at->second);
        }
        return members;
    }

private:
    const RunTrace& trace_;
    std::map<std::int32_t, std::vector<const Pass*>> by_rank_;
    std::map<std::tuple<int, int, int, int, int, std::int32_t, Phase>, const Pass*> pipeline_;
    std::map<std::tuple<int, int, int, std::int32_t, Phase>, std::vector<const Pass*>> lockstep_;
};

struct TailEvent {
    std::int64_t start_ns = 0, end_ns = 0;
    bool found = false;
    void take(const RankRanges::Range& range) {
        if (!found || range.end_ns > end_ns)
            *this = {range.start_ns, range.end_ns, true};
    }
};

// Each rank's step range, last optimizer and last overlapped reduction's wait of each step,
// from one pass over the run.
struct StepTails {
    TailEvent step, optimizer, reduction_wait;
};
using TailIndex = std::map<std::pair<std::int32_t, std::int32_t>, StepTails>;  // (rank, step)

TailIndex index_tails(const std::vector<RankRanges>& ranges) {
    TailIndex tails;
    for (const RankRanges& rank : ranges) {
        for (const RankRanges::Range& range : rank.steps) {
            if (range.host_lane && range.step >= 0) {
                tails[{rank.rank, range.step}].step.take(range);
            }
        }
        for (const RankRanges::Range& range : rank.optimizers) {
            if (range.host_lane && range.step >= 0) {
                tails[{rank.rank, range.step}].optimizer.take(range);
            }
        }
        for (const RankRanges::Range& range : rank.reduction_waits) {
            if (range.step >= 0) {
                tails[{rank.rank, range.step}].reduction_wait.take(range);
            }
        }
    }
    return tails;
}

const StepTails* tails_of(const TailIndex& tails, std::int32_t rank, std::int32_t step) {
    auto at = tails.find({rank, step});
    return at != tails.end() ? &at->second : nullptr;
}

// The step's pipelines replayed with the measured busy time of every pass, and with one pass at
// its stage and phase's mean: how much that pass costs the step.
void add_what_if(const RunTrace& trace, const StepPasses& step, CriticalPath& path,
                 const std::vector<const Pass*>& critical) {
    const parallel::PipelineSchedule schedule = trace.config.layout.schedule;
    const int p = std::max(trace.config.layout.grid.pp, 1);
    for (const Pass* pass : critical) {
        const auto members = step.pipeline_of(*pass);
        int m = 0;
        for (const Pass* member : members)
            m = std::max(m, member->microbatch + 1);
        if (m == 0 || pass->microbatch < 0)
            continue;
        parallel::ReplayInput input;
        input.schedule = schedule;
        if (input.schedule != parallel::PipelineSchedule::gpipe &&
            input.schedule != parallel::PipelineSchedule::one_f_one_b) {
            continue;  // the engine's captures run these two; replaying others needs their chunks
        }
        input.stages = p;
        input.microbatches = m;
        input.forward_ns.assign(p, std::vector<std::int64_t>(m, 0));
        input.backward_ns.assign(p, std::vector<std::int64_t>(m, 0));
        std::int64_t sum = 0, count = 0;
        const int stage = coordinates_of(trace, *pass).pp;
        for (const Pass* member : members) {
            const int s = coordinates_of(trace, *member).pp;
            if (s < 0 || s >= p || member->microbatch < 0)
                continue;
            (member->phase == Phase::forward ? input.forward_ns
                                             : input.backward_ns)[s][member->microbatch] =
                busy_of(*member);
            if (s == stage && member->phase == pass->phase) {
                sum += busy_of(*member);
                ++count;
            }
        }
        if (count == 0 || stage < 0 || stage >= p)
            continue;
        auto measured = parallel::replay_pipeline(input);
        WhatIf what;
        what.rank = pass->rank;
        what.microbatch = pass->microbatch;
        what.stage = static_cast<std::int16_t>(stage);
        what.phase = pass->phase;
        what.busy_ns = busy_of(*pass);
        what.typical_ns = sum / count;
        (pass->phase == Phase::forward ? input.forward_ns
                                       : input.backward_ns)[stage][pass->microbatch] =
            what.typical_ns;
        auto typical = parallel::replay_pipeline(input);
        if (!measured || !typical)
            continue;
        what.step_saving_ns =
            std::max<std::int64_t>(0, measured->makespan_ns - typical->makespan_ns);
        path.what_if.push_back(what);
    }
    std::stable_sort(
        path.what_if.begin(), path.what_if.end(),
        [](const WhatIf& a, const WhatIf& b) { return a.step_saving_ns > b.step_saving_ns; });
}

CriticalPath walk_step(const RunTrace& trace, std::int32_t step_number,
                       const std::vector<const Pass*>& passes,
                       const std::vector<const CollectiveInstance*>& dp_collectives,
                       const TailIndex& tails) {
    const StepPasses step(trace, passes);
    CriticalPath path;
    path.step = step_number;
    std::vector<CriticalSegment> reversed;
    auto add = [&](std::int32_t rank, std::string what, std::int64_t start, std::int64_t end,
                   std::int32_t mb = -1, std::int16_t stage = -1, const Pass* of_pass = nullptr) {
        if (end <= start)
            return;
        reversed.push_back({rank, std::move(what), mb, stage, start, end});
        if (of_pass != nullptr) {
            reversed.back().step = of_pass->step;
            reversed.back().phase = of_pass->phase;
        }
    };

    // Where the step ends: the rank whose optimizer (or, without one, last pass) ends last.
    std::int32_t rank = passes.front()->rank;
    std::int64_t cursor = INT64_MIN;
    path.start_ns = INT64_MAX;
    for (const RankTrace& r : trace.ranks) {
        const StepTails* tail = tails_of(tails, r.info.rank, step_number);
        if (tail != nullptr && tail->step.found)
            path.start_ns = std::min(path.start_ns, tail->step.start_ns);
        const Pass* last = step.last_before(r.info.rank, INT64_MAX);
        const std::int64_t end = tail != nullptr && tail->optimizer.found ? tail->optimizer.end_ns
                                 : last != nullptr                        ? last->end_ns
                                                                          : INT64_MIN;
        if (end > cursor) {
            cursor = end;
            rank = r.info.rank;
        }
    }
    for (const Pass* pass : passes)
        path.start_ns = std::min(path.start_ns, pass->start_ns);
    path.end_ns = cursor;

    // The tail: optimizer, then the DP all-reduce, whose last arrival everybody waited for.
    if (const StepTails* tail = tails_of(tails, rank, step_number)) {
        if (tail->optimizer.found) {
            add(rank, std::string(range_name::kOptimizer), tail->optimizer.start_ns, cursor);
            cursor = tail->optimizer.start_ns;
        }
        // An overlapped reduction's wait for the layers' reductions the passes started: the
        // part of them the passes did not hide.
        if (const TailEvent& wait = tail->reduction_wait; wait.found && wait.end_ns <= cursor) {
            if (wait.end_ns < cursor) {
                add(rank, "other", wait.end_ns, cursor);
            }
            add(rank, std::string(range_name::kDpAllReduceWait), wait.start_ns, wait.end_ns);
            cursor = wait.start_ns;
        }
        // The rank's last one before the optimizer: under ZeRO-2 and -3 the passes make
        // reduce-scatters and gathers of their own over the same ranks, earlier in the step.
        const CollectiveInstance* reduction = nullptr;
        const CollectiveParticipant* mine = nullptr;
        for (const CollectiveInstance* found : dp_collectives) {
            auto member =
                std::find_if(found->participants.begin(), found->participants.end(),
                             [&](const CollectiveParticipant& p) { return p.rank == rank; });
            if (member == found->participants.end() || member->end_ns > cursor + 1)
                continue;
            if (mine == nullptr || member->end_ns > mine->end_ns) {
                reduction = found;
                mine = &*member;
            }
        }
        if (reduction != nullptr) {
            const CollectiveParticipant& last = reduction->last_arrival();
            // On a GPU rank the optimizer's first kernel starts a little after the host's
            // all-reduce returned: that launch gap is the step's too.
            if (mine->end_ns < cursor) {
                add(rank, "other", mine->end_ns, cursor);
            }
            add(last.rank, std::string(trace.name(reduction->name)), last.start_ns,
                std::min(cursor, mine->end_ns));
            rank = last.rank;
            cursor = last.start_ns;
        }
    }

    // The passes, back to the first.
    const Pass* pass = step.last_before(rank, cursor);
    if (pass != nullptr && cursor > pass->end_ns)
        add(rank, "other", pass->end_ns, cursor);
    if (pass != nullptr)
        cursor = std::min(cursor, pass->end_ns);
    std::vector<const Pass*> critical;
    for (std::size_t guard = 0; pass != nullptr && guard <= passes.size(); ++guard) {
        const Pass* slowest = step.slowest_in_lockstep(*pass);
        // GPU-true passes of one lockstep group end apart (each at its own last kernel): what
        // follows the end of the member that held the group up is still this pass's own.
        if (slowest != pass && slowest->end_ns < cursor) {
            const std::int64_t begin = std::max(slowest->end_ns, pass->start_ns);
            add(pass->rank, phase_name(pass->phase), begin, cursor, pass->microbatch,
                static_cast<std::int16_t>(coordinates_of(trace, *pass).pp), pass);
            if (begin > slowest->end_ns) {
                add(pass->rank, "other", slowest->end_ns, begin);
            }
            cursor = slowest->end_ns;
        }
        pass = slowest;
        const Pass* previous = step.previous_on_rank(*pass);
        const Pass* input = step.pipeline_input(*pass);
        const Pass* before = previous;
        if (input != nullptr && (before == nullptr || input->end_ns > before->end_ns))
            before = input;
        const std::int16_t stage = static_cast<std::int16_t>(coordinates_of(trace, *pass).pp);
        critical.push_back(pass);
        if (before == input && before != nullptr) {
            // Waited for the pipeline: from the sender's end to the data's arrival is transfer.
            const std::int64_t arrival =
                std::max(pass->start_ns + pass->pipeline_wait_ns, input->end_ns);
            add(pass->rank, phase_name(pass->phase), arrival, cursor, pass->microbatch, stage,
                pass);
            add(pass->rank, "pipeline transfer", input->end_ns, arrival, pass->microbatch, stage);
            cursor = input->end_ns;
        } else {
            const std::int64_t begin =
                before != nullptr ? std::max(pass->start_ns, before->end_ns) : pass->start_ns;
            add(pass->rank, phase_name(pass->phase), begin, cursor, pass->microbatch, stage, pass);
            if (before != nullptr && pass->start_ns > before->end_ns) {
                add(pass->rank, "other", before->end_ns, pass->start_ns);
            }
            cursor = before != nullptr ? before->end_ns : pass->start_ns;
        }
        if (before != nullptr && before->end_ns >= pass->end_ns)
            break;  // a damaged trace; stop
        pass = before;
    }
    if (path.start_ns != INT64_MAX && cursor > path.start_ns)
        add(rank, "before first pass", path.start_ns, cursor);

    path.segments.assign(reversed.rbegin(), reversed.rend());
    for (const CriticalSegment& segment : path.segments) {
        path.by_rank[segment.rank] += segment.duration_ns();
        if (segment.stage >= 0)
            path.by_stage[segment.stage] += segment.duration_ns();
        if (segment.microbatch >= 0)
            path.by_microbatch[segment.microbatch] += segment.duration_ns();
        path.by_what[segment.what] += segment.duration_ns();
    }
    add_what_if(trace, step, path, critical);
    return path;
}

}  // namespace

std::vector<CriticalPath> critical_paths(const RunTrace& trace, const PassTable& passes,
                                         const MatchedCollectives* collectives,
                                         const std::vector<RankRanges>* ranges) {
    // What every step's walk looks up, made once a step with passes is found.
    std::optional<MatchedCollectives> matched;
    std::vector<RankRanges> read;
    std::map<std::int32_t, std::vector<const CollectiveInstance*>> dp_by_step;
    std::optional<TailIndex> tails;
    std::vector<CriticalPath> paths;
    // A step at a time, in order: a window of steps at a time from the table.
    passes.for_each_step_window([&](const std::vector<Pass>& window) {
        std::map<std::int32_t, std::vector<const Pass*>> by_step;
        for (const Pass& pass : window) {
            if (pass.step >= 0)
                by_step[pass.step].push_back(&pass);
        }
        if (by_step.empty())
            return;
        if (!tails) {
            if (collectives == nullptr) {
                matched = matched_collectives(trace);
                collectives = &*matched;
            }
            for (const CollectiveInstance& instance : collectives->dp_instances()) {
                dp_by_step[instance.step].push_back(&instance);
            }
            if (ranges == nullptr) {
                read = rank_ranges(trace);
                ranges = &read;
            }
            tails = index_tails(*ranges);
        }
        for (const auto& [step, list] : by_step) {
            paths.push_back(walk_step(trace, step, list, dp_by_step[step], *tails));
        }
    });
    return paths;
}

}  // namespace fulcrum::analysis
