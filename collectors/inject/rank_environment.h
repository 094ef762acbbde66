// Which global rank a process is, from what its launcher put in its environment.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>

namespace fulcrum::collect {

struct LauncherRank {
    std::int32_t rank = -1;  // -1: no launcher said
    std::string variable;    // the variable it came from, for messages
    // The ranks the same launcher says the job has (OMPI_COMM_WORLD_SIZE, PMI_SIZE,
    // WORLD_SIZE, SLURM_NTASKS beside their rank variables); -1 when it does not say.
    std::int32_t world_size = -1;
};

// Checked innermost launcher first: torchrun's RANK wins over SLURM_PROCID because
// `srun torchrun ...` gives every worker of a node the node's SLURM_PROCID; Open MPI's and
// PMIx's variables come before RANK because they are set by mpirun itself, while RANK may be
// exported by a job script for other reasons. RANK counts only with WORLD_SIZE beside it
// (torchrun sets both).
LauncherRank rank_from_environment(const std::function<const char*(const char*)>& lookup =
                                       [](const char* name) {
                                           return static_cast<const char*>(std::getenv(name));
                                       });

// Whether a program of this name (its executable's file name) is a launcher or one of its
// daemons rather than a rank: Open MPI's orted, PRRTE's prted, mpirun itself, SLURM's step
// daemon, MPICH's Hydra proxy. They inherit the capture's environment and may initialise CUDA
// (Open MPI's CUDA support, hwloc probing the GPUs), which loads the injection library through
// CUDA_INJECTION64_PATH; recorded, they would take a rank's number before the rank does.
bool is_launcher_program(std::string_view name);

}  // namespace fulcrum::collect
