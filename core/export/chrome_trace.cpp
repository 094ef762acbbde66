#include "core/export/chrome_trace.h"

#include <nlohmann/json.hpp>

#include <unordered_map>
#include <vector>

#include "core/util/json_text.h"
#include "core/util/output_file.h"

namespace fulcrum {
namespace {

std::string rank_label(const RankInfo& rank) {
    std::string label = "rank " + std::to_string(rank.rank);
    if (rank.dp >= 0) {
        label += " (dp" + std::to_string(rank.dp) + " pp" + std::to_string(rank.pp) + " cp" +
                 std::to_string(rank.cp) + " tp" + std::to_string(rank.tp) + ")";
    }
    if (!rank.complete) {
        label += " [incomplete]";
    }
    return label;
}

class ChromeWriter {
public:
    ChromeWriter(const store::TraceReader& trace, OutputFile& file) : trace_(trace), file_(file) {}

    void metadata(std::string_view kind, std::int64_t pid, std::int64_t tid, std::string_view key,
                  std::string_view value) {
        begin_record();
        out_ += "{\"ph\":\"M\",\"name\":";
        append_json_string(out_, kind);
        out_ += ",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) +
                ",\"args\":{";
        append_json_string(out_, key);
        out_ += ":";
        out_ += value;
        out_ += "}}";
    }

    void event(const Event& e, std::int32_t pid, char phase, std::int64_t async_id) {
        begin_record();
        out_ += "{\"ph\":\"";
        out_.push_back(phase);
        out_ += "\",\"name\":";
        append_json_string(out_, trace_.string(e.name));
        out_ += ",\"cat\":";
        append_json_string(out_, to_string(e.category));
        out_ += ",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(e.lane.value) +
                ",\"ts\":";
        append_microseconds(out_, phase == 'e' ? e.end_ns : e.start_ns);
        if (phase == 'X') {
            out_ += ",\"dur\":";
            append_microseconds(out_, e.duration_ns());
        } else if (phase == 'i') {
            out_ += ",\"s\":\"t\"";
        } else {
            out_ += ",\"id\":" + std::to_string(async_id);
        }
        if (phase != 'e') {
            append_args(e);
        }
        out_ += "}";
    }

    void counter(const CounterSample& sample) {
        begin_record();
        out_ += "{\"ph\":\"C\",\"name\":";
        append_json_string(out_, sample.name);
        out_ += ",\"pid\":" + std::to_string(sample.rank) + ",\"ts\":";
        append_microseconds(out_, sample.time_ns);
        nlohmann::json value = sample.value;
        out_ += ",\"args\":{\"value\":" + value.dump() + "}}";
    }

    bool drain() {
        const bool ok = file_.write(out_);
        out_.clear();
        return ok;
    }
    std::size_t pending() const { return out_.size(); }
    void raw(std::string_view text) { out_ += text; }

private:
    void begin_record() {
        if (!first_) {
            out_ += ",\n";
        }
        first_ = false;
    }

    void append_args(const Event& e) {
        out_ += ",\"args\":{\"kind\":";
        append_json_string(out_, to_string(e.kind));
        auto add = [&](const char* key, std::int64_t value) {
            if (value >= 0) {
                out_ += ",\"";
                out_ += key;
                out_ += "\":" + std::to_string(value);
            }
        };
        add("step", e.step);
        add("microbatch", e.microbatch);
        add("stage", e.stage);
        add("bytes", e.bytes);
        add("correlation", e.correlation);
        if (e.phase != Phase::none) {
            out_ += ",\"phase\":";
            append_json_string(out_, to_string(e.phase));
        }
        if (e.copy_kind != CopyKind::none) {
            out_ += ",\"copy\":";
            append_json_string(out_, to_string(e.copy_kind));
        }
        if (e.args.valid()) {
            out_ += ",\"args\":";
            out_ += args_json(e.args);
        }
        out_ += "}";
    }

    // Args are stored as JSON text by whoever recorded them; anything that does not parse
    // goes out as a string rather than breaking the file.
    const std::string& args_json(StringId id) {
        auto found = args_cache_.find(id.value);
        if (found != args_cache_.end()) {
            return found->second;
        }
        const std::string_view text = trace_.string(id);
        std::string json;
        if (nlohmann::json::accept(text)) {
            json = nlohmann::json::parse(text).dump();
        } else {
            append_json_string(json, text);
        }
        return args_cache_.emplace(id.value, std::move(json)).first->second;
    }

    const store::TraceReader& trace_;
    OutputFile& file_;
    std::string out_;
    bool first_ = true;
    std::unordered_map<std::uint32_t, std::string> args_cache_;
};

}  // namespace

Result<ExportReport> export_chrome_trace(const store::TraceReader& trace, const std::string& path,
                                         const ExportOptions& options) {
    auto file = OutputFile::create(path, options.overwrite);
    if (!file) {
        return file.error();
    }
    ExportReport report;
    ChromeWriter writer(trace, *file);
    std::string header = "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"run\":";
    append_json_string(header, trace.run().name);
    header += ",\"origin\":";
    append_json_string(header, to_string(trace.run().origin));
    header += ",\"start_utc_ns\":" + std::to_string(trace.run().start_utc_ns) +
              "},\n\"traceEvents\":[\n";
    writer.raw(header);

    for (const auto& rank : trace.ranks()) {
        std::string label;
        append_json_string(label, rank_label(rank));
        writer.metadata("process_name", rank.rank, 0, "name", label);
        writer.metadata("process_sort_index", rank.rank, 0, "sort_index",
                        std::to_string(rank.rank));
    }
    std::int64_t sort_index = 0;
    for (const auto& lane : trace.lanes()) {
        std::string label;
        append_json_string(label, lane.name);
        writer.metadata("thread_name", lane.rank, lane.id.value, "name", label);
        writer.metadata("thread_sort_index", lane.rank, lane.id.value, "sort_index",
                        std::to_string(sort_index++));
    }

    std::int64_t next_async_id = 1;
    const auto& lanes = trace.lanes();
    for (std::size_t i = 0; i < lanes.size(); ++i) {
        if (options.progress && !options.progress(static_cast<double>(i) / lanes.size())) {
            return Error{ErrorCode::cancelled, "export cancelled"};
        }
        const auto& lane = lanes[i];
        // Ends of the complete events that enclose the current position, innermost last.
        std::vector<std::int64_t> open_ends;
        bool write_ok = true;
        auto status = trace.for_each_event(lane.id, [&](const Event& e) {
            ++report.events;
            if (e.kind == EventKind::mark) {
                writer.event(e, lane.rank, 'i', 0);
            } else {
                while (!open_ends.empty() && open_ends.back() <= e.start_ns) {
                    open_ends.pop_back();
                }
                if (open_ends.empty() || e.end_ns <= open_ends.back()) {
                    writer.event(e, lane.rank, 'X', 0);
                    open_ends.push_back(e.end_ns);
                } else {
                    const std::int64_t id = next_async_id++;
                    writer.event(e, lane.rank, 'b', id);
                    writer.event(e, lane.rank, 'e', id);
                    ++report.async_events;
                }
            }
            if (writer.pending() > (1 << 20)) {
                write_ok = writer.drain();
            }
            return write_ok;
        });
        if (!status) {
            return status.error();
        }
        if (!write_ok) {
            break;  // commit() reports the write error
        }
    }
    auto counters = trace.counters();
    if (!counters) {
        return counters.error();
    }
    for (const auto& sample : *counters) {
        writer.counter(sample);
    }
    writer.raw("\n]}\n");
    writer.drain();
    if (auto status = file->commit(); !status) {
        return status.error();
    }
    if (options.progress) {
        options.progress(1.0);
    }
    return report;
}

}  // namespace fulcrum
