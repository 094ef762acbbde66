// Matching a collective's instances across the ranks that took part in it, and who arrived
// last: the straggler that everyone else waited for.
//
// Instances are matched by (name, step, micro-batch, phase, k): the k-th event of that key on
// each rank, among the ranks of one communicator, found from the 4D coordinates and the
// collective's dimension ("dp all-reduce gradients": ranks with the same pp and tp, any dp
// and cp; "cp …": same dp, pp, tp; "tp …": same dp, pp, cp; "pp all-reduce embedding": same
// dp, cp, tp, which only the first and last stage emit; anything else: all ranks). k counts a
// rank's events of one key in start order over all its lanes.
// On a rank with device work an engine range takes the times of the collective kernels it
// launched (joined by correlation id): the range timed only the host call that enqueued them.
// Those kernels, and the ones a pipeline send or receive launched, are not matched on their
// own. A kernel no engine range launched (a foreign program) is, within the process group its
// args name (Kineto's "Process Group Name"), else across all ranks: its name
// ("ncclDevKernel_AllReduce_…") says the algorithm, not the communicator.
// Pipeline point-to-point is not a collective; a receive is matched to its send by
// passes/bubbles.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/analysis/run_trace.h"

namespace fulcrum::analysis {

struct CollectiveParticipant {
    std::int32_t rank = 0;
    std::int64_t start_ns = 0;
    std::int64_t end_ns = 0;
    std::int64_t bytes = -1;
    StringId args;  // the event's args; the simulator's ranges say {"calls":"N"} there
};

struct CollectiveInstance {
    StringId name;
    Role role = Role::collective;
    std::int32_t step = -1;
    std::int32_t microbatch = -1;
    Phase phase = Phase::none;
    std::int32_t occurrence = 0;                      // k
    std::vector<CollectiveParticipant> participants;  // by rank

    // The participant with the latest start (the lowest rank on ties); its duration is the
    // transfer time.
    const CollectiveParticipant& last_arrival() const;
    // Σ over participants of (last start − own start): time spent waiting for the last one.
    std::int64_t total_wait_ns() const;
};

// Instances with at least two participants, in order of (step, first start).
std::vector<CollectiveInstance> match_collectives(const RunTrace& trace);

}  // namespace fulcrum::analysis
