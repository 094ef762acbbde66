#include "collectors/inject/rank_environment.h"

#include <charconv>
#include <cstring>
#include <limits>
#include <utility>

namespace fulcrum::collect {
namespace {

std::int32_t parse_rank(const char* text) {
    if (text == nullptr) {
        return -1;
    }
    std::int64_t value = -1;
    const char* end = text + std::strlen(text);
    const auto [stop, ec] = std::from_chars(text, end, value);
    if (ec != std::errc() || stop != end || value < 0 ||
        value > std::numeric_limits<std::int32_t>::max()) {
        return -1;
    }
    return static_cast<std::int32_t>(value);
}

}  // namespace

LauncherRank rank_from_environment(const std::function<const char*(const char*)>& lookup) {
    // Each launcher's rank variable and the one beside it that counts the ranks (PMIx says
    // the size only through its API: Open MPI's own variable is read first).
    constexpr std::pair<const char*, const char*> kVariables[] = {
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
        {"PMIX_RANK", nullptr},
        {"RANK", "WORLD_SIZE"},
        {"PMI_RANK", "PMI_SIZE"},
        {"SLURM_PROCID", "SLURM_NTASKS"}};
    for (const auto& [variable, size_variable] : kVariables) {
        const std::int32_t rank = parse_rank(lookup(variable));
        if (rank < 0) {
            continue;
        }
        if (std::strcmp(variable, "RANK") == 0 && lookup("WORLD_SIZE") == nullptr) {
            continue;
        }
        const std::int32_t world =
            size_variable != nullptr ? parse_rank(lookup(size_variable)) : -1;
        return {rank, variable, world > 0 ? world : -1};
    }
    return {};
}

bool is_launcher_program(std::string_view name) {
    for (const std::string_view launcher :
         {"orted", "prted", "orterun", "mpirun", "mpiexec", "prterun", "prun", "srun", "slurmstepd",
          "hydra_pmi_proxy", "mpiexec.hydra"}) {
        if (name == launcher) {
            return true;
        }
    }
    return false;
}

}  // namespace fulcrum::collect
