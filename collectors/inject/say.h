// Messages from inside the traced program to its user.
#pragma once

#include <cstdint>
#include <string_view>

namespace fulcrum::collect {

// One line on stderr, "fulcrum: ..." (with the rank when known), written in one write(2)
// so that ranks' lines do not interleave and the program's stdio buffers are not touched.
void say(std::string_view line);

// The rank say() names from now on (the recorder sets it when it knows it).
void set_say_rank(std::int32_t rank);

}  // namespace fulcrum::collect
