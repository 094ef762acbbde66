// (Stub until the Nsight importer lands.)
#include "core/import/importer.h"

namespace fulcrum::importer {

namespace {
class Stub final : public Importer {
public:
    std::string_view name() const override { return "nsys"; }
    std::string_view description() const override { return "nsys (not yet)"; }
    bool sniff(std::string_view) const override { return false; }
    Result<std::vector<std::string>> import_file(const std::string& input,
                                                 const ImportFileOptions&) const override {
        return Error{ErrorCode::invalid_input, "cannot import '" + input + "' yet"};
    }
};
}  // namespace

std::unique_ptr<Importer> make_nsys_importer() { return std::make_unique<Stub>(); }

}  // namespace fulcrum::importer
