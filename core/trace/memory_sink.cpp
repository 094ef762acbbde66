#include "core/trace/memory_sink.h"

#include <algorithm>

namespace fulcrum {

namespace {

constexpr std::size_t kMaxProblems = 64;  // enough to see a pattern; bounded for fuzzing

template <typename Enum>
bool in_range(Enum value, int low, int high) {
    const int v = static_cast<int>(value);
    return v >= low && v <= high;
}

}  // namespace

void MemorySink::problem(std::string text) {
    if (problems_.size() < kMaxProblems) {
        problems_.push_back(std::move(text));
    }
}

void MemorySink::add_rank(const RankInfo& rank) {
    auto same = std::find_if(ranks_.begin(), ranks_.end(),
                             [&](const RankInfo& r) { return r.rank == rank.rank; });
    if (same != ranks_.end()) {
        *same = rank;
    } else {
        ranks_.push_back(rank);
    }
}

LaneId MemorySink::add_lane(std::int32_t rank, LaneKind kind, std::string_view name,
                            std::int64_t native_id) {
    LaneInfo lane;
    lane.id = LaneId{static_cast<std::uint32_t>(lanes_.size() + 1)};
    lane.rank = rank;
    lane.kind = kind;
    lane.name = std::string(name);
    lane.native_id = native_id;
    if (!in_range(kind, 0, 1)) {
        problem("lane " + std::to_string(lane.id.value) + " has kind " +
                std::to_string(static_cast<int>(kind)));
    }
    lanes_.push_back(std::move(lane));
    return lanes_.back().id;
}

void MemorySink::rename_lane(LaneId id, std::string_view name) {
    if (!id.valid() || id.value > lanes_.size()) {
        problem("rename of lane " + std::to_string(id.value) + ", which was never added");
        return;
    }
    lanes_[id.value - 1].name = std::string(name);
}

StringId MemorySink::intern(std::string_view text) {
    auto [at, added] = string_ids_.try_emplace(std::string(text), StringId{});
    if (added) {
        at->second = StringId{static_cast<std::uint32_t>(strings_.size())};
        strings_.emplace_back(text);
    }
    return at->second;
}

const LaneInfo* MemorySink::lane(LaneId id) const {
    return id.valid() && id.value <= lanes_.size() ? &lanes_[id.value - 1] : nullptr;
}

std::string_view MemorySink::string(StringId id) const {
    return id.value < strings_.size() ? std::string_view(strings_[id.value]) : std::string_view();
}

void MemorySink::add_events(const Event* events, std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) {
        const Event& event = events[i];
        const std::string at = "event " + std::to_string(event_count_) + ": ";
        if (lane(event.lane) == nullptr) {
            problem(at + "lane " + std::to_string(event.lane.value) + " was never added");
        }
        if (event.name.value >= strings_.size() || event.args.value >= strings_.size()) {
            problem(at + "a string id that was never interned");
        }
        if (event.end_ns < event.start_ns) {
            problem(at + "ends before it starts");
        }
        if (event.kind == EventKind::mark && event.end_ns != event.start_ns) {
            problem(at + "a mark with a duration");
        }
        if (!in_range(event.kind, 0, kEventKindCount - 1) ||
            !in_range(event.category, 0, kCategoryCount - 1) || !in_range(event.phase, -1, 2) ||
            !in_range(event.copy_kind, -1, 10) || event.copy_kind == CopyKind{0} ||
            !in_range(event.src_memory, -1, 7) || !in_range(event.dst_memory, -1, 7)) {
            problem(at + "an enum value the model does not define");
        }
        ++event_count_;
        if (events_.size() < max_events_) {
            events_.push_back(event);
        }
    }
}

std::int64_t MemorySink::skipped() const {
    std::int64_t total = 0;
    for (const ImportLogEntry& entry : import_log_) {
        total += entry.skipped;
    }
    return total;
}

}  // namespace fulcrum
