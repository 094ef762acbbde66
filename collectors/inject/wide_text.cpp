#include "collectors/inject/wide_text.h"

#include <cstdint>

#include "core/util/json_text.h"

namespace fulcrum::collect {

std::string utf8_from_wide(const wchar_t* text) {
    std::string out;
    for (; text != nullptr && *text != 0; ++text) {
        append_utf8(out, static_cast<std::uint32_t>(*text));
    }
    return out;
}

}  // namespace fulcrum::collect
