// PyTorch profiler (Kineto) / Chrome trace JSON importer (docs/import.md, "PyTorch profiler
// (Kineto)"). Two streaming passes over the file, never a DOM:
//   1. a quick pass that parses only the top-level members (distributedInfo,
//      baseTimeNanoseconds, which Kineto writes after traceEvents) and the host
//      "ProfilerStep#N" ranges: the rank, the clock offset and the step windows;
//   2. the import: every trace event becomes one Event written through store::TraceWriter.
// Memory: the stream's buffer, per-lane state, the step windows and a correlation -> step map
// of the launches (bounded by the output), plus the writer's own queue.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <unordered_map>

#include "core/import/importer.h"
#include "core/import/kineto/json_stream.h"
#include "core/store/trace_writer.h"

namespace fulcrum::importer {

namespace {

using kineto::JsonCursor;
using kineto::JsonStream;

constexpr int kLogPerReason = 20;        // import_log rows per reason; the rest are counted
constexpr std::size_t kLogRecordBytes = 512;

bool contains_ci(std::string_view text, std::string_view needle) {
    if (needle.size() > text.size()) return false;
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
    const char first = needle[0];
    for (std::size_t i = 0; i + needle.size() <= text.size(); ++i) {
        if (lower(text[i]) != first) continue;
        std::size_t j = 1;
        while (j < needle.size() && lower(text[i + j]) == needle[j]) ++j;
        if (j == needle.size()) return true;
    }
    return false;
}

// A pid or tid: a number, or a string mapped to a stable negative id.
struct IdMap {
    std::unordered_map<std::string, std::int64_t> strings;
    std::int64_t of(std::string_view raw) {
        std::int64_t value = 0;
        if (kineto::json_int(raw, value)) return value;
        std::string text;
        if (!kineto::json_string(raw, text)) text = std::string(raw);
        if (kineto::json_int(text, value)) return value;
        auto [it, added] = strings.emplace(text, -1000 - static_cast<std::int64_t>(strings.size()));
        return it->second;
    }
};

// The fields of one trace event that the importer uses; views into the stream's buffer.
struct RawEvent {
    std::string_view ph, cat, ts, dur, pid, tid, args, s;
    std::string name;
    bool has_name = false;
};

bool parse_event(std::string_view raw, RawEvent& e, std::string& scratch) {
    JsonCursor cursor(raw);
    if (!cursor.begin_object()) return false;
    std::string_view key, value;
    bool ok = false;
    while (cursor.next_member(key, value, ok)) {
        if (key.empty()) continue;
        switch (key[0]) {
            case 'p':
                if (key == "ph") e.ph = value;
                else if (key == "pid") e.pid = value;
                break;
            case 'c':
                if (key == "cat") e.cat = value;
                break;
            case 'n':
                if (key == "name") e.has_name = kineto::json_string(value, e.name);
                break;
            case 't':
                if (key == "ts") e.ts = value;
                else if (key == "tid") e.tid = value;
                break;
            case 'd':
                if (key == "dur") e.dur = value;
                break;
            case 'a':
                if (key == "args") e.args = value;
                break;
            default: break;
        }
    }
    (void)scratch;
    if (!ok || !cursor.done()) return false;
    // ph and cat are short strings without escapes: strip the quotes.
    auto unquote = [](std::string_view& v) {
        if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    };
    unquote(e.ph);
    unquote(e.cat);
    return true;
}

// "ProfilerStep#12" -> 12.
bool profiler_step(std::string_view name, std::int32_t& step) {
    constexpr std::string_view prefix = "ProfilerStep#";
    if (name.substr(0, prefix.size()) != prefix) return false;
    std::int64_t value = 0;
    if (!kineto::json_int(name.substr(prefix.size()), value) || value < 0 || value > INT32_MAX) return false;
    step = static_cast<std::int32_t>(value);
    return true;
}

bool is_gpu_cat(std::string_view cat) {
    return cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset" ||
           cat == "gpu_user_annotation" || cat == "Kernel" || cat == "Memcpy" || cat == "Memset";
}

bool is_known_host_cat(std::string_view cat) {
    static constexpr std::string_view known[] = {
        "cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "python_function",
        "cpu_instant_event", "Trace", "fwdbwd", "ac2g", "overhead", "Runtime", "Operator",
        "cuda_profiler_range", "privateuse1_runtime", "privateuse1_driver", "mtia_runtime",
        "xpu_runtime", "xpu_driver", ""};
    return std::find(std::begin(known), std::end(known), cat) != std::end(known);
}

struct StepWindow {
    std::int64_t start, end;
    std::int32_t step;
};

struct TopLevel {
    bool has_rank = false;
    std::int32_t rank = 0;
    std::int32_t world_size = -1;
    std::string backend;
    bool has_base = false;
    std::int64_t base_ns = 0;
    std::int32_t device = -1;
    bool distributed_after_events = false;
    std::vector<StepWindow> steps;
};

void read_top_member(std::string_view key, std::string_view value, TopLevel& top, bool events_seen) {
    if (key == "distributedInfo") {
        JsonCursor cursor(value);
        if (!cursor.begin_object()) return;
        std::string_view k, v;
        bool ok = false;
        while (cursor.next_member(k, v, ok)) {
            std::int64_t n = 0;
            if (k == "rank" && kineto::json_int(v, n) && n >= 0 && n < INT32_MAX) {
                top.has_rank = true;
                top.rank = static_cast<std::int32_t>(n);
                top.distributed_after_events = events_seen;
            } else if (k == "world_size" && kineto::json_int(v, n) && n > 0 && n < INT32_MAX) {
                top.world_size = static_cast<std::int32_t>(n);
            } else if (k == "backend") {
                kineto::json_string(v, top.backend);
            }
        }
    } else if (key == "baseTimeNanoseconds") {
        std::int64_t n = 0;
        if (kineto::json_int(value, n)) {
            top.has_base = true;
            top.base_ns = n;
        }
    } else if (key == "deviceProperties") {
        // One device listed: that is the rank's device.
        JsonCursor cursor(value);
        if (!cursor.eat('[')) return;
        int count = 0;
        std::int32_t id = -1;
        std::string_view element;
        while (cursor.value(element)) {
            ++count;
            JsonCursor device(element);
            std::string_view k, v;
            bool ok = false;
            if (device.begin_object()) {
                while (device.next_member(k, v, ok)) {
                    std::int64_t n = 0;
                    if (k == "id" && kineto::json_int(v, n) && n >= 0 && n < 1 << 20) id = static_cast<std::int32_t>(n);
                }
            }
            if (!cursor.eat(',')) break;
        }
        if (count == 1) top.device = id;
    }
}

// Walks the document: calls member(key, raw) for top-level members and event(raw, index)
// for each traceEvents element. Returns false when the document is not JSON we can read
// at all; `truncated` tells whether it stopped early.
template <typename Member, typename EventFn>
bool walk(JsonStream& stream, Member&& member, EventFn&& event, bool& truncated,
          const std::atomic<bool>* cancel, bool& cancelled) {
    truncated = false;
    cancelled = false;
    std::int64_t index = 0;
    auto events = [&]() {
        stream.advance();  // '['
        for (;;) {
            int c = stream.peek();
            if (c == ']') {
                stream.advance();
                return true;
            }
            std::string_view raw;
            if (!stream.next_value(raw)) return false;
            event(raw, index++);
            if ((index & 4095) == 0 && cancel != nullptr && cancel->load()) {
                cancelled = true;
                return false;
            }
            c = stream.peek();
            if (c == ',') {
                stream.advance();
            } else if (c != ']') {
                return false;
            }
        }
    };
    const int first = stream.peek();
    if (first == '[') {
        truncated = !events() && !cancelled;
        return true;
    }
    if (first != '{') return false;
    stream.advance();
    bool any = false;
    for (;;) {
        int c = stream.peek();
        if (c == '}') return true;
        std::string_view raw;
        std::string key;
        if (c != '"' || !stream.next_value(raw) || !kineto::json_string(raw, key) || stream.peek() != ':') {
            truncated = any || c == '"';
            return any || c < 0 || c == '"';
        }
        stream.advance();
        any = true;
        if (key == "traceEvents" && stream.peek() == '[') {
            if (!events()) {
                truncated = !cancelled;
                return true;
            }
        } else {
            if (!stream.next_value(raw)) {
                truncated = true;
                return true;
            }
            member(key, raw);
        }
        c = stream.peek();
        if (c == ',') {
            stream.advance();
        } else if (c != '}') {
            truncated = true;
            return true;
        }
    }
}

class KinetoImporter final : public Importer {
public:
    std::string_view name() const override { return "kineto-json"; }
    std::string_view description() const override {
        return "PyTorch profiler (Kineto) / Chrome trace JSON, plain or .gz";
    }
    bool sniff(std::string_view head) const override {
        std::size_t i = 0;
        if (head.substr(0, 3) == "\xEF\xBB\xBF") i = 3;
        while (i < head.size() && std::strchr(" \t\r\n", head[i]) != nullptr) ++i;
        if (i >= head.size()) return false;
        if (head[i] == '[') {
            ++i;
            while (i < head.size() && std::strchr(" \t\r\n", head[i]) != nullptr) ++i;
            return i < head.size() && head[i] == '{' &&
                   (head.find("\"ph\"") != std::string_view::npos || head.find("\"ts\"") != std::string_view::npos ||
                    head.size() - i < 64);
        }
        if (head[i] != '{') return false;
        for (std::string_view key : {"\"traceEvents\"", "\"schemaVersion\"", "\"deviceProperties\"",
                                     "\"distributedInfo\"", "\"baseTimeNanoseconds\""}) {
            if (head.find(key) != std::string_view::npos) return true;
        }
        return false;
    }
    Result<std::vector<std::string>> import_file(const std::string& input,
                                                 const ImportFileOptions& options) const override;
};

struct LogSink {
    store::TraceWriter* writer = nullptr;
    std::string source;
    std::map<std::string, std::int64_t> counts;
    void add(const std::string& reason, std::int64_t index, std::string_view record) {
        const std::int64_t n = ++counts[reason];
        if (n <= kLogPerReason) {
            writer->add_import_log({source, index, reason,
                                    std::string(record.substr(0, kLogRecordBytes))});
        }
    }
    void finish() {
        for (const auto& [reason, n] : counts) {
            if (n > kLogPerReason) {
                writer->add_import_log({source, -1,
                                        reason + ": " + std::to_string(n - kLogPerReason) +
                                            " more records like this (" + std::to_string(n) +
                                            " in all)",
                                        ""});
            }
        }
    }
};

Result<std::vector<std::string>> KinetoImporter::import_file(const std::string& input,
                                                             const ImportFileOptions& options) const {
    std::error_code ec;
    const auto file_size = static_cast<double>(std::max<std::uintmax_t>(1, std::filesystem::file_size(input, ec)));
    if (ec) return Error{ErrorCode::io, "cannot read '" + input + "': " + ec.message()};
    auto progress = [&](double fraction) {
        if (options.progress) options.progress(std::clamp(fraction, 0.0, 1.0));
    };
    const auto* cancel = options.cancel;

    // Pass 1: top-level members and the host ProfilerStep windows.
    TopLevel top;
    {
        JsonStream stream;
        if (!stream.open(input)) return Error{ErrorCode::io, "cannot open '" + input + "'"};
        bool events_seen = false, truncated = false, cancelled = false;
        std::string scratch;
        std::int64_t last_report = 0, seen = 0;
        const bool readable = walk(
            stream, [&](std::string_view key, std::string_view raw) { read_top_member(key, raw, top, events_seen); },
            [&](std::string_view raw, std::int64_t) {
                events_seen = true;
                if ((++seen & 1023) == 0 && stream.file_offset() - last_report > (8 << 20)) {
                    last_report = stream.file_offset();
                    progress(0.25 * double(last_report) / file_size);
                }
                if (raw.find("ProfilerStep#") == std::string_view::npos) return;
                RawEvent e;
                if (!parse_event(raw, e, scratch) || e.ph != "X" || is_gpu_cat(e.cat)) return;
                std::int32_t step = 0;
                std::int64_t ts = 0, dur = 0;
                if (profiler_step(e.name, step) && kineto::json_us_to_ns(e.ts, ts) &&
                    kineto::json_us_to_ns(e.dur, dur) && dur >= 0) {
                    top.steps.push_back({ts, ts + dur, step});
                }
            },
            truncated, cancel, cancelled);
        if (cancelled) return Error{ErrorCode::cancelled, "import cancelled"};
        if (!readable) {
            return Error{ErrorCode::invalid_input,
                         "'" + input + "' is not Chrome trace JSON (it should start with {\"traceEvents\": [ or [{)" +
                             (stream.problem().empty() ? "" : ": " + stream.problem())};
        }
        std::sort(top.steps.begin(), top.steps.end(),
                  [](const StepWindow& a, const StepWindow& b) { return a.start < b.start; });
    }

    // Pass 2: the import.
    const std::int32_t rank = top.has_rank && !top.distributed_after_events ? top.rank : options.input_index;
    const std::string path = (std::filesystem::path(options.scratch_dir) /
                              ("rank-" + std::to_string(rank) + ".sqlite")).string();
    RunInfo run;
    run.name = std::filesystem::path(input).filename().string();
    run.command = "fulcrum import " + input;
    run.start_utc_ns = top.has_base ? top.base_ns : 0;
    run.origin = RunOrigin::imported;
    run.producer = "fulcrum kineto-json importer";
    run.config_json = "{\"source\":\"kineto\"";
    if (!top.backend.empty()) {
        std::string safe;
        for (char c : top.backend) if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-') safe += c;
        run.config_json += ",\"backend\":\"" + safe + "\"";
    }
    if (top.world_size > 0) run.config_json += ",\"world_size\":" + std::to_string(top.world_size);
    run.config_json += "}";
    store::WriterOptions writer_options;
    writer_options.overflow = store::WriterOptions::Overflow::block;
    writer_options.overwrite = true;
    auto created = store::TraceWriter::create(path, run, writer_options);
    if (!created) return created.error();
    store::TraceWriter& writer = **created;

    RankInfo rank_info;
    rank_info.rank = rank;
    rank_info.device = top.device;
    rank_info.utc_offset_ns = top.has_base ? top.base_ns : 0;
    rank_info.alignment = ClockAlignment::utc_offset;
    writer.add_rank(rank_info);

    LogSink log{&writer, std::filesystem::path(input).filename().string(), {}};
    if (!top.has_base) {
        log.add("no baseTimeNanoseconds: this rank's timestamps are taken as they are (offset 0), "
                "so its alignment with other ranks is unknown", -1, "");
    }
    if (top.distributed_after_events) {
        log.add("distributedInfo comes after traceEvents: rank " + std::to_string(top.rank) +
                " ignored, the input's position (" + std::to_string(options.input_index) + ") used", -1, "");
    }
    if (!top.has_rank) {
        log.add("no distributedInfo.rank: rank " + std::to_string(rank) + " from the input's position", -1, "");
    }

    auto step_at = [&](std::int64_t t) -> std::int32_t {
        auto it = std::upper_bound(top.steps.begin(), top.steps.end(), t,
                                   [](std::int64_t v, const StepWindow& w) { return v < w.start; });
        if (it == top.steps.begin()) return -1;
        --it;
        return t < it->end ? it->step : -1;
    };

    IdMap ids;
    struct LaneKey {
        bool gpu;
        std::int64_t pid, tid;
        bool operator<(const LaneKey& o) const { return std::tie(gpu, pid, tid) < std::tie(o.gpu, o.pid, o.tid); }
    };
    std::map<LaneKey, LaneId> lanes;
    std::map<std::pair<std::int64_t, std::int64_t>, std::string> thread_names;
    std::int64_t first_host_pid = 0;
    std::int32_t first_device = -1;
    auto lane_of = [&](bool gpu, std::int64_t pid, std::int64_t tid) {
        auto [it, added] = lanes.emplace(LaneKey{gpu, pid, tid}, LaneId{});
        if (added) {
            std::string name;
            if (gpu) {
                name = "stream " + std::to_string(tid) + " (device " + std::to_string(pid) + ")";
                if (first_device < 0 && pid >= 0 && pid < (1 << 20)) first_device = static_cast<std::int32_t>(pid);
            } else {
                auto named = thread_names.find({pid, tid});
                name = named != thread_names.end() ? named->second : "thread " + std::to_string(tid);
                if (first_host_pid == 0) first_host_pid = pid;
            }
            it->second = writer.add_lane(rank, gpu ? LaneKind::gpu_stream : LaneKind::host_thread, name, tid);
        }
        return it->second;
    };
    struct Open {
        Event event;
    };
    std::map<LaneId, std::vector<Event>> open_ranges;  // "B" waiting for "E"
    std::unordered_map<std::int64_t, std::int32_t> launch_step;  // correlation -> step
    std::map<std::string, std::int64_t> unknown_cats;
    const StringId step_name = writer.intern("step");

    std::vector<Event> batch;
    batch.reserve(4096);
    auto flush = [&]() {
        writer.add_events(batch.data(), batch.size());
        batch.clear();
    };

    JsonStream stream;
    if (!stream.open(input)) return Error{ErrorCode::io, "cannot open '" + input + "'"};
    bool truncated = false, cancelled = false;
    std::int64_t last_report = 0, events = 0;
    std::string scratch, text;
    RawEvent e;
    walk(
        stream, [](std::string_view, std::string_view) {},
        [&](std::string_view raw, std::int64_t index) {
            if ((index & 1023) == 0 && stream.file_offset() - last_report > (4 << 20)) {
                last_report = stream.file_offset();
                progress(0.25 + 0.75 * double(last_report) / file_size);
            }
            e = RawEvent{};
            if (!parse_event(raw, e, scratch)) {
                log.add("not a JSON object", index, raw);
                return;
            }
            const std::string_view ph = e.ph;
            if (ph == "M") {
                if (e.name == "thread_name" && !e.pid.empty() && !e.tid.empty()) {
                    JsonCursor args(e.args);
                    std::string_view k, v;
                    bool ok = false;
                    if (args.begin_object()) {
                        while (args.next_member(k, v, ok)) {
                            if (k == "name" && kineto::json_string(v, text)) {
                                const std::int64_t pid = ids.of(e.pid), tid = ids.of(e.tid);
                                thread_names[{pid, tid}] = text;
                                if (auto it = lanes.find(LaneKey{false, pid, tid}); it != lanes.end()) {
                                    writer.rename_lane(it->second, text);
                                }
                            }
                        }
                    }
                }
                return;  // other metadata (process names, sort indexes, labels) is not needed
            }
            if (ph == "s" || ph == "f" || ph == "t") return;  // flows: correlation args link launches
            const bool complete = ph == "X", begin = ph == "B", end_ph = ph == "E";
            const bool instant = ph == "i" || ph == "I" || ph == "R";
            const bool counter = ph == "C";
            if (!complete && !begin && !end_ph && !instant && !counter) {
                log.add("unknown event type \"ph\": \"" + std::string(ph.substr(0, 16)) + "\"", index, raw);
                return;
            }
            std::int64_t ts = 0;
            if (e.ts.empty()) {
                log.add("no \"ts\"", index, raw);
                return;
            }
            if (!kineto::json_us_to_ns(e.ts, ts)) {
                log.add("\"ts\" is not a number", index, raw);
                return;
            }
            if (e.pid.empty() && e.tid.empty() && !counter) {
                log.add("no \"pid\" or \"tid\"", index, raw);
                return;
            }
            if (counter) {
                JsonCursor args(e.args);
                std::string_view k, v;
                bool ok = false;
                double value = 0;
                if (args.begin_object()) {
                    while (args.next_member(k, v, ok)) {
                        if (kineto::json_double(v, value)) {
                            writer.add_counter({rank, e.name + "." + std::string(k), ts, value});
                        }
                    }
                }
                return;
            }
            std::int64_t dur = 0;
            if (complete) {
                if (e.dur.empty()) {
                    log.add("complete event without \"dur\"", index, raw);
                    return;
                }
                if (!kineto::json_us_to_ns(e.dur, dur)) {
                    log.add("\"dur\" is not a number", index, raw);
                    return;
                }
                if (dur < 0) {
                    log.add("negative \"dur\"", index, raw);
                    return;
                }
            }
            const std::string_view cat = e.cat;
            const bool gpu = is_gpu_cat(cat);
            if (!gpu && !is_known_host_cat(cat)) ++unknown_cats[std::string(cat.substr(0, 64))];
            const std::int64_t pid = ids.of(e.pid.empty() ? std::string_view("0") : e.pid);
            const std::int64_t tid = ids.of(e.tid.empty() ? std::string_view("0") : e.tid);
            const LaneId lane = lane_of(gpu, pid, tid);

            if (end_ph) {
                auto& stack = open_ranges[lane];
                if (stack.empty()) {
                    log.add("\"E\" without a matching \"B\"", index, raw);
                    return;
                }
                Event event = stack.back();
                stack.pop_back();
                if (ts < event.start_ns) {
                    log.add("\"E\" before its \"B\"", index, raw);
                    return;
                }
                event.end_ns = ts;
                batch.push_back(event);
                ++events;
                if (batch.size() >= 4096) flush();
                return;
            }

            Event event;
            event.lane = lane;
            event.start_ns = ts;
            event.end_ns = ts + dur;
            // args: correlation, bytes, "Collective name".
            bool collective_args = false;
            if (!e.args.empty()) {
                JsonCursor args(e.args);
                std::string_view k, v;
                bool ok = false;
                if (args.begin_object()) {
                    while (args.next_member(k, v, ok)) {
                        std::int64_t n = 0;
                        if (k == "correlation" && kineto::json_int(v, n)) event.correlation = n;
                        else if (k == "bytes" && kineto::json_int(v, n) && n >= 0) event.bytes = n;
                        else if (k == "Collective name") collective_args = true;
                    }
                }
            }
            std::int32_t step = -1;
            if (instant) {
                event.kind = EventKind::mark;
                event.end_ns = event.start_ns;
            } else if (cat == "kernel" || cat == "Kernel") {
                if (collective_args || contains_ci(e.name, "nccl")) {
                    event.kind = EventKind::collective;
                    event.category = Category::communication;
                    event.args = writer.intern(e.args);
                } else {
                    event.kind = EventKind::kernel;
                    event.category = contains_ci(e.name, "flash") || contains_ci(e.name, "attn") ||
                                             contains_ci(e.name, "sdpa") || contains_ci(e.name, "fmha")
                                         ? Category::attention
                                         : Category::compute;
                }
            } else if (cat == "gpu_memcpy" || cat == "Memcpy") {
                event.kind = EventKind::memcpy;
                if (e.name.find("HtoD") != std::string::npos) event.copy_kind = CopyKind::host_to_device;
                else if (e.name.find("DtoH") != std::string::npos) event.copy_kind = CopyKind::device_to_host;
                else if (e.name.find("DtoD") != std::string::npos) event.copy_kind = CopyKind::device_to_device;
                else if (e.name.find("PtoP") != std::string::npos) event.copy_kind = CopyKind::peer_to_peer;
                event.category = event.copy_kind == CopyKind::host_to_device ||
                                         event.copy_kind == CopyKind::device_to_host
                                     ? Category::offload
                                     : Category::memory;
                event.args = writer.intern(e.args);
            } else if (cat == "gpu_memset" || cat == "Memset") {
                event.kind = EventKind::memset;
                event.category = Category::memory;
            } else if (cat == "gpu_user_annotation") {
                event.kind = EventKind::range;
                event.category = Category::schedule;  // transparent around the kernels it covers
                profiler_step(e.name, step);
            } else if (cat == "cuda_runtime" || cat == "cuda_driver" || cat == "Runtime" ||
                       cat == "privateuse1_runtime" || cat == "privateuse1_driver") {
                event.kind = EventKind::api;
                event.category = Category::runtime;
            } else {
                event.kind = EventKind::range;
                event.category = Category::other;
            }
            std::int32_t host_step = -1;
            if (!gpu && profiler_step(e.name, host_step) && event.kind == EventKind::range) {
                event.name = step_name;
                event.category = Category::schedule;
                event.args = writer.intern("{\"kineto_name\":\"ProfilerStep#" + std::to_string(host_step) + "\"}");
                step = host_step;
            } else {
                event.name = writer.intern(e.name);
            }
            if (step < 0) {
                if (gpu) {
                    if (event.correlation >= 0) {
                        if (auto it = launch_step.find(event.correlation); it != launch_step.end()) step = it->second;
                    }
                    if (step < 0) step = step_at(event.start_ns);
                } else {
                    step = step_at(event.start_ns);
                    if (step >= 0 && event.kind == EventKind::api && event.correlation >= 0) {
                        launch_step.emplace(event.correlation, step);
                    }
                }
            }
            event.step = step;
            if (begin) {
                open_ranges[lane].push_back(event);
                return;
            }
            batch.push_back(event);
            ++events;
            if (batch.size() >= 4096) flush();
        },
        truncated, cancel, cancelled);
    flush();
    if (cancelled) {
        (void)writer.close();  // the file is removed anyway
        std::filesystem::remove(path, ec);
        return Error{ErrorCode::cancelled, "import cancelled"};
    }
    for (auto& [lane, stack] : open_ranges) {
        for (const Event& open : stack) {
            (void)open;
            log.add("\"B\" without a matching \"E\"", -1, "");
        }
    }
    for (const auto& [cat, n] : unknown_cats) {
        writer.add_import_log({log.source, -1,
                               "unknown category \"" + cat + "\": " + std::to_string(n) +
                                   " events imported as host ranges (category other)",
                               ""});
    }
    if (truncated) {
        std::string reason = "truncated at byte " + std::to_string(stream.offset()) +
                             " of the JSON: the events before it were imported";
        if (!stream.problem().empty()) reason += " (" + stream.problem() + ")";
        log.add(reason, -1, "");
    } else if (!stream.problem().empty()) {
        log.add(stream.problem(), -1, "");
    }
    log.finish();
    rank_info.pid = first_host_pid;
    if (rank_info.device < 0) rank_info.device = first_device;
    writer.add_rank(rank_info);
    if (auto closed = writer.close(); !closed) return closed.error();
    progress(1.0);
    (void)events;
    return std::vector<std::string>{path};
}

}  // namespace

std::unique_ptr<Importer> make_kineto_importer() { return std::make_unique<KinetoImporter>(); }

}  // namespace fulcrum::importer
