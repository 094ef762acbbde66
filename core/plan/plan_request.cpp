// A plan request's settings resolved and checked, and what a candidate of it means to the
// memory model and the simulator. Declared in planner.h.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>

#include "core/balance/lengths.h"
#include "core/parallel/memory_model.h"
#include "core/plan/planner.h"

namespace fulcrum::plan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

Error invalid(std::string message) {
    return Error{ErrorCode::invalid_input, std::move(message)};
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
    parallel::MemoryShape shape = parallel::memory_shape(request.model, candidate.layout);
    shape.flash_attention = !request.hardware.unfused_attention;
    shape.attention_chunk = candidate.attention_chunk;
    shape.offload = candidate.offload;
    // FPDT's design takes the loss a chunk at a time as well (the chunks with recomputation).
    if (candidate.offload && candidate.layout.recompute == parallel::Recompute::full) {
        shape.loss_chunk = candidate.attention_chunk;
    }
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
    config.layout = candidate.layout;
    config.balancer = candidate.balancer;
    config.sharding = candidate.sharding;
    config.steps = request.steps;
    config.dtype = request.dtype;
    config.grad_reduce_dtype = request.grad_reduce_dtype;
    config.overlap_grad_reduce = request.overlap_grad_reduce;
    config.overlap_param_gather = request.overlap_param_gather && candidate.layout.zero_stage == 1;
    config.packed_attention = request.packed_attention;
    config.tp_backward_overlap = request.tp_backward_overlap;
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
            sim::merge_calibrations(request.calibrations, request.calibration_runs,
                                    candidate.layout.grid, candidate.layout.sequence_parallel);
        config.cost_model = std::move(merged.model);
        config.cost_origin = merged.origin;
    }
    // Priced as the memory model counts it: the candidate's ZeRO stage, fused attention, its
    // offloaded chunks.
    config.attention_chunk = candidate.offload ? candidate.attention_chunk : 0;
    config.offload = candidate.offload;
    config.hardware = request.hardware;
    config.hardware.gpus_per_node = request.gpus_per_node;
    config.host_cores = request.host_cores;
    config.ranks_per_host = request.gpus_per_node;
    config.attention_kernel = request.attention_kernel;
    return config;
}

}  // namespace fulcrum::plan
