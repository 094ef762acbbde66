// What a simulation writes: every rank of the grid with one lane, and each played step's
// ranges as the engine's capture nests them (docs/annotations.md), with the workload rows of
// each CP rank; a hot-switched bucket's passes as parts of its step.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/balance/step_planner.h"
#include "core/sim/sim_config.h"
#include "core/sim/step_play.h"
#include "core/store/trace_writer.h"

namespace fulcrum::sim {

// Whether a run under `config` copies between its devices and host memory: offloaded
// checkpoints, or FPDT's chunks offloaded.
bool copies_to_host(const SimulationConfig& config);

// The lanes of a simulated run, by rank: each rank's "main" thread, and where the run copies
// to host memory its two copy streams as fulcrum-train's CPU backend names them ("stream
// offload", device to host; "stream prefetch", host to device); those empty otherwise.
struct SimulatedLanes {
    std::vector<LaneId> main, to_host, to_device;
};

// Adds every rank of `grid` to `out` with its coordinates (host "simulated") and its lanes.
SimulatedLanes add_simulated_ranks(store::TraceWriter& out, const parallel::GridShape& grid,
                                   bool host_copies);

// A range the simulator writes, as the engine's capture stores it: communication ranges are
// collectives (docs/annotations.md).
Event simulated_range(StringId name, Category category, std::int64_t start, std::int64_t end,
                      std::int32_t step, std::int32_t microbatch = -1, std::int16_t stage = -1,
                      Phase phase = Phase::none, std::int64_t bytes = -1, StringId args = {});

struct EventNames {
    StringId step, forward, backward, weight_gradients, recompute, attention, mlp;
    StringId tp_all_gather, tp_reduce_scatter;
    StringId recv_activations, send_activations, recv_gradients, send_gradients;
    StringId cp_all_gather, cp_reduce_scatter, tp_all_reduce, dp_all_reduce, optimizer;
    StringId embedding_all_reduce;
    StringId cp_all_to_all, zero_all_gather, zero_reduce_scatter, offload_wait;
    StringId memcpy_to_host, memcpy_to_device;
};

// Writes one CP rank's events of one replica's stage for one step; TP peers get copies.
class RankEvents {
public:
    RankEvents(const EventNames& names, store::TraceWriter& writer)
        : names_(names), writer_(writer) {}

    std::vector<Event> events;
    // The copies to host memory and back, for the copy-stream lanes (SimulatedLanes).
    std::vector<Event> to_host, to_device;

    void range(StringId name, Category category, std::int64_t start, std::int64_t end,
               std::int32_t step, std::int32_t microbatch, std::int16_t stage, Phase phase,
               std::int64_t bytes = -1, StringId args = {}) {
        // A range of no length (a receive whose data had already arrived, a free collective)
        // is left out: at the edge of its parent, the store's order (start, then longest
        // first) could not tell which range it belongs to. Steps and passes always last.
        if (end == start && name != names_.step && name != names_.forward &&
            name != names_.backward && name != names_.weight_gradients) {
            return;
        }
        events.push_back(simulated_range(name, category, start, end, step, microbatch, stage, phase,
                                         bytes, args));
    }

    // `{"calls":"N"}`: how many engine ranges one simulated range stands for.
    StringId calls(std::int64_t count) {
        auto found = calls_.find(count);
        if (found == calls_.end()) {
            found =
                calls_
                    .emplace(count, writer_.intern("{\"calls\":\"" + std::to_string(count) + "\"}"))
                    .first;
        }
        return found->second;
    }

    // `{"chunk":c}`: the model chunk a pass runs (its virtual stage; 0 without interleaving),
    // as the engine's `chunk=` key stores it (core/trace/annotations.h).
    StringId chunk(int chunk) {
        auto found = chunks_.find(chunk);
        if (found == chunks_.end()) {
            found =
                chunks_.emplace(chunk, writer_.intern("{\"chunk\":" + std::to_string(chunk) + "}"))
                    .first;
        }
        return found->second;
    }

    const EventNames& names() const { return names_; }

private:
    const EventNames& names_;
    store::TraceWriter& writer_;
    std::map<std::int64_t, StringId> calls_;
    std::map<int, StringId> chunks_;
};

// Where a simulation writes: every rank of the grid with its lane, the names interned once,
// and the event buffer of one CP rank's stage. Empty (no writer) when only figures are asked.
// A hot-switched step's bucket (hot_switch_play.h) goes into the run's step `step` as its
// passes only: no step range, no (empty) DP reduction, micro-batches numbered on from the
// step's earlier buckets', workload rows alike.
struct RunOutput {
    store::TraceWriter* writer = nullptr;
    SimulatedLanes lanes;
    EventNames names;
    std::unique_ptr<RankEvents> events;
    std::optional<std::int32_t> bucket_step;
    int first_microbatch = 0;
};

// The output of a run under `config` into `out` (nullptr: figures only): its ranks added.
RunOutput open_output(store::TraceWriter* out, const SimulationConfig& config);
// Interns the event names into output.writer and makes the event buffer.
void intern_names(RunOutput& output);

// What CP rank `c` of a replica holds in every micro-batch of the step: its workload rows
// (the same on every stage and TP rank; `rank` filled by the caller).
std::vector<WorkloadEntry> cp_rank_workload(const std::vector<balance::PlannedMicroBatch>& replica,
                                            int c, int step, const std::string& balancer);

// Writes one CP rank's stage of one replica for the step: its passes, DP reduction and
// optimizer, copied onto each of its TP ranks' lanes with the rank's workload rows.
void write_stage(RunOutput& output, const balance::StepPlan& plan, const PlayedStep& played, int d,
                 int c, int s, const std::vector<WorkloadEntry>& workload,
                 const SimulationConfig& config, std::int64_t optimizer_ns,
                 SimulationResult& result);

}  // namespace fulcrum::sim
