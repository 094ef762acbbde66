#include "core/analysis/run_trace.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <optional>
#include <span>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/parallel/schedule.h"
#include "core/store/trace_reader.h"
#include "core/trace/annotations.h"

namespace fulcrum::analysis {

namespace {

struct NamedRole {
    std::string_view name;
    Role role;
};

// docs/annotations.md, "Ranges the engine emits".
constexpr std::array kEngineNames = {
    NamedRole{range_name::kStep, Role::step},
    NamedRole{range_name::kForward, Role::forward},
    NamedRole{range_name::kBackward, Role::backward},
    // Zero Bubble's W pass is backward work; find_passes files it under phase weight_grad.
    NamedRole{range_name::kWeightGradients, Role::backward},
    NamedRole{range_name::kAttention, Role::attention},
    NamedRole{range_name::kRecvActivations, Role::pipeline_recv},
    NamedRole{range_name::kRecvGradients, Role::pipeline_recv},
    NamedRole{range_name::kSendActivations, Role::pipeline_send},
    NamedRole{range_name::kSendGradients, Role::pipeline_send},
    NamedRole{range_name::kCpAllGather, Role::cp_collective},
    NamedRole{range_name::kCpReduceScatter, Role::cp_collective},
    NamedRole{range_name::kCpAllToAll, Role::cp_collective},
    NamedRole{range_name::kTpAllReduce, Role::tp_collective},
    // Sequence parallelism's pair in place of each all-reduce (docs/annotations.md).
    NamedRole{range_name::kTpAllGather, Role::tp_collective},
    NamedRole{range_name::kTpReduceScatter, Role::tp_collective},
    NamedRole{range_name::kDpAllReduce, Role::dp_collective},
    NamedRole{range_name::kZeroAllGather, Role::dp_collective},
    NamedRole{range_name::kZeroReduceScatter, Role::dp_collective},
    NamedRole{range_name::kEmbeddingAllReduce, Role::embedding_collective},
    NamedRole{range_name::kOffloadWait, Role::copy_wait},
    NamedRole{range_name::kDpAllReduceStart, Role::reduction_start},
    NamedRole{range_name::kDpAllReduceWait, Role::reduction_wait},
    NamedRole{range_name::kOptimizer, Role::optimizer},
};

Role role_of_name_only(std::string_view name) {
    for (const NamedRole& entry : kEngineNames) {
        if (entry.name == name) {
            return entry.role;
        }
    }
    if (hand_made_step(name)) {
        return Role::step;
    }
    // PyTorch's attention operators in an imported trace (Kineto, or nsys with emit_nvtx):
    // scaled_dot_product_attention and the kernels' own operators it dispatches to (flash,
    // efficient, cuDNN, math, and their backwards), so CP load measures a PyTorch run's
    // attention as it does the engine's (docs/import.md).
    if (name.starts_with("aten::scaled_dot_product_attention") ||
        name.starts_with("aten::_scaled_dot_product_")) {
        return Role::attention;
    }
    return Role::other;
}

}  // namespace

std::optional<std::int32_t> hand_made_step(std::string_view name) {
    constexpr std::array<std::string_view, 7> kWords = {
        "train_step", "training_step", "train step", "training step", "step", "iteration", "iter"};
    const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; };
    for (const std::string_view word : kWords) {
        if (name.size() < word.size() + 2) {
            continue;
        }
        bool same = true;
        for (std::size_t i = 0; i < word.size() && same; ++i) {
            same = lower(name[i]) == word[i];
        }
        const char separator = name[word.size()];
        if (!same ||
            (separator != ' ' && separator != '_' && separator != '#' && separator != ':')) {
            continue;
        }
        // Digits only, at most nine (from_chars into an unsigned takes no sign).
        const std::string_view digits = name.substr(word.size() + 1);
        std::uint32_t number = 0;
        const auto [end, error] =
            std::from_chars(digits.data(), digits.data() + digits.size(), number);
        if (digits.size() > 9 || error != std::errc() || end != digits.data() + digits.size()) {
            continue;
        }
        return static_cast<std::int32_t>(number);
    }
    return std::nullopt;
}

std::int32_t step_of_range(const Event& event, std::string_view name) {
    return event.step >= 0 ? event.step : hand_made_step(name).value_or(-1);
}

Role role_of_name(std::string_view name, Category category, EventKind kind) {
    return role_with_category(role_of_name_only(name), category, kind);
}

bool is_communication(Role role) {
    switch (role) {
        case Role::pipeline_recv:
        case Role::pipeline_send:
        case Role::cp_collective:
        case Role::tp_collective:
        case Role::dp_collective:
        case Role::embedding_collective:
        case Role::collective:
        case Role::copy_wait:
        case Role::reduction_wait:
            return true;
        default:
            return false;
    }
}

bool RankTrace::has_device_lanes() const {
    return std::any_of(lanes.begin(), lanes.end(), [](const LaneTrace& lane) {
        return lane.info.kind == LaneKind::gpu_stream && !lane.events.empty();
    });
}

int stage_layer_count(const RunConfig& config, int stage) {
    const parallel::Layout& layout = config.layout;
    const int p = std::max(layout.grid.pp, 1), v = std::max(layout.virtual_stages, 1);
    const int layers = config.model.layers;
    const bool given = parallel::check_stage_layers(layout.stage_layers, p * v, layers).ok();
    return parallel::stage_layer_total(
        stage, p, v, layers,
        given ? std::span<const int>(layout.stage_layers) : std::span<const int>{});
}

void RunTrace::set_string(StringId id, std::string text) {
    if (id.value >= strings_.size()) {
        strings_.resize(id.value + 1);
        roles_.resize(id.value + 1, Role::other);
    }
    roles_[id.value] = role_of_name_only(text);
    ids_.emplace(text, id);
    strings_[id.value] = std::move(text);
}

StringId RunTrace::intern(std::string_view text) {
    if (const auto it = ids_.find(std::string(text)); it != ids_.end()) {
        return it->second;
    }
    const StringId id{static_cast<std::uint32_t>(strings_.size())};
    set_string(id, std::string(text));
    return id;
}

std::string_view RunTrace::name(StringId id) const {
    return id.value < strings_.size() ? std::string_view(strings_[id.value]) : std::string_view();
}

const RankTrace* RunTrace::find_rank(std::int32_t rank) const {
    const auto it =
        std::lower_bound(ranks.begin(), ranks.end(), rank,
                         [](const RankTrace& r, std::int32_t n) { return r.info.rank < n; });
    return it != ranks.end() && it->info.rank == rank ? &*it : nullptr;
}

RankTrace* RunTrace::find_rank(std::int32_t rank) {
    return const_cast<RankTrace*>(std::as_const(*this).find_rank(rank));
}

RankTrace& RunTrace::add_rank(const RankInfo& info) {
    auto it = std::lower_bound(ranks.begin(), ranks.end(), info.rank,
                               [](const RankTrace& r, std::int32_t n) { return r.info.rank < n; });
    if (it != ranks.end() && it->info.rank == info.rank) {
        it->info = info;
        return *it;
    }
    RankTrace rank;
    rank.info = info;
    return *ranks.insert(it, std::move(rank));
}

LaneTrace& RunTrace::add_lane(std::int32_t rank, LaneKind kind, std::string_view name) {
    RankTrace* owner = find_rank(rank);
    if (owner == nullptr) {
        RankInfo info;
        info.rank = rank;
        owner = &add_rank(info);
    }
    std::uint32_t next_id = 1;
    for (const RankTrace& r : ranks) {
        for (const LaneTrace& lane : r.lanes) {
            next_id = std::max(next_id, lane.info.id.value + 1);
        }
    }
    LaneTrace lane;
    lane.info.id = LaneId{next_id};
    lane.info.rank = rank;
    lane.info.kind = kind;
    lane.info.name = std::string(name);
    owner->lanes.push_back(std::move(lane));
    return owner->lanes.back();
}

Event& RunTrace::add_range(LaneTrace& lane, std::string_view name, Category category,
                           std::int64_t start_ns, std::int64_t end_ns, std::int32_t step,
                           std::int32_t microbatch, std::int16_t stage, Phase phase) {
    Event event;
    event.start_ns = start_ns;
    event.end_ns = end_ns;
    event.lane = lane.info.id;
    event.name = intern(name);
    event.step = step;
    event.microbatch = microbatch;
    event.stage = stage;
    event.phase = phase;
    event.category = category;
    event.kind = category == Category::communication ? EventKind::collective : EventKind::range;
    lane.events.push_back(event);
    return lane.events.back();
}

void RunTrace::finish() {
    for (RankTrace& rank : ranks) {
        for (LaneTrace& lane : rank.lanes) {
            std::stable_sort(
                lane.events.begin(), lane.events.end(), [](const Event& a, const Event& b) {
                    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
                });
            lane.info.max_duration_ns = 0;
            for (const Event& event : lane.events) {
                lane.info.max_duration_ns =
                    std::max(lane.info.max_duration_ns, event.duration_ns());
            }
        }
    }
    std::vector<RankInfo> infos;
    for (const RankTrace& rank : ranks) {
        infos.push_back(rank.info);
    }
    config = parse_run_config(run.config_json, infos);
}

std::int64_t RunTrace::event_count() const {
    std::int64_t count = 0;
    for (const RankTrace& rank : ranks) {
        for (const LaneTrace& lane : rank.lanes) {
            count += static_cast<std::int64_t>(lane.events.size());
        }
    }
    return count;
}

namespace {

bool in_store_order(const Event& a, const Event& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
}

// Events of each lane id, read from one slice of the event table.
using LaneBuckets = std::vector<std::vector<Event>>;

// Reads every event of a file into lane buckets, one set per thread. The event table is read
// sequentially in rowid slices, one per thread, each on its own connection (merge writes events
// clustered by lane and time, so the slices' pieces of a lane concatenate in order); reading
// through the (lane, start) index instead, lane by lane, was 2.2× slower than a plain scan on a
// 10M-event run. The event pack decodes ~10× faster than the rows and is read the same way.
class EventLoader {
public:
    EventLoader(const store::TraceReader& reader, const LoadOptions& options,
                std::uint32_t max_lane)
        : reader_(reader), options_(options), max_lane_(max_lane) {}

    Result<std::vector<LaneBuckets>> run() {
        auto pack = options_.read_event_pack
                        ? reader_.event_pack()
                        : Result<std::optional<store::TraceReader::EventPack>>(std::nullopt);
        if (!pack) {
            return pack.error();
        }
        packed_ = pack->has_value();
        auto rowids = packed_ ? Result<std::pair<std::int64_t, std::int64_t>>(
                                    std::pair{(*pack)->first_block, (*pack)->end_block})
                              : reader_.event_rowids();
        if (!rowids) {
            return rowids.error();
        }
        first_ = rowids->first;
        rows_ = rowids->second - rowids->first;
        // Rows are cheap to split finely; pack blocks hold up to 64K events each.
        const std::int64_t slice_at_least = packed_ ? 8 : 500'000;
        threads_ = static_cast<int>(std::clamp<std::int64_t>(
            rows_ / slice_at_least, 1,
            std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 4)));
        total_events_ = packed_ ? (*pack)->events : rows_;
        buckets_.assign(static_cast<std::size_t>(threads_),
                        LaneBuckets(static_cast<std::size_t>(max_lane_) + 1));
        statuses_.assign(static_cast<std::size_t>(threads_), Status{});

        std::vector<std::thread> pool;
        for (int t = 1; t < threads_; ++t) {
            pool.emplace_back([this, t] { read_slice(t); });
        }
        read_slice(0);
        for (auto& thread : pool) {
            thread.join();
        }
        for (const Status& status : statuses_) {
            if (!status) {
                return status.error();
            }
        }
        if (stop_.load() || cancelled()) {
            return Error{ErrorCode::cancelled, "loading '" + reader_.path() + "' was cancelled"};
        }
        return std::move(buckets_);
    }

private:
    bool cancelled() const { return options_.cancel != nullptr && options_.cancel->load(); }

    // Counts decoded events, reports progress from thread 0, and says whether to go on.
    bool keep_going(int t, std::int64_t events_since) {
        done_.fetch_add(events_since);
        if (stop_.load() || cancelled()) {
            stop_.store(true);
            return false;
        }
        if (t == 0 && options_.progress) {
            options_.progress(0.9 * double(done_.load()) /
                              double(std::max<std::int64_t>(total_events_, 1)));
        }
        return true;
    }

    void read_slice(int t) {
        const std::int64_t begin = first_ + rows_ * t / threads_;
        const std::int64_t end = first_ + rows_ * (t + 1) / threads_;
        std::optional<store::TraceReader> own;
        const store::TraceReader* source = &reader_;
        if (t > 0) {  // SQLite connections are not shared between threads
            auto opened = store::TraceReader::open(reader_.path());
            if (!opened) {
                statuses_[t] = opened.error();
                stop_.store(true);
                return;
            }
            own.emplace(std::move(*opened));
            source = &*own;
        }
        statuses_[t] =
            packed_ ? read_pack(*source, t, begin, end) : read_rows(*source, t, begin, end);
    }

    Status read_pack(const store::TraceReader& source, int t, std::int64_t begin,
                     std::int64_t end) {
        LaneBuckets& lanes = buckets_[static_cast<std::size_t>(t)];
        std::vector<Event>* last_block = nullptr;
        std::size_t last_size = 0;
        return source.scan_event_pack(
            begin, end,
            [&](LaneId lane) {
                last_block = lane.value <= max_lane_ ? &lanes[lane.value] : nullptr;
                last_size = last_block != nullptr ? last_block->size() : 0;
                return last_block;
            },
            [&] {
                const std::int64_t decoded =
                    last_block != nullptr ? std::int64_t(last_block->size() - last_size) : 0;
                last_block = nullptr;
                return keep_going(t, decoded);
            });
    }

    Status read_rows(const store::TraceReader& source, int t, std::int64_t begin,
                     std::int64_t end) {
        LaneBuckets& lanes = buckets_[static_cast<std::size_t>(t)];
        std::int64_t since_check = 0;
        return source.scan_events(begin, end, [&](const Event& event) {
            if (event.lane.value <= max_lane_) {
                lanes[event.lane.value].push_back(event);
            }
            if (++since_check == 65536) {
                const bool go_on = keep_going(t, since_check);
                since_check = 0;
                return go_on;
            }
            return true;
        });
    }

    const store::TraceReader& reader_;
    const LoadOptions& options_;
    const std::uint32_t max_lane_;
    bool packed_ = false;
    std::int64_t first_ = 0, rows_ = 0, total_events_ = 0;
    int threads_ = 1;
    std::vector<LaneBuckets> buckets_;
    std::vector<Status> statuses_;
    std::atomic<std::int64_t> done_{0};
    std::atomic<bool> stop_{false};
};

// Every lane of the file from its pieces in the slices. Slices are contiguous rowid ranges of a
// lane-clustered table, so most lanes lie in one slice and are moved, not copied; only a lane
// cut by a slice boundary is joined.
void join_lanes(RunTrace& trace, const store::TraceReader& reader,
                std::vector<LaneBuckets>& buckets) {
    for (const LaneInfo& info : reader.lanes()) {
        if (trace.find_rank(info.rank) == nullptr) {
            RankInfo rank;
            rank.rank = info.rank;
            trace.add_rank(rank);
        }
        LaneTrace lane;
        lane.info = info;
        for (LaneBuckets& slice : buckets) {
            auto& piece = slice[info.id.value];
            if (lane.events.empty()) {
                lane.events = std::move(piece);
            } else if (!piece.empty()) {
                lane.events.insert(lane.events.end(), piece.begin(), piece.end());
                std::vector<Event>().swap(piece);
            }
        }
        // Files written by a killed writer, or by an importer, need not be clustered.
        if (!std::is_sorted(lane.events.begin(), lane.events.end(), in_store_order)) {
            std::stable_sort(lane.events.begin(), lane.events.end(), in_store_order);
        }
        trace.find_rank(info.rank)->lanes.push_back(std::move(lane));
    }
}

}  // namespace

RankLoader::RankLoader(const store::TraceReader& reader, const RunTrace& metadata, int workers)
    : reader_(reader), metadata_(metadata), readers_(static_cast<std::size_t>(workers)) {}

RankLoader::~RankLoader() = default;

Result<const RankTrace*> RankLoader::load(int worker, std::size_t index) {
    auto& own = readers_[static_cast<std::size_t>(worker)];
    if (!own) {
        auto opened = store::TraceReader::open(reader_.path());
        if (!opened) {
            return opened.error();
        }
        own = std::make_unique<store::TraceReader>(std::move(*opened));
    }
    thread_local RankTrace into;
    const RankTrace& rank = metadata_.ranks[index];
    into.info = rank.info;
    into.lanes.resize(rank.lanes.size());
    for (std::size_t i = 0; i < rank.lanes.size(); ++i) {
        LaneTrace& lane = into.lanes[i];
        lane.info = rank.lanes[i].info;
        lane.events.clear();
        // In the store's order, as load_run_trace orders a lane.
        if (auto status = own->read_lane(lane.info.id, lane.events); !status) {
            return status.error();
        }
    }
    return &into;
}

Result<RunTrace> load_run_trace(const store::TraceReader& reader, const LoadOptions& options) {
    RunTrace trace;
    trace.run = reader.run();
    for (std::size_t id = 1; id < reader.string_count(); ++id) {
        trace.set_string(StringId{static_cast<std::uint32_t>(id)},
                         std::string(reader.string(StringId{static_cast<std::uint32_t>(id)})));
    }
    for (const RankInfo& info : reader.ranks()) {
        trace.add_rank(info);
    }
    std::uint32_t max_lane = 0;
    for (const LaneInfo& info : reader.lanes()) {
        max_lane = std::max(max_lane, info.id.value);
    }
    auto buckets = options.read_events
                       ? EventLoader(reader, options, max_lane).run()
                       : Result<std::vector<LaneBuckets>>(std::vector<LaneBuckets>{});
    if (!buckets) {
        return buckets.error();
    }
    join_lanes(trace, reader, *buckets);
    if (options.progress) {
        options.progress(0.95);
    }
    if (options.read_events) {
        auto workload = reader.workload();
        if (!workload) {
            return workload.error();
        }
        trace.workload = std::move(*workload);
    }
    trace.config = parse_run_config(trace.run.config_json, reader.ranks());
    if (options.progress) {
        options.progress(1.0);
    }
    return trace;
}

}  // namespace fulcrum::analysis
