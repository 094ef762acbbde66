// A place in a run that views point each other to: a heatmap cell, a bubble bar, a search hit.
#pragma once

#include <cstdint>

namespace fulcrum::views {

// -1 means "any": {rank 3, step 2, microbatch -1} is all of rank 3's step 2.
struct Place {
    std::int32_t rank = -1;
    std::int32_t step = -1;
    std::int32_t microbatch = -1;
    friend bool operator==(const Place&, const Place&) = default;
};

}  // namespace fulcrum::views
