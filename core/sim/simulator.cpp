#include "core/sim/simulator.h"

#include <chrono>
#include <filesystem>

#include "core/sim/hot_switch_play.h"
#include "core/sim/run_play.h"
#include "core/store/trace_writer.h"
#include "core/util/output_file.h"

namespace fulcrum::sim {
namespace {

std::string cost_source(const SimulationConfig& config) {
    if (!config.cost_model) {
        return describe(config.hardware);
    }
    return config.cost_model->source.empty() ? "given" : config.cost_model->source;
}

}  // namespace

Result<SimulationResult> simulate(const SimulationConfig& config, store::TraceWriter* out,
                                  const SimulationProgress& progress) {
    if (auto status = validate(config); !status) {
        return status.error();
    }
    // The one place that chooses the player: hot-switched steps play each length bucket with
    // the static player (hot_switch_play.h), which itself knows nothing of hot switching.
    if (config.hot_switch) {
        return simulate_hot_switched(config, out, progress);
    }
    return play_run(config, out, progress);
}

Result<SimulationResult> simulate_to_file(const SimulationConfig& config,
                                          const SimulationOutput& output,
                                          const SimulationProgress& progress) {
    namespace fs = std::filesystem;
    if (auto status = validate(config); !status) {
        return status.error();
    }
    // Built next to the target and renamed when complete: a failed or cancelled simulation
    // never leaves a half-written run where a good one was expected.
    auto target = PartialDatabase::prepare(output.path, output.overwrite);
    if (!target) {
        return target.error();
    }
    RunInfo run;
    run.name = output.run_name.empty() ? fs::path(output.path).stem().string() : output.run_name;
    run.command = output.command;
    run.start_utc_ns =
        output.start_utc_ns.value_or(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                         std::chrono::system_clock::now().time_since_epoch())
                                         .count());
    run.config_json = run_config_json(config, cost_source(config));
    run.origin = RunOrigin::simulated;
    run.producer = output.producer;
    store::WriterOptions options;
    options.overflow = store::WriterOptions::Overflow::block;
    options.overwrite = true;
    auto writer = store::TraceWriter::create(target->partial_path(), run, options);
    if (!writer) {
        return Error{ErrorCode::io,
                     "cannot write '" + output.path + "': " + writer.error().message};
    }
    auto result = simulate(config, writer->get(), progress);
    if (!result) {
        return result.error();  // the writer closes, then the partial file goes with `target`
    }
    if (auto status = (*writer)->close(); !status) {
        return Error{ErrorCode::io,
                     "cannot write '" + output.path + "': " + status.error().message};
    }
    writer->reset();
    if (auto status = target->commit("the simulated run"); !status) {
        return status.error();
    }
    return result;
}

}  // namespace fulcrum::sim
