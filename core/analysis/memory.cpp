#include "core/analysis/memory.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/parallel/memory_model.h"
#include "core/trace/annotations.h"

namespace fulcrum::analysis {
namespace {

using nlohmann::json;

// A rank's `fulcrum.memory {…}` mark: the name carries its JSON after a space
// (engine/instrument/annotations.cpp, mark()).
bool read_memory_mark(const RunTrace& trace, const Event& event, RankMemory& into) {
    if (event.kind != EventKind::mark) {
        return false;
    }
    const std::string_view name = trace.name(event.name);
    if (!name.starts_with(kMemoryMark) || name.size() <= kMemoryMark.size() ||
        name[kMemoryMark.size()] != ' ') {
        return false;
    }
    const json payload = json::parse(name.substr(kMemoryMark.size() + 1), nullptr, false);
    if (!payload.is_object() || !payload.contains("peak_device_bytes") ||
        !payload["peak_device_bytes"].is_number_integer()) {
        return false;
    }
    into.peak_bytes = payload["peak_device_bytes"].get<std::int64_t>();
    if (payload.contains("peak_pinned_bytes") && payload["peak_pinned_bytes"].is_number_integer()) {
        into.peak_pinned_bytes = payload["peak_pinned_bytes"].get<std::int64_t>();
    }
    return true;
}

// Why the run gets no prediction; empty when it gets one.
std::string no_prediction_reason(const RunTrace& trace) {
    const RunConfig& c = trace.config;
    if (!c.has_model() || c.model.layers <= 0 || c.model.hidden <= 0 || c.model.context <= 0) {
        return "the run does not say its model";
    }
    if (trace.run.origin != RunOrigin::captured || c.backend != "cpu") {
        return "the memory model predicts fulcrum-train's count on the CPU backend; this run is " +
               (c.backend.empty() ? std::string("not one") : "on " + c.backend);
    }
    if (!c.hot_switch.empty()) {
        return "a hot-switching run changes layout within a step";
    }
    return {};
}

}  // namespace

std::string memory_techniques(const RunConfig& config) {
    const parallel::Layout& layout = config.layout;
    std::vector<std::string> parts;
    if (layout.recompute != parallel::Recompute::none) {
        parts.push_back(std::string("recompute ") + parallel::recompute_name(layout.recompute));
    }
    if (layout.sequence_parallel) {
        parts.emplace_back("sequence parallel");
    }
    if (layout.zero_stage > 0) {
        parts.push_back("ZeRO-" + std::to_string(layout.zero_stage));
    }
    if (layout.context_parallelism == parallel::ContextParallelism::ulysses) {
        parts.emplace_back("Ulysses");
    }
    if (layout.offload_checkpoints) {
        parts.emplace_back("offloaded checkpoints");
    }
    if (config.attention_chunk > 0) {
        parts.push_back("chunks of " + std::to_string(config.attention_chunk) +
                        (config.offload ? " (Q, K, V offloaded)" : ""));
    }
    std::string text;
    for (const std::string& part : parts) {
        text += (text.empty() ? "" : ", ") + part;
    }
    return text.empty() ? "none" : text;
}

MeasuredMemory measured_memory(const RunTrace& trace, const RankTrace& rank) {
    MeasuredMemory out;
    out.row.rank = rank.info.rank;
    out.row.stage = rank.info.pp;
    for (const LaneTrace& lane : rank.lanes) {
        for (const Event& event : lane.events) {
            out.measured = read_memory_mark(trace, event, out.row) || out.measured;
        }
    }
    return out;
}

MemoryAnalysis analyze_memory(const RunTrace& trace) {
    std::vector<MeasuredMemory> ranks;
    for (const RankTrace& rank : trace.ranks) {
        ranks.push_back(measured_memory(trace, rank));
    }
    return analyze_memory(trace, std::move(ranks));
}

MemoryAnalysis analyze_memory(const RunTrace& trace, std::vector<MeasuredMemory> ranks) {
    MemoryAnalysis out;
    out.techniques = memory_techniques(trace.config);
    const std::string reason = no_prediction_reason(trace);
    const parallel::MemoryShape shape =
        parallel::engine_memory_shape(trace.config.model, trace.config.layout,
                                      trace.config.attention_chunk, trace.config.offload);
    bool measured_all = true;
    for (MeasuredMemory& rank : ranks) {
        RankMemory& row = rank.row;
        measured_all = measured_all && rank.measured;
        if (reason.empty() && row.stage >= 0 && row.stage < std::max(shape.layout.grid.pp, 1)) {
            const parallel::EngineMemory predicted =
                parallel::engine_stage_memory(shape, row.stage);
            row.predicted_bytes = predicted.peak_bytes();
            row.predicted_pinned_bytes = predicted.pinned_bytes;
            row.model_state_bytes = predicted.model_state_bytes;
            row.workspace_bytes = predicted.workspace_bytes;
            row.activations_bytes = predicted.activations_bytes;
        }
        if (row.peak_bytes || row.predicted_bytes) {
            out.ranks.push_back(row);
        }
    }
    if (!reason.empty()) {
        out.note = "no prediction: " + reason;
    }
    if (!measured_all) {
        out.note += std::string(out.note.empty() ? "" : "; ") +
                    "no measured peak for some ranks (fulcrum-train writes it at the end of a "
                    "run: an import, a simulated run or a rank that stopped early has none)";
    }
    return out;
}

std::vector<StageMemoryRow> memory_by_stage(const MemoryAnalysis& memory) {
    std::vector<StageMemoryRow> rows;
    for (const RankMemory& rank : memory.ranks) {
        auto row = std::find_if(rows.begin(), rows.end(),
                                [&](const StageMemoryRow& r) { return r.stage == rank.stage; });
        if (row == rows.end()) {
            rows.push_back({rank.stage, 1, rank});
            continue;
        }
        ++row->ranks;
        if (rank.peak_bytes.value_or(-1) > row->fullest.peak_bytes.value_or(-1)) {
            row->fullest = rank;
        }
    }
    std::sort(rows.begin(), rows.end(),
              [](const StageMemoryRow& a, const StageMemoryRow& b) { return a.stage < b.stage; });
    return rows;
}

}  // namespace fulcrum::analysis
