#include "app/cli/cli_common.h"

#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "core/store/trace_reader.h"
#include "core/util/output_file.h"

namespace fulcrum::cli {
namespace {

std::atomic<bool> g_interrupted{false};
bool g_progress_shown = false;

extern "C" void on_interrupt(int) {
    g_interrupted.store(true);
}

}  // namespace

int report_error(const Error& error) {
    std::fprintf(stderr, "fulcrum: error: %s\n", error.message.c_str());
    return kExitError;
}

void warn(const std::string& message) {
    std::fprintf(stderr, "fulcrum: warning: %s\n", message.c_str());
}

std::function<bool(double)> progress_line(std::string label) {
    const bool terminal = isatty(STDERR_FILENO) != 0;
    return [label = std::move(label), terminal, last = -1](double fraction) mutable {
        const int percent = static_cast<int>(fraction * 100.0);
        if (terminal && percent != last) {
            // A bar of 20 cells, one per 5%.
            const std::string bar = std::string(static_cast<std::size_t>(percent / 5), '#') +
                                    std::string(static_cast<std::size_t>(20 - percent / 5), '.');
            std::fprintf(stderr, "\r%s [%s] %3d%%", label.c_str(), bar.c_str(), percent);
            std::fflush(stderr);
            last = percent;
            g_progress_shown = true;
        }
        return !g_interrupted.load();
    };
}

std::function<bool(std::string_view, double)> staged_progress_line(std::string suffix) {
    return [suffix = std::move(suffix), shown = std::string(),
            line = std::function<bool(double)>()](std::string_view stage, double fraction) mutable {
        if (!line || stage != shown) {
            finish_progress_line();
            shown = std::string(stage);
            line = progress_line(shown + suffix);
        }
        return line(fraction);
    };
}

// The shared progress line (which also turns Ctrl-C
// into a cancel), and with --progress when stderr is not a terminal, a line per 10%.
std::function<void(double)> progress_for(const std::string& label, bool forced,
                                         std::atomic<bool>& cancel) {
    auto line = progress_line(label);
    const bool terminal = isatty(STDERR_FILENO) != 0;
    return [line, label, forced, terminal, &cancel, last = -1](double fraction) mutable {
        if (!line(fraction)) {
            cancel.store(true);
        }
        const int tenth = static_cast<int>(fraction * 10);
        if (forced && !terminal && tenth != last) {
            std::fprintf(stderr, "%s %d%%\n", label.c_str(), tenth * 10);
            last = tenth;
        }
    };
}

void finish_progress_line() {
    if (g_progress_shown) {
        std::fprintf(stderr, "\r\033[K");
        g_progress_shown = false;
    }
}

void install_interrupt_handler() {
    struct sigaction action = {};
    action.sa_handler = on_interrupt;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, nullptr);
}

void add_attention_backend_option(CLI::App& app, std::string& backend, const std::string& group) {
    app.add_option("--attention-backend", backend,
                   "The attention kernel the runs use, priced by --hardware's device: flash "
                   "(fused: the causal pairs only, no score matrix kept) or unfused (Megatron-LM's "
                   "kernels of 2021-22: the whole square, the scores kept and streamed through "
                   "HBM); default: --hardware's (flash unless a system file says unfused)")
        ->capture_default_str()
        ->check(CLI::IsMember({"flash", "unfused"}))
        ->group(group);
}

void add_grad_reduce_dtype_option(CLI::App& app, std::string& dtype, const std::string& group) {
    app.add_option("--grad-reduce-dtype", dtype,
                   "Element type gradients are reduced in over DP x CP: fp32 (the default under "
                   "bf16 and fp32, as Megatron-LM and fulcrum-train do), bf16 (Megatron-LM's "
                   "--grad-reduce-in-bf16) or fp16 (the default under fp16)")
        ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
        ->group(group);
}

void add_tp_backward_overlap_flag(CLI::App& app, bool& overlap, const std::string& group) {
    app.add_flag("--tp-backward-overlap", overlap,
                 "Megatron-LM's asynchronous TP communication in the backward (on there since "
                 "2022): each column-parallel linear's input-gradient all-reduce (under "
                 "--sequence-parallel its reduce-scatter and the re-gather of its input) runs "
                 "beside its weight-gradient GEMM")
        ->group(group);
}

void add_overlap_param_gather_flag(CLI::App& app, bool& overlap, const std::string& group) {
    app.add_flag("--overlap-param-gather", overlap,
                 "Megatron-LM's --overlap-param-gather (with the distributed optimizer): the "
                 "all-gather of the updated parameters at the next step's start, a layer at a "
                 "time, each layer's first forward waiting for its own; without it the gather "
                 "follows the gradients' reduce-scatter before the update")
        ->group(group);
}

void add_attention_mask_option(CLI::App& app, bool& packed, const std::string& group) {
    app.add_option_function<std::string>(
           "--attention-mask", [&packed](const std::string& value) { packed = value == "packed"; },
           "What each token attends to: its own document's earlier tokens (document, "
           "fulcrum-train's varlen kernels), or every earlier token of its micro-batch, one causal "
           "mask across the packed documents (packed: Megatron-LM without "
           "--reset-attention-mask, HotSPa's Hetu)")
        ->check(CLI::IsMember({"document", "packed"}))
        ->group(group);
}

Result<std::vector<int>> parse_int_list(const std::string& text, const std::string& option,
                                        const std::string& example, int minimum) {
    std::vector<int> values;
    std::size_t begin = 0;
    while (begin <= text.size()) {
        const std::size_t end = std::min(text.find(',', begin), text.size());
        const std::string item = text.substr(begin, end - begin);
        char* rest = nullptr;
        const long value = std::strtol(item.c_str(), &rest, 10);
        if (item.empty() || *rest != '\0' || value < minimum || value > 1 << 30) {
            return Error{ErrorCode::invalid_input,
                         option + " '" + text + "': expected " +
                             (minimum > 0 ? "positive " : "non-negative ") +
                             "whole numbers separated by commas, e.g. " + example};
        }
        values.push_back(static_cast<int>(value));
        begin = end + 1;
    }
    return values;
}

Status write_output(const std::string& path, bool force, std::string_view text) {
    return write_output(path, force, [&](const auto& write) { write(text); });
}

Status write_output(const std::string& path, bool force, const OutputPieces& produce) {
    if (path.empty()) {
        produce([](std::string_view piece) { std::fwrite(piece.data(), 1, piece.size(), stdout); });
        return {};
    }
    auto file = OutputFile::create(path, force);
    if (!file) {
        return file.error();
    }
    produce([&](std::string_view piece) { file->write(piece); });
    return file->commit();
}

Result<CalibrationRun> load_calibration_run(const std::string& path, bool progress,
                                            std::atomic<bool>& cancel) {
    auto reader = store::TraceReader::open(path);
    if (!reader) {
        return reader.error();
    }
    analysis::AnalyzeOptions analyze;
    const auto shown = progress_for("analysing " + path, progress, cancel);
    analyze.progress = [&](std::string_view, double fraction) { shown(fraction); };
    analyze.cancel = &cancel;
    CalibrationRun loaded;
    auto result = analysis::analyze_run_file(*reader, loaded.run, analyze);
    finish_progress_line();
    if (!result) {
        return result.error();
    }
    loaded.analysis = std::move(*result);
    return loaded;
}

Result<std::vector<sim::Calibration>> calibrate_runs(const std::vector<CalibrationRun>& runs,
                                                     const std::vector<std::string>& paths) {
    std::vector<sim::Calibration> calibrations;
    for (std::size_t i = 0; i < runs.size(); ++i) {
        auto calibration = sim::calibrate(runs[i].run, runs[i].analysis);
        if (!calibration) {
            Error error = calibration.error();
            if (runs.size() > 1) {
                error.message = "--calibrate " + paths[i] + ": " + error.message;
            }
            error.message += " (--cost-model FILE)";
            return error;
        }
        calibrations.push_back(std::move(*calibration));
    }
    return calibrations;
}

Result<analysis::CostModel> read_cost_model(const std::string& path) {
    std::ifstream file(path);
    if (!file) {
        return Error{ErrorCode::io,
                     "cannot read the cost model '" + path + "': no such file or not readable"};
    }
    std::stringstream text;
    text << file.rdbuf();
    auto model = analysis::parse_cost_model_json(text.str());
    if (!model) {
        return Error{model.error().code, "'" + path + "': " + model.error().message};
    }
    if (model->source.empty() || model->source == "given") {
        model->source = "given: " + path;
    }
    return model;
}

}  // namespace fulcrum::cli
