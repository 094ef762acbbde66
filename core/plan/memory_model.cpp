#include "core/plan/memory_model.h"

#include <algorithm>

namespace fulcrum::plan {

Result<Recompute> parse_recompute(std::string_view name) {
    if (name == "none")
        return Recompute::none;
    if (name == "selective")
        return Recompute::selective;
    if (name == "full")
        return Recompute::full;
    return Error{ErrorCode::invalid_input, "unknown recompute mode '" + std::string(name) +
                                               "' (choose none, selective, full)"};
}

const char* recompute_name(Recompute recompute) {
    switch (recompute) {
        case Recompute::none:
            return "none";
        case Recompute::selective:
            return "selective";
        case Recompute::full:
            return "full";
    }
    return "none";
}

Precision Precision::megatron_mixed() {
    return {};
}

Precision Precision::fp32() {
    Precision precision;
    precision.weight_bytes = 4;
    precision.gradient_bytes = 4;
    precision.optimizer_bytes = 8;  // AdamW's first and second moments; the weights are the master
    precision.activation_bytes = 4;
    return precision;
}

double layer_parameters(const MemoryShape& shape) {
    const double h = shape.hidden;
    const double f = shape.ffn_hidden > 0 ? shape.ffn_hidden : 4.0 * h;
    return 4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h;
}

namespace {

// The layers `stage` holds: its entry of shape.stage_layers, else L/p.
double layers_on(const MemoryShape& shape, int stage) {
    if (static_cast<std::size_t>(stage) < shape.stage_layers.size()) {
        return shape.stage_layers[static_cast<std::size_t>(stage)];
    }
    return double(shape.layers) / std::max(shape.pp, 1);
}

// Forwards a stage has run and not yet backpropagated at its peak, in layers' worth.
double layers_in_flight(const MemoryShape& shape, int stage) {
    const int p = std::max(shape.pp, 1), m = std::max(shape.microbatches, 1);
    const int v = std::max(shape.virtual_stages, 1);
    const double stage_layers = layers_on(shape, stage);
    switch (shape.schedule) {
        case parallel::PipelineSchedule::gpipe:
            return stage_layers * m;
        case parallel::PipelineSchedule::one_f_one_b:
        case parallel::PipelineSchedule::zero_bubble_h1:
            return stage_layers * std::min(p - stage, m);
        case parallel::PipelineSchedule::interleaved: {
            const int chunks = std::min((p - stage - 1) * 2 + (v - 1) * p + 1, m * v);
            return stage_layers / v * chunks;
        }
    }
    return stage_layers;
}

// Korthikanti et al. 2022, Table 2: bytes of 16-bit activations; see the header.
double activations_per_layer(const MemoryShape& shape) {
    const double s = shape.sequence, b = shape.microbatch_size, h = shape.hidden, a = shape.heads;
    const double t = std::max(shape.tp, 1), c = std::max(shape.cp, 1);
    const double local = s / c;  // tokens this rank holds
    const double sbh = local * b * h;
    if (shape.recompute == Recompute::full) {
        return 2 * sbh / (shape.sequence_parallel ? t : 1.0);
    }
    const double linear = shape.sequence_parallel ? 34 / t : 10 + 24 / t;
    const bool scores = shape.recompute == Recompute::none && !shape.flash_attention;
    const double score_elements = scores ? 5 * a * local * s * b / t : 0.0;
    return sbh * linear + score_elements;
}

}  // namespace

StageMemory stage_memory(const MemoryShape& shape, int stage) {
    const int p = std::max(shape.pp, 1);
    const double t = std::max(shape.tp, 1);
    const Precision& precision = shape.precision;
    StageMemory memory;
    memory.stage = stage;
    double parameters = layer_parameters(shape) * layers_on(shape, stage);
    const double embedding =
        double(shape.vocab) * shape.hidden + double(shape.sequence) * shape.hidden;
    if (stage == 0) {
        parameters += embedding;
    }
    if (stage == p - 1) {
        parameters += 2.0 * shape.hidden;  // the final LayerNorm
        if (!shape.tied_embedding || p > 1) {
            // The output layer; with PP a tied embedding is copied to the last stage.
            parameters += double(shape.vocab) * shape.hidden;
        }
    }
    memory.parameters = parameters / t;
    memory.weights_bytes = memory.parameters * precision.weight_bytes;
    memory.gradients_bytes = memory.parameters * precision.gradient_bytes;
    memory.optimizer_bytes = memory.parameters * precision.optimizer_bytes /
                             (precision.distributed_optimizer ? std::max(shape.dp, 1) : 1);
    memory.activations_per_layer_bytes =
        activations_per_layer(shape) * precision.activation_bytes / 2;
    memory.layers_in_flight = layers_in_flight(shape, stage);
    memory.activations_bytes = memory.activations_per_layer_bytes * memory.layers_in_flight;
    return memory;
}

StageMemory peak_stage_memory(const MemoryShape& shape) {
    StageMemory peak = stage_memory(shape, 0);
    for (int stage = 1; stage < std::max(shape.pp, 1); ++stage) {
        const StageMemory memory = stage_memory(shape, stage);
        if (memory.total_bytes() > peak.total_bytes()) {
            peak = memory;
        }
    }
    return peak;
}

}  // namespace fulcrum::plan
