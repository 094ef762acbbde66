#include "core/analysis/hot_switch.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "core/trace/annotations.h"

namespace fulcrum::analysis {
namespace {

using nlohmann::json;

// A number of the args, written as a JSON number (the simulator) or as text (a `key=value`
// message); 0 when absent.
double number_of(const json& args, const char* key) {
    const auto found = args.find(key);
    if (found == args.end()) {
        return 0;
    }
    if (found->is_number()) {
        return found->get<double>();
    }
    if (found->is_string()) {
        try {
            return std::stod(found->get<std::string>());
        } catch (...) {
            return 0;
        }
    }
    return 0;
}

std::string text_of(const json& args, const char* key) {
    const auto found = args.find(key);
    return found != args.end() && found->is_string() ? found->get<std::string>() : std::string();
}

json args_of(const RunTrace& trace, const Event& event) {
    if (event.args == StringId{}) {
        return json::object();
    }
    json args = json::parse(trace.name(event.args), nullptr, /*allow_exceptions=*/false);
    return args.is_object() ? args : json::object();
}

HotSwitchCost& cost_cell(HotSwitchAnalysis& analysis, const std::string& from,
                         const std::string& to, std::size_t ranks) {
    auto found = std::find_if(analysis.switches.begin(), analysis.switches.end(),
                              [&](const HotSwitchCost& c) { return c.from == from && c.to == to; });
    if (found == analysis.switches.end()) {
        HotSwitchCost cell;
        cell.from = from;
        cell.to = to;
        cell.sent.assign(ranks, 0);
        cell.received.assign(ranks, 0);
        found = analysis.switches.insert(analysis.switches.end(), std::move(cell));
    }
    return *found;
}

// Rank 0's buckets and switches: their times and what the whole switch moved.
void read_first_rank(const RunTrace& trace, const RankTrace& rank, HotSwitchAnalysis& analysis) {
    std::set<std::int32_t> steps;
    for (const LaneTrace& lane : rank.lanes) {
        for (const Event& event : lane.events) {
            const std::string_view name = trace.name(event.name);
            const std::int64_t ns = event.end_ns - event.start_ns;
            if (name == range_name::kHotSwitchBucket) {
                const json args = args_of(trace, event);
                const int index = static_cast<int>(number_of(args, "bucket"));
                if (index < 0 || index > 1024) {
                    continue;
                }
                if (analysis.buckets.size() <= static_cast<std::size_t>(index)) {
                    analysis.buckets.resize(static_cast<std::size_t>(index) + 1);
                }
                HotSwitchBucketTime& bucket = analysis.buckets[static_cast<std::size_t>(index)];
                bucket.bucket = index;
                bucket.bounds = text_of(args, "bounds");
                bucket.layout = text_of(args, "layout");
                bucket.steps += 1;
                bucket.documents += static_cast<std::int64_t>(number_of(args, "documents"));
                bucket.tokens += static_cast<std::int64_t>(number_of(args, "tokens"));
                bucket.microbatches += static_cast<std::int64_t>(number_of(args, "microbatches"));
                bucket.ns += ns;
                steps.insert(event.step);
            } else if (name == range_name::kHotSwitch) {
                const json args = args_of(trace, event);
                HotSwitchCost& cell = cost_cell(analysis, text_of(args, "from"),
                                                text_of(args, "to"), trace.ranks.size());
                cell.count += 1;
                cell.ns += ns;
                cell.bytes += number_of(args, "total_bytes");
                cell.inter_node_bytes += number_of(args, "inter_node_bytes");
                cell.largest_send_bytes =
                    std::max(cell.largest_send_bytes, number_of(args, "largest_send_bytes"));
                analysis.switching_ns += ns;
                const auto gradients = args.find("gradients");
                analysis.spans.push_back(
                    {event.step, event.start_ns, event.end_ns, cell.from, cell.to,
                     number_of(args, "total_bytes"), number_of(args, "largest_send_bytes"),
                     number_of(args, "inter_node_bytes"),
                     gradients != args.end() &&
                         (gradients->is_boolean() ? gradients->get<bool>()
                                                  : gradients->is_string() &&
                                                        gradients->get<std::string>() == "true")});
            }
        }
    }
    for (const LaneTrace& lane : rank.lanes) {
        for (const Event& event : lane.events) {
            if (trace.name(event.name) == range_name::kStep && steps.contains(event.step)) {
                analysis.step_ns += event.end_ns - event.start_ns;
            }
        }
    }
    analysis.steps = static_cast<int>(steps.size());
}

}  // namespace

const HotSwitchCost* HotSwitchAnalysis::cost(const std::string& from, const std::string& to) const {
    for (const HotSwitchCost& cell : switches) {
        if (cell.from == from && cell.to == to) {
            return &cell;
        }
    }
    return nullptr;
}

std::vector<HotSwitchBreakdownRow> breakdown_rows(const HotSwitchAnalysis& analysis) {
    using Kind = HotSwitchBreakdownRow::Kind;
    std::vector<HotSwitchBreakdownRow> rows;
    if (analysis.empty()) {
        return rows;
    }
    const double step_ns = std::max<double>(static_cast<double>(analysis.step_ns), 1.0);
    for (const HotSwitchBucketTime& b : analysis.buckets) {
        rows.push_back({Kind::bucket, b.bounds, b.layout, b.documents, b.tokens, b.microbatches,
                        b.ns, b.share});
    }
    rows.push_back({Kind::switching, "others (switching)", "", 0, 0, 0, analysis.switching_ns,
                    analysis.switching_share});
    rows.push_back({Kind::rest, "rest (optimizer step)", "", 0, 0, 0, analysis.rest_ns,
                    static_cast<double>(analysis.rest_ns) / step_ns});
    return rows;
}

RankHotSwitch rank_hot_switch(const RunTrace& trace, const RankTrace& rank, bool first) {
    RankHotSwitch out;
    if (first) {
        out.first.emplace();
        read_first_rank(trace, rank, *out.first);
    }
    for (const LaneTrace& lane : rank.lanes) {
        for (const Event& event : lane.events) {
            if (trace.name(event.name) != range_name::kHotSwitch) {
                continue;
            }
            const json args = args_of(trace, event);
            out.moves.push_back({text_of(args, "from"), text_of(args, "to"),
                                 number_of(args, "sent"), number_of(args, "received")});
        }
    }
    return out;
}

HotSwitchAnalysis analyze_hot_switch(const RunTrace& trace) {
    std::vector<RankHotSwitch> ranks;
    for (std::size_t r = 0; r < trace.ranks.size(); ++r) {
        ranks.push_back(rank_hot_switch(trace, trace.ranks[r], r == 0));
    }
    return analyze_hot_switch(trace, std::move(ranks));
}

HotSwitchAnalysis analyze_hot_switch(const RunTrace& trace, std::vector<RankHotSwitch> ranks) {
    if (ranks.empty() || !ranks.front().first) {
        return {};
    }
    HotSwitchAnalysis analysis = std::move(*ranks.front().first);
    std::erase_if(analysis.buckets, [](const HotSwitchBucketTime& b) { return b.steps == 0; });
    if (analysis.buckets.empty()) {
        analysis.switches.clear();
        analysis.spans.clear();
        return analysis;
    }
    std::sort(
        analysis.spans.begin(), analysis.spans.end(),
        [](const HotSwitchSpan& a, const HotSwitchSpan& b) { return a.start_ns < b.start_ns; });
    // Every rank's own bytes.
    for (std::size_t r = 0; r < ranks.size(); ++r) {
        for (const RankHotSwitch::Move& move : ranks[r].moves) {
            HotSwitchCost& cell = cost_cell(analysis, move.from, move.to, trace.ranks.size());
            cell.sent[r] += move.sent;
            cell.received[r] += move.received;
        }
    }
    std::int64_t buckets_ns = 0;
    const double step_ns = std::max<double>(static_cast<double>(analysis.step_ns), 1.0);
    for (HotSwitchBucketTime& bucket : analysis.buckets) {
        bucket.share = static_cast<double>(bucket.ns) / step_ns;
        buckets_ns += bucket.ns;
        if (std::find(analysis.layouts.begin(), analysis.layouts.end(), bucket.layout) ==
            analysis.layouts.end()) {
            analysis.layouts.push_back(bucket.layout);
        }
    }
    analysis.switching_share = static_cast<double>(analysis.switching_ns) / step_ns;
    analysis.rest_ns =
        std::max<std::int64_t>(0, analysis.step_ns - buckets_ns - analysis.switching_ns);
    return analysis;
}

}  // namespace fulcrum::analysis
