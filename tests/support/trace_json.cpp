#include "tests/support/gzip_file.h"

#include <zlib.h>

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

}  // namespace fulcrum::test
