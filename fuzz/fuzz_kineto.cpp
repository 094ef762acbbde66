// libFuzzer target for the Kineto / Chrome JSON importer at the parser: arbitrary bytes, read
// from memory (plain or gzip) into a checking MemorySink, no file and no SQLite per input.
// Bad input must be an Error or import_log rows, never a crash, hang or leak, and whatever the
// importer hands the sink must be a well-formed trace (core/trace/memory_sink.h).
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/import/importer.h"
#include "core/trace/memory_sink.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const std::unique_ptr<fulcrum::importer::Importer> importer =
        fulcrum::importer::make_kineto_importer();
    const std::string bytes(reinterpret_cast<const char*>(data), size);
    if (!importer->sniff(std::string_view(bytes).substr(0, 4096))) {
        return 0;
    }
    fulcrum::MemorySink sink(1 << 16);
    (void)importer->read(fulcrum::importer::ImportInput{"input.json", &bytes}, sink, {});
    if (!sink.problems().empty()) {
        std::fprintf(stderr, "malformed trace from the importer: %s\n",
                     sink.problems().front().c_str());
        __builtin_trap();
    }
    return 0;
}
