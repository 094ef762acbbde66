#include "core/analysis/collectives.h"

#include <algorithm>
#include <functional>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "core/analysis/device_work.h"
#include "core/analysis/intervals.h"

namespace fulcrum::analysis {

namespace {

// Coordinates are -1 when unknown; +1 keeps them non-negative, 16 bits each is a 65535-wide
// grid dimension.
std::uint64_t pack(Role role, std::int32_t a, std::int32_t b, std::int32_t c) {
    const auto field = [](std::int32_t x) { return static_cast<std::uint64_t>(x + 1) & 0xffff; };
    return (static_cast<std::uint64_t>(role) << 48) | (field(a) << 32) | (field(b) << 16) |
           field(c);
}

// Which communicator of its dimension a rank's collective runs on: ranks that agree on every
// coordinate but the ones the collective spans. An unknown coordinate (-1 on every rank of an
// imported trace) puts everyone in one group, which is the right fallback.
std::uint64_t communicator_of(Role role, const RankInfo& r) {
    switch (role) {
        case Role::dp_collective:  // the engine's DP all-reduce runs over DP × CP
            return pack(role, r.pp, r.tp, -1);
        case Role::cp_collective:
            return pack(role, r.dp, r.pp, r.tp);
        case Role::tp_collective:
            return pack(role, r.dp, r.pp, r.cp);
        case Role::embedding_collective:  // first and last stage; only they emit it
            return pack(role, r.dp, r.cp, r.tp);
        default:
            return pack(role, -1, -1, -1);
    }
}

// The process group a PyTorch trace names in a collective kernel's args: Kineto writes
// "Process Group Name" ("0", "1", ...: numbered in creation order, which every rank shares)
// with "Collective name" on NCCL kernels (docs/import.md). Empty when the args have none.
std::string_view process_group_of(std::string_view args) {
    constexpr std::string_view kKey = "\"Process Group Name\"";
    const std::size_t key = args.find(kKey);
    if (key == std::string_view::npos) {
        return {};
    }
    std::size_t at = args.find_first_not_of(" \t\n\r", key + kKey.size());
    if (at == std::string_view::npos || args[at] != ':') {
        return {};
    }
    at = args.find_first_not_of(" \t\n\r", at + 1);
    if (at == std::string_view::npos || args[at] != '"') {
        return {};
    }
    const std::size_t end = args.find('"', at + 1);
    return end == std::string_view::npos ? std::string_view{} : args.substr(at + 1, end - at - 1);
}

// A collective of no engine dimension: its process group's when the trace names one (the top
// bit keeps it apart from pack()'s values), else one group of all ranks.
std::uint64_t communicator_of_unknown(const RunTrace& trace, const Event& event) {
    if (event.args.value == 0) {
        return pack(Role::collective, -1, -1, -1);
    }
    const std::string_view group = process_group_of(trace.name(event.args));
    if (group.empty()) {
        return pack(Role::collective, -1, -1, -1);
    }
    return (std::uint64_t{1} << 63) | (std::hash<std::string_view>{}(group) >> 1);
}

// Pipeline send/receive are point-to-point, matched by the cost model's receive rule.
bool is_matched_collective(Role role) {
    return is_communication(role) && role != Role::pipeline_send && role != Role::pipeline_recv &&
           role != Role::copy_wait && role != Role::reduction_wait;
}

}  // namespace

const CollectiveParticipant& CollectiveInstance::last_arrival() const {
    // Ties go to the first such participant (lowest rank), so the answer is deterministic.
    auto last = participants.begin();
    for (auto it = participants.begin(); it != participants.end(); ++it) {
        if (it->start_ns > last->start_ns) {
            last = it;
        }
    }
    return *last;
}

std::int64_t CollectiveInstance::total_wait_ns() const {
    if (participants.empty()) {
        return 0;
    }
    const std::int64_t last_start = last_arrival().start_ns;
    std::int64_t wait = 0;
    for (const CollectiveParticipant& p : participants) {
        wait += last_start - p.start_ns;
    }
    return wait;
}

namespace {

// A rank's call of a matched collective.
struct MatchedCall {
    const Event* event;
    Role role;
    std::int64_t order_ns;  // where the rank issued it: the event's start, for ordering
    std::int64_t start_ns;  // when it ran: the event's times, or on a GPU its kernels'
    std::int64_t end_ns;
};

// The GPU side of a rank's engine collectives (docs/analyses.md, "Stragglers"). On a rank with
// device work an engine range ("tp all-reduce") times the host call that enqueued NCCL's
// kernel, not the collective; the kernel, launched inside it (joined by correlation id), is
// the collective as it ran. So a range takes the span of the collective kernels it launched,
// as find_passes projects a pass onto its kernels, and those kernels are not matched again
// under their own names. Kernels launched inside a pipeline send or receive belong to it
// (point to point, passes/bubbles); kernels whose launch no engine range holds (a foreign
// program) stay calls of their own.
class DeviceCollectives {
public:
    explicit DeviceCollectives(const RankTrace& rank)
        : present_(rank.has_device_lanes()),
          kernels_(device_work_by_launch(
              rank, [](const Event& event) { return event.kind == EventKind::collective; })) {}

    bool present() const { return present_; }
    const Interval* launched(std::int64_t correlation) const { return kernels_.find(correlation); }
    // Called for every launch inside an engine communication range.
    void take(std::int64_t correlation) { taken_.push_back(correlation); }
    // After the host lanes: whether a kernel was launched inside an engine range.
    bool taken(std::int64_t correlation) {
        if (!taken_sorted_) {
            std::sort(taken_.begin(), taken_.end());
            taken_sorted_ = true;
        }
        return std::binary_search(taken_.begin(), taken_.end(), correlation);
    }

private:
    bool present_;
    CorrelationMap<Interval> kernels_;
    std::vector<std::int64_t> taken_;
    bool taken_sorted_ = false;
};

// One host lane's matched collectives, appended to `calls`; on a rank with device work each
// engine range takes the span of the kernels it launched.
void host_lane_calls(const RunTrace& trace, const LaneTrace& lane, DeviceCollectives& device,
                     std::vector<MatchedCall>& calls) {
    struct Open {
        std::int64_t end_ns;
        std::int64_t call;  // index into calls; -1 for a pipeline send or receive
    };
    std::vector<Open> open;  // the engine communication ranges around the event, innermost last
    const std::size_t first = calls.size();
    std::vector<Interval> ran;  // the kernels' span of calls[first + i]
    constexpr Interval kNothing{INT64_MAX, INT64_MIN};
    for (const Event& event : lane.events) {
        while (!open.empty() && open.back().end_ns <= event.start_ns) {
            open.pop_back();
        }
        if (event.kind == EventKind::mark) {
            continue;
        }
        if (event.kind == EventKind::api) {
            if (device.present() && !open.empty() && event.correlation >= 0) {
                device.take(event.correlation);
                const Interval* kernel = device.launched(event.correlation);
                if (kernel != nullptr && open.back().call >= 0) {
                    Interval& span = ran[static_cast<std::size_t>(open.back().call) - first];
                    span.start = std::min(span.start, kernel->start);
                    span.end = std::max(span.end, kernel->end);
                }
            }
            continue;
        }
        const Role role = trace.role(event);
        const bool engine = is_communication(role) && role != Role::collective;
        if (role == Role::reduction_start && device.present()) {
            // A started DP reduction: the kernel it launched is the collective, over the DP
            // group; kept only if it launched one (below).
            open.push_back({event.end_ns, static_cast<std::int64_t>(calls.size())});
            calls.push_back(
                {&event, Role::dp_collective, event.start_ns, event.start_ns, event.end_ns});
            ran.push_back(kNothing);
        } else if (is_matched_collective(role)) {
            if (engine) {
                open.push_back({event.end_ns, static_cast<std::int64_t>(calls.size())});
            }
            calls.push_back({&event, role, event.start_ns, event.start_ns, event.end_ns});
            ran.push_back(kNothing);
        } else if (engine) {
            open.push_back({event.end_ns, -1});
        }
    }
    std::size_t kept = first;
    for (std::size_t i = 0; i < ran.size(); ++i) {
        MatchedCall& call = calls[first + i];
        if (ran[i].start <= ran[i].end) {  // it launched kernels: they are its times
            call.start_ns = ran[i].start;
            call.end_ns = ran[i].end;
        } else if (device.present() && trace.role(*call.event) == Role::reduction_start) {
            continue;  // started on the host (a staged communicator): no collective to time
        }
        calls[kept++] = call;
    }
    calls.resize(kept);
}

// A rank's matched collectives in the order it issued them (k counts in that order over its
// lanes). Each lane is in start order already, so the lanes' runs are merged, stably, in lane
// order: the order a stable sort of their concatenation gives, without sorting a 1024-rank
// run's 20K calls a rank from scratch twice. Host lanes go first, so that the kernels their
// engine ranges launched are known before the device lanes are read.
void matched_calls(const RunTrace& trace, const RankTrace& rank, std::vector<MatchedCall>& calls) {
    calls.clear();
    DeviceCollectives device(rank);
    std::size_t sorted_end = 0;
    const auto merge_lane = [&] {
        if (sorted_end > 0 && calls.size() > sorted_end) {
            std::inplace_merge(
                calls.begin(), calls.begin() + static_cast<std::ptrdiff_t>(sorted_end), calls.end(),
                [](const MatchedCall& a, const MatchedCall& b) { return a.order_ns < b.order_ns; });
        }
        sorted_end = calls.size();
    };
    for (const LaneTrace& lane : rank.lanes) {
        if (lane.info.kind != LaneKind::gpu_stream) {
            host_lane_calls(trace, lane, device, calls);
            merge_lane();
        }
    }
    for (const LaneTrace& lane : rank.lanes) {
        if (lane.info.kind != LaneKind::gpu_stream) {
            continue;
        }
        for (const Event& event : lane.events) {
            if (event.kind == EventKind::mark) {
                continue;
            }
            const Role role = trace.role(event);
            if (!is_matched_collective(role) ||
                (event.kind == EventKind::collective && event.correlation >= 0 &&
                 device.taken(event.correlation))) {
                continue;
            }
            calls.push_back({&event, role, event.start_ns, event.start_ns, event.end_ns});
        }
        merge_lane();
    }
}

}  // namespace

std::vector<CollectiveCall> collective_calls(const RunTrace& trace, const RankTrace& rank) {
    std::vector<MatchedCall> calls;
    matched_calls(trace, rank, calls);
    std::vector<CollectiveCall> out;
    out.reserve(calls.size());
    for (const MatchedCall& call : calls) {
        const Event& event = *call.event;
        const std::uint64_t communicator = call.role == Role::collective
                                               ? communicator_of_unknown(trace, event)
                                               : communicator_of(call.role, rank.info);
        out.push_back({communicator, event.name, event.args, event.step, event.microbatch,
                       event.phase, call.role, call.start_ns, call.end_ns, event.bytes});
    }
    return out;
}

CollectiveMatcher::CollectiveMatcher(const RunTrace& trace, Closed closed)
    : closed_(std::move(closed)) {
    constexpr Role kEngineRoles[] = {Role::dp_collective, Role::cp_collective, Role::tp_collective,
                                     Role::embedding_collective};
    std::unordered_map<std::uint64_t, std::int32_t> last_rank;
    for (const RankTrace& rank : trace.ranks) {
        for (const Role role : kEngineRoles) {
            const std::uint64_t communicator = communicator_of(role, rank.info);
            std::int32_t& last = last_rank.try_emplace(communicator, 0).first->second;
            last = std::max(last, rank.info.rank);
            ++members_[communicator];
        }
    }
    for (const auto& [communicator, rank] : last_rank) {
        closing_at_[rank].push_back(communicator);
    }
}

// Hashing instead of sorting (a 10M-event run has millions of collective calls): every
// (communicator, name, step, micro-batch, phase) has its open instances indexed by k, and a
// rank's k-th call of that key joins instance k. Ranks come in ascending order, so
// participants come out sorted by rank.
void CollectiveMatcher::add(std::int32_t rank, std::span<const CollectiveCall> calls) {
    for (const CollectiveCall& call : calls) {
        const Key key{call.communicator, call.name, call.step, call.microbatch, call.phase};
        const auto [it, added] = open_.try_emplace(key);
        Open& open = it->second;
        if (added) {
            keys_of_[key.communicator].push_back(key);
        }
        if (open.next_k == 0) {
            used_.push_back(&open);
        }
        const std::int32_t k = open.next_k++;
        if (static_cast<std::size_t>(k) == open.by_k.size()) {
            CollectiveInstance instance{call.name,  call.role, call.step, call.microbatch,
                                        call.phase, k,         {}};
            instance.first_start_ns = call.start_ns;
            instance.sequence = sequence_++;
            // Its participants in one allocation, not one per doubling (millions of instances).
            if (const auto members = members_.find(call.communicator); members != members_.end()) {
                instance.participants.reserve(static_cast<std::size_t>(members->second));
            }
            open.by_k.push_back(std::move(instance));
        }
        CollectiveInstance& instance = open.by_k[static_cast<std::size_t>(k)];
        instance.first_start_ns = std::min(instance.first_start_ns, call.start_ns);
        instance.participants.push_back({rank, call.start_ns, call.end_ns, call.bytes, call.args});
    }
    for (Open* open : used_) {
        open->next_k = 0;
    }
    used_.clear();
    if (const auto closing = closing_at_.find(rank); closing != closing_at_.end()) {
        for (const std::uint64_t communicator : closing->second) {
            close(communicator);
        }
    }
}

void CollectiveMatcher::close(std::uint64_t communicator) {
    const auto keys = keys_of_.find(communicator);
    if (keys == keys_of_.end()) {
        return;
    }
    for (const Key& key : keys->second) {
        const auto open = open_.find(key);
        for (CollectiveInstance& instance : open->second.by_k) {
            if (instance.participants.size() >= 2) {
                closed_(std::move(instance));
            }
        }
        open_.erase(open);
    }
    keys_of_.erase(keys);
}

void CollectiveMatcher::finish() {
    std::vector<std::uint64_t> left;
    for (const auto& [communicator, keys] : keys_of_) {
        left.push_back(communicator);
    }
    // In a fixed order, so that whoever folds the instances sees the same order every time.
    std::sort(left.begin(), left.end());
    for (const std::uint64_t communicator : left) {
        close(communicator);
    }
}

void CollectiveMatcher::add_run(const RunTrace& trace) {
    for (const RankTrace& rank : trace.ranks) {
        add(rank.info.rank, collective_calls(trace, rank));
    }
    finish();
}

std::vector<CollectiveInstance> match_collectives(const RunTrace& trace) {
    std::vector<CollectiveInstance> instances;
    CollectiveMatcher(trace, [&](CollectiveInstance&& instance) {
        instances.push_back(std::move(instance));
    }).add_run(trace);
    std::sort(instances.begin(), instances.end(), in_run_order);
    return instances;
}

}  // namespace fulcrum::analysis
