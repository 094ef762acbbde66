#include "core/analysis/run_analysis.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <future>
#include <optional>
#include <type_traits>

#include <nlohmann/json.hpp>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "core/analysis/host_ranges.h"
#include "core/store/trace_reader.h"
#include "core/util/ordered_pool.h"

namespace fulcrum::analysis {

namespace {

// Members keep the order they are written in, as docs/analyses.md lists them.
using json = nlohmann::ordered_json;

Status check_cancel(const AnalyzeOptions& options) {
    if (options.cancel != nullptr && options.cancel->load()) {
        return Error{ErrorCode::cancelled, "the analysis was cancelled"};
    }
    return {};
}

// NaN (a missing matrix cell) has no JSON spelling: null.
json number_or_null(double value) {
    return std::isfinite(value) ? json(value) : json(nullptr);
}

// A std::optional or a PackedOptional.
template <typename Optional>
json optional_json(const Optional& value) {
    return value ? json(*value) : json(nullptr);
}

// "" is how the structs spell an unknown name.
json text_or_null(const std::string& text) {
    return text.empty() ? json(nullptr) : json(text);
}

json matrix_json(const Matrix& matrix) {
    json values = json::array();
    for (std::size_t r = 0; r < matrix.rows.size(); ++r) {
        json row = json::array();
        for (std::size_t c = 0; c < matrix.columns.size(); ++c) {
            row.push_back(number_or_null(matrix.at(r, c)));
        }
        values.push_back(std::move(row));
    }
    json imbalance = json::array();
    for (double value : matrix.column_imbalance()) {
        imbalance.push_back(number_or_null(value));
    }
    return {{"rows", matrix.rows},
            {"columns", matrix.columns},
            {"values", std::move(values)},
            {"column_imbalance", std::move(imbalance)}};
}

json sharding_json(const std::vector<std::pair<std::string, double>>& by_sharding) {
    json object = json::object();
    for (const auto& [name, value] : by_sharding) {
        object[name] = number_or_null(value);
    }
    return object;
}

// One line per headline figure the run cannot have for lack of data, beyond what the notes on
// passes and the workload table already say, so that a "—" always has its reason. A run that
// has no such dimension (pp = 1, cp = 1) lacks nothing: its bubble and CP sections say so
// where they would be, and a complete run has no notes.
void add_notes_on_missing_figures(const RunTrace& trace, bool any_passes, RunAnalysis& analysis) {
    const RunConfig& config = trace.config;
    if (any_passes) {
        if (!config.hot_switch.empty()) {
            analysis.notes.push_back(
                "hot-switched run: each length bucket ran its own pipeline shape, which the "
                "ranks' one set of coordinates does not describe: no pipeline bubbles (the hot "
                "switching breakdown has each bucket's time under its layout)");
        }
        if (!config.grid_known) {
            analysis.notes.push_back(
                "grid unknown (the ranks have no DP/TP/PP/CP coordinates): no pipeline bubbles "
                "and no CP load");
        }
        if (!analysis.imbalance.compute_imbalance) {
            analysis.notes.push_back(
                "no step with passes on two ranks or more: no imbalance across ranks (max/mean "
                "over one rank is 1 by definition)");
        }
    }
    if (!analysis.imbalance.stragglers.empty()) {
        if (!config.grid_known) {
            analysis.notes.push_back(
                "stragglers: without coordinates, collectives were matched across all ranks by "
                "name, step and order, not by communicator");
        }
        const bool aligned_by_utc_only =
            trace.ranks.size() > 1 &&
            std::any_of(trace.ranks.begin(), trace.ranks.end(), [](const RankTrace& rank) {
                return rank.info.alignment == ClockAlignment::utc_offset;
            });
        if (aligned_by_utc_only) {
            analysis.notes.push_back(
                "stragglers: ranks were aligned by their hosts' UTC offsets only (no clock-sync "
                "marks), so who arrived last is only as certain as the hosts' clock "
                "synchronisation");
        }
    }
}

// The overlap rows of KernelTimeByType::ns, by the bit set of types running at once.
constexpr const char* kKernelTimeKeys[8] = {"",
                                            "computation_ns",
                                            "communication_ns",
                                            "computation_communication_ns",
                                            "memory_ns",
                                            "computation_memory_ns",
                                            "communication_memory_ns",
                                            "computation_communication_memory_ns"};

// null on a run without device activity: none of these figures was measured.
json kernels_json(const RunAnalysis& analysis) {
    if (!analysis.has_device_activity) {
        return nullptr;
    }
    const KernelAnalysis& k = analysis.kernels;
    json by_type = json::array();
    for (const KernelTimeByType& row : k.time_by_type) {
        json item = {{"rank", row.rank}};
        for (int mask = 1; mask < 8; ++mask) {
            item[kKernelTimeKeys[mask]] = row.ns[mask];
        }
        item["busy_ns"] = row.busy_ns();
        item["kernel_span_ns"] = row.kernel_span_ns;
        item["idle_ns"] = row.idle_ns;
        by_type.push_back(std::move(item));
    }
    json top = json::array();
    for (const KernelStats& row : k.top_kernels) {
        top.push_back({{"name", row.name},
                       {"type", std::string(to_string(row.type))},
                       {"count", row.count},
                       {"total_ns", row.total_ns},
                       {"mean_ns", row.mean_ns()},
                       {"min_ns", row.min_ns},
                       {"max_ns", row.max_ns},
                       {"ranks", row.ranks},
                       {"rank_total_min_ns", row.rank_total_min_ns},
                       {"rank_total_max_ns", row.rank_total_max_ns},
                       {"slowest_rank", row.slowest_rank}});
    }
    json idle = json::array();
    for (const StreamIdle& row : k.idle) {
        idle.push_back({{"rank", row.rank},
                        {"stream", row.lane},
                        {"kernels", row.kernels},
                        {"host_wait_ns", row.host_wait_ns},
                        {"kernel_wait_ns", row.kernel_wait_ns},
                        {"other_ns", row.other_ns},
                        {"idle_ns", row.idle_ns()},
                        {"mean_queue_length", row.mean_queue_length},
                        {"max_queue_length", row.max_queue_length}});
    }
    json launches = json::array();
    for (const LaunchStats& row : k.launches) {
        launches.push_back({{"rank", row.rank},
                            {"launches", row.launches},
                            {"cpu_total_ns", row.cpu_total_ns},
                            {"gpu_total_ns", row.gpu_total_ns},
                            {"mean_delay_ns", row.mean_delay_ns()},
                            {"max_delay_ns", row.delay_max_ns},
                            {"short_kernels", row.short_kernels},
                            {"slow_calls", row.slow_calls},
                            {"delay_outliers", row.delay_outliers}});
    }
    return {{"time_by_type", std::move(by_type)},
            {"top_kernels", std::move(top)},
            {"idle", std::move(idle)},
            {"launches", std::move(launches)}};
}

json communication_json(const std::vector<CollectiveSummary>& summaries) {
    json rows = json::array();
    for (const CollectiveSummary& row : summaries) {
        // Without bytes or transfer time there is no bandwidth to speak of, not a zero one.
        const bool measured = row.bytes > 0 && row.transfer_ns > 0;
        rows.push_back({{"name", row.name},
                        {"kind", std::string(to_string(row.kind))},
                        {"ranks", row.ranks},
                        {"calls", row.calls},
                        {"bytes", row.bytes},
                        {"transfer_ns", row.transfer_ns},
                        {"wait_ns", row.wait_ns},
                        {"algbw_gb_s", measured ? json(row.algbw_gb_s) : json(nullptr)},
                        {"busbw_gb_s", measured ? json(row.busbw_gb_s) : json(nullptr)}});
    }
    return rows;
}

// -1 is how a segment spells "no micro-batch / no stage" (the optimizer, a collective).
json index_or_null(std::int32_t value) {
    return value >= 0 ? json(value) : json(nullptr);
}

template <typename Key>
json shares_json(const std::map<Key, std::int64_t>& shares, const char* key_name) {
    json rows = json::array();
    for (const auto& [key, ns] : shares) {
        json item;
        if constexpr (std::is_same_v<Key, std::string>) {
            item[key_name] = key;
        } else {
            item[key_name] = index_or_null(static_cast<std::int32_t>(key));
        }
        item["ns"] = ns;
        rows.push_back(std::move(item));
    }
    return rows;
}

json critical_paths_json(const std::vector<CriticalPath>& paths) {
    json rows = json::array();
    for (const CriticalPath& path : paths) {
        json segments = json::array();
        for (const CriticalSegment& s : path.segments) {
            segments.push_back(
                {{"rank", s.rank},
                 {"what", s.what},
                 {"microbatch", index_or_null(s.microbatch)},
                 {"stage", index_or_null(s.stage)},
                 {"phase", s.is_pass() ? json(std::string(to_string(s.phase))) : json(nullptr)},
                 {"start_ns", s.start_ns},
                 {"end_ns", s.end_ns}});
        }
        json what_if = json::array();
        for (const WhatIf& w : path.what_if) {
            what_if.push_back({{"rank", w.rank},
                               {"microbatch", w.microbatch},
                               {"stage", w.stage},
                               {"phase", std::string(to_string(w.phase))},
                               {"busy_ns", w.busy_ns},
                               {"typical_ns", w.typical_ns},
                               {"step_saving_ns", w.step_saving_ns}});
        }
        rows.push_back({{"step", path.step},
                        {"start_ns", path.start_ns},
                        {"end_ns", path.end_ns},
                        {"length_ns", path.end_ns - path.start_ns},
                        {"segments", std::move(segments)},
                        {"by_rank", shares_json(path.by_rank, "rank")},
                        {"by_stage", shares_json(path.by_stage, "stage")},
                        {"by_microbatch", shares_json(path.by_microbatch, "microbatch")},
                        {"by_what", shares_json(path.by_what, "what")},
                        {"what_if", std::move(what_if)}});
    }
    return rows;
}

}  // namespace

namespace {

// What the analyses read of one rank's events, in one visit of them (on any thread): the
// rank's passes and step rows, its kernels' figures, its collective calls, the host ranges the
// analyses across ranks need, its copies, memory and hot switches. The events themselves are
// not kept, so that a run read from a file a rank at a time is never held whole.
struct RankFindings {
    std::int64_t events = 0;
    bool device_lanes = false;
    std::vector<Pass> passes;
    std::vector<StepBreakdown> breakdown;
    RankKernels kernels;
    std::vector<CollectiveCall> calls;
    RankRanges ranges;
    RankOffloadFigures offload;
    MeasuredMemory memory;
    RankHotSwitch hot_switch;
    std::optional<NameTally> names;
};

RankFindings read_rank(const RunTrace& trace, const RankTrace& rank, bool first, bool tally_names) {
    RankFindings out;
    for (const LaneTrace& lane : rank.lanes) {
        out.events += static_cast<std::int64_t>(lane.events.size());
    }
    out.device_lanes = rank.has_device_lanes();
    find_rank_passes(trace, rank, out.passes);
    const RankActivity activity = rank_activity(rank);
    rank_step_breakdown(trace, rank, activity, out.breakdown);
    out.kernels.add(rank, KernelOptions{});
    out.calls = collective_calls(trace, rank);
    out.ranges = RankRanges::of(trace, rank);
    out.offload = rank_offload(rank, activity);
    out.memory = measured_memory(trace, rank);
    out.hot_switch = rank_hot_switch(trace, rank, first);
    if (tally_names) {
        out.names.emplace().add(rank);
    }
    return out;
}

// `more` appended to `all`, the ranks' rows so far, `added` of `ranks` ranks in: grown to what
// the ranks so far project for all of them rather than by doubling, which would hold up to
// three times a 1 B-event run's millions of passes while it moves them.
template <typename T>
void append_projected(std::vector<T>& all, const std::vector<T>& more, std::size_t added,
                      std::size_t ranks) {
    const std::size_t needed = all.size() + more.size();
    if (needed > all.capacity()) {
        const std::size_t projected = needed * std::max(ranks, added + 1) / (added + 1);
        all.reserve(std::max(needed, projected + projected / 16));
    }
    all.insert(all.end(), more.begin(), more.end());
}

// Every rank's findings, put together in rank order.
struct RunFindings {
    RunFindings(const RunTrace& trace, std::int64_t scratch_memory)
        : ranks(trace.ranks.size()),
          passes(scratch_memory),
          collectives(trace, scratch_memory),
          matcher(trace,
                  [this](CollectiveInstance&& instance) { collectives.add(std::move(instance)); }),
          pipeline(trace, scratch_memory) {}
    RunFindings(const RunFindings&) = delete;  // the matcher holds `this`
    RunFindings& operator=(const RunFindings&) = delete;

    std::size_t ranks = 0;
    std::size_t added = 0;  // ranks so far
    std::int64_t events = 0;
    bool device_lanes = false;
    PassTable passes;  // in a temporary file past their budget: they grow with the steps
    std::vector<StepBreakdown> breakdown;
    KernelTotals kernels;
    MatchedCollectives collectives;
    CollectiveMatcher matcher;
    // The pipeline transfers paired as the ranks come in; `ranges` keep no transfers.
    PipelineMatcher pipeline;
    std::vector<RankRanges> ranges;
    std::vector<RankOffloadFigures> offload;
    std::vector<MeasuredMemory> memory;
    std::vector<RankHotSwitch> hot_switch;
    std::optional<NameTally> names;

    Status add(std::int32_t rank, RankFindings&& found) {
        events += found.events;
        device_lanes = device_lanes || found.device_lanes;
        if (auto kept = passes.append(found.passes); !kept) {
            return kept;
        }
        append_projected(breakdown, found.breakdown, added, ranks);
        ++added;
        kernels.add(std::move(found.kernels));
        matcher.add(rank, found.calls);
        if (auto paired = pipeline.add(rank, found.ranges.transfers); !paired) {
            return paired;
        }
        std::vector<RankRanges::Transfer>().swap(found.ranges.transfers);
        ranges.push_back(std::move(found.ranges));
        offload.push_back(std::move(found.offload));
        memory.push_back(std::move(found.memory));
        hot_switch.push_back(std::move(found.hot_switch));
        if (found.names) {
            if (names) {
                names->add(*found.names);
            } else {
                names = std::move(found.names);
            }
        }
        return {};
    }
};

// The ranks' events were decoded on the workers, whose malloc arenas keep the freed pages;
// give them back before the analyses across ranks allocate theirs (glibc only).
void release_free_memory() {
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
}

using RankReader = std::function<Result<RankFindings>(int worker, std::size_t index)>;

Result<RunAnalysis> analyze_ranks(const RunTrace& trace, const WorkloadByRank& workload,
                                  const RankReader& read, int workers,
                                  const AnalyzeOptions& options) {
    auto report = [&](std::string_view stage, double fraction) {
        if (options.progress) {
            options.progress(stage, fraction);
        }
    };
    RunAnalysis analysis;
    analysis.run = trace.run;
    analysis.config = trace.config;

    // Every rank's events once, on every core; what the analyses across ranks need is kept.
    report("ranks", 0.0);
    RunFindings found(trace, options.scratch_memory_bytes);
    const std::size_t ranks = trace.ranks.size();
    // At most two ranks a worker ahead of the one whose findings are added.
    const Status read_all = produce_in_order<RankFindings>(
        ranks, workers, 2 * static_cast<std::size_t>(std::max(workers, 1)), read,
        [&](std::size_t index, RankFindings&& rank) -> Status {
            if (auto added = found.add(trace.ranks[index].info.rank, std::move(rank)); !added) {
                return added;
            }
            report("ranks", 0.7 * double(index + 1) / double(ranks));
            return check_cancel(options);
        },
        options.cancel);
    if (!read_all) {
        return read_all.error();
    }
    analysis.events = found.events;
    const PassTable& passes = found.passes;
    found.matcher.finish();
    auto paired = found.pipeline.finish();
    if (!paired) {
        return paired.error();
    }
    ScratchTable<PipelinePair> pipeline = std::move(*paired);
    release_free_memory();
    if (auto finished = found.collectives.finish(); !finished) {
        return finished.error();
    }
    const MatchedCollectives& collectives = found.collectives;

    // The cost model on another thread; bubbles, the collectives' summary and the critical path
    // here meanwhile, then imbalance, offload and CP load, each once what it needs is there and
    // what it does not is freed: the host ranges and pipeline pairs (the cost model's and the
    // critical path's) before imbalance, the passes before CP load builds its groups. A run of
    // many steps peaked with all of them side by side.
    struct ModelFit {
        std::optional<CostModel> cost_model;
        std::string cost_model_error;
    };
    std::future<ModelFit> fit = std::async(std::launch::async, [&] {
        ModelFit out;
        if (!passes.empty() && !workload.held.empty()) {
            auto fitted =
                fit_cost_model(trace, passes, &collectives, &found.ranges, &workload, &pipeline);
            if (fitted) {
                out.cost_model = std::move(*fitted);
            } else {
                out.cost_model_error = fitted.error().message;
            }
        }
        return out;
    });
    analysis.passes = static_cast<std::int64_t>(passes.size());
    if (passes.empty()) {
        analysis.notes.push_back(
            "no forward/backward ranges: pipeline bubbles, CP load, imbalance, the cost model "
            "and the critical path need the fulcrum annotations (docs/annotations.md) or a "
            "pipeline the importer recognises (docs/import.md, \"The 4D structure of a "
            "PyTorch run\" and \"The pipeline of a Megatron-LM run\")");
    }
    if (workload.held.empty()) {
        analysis.notes.push_back(
            "no workload table: no predicted work (tokens, causal pairs, predicted imbalance) "
            "and no cost model; the program must emit fulcrum.workload marks");
    }
    analysis.breakdown = std::move(found.breakdown);
    if (analysis.breakdown.empty()) {
        analysis.notes.push_back("no events that span time: no step breakdown");
    } else if (std::any_of(analysis.breakdown.begin(), analysis.breakdown.end(),
                           [](const StepBreakdown& row) { return row.whole_trace; })) {
        analysis.notes.push_back(
            "no step ranges (ProfilerStep#N, the fulcrum `step` annotation, or a range named "
            "like \"train_step N\"): the step breakdown is one window over each such rank's "
            "whole trace, without a step number");
    }
    report("bubbles", 0.75);
    analysis.bubbles = analyze_bubbles(trace, passes);
    // HTA's kernel answers, where there is device activity to give them. A CPU run lacks
    // nothing, as a run with pp = 1 lacks no bubble: no note; the kernel sections say "no
    // device activity" where they would be.
    analysis.has_device_activity = found.device_lanes;
    if (analysis.has_device_activity) {
        analysis.kernels = std::move(found.kernels).finish(trace, KernelOptions{});
    }
    report("cost model, imbalance and critical path", 0.85);
    analysis.communication = summarize_collectives(trace, collectives);
    analysis.critical_paths = critical_paths(trace, passes, &collectives, &found.ranges);
    const ModelFit fitted = fit.get();
    std::vector<RankRanges>().swap(found.ranges);
    if (auto read = pipeline.read_status(); !read) {
        return read.error();
    }
    pipeline = ScratchTable<PipelinePair>{};
    found.collectives.drop_transfers();
    release_free_memory();
    const CostModel* model = fitted.cost_model ? &*fitted.cost_model : nullptr;
    analysis.imbalance = analyze_imbalance(trace, passes, collectives, model, &workload);
    const int element_bytes = trace.config.backend == "cuda" ? 2 : 4;
    analysis.offload = analyze_offload(trace, found.offload, model, element_bytes);
    report("CP load", 0.9);
    // CP load needs only the passes' attention times.
    MeasuredAttention attention = measured_attention(trace, passes);
    const bool any_passes = !passes.empty();
    if (auto read = passes.read_status(); !read) {
        return read.error();
    }
    found.passes = PassTable{};
    release_free_memory();  // CP load's largest arrays are mapped apart, not from these pages
    auto cp_load = analyze_cp_load(trace, std::move(attention), workload, [&](double steps) {
        report("CP load", 0.9 + 0.09 * steps);
        return check_cancel(options);
    });
    if (!cp_load) {
        return cp_load.error();
    }
    analysis.cp_load = std::move(*cp_load);
    analysis.cost_model = fitted.cost_model;
    analysis.cost_model_error = fitted.cost_model_error;
    if (!fitted.cost_model_error.empty()) {
        analysis.notes.push_back("no cost model: " + fitted.cost_model_error);
    }
    analysis.names = std::move(found.names);
    if (options.tally_names && !analysis.names) {
        analysis.names.emplace();  // a run without ranks: nothing to count
    }
    analysis.hot_switch = analyze_hot_switch(trace, std::move(found.hot_switch));
    analysis.memory = analyze_memory(trace, std::move(found.memory));
    add_notes_on_missing_figures(trace, any_passes, analysis);
    if (auto status = check_cancel(options); !status) {
        return status.error();
    }
    report("done", 1.0);
    return analysis;
}

}  // namespace

Result<RunAnalysis> analyze_run(const RunTrace& trace, const AnalyzeOptions& options) {
    if (options.visit_workload) {
        for (const WorkloadEntry& row : trace.workload) {
            options.visit_workload(row);
        }
    }
    return analyze_ranks(
        trace, WorkloadByRank::of(trace),
        [&trace, &options](int, std::size_t index) -> Result<RankFindings> {
            return read_rank(trace, trace.ranks[index], index == 0, options.tally_names);
        },
        worker_threads(), options);
}

Result<RunAnalysis> analyze_run_file(const store::TraceReader& reader, RunTrace& metadata,
                                     const AnalyzeOptions& options) {
    LoadOptions load;
    load.read_events = false;
    auto loaded = load_run_trace(reader, load);
    if (!loaded) {
        return loaded.error();
    }
    // The workload's rows are read a step at a time where they are needed (CP load), not held:
    // ten million of them at 1 B events.
    auto workload = WorkloadByRank::of(reader, options.visit_workload);
    if (!workload) {
        return workload.error();
    }
    metadata = std::move(*loaded);
    const int workers = worker_threads();
    const RunTrace& trace = metadata;
    RankLoader ranks(reader, trace, workers);
    auto analysis = analyze_ranks(
        trace, *workload,
        [&](int worker, std::size_t index) -> Result<RankFindings> {
            auto rank = ranks.load(worker, index);
            if (!rank) {
                return rank.error();
            }
            return read_rank(trace, **rank, index == 0, options.tally_names);
        },
        workers, options);
    if (!analysis || !options.read_workload) {
        return analysis;
    }
    // What the caller shows beside the analyses, read once they no longer hold their figures.
    // Its readers tally the rows (throughput, calibration's check, simulate's documents): the
    // table's order spares a sort of every row.
    auto rows = reader.workload(store::TraceReader::WorkloadOrder::table);
    if (!rows) {
        return rows.error();
    }
    metadata.workload = std::move(*rows);
    return analysis;
}

namespace {

json run_json(const RunAnalysis& analysis) {
    const RunConfig& config = analysis.config;
    const auto degree = [&](int value) { return config.grid_known ? json(value) : json(nullptr); };
    return {{"name", analysis.run.name},
            {"origin", std::string(to_string(analysis.run.origin))},
            {"events", analysis.events},
            {"passes", analysis.passes},
            {"dp", degree(config.layout.grid.dp)},
            {"tp", degree(config.layout.grid.tp)},
            {"pp", degree(config.layout.grid.pp)},
            {"cp", degree(config.layout.grid.cp)},
            {"schedule", text_or_null(schedule_text(config))},
            {"balancer", text_or_null(config.balancer)},
            {"cp_shard", text_or_null(config.cp_shard)},
            {"microbatches",
             config.layout.microbatches > 0 ? json(config.layout.microbatches) : json(nullptr)}};
}

json breakdown_json(const std::vector<StepBreakdown>& rows) {
    json breakdown = json::array();
    for (const StepBreakdown& row : rows) {
        breakdown.push_back({{"rank", row.rank},
                             {"step", optional_json(row.step)},
                             {"whole_trace", row.whole_trace},
                             {"wall_ns", row.wall_ns()},
                             {"compute_ns", row.compute_ns},
                             {"overlapped_communication_ns", row.overlapped_communication_ns},
                             {"exposed_communication_ns", row.exposed_communication_ns},
                             {"other_ns", row.other_ns},
                             {"idle_ns", row.idle_ns}});
    }
    return breakdown;
}

// A JSON object written a member at a time, the way json::dump writes it (members in the
// order they were added, no spaces), so that its largest arrays are written an element at a
// time instead of being built whole: a 1 B-event run has a million CP groups, and a tree of
// them takes gigabytes.
struct Member {
    json value;                                      // dumped whole, unless
    std::function<void(const JsonWriter&)> written;  // it is written piece by piece
};
class Members {
public:
    Member& add(std::string key) { return members_.emplace_back(std::move(key), Member{}).second; }
    auto begin() const { return members_.begin(); }
    auto end() const { return members_.end(); }

private:
    std::vector<std::pair<std::string, Member>> members_;
};

void write_object(const Members& members, const JsonWriter& write) {
    write("{");
    bool first = true;
    for (const auto& [key, member] : members) {
        write(first ? "" : ",");
        first = false;
        write(json(key).dump());
        write(":");
        if (member.written) {
            member.written(write);
        } else {
            write(member.value.dump());
        }
    }
    write("}");
}

// A member whose value is an object of streamed members.
Member object_member(Members members) {
    return {json(), [members = std::move(members)](const JsonWriter& write) {
                write_object(members, write);
            }};
}

template <typename T, typename ToJson>
Member array_member(const std::vector<T>& rows, ToJson to_json) {
    return {json(), [&rows, to_json](const JsonWriter& write) {
                write("[");
                for (std::size_t i = 0; i < rows.size(); ++i) {
                    write(i == 0 ? "" : ",");
                    write(to_json(rows[i]).dump());
                }
                write("]");
            }};
}

json stage_bubble_json(const StageBubble& row) {
    return {{"step", row.step},
            {"dp", row.dp},
            {"cp", row.cp},
            {"tp", row.tp},
            {"stage", row.stage},
            {"rank", optional_json(row.rank)},
            {"window_ns", row.window_ns},
            {"busy_ns", row.busy_ns},
            {"bubble_ns", row.bubble_ns},
            {"bubble_fraction", optional_json(row.bubble_fraction)},
            {"warmup_cooldown_ns", row.warmup_cooldown_ns},
            {"unequal_microbatch_ns", row.unequal_microbatch_ns},
            {"other_ns", row.other_ns},
            {"wait_on_previous_ns", row.wait_on_previous_ns},
            {"wait_on_next_ns", row.wait_on_next_ns}};
}

Member bubbles_member(const BubbleAnalysis& bubbles) {
    json pipelines = json::array();
    for (const PipelineBubble& row : bubbles.pipelines) {
        pipelines.push_back({{"step", row.step},
                             {"dp", row.dp},
                             {"cp", row.cp},
                             {"tp", row.tp},
                             {"stages", row.stages},
                             {"microbatches", row.microbatches},
                             {"window_ns", row.window_ns},
                             {"theory_fraction", row.theory_fraction},
                             {"measured_fraction", optional_json(row.measured_fraction)},
                             {"replay_fraction", optional_json(row.replay_fraction)}});
    }
    Members members;
    members.add("schedule").value = text_or_null(bubbles.schedule);
    members.add("schedule_assumed").value = bubbles.schedule_assumed;
    members.add("theory_fraction").value = optional_json(bubbles.theory_fraction);
    members.add("mean_measured_fraction").value = optional_json(bubbles.mean_measured_fraction);
    members.add("pipelines").value = std::move(pipelines);
    members.add("stages") = array_member(bubbles.stages, stage_bubble_json);
    return object_member(std::move(members));
}

json cp_group_json(const CpGroupLoad& group) {
    json ranks = json::array();
    for (const CpRankLoad& rank : group.ranks) {
        ranks.push_back({{"rank", rank.rank},
                         {"cp_rank", rank.cp_rank},
                         {"attention_ns", optional_json(rank.attention_ns)},
                         {"tokens", optional_json(rank.tokens)},
                         {"pairs", optional_json(rank.pairs)}});
    }
    return {{"step", group.step},
            {"microbatch", group.microbatch},
            {"dp", group.dp},
            {"pp", group.pp},
            {"tp", group.tp},
            {"measured_imbalance", optional_json(group.measured_imbalance)},
            {"predicted_imbalance", optional_json(group.predicted_imbalance)},
            {"predicted_by_sharding", sharding_json(group.predicted_by_sharding.named())},
            {"ranks", std::move(ranks)}};
}

Member cp_load_member(const CpLoadAnalysis& cp) {
    Members members;
    members.add("sharding").value = text_or_null(cp.sharding);
    members.add("cp").value = optional_json(cp.cp);
    members.add("mean_measured_imbalance").value = optional_json(cp.mean_measured_imbalance);
    members.add("mean_predicted_imbalance").value = optional_json(cp.mean_predicted_imbalance);
    members.add("mean_predicted_by_sharding").value = sharding_json(cp.mean_predicted_by_sharding);
    members.add("groups") = array_member(cp.groups, cp_group_json);
    return object_member(std::move(members));
}

json offload_json(const OffloadAnalysis& offload) {
    json offload_ranks = json::array();
    for (const RankOffload& row : offload.ranks) {
        offload_ranks.push_back({{"rank", row.rank},
                                 {"copy_ns", row.copy_ns},
                                 {"overlapped_ns", row.overlapped_ns},
                                 {"exposed_ns", row.exposed_ns},
                                 {"host_to_device_ns", row.host_to_device_ns},
                                 {"device_to_host_ns", row.device_to_host_ns},
                                 {"bytes", row.bytes},
                                 {"bandwidth_gb_s", optional_json(row.bandwidth_gb_s)},
                                 {"copies", row.copies}});
    }
    return {{"copy_ns", offload.copy_ns},
            {"overlapped_ns", offload.overlapped_ns},
            {"exposed_ns", offload.exposed_ns},
            {"bandwidth_gb_s", optional_json(offload.bandwidth_gb_s)},
            {"min_hidden_chunk_tokens", optional_json(offload.min_hidden_chunk_tokens)},
            {"chunk_note", offload.chunk_note},
            {"pageable_copies", offload.pageable_copies},
            {"pageable_copy_ns", offload.pageable_copy_ns},
            {"staging_copies", offload.staging_copies},
            {"staging_copy_ns", offload.staging_copy_ns},
            {"ranks", std::move(offload_ranks)}};
}

Member imbalance_member(const ImbalanceAnalysis& imbalance) {
    json stragglers = json::array();
    for (const Straggler& row : imbalance.stragglers) {
        stragglers.push_back({{"rank", row.rank},
                              {"last_arrivals", row.last_arrivals},
                              {"instances", row.instances},
                              {"caused_wait_ns", row.caused_wait_ns}});
    }
    const json predicted_unit = !imbalance.has_prediction     ? json(nullptr)
                                : imbalance.predicted_is_time ? json("ns")
                                                              : json("pairs");
    Members members;
    members.add("predicted_unit").value = predicted_unit;
    members.add("compute_imbalance").value = optional_json(imbalance.compute_imbalance);
    members.add("predicted_imbalance").value = optional_json(imbalance.predicted_imbalance);
    members.add("compute_by_step").value = matrix_json(imbalance.compute_by_step);
    members.add("predicted_by_step").value = matrix_json(imbalance.predicted_by_step);
    members.add("by_microbatch") =
        array_member(imbalance.by_microbatch, [](const StepMatrices& step) {
            return json{{"step", step.step},
                        {"compute_ns", matrix_json(step.compute_ns)},
                        {"predicted", matrix_json(step.predicted)}};
        });
    members.add("stragglers").value = std::move(stragglers);
    return object_member(std::move(members));
}

json hot_switch_json(const HotSwitchAnalysis& hot) {
    json buckets = json::array();
    for (const HotSwitchBucketTime& b : hot.buckets) {
        buckets.push_back({{"bucket", b.bucket},
                           {"bounds", b.bounds},
                           {"layout", b.layout},
                           {"steps", b.steps},
                           {"documents", b.documents},
                           {"tokens", b.tokens},
                           {"microbatches", b.microbatches},
                           {"ns", b.ns},
                           {"share", b.share}});
    }
    json switches = json::array();
    for (const HotSwitchCost& c : hot.switches) {
        switches.push_back({{"from", c.from},
                            {"to", c.to},
                            {"count", c.count},
                            {"ns", c.ns},
                            {"bytes", c.bytes},
                            {"largest_send_bytes", c.largest_send_bytes},
                            {"inter_node_bytes", c.inter_node_bytes},
                            {"sent_by_rank", c.sent},
                            {"received_by_rank", c.received}});
    }
    return {{"steps", hot.steps},
            {"step_ns", hot.step_ns},
            {"buckets", std::move(buckets)},
            {"switching_ns", hot.switching_ns},
            {"switching_share", hot.switching_share},
            {"rest_ns", hot.rest_ns},
            {"layouts", hot.layouts},
            {"switches", std::move(switches)}};
}

json memory_json(const MemoryAnalysis& memory) {
    json ranks = json::array();
    auto optional = [](const auto& value) { return value ? json(*value) : json(nullptr); };
    for (const RankMemory& r : memory.ranks) {
        ranks.push_back({{"rank", r.rank},
                         {"stage", r.stage},
                         {"peak_bytes", optional(r.peak_bytes)},
                         {"peak_pinned_bytes", optional(r.peak_pinned_bytes)},
                         {"predicted_bytes", optional(r.predicted_bytes)},
                         {"predicted_pinned_bytes", optional(r.predicted_pinned_bytes)},
                         {"model_state_bytes", r.model_state_bytes},
                         {"workspace_bytes", r.workspace_bytes},
                         {"activations_bytes", r.activations_bytes}});
    }
    return {{"techniques", memory.techniques}, {"ranks", std::move(ranks)}, {"note", memory.note}};
}

}  // namespace

void write_analysis_json(const RunAnalysis& analysis, const JsonWriter& write) {
    Members root;
    root.add("version").value = kAnalysisJsonVersion;
    root.add("run").value = run_json(analysis);
    root.add("step_breakdown").value = breakdown_json(analysis.breakdown);
    root.add("bubbles") = bubbles_member(analysis.bubbles);
    root.add("cp_load") = cp_load_member(analysis.cp_load);
    root.add("offload").value = offload_json(analysis.offload);
    root.add("imbalance") = imbalance_member(analysis.imbalance);
    root.add("cost_model").value =
        analysis.cost_model ? json::parse(cost_model_json(*analysis.cost_model)) : json(nullptr);
    root.add("kernels").value = kernels_json(analysis);
    root.add("communication").value = communication_json(analysis.communication);
    root.add("critical_paths").value = critical_paths_json(analysis.critical_paths);
    if (!analysis.hot_switch.empty()) {
        root.add("hot_switch").value = hot_switch_json(analysis.hot_switch);
    }
    if (!analysis.memory.ranks.empty()) {
        root.add("memory").value = memory_json(analysis.memory);
    }
    root.add("notes").value = analysis.notes;
    // One line: a 10M-event run's matrices make tens of MB, which indentation would double;
    // `jq .` pretty-prints it.
    write_object(root, write);
    write("\n");
}

std::string analysis_json(const RunAnalysis& analysis) {
    std::string out;
    write_analysis_json(analysis, [&](std::string_view piece) { out += piece; });
    return out;
}

std::string diff_json(const RunDiff& diff, std::string_view a, std::string_view b) {
    json rows = json::array();
    for (const NameDiff& row : diff.rows) {
        const char* change = row.added() ? "added" : row.removed() ? "removed" : "changed";
        rows.push_back({{"name", row.name},
                        {"kind", std::string(to_string(row.kind))},
                        {"change", change},
                        {"count_a", row.count_a},
                        {"count_b", row.count_b},
                        {"total_ns_a", row.total_ns_a},
                        {"total_ns_b", row.total_ns_b},
                        {"delta_ns", row.delta_ns()}});
    }
    json root;
    root["version"] = kAnalysisJsonVersion;
    root["a"] = {{"name", std::string(a)}, {"steps", diff.steps_a}};
    root["b"] = {{"name", std::string(b)}, {"steps", diff.steps_b}};
    root["rows"] = std::move(rows);
    return root.dump() + "\n";
}

}  // namespace fulcrum::analysis
