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

Status check_layout(const Layout& layout, const ModelShape& model) {
    const GridShape& grid = layout.grid;
    if (grid.dp < 1 || grid.tp < 1 || grid.pp < 1 || grid.cp < 1) {
        return invalid("--dp, --tp, --pp and --cp must be at least 1");
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
    if (layout.sequence_parallel && grid.tp < 2) {
        return invalid(
            "--sequence-parallel splits TP's LayerNorm and residual work over the TP ranks: it "
            "needs --tp 2 or more");
    }
    return {};
}

}  // namespace fulcrum::parallel
