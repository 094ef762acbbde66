#include "tests/support/trace_json.h"

#include <zlib.h>

#include <algorithm>

#include <cstdio>
#include <cstdlib>

namespace fulcrum::test {

std::string read_gzip(const std::filesystem::path& path) {
    gzFile file = gzopen(path.c_str(), "rb");
    if (file == nullptr) {
        std::fprintf(stderr, "cannot open %s\n", path.c_str());
        std::abort();
    }
    std::string text;
    char buffer[1 << 16];
    int n = 0;
    while ((n = gzread(file, buffer, sizeof buffer)) > 0) {
        text.append(buffer, static_cast<std::size_t>(n));
    }
    gzclose(file);
    return text;
}

void drop_events(nlohmann::json& trace, std::string_view prefix) {
    auto& events = trace.at("traceEvents");
    events.erase(std::remove_if(events.begin(), events.end(),
                                [prefix](const nlohmann::json& e) {
                                    return e.value("name", "").starts_with(prefix);
                                }),
                 events.end());
}

}  // namespace fulcrum::test
