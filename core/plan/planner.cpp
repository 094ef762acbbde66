#include "core/plan/planner.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>

#include "core/balance/lengths.h"
#include "core/balance/step_planner.h"
#include "core/util/text_table.h"

namespace fulcrum::plan {
namespace {

// H100 SXM's dense 16-bit peak (NVIDIA H100 datasheet), for MFU when the hardware is the flat
// h100 description, whose `tflops` is a sustained rate.
constexpr double kH100PeakTflops = 989;

Error invalid(std::string message) {
    return Error{ErrorCode::invalid_input, std::move(message)};
}

// What the documents put into one context-sized micro-batch on average, from one step of the
// fixed packer over the whole global batch.
struct MeanMicroBatch {
    std::int64_t tokens = 0;
    std::int64_t pairs = 0;  // causal query·key pairs, Σ d(d + 1)/2
};

// The layout part of a candidate: everything but the balancer and CP sharding, which only
// change which documents go where (so the estimate, from a mean micro-batch, cannot tell them
// apart).
struct EstimatedLayout {
    Candidate candidate;
    double estimated_tokens_per_second = 0;
};

Result<MeanMicroBatch> mean_microbatch(const PlanRequest& request) {
    sim::SimulationConfig config;
    config.model = request.model;
    config.lengths = request.lengths;
    config.documents = resolved_documents(request);
    config.document_lengths = request.document_lengths;
    config.seed = request.seed;
    auto lengths = sim::training_lengths(config);
    if (!lengths) {
        return lengths.error();
    }
    balance::PlannerOptions options;
    options.packing.balancer = balance::Balancer::fixed;
    options.packing.microbatches = request.global_batch;
    options.packing.capacity = request.model.context;
    options.seed = request.seed;
    auto planner = balance::StepPlanner::create(std::move(*lengths), options);
    if (!planner) {
        return planner.error();
    }
    auto packed = planner->pack_next();
    if (!packed) {
        return packed.error();
    }
    MeanMicroBatch mean;
    std::int64_t count = 0;
    for (const auto& replica : *packed) {
        for (const balance::MicroBatch& microbatch : replica) {
            mean.tokens += microbatch.tokens;
            // Σ d(d + 1)/2 over its documents, or over the whole packed sequence.
            mean.pairs += request.packed_attention
                              ? microbatch.tokens * (microbatch.tokens + 1) / 2
                              : (microbatch.attention_work + microbatch.tokens) / 2;
            ++count;
        }
    }
    if (count == 0 || mean.tokens == 0) {
        return invalid("the documents give no tokens to train on; check --lengths");
    }
    mean.tokens /= count;
    mean.pairs /= count;
    return mean;
}

// Every factorisation dp · tp · pp · cp = world within the space's limits.
std::vector<parallel::GridShape> grids_of(int world, const PlanRequest& request) {
    std::vector<parallel::GridShape> grids;
    const PlanSpace& space = request.space;
    const int max_tp = space.max_tp > 0 ? space.max_tp : request.gpus_per_node;
    const int max_pp = space.max_pp > 0 ? space.max_pp : request.model.layers;
    const int max_cp = space.max_cp > 0 ? space.max_cp : world;
    for (int tp = 1; tp <= std::min(max_tp, world); ++tp) {
        for (int pp = 1; pp <= std::min(max_pp, world / tp); ++pp) {
            for (int cp = 1; cp <= std::min(max_cp, world / (tp * pp)); ++cp) {
                if (world % (tp * pp * cp) == 0) {
                    grids.push_back({.dp = world / (tp * pp * cp), .tp = tp, .pp = pp, .cp = cp});
                }
            }
        }
    }
    return grids;
}

// Why a grid cannot run this model at this batch at all, or "" (kind, message).
std::pair<std::string, std::string> grid_problem(const parallel::GridShape& grid,
                                                 const PlanRequest& request) {
    const sim::ModelShape& model = request.model;
    if (request.gpus_per_node % grid.tp != 0) {
        return {"tp not within a node", "tp " + std::to_string(grid.tp) + " does not divide the " +
                                            std::to_string(request.gpus_per_node) +
                                            " GPUs of a node; TP groups stay inside one"};
    }
    if (model.heads % grid.tp != 0 || model.hidden % grid.tp != 0) {
        return {"tp does not divide the heads", "tp " + std::to_string(grid.tp) +
                                                    " does not divide the " +
                                                    std::to_string(model.heads) + " heads"};
    }
    if (grid.pp > model.layers) {
        return {"more stages than layers", "pp " + std::to_string(grid.pp) + " exceeds the " +
                                               std::to_string(model.layers) + " layers"};
    }
    if (grid.cp > 1 && model.context % (2 * grid.cp) != 0) {
        return {"cp does not divide the context",
                "cp " + std::to_string(grid.cp) + ": zigzag sharding cuts the context " +
                    std::to_string(model.context) + " into 2·cp equal chunks"};
    }
    if (request.global_batch % grid.dp != 0) {
        return {"batch not divisible by dp",
                "the global batch of " + std::to_string(request.global_batch) +
                    " sequences does not split over dp " + std::to_string(grid.dp)};
    }
    return {};
}

}  // namespace

namespace {

double peak_tflops(const PlanRequest& request) {
    if (request.peak_tflops > 0) {
        return request.peak_tflops;
    }
    return request.hardware.gemm_efficiency.empty() ? kH100PeakTflops : request.hardware.tflops;
}

// Estimates one layout (a candidate that fits): its layer placement, then the step.
bool estimate_layout(const PlanRequest& request, const MeanMicroBatch& mean,
                     EstimatedLayout& layout) {
    Candidate& c = layout.candidate;
    sim::SimulationConfig config = simulation_config(request, c);
    const sim::StageCosts equal_costs = sim::config_costs(config);
    const sim::StepEstimate equal =
        sim::estimate_step(config, equal_costs, mean.tokens, mean.pairs);
    if (!place_layers(request, c, equal)) {
        return false;
    }
    sim::StepEstimate estimate = equal;
    if (!c.layout.stage_layers.empty()) {
        config.layout.stage_layers = c.layout.stage_layers;
    }
    // What the search let through must be what fulcrum-train and the simulator accept (the one
    // check they make); the search's own filters above give the reasons of the rejected.
    if (auto status = parallel::check_layout(config.layout, request.model); !status) {
        c.reason_kind = "layout refused";
        c.reason = status.error().message;
        return false;
    }
    if (!c.layout.stage_layers.empty()) {
        estimate = sim::estimate_step(config, sim::config_costs(config), mean.tokens, mean.pairs);
    }
    const double tokens =
        static_cast<double>(c.layout.grid.dp) * c.layout.microbatches * mean.tokens;
    c.estimated_step_ns = estimate.step_ns;
    c.step_ns = estimate.step_ns;
    c.bubble_fraction = estimate.bubble_fraction;
    c.tokens_per_second = estimate.step_ns > 0 ? tokens / (estimate.step_ns * 1e-9) : 0.0;
    c.mfu = c.tokens_per_second *
            parallel::training_flops(request.model, 1.0,
                                     static_cast<double>(mean.pairs) / mean.tokens) /
            (c.layout.grid.world() * peak_tflops(request) * 1e12);
    layout.estimated_tokens_per_second = c.tokens_per_second;
    return true;
}

// The (schedule, virtual stages) pairs to try on a pipeline of `pp` stages.
std::vector<std::pair<parallel::PipelineSchedule, int>> schedules_for(const PlanRequest& request,
                                                                      int pp) {
    std::vector<std::pair<parallel::PipelineSchedule, int>> out;
    for (parallel::PipelineSchedule schedule : request.space.schedules) {
        if (pp == 1) {
            // One stage: every schedule runs forward then backward; play 1F1B once.
            if (out.empty()) {
                out.push_back({parallel::PipelineSchedule::one_f_one_b, 1});
            }
        } else if (schedule == parallel::PipelineSchedule::interleaved) {
            for (int v : request.space.virtual_stages) {
                out.push_back({schedule, v});
            }
        } else {
            out.push_back({schedule, 1});
        }
    }
    return out;
}

// The chunk FPDT's offloaded attention is tried with: --attention-chunk, or min(64K, the
// rank's tokens): FPDT's chunk where PCIe time and compute balance on A100 (Yao et al. 2024).
int offload_chunk(const PlanRequest& request, const Candidate& c) {
    return request.space.attention_chunk > 0
               ? request.space.attention_chunk
               : std::max(1, std::min(65536, request.model.context / c.layout.grid.cp));
}

// The memory techniques of one layout, cheapest first: each recomputation level in the
// request's order; without recomputation, Q, K and V offloaded in chunks before recomputing
// (bench/README.md: 91–93% of the copies hidden on the CPU engine); after full recomputation,
// its checkpoints offloaded, then FPDT's whole design (checkpoints, chunks and a chunked loss).
// The offloads only where --no-offload does not forbid them.
std::vector<Candidate> memory_rungs(const PlanRequest& request, const Candidate& base,
                                    const std::vector<parallel::Recompute>& recomputes) {
    std::vector<Candidate> rungs;
    for (const parallel::Recompute recompute : recomputes) {
        Candidate c = base;
        c.layout.recompute = recompute;
        rungs.push_back(c);
        if (!request.space.offload) {
            continue;
        }
        if (recompute == parallel::Recompute::none) {
            c.attention_chunk = offload_chunk(request, c);
            c.offload = true;
            rungs.push_back(c);
        } else if (recompute == parallel::Recompute::full) {
            c.layout.offload_checkpoints = true;
            rungs.push_back(c);
            c.attention_chunk = offload_chunk(request, c);
            c.offload = true;
            rungs.push_back(c);
        }
    }
    return rungs;
}

// What a rung adds beside its recomputation, as the dominated candidates' reason names it.
std::string rung_text(const Candidate& c) {
    std::string text = std::string("recompute ") + parallel::recompute_name(c.layout.recompute);
    if (c.layout.offload_checkpoints) {
        text += " with checkpoints offloaded";
    }
    if (c.offload) {
        text += c.layout.offload_checkpoints ? " and FPDT's offloaded chunks"
                                             : " with Q, K and V offloaded";
    }
    return text;
}

struct Enumeration {
    std::vector<Candidate> rejected;       // infeasible and dominated
    std::vector<EstimatedLayout> layouts;  // fit, not dominated
};

// Every knob of one grid: schedules, sequence parallelism, CP's implementation, and of the ZeRO
// stages and memory techniques (memory_rungs) the least that fits.
void enumerate_grid(const PlanRequest& request, const MeanMicroBatch& mean,
                    const parallel::GridShape& grid, Enumeration& out) {
    Candidate base;
    base.layout.grid = grid;
    base.layout.rank_order = request.space.rank_orders.front();
    base.layout.microbatches = std::max(1, request.global_batch / grid.dp);
    base.balancer = request.space.balancers.front();
    base.sharding =
        grid.cp > 1 ? request.space.shardings.front() : balance::CpSharding::per_document;
    if (auto [kind, message] = grid_problem(grid, request); !kind.empty()) {
        base.reason_kind = kind;
        base.reason = message;
        out.rejected.push_back(std::move(base));
        return;
    }
    std::vector<parallel::Recompute> recomputes = request.space.recomputes;
    std::sort(recomputes.begin(), recomputes.end());
    recomputes.erase(std::unique(recomputes.begin(), recomputes.end()), recomputes.end());
    for (const auto& [schedule, v] : schedules_for(request, grid.pp)) {
        Candidate scheduled = base;
        scheduled.layout.schedule = schedule;
        scheduled.layout.virtual_stages = v;
        if (auto status =
                parallel::check_pipeline(schedule, {grid.pp, base.layout.microbatches, v});
            !status || grid.pp * v > request.model.layers) {
            scheduled.reason_kind = "schedule does not fit the layout";
            scheduled.reason =
                status ? "pp × virtual stages exceeds the layers" : status.error().message;
            out.rejected.push_back(std::move(scheduled));
            continue;
        }
        for (const parallel::ContextParallelism cp_impl : request.space.cp_impls) {
            if (cp_impl != parallel::ContextParallelism::all_gather &&
                (grid.cp < 2 || request.model.heads % (grid.tp * grid.cp) != 0)) {
                continue;  // Ulysses needs CP, and whole heads a rank
            }
            for (bool sp : {false, true}) {
                if (sp && (grid.tp < 2 || !request.space.sequence_parallel)) {
                    continue;
                }
                Candidate split = scheduled;
                split.layout.context_parallelism = cp_impl;
                split.layout.sequence_parallel = sp;
                std::string fitted;  // the cheapest ZeRO stage and rung that fit
                for (const int zero : request.space.zero_stages) {
                    split.layout.zero_stage = zero;
                    for (Candidate& rung : memory_rungs(request, split, recomputes)) {
                        EstimatedLayout layout{std::move(rung)};
                        Candidate& c = layout.candidate;
                        if (!fitted.empty()) {
                            c.status = CandidateStatus::dominated;
                            c.reason_kind = "more recomputation than needed";
                            c.reason = fitted + " fits and costs less";
                            out.rejected.push_back(std::move(c));
                        } else if (estimate_layout(request, mean, layout)) {
                            c.status = CandidateStatus::estimated;
                            fitted = rung_text(c) + (request.space.zero_stages.size() > 1
                                                         ? " at ZeRO " + std::to_string(zero)
                                                         : "");
                            out.layouts.push_back(std::move(layout));
                        } else {
                            out.rejected.push_back(std::move(c));
                        }
                    }
                }
            }
        }
    }
}

// Plays one candidate in full; false (with the error as its reason) when the simulator
// refuses it.
Status simulate_candidate(const PlanRequest& request, const MeanMicroBatch& mean,
                          const std::atomic<bool>* cancel, Candidate& c) {
    const sim::SimulationConfig config = simulation_config(request, c);
    sim::SimulationProgress progress;
    progress.cancel = cancel;
    auto result = sim::simulate(config, nullptr, progress);
    if (!result) {
        if (result.error().code == ErrorCode::cancelled) {
            return result.error();
        }
        c.status = CandidateStatus::infeasible;
        c.reason_kind = "refused by the simulator";
        c.reason = result.error().message;
        return {};
    }
    c.status = CandidateStatus::ranked;
    c.step_ns = result->mean_step_ns;
    c.tokens_per_second = result->tokens_per_second;
    c.bubble_fraction = result->mean_bubble_fraction;
    c.imbalance = result->mean_imbalance;
    c.mfu = c.tokens_per_second *
            parallel::training_flops(request.model, 1.0,
                                     static_cast<double>(mean.pairs) / mean.tokens) /
            (c.layout.grid.world() * peak_tflops(request) * 1e12);
    c.cost_notes = result->notes;
    c.cost_source = result->cost_source;
    return {};
}

// wlb's queue thresholds, tuned once for every wlb candidate (balance::tune_wlb_thresholds
// replays the packer on the whole first epoch for each of its threshold sets, which at a
// global batch of a thousand sequences takes seconds): on one replica of at most
// kTuningBatch sequences and the documents of two such batches, with the S_max of `layout`.
constexpr int kTuningBatch = 128;

Result<std::optional<std::vector<std::int64_t>>> tune_thresholds(const PlanRequest& request,
                                                                 Candidate layout,
                                                                 const std::atomic<bool>* cancel) {
    layout.balancer = balance::Balancer::wlb;
    sim::SimulationConfig config = simulation_config(request, layout);
    config.wlb_max_tokens = sim::wlb_max_tokens_from_memory(config);
    const int batch = std::min(request.global_batch, kTuningBatch);
    config.layout.grid = {.dp = 1,
                          .tp = layout.layout.grid.tp,
                          .pp = layout.layout.grid.pp,
                          .cp = layout.layout.grid.cp};
    config.layout.microbatches = batch;
    config.layout.schedule = parallel::PipelineSchedule::one_f_one_b;
    config.layout.virtual_stages = 1;
    if (config.document_lengths.empty()) {
        config.documents = std::max<std::int64_t>(
            4096, config.documents * batch / std::max(request.global_batch, 1));
    }
    config.wlb_thresholds.reset();
    sim::SimulationProgress progress;
    progress.cancel = cancel;
    auto result = sim::simulate(config, nullptr, progress);
    if (!result) {
        return result.error();
    }
    return result->packing.wlb_thresholds;
}

// The same layout under another CP sharding that plays to the same step time (a sharding that
// changes nothing for these documents) is one row, not one per sharding: the later twins leave
// `ranked` and are named in the first one's `equal_shardings`.
bool same_but_sharding(const Candidate& a, const Candidate& b) {
    return a.layout.grid == b.layout.grid && a.layout.microbatches == b.layout.microbatches &&
           a.layout.schedule == b.layout.schedule &&
           a.layout.virtual_stages == b.layout.virtual_stages &&
           a.layout.recompute == b.layout.recompute &&
           a.layout.sequence_parallel == b.layout.sequence_parallel && a.balancer == b.balancer &&
           a.attention_chunk == b.attention_chunk && a.offload == b.offload &&
           a.layout.stage_layers == b.layout.stage_layers && a.sharding != b.sharding;
}

void fold_equal_shardings(PlanResult& result) {
    std::vector<std::size_t> kept;
    for (const std::size_t index : result.ranked) {
        Candidate& candidate = result.candidates[index];
        const auto twin = std::find_if(kept.begin(), kept.end(), [&](std::size_t k) {
            const Candidate& first = result.candidates[k];
            return same_but_sharding(first, candidate) && first.step_ns == candidate.step_ns;
        });
        if (twin == kept.end()) {
            kept.push_back(index);
        } else {
            result.candidates[*twin].equal_shardings.push_back(candidate.sharding);
        }
    }
    result.ranked = std::move(kept);
}

// Which layouts (sorted best estimate first) to play in full: each world size's best
// `refine_layouts` (default max(4 · top, 32)), so that a smaller world is ranked too.
std::vector<bool> layouts_to_play(const PlanRequest& request,
                                  const std::vector<EstimatedLayout>& layouts) {
    const int per_world =
        request.refine_layouts > 0 ? request.refine_layouts : std::max(4 * request.top_k, 32);
    std::map<int, int> taken;
    std::vector<bool> play(layouts.size());
    for (std::size_t i = 0; i < layouts.size(); ++i) {
        int& n = taken[layouts[i].candidate.layout.grid.world()];
        play[i] = n < per_world;
        n += play[i] ? 1 : 0;
    }
    return play;
}

// Plays one placed layout for every balancer and (cp > 1) CP sharding, appending the
// candidates.
Status play_balancers(const PlanRequest& request, const MeanMicroBatch& mean,
                      const std::optional<std::vector<std::int64_t>>& thresholds,
                      const std::atomic<bool>* cancel, const Candidate& layout,
                      std::vector<Candidate>& out) {
    const bool sharded = layout.layout.grid.cp > 1;
    for (balance::Balancer balancer : request.space.balancers) {
        for (balance::CpSharding sharding : request.space.shardings) {
            Candidate c = layout;
            c.balancer = balancer;
            c.sharding = sharded ? sharding : balance::CpSharding::per_document;
            if (balancer == balance::Balancer::wlb) {
                c.wlb_thresholds = thresholds;
            }
            if (auto status = simulate_candidate(request, mean, cancel, c); !status) {
                return status;
            }
            out.push_back(std::move(c));
            if (!sharded) {
                break;
            }
        }
    }
    return {};
}

// The orders of request.space.rank_orders worth playing `grid` under: the first, and, on a
// described network, each other that places one of its kinds of group (TP, CP, the gradient
// reduction's DP × CP, a pipeline boundary's pair, the tied embedding's) differently from
// every order before it.
std::vector<parallel::RankOrder> orders_that_matter(const PlanRequest& request,
                                                    const parallel::GridShape& grid) {
    std::vector<parallel::RankOrder> orders;
    std::vector<parallel::LayoutPlacement> seen;
    for (const parallel::RankOrder& order : request.space.rank_orders) {
        if (!orders.empty() && !request.hardware.network) {
            break;  // flat rings price every placement alike
        }
        parallel::LayoutPlacement placed =
            parallel::place_layout(grid, order, request.gpus_per_node);
        if (std::find(seen.begin(), seen.end(), placed) == seen.end()) {
            orders.push_back(order);
            seen.push_back(placed);
        }
    }
    return orders;
}

// Plays one layout for every rank order that places it differently, balancer and (cp > 1) CP
// sharding, appending the candidates.
Status play_layout(const PlanRequest& request, const MeanMicroBatch& mean,
                   const std::optional<std::vector<std::int64_t>>& thresholds,
                   const std::atomic<bool>* cancel, const Candidate& layout,
                   std::vector<Candidate>& out) {
    for (const parallel::RankOrder& order : orders_that_matter(request, layout.layout.grid)) {
        Candidate placed = layout;
        placed.layout.rank_order = order;
        if (auto status = play_balancers(request, mean, thresholds, cancel, placed, out); !status) {
            return status;
        }
    }
    return {};
}

// The costs of the whole plan: each candidate's own cost_source says which run gave what.
std::string cost_source(const PlanRequest& request) {
    if (request.cost_model) {
        return request.cost_model->source.empty() ? "given" : request.cost_model->source;
    }
    if (request.calibrations.empty()) {
        return sim::describe(request.hardware);
    }
    if (request.calibrations.size() == 1) {
        return request.calibrations.front().model.source;
    }
    std::string runs;
    for (const std::string& run : request.calibration_runs) {
        runs += (runs.empty() ? "'" : ", '") + run + "'";
    }
    return "fitted on " + runs + ", each cost on the run nearest the layout that ran it";
}

void count(PlanResult& result) {
    std::map<std::string, std::int64_t> reasons;
    PlanCounts& counts = result.counts;
    counts.enumerated = static_cast<std::int64_t>(result.candidates.size());
    for (const Candidate& c : result.candidates) {
        switch (c.status) {
            case CandidateStatus::infeasible:
                ++counts.infeasible;
                ++reasons[c.reason_kind];
                break;
            case CandidateStatus::dominated:
                ++counts.dominated;
                break;
            case CandidateStatus::estimated:
                ++counts.estimated;
                break;
            case CandidateStatus::ranked:
                ++counts.simulated;
                break;
        }
    }
    counts.infeasible_by_reason.assign(reasons.begin(), reasons.end());
    std::stable_sort(counts.infeasible_by_reason.begin(), counts.infeasible_by_reason.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
}

}  // namespace

Result<PlanResult> plan(const PlanRequest& given, const PlanProgress& progress) {
    const auto started = std::chrono::steady_clock::now();
    if (auto status = validate(given); !status) {
        return status.error();
    }
    // The documents resolved once: every candidate samples the same ones.
    PlanRequest request = given;
    request.documents = resolved_documents(given);
    const auto cancelled = [&] { return progress.cancel != nullptr && progress.cancel->load(); };
    const auto report = [&](double fraction) {
        if (progress.progress) {
            progress.progress(fraction);
        }
    };
    auto mean = mean_microbatch(request);
    if (!mean) {
        return mean.error();
    }
    // 1–2: every grid's knobs, memory and estimate (the first 30% of the progress).
    std::vector<parallel::GridShape> grids;
    for (int world : request.world_sizes) {
        for (const parallel::GridShape& grid : grids_of(world, request)) {
            grids.push_back(grid);
        }
    }
    Enumeration enumeration;
    for (std::size_t i = 0; i < grids.size(); ++i) {
        if (cancelled()) {
            return Error{ErrorCode::cancelled, "the search was cancelled"};
        }
        enumerate_grid(request, *mean, grids[i], enumeration);
        report(0.3 * static_cast<double>(i + 1) / static_cast<double>(grids.size()));
    }
    PlanResult result;
    result.candidates = std::move(enumeration.rejected);
    std::vector<EstimatedLayout>& layouts = enumeration.layouts;
    std::stable_sort(layouts.begin(), layouts.end(),
                     [](const EstimatedLayout& a, const EstimatedLayout& b) {
                         return a.estimated_tokens_per_second > b.estimated_tokens_per_second;
                     });
    // 3: the best layouts in full, every balancer and sharding.
    // 3: each world's best layouts in full, every balancer and sharding.
    const std::vector<bool> refined = layouts_to_play(request, layouts);
    const auto to_play = std::count(refined.begin(), refined.end(), true);
    std::optional<std::vector<std::int64_t>> thresholds;
    const bool plays_wlb = std::find(request.space.balancers.begin(), request.space.balancers.end(),
                                     balance::Balancer::wlb) != request.space.balancers.end();
    if (plays_wlb && to_play > 0) {
        auto tuned = tune_thresholds(request, layouts.front().candidate, progress.cancel);
        if (!tuned) {
            return tuned.error();
        }
        thresholds = std::move(*tuned);
    }
    std::int64_t played = 0;
    for (std::size_t i = 0; i < layouts.size(); ++i) {
        if (!refined[i]) {
            result.candidates.push_back(std::move(layouts[i].candidate));
            continue;
        }
        auto status = play_layout(request, *mean, thresholds, progress.cancel, layouts[i].candidate,
                                  result.candidates);
        if (!status) {
            return status.error();
        }
        report(0.3 + 0.7 * static_cast<double>(++played) / static_cast<double>(to_play));
    }
    for (std::size_t i = 0; i < result.candidates.size(); ++i) {
        if (result.candidates[i].status == CandidateStatus::ranked) {
            result.ranked.push_back(i);
        }
    }
    std::stable_sort(result.ranked.begin(), result.ranked.end(), [&](std::size_t a, std::size_t b) {
        return result.candidates[a].tokens_per_second > result.candidates[b].tokens_per_second;
    });
    fold_equal_shardings(result);
    count(result);
    for (std::size_t k = 0; k < result.ranked.size() && k < std::size_t(request.top_k); ++k) {
        for (const std::string& note : result.candidates[result.ranked[k]].cost_notes) {
            if (std::find(result.notes.begin(), result.notes.end(), note) == result.notes.end()) {
                result.notes.push_back(note);
            }
        }
    }
    result.cost_source = cost_source(request);
    result.elapsed_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    report(1.0);
    return result;
}

Result<std::vector<ContextPlan>> plan_contexts(const PlanRequest& request, int max_context,
                                               const PlanProgress& progress) {
    if (request.model.context < 2 || max_context < request.model.context) {
        return Error{ErrorCode::invalid_input, "--max-context " + std::to_string(max_context) +
                                                   " must be at least --context " +
                                                   std::to_string(request.model.context) +
                                                   " (the first context tried)"};
    }
    std::vector<std::int64_t> contexts;
    for (std::int64_t context = request.model.context; context <= max_context; context *= 2) {
        contexts.push_back(context);
    }
    const double steps = static_cast<double>(contexts.size());
    std::vector<ContextPlan> plans;
    int done = 0;
    for (const std::int64_t context : contexts) {
        PlanRequest at = request;
        at.model.context = static_cast<int>(context);
        at.lengths.clear();
        at.document_lengths.assign(static_cast<std::size_t>(std::max(request.global_batch, 1)),
                                   context);
        at.documents = 0;
        PlanProgress part;
        part.cancel = progress.cancel;
        if (progress.progress) {
            part.progress = [&](double fraction) { progress.progress((done + fraction) / steps); };
        }
        auto result = plan(at, part);
        if (!result) {
            return result.error();
        }
        ContextPlan row{.context = static_cast<int>(context), .best = {}, .counts = result->counts};
        if (!result->ranked.empty()) {
            row.best = result->candidates[result->ranked.front()];
        }
        plans.push_back(std::move(row));
        ++done;
        if (!plans.back().best) {
            break;
        }
    }
    return plans;
}

}  // namespace fulcrum::plan
