#include "core/export/csv.h"

#include "core/util/json_text.h"
#include "core/util/output_file.h"

namespace fulcrum {
namespace {

void append_optional(std::string& out, std::int64_t value) {
    out.push_back(',');
    if (value >= 0) {
        out += std::to_string(value);
    }
}

}  // namespace

Result<ExportReport> export_csv(const store::TraceReader& trace, const std::string& path,
                                const ExportOptions& options) {
    auto file = OutputFile::create(path, options.overwrite);
    if (!file) {
        return file.error();
    }
    ExportReport report;
    std::string out =
        "rank,lane,lane_kind,kind,category,name,start_ns,end_ns,duration_ns,step,microbatch,"
        "stage,phase,bytes,copy_kind,correlation,args,src_memory,dst_memory\n";
    const auto& lanes = trace.lanes();
    bool write_ok = true;
    for (std::size_t i = 0; i < lanes.size() && write_ok; ++i) {
        if (options.progress && !options.progress(static_cast<double>(i) / lanes.size())) {
            return Error{ErrorCode::cancelled, "export cancelled"};
        }
        const auto& lane = lanes[i];
        auto status = trace.for_each_event(lane.id, [&](const Event& e) {
            ++report.events;
            out += std::to_string(lane.rank);
            out.push_back(',');
            append_csv_field(out, lane.name);
            out.push_back(',');
            out += to_string(lane.kind);
            out.push_back(',');
            out += to_string(e.kind);
            out.push_back(',');
            out += to_string(e.category);
            out.push_back(',');
            append_csv_field(out, trace.string(e.name));
            out += "," + std::to_string(e.start_ns) + "," + std::to_string(e.end_ns) + "," +
                   std::to_string(e.duration_ns());
            append_optional(out, e.step);
            append_optional(out, e.microbatch);
            append_optional(out, e.stage);
            out.push_back(',');
            out += to_string(e.phase);
            append_optional(out, e.bytes);
            out.push_back(',');
            out += to_string(e.copy_kind);
            append_optional(out, e.correlation);
            out.push_back(',');
            append_csv_field(out, trace.string(e.args));
            out.push_back(',');
            append_csv_field(out, to_string(e.src_memory));
            out.push_back(',');
            append_csv_field(out, to_string(e.dst_memory));
            out.push_back('\n');
            if (out.size() > (1 << 20)) {
                write_ok = file->write(out);
                out.clear();
            }
            return write_ok;
        });
        if (!status) {
            return status.error();
        }
    }
    file->write(out);
    if (auto status = file->commit(); !status) {
        return status.error();
    }
    if (options.progress) {
        options.progress(1.0);
    }
    return report;
}

}  // namespace fulcrum
