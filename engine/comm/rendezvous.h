// Starting a multi-process job without MPI: which rank this process is, from what its launcher
// put in the environment, and a rendezvous that hands one small opaque blob (NCCL's 128-byte
// unique id, docs/sources.md, "NCCL") from rank 0 to every other rank through a shared file or a
// TCP socket. No CUDA here: the NCCL communicator (nccl_communicator.h) is built on top.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/util/result.h"

namespace fulcrum::engine {

struct LaunchRank {
    int rank = 0;
    int world_size = 1;
    int local_rank = 0;  // among the ranks of this node: which GPU to take
    std::string source;  // "Open MPI", "torchrun", "SLURM", or "no launcher"
};

// Where a launcher keeps its variables; getenv by default, a map in tests.
using EnvironmentLookup = std::function<const char*(const char*)>;

// Open MPI (OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK), then torchrun (RANK / WORLD_SIZE /
// LOCAL_RANK; RANK counts only with WORLD_SIZE beside it), then SLURM (SLURM_PROCID /
// SLURM_NTASKS / SLURM_LOCALID); none of them: rank 0 of 1.
//
// Innermost launcher first, the order `fulcrum capture` labels ranks in
// (collectors/inject/rank_environment.h), so a trace and the engine agree on who is who:
// `srun torchrun` and `torchrun` inside an sbatch script leave the node's SLURM_PROCID in every
// worker's environment, and only torchrun's RANK tells the workers apart. mpirun sets its own
// variables, so inside a SLURM allocation Open MPI's win.
//
// A launcher's variable that is set but is not a non-negative integer, a missing size or local
// rank, or a rank not below the size is an invalid_input Error that names the variable.
Result<LaunchRank> launch_rank_from_environment(
    const EnvironmentLookup& lookup = [](const char* name) {
        return static_cast<const char*>(std::getenv(name));
    });

// Hands `blob_on_rank0` (at most 1 MiB; ignored on other ranks) from rank 0 to every rank of
// `world_size` and returns it on each, rank 0 included. `spec` says how:
//
//   file:PATH       rank 0 writes PATH atomically (a temporary file in the same folder,
//                   fsync, rename); the others poll until it appears complete. PATH must be on
//                   a file system every rank sees, and fresh for each job (put the job id in
//                   it): rank 0 refuses to replace an existing file, because ranks that started
//                   first may already have read it and would join the wrong job.
//   tcp:HOST:PORT   rank 0 listens on PORT (every interface) and serves the blob to each of the
//                   other ranks once; they connect to HOST:PORT, retrying until rank 0 is up.
//                   HOST is rank 0's name or address as the other ranks see it ("[::1]" for an
//                   IPv6 literal). Both sides check a magic and the world size, so a foreign
//                   service on the port or a rank of another job is an Error, not a hang.
//
// Waits at most `timeout` (for rank 0 with tcp: until every rank has fetched the blob).
// Errors: invalid_input for a bad spec, rank or size, and for ranks that disagree on the world
// size; io for timeouts and system calls that fail (with strerror); corrupt for a file or a
// server that is not a Fulcrum rendezvous. Rank 0 of a world of 1 returns at once, but a bad
// spec is still reported.
Result<std::vector<std::byte>> rendezvous_exchange(std::string_view spec, int rank, int world_size,
                                                   std::span<const std::byte> blob_on_rank0,
                                                   std::chrono::milliseconds timeout);

// Rank 0 of a `file:` rendezvous removes the file, so that the same path can serve the next
// run. Call it once every rank is known to have read it — after NCCL's communicator init,
// which returns only when every rank has joined. Nothing to do for other ranks or for `tcp:`.
Status rendezvous_cleanup(std::string_view spec, int rank);

}  // namespace fulcrum::engine
