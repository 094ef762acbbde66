// libFuzzer target for the Nsight Systems SQLite importer at the parser: arbitrary bytes as
// an export, opened as an in-memory database (sqlite3_deserialize) and read into a checking
// MemorySink, no file and no store per input. Bad input must end as an Error or import_log
// rows, never a crash, hang or leak, and what reaches the sink must be a well-formed trace.
// Most mutations hit SQLite's own corruption checks; a seed corpus of real-schema files (the
// tests' fixtures) lets the fuzzer reach the importer's table and column probing.
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/import/importer.h"
#include "core/trace/memory_sink.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const std::unique_ptr<fulcrum::importer::Importer> importer =
        fulcrum::importer::make_nsys_importer();
    const std::string bytes(reinterpret_cast<const char*>(data), size);
    if (!importer->sniff(std::string_view(bytes).substr(0, 4096))) {
        return 0;
    }
    fulcrum::MemorySink sink(1 << 16);
    (void)importer->read(fulcrum::importer::ImportInput{"input.sqlite", &bytes}, sink, {});
    if (!sink.problems().empty()) {
        std::fprintf(stderr, "malformed trace from the importer: %s\n",
                     sink.problems().front().c_str());
        __builtin_trap();
    }
    return 0;
}
