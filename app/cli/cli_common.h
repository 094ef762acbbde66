// What every `fulcrum` subcommand shares: exit codes, error printing, progress lines.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/analysis/run_analysis.h"
#include "core/analysis/run_trace.h"
#include "core/sim/simulator.h"
#include "core/util/result.h"

namespace CLI {
class App;
}

namespace fulcrum::cli {

// Exit codes, documented in `fulcrum --help` and docs/cli.md.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 2;       // bad input, unreadable or unwritable file
inline constexpr int kExitIncomplete = 3;  // the output is shown, but the data is incomplete

int report_error(const Error& error);
void warn(const std::string& message);

// A command's output: to stdout when `path` is empty, else to the file, which appears only
// when complete and replaces an existing one only with `force` (core/util/output_file.h).
Status write_output(const std::string& path, bool force, std::string_view text);
// The same of output made a piece at a time: `produce` hands each piece to its argument.
using OutputPieces = std::function<void(const std::function<void(std::string_view)>&)>;
Status write_output(const std::string& path, bool force, const OutputPieces& produce);

// A progress callback that redraws one line on stderr when it is a terminal, and stays
// silent otherwise (logs, tests). Also stops the work when the user pressed Ctrl-C.
std::function<bool(double)> progress_line(std::string label);
// The same for work told in stages (AnalyzeOptions::progress): a line a stage, named after it
// and followed by `suffix`; a new stage clears the last one's line.
std::function<bool(std::string_view stage, double fraction)> staged_progress_line(
    std::string suffix = {});
void finish_progress_line();
// A progress callback for long work: the progress line, which also turns Ctrl-C into
// `cancel`, and with `forced` (--progress) when stderr is not a terminal, a line per 10%.
std::function<void(double)> progress_for(const std::string& label, bool forced,
                                         std::atomic<bool>& cancel);
void install_interrupt_handler();

// --attention-backend flash|unfused into `backend`, in `group`: the one definition fulcrum
// simulate and fulcrum plan share (sim::HardwareAssumptions::unfused_attention).
void add_attention_backend_option(CLI::App& app, std::string& backend, const std::string& group);

// --grad-reduce-dtype fp32|bf16|fp16 into `dtype` ("" when not given), in `group`: fulcrum
// simulate's and fulcrum plan's (sim::SimulationConfig::grad_reduce_dtype).
void add_grad_reduce_dtype_option(CLI::App& app, std::string& dtype, const std::string& group);
// --tp-backward-overlap of fulcrum simulate and fulcrum plan (sim::SimulationConfig::
// tp_backward_overlap).
void add_tp_backward_overlap_flag(CLI::App& app, bool& overlap, const std::string& group);
// --overlap-param-gather of fulcrum simulate and fulcrum plan (sim::SimulationConfig::
// overlap_param_gather).
void add_overlap_param_gather_flag(CLI::App& app, bool& overlap, const std::string& group);
// --attention-mask document|packed of fulcrum simulate and fulcrum plan (sim::SimulationConfig::
// packed_attention).
void add_attention_mask_option(CLI::App& app, bool& packed, const std::string& group);

// "7,9,9,7" → {7, 9, 9, 7}, each at least `minimum`; the error names `option` and shows
// `example`.
Result<std::vector<int>> parse_int_list(const std::string& text, const std::string& option,
                                        const std::string& example, int minimum = 1);

// --calibrate RUN of fulcrum simulate and fulcrum plan: the run analysed a rank at a time (with
// a progress line; analyze_run_file, so a run of any size fits), and each run's cost model
// taken from its analysis, the error naming the run that could not be fitted.
struct CalibrationRun {
    analysis::RunTrace run;  // without its events: its config and workload table
    analysis::RunAnalysis analysis;
};
Result<CalibrationRun> load_calibration_run(const std::string& path, bool progress,
                                            std::atomic<bool>& cancel);
Result<std::vector<sim::Calibration>> calibrate_runs(const std::vector<CalibrationRun>& runs,
                                                     const std::vector<std::string>& paths);
// --cost-model FILE: a cost model as JSON (analysis::cost_model_json), its source "given: FILE"
// unless it names one.
Result<analysis::CostModel> read_cost_model(const std::string& path);

}  // namespace fulcrum::cli
