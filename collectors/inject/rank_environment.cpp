#include "collectors/inject/rank_environment.h"

#include <charconv>
#include <cstring>
#include <limits>

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
    for (const char* variable :
         {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "RANK", "PMI_RANK", "SLURM_PROCID"}) {
        const std::int32_t rank = parse_rank(lookup(variable));
        if (rank < 0) {
            continue;
        }
        if (std::strcmp(variable, "RANK") == 0 && lookup("WORLD_SIZE") == nullptr) {
            continue;
        }
        return {rank, variable};
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
