// libFuzzer target for the Nsight Systems SQLite importer: arbitrary bytes as an export file.
// Bad input must end as an Error or import_log rows, never a crash, hang or leak. Most
// mutations hit SQLite's own corruption checks; a seed corpus of real-schema files (the
// test's fixtures) lets the fuzzer reach the importer's table and column probing.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/import/importer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const std::unique_ptr<fulcrum::importer::Importer> importer =
        fulcrum::importer::make_nsys_importer();
    char pattern[] = "/tmp/fuzz_nsys.XXXXXX";
    const char* folder = mkdtemp(pattern);
    if (folder == nullptr) {
        return 0;
    }
    const std::filesystem::path root(folder);
    const std::string input = (root / "input.sqlite").string();
    if (FILE* file = std::fopen(input.c_str(), "wb")) {
        if (size > 0) {
            std::fwrite(data, 1, size, file);
        }
        std::fclose(file);
        const std::string head(reinterpret_cast<const char*>(data), size < 4096 ? size : 4096);
        if (importer->sniff(head)) {
            fulcrum::importer::ImportFileOptions options;
            options.scratch_dir = (root / "scratch").string();
            std::error_code ec;
            std::filesystem::create_directories(options.scratch_dir, ec);
            (void)importer->import_file(input, options);
        }
    }
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
    return 0;
}
