// libFuzzer target for the Kineto / Chrome JSON importer: arbitrary bytes as a trace file.
// Bad input must be an Error or import_log rows, never a crash, hang or leak.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "core/import/importer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    namespace fs = std::filesystem;
    static const fs::path dir = fs::temp_directory_path() / ("fuzz-kineto-" + std::to_string(::getpid()));
    std::error_code ec;
    fs::remove_all(dir, ec);
    fs::create_directories(dir / "scratch", ec);
    const std::string input = (dir / "input.json").string();
    if (FILE* f = std::fopen(input.c_str(), "wb")) {
        std::fwrite(data, 1, size, f);
        std::fclose(f);
    }
    auto importer = fulcrum::importer::make_kineto_importer();
    (void)importer->sniff(std::string_view(reinterpret_cast<const char*>(data), size < 4096 ? size : 4096));
    fulcrum::importer::ImportFileOptions options;
    options.scratch_dir = (dir / "scratch").string();
    (void)importer->import_file(input, options);
    fs::remove_all(dir, ec);
    return 0;
}
