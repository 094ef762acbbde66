// The logic of `fulcrum capture`: where the injection library is, the capture directory,
// the environment that makes a command's processes record themselves, running the command,
// and what the ranks report while they run. The CLI (app/cli/cmd_capture.cpp) only parses
// options and prints.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/util/result.h"

namespace fulcrum::collect {

enum class GpuRequest { automatic, on, off };

// libfulcrum_inject.so: $FULCRUM_INJECT_LIBRARY, else next to the running executable, in
// ../lib, ../lib/fulcrum (an install), or ../collectors (the build tree).
Result<std::string> find_injection_library();

// "fulcrum-capture-20261121-223000"
std::string default_capture_directory(std::time_t now);

// Creates the directory. One that holds files is refused, unless `force`, which removes
// what an earlier capture left (rank files, status files, run.fulcrum) and nothing else.
Status prepare_capture_directory(const std::string& directory, bool force);

// A command that cannot be started is an error before anything is created.
Result<std::string> find_executable(const std::string& program);

// NVTX_INJECTION64_PATH / CUDA_INJECTION64_PATH pointing at another library mean another
// tool (Nsight Systems) is attached: only one NVTX tool and one CUPTI subscriber can be.
struct OtherTool {
    std::string variable;
    std::string library;
};
std::vector<OtherTool> other_tools_attached(const std::string& our_library);

// The variables each process of the command needs. Open MPI passes them to ranks on this
// host; remote hosts need `mpirun -x NAME` (docs/capture.md), SLURM's srun forwards them.
// `all_api`: every CUDA API call recorded, the queries of collectors/inject/quiet_api.h too.
std::vector<std::pair<std::string, std::string>> capture_environment(
    const std::string& library, const std::string& directory, GpuRequest gpu,
    const std::string& command_line, bool cuda_injection, bool all_api = false);
// Names only, for the `-x` hint.
std::vector<std::string> capture_variable_names(bool cuda_injection);

// Whether this machine has a GPU a CUDA program could use (libcuda loads, cuInit succeeds,
// at least one device). Only for --gpu on, which insists on one.
bool gpu_present();

// What one rank wrote in rank-N.status (collectors/inject/recorder.h).
struct RankStatus {
    std::int32_t rank = -1;
    std::int64_t pid = 0;
    std::string state;  // recording, closed, failed
    std::int64_t events = 0;
    std::int64_t dropped = 0;
    std::string gpu;  // on, none, off, other-profiler, unavailable, failed, pending
    // The launcher variable the rank came from (OMPI_COMM_WORLD_RANK, RANK, ...); "none" when
    // no launcher said; empty from a status written before the rank was known.
    std::string launcher;
    std::int64_t world = -1;  // the ranks that launcher says the job has; -1: it does not say
};
std::vector<RankStatus> read_rank_statuses(const std::string& directory);
std::vector<std::string> rank_files(const std::string& directory);

// Runs the command with `environment` added, forwarding SIGTERM (and a SIGINT sent with
// kill; a terminal's Ctrl-C reaches the command through the process group anyway). Calls
// `tick` every 250 ms with the seconds elapsed. Returns the command's exit status, 128 +
// signal when a signal ended it (as a shell reports it).
struct CommandOutcome {
    int exit_status = 0;
    double seconds = 0;
    bool interrupted = false;  // the user asked it to stop (SIGINT / SIGTERM)
};
Result<CommandOutcome> run_command(
    const std::vector<std::string>& command,
    const std::vector<std::pair<std::string, std::string>>& environment,
    const std::function<void(double)>& tick);

// True once SIGINT/SIGTERM arrived after the command ended: cancels the merge.
bool interrupted_after_command();

}  // namespace fulcrum::collect
