#include "core/analysis/passes.h"

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>

#include "core/analysis/device_work.h"
#include "core/analysis/intervals.h"
#include "core/balance/cp_shard.h"
#include "core/store/trace_reader.h"
#include "core/trace/annotations.h"

namespace fulcrum::analysis {

namespace {

// Device work a pass is timed by: every kernel, copy, memset and collective.
bool is_device_work(const Event& event) {
    return event.kind == EventKind::kernel || event.kind == EventKind::memcpy ||
           event.kind == EventKind::memset || event.kind == EventKind::collective;
}

// The GPU projection of each event of a host lane (as Nsight Systems projects NVTX ranges):
// from the start of the first device operation launched inside the range to the end of the
// last. A launch is an API event with a correlation id; it projects onto every range open
// around it. Events that launched nothing project to an empty interval.
std::vector<Interval> project_on_device(const LaneTrace& lane, const CorrelationMap<Interval>& work,
                                        std::int64_t& linked) {
    constexpr Interval kNothing{INT64_MAX, INT64_MIN};
    std::vector<Interval> projection(lane.events.size(), kNothing);
    std::vector<std::size_t> open;  // indices of the ranges around the current position
    for (std::size_t i = 0; i < lane.events.size(); ++i) {
        const Event& event = lane.events[i];
        while (!open.empty() && lane.events[open.back()].end_ns <= event.start_ns) {
            open.pop_back();
        }
        if (event.kind == EventKind::api && event.correlation >= 0) {
            const Interval* launched = work.find(event.correlation);
            if (launched == nullptr) {
                continue;
            }
            ++linked;
            for (std::size_t j : open) {
                // A range below the top may have ended already (ranges that overlap without
                // nesting stay on the stack until they surface).
                if (lane.events[j].end_ns > event.start_ns) {
                    projection[j].start = std::min(projection[j].start, launched->start);
                    projection[j].end = std::max(projection[j].end, launched->end);
                }
            }
            continue;
        }
        if (event.kind != EventKind::mark) {
            open.push_back(i);
        }
    }
    for (Interval& interval : projection) {
        if (interval.start > interval.end) {
            interval = Interval{};  // launched nothing
        }
    }
    return projection;
}

// An open range on the walk down one lane.
struct Open {
    std::int64_t end_ns;
    Role role;
    std::int64_t pass = -1;         // index into the result when this range is a pass
    std::int64_t attention_ns = 0;  // attention ranges: time less nested communication
    std::int32_t step = -1;         // step ranges: the step they stand for
};

// Gives each pass of `lane` (passes[first_pass...]) the CPU time its `fulcrum.cpu` mark says.
void add_cpu_times(const RunTrace& trace, const LaneTrace& lane, std::size_t first_pass,
                   std::vector<Pass>& passes) {
    const CpuMarks marks(trace, lane);
    if (marks.empty()) {
        return;
    }
    for (std::size_t i = first_pass; i < passes.size(); ++i) {
        passes[i].cpu_ns = marks.after(passes[i].end_ns);
    }
}

// Walks one host lane's ranges. `projection` is empty for a CPU rank (host times are the
// times); for a rank with device work it holds each event's GPU projection, and a pass and
// the ranges inside it are timed by the kernels they launched.
void walk_lane(const RunTrace& trace, const LaneTrace& lane,
               const std::vector<Interval>& projection, std::vector<Pass>& passes) {
    auto timed = [&](std::size_t i) {
        const Event& event = lane.events[i];
        return projection.empty() ? Interval{event.start_ns, event.end_ns} : projection[i];
    };
    const std::size_t first_pass = passes.size();
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
    for (std::size_t i = 0; i < lane.events.size(); ++i) {
        const Event& event = lane.events[i];
        if (event.kind == EventKind::mark) {
            continue;
        }
        while (!stack.empty() && stack.back().end_ns <= event.start_ns) {
            pop();
        }
        const Role role = trace.role(event);
        const Interval time = timed(i);
        Open open{event.end_ns, role};
        const bool pass_range = role == Role::forward || role == Role::backward;
        if (pass_range && current_pass < 0 && !projection.empty() && time.length() <= 0) {
            // A pass that launched no device work on a rank that has some: nothing to time.
            stack.push_back(open);
            continue;
        }
        if (role == Role::step) {
            open.step = step_of_range(event, trace.name(event.name));
        }
        if (pass_range && current_pass < 0) {
            Pass pass;
            pass.rank = lane.info.rank;
            pass.step = event.step;
            // A pass without a step of its own is in the step range around it (a program's
            // hand-made "train_step 3", run_trace.h).
            for (auto it = stack.rbegin(); it != stack.rend() && pass.step < 0; ++it) {
                pass.step = it->role == Role::step ? it->step : pass.step;
            }
            pass.microbatch = event.microbatch;
            pass.stage = event.stage;
            pass.chunk =
                static_cast<std::int16_t>(std::max(0, chunk_of_args(trace.name(event.args))));
            // A backward range marked wgrad (the engine's "weight gradients") is the W pass
            // of a split backward: a pass of its own, not part of the B pass before it.
            pass.phase = role == Role::forward               ? Phase::forward
                         : event.phase == Phase::weight_grad ? Phase::weight_grad
                                                             : Phase::backward;
            pass.start_ns = time.start;
            pass.end_ns = time.end;
            open.pass = static_cast<std::int64_t>(passes.size());
            current_pass = open.pass;
            passes.push_back(pass);
        } else if (current_pass >= 0) {
            Pass& pass = passes[static_cast<std::size_t>(current_pass)];
            // A child that outlives its pass counts only inside it.
            const std::int64_t inside = std::max<std::int64_t>(
                0, std::min(time.end, pass.end_ns) - std::max(time.start, pass.start_ns));
            if (is_communication(role) && open_communication == 0) {
                (role == Role::pipeline_recv ? pass.pipeline_wait_ns : pass.collective_ns) +=
                    inside;
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
    if (projection.empty()) {
        add_cpu_times(trace, lane, first_pass, passes);
    }
}

}  // namespace

CpuMarks::CpuMarks(const RunTrace& trace, const LaneTrace& lane) : lane_(&lane) {
    for (const Event& event : lane.events) {
        if (event.kind == EventKind::mark && event.bytes >= 0 &&
            trace.name(event.name) == kCpuMark) {
            marks_.emplace_back(event.start_ns, event.bytes);
        }
    }
}

std::int64_t CpuMarks::after(std::int64_t end_ns) const {
    const auto mark =
        std::lower_bound(marks_.begin(), marks_.end(), std::pair{end_ns, std::int64_t{-1}});
    if (mark == marks_.end()) {
        return -1;
    }
    // The first range (not mark) of the lane that begins at or after end_ns; the lane is in
    // start order, and marks are few, so the walk past them is short.
    const auto& events = lane_->events;
    auto next = std::lower_bound(events.begin(), events.end(), end_ns,
                                 [](const Event& e, std::int64_t t) { return e.start_ns < t; });
    while (next != events.end() && next->kind == EventKind::mark) {
        ++next;
    }
    return next == events.end() || mark->first <= next->start_ns ? mark->second : -1;
}

std::int64_t causal_pairs(std::int64_t prefix, std::int64_t length) {
    return balance::causal_pair_work(prefix, length) / 2;  // always even: (2p + 1 + ℓ)·ℓ
}

// Whether `lane` holds a pass range (forward or backward).
bool holds_passes(const RunTrace& trace, const LaneTrace& lane) {
    return std::any_of(lane.events.begin(), lane.events.end(), [&](const Event& event) {
        const Role role = trace.role(event);
        return role == Role::forward || role == Role::backward;
    });
}

// A pass also projects the launches that host threads without passes of their own made while
// it ran: PyTorch's backward runs on the autograd engine's thread for a GPU, while the thread
// whose `backward` range (NVTX, or the importer's recovered one) holds the pass waits
// (tests/data/gpu-torch-train.fulcrum: without this its backwards were timed by the one
// division kernel the main thread launched inside them).
void add_helper_launches(const RunTrace& trace, const RankTrace& rank,
                         const CorrelationMap<Interval>& work, const std::vector<bool>& helper,
                         std::vector<std::vector<Interval>>& projections) {
    std::vector<std::pair<std::int64_t, Interval>> launches;  // by launch start
    for (std::size_t l = 0; l < rank.lanes.size(); ++l) {
        if (!helper[l]) {
            continue;
        }
        for (const Event& event : rank.lanes[l].events) {
            if (event.kind == EventKind::api && event.correlation >= 0) {
                if (const Interval* launched = work.find(event.correlation)) {
                    launches.push_back({event.start_ns, *launched});
                }
            }
        }
    }
    if (launches.empty()) {
        return;
    }
    std::sort(launches.begin(), launches.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (std::size_t l = 0; l < rank.lanes.size(); ++l) {
        if (helper[l] || projections[l].empty()) {
            continue;
        }
        const LaneTrace& lane = rank.lanes[l];
        for (std::size_t i = 0; i < lane.events.size(); ++i) {
            const Event& event = lane.events[i];
            const Role role = trace.role(event);
            if (role != Role::forward && role != Role::backward) {
                continue;
            }
            auto it = std::lower_bound(
                launches.begin(), launches.end(), event.start_ns,
                [](const auto& launch, std::int64_t start) { return launch.first < start; });
            Interval& projected = projections[l][i];
            for (; it != launches.end() && it->first < event.end_ns; ++it) {
                projected = projected == Interval{}  // launched nothing itself
                                ? it->second
                                : Interval{std::min(projected.start, it->second.start),
                                           std::max(projected.end, it->second.end)};
            }
        }
    }
}

void find_rank_passes(const RunTrace& trace, const RankTrace& rank, std::vector<Pass>& passes) {
    const std::size_t first = passes.size();
    // Device times where launches link host ranges to device work; a rank whose trace has
    // streams but no launch records (no runtime API tracing) keeps its host times.
    std::vector<std::vector<Interval>> projections(rank.lanes.size());
    if (rank.has_device_lanes()) {
        const auto work = device_work_by_launch(rank, is_device_work);
        std::int64_t linked = 0;
        std::vector<bool> helper(rank.lanes.size(), false);
        for (std::size_t l = 0; l < rank.lanes.size(); ++l) {
            if (rank.lanes[l].info.kind == LaneKind::host_thread) {
                projections[l] = project_on_device(rank.lanes[l], work, linked);
                helper[l] = !holds_passes(trace, rank.lanes[l]);
            }
        }
        if (linked == 0) {
            projections.assign(rank.lanes.size(), {});
        } else {
            add_helper_launches(trace, rank, work, helper, projections);
        }
    }
    for (std::size_t l = 0; l < rank.lanes.size(); ++l) {
        if (rank.lanes[l].info.kind == LaneKind::host_thread) {
            walk_lane(trace, rank.lanes[l], projections[l], passes);
        }
    }
    const auto mine = passes.begin() + static_cast<std::ptrdiff_t>(first);
    for (auto pass = mine; pass != passes.end(); ++pass) {
        pass->attention_ns = std::max<std::int64_t>(pass->attention_ns, 0);
        pass->compute_ns = std::max<std::int64_t>(
            0, pass->wall_ns() - pass->pipeline_wait_ns - pass->collective_ns);
    }
    std::stable_sort(mine, passes.end(), [](const Pass& a, const Pass& b) {
        return std::tie(a.step, a.start_ns) < std::tie(b.step, b.start_ns);
    });
}

std::vector<Pass> find_passes(const RunTrace& trace) {
    std::vector<Pass> passes;
    for (const RankTrace& rank : trace.ranks) {
        find_rank_passes(trace, rank, passes);
    }
    return passes;
}

namespace {

// What each (rank, step, micro-batch) held, from rows in any order (a file's table order, or a
// run's in memory): each run of rows of one key is summed as it comes, then the runs are
// ordered by key and those of one key (rows of a micro-batch apart in the table) added up.
class HeldSums {
public:
    void add(const WorkloadEntry& entry) {
        if (parts_.empty() ||
            std::tie(parts_.back().rank, parts_.back().step, parts_.back().microbatch) !=
                std::tie(entry.rank, entry.step, entry.microbatch)) {
            parts_.push_back({entry.rank, entry.step, entry.microbatch, 0, 0, 0});
        }
        HeldWork& held = parts_.back();
        const std::int64_t length = std::max(0, entry.token_end - entry.token_begin);
        held.tokens += length;
        held.pairs += causal_pairs(entry.token_begin, length);
        ++held.documents;
    }

    // Exactly as long as the keys, with no growth's slack: millions at 1 B events.
    std::vector<HeldWork> finish() && {
        const auto key = [](const HeldWork& work) {
            return std::tie(work.rank, work.step, work.microbatch);
        };
        std::sort(parts_.begin(), parts_.end(),
                  [&](const HeldWork& a, const HeldWork& b) { return key(a) < key(b); });
        std::size_t keys = 0;
        for (std::size_t i = 0; i < parts_.size(); ++i) {
            keys += i == 0 || key(parts_[i - 1]) != key(parts_[i]) ? 1 : 0;
        }
        std::vector<HeldWork> held;
        held.reserve(keys);
        for (const HeldWork& part : parts_) {
            if (!held.empty() && key(held.back()) == key(part)) {
                held.back().tokens += part.tokens;
                held.back().pairs += part.pairs;
                held.back().documents += part.documents;
            } else {
                held.push_back(part);
            }
        }
        std::vector<HeldWork>().swap(parts_);
        return held;
    }

private:
    std::vector<HeldWork> parts_;
};

}  // namespace

WorkloadByRank WorkloadByRank::of(const RunTrace& trace) {
    WorkloadByRank out;
    out.held = held_work(trace);
    // The rows by step, each step's in table order.
    auto by_step = std::make_shared<std::vector<const WorkloadEntry*>>();
    by_step->reserve(trace.workload.size());
    for (const WorkloadEntry& entry : trace.workload) {
        by_step->push_back(&entry);
    }
    std::stable_sort(
        by_step->begin(), by_step->end(),
        [](const WorkloadEntry* a, const WorkloadEntry* b) { return a->step < b->step; });
    out.step_rows = [by_step](std::int32_t step) -> Result<std::vector<WorkloadEntry>> {
        const auto first = std::lower_bound(
            by_step->begin(), by_step->end(), step,
            [](const WorkloadEntry* entry, std::int32_t at) { return entry->step < at; });
        const auto last = std::upper_bound(
            first, by_step->end(), step,
            [](std::int32_t at, const WorkloadEntry* entry) { return at < entry->step; });
        std::vector<WorkloadEntry> rows;
        rows.reserve(static_cast<std::size_t>(last - first));
        for (auto it = first; it != last; ++it) {
            rows.push_back(**it);
        }
        return rows;
    };
    return out;
}

Result<WorkloadByRank> WorkloadByRank::of(const store::TraceReader& reader,
                                          const std::function<void(const WorkloadEntry&)>& also) {
    // One plain scan in the table's order (a merged run's: rank by rank, each rank's steps in
    // order): the rows of one (rank, step, micro-batch) come together and are summed as they
    // come; each run of rows of one step with consecutive rowids is remembered, for reading
    // that step back by rowid (a range scan, ~8× faster than SQLite's walk of
    // workload_by_step that looks every row up).
    struct StepRun {
        std::int32_t step;
        std::int64_t first, last;  // rowids
    };
    HeldSums sums;
    std::vector<StepRun> runs;
    auto scanned = reader.scan_workload([&](std::int64_t rowid, const WorkloadEntry& entry) {
        sums.add(entry);
        if (also) {
            also(entry);
        }
        if (runs.empty() || runs.back().step != entry.step || runs.back().last + 1 != rowid) {
            runs.push_back({entry.step, rowid, rowid});
        } else {
            runs.back().last = rowid;
        }
    });
    if (!scanned) {
        return scanned.error();
    }
    WorkloadByRank out;
    out.held = std::move(sums).finish();
    std::stable_sort(runs.begin(), runs.end(),
                     [](const StepRun& a, const StepRun& b) { return a.step < b.step; });
    auto shared_runs = std::make_shared<std::vector<StepRun>>(std::move(runs));
    out.step_rows = [&reader,
                     shared_runs](std::int32_t step) -> Result<std::vector<WorkloadEntry>> {
        const auto first =
            std::lower_bound(shared_runs->begin(), shared_runs->end(), step,
                             [](const StepRun& run, std::int32_t at) { return run.step < at; });
        const auto last =
            std::upper_bound(first, shared_runs->end(), step,
                             [](std::int32_t at, const StepRun& run) { return at < run.step; });
        std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
        std::size_t count = 0;  // exact: a range is rows of consecutive rowids
        for (auto it = first; it != last; ++it) {
            ranges.emplace_back(it->first, it->last);
            count += static_cast<std::size_t>(it->last - it->first + 1);
        }
        std::vector<WorkloadEntry> rows;
        rows.reserve(count);
        if (auto status = reader.workload_rows(ranges, rows); !status) {
            return status.error();
        }
        store::sort_workload(rows);  // as TraceReader::workload orders the whole table
        return rows;
    };
    return out;
}

std::vector<HeldWork> held_work(const RunTrace& trace) {
    HeldSums sums;
    for (const WorkloadEntry& entry : trace.workload) {
        sums.add(entry);
    }
    return std::move(sums).finish();
}

}  // namespace fulcrum::analysis
