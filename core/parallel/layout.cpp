#include "core/parallel/layout.h"

#include <algorithm>
#include <string>
#include <utility>

namespace fulcrum::parallel {
namespace {

Error invalid(std::string message) {
    return Error{ErrorCode::invalid_input, std::move(message)};
}

}  // namespace

Result<Architecture> parse_architecture(std::string_view name) {
    if (name == "gpt")
        return Architecture::gpt;
    if (name == "llama")
        return Architecture::llama;
    return invalid("unknown architecture '" + std::string(name) + "' (use gpt or llama)");
}

const char* architecture_name(Architecture architecture) {
    return architecture == Architecture::llama ? "llama" : "gpt";
}

int kv_heads_of(const ModelShape& model) {
    return model.kv_heads > 0 ? model.kv_heads : model.heads;
}

int kv_hidden_of(const ModelShape& model) {
    return static_cast<int>(std::int64_t(model.hidden) * kv_heads_of(model) /
                            std::max(model.heads, 1));
}

int ffn_hidden_of(const ModelShape& model) {
    return model.ffn_hidden > 0 ? model.ffn_hidden : 4 * model.hidden;
}

bool tied_embedding(const ModelShape& model) {
    return model.architecture == Architecture::gpt;
}

double layer_gemm_weights(const ModelShape& model) {
    const double h = model.hidden, f = ffn_hidden_of(model), h_kv = kv_hidden_of(model);
    const double mlp_matrices = model.architecture == Architecture::llama ? 3 : 2;
    return h * (h + 2 * h_kv) + h * h + mlp_matrices * h * f;
}

double layer_parameters(const ModelShape& model) {
    const double h = model.hidden, f = ffn_hidden_of(model);
    if (model.architecture == Architecture::llama) {
        return layer_gemm_weights(model) + 2 * h;
    }
    const double h_kv = kv_hidden_of(model);
    return layer_gemm_weights(model) + (h + 2 * h_kv) + h + f + h + 4 * h;
}

double embedding_parameters(const ModelShape& model) {
    const double token = double(model.vocab) * model.hidden;
    return model.architecture == Architecture::llama ? token
                                                     : token + double(model.context) * model.hidden;
}

double head_parameters(const ModelShape& model) {
    if (model.architecture == Architecture::llama) {
        return double(model.hidden) + double(model.vocab) * model.hidden;
    }
    return 2.0 * model.hidden;
}

double model_parameters(const ModelShape& model) {
    return layer_parameters(model) * model.layers + embedding_parameters(model) +
           head_parameters(model);
}

Result<ContextParallelism> parse_context_parallelism(std::string_view name) {
    if (name == "all-gather")
        return ContextParallelism::all_gather;
    if (name == "ulysses")
        return ContextParallelism::ulysses;
    return invalid("unknown context parallelism '" + std::string(name) +
                   "' (use all-gather or ulysses)");
}

const char* context_parallelism_name(ContextParallelism cp) {
    return cp == ContextParallelism::ulysses ? "ulysses" : "all-gather";
}

double training_flops(const ModelShape& model, double tokens, double pairs) {
    const double h = model.hidden, layers = model.layers;
    return 6.0 * (layers * layer_gemm_weights(model) + h * model.vocab) * tokens +
           12.0 * layers * h * pairs;
}

std::string describe_model(const ModelShape& model) {
    std::string text = model.architecture == Architecture::gpt
                           ? ""
                           : std::string(architecture_name(model.architecture)) + ", ";
    text += std::to_string(model.layers) + " layers, hidden " + std::to_string(model.hidden) +
            ", " + std::to_string(model.heads) + " heads";
    if (model.kv_heads > 0 && model.kv_heads != model.heads) {
        text += " (" + std::to_string(model.kv_heads) + " key-value)";
    }
    if (model.ffn_hidden > 0 && model.ffn_hidden != 4 * model.hidden) {
        text += ", MLP " + std::to_string(model.ffn_hidden);
    }
    return text + ", context " + std::to_string(model.context) + ", vocab " +
           std::to_string(model.vocab);
}

Status check_layout(const Layout& layout, const ModelShape& model) {
    const GridShape& grid = layout.grid;
    if (grid.dp < 1 || grid.tp < 1 || grid.pp < 1 || grid.cp < 1) {
        return invalid("--dp, --tp, --pp and --cp must be at least 1");
    }
    if (model.layers < 1) {
        return invalid("--layers must be at least 1, not " + std::to_string(model.layers));
    }
    if (grid.pp > model.layers) {
        return invalid("--pp " + std::to_string(grid.pp) +
                       " is more pipeline stages than --layers " + std::to_string(model.layers) +
                       "; every stage needs a layer");
    }
    if (model.heads < 1 || model.hidden % model.heads != 0) {
        return invalid("--heads " + std::to_string(model.heads) + " must divide --hidden " +
                       std::to_string(model.hidden));
    }
    if (model.hidden % grid.tp != 0 || model.heads % grid.tp != 0) {
        return invalid("--tp " + std::to_string(grid.tp) + " must divide --heads " +
                       std::to_string(model.heads) + " (each TP rank holds whole heads)");
    }
    if (const int kv = kv_heads_of(model); model.heads % kv != 0 || kv % grid.tp != 0) {
        return invalid("--kv-heads " + std::to_string(kv) + " must divide --heads " +
                       std::to_string(model.heads) + " and be divisible by --tp " +
                       std::to_string(grid.tp) + " (each TP rank holds whole key-value heads)");
    }
    if (model.ffn_hidden < 0 || ffn_hidden_of(model) % grid.tp != 0) {
        return invalid("--ffn-hidden " + std::to_string(ffn_hidden_of(model)) +
                       " must be divisible by --tp " + std::to_string(grid.tp));
    }
    if (layout.schedule == PipelineSchedule::interleaved && grid.pp < 2) {
        return invalid(
            "the interleaved schedule needs --pp 2 or more (its model chunks take turns between "
            "pipeline stages)");
    }
    if (auto status =
            check_pipeline(layout.schedule, {grid.pp, layout.microbatches, layout.virtual_stages});
        !status) {
        return status;
    }
    if (grid.pp * layout.virtual_stages > model.layers) {
        return invalid("--pp " + std::to_string(grid.pp) + " x --virtual-stages " +
                       std::to_string(layout.virtual_stages) +
                       " is more model chunks than --layers " + std::to_string(model.layers) +
                       "; every model chunk needs a layer");
    }
    if (!layout.stage_layers.empty()) {
        // One count per model chunk (p, or p·v interleaved).
        if (auto status = check_stage_layers(
                layout.stage_layers, grid.pp * std::max(layout.virtual_stages, 1), model.layers);
            !status) {
            return status;
        }
    }
    if (layout.context_parallelism == ContextParallelism::ulysses &&
        model.heads % (grid.tp * grid.cp) != 0) {
        return invalid("--cp-impl ulysses gives each CP rank whole heads: --tp " +
                       std::to_string(grid.tp) + " x --cp " + std::to_string(grid.cp) +
                       " must divide --heads " + std::to_string(model.heads));
    }
    if (layout.zero_stage < 0 || layout.zero_stage > 3) {
        return invalid("--zero takes a stage from 0 to 3, not " +
                       std::to_string(layout.zero_stage));
    }
    if (layout.offload_checkpoints && layout.recompute != Recompute::full) {
        return invalid(
            "--offload-checkpoints moves full recomputation's layer inputs to host memory: it "
            "needs --recompute full");
    }
    if (layout.sequence_parallel && grid.tp < 2) {
        return invalid(
            "--sequence-parallel splits TP's LayerNorm and residual work over the TP ranks: it "
            "needs --tp 2 or more");
    }
    return {};
}

}  // namespace fulcrum::parallel
