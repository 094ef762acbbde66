// Passes: one forward or backward pass of one micro-batch on one rank, with its time split
// into what it computed and what it waited for. Most analyses start from this table.
//
// A pass is a `forward`, `backward` or `weight gradients` range (docs/annotations.md) on a host
// lane; a split backward's W pass (phase wgrad) is a pass of its own with phase weight_grad, so
// a micro-batch's backward work is its backward and weight_grad passes together. Inside it,
// time in communication ranges is not compute: pipeline receives are waits for the neighbour
// stage (the bubble), CP/TP collectives are the group's exchange (and the wait for its slowest
// member). Attention is the `attention` ranges less the communication nested in them.
// Nested communication is counted once (an outer communication range hides inner ones).
//
// GPU-true times: on a rank with device work (CUPTI captures, nsys and Kineto imports) a host
// range only launches work, so every range is timed by its GPU projection, as Nsight Systems
// projects NVTX ranges: from the first kernel, copy or collective it launched (an API event
// inside it with the same correlation id) to the end of the last. A pass that launched nothing
// is not a pass there. CPU ranks, and ranks whose trace has no launch records to join by
// (runtime API tracing off), keep their host times.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/analysis/run_trace.h"
#include "core/util/result.h"

namespace fulcrum::analysis {

struct Pass {
    std::int32_t rank = 0;
    std::int32_t step = -1;
    std::int32_t microbatch = -1;
    std::int16_t stage = -1;
    std::int16_t chunk = 0;        // the stage's model chunk (virtual stage) under interleaved 1F1B
    Phase phase = Phase::forward;  // forward, backward, or weight_grad (a split backward's W)
    std::int64_t start_ns = 0;
    std::int64_t end_ns = 0;
    std::int64_t compute_ns = 0;        // wall time less every communication inside
    std::int64_t attention_ns = 0;      // attention less the communication inside it
    std::int64_t pipeline_wait_ns = 0;  // in pipeline receives
    std::int64_t collective_ns = 0;     // in CP/TP (and other) collectives inside the pass
    // The thread CPU time the pass used (its `fulcrum.cpu` mark, CPU ranks), else -1.
    std::int64_t cpu_ns = -1;

    std::int64_t wall_ns() const { return end_ns - start_ns; }
};

// The engine's `fulcrum.cpu` marks on one lane (kCpuMark, docs/annotations.md): each follows a
// pass or the optimizer step on its thread and says the thread CPU time it used. Refers to
// `lane`, which must outlive it.
class CpuMarks {
public:
    CpuMarks(const RunTrace& trace, const LaneTrace& lane);
    bool empty() const { return marks_.empty(); }
    // The CPU time of the lane's pass or optimizer step (the ranges the engine marks) that
    // ended at end_ns: the first mark at or after it, unless another range began before that
    // mark (whose mark it then is); -1 when none. A range nested in a pass ends before the
    // pass and would be given the pass's mark: ask only for the marked ranges.
    std::int64_t after(std::int64_t end_ns) const;

private:
    const LaneTrace* lane_;
    std::vector<std::pair<std::int64_t, std::int64_t>> marks_;  // (time, CPU ns), by time
};

// Every pass of the run, ordered by (rank, step, start).
std::vector<Pass> find_passes(const RunTrace& trace);
// One rank's, appended to `passes` in (step, start) order: find_passes rank by rank, for a run
// read a rank at a time (run_analysis.h). `rank` need not be one of trace.ranks; `trace`
// gives the names.
void find_rank_passes(const RunTrace& trace, const RankTrace& rank, std::vector<Pass>& passes);

// What a rank held in one micro-batch of one step, from the workload table: tokens and the
// causal q·k pairs its attention computes (WLB-LLM, docs/sources.md, "Workload balancing": a shard
// of length ℓ at prefix p of its document attends to p + 1 … p + ℓ keys, (2p + 1 + ℓ)·ℓ / 2 pairs).
struct HeldWork {
    std::int32_t rank = 0;
    std::int32_t step = 0;
    std::int32_t microbatch = 0;
    std::int64_t tokens = 0;
    std::int64_t pairs = 0;
    std::int64_t documents = 0;
};

// One row per (rank, step, micro-batch) that the workload table names, ordered that way.
std::vector<HeldWork> held_work(const RunTrace& trace);

// The workload table as the analyses read it: what each (rank, step, micro-batch) held, for
// every step at once (the cost model, imbalance and CP load look it up by pass), and the rows
// themselves a step at a time (CP load's alternatives), so that a 1 B-event run's ten million
// rows are never all in memory when they come from its file (issue 37, docs/analyses.md,
// "Runs larger than memory").
struct WorkloadByRank {
    std::vector<HeldWork> held;  // held_work's
    // The rows of one step in the order a reader of the run sees them (trace.workload's, or
    // store::sort_workload's for a file: the same), none for a step without rows. Fails only
    // where a file is read.
    std::function<Result<std::vector<WorkloadEntry>>(std::int32_t step)> step_rows;

    // From trace.workload, which must outlive it.
    static WorkloadByRank of(const RunTrace& trace);
    // From the run's file, which `reader` must keep open while it is used: one plain scan of
    // the table for the held work and where each step's rows lie, then each step's rows read
    // back by rowid when asked. `also`, when given, is handed every row the scan reads.
    static Result<WorkloadByRank> of(const store::TraceReader& reader,
                                     const std::function<void(const WorkloadEntry&)>& also = {});
};

std::int64_t causal_pairs(std::int64_t prefix, std::int64_t length);

}  // namespace fulcrum::analysis
