// NVTX's wide-character messages (nvtxRangePushW and friends: UTF-32 on Linux) as UTF-8.
#pragma once

#include <string>

namespace fulcrum::collect {

// Code points that are not Unicode scalar values become U+FFFD.
std::string utf8_from_wide(const wchar_t* text);

}  // namespace fulcrum::collect
