#include "core/parallel/recompute.h"

#include <string>

namespace fulcrum::parallel {

Result<Recompute> parse_recompute(std::string_view name) {
    if (name == "none")
        return Recompute::none;
    if (name == "selective")
        return Recompute::selective;
    if (name == "full")
        return Recompute::full;
    return Error{ErrorCode::invalid_input, "unknown recompute mode '" + std::string(name) +
                                               "' (choose none, selective, full)"};
}

const char* recompute_name(Recompute recompute) {
    switch (recompute) {
        case Recompute::none:
            return "none";
        case Recompute::selective:
            return "selective";
        case Recompute::full:
            return "full";
    }
    return "none";
}

}  // namespace fulcrum::parallel
