// Ranks that time-share a host's cores: how much of a core each rank had while it computed.
//
// The CPU backend runs a rank as one process of one thread. Where a host's ranks outnumber its
// cores (RunConfig::host_cores), the kernel's fair scheduler shares the cores among the ranks
// that are runnable: while n of them compute, each runs at min(1, cores / n) of a core, and a
// rank blocked in a receive (Open MPI's yield_when_idle) gives its core away. A pass measured
// there is stretched by whoever computed beside it, so a cost fitted on it would charge that
// stretch to every pass the simulator plays, also where the rank computes alone. The fit
// divides it out: a pass's work at a whole core is its compute time × the mean share it had
// (docs/simulate.md, "Ranks that share cores").
//
// "Computing" is read from the trace: a rank computes inside its passes, less the pipeline
// receive at a pass's start, and in its optimizer step.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/analysis/host_ranges.h"
#include "core/analysis/pass_table.h"
#include "core/analysis/run_trace.h"

namespace fulcrum::analysis {

class CoreShares {
public:
    // Empty (every share 1) when the run does not say its cores, or no host has more ranks.
    static CoreShares of(const RunTrace& trace, const PassTable& passes);
    // The same from the ranks' host ranges (host_ranges.h), for a run read a rank at a time.
    static CoreShares of(const RunTrace& trace, const PassTable& passes,
                         const std::vector<RankRanges>& ranges);

    // The mean share of a core `rank` had over [start, end] while computing in it.
    double share(std::int32_t rank, std::int64_t start, std::int64_t end) const;

    bool shared() const { return !hosts_.empty(); }
    // Whether of() will find shared cores: from the run's description alone, before any event
    // is read.
    static bool any_shared(const RunTrace& trace);

    // The interval of a pass in which its rank computes (after its pipeline receive).
    static std::pair<std::int64_t, std::int64_t> computing(const Pass& pass) {
        return {std::min(pass.start_ns + pass.pipeline_wait_ns, pass.end_ns), pass.end_ns};
    }

private:
    // One host's share over time: breakpoints and the integral of the share up to each.
    struct Host {
        std::vector<std::int64_t> at;
        std::vector<double> integral;  // ∫ share dt from at[0] to at[i]
        std::vector<double> share;     // over [at[i], at[i + 1])
    };
    std::vector<Host> hosts_;
    std::map<std::int32_t, std::size_t> host_of_;  // rank → its host
};

}  // namespace fulcrum::analysis
