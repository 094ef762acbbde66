// RunTrace: a whole run in memory, the input of every analysis.
//
// Analyses are pure functions of a RunTrace (docs/code-map.md), so the CLI, the GUI and the HTML
// report compute the same numbers, and tests build small traces by hand without a database.
// load_run_trace reads a run database once; events stay 64-byte records grouped by lane, in
// start order with a parent before the children that start with it (the store's order).
//
// Names are resolved once into Roles: the engine's annotation names (docs/annotations.md)
// tell a forward pass from a pipeline receive, so analyses compare small enums, not strings.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/parallel/run_config.h"
#include "core/trace/model.h"
#include "core/util/result.h"

namespace fulcrum::store {
class TraceReader;
}

namespace fulcrum::analysis {

// What an event is to the analyses, from its name (and, for unknown names, its category).
enum class Role : std::uint8_t {
    other = 0,
    step,                  // "step": one optimizer step on one rank
    forward,               // "forward": one micro-batch's forward pass through this rank's stage
    backward,              // "backward", and "weight gradients" (the W pass of a split backward)
    attention,             // "attention" (may hold CP communication inside)
    pipeline_recv,         // "recv activations", "recv gradients": waiting for a neighbour stage
    pipeline_send,         // "send activations", "send gradients"
    cp_collective,         // "cp all-gather kv", "cp reduce-scatter dkv"
    tp_collective,         // "tp all-reduce", "tp all-gather", "tp reduce-scatter" (SP's)
    dp_collective,         // "dp all-reduce gradients"
    embedding_collective,  // "pp all-reduce embedding": first and last stage
    optimizer,             // "optimizer"
    collective,            // any other communication (NCCL kernels, foreign ranges)
    // "offload wait" (simulated runs): the wait for copies to or from host memory that the
    // pass's compute did not hide. Communication time in a pass, not a collective: no group
    // waits in it, so it is never matched across ranks.
    copy_wait,
    // "dp all-reduce start" (fulcrum-train's --overlap-grad-reduce): the host call that starts
    // one layer's DP reduction. Runtime work on a CPU rank; on a GPU rank the NCCL kernel it
    // launched is that layer's DP collective as it ran (collectives.h).
    reduction_start,
    // "dp all-reduce wait" (fulcrum-train's --overlap-grad-reduce): the wait after the passes
    // for the started reductions. Communication time, never matched (the transfers it waits
    // for are the starts'); the critical path's DP tail.
    reduction_wait,
};

Role role_of_name(std::string_view name, Category category, EventKind kind);

// A step range a program names by hand rather than with the fulcrum `step` annotation: "step
// 3", "train_step 3", "Training step 3", "iteration 3", "iter_3" (a word, one separator of
// space, '_', '#' or ':', then the number, the case ignored): its number. Such a range has the
// step role, and the analyses take its number where the event carries none (docs/annotations.md,
// "Other programs' ranges").
std::optional<std::int32_t> hand_made_step(std::string_view name);
// The step an event of the step role stands for: its own, else the one its name gives.
std::int32_t step_of_range(const Event& event, std::string_view name);

// A name the engine does not use is still communication when its category or kind says so.
constexpr Role role_with_category(Role named, Category category, EventKind kind) {
    if (named == Role::other &&
        (category == Category::communication || kind == EventKind::collective)) {
        return Role::collective;
    }
    return named;
}

// Any communication: pipeline send/receive and every collective.
bool is_communication(Role role);

struct LaneTrace {
    LaneInfo info;
    std::vector<Event> events;  // by start; on equal starts the longer (the parent) first
};

struct RankTrace {
    RankInfo info;
    // A deque, so a LaneTrace& from add_lane stays valid while more lanes are added.
    std::deque<LaneTrace> lanes;
    bool has_device_lanes() const;  // any gpu_stream lane holding events
};

// The layers stage `stage` holds: its model chunks' stage_layers when the run gave one count
// per model chunk (pp · virtual_stages; model chunk k·pp + s is stage s's chunk k), else the
// engine's even split (core/parallel/schedule.h).
int stage_layer_count(const RunConfig& config, int stage);

class RunTrace {
public:
    RunInfo run;
    RunConfig config;
    std::vector<RankTrace> ranks;  // by rank number
    // In store::sort_workload's order as load_run_trace reads it; in the table's own from
    // analyze_run_file (AnalyzeOptions::read_workload), for readers that only tally it.
    std::vector<WorkloadEntry> workload;

    // Interned names; the same ids as the store's when loaded from a file.
    StringId intern(std::string_view text);
    std::string_view name(StringId id) const;
    // Inline: every analysis asks it of every event (100 M on a 1024-rank run).
    Role role(const Event& event) const {
        const Role named =
            event.name.value < roles_.size() ? roles_[event.name.value] : Role::other;
        return role_with_category(named, event.category, event.kind);
    }

    const RankTrace* find_rank(std::int32_t rank) const;
    RankTrace* find_rank(std::int32_t rank);

    // Building by hand (tests, importers, the simulator's previews). add_rank keeps ranks
    // sorted; add_range interns the name and fills the semantic columns. The Event& it
    // returns is valid until the next event is added to that lane.
    RankTrace& add_rank(const RankInfo& info);
    LaneTrace& add_lane(std::int32_t rank, LaneKind kind, std::string_view name);
    Event& add_range(LaneTrace& lane, std::string_view name, Category category,
                     std::int64_t start_ns, std::int64_t end_ns, std::int32_t step = -1,
                     std::int32_t microbatch = -1, std::int16_t stage = -1,
                     Phase phase = Phase::none);
    // Sorts every lane into the store's order and refreshes the config's grid from the
    // ranks; call after building by hand.
    void finish();

    std::int64_t event_count() const;

private:
    friend Result<RunTrace> load_run_trace(const store::TraceReader&, const struct LoadOptions&);
    std::vector<std::string> strings_ = {""};  // index = StringId value
    std::vector<Role> roles_ = {Role::other};  // by StringId, for names of category other
    std::unordered_map<std::string, StringId> ids_;
    void set_string(StringId id, std::string text);
};

struct LoadOptions {
    // Called now and then with the fraction done; may be empty.
    std::function<void(double)> progress;
    // Checked between lanes; loading returns ErrorCode::cancelled when it turns true.
    const std::atomic<bool>* cancel = nullptr;
    // Read the file's event pack when it has a valid one (store/event_pack.h); false reads
    // the rows, for benchmarks and the tests that compare the two.
    bool read_event_pack = true;
    // False reads the run's metadata only (ranks, lanes with no events, names, config; not
    // the workload, 2.5 s for the 0.9 M documents of a 1024-rank run here): what the GUI's
    // paged timeline opens a large run with (views/timeline/paged_timeline.h), reading events
    // later a window at a time.
    bool read_events = true;
};

Result<RunTrace> load_run_trace(const store::TraceReader& reader, const LoadOptions& options = {});

// Reads a run file's ranks, one at a time on each worker of a produce_in_order pool
// (core/util/ordered_pool.h), for what reads a run a rank at a time (analyze_run_file,
// tally_run_file): each worker opens its own connection to the file (SQLite connections are
// not shared between threads) and refills one rank's event arrays rank after rank instead of
// taking fresh pages from the system for each (a 1 B-event run's lanes are tens of MB, which
// glibc maps and unmaps every time). The arrays are thread_local: they go when the pool's
// threads end, before what comes after the ranks allocates.
class RankLoader {
public:
    // `metadata`: the run loaded without its events (LoadOptions::read_events false).
    RankLoader(const store::TraceReader& reader, const RunTrace& metadata, int workers);
    ~RankLoader();
    RankLoader(const RankLoader&) = delete;
    RankLoader& operator=(const RankLoader&) = delete;
    // Rank `index` of the metadata, its lanes each in the store's order; valid until this
    // worker's next load.
    Result<const RankTrace*> load(int worker, std::size_t index);

private:
    const store::TraceReader& reader_;
    const RunTrace& metadata_;
    std::vector<std::unique_ptr<store::TraceReader>> readers_;  // by worker, opened on first use
};

}  // namespace fulcrum::analysis
