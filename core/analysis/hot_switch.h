// Hot switching (HotSPa, SOSP'24): where a hot-switched step's time went, laid out as HotSPa's
// breakdown (its Table 3: a row per length bucket under its layout, 'others' the switching),
// and what each switch from one layout to another moved and cost. Built from the
// `hot-switch bucket` and `hot-switch` ranges alone (docs/annotations.md, "Hot switching");
// docs/analyses.md, "Hot switching".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/analysis/run_trace.h"

namespace fulcrum::analysis {

struct HotSwitchBucketTime {
    int bucket = 0;      // index in the spec
    std::string bounds;  // "2048-8192"
    std::string layout;  // "dp2,tp2"
    int steps = 0;       // steps that played it
    std::int64_t documents = 0, tokens = 0, microbatches = 0;
    std::int64_t ns = 0;  // summed over the steps
    double share = 0;     // of the steps' time
};

// The switches from layout `from` to layout `to` (a cell of the switch-cost matrix).
struct HotSwitchCost {
    std::string from, to;
    int count = 0;
    std::int64_t ns = 0;                 // summed over the switches
    double bytes = 0;                    // every rank's sends, summed over the switches
    double largest_send_bytes = 0;       // of one rank in one switch
    double inter_node_bytes = 0;         // summed over the switches
    std::vector<double> sent, received;  // [rank]: summed over the switches
};

// One switch as rank 0 recorded it: where the timeline marks it.
struct HotSwitchSpan {
    std::int32_t step = -1;
    std::int64_t start_ns = 0, end_ns = 0;
    std::string from, to;
    double bytes = 0;               // every rank's sends
    double largest_send_bytes = 0;  // of one rank
    double inter_node_bytes = 0;
    bool gradients = false;  // the gradients accumulated so far moved too
};

struct HotSwitchAnalysis {
    int steps = 0;                             // steps with a bucket
    std::int64_t step_ns = 0;                  // those steps' time (rank 0's `step` ranges)
    std::vector<HotSwitchBucketTime> buckets;  // by bucket index
    std::int64_t switching_ns = 0;             // 'others': every switch
    double switching_share = 0;
    std::int64_t rest_ns = 0;             // the rest of the steps: the DP reduction, the optimizer
    std::vector<HotSwitchCost> switches;  // in order of first appearance
    std::vector<HotSwitchSpan> spans;     // every switch, in time order
    // The layouts in bucket order, without repeats: the matrix's rows and columns.
    std::vector<std::string> layouts;

    bool empty() const { return buckets.empty(); }
    // The cell layout `from` → layout `to`; null when no such switch was made.
    const HotSwitchCost* cost(const std::string& from, const std::string& to) const;
};

// The breakdown as `fulcrum analyze`, the GUI and the report show it: a row per bucket, then
// 'others' (every switch), then the rest of the steps (the DP reduction, the optimizer).
struct HotSwitchBreakdownRow {
    enum class Kind { bucket, switching, rest };
    Kind kind = Kind::bucket;
    std::string label;   // the bucket's bounds, "others (switching)", "rest (...)"
    std::string layout;  // buckets only
    std::int64_t documents = 0, tokens = 0, microbatches = 0;  // buckets only
    std::int64_t ns = 0;
    double share = 0;  // of the steps' time
};
std::vector<HotSwitchBreakdownRow> breakdown_rows(const HotSwitchAnalysis& analysis);

// Empty on a run without hot switching.
HotSwitchAnalysis analyze_hot_switch(const RunTrace& trace);

// The same a rank at a time (run_analysis.h): the first rank's buckets and switches and every
// rank's bytes moved, then the analysis from every rank's, in rank order.
struct RankHotSwitch {
    struct Move {
        std::string from, to;
        double sent = 0, received = 0;
    };
    std::optional<HotSwitchAnalysis> first;  // the first rank's: its buckets and switches
    std::vector<Move> moves;                 // this rank's `hot switch` ranges
};
RankHotSwitch rank_hot_switch(const RunTrace& trace, const RankTrace& rank, bool first);
HotSwitchAnalysis analyze_hot_switch(const RunTrace& trace, std::vector<RankHotSwitch> ranks);

}  // namespace fulcrum::analysis
