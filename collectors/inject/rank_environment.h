// Which global rank a process is, from what its launcher put in its environment.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>

namespace fulcrum::collect {

struct LauncherRank {
    std::int32_t rank = -1;  // -1: no launcher said
    std::string variable;    // the variable it came from, for messages
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

}  // namespace fulcrum::collect
