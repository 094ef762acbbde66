#include "core/export/chrome_trace.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <unordered_map>
#include <vector>

#include "core/util/json_text.h"
#include "core/util/output_file.h"

namespace fulcrum {
namespace {

// Kineto's process ids are OS pids on the host and device ordinals on the devices; a rank
// whose pid is unknown or small enough to be taken for a device gets one above both.
constexpr std::int64_t kUnknownPidBase = 1'000'000;
// A lane whose native id is unknown or taken by another lane of its process.
constexpr std::int64_t kUnknownTidBase = 2'000'000;

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

// Kineto's category for an event: what HTA and Perfetto's Kineto support key on.
std::string_view kineto_category(const Event& event, LaneKind lane) {
    const bool device = lane == LaneKind::gpu_stream;
    switch (event.kind) {
        case EventKind::kernel:
        case EventKind::collective:
            return device ? "kernel" : "user_annotation";
        case EventKind::memcpy:
            return device ? "gpu_memcpy" : "user_annotation";
        case EventKind::memset:
            return device ? "gpu_memset" : "user_annotation";
        case EventKind::sync:
            return device ? "cuda_sync" : "cuda_runtime";
        case EventKind::api:
            return "cuda_runtime";
        case EventKind::range:
        case EventKind::mark:
            break;
    }
    return device ? "gpu_user_annotation" : "user_annotation";
}

// Where one lane sits in a file.
struct ChromePlace {
    std::int64_t pid = 0;
    std::int64_t tid = 0;
};

// The processes and threads of one file. Kineto's layout (one rank per file): host threads
// under the rank's pid with their thread ids, streams under the device with their stream ids.
// Several ranks in one file: a process per rank, a thread per lane.
class ChromeLayout {
public:
    ChromeLayout(const std::vector<RankInfo>& ranks, const std::vector<LaneInfo>& lanes,
                 bool kineto) {
        for (const RankInfo& rank : ranks) {
            device_[rank.rank] = std::max(rank.device, 0);
            host_pid_[rank.rank] = !kineto           ? rank.rank
                                   : rank.pid > 1024 ? rank.pid
                                                     : kUnknownPidBase + rank.rank;
            device_pid_[rank.rank] = !kineto ? rank.rank : device_[rank.rank];
        }
        std::set<std::pair<std::int64_t, std::int64_t>> taken;
        for (const LaneInfo& lane : lanes) {
            ChromePlace place;
            place.pid = lane.kind == LaneKind::gpu_stream ? device_pid_.at(lane.rank)
                                                          : host_pid_.at(lane.rank);
            place.tid = !kineto               ? lane.id.value
                        : lane.native_id >= 0 ? lane.native_id
                                              : kUnknownTidBase + lane.id.value;
            if (!taken.insert({place.pid, place.tid}).second) {
                place.tid = kUnknownTidBase + lane.id.value;
                taken.insert({place.pid, place.tid});
            }
            places_[lane.id.value] = place;
        }
    }
    const ChromePlace& of(LaneId lane) const { return places_.at(lane.value); }
    std::int64_t host_pid(std::int32_t rank) const { return host_pid_.at(rank); }
    std::int64_t device_pid(std::int32_t rank) const { return device_pid_.at(rank); }
    // The device ordinal of a rank's streams (0 when the rank row does not say).
    std::int64_t device(std::int32_t rank) const { return device_.at(rank); }

private:
    std::map<std::int32_t, std::int64_t> host_pid_, device_pid_, device_;
    std::unordered_map<std::uint32_t, ChromePlace> places_;
};

class ChromeWriter {
public:
    ChromeWriter(const store::TraceReader& trace, OutputFile& file) : trace_(trace), file_(file) {}

    void metadata(std::string_view kind, std::int64_t pid, std::int64_t tid, std::string_view key,
                  std::string_view value) {
        begin_record();
        out_ += "{\"ph\":\"M\",\"name\":";
        append_json_string(out_, kind);
        out_ +=
            ",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) + ",\"args\":{";
        append_json_string(out_, key);
        out_ += ":";
        out_ += value;
        out_ += "}}";
    }

    // `device` is the device ordinal of a stream's event, -1 on the host.
    void event(const Event& e, const LaneInfo& lane, const ChromePlace& place, std::int64_t device,
               char phase, std::int64_t async_id) {
        begin_record();
        out_ += "{\"ph\":\"";
        out_.push_back(phase);
        out_ += "\",\"cat\":";
        append_json_string(out_, kineto_category(e, lane.kind));
        out_ += ",\"name\":";
        append_json_string(out_, trace_.string(e.name));
        out_ += ",\"pid\":" + std::to_string(place.pid) + ",\"tid\":" + std::to_string(place.tid) +
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
            append_args(e, lane, device);
        }
        out_ += "}";
    }

    void counter(const CounterSample& sample, std::int64_t pid) {
        begin_record();
        out_ += "{\"ph\":\"C\",\"name\":";
        append_json_string(out_, sample.name);
        out_ += ",\"pid\":" + std::to_string(pid) + ",\"ts\":";
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

    // Kineto's args first (device, stream, correlation, bytes), then Fulcrum's columns.
    void append_args(const Event& e, const LaneInfo& lane, std::int64_t device) {
        out_ += ",\"args\":{\"kind\":";
        append_json_string(out_, to_string(e.kind));
        out_ += ",\"category\":";
        append_json_string(out_, to_string(e.category));
        auto add = [&](const char* key, std::int64_t value) {
            if (value >= 0) {
                out_ += ",\"";
                out_ += key;
                out_ += "\":" + std::to_string(value);
            }
        };
        auto add_text = [&](const char* key, std::string_view value) {
            if (!value.empty()) {
                out_ += ",\"";
                out_ += key;
                out_ += "\":";
                append_json_string(out_, value);
            }
        };
        if (lane.kind == LaneKind::gpu_stream) {
            add("device", device);
            add("stream", lane.native_id);
        }
        add("correlation", e.correlation);
        add("bytes", e.bytes);
        add("step", e.step);
        add("microbatch", e.microbatch);
        add("stage", e.stage);
        add_text("phase", to_string(e.phase));
        add_text("copy", to_string(e.copy_kind));
        add_text("src memory", to_string(e.src_memory));
        add_text("dst memory", to_string(e.dst_memory));
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
        const nlohmann::json parsed = nlohmann::json::parse(text, nullptr, false);
        if (!parsed.is_discarded()) {
            json = parsed.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
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

// The `fulcrum` member: what a re-import needs to give back the run (core/import/kineto).
std::string fulcrum_member(const store::TraceReader& trace, const std::vector<RankInfo>& ranks,
                           const std::vector<LaneInfo>& lanes, const ChromeLayout& layout,
                           const std::vector<WorkloadEntry>& workload) {
    nlohmann::json member = {{"format", 1}};
    const nlohmann::json config = nlohmann::json::parse(trace.run().config_json, nullptr, false);
    if (config.is_object()) {
        member["config"] = config;
    }
    std::set<std::int32_t> wanted;
    nlohmann::json rank_rows = nlohmann::json::array();
    for (const RankInfo& rank : ranks) {
        wanted.insert(rank.rank);
        rank_rows.push_back({{"rank", rank.rank},
                             {"host", rank.host},
                             {"pid", rank.pid},
                             {"device", rank.device},
                             {"dp", rank.dp},
                             {"pp", rank.pp},
                             {"cp", rank.cp},
                             {"tp", rank.tp},
                             {"dropped_records", rank.dropped_records}});
    }
    member["ranks"] = std::move(rank_rows);
    nlohmann::json lane_rows = nlohmann::json::array();
    for (const LaneInfo& lane : lanes) {
        const ChromePlace& place = layout.of(lane.id);
        lane_rows.push_back({{"pid", place.pid},
                             {"tid", place.tid},
                             {"rank", lane.rank},
                             {"kind", std::string(to_string(lane.kind))},
                             {"name", lane.name},
                             {"native_id", lane.native_id}});
    }
    member["lanes"] = std::move(lane_rows);
    nlohmann::json workload_rows = nlohmann::json::array();
    for (const WorkloadEntry& w : workload) {
        if (wanted.count(w.rank) != 0) {
            workload_rows.push_back({w.rank, w.step, w.microbatch, w.doc_id, w.doc_length,
                                     w.token_begin, w.token_end, w.balancer.str()});
        }
    }
    member["workload"] = std::move(workload_rows);
    return member.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

struct FileJob {
    std::string path;
    std::vector<RankInfo> ranks;
    bool kineto_layout = false;
};

// The file's opening up to "traceEvents":[ — its zero, Kineto's rank and device members for
// HTA, and the `fulcrum` member.
std::string file_header(const store::TraceReader& trace, const FileJob& job,
                        const std::vector<LaneInfo>& lanes, const ChromeLayout& layout,
                        const std::vector<WorkloadEntry>& workload) {
    // The file's zero, in UTC: a merged run's zero (its events count from it), or a rank
    // file's own clock, whose UTC offset the rank row gives. Events are written as stored.
    const bool merged =
        std::any_of(trace.ranks().begin(), trace.ranks().end(),
                    [](const RankInfo& r) { return r.alignment != ClockAlignment::none; });
    const std::int64_t base_ns =
        merged || job.ranks.empty() ? trace.run().start_utc_ns : job.ranks.front().utc_offset_ns;

    std::string header = "{\"schemaVersion\":1,\"displayTimeUnit\":\"ns\",\"traceName\":";
    append_json_string(header, trace.run().name);
    header += ",\"baseTimeNanoseconds\":" + std::to_string(base_ns);
    if (job.kineto_layout && job.ranks.size() == 1) {
        const RankInfo& rank = job.ranks.front();
        // Spaced as Kineto writes it: HTA finds a file's rank with the pattern "rank":\s+(\d+)
        // on the first line that has one.
        header += ",\n\"distributedInfo\": {\"rank\": " + std::to_string(rank.rank) +
                  ", \"world_size\": " + std::to_string(trace.ranks().size()) + "}";
        if (rank.device >= 0) {
            header += ",\"deviceProperties\":[{\"id\":" + std::to_string(rank.device) +
                      ",\"name\":\"device " + std::to_string(rank.device) + "\"}]";
        }
    }
    header += ",\n\"fulcrum\":" + fulcrum_member(trace, job.ranks, lanes, layout, workload) +
              ",\n\"traceEvents\":[\n";
    return header;
}

// The processes' and threads' names, labels and order.
void write_names(ChromeWriter& writer, const FileJob& job, const std::vector<LaneInfo>& lanes,
                 const ChromeLayout& layout) {
    for (const RankInfo& rank : job.ranks) {
        std::string label;
        append_json_string(label, rank_label(rank));
        writer.metadata("process_name", layout.host_pid(rank.rank), 0, "name", label);
        writer.metadata("process_labels", layout.host_pid(rank.rank), 0, "labels", "\"CPU\"");
        writer.metadata("process_sort_index", layout.host_pid(rank.rank), 0, "sort_index",
                        std::to_string(rank.rank));
        if (job.kineto_layout && layout.device_pid(rank.rank) != layout.host_pid(rank.rank)) {
            const std::int64_t device = layout.device_pid(rank.rank);
            std::string device_label;
            append_json_string(device_label, "GPU " + std::to_string(device));
            writer.metadata("process_name", device, 0, "name", label);
            writer.metadata("process_labels", device, 0, "labels", device_label);
        }
    }
    std::int64_t sort_index = 0;
    for (const LaneInfo& lane : lanes) {
        std::string label;
        append_json_string(label, lane.name);
        const ChromePlace& place = layout.of(lane.id);
        writer.metadata("thread_name", place.pid, place.tid, "name", label);
        writer.metadata("thread_sort_index", place.pid, place.tid, "sort_index",
                        std::to_string(sort_index++));
    }
}

// Writes one file holding `job.ranks`; `done` and `total` count lanes for the progress.
Status write_file(const store::TraceReader& trace, const FileJob& job, const ExportOptions& options,
                  const std::vector<WorkloadEntry>& workload,
                  const std::vector<CounterSample>& counters, std::size_t& done, std::size_t total,
                  ExportReport& report) {
    auto file = OutputFile::create(job.path, options.overwrite);
    if (!file) {
        return file.error();
    }
    std::set<std::int32_t> wanted;
    for (const RankInfo& rank : job.ranks)
        wanted.insert(rank.rank);
    std::vector<LaneInfo> lanes;
    for (const LaneInfo& lane : trace.lanes()) {
        if (wanted.count(lane.rank) != 0)
            lanes.push_back(lane);
    }
    const ChromeLayout layout(job.ranks, lanes, job.kineto_layout);
    ChromeWriter writer(trace, *file);
    writer.raw(file_header(trace, job, lanes, layout, workload));
    write_names(writer, job, lanes, layout);

    std::int64_t next_async_id = 1;
    for (const LaneInfo& lane : lanes) {
        if (options.progress &&
            !options.progress(static_cast<double>(done) / static_cast<double>(total))) {
            return Error{ErrorCode::cancelled, "export cancelled"};
        }
        ++done;
        const ChromePlace& place = layout.of(lane.id);
        const bool stream = lane.kind == LaneKind::gpu_stream;
        const std::int64_t device = stream ? layout.device(lane.rank) : -1;
        // Ends of the complete events that enclose the current position, innermost last.
        std::vector<std::int64_t> open_ends;
        bool write_ok = true;
        auto status = trace.for_each_event(lane.id, [&](const Event& e) {
            ++report.events;
            if (e.kind == EventKind::mark) {
                writer.event(e, lane, place, device, 'i', 0);
            } else if (stream) {
                writer.event(e, lane, place, device, 'X', 0);
            } else {
                while (!open_ends.empty() && open_ends.back() <= e.start_ns) {
                    open_ends.pop_back();
                }
                if (open_ends.empty() || e.end_ns <= open_ends.back()) {
                    writer.event(e, lane, place, device, 'X', 0);
                    open_ends.push_back(e.end_ns);
                } else {
                    const std::int64_t id = next_async_id++;
                    writer.event(e, lane, place, device, 'b', id);
                    writer.event(e, lane, place, device, 'e', id);
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
    for (const CounterSample& sample : counters) {
        if (wanted.count(sample.rank) != 0) {
            writer.counter(sample, layout.host_pid(sample.rank));
        }
    }
    writer.raw("\n]}\n");
    writer.drain();
    if (auto status = file->commit(); !status) {
        return status.error();
    }
    report.files.push_back(job.path);
    return {};
}

}  // namespace

Result<ExportReport> export_chrome_trace(const store::TraceReader& trace, const std::string& path,
                                         const ExportOptions& options) {
    auto workload = trace.workload();
    if (!workload) {
        return workload.error();
    }
    auto counters = trace.counters();
    if (!counters) {
        return counters.error();
    }
    std::vector<FileJob> jobs;
    if (options.per_rank) {
        std::error_code ec;
        std::filesystem::create_directories(path, ec);
        if (!std::filesystem::is_directory(path, ec)) {
            return Error{ErrorCode::io, "cannot write the per-rank traces into '" + path +
                                            "': it is not a folder and cannot be made one"};
        }
        for (const RankInfo& rank : trace.ranks()) {
            jobs.push_back(
                {(std::filesystem::path(path) / ("rank-" + std::to_string(rank.rank) + ".json"))
                     .string(),
                 {rank},
                 true});
        }
    } else {
        jobs.push_back({path, trace.ranks(), false});
    }
    ExportReport report;
    std::size_t done = 0;
    const std::size_t total = std::max<std::size_t>(trace.lanes().size(), 1);
    for (const FileJob& job : jobs) {
        if (auto status =
                write_file(trace, job, options, *workload, *counters, done, total, report);
            !status) {
            return status.error();
        }
    }
    if (options.progress) {
        options.progress(1.0);
    }
    return report;
}

}  // namespace fulcrum
