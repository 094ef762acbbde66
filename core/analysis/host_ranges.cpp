#include "core/analysis/host_ranges.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>

#include "core/analysis/passes.h"
#include "core/util/random.h"

namespace fulcrum::analysis {

RankRanges RankRanges::of(const RunTrace& trace, const RankTrace& rank) {
    RankRanges out;
    out.rank = rank.info.rank;
    // On a GPU rank the host's wait only orders the streams; the reductions' kernels are the
    // time (collectives.h).
    const bool host_waits = !rank.has_device_lanes();
    for (const LaneTrace& lane : rank.lanes) {
        const bool host = lane.info.kind == LaneKind::host_thread;
        std::optional<CpuMarks> marks;
        for (const Event& event : lane.events) {
            const Role role = trace.role(event);
            if (role == Role::pipeline_send || role == Role::pipeline_recv) {
                out.transfers.push_back({event.name, event.step, event.microbatch, event.stage,
                                         role, event.start_ns, event.end_ns, event.bytes});
                continue;
            }
            if (event.kind == EventKind::mark) {
                continue;
            }
            if (role == Role::step) {
                if (host) {  // a device stream's step projections are no rank's step
                    out.steps.push_back({step_of_range(event, trace.name(event.name)),
                                         event.start_ns, event.end_ns, -1, host});
                }
            } else if (role == Role::optimizer) {
                if (!marks) {
                    marks.emplace(trace, lane);
                }
                out.optimizers.push_back(
                    {event.step, event.start_ns, event.end_ns, marks->after(event.end_ns), host});
            } else if (role == Role::reduction_wait && host && host_waits) {
                out.reduction_waits.push_back({event.step, event.start_ns, event.end_ns, -1, host});
            }
        }
    }
    // Kept until every rank is read: no slack from growing by doubling.
    out.transfers.shrink_to_fit();
    out.steps.shrink_to_fit();
    out.optimizers.shrink_to_fit();
    out.reduction_waits.shrink_to_fit();
    return out;
}

std::vector<RankRanges> rank_ranges(const RunTrace& trace) {
    std::vector<RankRanges> ranges;
    ranges.reserve(trace.ranks.size());
    for (const RankTrace& rank : trace.ranks) {
        ranges.push_back(RankRanges::of(trace, rank));
    }
    return ranges;
}

namespace {

// A transfer's key: its own for a send, its sender's for a receive. Degrees and stages fit 16
// bits (Pass::stage is one).
struct TransferKey {
    std::int32_t dp;
    std::int16_t cp, tp, stage, what;
    std::int32_t step, microbatch, occurrence;
    bool operator==(const TransferKey&) const = default;
};

struct TransferKeyHash {
    std::size_t operator()(const TransferKey& k) const {
        std::uint64_t h = splitmix64(std::uint32_t(k.dp));
        h = splitmix64(h ^ (std::uint64_t(std::uint16_t(k.cp)) |
                            std::uint64_t(std::uint16_t(k.tp)) << 16 |
                            std::uint64_t(std::uint16_t(k.stage)) << 32 |
                            std::uint64_t(std::uint16_t(k.what)) << 48));
        h = splitmix64(h ^ (std::uint64_t(std::uint32_t(k.step)) |
                            std::uint64_t(std::uint32_t(k.microbatch)) << 32));
        return static_cast<std::size_t>(splitmix64(h ^ std::uint32_t(k.occurrence)));
    }
};

struct PendingSend {
    std::int64_t start_ns, bytes;
};

}  // namespace

// Final pairs move to the table this many at a time (or a budget's worth, if less), not after
// every rank.
constexpr std::size_t kFinalPairsMoved = 1 << 16;

struct PipelineMatcher::State {
    State(const RunTrace& run, std::int64_t memory_bytes)
        : trace(run),
          moved_at(std::clamp<std::size_t>(
              static_cast<std::size_t>(memory_bytes) / sizeof(PipelinePair), 1, kFinalPairsMoved)),
          done(memory_bytes, "pipeline pairs") {}

    const RunTrace& trace;
    // Every rank has coordinates of its own: no two sends share a key, so a pair is final when
    // made. Otherwise the last send of a key wins, known only once every rank is in.
    bool unique_senders = true;
    std::unordered_map<std::string, std::int16_t> what_ids;  // "activations", "gradients"
    // What a transfer's name says after its first space, by the name's id, worked out once a
    // name rather than once a transfer: its what_ids entry (-1: the name has no space), and
    // whether it moves gradients (a backward transfer, from the next stage).
    struct NameWhat {
        std::int16_t id = -2;  // not yet seen
        bool backward = false;
    };
    std::vector<NameWhat> what_of_name;
    std::unordered_map<TransferKey, PendingSend, TransferKeyHash> sends;
    // Receives waiting for their send, by the send's key: the slot of their pair; and the slots
    // themselves, in order.
    std::unordered_map<TransferKey, std::size_t, TransferKeyHash> receives;
    std::set<std::size_t> waiting;
    // A slot for every receive as it comes (its place in the run's order), from slot
    // `first_slot` on; `send_start_ns` of one never matched is kUnmatched. Those before the
    // first still waiting are final: they go to `done` (a temporary file past its budget,
    // scratch_table.h), the matched ones, in order.
    std::vector<PipelinePair> pairs;
    std::size_t first_slot = 0;
    std::size_t moved_at;  // final slots that go to `done` at once
    ScratchTable<PipelinePair> done;
    std::vector<std::pair<TransferKey, std::size_t>> deferred;  // !unique_senders: every receive

    std::size_t ranks_in = 0;  // ranks added so far, for growing `pairs`

    static constexpr std::int64_t kUnmatched = std::numeric_limits<std::int64_t>::min();

    const NameWhat& what_of(StringId name) {
        if (name.value >= what_of_name.size()) {
            what_of_name.resize(name.value + 1);
        }
        NameWhat& known = what_of_name[name.value];
        if (known.id == -2) {
            const std::string_view text = trace.name(name);
            const std::size_t space = text.find(' ');
            known.id = -1;
            if (space != std::string_view::npos) {
                const std::string_view what = text.substr(space + 1);
                known.id = what_ids.try_emplace(std::string(what), std::int16_t(what_ids.size()))
                               .first->second;
                known.backward = what.find("gradient") != std::string_view::npos;
            }
        }
        return known;
    }

    // A slot for a receive: `pairs` grown to what the ranks so far project for all of them
    // rather than by doubling, which would hold up to twice a 1 B-event run's millions.
    std::size_t slot_for(const PipelinePair& pair) {
        if (pairs.size() == pairs.capacity() && !unique_senders) {
            const std::size_t ranks = std::max(trace.ranks.size(), ranks_in);
            const std::size_t projected = (pairs.size() + 1) * ranks / ranks_in;
            pairs.reserve(std::max(pairs.size() + 1, projected + projected / 16));
        }
        pairs.push_back(pair);
        return first_slot + pairs.size() - 1;
    }

    // The first `count` slots, final, to `done`: the matched ones, in order.
    Status move_final(std::size_t count) {
        std::vector<PipelinePair> matched;
        matched.reserve(count);
        for (std::size_t i = 0; i < count; ++i) {
            if (pairs[i].send_start_ns != kUnmatched) {
                matched.push_back(pairs[i]);
            }
        }
        pairs.erase(pairs.begin(), pairs.begin() + static_cast<std::ptrdiff_t>(count));
        first_slot += count;
        return done.append(matched);
    }

    void fill(std::size_t slot, const PendingSend& send) {
        PipelinePair& pair = pairs[slot - first_slot];
        pair.send_start_ns = send.start_ns;
        if (pair.bytes < 0) {
            pair.bytes = send.bytes;
        }
    }
};

PipelineMatcher::PipelineMatcher(const RunTrace& trace, std::int64_t memory_bytes)
    : state_(std::make_unique<State>(trace, memory_bytes)) {
    std::map<std::tuple<int, int, int, int>, int> seen;
    for (const RankTrace& rank : trace.ranks) {
        const RankInfo& r = rank.info;
        if (r.dp < 0 || r.cp < 0 || r.tp < 0 || r.pp < 0 || ++seen[{r.dp, r.cp, r.tp, r.pp}] > 1) {
            state_->unique_senders = false;
        }
    }
}

PipelineMatcher::~PipelineMatcher() = default;

Status PipelineMatcher::add(std::int32_t rank_id,
                            const std::vector<RankRanges::Transfer>& transfers) {
    State& s = *state_;
    const RankTrace* rank = s.trace.find_rank(rank_id);
    if (rank == nullptr) {
        return {};
    }
    const RankInfo& r = rank->info;
    ++s.ranks_in;
    // Each transfer's occurrence among the rank's of its name, step and micro-batch (in the
    // rank's order): the transfers sorted by those and then by place, two words each, and
    // counted along each run.
    struct Place {
        std::uint64_t name_step, microbatch_index;
        auto operator<=>(const Place&) const = default;
    };
    std::vector<Place> places(transfers.size());
    for (std::size_t i = 0; i < transfers.size(); ++i) {
        const RankRanges::Transfer& t = transfers[i];
        places[i] = {std::uint64_t(t.name.value) << 32 | std::uint32_t(t.step),
                     std::uint64_t(std::uint32_t(t.microbatch)) << 32 | i};
    }
    std::sort(places.begin(), places.end());
    std::vector<std::int32_t> occurrence(transfers.size(), 0);
    for (std::size_t i = 1; i < places.size(); ++i) {
        const Place &before = places[i - 1], &place = places[i];
        if (place.name_step == before.name_step &&
            place.microbatch_index >> 32 == before.microbatch_index >> 32) {
            occurrence[place.microbatch_index & 0xffffffffU] =
                occurrence[before.microbatch_index & 0xffffffffU] + 1;
        }
    }
    for (std::size_t index = 0; index < transfers.size(); ++index) {
        const RankRanges::Transfer& event = transfers[index];
        const State::NameWhat what = s.what_of(event.name);
        if (what.id < 0) {
            continue;
        }
        const std::int16_t what_id = what.id;
        const std::int32_t stage = event.stage >= 0 ? event.stage : r.pp;
        const std::int32_t k = occurrence[index];
        const auto key = [&](std::int32_t of_stage) {
            return TransferKey{r.dp,
                               static_cast<std::int16_t>(r.cp),
                               static_cast<std::int16_t>(r.tp),
                               static_cast<std::int16_t>(of_stage),
                               what_id,
                               event.step,
                               event.microbatch,
                               k};
        };
        if (event.role == Role::pipeline_send) {
            const TransferKey own = key(stage);
            const PendingSend send{event.start_ns, event.bytes};
            if (s.unique_senders) {
                if (const auto waiting = s.receives.find(own); waiting != s.receives.end()) {
                    s.fill(waiting->second, send);
                    s.waiting.erase(waiting->second);
                    s.receives.erase(waiting);
                    continue;
                }
            }
            s.sends.insert_or_assign(own, send);  // of two with one key, the later wins
            continue;
        }
        const TransferKey sender = key(what.backward ? stage + 1 : stage - 1);
        const std::size_t slot =
            s.slot_for({event.name, event.bytes, event.start_ns, event.end_ns, State::kUnmatched});
        if (!s.unique_senders) {
            s.deferred.emplace_back(sender, slot);
        } else if (const auto sent = s.sends.find(sender); sent != s.sends.end()) {
            s.fill(slot, sent->second);
            s.sends.erase(sent);
        } else if (s.receives.emplace(sender, slot).second) {
            s.waiting.insert(slot);
        }
    }
    // The final slots, those before the first still waiting, on to `done` once there are
    // enough of them (a receive whose sender will never come waits until finish).
    if (s.unique_senders) {
        const std::size_t final_slots =
            (s.waiting.empty() ? s.first_slot + s.pairs.size() : *s.waiting.begin()) - s.first_slot;
        if (final_slots >= s.moved_at) {
            return s.move_final(final_slots);
        }
    }
    return {};
}

Result<ScratchTable<PipelinePair>> PipelineMatcher::finish() {
    State& s = *state_;
    for (const auto& [sender, slot] : s.deferred) {
        if (const auto sent = s.sends.find(sender); sent != s.sends.end()) {
            s.fill(slot, sent->second);
        }
    }
    if (auto moved = s.move_final(s.pairs.size()); !moved) {
        return moved.error();
    }
    ScratchTable<PipelinePair> pairs = std::move(s.done);
    state_ = std::make_unique<State>(s.trace, pairs.memory_bytes());
    return pairs;
}

std::vector<PipelinePair> pipeline_pairs(const RunTrace& trace,
                                         const std::vector<RankRanges>& ranges) {
    // Held in memory as the run is: a table that never spills cannot fail to take a pair.
    PipelineMatcher matcher(trace, std::numeric_limits<std::int64_t>::max());
    for (const RankRanges& rank : ranges) {
        (void)matcher.add(rank.rank, rank.transfers);
    }
    return matcher.finish()->all();
}

}  // namespace fulcrum::analysis
