#include "engine/model/params.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/util/random.h"

namespace fulcrum::engine {

std::int64_t parameter_count(const ModelShape& model) {
    const std::int64_t c = model.hidden;
    return std::int64_t(model.vocab) * c + std::int64_t(model.context) * c +
           std::int64_t(model.layers) * (12 * c * c + 13 * c) + 2 * c;
}

std::string describe(const ModelShape& model) {
    std::ostringstream out;
    out << "L" << model.layers << " C" << model.hidden << " H" << model.heads << " ctx"
        << model.context << " V" << model.vocab << " (" << parameter_count(model) << " params)";
    return out.str();
}

Status validate(const ModelShape& model) {
    auto invalid = [](std::string message) {
        return Status(Error{ErrorCode::invalid_input, std::move(message)});
    };
    if (model.architecture != parallel::Architecture::gpt || model.kv_heads != 0 ||
        model.ffn_hidden != 0) {
        return invalid(
            "the engine trains GPT layers (4 x hidden MLP, one key-value head per head); "
            "Llama shapes are for fulcrum simulate and fulcrum plan");
    }
    if (model.vocab != 256) {
        return invalid("the vocabulary must be 256: the engine trains on raw bytes");
    }
    if (model.layers < 1)
        return invalid("layers must be at least 1");
    if (model.context < 2)
        return invalid("context must be at least 2 tokens");
    if (model.hidden < 1 || model.heads < 1) {
        return invalid("hidden and heads must be positive");
    }
    if (model.hidden % model.heads != 0) {
        return invalid("hidden (" + std::to_string(model.hidden) +
                       ") must be a multiple of heads (" + std::to_string(model.heads) + ")");
    }
    return {};
}

Status validate_tensor_parallel(const ModelShape& config, int tp_size) {
    if (tp_size < 1) {
        return Error{ErrorCode::invalid_input, "the TP degree must be at least 1"};
    }
    if (config.heads % tp_size != 0) {
        return Error{ErrorCode::invalid_input,
                     "TP " + std::to_string(tp_size) + " does not divide the " +
                         std::to_string(config.heads) +
                         " attention heads; tensor parallelism splits whole heads"};
    }
    return {};
}

ParameterLayout::ParameterLayout(const ModelShape& config, int tp_size, StageParameters held)
    : config_(config), tp_size_(tp_size), held_(std::move(held)) {
    FULCRUM_CHECK(held_.blocks.empty() || int(held_.blocks.size()) == config.layers,
                  "one held flag per block");
    const Status valid = validate_tensor_parallel(config, tp_size);
    FULCRUM_CHECK(valid.ok(), valid.ok() ? "" : valid.error().message.c_str());
    const std::int64_t c = config.hidden;
    const std::int64_t cl = c / tp_size;  // this rank's share of C (whole heads) and of 4C
    // Every tensor counts toward the whole model's check below; only the held are laid out.
    std::int64_t whole = 0;
    auto add = [&](ParameterKind kind, int layer, std::string name, std::int64_t rows,
                   std::int64_t cols, InitKind init, TpSplit split = TpSplit::replicated) {
        const std::int64_t numel = cols == 0 ? rows : rows * cols;
        whole += numel;
        const bool held = layer >= 0                                  ? held_.holds_block(layer)
                          : kind == ParameterKind::token_embedding    ? held_.token_embedding
                          : kind == ParameterKind::position_embedding ? held_.position_embedding
                                                                      : held_.final_norm;
        if (!held) {
            return;
        }
        const bool decay = cols != 0;
        tensors_.push_back({kind, layer, std::move(name), total_, rows, cols, decay, init, split});
        total_ += numel;
    };
    using S = TpSplit;
    using K = ParameterKind;
    using I = InitKind;
    add(K::token_embedding, -1, "wte", config.vocab, c, I::normal);
    add(K::position_embedding, -1, "wpe", config.context, c, I::normal);
    for (int l = 0; l < config.layers; ++l) {
        const std::string p = "h." + std::to_string(l) + ".";
        add(K::ln1_weight, l, p + "ln1.weight", c, 0, I::ones);
        add(K::ln1_bias, l, p + "ln1.bias", c, 0, I::zeros);
        add(K::qkv_weight, l, p + "attn.qkv.weight", 3 * cl, c, I::normal, S::head_rows);
        add(K::qkv_bias, l, p + "attn.qkv.bias", 3 * cl, 0, I::zeros, S::head_rows);
        add(K::attn_proj_weight, l, p + "attn.proj.weight", c, cl, I::residual_normal,
            S::input_columns);
        add(K::attn_proj_bias, l, p + "attn.proj.bias", c, 0, I::zeros);
        add(K::ln2_weight, l, p + "ln2.weight", c, 0, I::ones);
        add(K::ln2_bias, l, p + "ln2.bias", c, 0, I::zeros);
        add(K::fc_weight, l, p + "mlp.fc.weight", 4 * cl, c, I::normal, S::output_rows);
        add(K::fc_bias, l, p + "mlp.fc.bias", 4 * cl, 0, I::zeros, S::output_rows);
        add(K::fc_proj_weight, l, p + "mlp.proj.weight", c, 4 * cl, I::residual_normal,
            S::input_columns);
        add(K::fc_proj_bias, l, p + "mlp.proj.bias", c, 0, I::zeros);
    }
    add(K::lnf_weight, -1, "lnf.weight", c, 0, I::ones);
    add(K::lnf_bias, -1, "lnf.bias", c, 0, I::zeros);
    // The split tensors hold 12C² + 7C per block in the serial layout; a TP rank has 1/tp.
    const std::int64_t split_per_block = 12 * c * c + 7 * c;
    FULCRUM_CHECK(whole == parameter_count(config) -
                               config.layers * (split_per_block - split_per_block / tp_size),
                  "layout disagrees with parameter_count");
}

bool ParameterLayout::holds(ParameterKind kind, int layer) const {
    return std::any_of(tensors_.begin(), tensors_.end(), [&](const ParameterTensor& t) {
        return t.kind == kind && t.layer == layer;
    });
}

const ParameterTensor& ParameterLayout::find(ParameterKind kind, int layer) const {
    for (const ParameterTensor& t : tensors_) {
        if (t.kind == kind && t.layer == layer)
            return t;
    }
    FULCRUM_CHECK(false, "no such parameter tensor, or not held by this stage");
    return tensors_.front();
}

std::vector<float> expand_held(const ParameterLayout& held, std::span<const float> values) {
    FULCRUM_CHECK(std::int64_t(values.size()) == held.total(), "values do not match the layout");
    const ParameterLayout whole(held.config(), held.tp_size());
    std::vector<float> out(std::size_t(whole.total()), 0.0f);
    for (const ParameterTensor& t : held.tensors()) {
        const ParameterTensor& to = whole.find(t.kind, t.layer);
        std::copy_n(values.begin() + t.offset, t.numel(), out.begin() + to.offset);
    }
    return out;
}

std::vector<float> take_held(const ParameterLayout& held, std::span<const float> whole_values) {
    const ParameterLayout whole(held.config(), held.tp_size());
    FULCRUM_CHECK(std::int64_t(whole_values.size()) == whole.total(),
                  "values do not match the whole layout");
    std::vector<float> out(std::size_t(held.total()));
    for (const ParameterTensor& t : held.tensors()) {
        const ParameterTensor& from = whole.find(t.kind, t.layer);
        std::copy_n(whole_values.begin() + from.offset, t.numel(), out.begin() + t.offset);
    }
    return out;
}

ElementRange ParameterLayout::block_range(int first, int last) const {
    FULCRUM_CHECK(0 <= first && first <= last && last <= config_.layers, "bad block range");
    if (first == last)
        return {find(ParameterKind::lnf_weight).offset, 0};
    const std::int64_t begin = find(ParameterKind::ln1_weight, first).offset;
    const ParameterTensor& end = find(ParameterKind::fc_proj_bias, last - 1);
    return {begin, end.offset + end.numel() - begin};
}

ElementRange ParameterLayout::before_blocks() const {
    for (const ParameterTensor& t : tensors_) {
        if (t.layer >= 0 || t.kind == ParameterKind::lnf_weight) {
            return {0, t.offset};
        }
    }
    return {0, total_};
}

ElementRange ParameterLayout::after_blocks() const {
    std::int64_t end = before_blocks().count;
    for (const ParameterTensor& t : tensors_) {
        if (t.layer >= 0) {
            end = t.offset + t.numel();
        }
    }
    return {end, total_ - end};
}

Tensor view_of(const ParameterTensor& tensor, Tensor flat) {
    Tensor slice = flat.slice(tensor.offset, tensor.numel());
    return tensor.cols == 0 ? slice : slice.reshaped({tensor.rows, tensor.cols});
}

GptWeights map_weights(const ParameterLayout& layout, Tensor flat) {
    FULCRUM_CHECK(flat.rank() == 1 && flat.numel() == layout.total(),
                  "flat buffer does not match the layout");
    GptWeights w;
    w.blocks.resize(std::size_t(layout.config().layers));
    map_weights_in(layout, {0, layout.total()}, flat, w);
    return w;
}

void map_weights_in(const ParameterLayout& layout, ElementRange range, Tensor part,
                    GptWeights& weights) {
    FULCRUM_CHECK(part.numel() == 0 || (part.rank() == 1 && part.numel() == range.count),
                  "the part does not hold the range");
    FULCRUM_CHECK(std::ssize(weights.blocks) == layout.config().layers, "weights of another model");
    using K = ParameterKind;
    for (const ParameterTensor& t : layout.tensors()) {
        if (t.offset < range.offset || t.offset + t.numel() > range.offset + range.count) {
            continue;
        }
        Tensor view;
        if (part.numel() > 0) {
            ParameterTensor local = t;
            local.offset -= range.offset;
            view = view_of(local, part);
        }
        BlockWeights* b = t.layer >= 0 ? &weights.blocks[std::size_t(t.layer)] : nullptr;
        switch (t.kind) {
            case K::token_embedding:
                weights.wte = view;
                break;
            case K::position_embedding:
                weights.wpe = view;
                break;
            case K::lnf_weight:
                weights.lnf_weight = view;
                break;
            case K::lnf_bias:
                weights.lnf_bias = view;
                break;
            case K::ln1_weight:
                b->ln1_weight = view;
                break;
            case K::ln1_bias:
                b->ln1_bias = view;
                break;
            case K::qkv_weight:
                b->qkv_weight = view;
                break;
            case K::qkv_bias:
                b->qkv_bias = view;
                break;
            case K::attn_proj_weight:
                b->attn_proj_weight = view;
                break;
            case K::attn_proj_bias:
                b->attn_proj_bias = view;
                break;
            case K::ln2_weight:
                b->ln2_weight = view;
                break;
            case K::ln2_bias:
                b->ln2_bias = view;
                break;
            case K::fc_weight:
                b->fc_weight = view;
                break;
            case K::fc_bias:
                b->fc_bias = view;
                break;
            case K::fc_proj_weight:
                b->fc_proj_weight = view;
                break;
            case K::fc_proj_bias:
                b->fc_proj_bias = view;
                break;
        }
    }
}

void initialize_parameters(const ParameterLayout& layout, std::uint64_t seed,
                           std::span<float> host_params) {
    FULCRUM_CHECK(std::int64_t(host_params.size()) == layout.total(), "wrong host buffer size");
    FULCRUM_CHECK(layout.tp_size() == 1,
                  "initialise the serial layout, then shard it (tensor_parallel.h)");
    constexpr double kStd = 0.02;
    const double residual_std = kStd / std::sqrt(2.0 * layout.config().layers);
    const auto tensors = layout.tensors();
    for (std::size_t index = 0; index < tensors.size(); ++index) {
        const ParameterTensor& t = tensors[index];
        std::span<float> values = host_params.subspan(t.offset, t.numel());
        switch (t.init) {
            case InitKind::zeros:
                std::fill(values.begin(), values.end(), 0.0f);
                break;
            case InitKind::ones:
                std::fill(values.begin(), values.end(), 1.0f);
                break;
            case InitKind::normal:
            case InitKind::residual_normal: {
                const double stddev = t.init == InitKind::normal ? kStd : residual_std;
                Random random(derive_seed(seed, index));
                for (float& v : values)
                    v = float(stddev * random.normal());
                break;
            }
        }
    }
}

}  // namespace fulcrum::engine
