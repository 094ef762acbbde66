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

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
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
struct Layout {
    Candidate candidate;
    double estimated_tokens_per_second = 0;
};

// "4,8,8,4", as fulcrum-train's list options take them.
template <typename Integer>
std::string join(const std::vector<Integer>& values) {
    std::string text;
    for (Integer value : values) {
        text += (text.empty() ? "" : ",") + std::to_string(value);
    }
    return text;
}

std::string general(double value) {
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%g", value);
    return buffer;
}

// A shell word: as is when it holds only safe characters, else single-quoted.
std::string shell_word(const std::string& word) {
    const bool safe = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
               std::string_view("_.,:=/+-").find(c) != std::string_view::npos;
    });
    if (safe) {
        return word;
    }
    std::string quoted = "'";
    for (char c : word) {
        quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    }
    return quoted + "'";
}

MemoryBreakdown breakdown(const parallel::StageMemory& memory) {
    MemoryBreakdown out;
    out.stage = memory.stage;
    out.weights_gib = memory.weights_bytes / kGiB;
    out.gradients_gib = memory.gradients_bytes / kGiB;
    out.optimizer_gib = memory.optimizer_bytes / kGiB;
    out.activations_gib = memory.activations_bytes / kGiB;
    out.total_gib = memory.total_bytes() / kGiB;
    return out;
}

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
            mean.pairs += (microbatch.attention_work + microbatch.tokens) / 2;
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

std::int64_t resolved_documents(const PlanRequest& request) {
    if (request.documents > 0 || !request.document_lengths.empty()) {
        return request.documents;
    }
    sim::SimulationConfig probe;
    probe.model = request.model;
    probe.lengths = request.lengths;
    probe.documents = 4096;
    probe.seed = request.seed;
    auto lengths = sim::training_lengths(probe);
    if (!lengths || lengths->empty()) {
        return 4096;
    }
    const double mean = std::accumulate(lengths->begin(), lengths->end(), 0.0) /
                        static_cast<double>(lengths->size());
    const double tokens = static_cast<double>(request.steps + 1) * request.global_batch *
                          static_cast<double>(request.model.context);
    return std::max<std::int64_t>(4096, static_cast<std::int64_t>(std::ceil(tokens / mean)));
}

parallel::MemoryShape memory_shape(const PlanRequest& request, const Candidate& candidate) {
    parallel::MemoryShape shape;
    shape.layers = request.model.layers;
    shape.hidden = request.model.hidden;
    shape.heads = request.model.heads;
    shape.vocab = request.model.vocab;
    shape.sequence = request.model.context;
    shape.dp = candidate.grid.dp;
    shape.tp = candidate.grid.tp;
    shape.pp = candidate.grid.pp;
    shape.cp = candidate.grid.cp;
    shape.virtual_stages = candidate.virtual_stages;
    shape.schedule = candidate.schedule;
    shape.microbatches = candidate.microbatches;
    shape.stage_layers = candidate.stage_layers;
    shape.recompute = candidate.recompute;
    shape.sequence_parallel = candidate.sequence_parallel;
    shape.flash_attention = request.flash_attention;
    shape.attention_chunk = candidate.attention_chunk;
    shape.offload = candidate.offload;
    shape.precision = request.precision;
    return shape;
}

double usable_bytes(const PlanRequest& request) {
    return request.gpu_memory_gib * request.usable_memory_fraction * kGiB;
}

const char* candidate_status_name(CandidateStatus status) {
    switch (status) {
        case CandidateStatus::ranked:
            return "ranked";
        case CandidateStatus::estimated:
            return "estimated";
        case CandidateStatus::dominated:
            return "dominated";
        case CandidateStatus::infeasible:
            return "infeasible";
    }
    return "infeasible";
}

Status validate(const PlanRequest& request) {
    const sim::ModelShape& model = request.model;
    if (request.world_sizes.empty()) {
        return invalid("--world needs at least one world size, e.g. --world 1024 or 256-4096");
    }
    for (int world : request.world_sizes) {
        if (world < 1) {
            return invalid("--world " + std::to_string(world) + ": a world has at least 1 GPU");
        }
    }
    if (request.gpus_per_node < 1) {
        return invalid("--gpus-per-node must be at least 1");
    }
    if (!(request.gpu_memory_gib > 0)) {
        return invalid("--gpu-memory-gib must be positive");
    }
    if (!(request.usable_memory_fraction > 0) || request.usable_memory_fraction > 1) {
        return invalid("the usable share of GPU memory must be in (0, 1]");
    }
    if (model.layers < 1 || model.hidden < 1 || model.heads < 1 || model.vocab < 1) {
        return invalid("--layers, --hidden, --heads and --vocab must be at least 1");
    }
    if (model.hidden % model.heads != 0) {
        return invalid("--heads " + std::to_string(model.heads) + " must divide --hidden " +
                       std::to_string(model.hidden));
    }
    if (model.context < 2) {
        return invalid("--context must be at least 2");
    }
    if (request.global_batch < 1) {
        return invalid("--global-batch must be at least 1 sequence");
    }
    if (request.lengths.empty() && request.document_lengths.empty()) {
        return invalid("--lengths is needed, e.g. long-tail:context=N or file:PATH");
    }
    if (request.top_k < 1 || request.steps < 1 || request.refine_layouts < 0) {
        return invalid("--top and --steps must be at least 1");
    }
    const PlanSpace& space = request.space;
    if (space.schedules.empty() || space.balancers.empty() || space.shardings.empty() ||
        space.recomputes.empty()) {
        return invalid("--schedules, --balancers, --cp-shards and --recomputes need a value");
    }
    for (int v : space.virtual_stages) {
        if (v < 2) {
            return invalid("--virtual-stages takes counts of at least 2");
        }
    }
    if (auto lengths = balance::parse_length_spec(request.lengths);
        request.document_lengths.empty() && !lengths) {
        return invalid("--lengths: " + lengths.error().message);
    }
    return {};
}

sim::SimulationConfig simulation_config(const PlanRequest& request, const Candidate& candidate) {
    sim::SimulationConfig config;
    config.model = request.model;
    config.grid = candidate.grid;
    config.schedule = candidate.schedule;
    config.virtual_stages = candidate.virtual_stages;
    config.balancer = candidate.balancer;
    config.sharding = candidate.sharding;
    config.microbatches = candidate.microbatches;
    config.steps = request.steps;
    config.recompute = candidate.recompute;
    config.sequence_parallel = candidate.sequence_parallel;
    config.dtype = request.dtype;
    config.overlap_grad_reduce = request.overlap_grad_reduce;
    config.stage_layers = candidate.stage_layers;
    config.lengths = request.lengths;
    config.documents = resolved_documents(request);
    config.document_lengths = request.document_lengths;
    config.seed = request.seed;
    config.gpu_memory_gib = request.gpu_memory_gib;
    config.wlb_thresholds = candidate.wlb_thresholds;
    if (request.cost_model) {
        config.cost_model = request.cost_model;
    } else if (!request.calibrations.empty()) {
        sim::Calibration merged =
            sim::merge_calibrations(request.calibrations, request.calibration_runs, candidate.grid,
                                    candidate.sequence_parallel);
        config.cost_model = std::move(merged.model);
        config.cost_origin = merged.origin;
    }
    config.hardware = request.hardware;
    config.hardware.gpus_per_node = request.gpus_per_node;
    config.host_cores = request.host_cores;
    config.ranks_per_host = request.gpus_per_node;
    config.attention_kernel = request.attention_kernel;
    return config;
}

std::vector<int> split_layers(int layers, int stages, double layer_ns, double first_ns,
                              double last_ns, const std::function<bool(int, int)>& fits) {
    if (stages < 1 || layers < stages) {
        return {};
    }
    constexpr double kNever = std::numeric_limits<double>::infinity();
    const auto n = static_cast<std::size_t>(layers);
    // best[s][i]: the least bottleneck of the first i layers on stages 0..s-1; from[s][i] the
    // layers before stage s-1's (the argmin), to read the split back.
    std::vector<std::vector<double>> best(static_cast<std::size_t>(stages) + 1,
                                          std::vector<double>(n + 1, kNever));
    std::vector<std::vector<int>> from(best.size(), std::vector<int>(n + 1, -1));
    best[0][0] = 0;
    for (int s = 1; s <= stages; ++s) {
        const int stage = s - 1;
        const double extra = (stage == 0 ? first_ns : 0.0) + (stage == stages - 1 ? last_ns : 0.0);
        // Every stage after this one needs a layer.
        for (int i = s; i <= layers - (stages - s); ++i) {
            for (int j = s - 1; j < i; ++j) {
                const double before =
                    best[static_cast<std::size_t>(s - 1)][static_cast<std::size_t>(j)];
                if (before == kNever || !fits(stage, i - j)) {
                    continue;
                }
                const double bottleneck = std::max(before, (i - j) * layer_ns + extra);
                auto& cell = best[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)];
                if (bottleneck < cell) {
                    cell = bottleneck;
                    from[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)] = j;
                }
            }
        }
    }
    if (best[static_cast<std::size_t>(stages)][n] == kNever) {
        return {};
    }
    std::vector<int> split(static_cast<std::size_t>(stages));
    int i = layers;
    for (int s = stages; s >= 1; --s) {
        const int j = from[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)];
        split[static_cast<std::size_t>(s - 1)] = i - j;
        i = j;
    }
    return split;
}

namespace {

// The memory a stage needs with `layers` layers on it, memoised per (stage, layers).
class StageMemoryTable {
public:
    StageMemoryTable(const parallel::MemoryShape& shape) : shape_(shape) {
        table_.resize(static_cast<std::size_t>(std::max(shape.pp, 1)) *
                      static_cast<std::size_t>(shape.layers + 1));
    }
    const parallel::StageMemory& at(int stage, int layers) {
        auto& cell =
            table_[static_cast<std::size_t>(stage) * static_cast<std::size_t>(shape_.layers + 1) +
                   static_cast<std::size_t>(layers)];
        if (!cell) {
            // A whole split that gives `stage` its layers and the rest to the other stages
            // (as evenly as they go, each at least one: the DP asks for no more), so the
            // shape stays valid; a stage's memory depends on its own layers alone.
            parallel::MemoryShape shape = shape_;
            const int p = shape.pp, rest = shape.layers - layers;
            shape.stage_layers.assign(static_cast<std::size_t>(p), 0);
            for (int s = 0, other = 0; s < p; ++s) {
                if (s == stage) {
                    shape.stage_layers[static_cast<std::size_t>(s)] = layers;
                    continue;
                }
                shape.stage_layers[static_cast<std::size_t>(s)] =
                    rest / (p - 1) + (other < rest % (p - 1) ? 1 : 0);
                ++other;
            }
            cell = parallel::stage_memory(shape, stage);
        }
        return *cell;
    }

private:
    parallel::MemoryShape shape_;
    std::vector<std::optional<parallel::StageMemory>> table_;
};

std::string memory_reason(const parallel::StageMemory& peak, double usable) {
    return "needs " + format_bytes(std::llround(peak.total_bytes())) + " on stage " +
           std::to_string(peak.stage) + " (model state " +
           format_bytes(std::llround(peak.model_state_bytes())) + " + activations " +
           format_bytes(std::llround(peak.activations_bytes)) + ") of " +
           format_bytes(std::llround(usable)) + " usable";
}

// Places the layers (the exact split, or L/p) so that every stage fits, and fills the memory
// figures; false with the reason when no placement fits. `equal` is the layout's estimate
// with L/p layers a stage, whose stage times price a layer and the LM head.
bool place_layers(const PlanRequest& request, Candidate& candidate,
                  const sim::StepEstimate& equal) {
    const parallel::MemoryShape shape = memory_shape(request, candidate);
    const double usable = usable_bytes(request);
    const int p = candidate.grid.pp;
    const parallel::StageMemory equal_peak = parallel::peak_stage_memory(shape);
    if (p > 1 && candidate.virtual_stages == 1 && request.space.exact_layer_split) {
        StageMemoryTable table(shape);
        const int first_layers = request.model.layers / p + (request.model.layers % p > 0);
        const double layer_ns = equal.stage_ns.front() / first_layers;
        const int last_layers = request.model.layers / p;
        const double last_ns = std::max(0.0, equal.stage_ns.back() - last_layers * layer_ns);
        const auto fits = [&](int stage, int n) {
            return table.at(stage, n).total_bytes() <= usable;
        };
        std::vector<int> split =
            split_layers(request.model.layers, p, layer_ns, 0.0, last_ns, fits);
        if (!split.empty()) {
            // fulcrum-train's default split when it fits and is as good: no flag needed.
            std::vector<int> equal_split(static_cast<std::size_t>(p));
            bool equal_fits = true;
            double equal_worst = 0, worst = 0;
            for (int s = 0; s < p; ++s) {
                const auto range = parallel::stage_layers(s, p, request.model.layers);
                const int n = range.last - range.first;
                const double extra = s == p - 1 ? last_ns : 0.0;
                equal_split[static_cast<std::size_t>(s)] = n;
                equal_fits = equal_fits && fits(s, n);
                equal_worst = std::max(equal_worst, n * layer_ns + extra);
                worst = std::max(worst, split[static_cast<std::size_t>(s)] * layer_ns + extra);
            }
            if (equal_fits && equal_worst <= worst * (1 + 1e-12)) {
                split = equal_split;
            }
            parallel::StageMemory peak = table.at(0, split[0]);
            for (int s = 1; s < p; ++s) {
                const parallel::StageMemory& memory =
                    table.at(s, split[static_cast<std::size_t>(s)]);
                if (memory.total_bytes() > peak.total_bytes()) {
                    peak = memory;
                }
            }
            if (split != equal_split) {
                candidate.stage_layers = std::move(split);
            }
            candidate.memory = breakdown(peak);
            return true;
        }
    } else if (equal_peak.total_bytes() <= usable) {
        candidate.memory = breakdown(equal_peak);
        return true;
    }
    candidate.memory = breakdown(equal_peak);
    candidate.reason = memory_reason(equal_peak, usable);
    candidate.reason_kind = equal_peak.model_state_bytes() > usable ? "model state exceeds memory"
                                                                    : "activations exceed memory";
    return false;
}

// Model FLOPs of training one token (forward and backward, 3× the forward's 2·parameters) and
// of one causal pair (3 × 4h a layer): Narayanan et al., SC'21, §5.1, without recomputation.
double model_flops(const sim::ModelShape& model, double tokens, double pairs) {
    const double h = model.hidden, layers = model.layers;
    return 6.0 * (12.0 * layers * h * h + h * model.vocab) * tokens + 12.0 * layers * h * pairs;
}

double peak_tflops(const PlanRequest& request) {
    if (request.peak_tflops > 0) {
        return request.peak_tflops;
    }
    return request.hardware.gemm_efficiency.empty() ? kH100PeakTflops : request.hardware.tflops;
}

// Estimates one layout (a candidate that fits): its layer placement, then the step.
bool estimate_layout(const PlanRequest& request, const MeanMicroBatch& mean, Layout& layout) {
    Candidate& c = layout.candidate;
    sim::SimulationConfig config = simulation_config(request, c);
    const sim::StageCosts equal_costs = sim::config_costs(config);
    const sim::StepEstimate equal =
        sim::estimate_step(config, equal_costs, mean.tokens, mean.pairs);
    if (!place_layers(request, c, equal)) {
        return false;
    }
    sim::StepEstimate estimate = equal;
    if (!c.stage_layers.empty()) {
        config.stage_layers = c.stage_layers;
        estimate = sim::estimate_step(config, sim::config_costs(config), mean.tokens, mean.pairs);
    }
    const double tokens = static_cast<double>(c.grid.dp) * c.microbatches * mean.tokens;
    c.estimated_step_ns = estimate.step_ns;
    c.step_ns = estimate.step_ns;
    c.bubble_fraction = estimate.bubble_fraction;
    c.tokens_per_second = estimate.step_ns > 0 ? tokens / (estimate.step_ns * 1e-9) : 0.0;
    c.mfu = c.tokens_per_second *
            model_flops(request.model, 1.0, static_cast<double>(mean.pairs) / mean.tokens) /
            (c.grid.world() * peak_tflops(request) * 1e12);
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

// Where a layout's activations do not fit without recomputation: chunked attention with Q,
// K and V offloaded to host memory (FPDT), tried before recomputing, which adds work where
// offload's copies overlap compute (bench/README.md: 91–93% hidden on the CPU engine). True,
// `layout` estimated with them, when they make it fit.
bool try_offload(const PlanRequest& request, const MeanMicroBatch& mean, Layout& layout) {
    Candidate& c = layout.candidate;
    if (!request.space.offload || c.recompute != parallel::Recompute::none ||
        c.reason_kind != "activations exceed memory") {
        return false;
    }
    Layout offloaded{layout.candidate};
    Candidate& o = offloaded.candidate;
    o.reason.clear();
    o.reason_kind.clear();
    o.attention_chunk = request.space.attention_chunk > 0
                            ? request.space.attention_chunk
                            : std::max(1, std::min(4096, request.model.context / c.grid.cp));
    o.offload = true;
    if (!estimate_layout(request, mean, offloaded)) {
        return false;
    }
    o.status = CandidateStatus::estimated;
    layout = std::move(offloaded);
    return true;
}

struct Enumeration {
    std::vector<Candidate> rejected;  // infeasible and dominated
    std::vector<Layout> layouts;      // fit, not dominated
};

// Every knob of one grid: schedules, sequence parallelism, recomputation (the least that fits).
void enumerate_grid(const PlanRequest& request, const MeanMicroBatch& mean,
                    const parallel::GridShape& grid, Enumeration& out) {
    Candidate base;
    base.grid = grid;
    base.microbatches = std::max(1, request.global_batch / grid.dp);
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
        scheduled.schedule = schedule;
        scheduled.virtual_stages = v;
        if (auto status = parallel::check_pipeline(schedule, {grid.pp, base.microbatches, v});
            !status || grid.pp * v > request.model.layers) {
            scheduled.reason_kind = "schedule does not fit the layout";
            scheduled.reason =
                status ? "pp × virtual stages exceeds the layers" : status.error().message;
            out.rejected.push_back(std::move(scheduled));
            continue;
        }
        for (bool sp : {false, true}) {
            if (sp && (grid.tp < 2 || !request.space.sequence_parallel)) {
                continue;
            }
            std::string fitted;  // the least recomputation that fits, as the reason names it
            for (const parallel::Recompute& recompute : recomputes) {
                Layout layout{scheduled};
                Candidate& c = layout.candidate;
                c.sequence_parallel = sp;
                c.recompute = recompute;
                if (!fitted.empty()) {
                    c.status = CandidateStatus::dominated;
                    c.reason_kind = "more recomputation than needed";
                    c.reason = fitted + " fits and recomputes less";
                    out.rejected.push_back(std::move(c));
                } else if (estimate_layout(request, mean, layout)) {
                    c.status = CandidateStatus::estimated;
                    fitted = std::string("recompute ") + parallel::recompute_name(recompute);
                    out.layouts.push_back(std::move(layout));
                } else {
                    Candidate refused = c;
                    if (try_offload(request, mean, layout)) {
                        fitted = "offloading Q, K and V";
                        out.layouts.push_back(std::move(layout));
                    }
                    out.rejected.push_back(std::move(refused));
                }
            }
        }
    }
}

// The layout's options, the same for fulcrum-train and fulcrum simulate: " --dp 2 --tp 1 ...".
std::string layout_options(const Candidate& c) {
    std::string line;
    line += " --dp " + std::to_string(c.grid.dp) + " --tp " + std::to_string(c.grid.tp) + " --pp " +
            std::to_string(c.grid.pp) + " --cp " + std::to_string(c.grid.cp);
    line += " --micro-batches " + std::to_string(c.microbatches);
    line += std::string(" --schedule ") + parallel::schedule_name(c.schedule);
    if (c.virtual_stages > 1) {
        line += " --virtual-stages " + std::to_string(c.virtual_stages);
    }
    if (!c.stage_layers.empty()) {
        line += " --stage-layers " + join(c.stage_layers);
    }
    line += std::string(" --recompute ") + parallel::recompute_name(c.recompute);
    if (c.sequence_parallel) {
        line += " --sequence-parallel";
    }
    return line;
}

// The packing's options, the same for both command lines. wlb's S_max and thresholds are given,
// so that simulate --calibrate does not take the run's own.
std::string packing_options(const Candidate& c, const sim::SimulationConfig& config) {
    std::string line = std::string(" --balancer ") + balance::balancer_name(c.balancer);
    line += std::string(" --cp-shard ") + balance::cp_sharding_name(c.sharding);
    if (c.balancer == balance::Balancer::wlb) {
        line += " --wlb-max-tokens " + std::to_string(sim::wlb_max_tokens_from_memory(config));
        if (c.wlb_thresholds) {
            line += " --wlb-thresholds " +
                    (c.wlb_thresholds->empty() ? std::string("none") : join(*c.wlb_thresholds));
        }
    }
    return line;
}

std::string train_command(const PlanRequest& request, const Candidate& c,
                          const sim::SimulationConfig& config) {
    const sim::ModelShape& model = request.model;
    std::string line = "mpirun -np " + std::to_string(c.grid.world()) + " fulcrum-train";
    line += layout_options(c);
    line += packing_options(c, config);
    line += " --layers " + std::to_string(model.layers) + " --hidden " +
            std::to_string(model.hidden) + " --heads " + std::to_string(model.heads) +
            " --context " + std::to_string(model.context);
    line += " --lengths " + shell_word(request.lengths) + " --documents " +
            std::to_string(config.documents) + " --seed " + std::to_string(request.seed);
    line += " --steps " + std::to_string(request.steps);
    line += std::string(" --overlap-grad-reduce ") + (request.overlap_grad_reduce ? "on" : "off");
    if (c.offload) {
        line += " --attention-chunk " + std::to_string(c.attention_chunk) + " --offload on";
    }
    return line;
}

std::string simulate_command(const PlanRequest& request, const Candidate& c,
                             const sim::SimulationConfig& config) {
    const sim::ModelShape& model = request.model;
    const sim::HardwareAssumptions& hw = request.hardware;
    std::string line = "fulcrum simulate";
    for (const std::string& run : request.calibration_runs) {
        line += " --calibrate " + shell_word(run);
    }
    const bool fitted = !request.calibration_runs.empty() || !request.cost_model_file.empty();
    if (!request.cost_model_file.empty()) {
        line += " --cost-model " + shell_word(request.cost_model_file);
    }
    // With fits, the analytic model prices only what they lack: the same system as here
    // (simulate's default is h100's).
    if (!hw.preset.empty() && !(fitted && hw.preset == "h100")) {
        line += " --hardware " + hw.preset;
    } else if (!fitted) {
        line += " --tflops " + general(hw.tflops) + " --nvlink-gbs " + general(hw.nvlink_gbs) +
                " --network-gbs " + general(hw.network_gbs) + " --latency-us " +
                general(hw.collective_latency_us);
    }
    line += " --gpus-per-node " + std::to_string(request.gpus_per_node);
    line += " --layers " + std::to_string(model.layers) + " --hidden " +
            std::to_string(model.hidden) + " --heads " + std::to_string(model.heads) +
            " --context " + std::to_string(model.context) + " --vocab " +
            std::to_string(model.vocab);
    line += layout_options(c);
    line += std::string(" --dtype ") + sim::dtype_name(request.dtype);
    line += std::string(" --overlap-grad-reduce ") + (request.overlap_grad_reduce ? "on" : "off");
    line += packing_options(c, config);
    if (!request.calibration_runs.empty()) {
        line += " --attention-kernel " + config.attention_kernel;
    }
    line += " --gpu-memory-gib " + general(request.gpu_memory_gib);
    line += " --lengths " + shell_word(request.lengths) + " --documents " +
            std::to_string(config.documents) + " --seed " + std::to_string(request.seed);
    line += " --steps " + std::to_string(request.steps);
    return line;
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
            model_flops(request.model, 1.0, static_cast<double>(mean.pairs) / mean.tokens) /
            (c.grid.world() * peak_tflops(request) * 1e12);
    c.train_command = train_command(request, c, config);
    c.simulate_command = simulate_command(request, c, config);
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
    config.grid = {.dp = 1, .tp = layout.grid.tp, .pp = layout.grid.pp, .cp = layout.grid.cp};
    config.microbatches = batch;
    config.schedule = parallel::PipelineSchedule::one_f_one_b;
    config.virtual_stages = 1;
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
    return a.grid == b.grid && a.microbatches == b.microbatches && a.schedule == b.schedule &&
           a.virtual_stages == b.virtual_stages && a.recompute == b.recompute &&
           a.sequence_parallel == b.sequence_parallel && a.balancer == b.balancer &&
           a.attention_chunk == b.attention_chunk && a.offload == b.offload &&
           a.stage_layers == b.stage_layers && a.sharding != b.sharding;
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
std::vector<bool> layouts_to_play(const PlanRequest& request, const std::vector<Layout>& layouts) {
    const int per_world =
        request.refine_layouts > 0 ? request.refine_layouts : std::max(4 * request.top_k, 32);
    std::map<int, int> taken;
    std::vector<bool> play(layouts.size());
    for (std::size_t i = 0; i < layouts.size(); ++i) {
        int& n = taken[layouts[i].candidate.grid.world()];
        play[i] = n < per_world;
        n += play[i] ? 1 : 0;
    }
    return play;
}

// Plays one layout for every balancer and (cp > 1) CP sharding, appending the candidates.
Status play_layout(const PlanRequest& request, const MeanMicroBatch& mean,
                   const std::optional<std::vector<std::int64_t>>& thresholds,
                   const std::atomic<bool>* cancel, const Candidate& layout,
                   std::vector<Candidate>& out) {
    const bool sharded = layout.grid.cp > 1;
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
    std::vector<Layout>& layouts = enumeration.layouts;
    std::stable_sort(layouts.begin(), layouts.end(), [](const Layout& a, const Layout& b) {
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

}  // namespace fulcrum::plan
