// What a run trained and how fast, for comparing runs: tokens and documents from its workload
// table, time from its steps. Balancers compared by steps train different documents (wlb
// holds long ones back and trains more short ones in the same steps), so their step times
// are not a like-for-like ratio; compared over whole epochs of the same documents
// (fulcrum-train --epochs, fulcrum simulate --epochs) they train the same tokens, and
// tokens/s is. The report and the GUI's Compare both show these figures from here.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/analysis/run_analysis.h"
#include "core/analysis/run_trace.h"

namespace fulcrum::report {

struct RunThroughput {
    int steps = 0;
    std::int64_t tokens = 0;     // every token the run trained, once per time it was trained
    std::int64_t documents = 0;  // distinct documents trained
    int epochs = 0;              // whole epochs (run config); 0 for a run by steps
    // Σ over steps of the step's span: the earliest rank's start to the latest rank's end.
    std::int64_t step_time_ns = 0;
    // Of the sorted (document, tokens trained) pairs: equal for runs that trained the same
    // documents, each as often.
    std::uint64_t documents_fingerprint = 0;

    bool has_tokens() const { return tokens > 0 && step_time_ns > 0; }
    double tokens_per_s() const;
};

// The tokens and documents a run trained, tallied a workload row at a time: from one rank per
// (DP replica, CP rank) — TP ranks and pipeline stages hold the same tokens as their group's
// first — so each trained token counts once. A report tallies a run file's rows as the
// analysis scans them (AnalyzeOptions::visit_workload), never holding them.
class TrainedTokens {
public:
    explicit TrainedTokens(std::vector<RankInfo> ranks);
    void add(const WorkloadEntry& row);
    // Its tokens, documents and documents' fingerprint into `out`.
    void fill(RunThroughput& out) const;

private:
    std::set<std::int32_t> counted_;                  // the first rank of each (dp, cp) group
    std::map<std::int64_t, std::int64_t> tokens_of_;  // by document
    std::int64_t tokens_ = 0;
};

// The run's tokens from trace.workload, or from `tokens` when given; its time from the
// analysis's steps.
RunThroughput run_throughput(const analysis::RunTrace& trace, const analysis::RunAnalysis& analysis,
                             const TrainedTokens* tokens = nullptr);

bool same_documents(const RunThroughput& a, const RunThroughput& b);

// tokens/s of `run` against `first`'s; nullopt unless both trained the same documents.
std::optional<double> tokens_per_s_vs(const RunThroughput& run, const RunThroughput& first);

// The sentence under a comparison: "Every run trained the same 200 documents (1 epoch)..."
// or why the tokens/s ratio is left out.
std::string comparison_basis(const std::vector<RunThroughput>& runs);

// The report's throughput section (docs/report.md): a table of runs with their balancer,
// steps, documents, tokens, step time, tokens/s and tokens/s against the first, and the
// comparison's basis. `labels` and `balancers` name the runs, in order.
std::string throughput_section_html(const std::vector<std::string>& labels,
                                    const std::vector<std::string>& balancers,
                                    const std::vector<RunThroughput>& runs);

}  // namespace fulcrum::report
