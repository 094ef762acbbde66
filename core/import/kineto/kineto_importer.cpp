// PyTorch profiler (Kineto) / Chrome trace JSON importer (docs/import.md, "PyTorch profiler
// (Kineto)"). Two streaming passes over the input, never a DOM:
//   1. a quick pass that parses only the top-level members (distributedInfo,
//      baseTimeNanoseconds, deviceProperties, which Kineto may write before or after
//      traceEvents, and the `fulcrum` member of Fulcrum's own export) and the host
//      "ProfilerStep#N" ranges: the ranks, the clock offset, the devices and the step windows;
//   2. the import: every trace event becomes one Event in the sink.
// Memory: the stream's buffer, per-lane state, the step windows and a correlation -> step map
// of the launches (bounded by the output), plus the sink's own queue.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>

#include "core/import/importer.h"
#include "core/import/kineto/json_stream.h"
#include "core/import/kineto/structure.h"
#include "core/trace/annotations.h"

namespace fulcrum::importer {

namespace {

// Two autograd operators of a thread are kept as one run when the second starts within this of
// the first's end: a backward's operators follow each other within microseconds, and no
// forward between two backwards is this short (the Python that calls a model's first layer
// takes longer).
constexpr std::int64_t kJoinedAutogradGapNs = 50'000;

using kineto::JsonCursor;
using kineto::JsonStream;

bool contains_ci(std::string_view text, std::string_view needle) {
    if (needle.empty() || needle.size() > text.size())
        return needle.empty();
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
    for (std::size_t i = 0; i + needle.size() <= text.size(); ++i) {
        std::size_t j = 0;
        while (j < needle.size() && lower(text[i + j]) == needle[j])
            ++j;
        if (j == needle.size())
            return true;
    }
    return false;
}

// What the importer learns from an event's name, kept per distinct name: kernel names repeat
// across millions of launches, and scanning each for "nccl" or "attn" was 4-10% of the import.
class NameCache {
public:
    struct Facts {
        StringId id;  // interned on first use, at the point the import would intern it
        bool nccl() {
            if (nccl_ < 0)
                nccl_ = contains_ci(name_, "nccl");
            return nccl_ != 0;
        }
        bool attention() {
            if (attention_ < 0) {
                attention_ = contains_ci(name_, "flash") || contains_ci(name_, "attn") ||
                             contains_ci(name_, "sdpa") || contains_ci(name_, "fmha");
            }
            return attention_ != 0;
        }

    private:
        friend class NameCache;
        std::string_view name_;
        std::int8_t nccl_ = -1, attention_ = -1;
    };

    // The facts of `name`, which must live until the next call.
    Facts& of(const std::string& name) {
        auto it = facts_.find(name);
        if (it == facts_.end()) {
            if (facts_.size() >= kMaxNames) {
                // Names that never repeat (ids in annotations): no use keeping them.
                uncached_ = Facts{};
                uncached_.name_ = name;
                return uncached_;
            }
            it = facts_.emplace(name, Facts{}).first;
        }
        it->second.name_ = it->first;
        return it->second;
    }

private:
    static constexpr std::size_t kMaxNames = 1u << 16;
    std::unordered_map<std::string, Facts> facts_;
    Facts uncached_;
};

// A pid or tid: a number, or a string mapped to a stable negative id.
struct IdMap {
    std::unordered_map<std::string, std::int64_t> strings;
    std::int64_t of(std::string_view raw) {
        std::int64_t value = 0;
        if (kineto::json_int(raw, value))
            return value;
        std::string text;
        if (!kineto::json_string(raw, text))
            text = std::string(raw);
        if (kineto::json_int(text, value))
            return value;
        auto [it, added] = strings.emplace(text, -1000 - static_cast<std::int64_t>(strings.size()));
        return it->second;
    }
};

// The fields of one trace event that the importer uses; views into the stream's buffer.
struct RawEvent {
    std::string_view ph, cat, ts, dur, pid, tid, args, id;
    std::string name;
    // The members of args, parsed on first use: the lane and the mapping both read them.
    mutable bool args_parsed = false, args_ok = false;
    mutable std::vector<std::pair<std::string_view, std::string_view>> arg_members;
    mutable std::deque<std::string> escaped_keys;  // keys that had escapes, decoded

    // Empties it for the next event, keeping the capacity.
    void clear() {
        ph = cat = ts = dur = pid = tid = args = id = {};
        name.clear();
        args_parsed = args_ok = false;
        arg_members.clear();
        escaped_keys.clear();
    }
};

bool parse_event(std::string_view raw, RawEvent& e) {
    JsonCursor cursor(raw);
    if (!cursor.begin_object())
        return false;
    std::string_view key, value;
    bool ok = false;
    while (cursor.next_member(key, value, ok)) {
        // By length first: one comparison per member instead of up to nine.
        switch (key.size()) {
            case 2:
                if (key == "ph")
                    e.ph = value;
                else if (key == "ts")
                    e.ts = value;
                else if (key == "id")
                    e.id = value;
                break;
            case 3:
                if (key == "pid")
                    e.pid = value;
                else if (key == "cat")
                    e.cat = value;
                else if (key == "tid")
                    e.tid = value;
                else if (key == "dur")
                    e.dur = value;
                break;
            case 4:
                if (key == "name")
                    kineto::json_string(value, e.name);
                else if (key == "args")
                    e.args = value;
                break;
            default:
                break;
        }
    }
    if (!ok || !cursor.done())
        return false;
    // ph and cat are short strings without escapes: strip the quotes.
    auto unquote = [](std::string_view& v) {
        if (v.size() >= 2 && v.front() == '"' && v.back() == '"')
            v = v.substr(1, v.size() - 2);
    };
    unquote(e.ph);
    unquote(e.cat);
    return true;
}

// Calls member(key, raw) for each member of the object `raw`; false when it is not one.
template <typename Member>
bool for_each_member(std::string_view raw, Member&& member) {
    JsonCursor cursor(raw);
    if (!cursor.begin_object())
        return false;
    std::string_view key, value;
    bool ok = false;
    while (cursor.next_member(key, value, ok))
        member(key, value);
    return ok;
}

// for_each_member over the event's args, which are parsed once for all the callers.
template <typename Member>
bool for_each_arg(const RawEvent& e, Member&& member) {
    if (!e.args_parsed) {
        e.args_parsed = true;
        const char* first = e.args.data();
        const char* last = first + e.args.size();
        e.args_ok = for_each_member(e.args, [&](std::string_view k, std::string_view v) {
            if (k.data() < first || k.data() >= last)
                k = e.escaped_keys.emplace_back(k);  // the cursor's scratch: keep a copy
            e.arg_members.emplace_back(k, v);
        });
    }
    for (const auto& [k, v] : e.arg_members)
        member(k, v);
    return e.args_ok;
}

// "ProfilerStep#12" -> 12.
bool profiler_step(std::string_view name, std::int32_t& step) {
    constexpr std::string_view prefix = "ProfilerStep#";
    if (name.substr(0, prefix.size()) != prefix)
        return false;
    std::int64_t value = 0;
    if (!kineto::json_int(name.substr(prefix.size()), value) || value < 0 || value > INT32_MAX)
        return false;
    step = static_cast<std::int32_t>(value);
    return true;
}

// Where an event category runs. Kineto puts device work on pid = device, tid = stream.
enum class Where { host, device };

// Categories Kineto writes for device work: CUDA and ROCm ("kernel", "gpu_*", "cuda_sync",
// "cuda_profiler_range"), older Chrome exports ("Kernel", "Memcpy", "Memset") and MTIA's
// command processor ("mtia_ccp_events").
bool is_device_cat(std::string_view cat) {
    static constexpr std::string_view device[] = {
        "kernel",    "gpu_memcpy",          "gpu_memset", "gpu_user_annotation",
        "cuda_sync", "cuda_profiler_range", "Kernel",     "Memcpy",
        "Memset",    "mtia_ccp_events"};
    return std::find(std::begin(device), std::end(device), cat) != std::end(device);
}

bool is_known_host_cat(std::string_view cat) {
    static constexpr std::string_view known[] = {"cpu_op",
                                                 "user_annotation",
                                                 "cuda_runtime",
                                                 "cuda_driver",
                                                 "python_function",
                                                 "cpu_instant_event",
                                                 "Trace",
                                                 "fwdbwd",
                                                 "ac2g",
                                                 "overhead",
                                                 "Runtime",
                                                 "Operator",
                                                 "privateuse1_runtime",
                                                 "privateuse1_driver",
                                                 "mtia_runtime",
                                                 "xpu_runtime",
                                                 "xpu_driver",
                                                 "gpu_mem_alloc",
                                                 ""};
    return std::find(std::begin(known), std::end(known), cat) != std::end(known);
}

bool is_runtime_cat(std::string_view cat) {
    return cat == "cuda_runtime" || cat == "cuda_driver" || cat == "Runtime" ||
           cat == "privateuse1_runtime" || cat == "privateuse1_driver" || cat == "mtia_runtime" ||
           cat == "xpu_runtime" || cat == "xpu_driver";
}

struct StepWindow {
    std::int64_t start, end;
    std::int32_t step;
};

// A lane of Fulcrum's own export (the `fulcrum` member): its (pid, tid) in the file and what
// it was in the run.
struct ExportedLane {
    std::int64_t pid = 0, tid = 0;
    std::int32_t rank = 0;
    LaneKind kind = LaneKind::host_thread;
    std::string name;
    std::int64_t native_id = -1;
};

// What Fulcrum's Chrome export (core/export/chrome_trace.h) adds so that a re-import gives
// back the same run: the ranks with their coordinates, every lane, the run's configuration
// and its workload.
struct FulcrumExport {
    bool present = false;
    std::string config_json;
    std::vector<RankInfo> ranks;
    std::vector<ExportedLane> lanes;  // in the run's lane order
    std::map<std::pair<std::int64_t, std::int64_t>, std::size_t> lane_at;  // (pid, tid) -> lanes[i]
    std::vector<WorkloadEntry> workload;
};

std::int64_t int_member(const nlohmann::json& object, const char* key, std::int64_t fallback) {
    auto at = object.find(key);
    return at != object.end() && at->is_number_integer() ? at->get<std::int64_t>() : fallback;
}

std::string string_member(const nlohmann::json& object, const char* key) {
    auto at = object.find(key);
    return at != object.end() && at->is_string() ? at->get<std::string>() : std::string();
}

// Reads the `fulcrum` member; false when it is there but not what the exporter writes.
bool read_fulcrum_export(std::string_view raw, FulcrumExport& out) {
    const nlohmann::json root = nlohmann::json::parse(raw, nullptr, false);
    if (!root.is_object() || int_member(root, "format", 0) != 1)
        return false;
    out.present = true;
    if (auto config = root.find("config"); config != root.end() && config->is_object()) {
        out.config_json = config->dump();
    }
    if (auto ranks = root.find("ranks"); ranks != root.end() && ranks->is_array()) {
        for (const auto& r : *ranks) {
            if (!r.is_object())
                continue;
            RankInfo rank;
            rank.rank = static_cast<std::int32_t>(int_member(r, "rank", 0));
            rank.host = string_member(r, "host");
            rank.pid = int_member(r, "pid", 0);
            rank.device = static_cast<std::int32_t>(int_member(r, "device", -1));
            rank.dp = static_cast<std::int32_t>(int_member(r, "dp", -1));
            rank.pp = static_cast<std::int32_t>(int_member(r, "pp", -1));
            rank.cp = static_cast<std::int32_t>(int_member(r, "cp", -1));
            rank.tp = static_cast<std::int32_t>(int_member(r, "tp", -1));
            rank.dropped_records = int_member(r, "dropped_records", 0);
            out.ranks.push_back(rank);
        }
    }
    if (auto lanes = root.find("lanes"); lanes != root.end() && lanes->is_array()) {
        for (const auto& l : *lanes) {
            if (!l.is_object())
                continue;
            ExportedLane lane;
            lane.rank = static_cast<std::int32_t>(int_member(l, "rank", 0));
            lane.kind = string_member(l, "kind") == to_string(LaneKind::gpu_stream)
                            ? LaneKind::gpu_stream
                            : LaneKind::host_thread;
            lane.name = string_member(l, "name");
            lane.native_id = int_member(l, "native_id", -1);
            lane.pid = int_member(l, "pid", 0);
            lane.tid = int_member(l, "tid", 0);
            if (out.lane_at.emplace(std::pair{lane.pid, lane.tid}, out.lanes.size()).second) {
                out.lanes.push_back(std::move(lane));
            }
        }
    }
    if (auto workload = root.find("workload"); workload != root.end() && workload->is_array()) {
        for (const auto& w : *workload) {
            if (!w.is_array() || w.size() != 8 || !w[7].is_string())
                continue;
            bool numbers = true;
            for (std::size_t i = 0; i < 7; ++i)
                numbers = numbers && w[i].is_number_integer();
            if (!numbers)
                continue;
            out.workload.push_back({w[0].get<std::int32_t>(), w[1].get<std::int32_t>(),
                                    w[2].get<std::int32_t>(), w[3].get<std::int64_t>(),
                                    w[4].get<std::int32_t>(), w[5].get<std::int32_t>(),
                                    w[6].get<std::int32_t>(), w[7].get<std::string>()});
        }
    }
    return true;
}

// The top-level members and the step windows (pass 1).
struct TopLevel {
    bool has_rank = false;
    std::int32_t rank = 0;
    std::int32_t world_size = -1;
    std::string backend;
    bool has_base = false;
    std::int64_t base_ns = 0;
    std::set<std::int64_t> devices;  // ids listed in deviceProperties
    // Processes by Kineto's `process_labels` metadata: "CPU" for the host, "GPU 0", "MTIA 17"
    // and the like for devices.
    std::set<std::int64_t> labelled_host, labelled_device;
    std::vector<StepWindow> steps;
    FulcrumExport fulcrum;
    bool fulcrum_damaged = false;
    std::string distributed_info;  // the member's text, for its process groups
};

void read_top_member(std::string_view key, std::string_view value, TopLevel& top) {
    if (key == "distributedInfo") {
        top.distributed_info = value;
        for_each_member(value, [&](std::string_view k, std::string_view v) {
            std::int64_t n = 0;
            if (k == "rank" && kineto::json_int(v, n) && n >= 0 && n < INT32_MAX) {
                top.has_rank = true;
                top.rank = static_cast<std::int32_t>(n);
            } else if (k == "world_size" && kineto::json_int(v, n) && n > 0 && n < INT32_MAX) {
                top.world_size = static_cast<std::int32_t>(n);
            } else if (k == "backend") {
                kineto::json_string(v, top.backend);
            }
        });
    } else if (key == "baseTimeNanoseconds") {
        std::int64_t n = 0;
        if (kineto::json_int(value, n)) {
            top.has_base = true;
            top.base_ns = n;
        }
    } else if (key == "deviceProperties") {
        JsonCursor cursor(value);
        if (!cursor.eat('['))
            return;
        std::string_view element;
        while (cursor.value(element)) {
            for_each_member(element, [&](std::string_view k, std::string_view v) {
                std::int64_t n = 0;
                if (k == "id" && kineto::json_int(v, n) && n >= 0 && n < (1 << 20))
                    top.devices.insert(n);
            });
            if (!cursor.eat(','))
                break;
        }
    } else if (key == "fulcrum") {
        top.fulcrum_damaged = !read_fulcrum_export(value, top.fulcrum);
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
            if (!stream.next_value(raw))
                return false;
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
    if (first != '{')
        return false;
    stream.advance();
    bool any = false;
    for (;;) {
        int c = stream.peek();
        if (c == '}')
            return true;
        std::string_view raw;
        std::string key;
        if (c != '"' || !stream.next_value(raw) || !kineto::json_string(raw, key) ||
            stream.peek() != ':') {
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

bool open_stream(JsonStream& stream, const ImportInput& input) {
    return input.bytes != nullptr ? stream.open_memory(*input.bytes) : stream.open(input.path);
}

// One import (both passes) of one input into one sink.
class KinetoImport {
public:
    KinetoImport(const ImportInput& input, TraceSink& sink, const ImportFileOptions& options)
        : input_(input),
          sink_(sink),
          options_(options),
          log_(sink, std::filesystem::path(input.path).filename().string()) {}

    Status run() {
        std::error_code ec;
        input_size_ = input_.bytes != nullptr
                          ? static_cast<double>(input_.bytes->size())
                          : static_cast<double>(std::filesystem::file_size(input_.path, ec));
        if (ec)
            return Error{ErrorCode::io, "cannot read '" + input_.path + "': " + ec.message()};
        input_size_ = std::max(input_size_, 1.0);
        if (auto status = scan(); !status)
            return status;
        add_ranks();
        if (auto status = import_events(); !status)
            return status;
        finish();
        return {};
    }

private:
    void progress(double fraction) {
        if (options_.progress)
            options_.progress(std::clamp(fraction, 0.0, 1.0));
    }

    Status not_json(const JsonStream& stream) const {
        return Error{
            ErrorCode::invalid_input,
            "'" + input_.path +
                "' is not Chrome trace JSON (it should start with {\"traceEvents\": [ or [{)" +
                (stream.problem().empty() ? "" : ": " + stream.problem())};
    }

    // Pass 1: the top-level members, wherever they stand, and the host ProfilerStep windows.
    Status scan() {
        JsonStream stream;
        if (!open_stream(stream, input_))
            return Error{ErrorCode::io, "cannot open '" + input_.path + "'"};
        bool truncated = false, cancelled = false;
        std::int64_t last_report = 0, seen = 0;
        RawEvent e;
        const bool readable = walk(
            stream,
            [&](std::string_view key, std::string_view raw) { read_top_member(key, raw, top_); },
            [&](std::string_view raw, std::int64_t) {
                if ((++seen & 1023) == 0 && stream.file_offset() - last_report > (8 << 20)) {
                    last_report = stream.file_offset();
                    progress(0.25 * double(last_report) / input_size_);
                }
                // The words pass 1 looks for are in the name: looked for there alone when
                // the name is found cheaply, else in the whole event.
                const std::string_view text = kineto::leading_name(raw).value_or(raw);
                const bool labels = kineto::contains(text, "process_labels");
                const bool structural = might_be_structure(text);
                if (!labels && !structural && !kineto::contains(text, "ProfilerStep#"))
                    return;
                e = RawEvent{};
                if (!parse_event(raw, e))
                    return;
                if (labels && e.ph == "M" && e.name == "process_labels") {
                    read_process_label(e);
                    return;
                }
                if (e.ph != "X" || is_device_cat(e.cat))
                    return;
                if (structural)
                    collect_structure(e);
                std::int32_t step = 0;
                std::int64_t ts = 0, dur = 0;
                if (profiler_step(e.name, step) && kineto::json_us_to_ns(e.ts, ts) &&
                    kineto::json_us_to_ns(e.dur, dur) && dur >= 0) {
                    top_.steps.push_back({ts, ts + dur, step});
                    step_thread_ = {ids_.of(e.pid), ids_.of(e.tid)};
                }
            },
            truncated, options_.cancel, cancelled);
        if (cancelled)
            return Error{ErrorCode::cancelled, "import cancelled"};
        if (!readable)
            return not_json(stream);
        std::sort(top_.steps.begin(), top_.steps.end(),
                  [](const StepWindow& a, const StepWindow& b) { return a.start < b.start; });
        recover_structure(truncated);
        return {};
    }

    // Structure recovery (structure.h): what a host event of pass 1 tells about the pipeline.
    // The data-parallel wrappers' forward labels (DDP's and FSDP's record_function ranges)
    // mark where a forward starts: between two backwards of gradient accumulation they are
    // what tells the second micro-batch from the first (structure.h).
    static bool might_be_structure(std::string_view raw) {
        return kineto::contains(raw, "c10d::") || kineto::contains(raw, "autograd::engine") ||
               kineto::contains(raw, "gloo:recv") || kineto::contains(raw, "Optimizer.") ||
               kineto::contains(raw, "\"PP:") || kineto::contains(raw, "\"Forward ") ||
               kineto::contains(raw, "\"Backward ") ||
               (kineto::contains(raw, "forward") &&  // one scan of most events, not three
                (kineto::contains(raw, "DataParallel.forward") ||
                 kineto::contains(raw, "FSDP::pre_forward") ||
                 kineto::contains(raw, "FSDP::root_pre_forward")));
    }

    void collect_structure(const RawEvent& e) {
        if (e.cat != "cpu_op" && e.cat != "user_annotation")
            return;
        if (const auto action = structure::parse_pipeline_action(e.name)) {
            has_pipeline_labels_ = true;
            using Kind = structure::PipelineAction::Kind;
            gpipe_labels_ |= action->stage_index < 0;
            split_backward_ |=
                action->kind == Kind::backward_input || action->kind == Kind::backward_weight;
            max_stage_index_ = std::max(max_stage_index_, action->stage_index);
            if (action->stage_index >= 0)
                stage_indices_.insert(action->stage_index);
            max_microbatch_ = std::max(max_microbatch_, action->microbatch);
            return;
        }
        std::int64_t ts = 0, dur = 0;
        if (!kineto::json_us_to_ns(e.ts, ts) || !kineto::json_us_to_ns(e.dur, dur) || dur < 0)
            return;
        if (e.name == "gloo:recv") {
            // A receive's request: from inside its c10d::recv_ to the end of the wait on it.
            if (e.cat == "user_annotation")
                gloo_recvs_.push_back({ids_.of(e.pid), ids_.of(e.tid), {ts, ts + dur}});
            return;
        }
        structure::HostOp op;
        op.start_ns = ts;
        op.end_ns = ts + dur;
        op.kind = structure::host_op_kind(e.name);
        if (op.kind == structure::HostOp::Kind::send || op.kind == structure::HostOp::Kind::recv) {
            // c10d::send(tensors, group, dstRank, tag), recv_(…, srcRank, tag): the peer's rank
            // within the group.
            for_each_arg(e, [&](std::string_view k, std::string_view v) {
                if (k != "Concrete Inputs")
                    return;
                const auto inputs = nlohmann::json::parse(v, nullptr, false);
                if (inputs.is_array() && inputs.size() > 2 && inputs[2].is_string()) {
                    const std::string text = inputs[2].get<std::string>();
                    std::int32_t peer = -1;
                    const auto [end, ec] =
                        std::from_chars(text.data(), text.data() + text.size(), peer);
                    if (ec == std::errc{} && end == text.data() + text.size())
                        op.peer = peer;
                }
            });
            ++sends_by_thread_[{ids_.of(e.pid), ids_.of(e.tid)}];
        }
        const std::pair thread{ids_.of(e.pid), ids_.of(e.tid)};
        if (op.kind == structure::HostOp::Kind::autograd)
            ++autograd_by_thread_[thread];
        if (op.kind == structure::HostOp::Kind::optimizer && e.name.starts_with("Optimizer.step"))
            optimizer_steps_[thread].push_back({op.start_ns, op.end_ns});
        // A thread's consecutive autograd operators are one run of backward work: kept as one,
        // so memory follows the passes, not the operators. Consecutive in the process, and
        // close in time: an operator of another thread in between (the Python thread's send
        // while the autograd thread runs the backwards of a 1F1B stage) ends the run, and so
        // does a gap of more than kJoinedAutogradGapNs, because a file written thread by
        // thread (the GPU profiler's: the autograd thread's operators in one block) has every
        // backward of the trace consecutive; the forwards between them, on another thread,
        // are told from that thread's operators (recover_structure).
        auto [last, added] = last_op_of_process_.try_emplace(thread.first, host_ops_.size());
        if (!added && op.kind == structure::HostOp::Kind::autograd) {
            ThreadOp& previous = host_ops_[last->second];
            if (previous.tid == thread.second &&
                previous.op.kind == structure::HostOp::Kind::autograd &&
                op.start_ns >= previous.op.start_ns &&
                op.start_ns <= previous.op.end_ns + kJoinedAutogradGapNs) {
                previous.op.end_ns = std::max(previous.op.end_ns, op.end_ns);
                return;
            }
        }
        last->second = host_ops_.size();
        host_ops_.push_back({thread.first, thread.second, op});
    }

    // The grid from the process groups, and, where the schedule wrote no labels, the passes
    // step by step (structure.h): a pipeline stage's from the thread that sent and received
    // the most; a rank without a pipeline (pp 1: DP, TP, FSDP) from the thread that ran the
    // steps (ProfilerStep#), else the one that ran the most autograd work, each backward one
    // micro-batch and the work before it its forward. The autograd work of the process's
    // other threads joins that thread's: on a GPU the autograd engine runs the backward on a
    // thread of its own per device while the Python thread waits in loss.backward().
    // `truncated`: pass 1 stopped before the end of the JSON.
    void recover_structure(bool truncated) {
        if (top_.fulcrum.present)
            return;  // Fulcrum's own export says it all
        infer_steps();
        const std::int32_t rank = top_.has_rank ? top_.rank : options_.input_index;
        grid_ = structure::recover_grid(rank, top_.world_size,
                                        structure::parse_process_groups(top_.distributed_info),
                                        !sends_by_thread_.empty());
        if (!grid_.found || has_pipeline_labels_)
            return;
        const bool pipeline = grid_.grid.pp > 1;
        const auto& by_thread = pipeline ? sends_by_thread_ : autograd_by_thread_;
        if (by_thread.empty())
            return;
        const auto busiest =
            std::max_element(by_thread.begin(), by_thread.end(),
                             [](const auto& a, const auto& b) { return a.second < b.second; });
        schedule_thread_ = busiest->first;
        if (!pipeline && step_thread_.first == schedule_thread_.first)
            schedule_thread_ = step_thread_;
        const int stage = grid_.coordinates.pp, stages = grid_.grid.pp;
        const std::int32_t prev = pipeline && stage > 0 ? stage - 1 : -1;
        const std::int32_t next = pipeline && stage + 1 < stages ? stage + 1 : -1;
        std::vector<StepWindow> windows = top_.steps;
        if (windows.empty())
            windows.push_back({INT64_MIN, INT64_MAX, 0});
        const auto ops_in = [&](const StepWindow& window) {
            std::vector<structure::HostOp> ops;
            for (const ThreadOp& op : host_ops_) {
                const bool own = std::pair{op.pid, op.tid} == schedule_thread_ ||
                                 (op.pid == schedule_thread_.first &&
                                  op.op.kind == structure::HostOp::Kind::autograd);
                if (own && op.op.start_ns >= window.start && op.op.start_ns < window.end)
                    ops.push_back(op.op);
            }
            return ops;
        };
        // Without a pipeline, backward work on a thread of its own (PyTorch's autograd thread
        // for a GPU) is one run after another with nothing between them in the operators kept:
        // the forwards run on the schedule thread, whose operators are not kept. A run of
        // autograd work ends where the schedule thread starts an operator (one more reading
        // of the file, for such a trace only).
        static const std::vector<std::int64_t> kNone;
        const std::vector<std::int64_t>& schedule_starts =
            !pipeline && std::any_of(host_ops_.begin(), host_ops_.end(),
                                     [&](const ThreadOp& op) {
                                         return op.op.kind == structure::HostOp::Kind::autograd &&
                                                std::pair{op.pid, op.tid} != schedule_thread_;
                                     })
                ? thread_starts(schedule_thread_)
                : kNone;
        const auto split_backwards = [&](std::vector<structure::HostOp> ops) {
            if (schedule_starts.empty())
                return ops;
            std::vector<structure::HostOp> autograd;
            for (const structure::HostOp& op : ops) {
                if (op.kind == structure::HostOp::Kind::autograd)
                    autograd.push_back(op);
            }
            std::sort(autograd.begin(), autograd.end(),
                      [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
            for (std::size_t i = 1; i < autograd.size(); ++i) {
                const std::int64_t from = autograd[i - 1].end_ns, to = autograd[i].start_ns;
                const auto between =
                    std::lower_bound(schedule_starts.begin(), schedule_starts.end(), from);
                if (from < to && between != schedule_starts.end() && *between < to)
                    ops.push_back({from, to, structure::HostOp::Kind::compute, -1});
            }
            return ops;
        };
        std::vector<structure::StepPasses> steps;
        bool any_inconsistent = false;
        std::vector<std::pair<std::int64_t, std::int64_t>> requests;  // the thread's, by start
        for (const ThreadRequest& request : gloo_recvs_) {
            if (std::pair{request.pid, request.tid} == schedule_thread_)
                requests.push_back(request.span);
        }
        std::sort(requests.begin(), requests.end());
        // A file cut short stops inside its last step, whose passes are partly missing: it is
        // left without passes as cut, not taken for another schedule's order.
        const std::size_t cut = truncated ? windows.size() - 1 : windows.size();
        for (const StepWindow& window : windows) {
            steps.push_back(structure::passes_from_sends(split_backwards(ops_in(window)), prev,
                                                         next, window.start));
            any_inconsistent |= !steps.back().consistent && steps.size() - 1 != cut;
            if (steps.back().consistent)
                waited_receives_ += structure::wait_for_receives(steps.back(), requests);
        }
        // Not GPipe's or 1F1B's order: an interleaved stage's, told by its order, which needs
        // the thread's every operator (one more reading of the file, for such a trace only).
        if (pipeline && any_inconsistent) {
            const std::vector<std::int64_t>& starts = thread_starts(schedule_thread_);
            for (std::size_t i = 0; i < windows.size(); ++i) {
                if (steps[i].consistent || i == cut)
                    continue;
                structure::InterleavedPasses interleaved = structure::interleaved_passes(
                    ops_in(windows[i]), starts, stage, stages, windows[i].start);
                if (!interleaved.found)
                    continue;
                steps[i].ranges = std::move(interleaved.ranges);
                steps[i].consistent = true;
                interleaved_chunks_ = std::max(interleaved_chunks_, interleaved.chunks);
                max_stage_index_ =
                    std::max(max_stage_index_, (interleaved.chunks - 1) * stages + stage);
                ++interleaved_steps_;
            }
        }
        for (std::size_t i = 0; i < windows.size(); ++i) {
            const structure::StepPasses& passes = steps[i];
            if (!passes.consistent) {
                ++(i == cut ? cut_steps_ : inconsistent_steps_);
                continue;
            }
            std::int64_t last_forward = INT64_MIN, first_backward = INT64_MAX;
            for (const structure::RecoveredRange& range : passes.ranges) {
                if (range.kind == structure::PipelineAction::Kind::forward)
                    last_forward = std::max(last_forward, range.start_ns);
                if (range.kind == structure::PipelineAction::Kind::backward)
                    first_backward = std::min(first_backward, range.start_ns);
                max_microbatch_ = std::max(max_microbatch_, range.microbatch);
            }
            // GPipe runs every forward before the first backward; 1F1B does not (with more
            // than one micro-batch).
            one_f_one_b_ |= passes.forwards > 1 && first_backward < last_forward;
            for (const structure::RecoveredRange& range : passes.ranges) {
                recovered_.push_back({range, windows[i].step});
                if (structure::action_is_communication(range.kind)) {
                    recovered_comm_[{schedule_thread_.first, schedule_thread_.second,
                                     range.start_ns}] = range;
                }
            }
        }
        host_ops_.clear();
        host_ops_.shrink_to_fit();
        gloo_recvs_.clear();
        gloo_recvs_.shrink_to_fit();
        thread_starts_ = {};
        starts_thread_.reset();
    }

    // operator_starts of `thread`, read once for the last thread asked.
    const std::vector<std::int64_t>& thread_starts(std::pair<std::int64_t, std::int64_t> thread) {
        if (!starts_thread_ || *starts_thread_ != thread) {
            thread_starts_ = operator_starts(thread);
            starts_thread_ = thread;
        }
        return thread_starts_;
    }

    // The start of every cpu_op `thread` ran, sorted (interleaved_passes counts them):
    // one more reading of the file, keeping 8 bytes an operator of the one thread.
    std::vector<std::int64_t> operator_starts(std::pair<std::int64_t, std::int64_t> thread) {
        std::vector<std::int64_t> starts;
        JsonStream stream;
        if (!open_stream(stream, input_))
            return starts;
        bool truncated = false, cancelled = false;
        RawEvent e;
        walk(
            stream, [](std::string_view, std::string_view) {},
            [&](std::string_view raw, std::int64_t) {
                if (!kineto::contains(raw, "cpu_op"))
                    return;
                e.clear();
                std::int64_t ts = 0;
                if (!parse_event(raw, e) || e.ph != "X" || e.cat != "cpu_op" ||
                    !kineto::json_us_to_ns(e.ts, ts))
                    return;
                if (std::pair{ids_.of(e.pid), ids_.of(e.tid)} == thread)
                    starts.push_back(ts);
            },
            truncated, options_.cancel, cancelled);
        std::sort(starts.begin(), starts.end());
        return starts;
    }

    // The rank rows: the export's own, else the one rank of distributedInfo (else the
    // input's position among the files).
    void add_ranks() {
        const std::int64_t utc_offset = top_.has_base ? top_.base_ns : 0;
        if (top_.fulcrum.present && !top_.fulcrum.ranks.empty()) {
            for (RankInfo rank : top_.fulcrum.ranks) {
                rank.utc_offset_ns = utc_offset;
                rank.alignment = ClockAlignment::utc_offset;
                ranks_.push_back(rank);
            }
        } else {
            RankInfo rank;
            rank.rank = top_.has_rank ? top_.rank : options_.input_index;
            rank.utc_offset_ns = utc_offset;
            rank.alignment = ClockAlignment::utc_offset;
            if (grid_.found) {
                rank.dp = grid_.coordinates.dp;
                rank.tp = grid_.coordinates.tp;
                rank.pp = grid_.coordinates.pp;
                rank.cp = grid_.coordinates.cp;
            }
            ranks_.push_back(rank);
        }
        for (const RankInfo& rank : ranks_)
            sink_.add_rank(rank);
        // Every lane of the export, in the run's order, even those without events.
        for (const ExportedLane& lane : top_.fulcrum.lanes) {
            exported_lanes_[{lane.pid, lane.tid}] =
                sink_.add_lane(lane.rank, lane.kind, lane.name, lane.native_id);
        }

        std::string config = "{\"source\":\"kineto\"";
        if (!top_.backend.empty()) {
            std::string safe;
            for (char c : top_.backend) {
                if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')
                    safe += c;
            }
            // distributedInfo's backend is the communication library (nccl, gloo); the run
            // config's `backend` is the compute backend, so it goes under `comm`, as
            // fulcrum-train records its communicator.
            config += ",\"comm\":\"" + safe + "\"";
        }
        if (top_.world_size > 0)
            config += ",\"world_size\":" + std::to_string(top_.world_size);
        if (grid_.found) {
            const structure::Degrees& grid = grid_.grid;
            config += ",\"dp\":" + std::to_string(grid.dp) + ",\"tp\":" + std::to_string(grid.tp) +
                      ",\"pp\":" + std::to_string(grid.pp) + ",\"cp\":" + std::to_string(grid.cp);
            if (const std::string schedule = recovered_schedule(); !schedule.empty()) {
                config += ",\"schedule\":\"" + schedule + "\"";
                if (schedule == "interleaved")
                    config +=
                        ",\"virtual_stages\":" + std::to_string(max_stage_index_ / grid.pp + 1);
            }
            if (max_microbatch_ >= 0)
                config += ",\"microbatches\":" + std::to_string(max_microbatch_ + 1);
        }
        config += "}";
        sink_.set_run_config(top_.fulcrum.present && !top_.fulcrum.config_json.empty()
                                 ? top_.fulcrum.config_json
                                 : config);
        for (const WorkloadEntry& entry : top_.fulcrum.workload)
            sink_.add_workload(entry);

        if (!top_.has_base) {
            log_.note(
                "no baseTimeNanoseconds: this rank's timestamps are taken as they are "
                "(offset 0), so its alignment with other ranks is unknown");
        }
        if (!top_.has_rank && !top_.fulcrum.present) {
            log_.note("no distributedInfo.rank: rank " + std::to_string(ranks_.front().rank) +
                      " from the input's position among the files");
        }
        if (top_.fulcrum_damaged) {
            log_.note(
                "the `fulcrum` member is not one this version wrote; read as a plain "
                "Kineto trace");
        }
        note_structure();
    }

    // Which structure rules fired, and how sure each is (docs/import.md).
    void note_structure() {
        if (top_.fulcrum.present)
            return;
        if (inferred_steps_) {
            log_.note("structure: no ProfilerStep# ranges (the profiler was not stepped): " +
                      std::to_string(top_.steps.size()) +
                      " steps from the optimizer's (Optimizer.step#), each ending with one; "
                      "inferred");
        }
        if (!grid_.found) {
            log_.note(
                "structure: no 4D grid: no process group named as a parallel dimension "
                "(torch DeviceMesh mesh_*, Megatron-LM *_PARALLEL_GROUP) and no pipeline sends; "
                "stages, micro-batches and bubbles are not derived");
            return;
        }
        const structure::Degrees& g = grid_.grid;
        const structure::Coordinates& at = grid_.coordinates;
        log_.note("structure: grid dp" + std::to_string(g.dp) + " tp" + std::to_string(g.tp) +
                  " pp" + std::to_string(g.pp) + " cp" + std::to_string(g.cp) +
                  ", this rank at dp " + std::to_string(at.dp) + " tp " + std::to_string(at.tp) +
                  " pp " + std::to_string(at.pp) + " cp " + std::to_string(at.cp) + ", from " +
                  grid_.rule);
        if (g.pp < 2) {
            if (!recovered_.empty() || inconsistent_steps_ > 0) {
                log_.note("structure: " + std::to_string(recovered_.size()) +
                          " passes from the autograd work (no pipeline: each run of autograd "
                          "work a backward, the work before it back to the step's start or "
                          "the last backward its forward, micro-batches numbered in order; "
                          "inferred)" +
                          inconsistent_note());
            }
            return;
        }
        if (has_pipeline_labels_) {
            log_.note(
                "structure: passes and hand-overs from torch.distributed.pipelining's action "
                "labels (PP:<stage><action><micro-batch>, or ScheduleGPipe's Forward N / "
                "Backward N): exact");
            if (split_backward_ && recovered_schedule().empty()) {
                log_.note(std::string("structure: a zero-bubble schedule over ") +
                          std::to_string(stage_indices_.size()) + " model chunks a stage (" +
                          (v_placement() ? "V placement, as ScheduleZBVZeroBubble's"
                                         : "loop placement, as ScheduleInterleavedZeroBubble's") +
                          "); Fulcrum's schedules have ZB-H1 only (one chunk a stage), so the "
                          "run's schedule is left unset and the bubble theory is not drawn");
            }
        } else if (interleaved_steps_ > 0) {
            log_.note("structure: " + std::to_string(recovered_.size()) +
                      " passes of an interleaved schedule of " +
                      std::to_string(interleaved_chunks_) +
                      " model chunks a stage, from the autograd work and the runs of "
                      "operators between the pipeline sends, in the order of Megatron-LM's "
                      "and torch's interleaved 1F1B (the schedule wrote no labels: the chunks "
                      "from the forwards before the first backward; the sends and receives "
                      "are not told apart, being posted ahead; inferred)" +
                      inconsistent_note());
        } else if (!recovered_.empty() || inconsistent_steps_ > 0 || cut_steps_ > 0) {
            std::int64_t passes = 0;
            for (const RecoveredStepRange& r : recovered_)
                passes += !structure::action_is_communication(r.range.kind);
            log_.note("structure: " + std::to_string(passes) +
                      " passes from the pipeline sends and the autograd work between them (the "
                      "schedule wrote no labels: GPipe or 1F1B order assumed, micro-batches "
                      "numbered in the order the stage ran them; inferred)" +
                      inconsistent_note());
            if (waited_receives_ > 0) {
                log_.note("structure: " + std::to_string(waited_receives_) +
                          " receives last until their gloo request's wait returns, and the pass "
                          "each feeds starts with it: the wait is the pass's pipeline wait");
            }
        } else {
            log_.note(
                "structure: a pipeline stage, but no labels and no sends to its neighbours "
                "on one thread: its passes are not derived");
        }
    }

    // A trace of a profiler that was never stepped has no ProfilerStep#N: its steps are then
    // the optimizer's (`Optimizer.step#…`, one a training step) on the thread that ran the
    // most, each from the end of the one before (the first from that thread's first operator
    // of pass 1) to its own end, numbered from 1; what follows the last is in none.
    void infer_steps() {
        if (!top_.steps.empty() || optimizer_steps_.empty())
            return;
        const auto busiest = std::max_element(
            optimizer_steps_.begin(), optimizer_steps_.end(),
            [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
        std::vector<std::pair<std::int64_t, std::int64_t>> updates = busiest->second;
        std::sort(updates.begin(), updates.end());
        std::int64_t start = updates.front().first;
        for (const ThreadOp& op : host_ops_) {
            if (std::pair{op.pid, op.tid} == busiest->first)
                start = std::min(start, op.op.start_ns);
        }
        // Nothing of the thread kept before its first update (its backwards ran on the
        // autograd thread, its forwards are no structure): its first operator of any kind.
        if (start == updates.front().first) {
            const std::vector<std::int64_t>& starts = thread_starts(busiest->first);
            if (!starts.empty())
                start = std::min(start, starts.front());
        }
        std::int32_t step = 1;
        for (const auto& [update_start, update_end] : updates) {
            if (update_end <= start)
                continue;  // inside the step before (a malformed or nested record)
            top_.steps.push_back({start, update_end, step++});
            start = update_end;
        }
        if (top_.steps.empty())
            return;
        step_thread_ = busiest->first;
        inferred_steps_ = true;
    }

    std::string inconsistent_note() const {
        std::string note;
        if (inconsistent_steps_ > 0)
            note += "; " + std::to_string(inconsistent_steps_) +
                    " step(s) left without passes: their forward and backward counts differ";
        if (cut_steps_ > 0)
            note += "; the last step left without passes: the file ends inside it";
        return note;
    }

    std::int32_t step_at(std::int64_t t) const {
        auto it = std::upper_bound(top_.steps.begin(), top_.steps.end(), t,
                                   [](std::int64_t v, const StepWindow& w) { return v < w.start; });
        if (it == top_.steps.begin())
            return -1;
        --it;
        return t < it->end ? it->step : -1;
    }

    void read_process_label(const RawEvent& e) {
        const std::int64_t pid = ids_.of(e.pid.empty() ? std::string_view("0") : e.pid);
        for_each_member(e.args, [&](std::string_view k, std::string_view v) {
            std::string label;
            if (k != "labels" || !kineto::json_string(v, label))
                return;
            (label == "CPU" ? top_.labelled_host : top_.labelled_device).insert(pid);
        });
    }

    // A process that is a device: labelled as one, or listed in deviceProperties and not
    // labelled as the host.
    bool device_process(std::int64_t pid) const {
        return top_.labelled_device.count(pid) != 0 ||
               (top_.devices.count(pid) != 0 && top_.labelled_host.count(pid) == 0);
    }

    // Where an event runs: its category says so for device work; a runtime call recorded on
    // a device's process (MTIA's `synchronize` per stream) runs there too; a category Kineto
    // does not document runs where its process is.
    Where where_of(std::string_view cat, std::int64_t pid) {
        if (is_device_cat(cat))
            return Where::device;
        if (is_runtime_cat(cat))
            return device_process(pid) ? Where::device : Where::host;
        if (is_known_host_cat(cat))
            return Where::host;
        if (device_process(pid)) {
            ++unknown_device_cats_[std::string(cat.substr(0, 64))];
            return Where::device;
        }
        ++unknown_host_cats_[std::string(cat.substr(0, 64))];
        return Where::host;
    }

    // The profiler's own records: its "Trace" span ("PyTorch Profiler (0)") is the capture
    // window, and its global instants ("Iteration Start", "Record Window End") sit on
    // processes named by text ("Spans", "Traces", ""). They go on one lane, not on a
    // phantom thread each.
    static bool is_capture_window(const RawEvent& e) {
        if (e.cat == "Trace")
            return true;
        std::int64_t number = 0;
        std::string text;
        return (e.ph == "i" || e.ph == "I") && !kineto::json_int(e.pid, number) &&
               (!kineto::json_string(e.pid, text) || !kineto::json_int(text, number));
    }

    LaneId profiler_lane() {
        if (!profiler_lane_.valid()) {
            profiler_lane_ =
                sink_.add_lane(ranks_.front().rank, LaneKind::host_thread, "profiler", -1);
        }
        return profiler_lane_;
    }

    LaneId lane_of(Where where, std::int64_t pid, std::int64_t tid, const RawEvent& e) {
        const std::string_view cat = e.cat;
        if (auto exported = exported_lanes_.find({pid, tid}); exported != exported_lanes_.end()) {
            return exported->second;  // Fulcrum's export: the lane (pid, tid) stood for
        }
        const bool device = where == Where::device;
        // The CUPTI range profiler's replayed kernels get a lane of their own per device.
        const bool profiler = cat == "cuda_profiler_range";
        // gloo's point-to-point requests start inside their c10d::send or recv_ and end when
        // the request is waited on, across the thread's later ranges: not nested, so a lane of
        // their own per thread keeps the thread's ranges nested.
        const bool requests =
            !device && cat == "user_annotation" && (e.name == "gloo:send" || e.name == "gloo:recv");
        // A device lane is a stream: CUDA's tid is the stream; MTIA's tid is one of several
        // threads of a stream, which args.stream (or stream_id) names.
        std::int64_t native = tid;
        if (device && !profiler) {
            for_each_arg(e, [&](std::string_view k, std::string_view v) {
                std::int64_t stream = 0;
                if ((k == "stream" || k == "stream_id") && kineto::json_int(v, stream))
                    native = stream;
            });
        }
        auto [it, added] = lanes_.try_emplace(
            LaneKey{device, profiler, pid, device ? native : tid, requests}, LaneId{});
        if (!added)
            return it->second;
        std::string name;
        if (profiler) {
            name = "profiler ranges (device " + std::to_string(pid) + ")";
            native = -1;
        } else if (device) {
            name = "stream " + std::to_string(native) + " (device " + std::to_string(pid) + ")";
            if (first_device_ < 0 && pid >= 0 && pid < (1 << 20))
                first_device_ = static_cast<std::int32_t>(pid);
        } else if (requests) {
            name = "gloo requests (thread " + std::to_string(tid) + ")";
        } else {
            auto named = thread_names_.find({pid, tid});
            name = named != thread_names_.end() ? named->second : "thread " + std::to_string(tid);
            if (first_host_pid_ == 0)
                first_host_pid_ = pid;
        }
        it->second =
            sink_.add_lane(ranks_.front().rank,
                           device ? LaneKind::gpu_stream : LaneKind::host_thread, name, native);
        return it->second;
    }

    // Pass 2.
    Status import_events() {
        JsonStream stream;
        if (!open_stream(stream, input_))
            return Error{ErrorCode::io, "cannot open '" + input_.path + "'"};
        bool truncated = false, cancelled = false;
        std::int64_t last_report = 0;
        walk(
            stream, [](std::string_view, std::string_view) {},
            [&](std::string_view raw, std::int64_t index) {
                if ((index & 1023) == 0 && stream.file_offset() - last_report > (4 << 20)) {
                    last_report = stream.file_offset();
                    progress(0.25 + 0.75 * double(last_report) / input_size_);
                }
                on_event(raw, index);
            },
            truncated, options_.cancel, cancelled);
        flush();
        if (cancelled)
            return Error{ErrorCode::cancelled, "import cancelled"};
        if (truncated) {
            std::string reason = std::string(kTruncatedNote) + std::to_string(stream.offset()) +
                                 " of the JSON: the events before it were imported, the rest of "
                                 "the file could not be read";
            if (!stream.problem().empty())
                reason += " (" + stream.problem() + ")";
            log_.note(reason);
        } else if (!stream.problem().empty()) {
            log_.note(stream.problem());
        }
        return {};
    }

    void on_event(std::string_view raw, std::int64_t index) {
        RawEvent& e = event_;  // reused: its strings and vectors keep their capacity
        e.clear();
        if (!parse_event(raw, e)) {
            log_.skip("not a JSON object", index, raw);
            return;
        }
        const std::string_view ph = e.ph;
        if (ph == "M") {
            on_metadata(e);
            return;
        }
        if (ph == "s" || ph == "f" || ph == "t")
            return;  // flows: the correlation args link launches
        const bool complete = ph == "X", begin = ph == "B", end = ph == "E";
        const bool async_begin = ph == "b", async_end = ph == "e";
        const bool instant = ph == "i" || ph == "I" || ph == "R";
        const bool counter = ph == "C";
        if (!complete && !begin && !end && !async_begin && !async_end && !instant && !counter) {
            log_.skip("unknown event type \"ph\": \"" + std::string(ph.substr(0, 16)) + "\"", index,
                      raw);
            return;
        }
        std::int64_t ts = 0;
        if (e.ts.empty()) {
            log_.skip("no \"ts\"", index, raw);
            return;
        }
        if (!kineto::json_us_to_ns(e.ts, ts)) {
            log_.skip("\"ts\" is not a number in the int64 nanosecond range", index, raw);
            return;
        }
        if (counter) {
            on_counter(e, ts);
            return;
        }
        if (e.pid.empty() && e.tid.empty()) {
            log_.skip("no \"pid\" or \"tid\"", index, raw);
            return;
        }
        std::int64_t dur = 0;
        if (complete) {
            if (e.dur.empty()) {
                log_.skip("complete event without \"dur\"", index, raw);
                return;
            }
            if (!kineto::json_us_to_ns(e.dur, dur)) {
                log_.skip("\"dur\" is not a number in the int64 nanosecond range", index, raw);
                return;
            }
            if (dur < 0) {
                log_.skip("negative \"dur\"", index, raw);
                return;
            }
        }
        const std::int64_t pid = ids_.of(e.pid.empty() ? std::string_view("0") : e.pid);
        const std::int64_t tid = ids_.of(e.tid.empty() ? std::string_view("0") : e.tid);
        const bool window = is_capture_window(e);
        const Where where = window ? Where::host : where_of(e.cat, pid);
        const LaneId lane = window ? profiler_lane() : lane_of(where, pid, tid, e);
        if (end || async_end) {
            close_range(e, lane, ts, async_end, index, raw);
            return;
        }
        Event event;
        event.lane = lane;
        event.start_ns = ts;
        event.end_ns = instant ? ts : ts + dur;
        map_event(e, where, instant, event);
        if (begin || async_begin) {
            open_ranges_[OpenKey{lane,
                                 async_begin ? std::string(e.id) + "\n" + e.name : std::string()}]
                .push_back(event);
            return;
        }
        add(event);
    }

    void on_metadata(const RawEvent& e) {
        if (e.name != "thread_name" || e.pid.empty() || e.tid.empty())
            return;  // the rest is not needed
        for_each_member(e.args, [&](std::string_view k, std::string_view v) {
            std::string text;
            if (k != "name" || !kineto::json_string(v, text))
                return;
            const std::int64_t pid = ids_.of(e.pid), tid = ids_.of(e.tid);
            thread_names_[{pid, tid}] = text;
            if (auto it = lanes_.find(LaneKey{false, false, pid, tid}); it != lanes_.end()) {
                sink_.rename_lane(it->second, text);
            }
        });
    }

    // A counter's rank: the exported rank whose process it is, else the file's rank.
    void on_counter(const RawEvent& e, std::int64_t ts) {
        std::int32_t rank = ranks_.front().rank;
        if (top_.fulcrum.present) {
            const std::int64_t pid = ids_.of(e.pid.empty() ? std::string_view("0") : e.pid);
            for (const ExportedLane& lane : top_.fulcrum.lanes) {
                if (lane.pid == pid) {
                    rank = lane.rank;
                    break;
                }
            }
        }
        for_each_member(e.args, [&](std::string_view k, std::string_view v) {
            double value = 0;
            if (!kineto::json_double(v, value))
                return;
            // Fulcrum's export writes a counter as {"value": v} under its own name.
            const bool own = top_.fulcrum.present && k == "value";
            sink_.add_counter({rank, own ? e.name : e.name + "." + std::string(k), ts, value});
        });
    }

    void close_range(const RawEvent& e, LaneId lane, std::int64_t ts, bool async,
                     std::int64_t index, std::string_view raw) {
        auto open = open_ranges_.find(
            OpenKey{lane, async ? std::string(e.id) + "\n" + e.name : std::string()});
        if (open == open_ranges_.end() || open->second.empty()) {
            log_.skip(async ? "\"e\" without a matching \"b\"" : "\"E\" without a matching \"B\"",
                      index, raw);
            return;
        }
        Event event = open->second.back();
        open->second.pop_back();
        if (ts < event.start_ns) {
            log_.skip(async ? "\"e\" before its \"b\"" : "\"E\" before its \"B\"", index, raw);
            return;
        }
        event.end_ns = ts;
        add(event);
    }

    // Kind, category, step and the columns the args give.
    void map_event(const RawEvent& e, Where where, bool instant, Event& event) {
        const std::string_view cat = e.cat;
        std::string_view collective_name;
        std::int64_t mtia_bytes = -1;
        std::string direction;
        for_each_arg(e, [&](std::string_view k, std::string_view v) {
            std::int64_t n = 0;
            if (k == "correlation" && kineto::json_int(v, n))
                event.correlation = n;
            else if (k == "bytes" && kineto::json_int(v, n) && n >= 0)
                event.bytes = n;
            else if (k == "Collective name")
                collective_name = v;
            else if (k == "size" && kineto::json_int(v, n) && n >= 0)
                mtia_bytes = n;
            else if (k == "direction")
                kineto::json_string(v, direction);
        });
        std::int32_t step = -1;
        if (instant) {
            event.kind = EventKind::mark;
        } else if (cat == "kernel" || cat == "Kernel") {
            NameCache::Facts& facts = names_.of(e.name);
            if (!collective_name.empty() || facts.nccl()) {
                event.kind = EventKind::collective;
                event.category = Category::communication;
                if (!collective_name.empty())
                    event.args = sink_.intern(e.args);
            } else {
                event.kind = EventKind::kernel;
                event.category = facts.attention() ? Category::attention : Category::compute;
            }
        } else if (cat == "gpu_memcpy" || cat == "Memcpy") {
            event.kind = EventKind::memcpy;
            copy_kinds_from_name(e.name, event.copy_kind, event.src_memory, event.dst_memory);
            event.category =
                crosses_host_and_device(event.copy_kind) ? Category::offload : Category::memory;
        } else if (cat == "gpu_memset" || cat == "Memset") {
            event.kind = EventKind::memset;
            event.category = Category::memory;
        } else if (cat == "cuda_sync") {
            // The host waited on this stream (or event, or context): not device work.
            event.kind = EventKind::sync;
            event.category = Category::runtime;
        } else if (cat == "cuda_profiler_range" || cat == "gpu_user_annotation" || cat == "Trace") {
            // Containers, transparent to the analyses: a user annotation on the stream, a
            // kernel replayed by CUPTI's range profiler (its duration is the profiler's), or
            // the profiler's capture window.
            event.kind = EventKind::range;
            event.category = Category::schedule;
            profiler_step(e.name, step);
        } else if (cat == "mtia_ccp_events") {
            map_mtia_event(e.name, direction, mtia_bytes, event);
        } else if (is_runtime_cat(cat)) {
            // On a device's own lane a runtime record marks the stream waiting (MTIA's
            // `synchronize`); on the host it is the API call.
            event.kind = where == Where::device ? EventKind::sync : EventKind::api;
            event.category = Category::runtime;
        } else if (where == Where::device) {
            event.kind =
                EventKind::kernel;  // an accelerator's work of a category Kineto does not document
            event.category = Category::compute;
        } else {
            event.kind = EventKind::range;
            event.category = Category::other;
        }
        std::int32_t host_step = -1;
        if (where == Where::host && !top_.fulcrum.present && profiler_step(e.name, host_step) &&
            event.kind == EventKind::range) {
            event.name = step_name();
            event.category = Category::schedule;
            event.args = sink_.intern("{\"kineto_name\":\"ProfilerStep#" +
                                      std::to_string(host_step) + "\"}");
            step = host_step;
        } else {
            NameCache::Facts& facts = names_.of(e.name);
            if (!facts.id.valid())
                facts.id = sink_.intern(e.name);
            event.name = facts.id;
        }
        if (top_.fulcrum.present) {
            map_fulcrum_args(e.args, event);
            return;
        }
        if (where == Where::host && grid_.found && grid_.grid.pp > 1)
            map_structure(e, event);
        event.step = step >= 0 ? step : step_of(where, event);
    }

    // A pipeline action label, or a send or receive the passes were recovered from, as the
    // range Fulcrum's own annotations would have written (docs/annotations.md).
    void map_structure(const RawEvent& e, Event& event) {
        std::optional<structure::PipelineAction> action = structure::parse_pipeline_action(e.name);
        const bool send_or_recv = [&] {
            const auto kind = structure::host_op_kind(e.name);
            return kind == structure::HostOp::Kind::send || kind == structure::HostOp::Kind::recv;
        }();
        if (!action && send_or_recv && !recovered_comm_.empty()) {
            const auto found = recovered_comm_.find(
                {ids_.of(e.pid.empty() ? std::string_view("0") : e.pid),
                 ids_.of(e.tid.empty() ? std::string_view("0") : e.tid), event.start_ns});
            if (found != recovered_comm_.end()) {
                action =
                    structure::PipelineAction{found->second.kind, -1, found->second.microbatch};
                event.end_ns = std::max(event.end_ns, found->second.end_ns);  // and its wait
            }
        }
        if (!action)
            return;
        set_structure(*action, e.name, event);
    }

    void set_structure(const structure::PipelineAction& action, std::string_view original,
                       Event& event) {
        const bool communication = structure::action_is_communication(action.kind);
        event.kind = communication ? EventKind::collective : EventKind::range;
        event.category = communication ? Category::communication : Category::compute;
        event.name = sink_.intern(structure::action_range_name(action.kind));
        event.stage = static_cast<std::int16_t>(grid_.coordinates.pp);
        event.microbatch = action.microbatch;
        event.phase = structure::action_phase(action.kind);
        const int chunk = action.stage_index >= 0 ? action.stage_index / grid_.grid.pp : 0;
        nlohmann::json args = {{"chunk", chunk}};
        args["kineto_name"] = std::string(original);
        event.args = sink_.intern(args.dump());
        labelled_passes_ += communication ? 0 : 1;
    }

    // MTIA's command processor: DMA requests are copies (direction and size in the args),
    // waits are synchronisation, everything else is the device executing.
    static void map_mtia_event(std::string_view name, const std::string& direction,
                               std::int64_t bytes, Event& event) {
        if (contains_ci(name, "dma")) {
            event.kind = EventKind::memcpy;
            event.bytes = bytes;
            event.copy_kind = direction == "DEVICE_TO_HOST"     ? CopyKind::device_to_host
                              : direction == "HOST_TO_DEVICE"   ? CopyKind::host_to_device
                              : direction == "DEVICE_TO_DEVICE" ? CopyKind::device_to_device
                                                                : CopyKind::none;
            event.category =
                crosses_host_and_device(event.copy_kind) ? Category::offload : Category::memory;
        } else if (contains_ci(name, "wait") || contains_ci(name, "event")) {
            event.kind = EventKind::sync;
            event.category = Category::runtime;
        } else {
            event.kind = EventKind::kernel;
            event.category = Category::compute;
        }
    }

    // A foreign event's step: a device event's launch's step (same correlation, when the
    // launch came earlier in the file), else the step window its start falls in.
    std::int32_t step_of(Where where, const Event& event) {
        std::int32_t step = -1;
        if (where == Where::device && event.correlation >= 0) {
            if (auto it = launch_step_.find(event.correlation); it != launch_step_.end())
                step = it->second;
        }
        if (step < 0)
            step = step_at(event.start_ns);
        if (where == Where::host && step >= 0 && event.kind == EventKind::api &&
            event.correlation >= 0) {
            launch_step_.emplace(event.correlation, step);
        }
        return step;
    }

    // Fulcrum's export writes the event's own columns into its args (core/export/chrome_trace.h):
    // they replace whatever the Kineto reading guessed from the name and category.
    void map_fulcrum_args(std::string_view args, Event& event) {
        event.copy_kind = CopyKind::none;
        event.src_memory = MemoryKind::none;
        event.dst_memory = MemoryKind::none;
        event.args = StringId{};
        for_each_member(args, [&](std::string_view k, std::string_view v) {
            std::int64_t n = 0;
            std::string text;
            if (k == "kind" && kineto::json_string(v, text)) {
                for (int i = 0; i < kEventKindCount; ++i) {
                    if (to_string(static_cast<EventKind>(i)) == text)
                        event.kind = static_cast<EventKind>(i);
                }
            } else if (k == "category" && kineto::json_string(v, text)) {
                for (int i = 0; i < kCategoryCount; ++i) {
                    if (to_string(static_cast<Category>(i)) == text)
                        event.category = static_cast<Category>(i);
                }
            } else if (k == "phase" && kineto::json_string(v, text)) {
                for (int i = 0; i <= 2; ++i) {
                    if (to_string(static_cast<Phase>(i)) == text)
                        event.phase = static_cast<Phase>(i);
                }
            } else if (k == "copy" && kineto::json_string(v, text)) {
                for (int i = 1; i <= 10; ++i) {
                    if (to_string(static_cast<CopyKind>(i)) == text)
                        event.copy_kind = static_cast<CopyKind>(i);
                }
            } else if ((k == "src memory" || k == "dst memory") && kineto::json_string(v, text)) {
                for (int i = 0; i <= 7; ++i) {
                    if (to_string(static_cast<MemoryKind>(i)) == text) {
                        (k == "src memory" ? event.src_memory : event.dst_memory) =
                            static_cast<MemoryKind>(i);
                    }
                }
            } else if (k == "step" && kineto::json_int(v, n) && n >= 0 && n <= INT32_MAX) {
                event.step = static_cast<std::int32_t>(n);
            } else if (k == "microbatch" && kineto::json_int(v, n) && n >= 0 && n <= INT32_MAX) {
                event.microbatch = static_cast<std::int32_t>(n);
            } else if (k == "stage" && kineto::json_int(v, n) && n >= 0 && n <= INT16_MAX) {
                event.stage = static_cast<std::int16_t>(n);
            } else if (k == "args") {
                event.args = sink_.intern(v);
            }
        });
        if (event.kind == EventKind::mark)
            event.end_ns = event.start_ns;
    }

    StringId step_name() {
        if (!step_name_.valid())
            step_name_ = sink_.intern(range_name::kStep);
        return step_name_;
    }

    void add(const Event& event) {
        batch_.push_back(event);
        if (batch_.size() >= 4096)
            flush();
    }
    void flush() {
        sink_.add_events(batch_.data(), batch_.size());
        batch_.clear();
    }

    void finish() {
        for (auto& [key, stack] : open_ranges_) {
            if (!stack.empty()) {
                log_.skip(key.async_id.empty() ? "\"B\" without a matching \"E\""
                                               : "\"b\" without a matching \"e\"",
                          -1, "", static_cast<std::int64_t>(stack.size()));
            }
        }
        for (const auto& [cat, n] : unknown_host_cats_) {
            log_.note("unknown category \"" + cat + "\": " + std::to_string(n) +
                      " events imported as host ranges (category other)");
        }
        for (const auto& [cat, n] : unknown_device_cats_) {
            log_.note("unknown category \"" + cat + "\" on a device's pid: " + std::to_string(n) +
                      " events imported as device work (kernels)");
        }
        add_recovered_passes();
        add_inferred_steps();
        log_.finish();
        for (RankInfo& rank : ranks_) {
            if (top_.fulcrum.present)
                continue;  // the export's rows are whole
            rank.pid = first_host_pid_;
            if (top_.devices.size() == 1)
                rank.device = static_cast<std::int32_t>(*top_.devices.begin());
            else
                rank.device = first_device_;
            sink_.add_rank(rank);
        }
        progress(1.0);
    }

    // Steps inferred from the optimizer's (infer_steps), as the step ranges a stepped
    // profiler's ProfilerStep#N become, on the thread that ran them.
    void add_inferred_steps() {
        if (!inferred_steps_)
            return;
        const auto lane =
            lanes_.find(LaneKey{false, false, step_thread_.first, step_thread_.second});
        if (lane == lanes_.end())
            return;
        for (const StepWindow& window : top_.steps) {
            Event event;
            event.lane = lane->second;
            event.kind = EventKind::range;
            event.category = Category::schedule;
            event.name = step_name();
            event.start_ns = window.start;
            event.end_ns = window.end;
            event.step = window.step;
            event.args = sink_.intern("{\"inferred_from\":\"Optimizer.step\"}");
            add(event);
        }
        flush();
    }

    // The passes recovered from the sends, as ranges on the thread that ran them.
    void add_recovered_passes() {
        const auto lane =
            lanes_.find(LaneKey{false, false, schedule_thread_.first, schedule_thread_.second});
        if (lane == lanes_.end())
            return;
        for (const RecoveredStepRange& recovered : recovered_) {
            if (structure::action_is_communication(recovered.range.kind))
                continue;
            Event event;
            event.lane = lane->second;
            event.start_ns = recovered.range.start_ns;
            event.end_ns = recovered.range.end_ns;
            event.step = recovered.step;
            const std::int32_t stage_index =
                recovered.range.chunk * grid_.grid.pp + grid_.coordinates.pp;
            set_structure({recovered.range.kind, stage_index, recovered.range.microbatch},
                          grid_.grid.pp > 1 ? "recovered from the pipeline sends"
                                            : "recovered from the autograd work",
                          event);
            add(event);
        }
        flush();
    }

    struct LaneKey {
        bool device, profiler;
        std::int64_t pid, tid;
        bool requests = false;  // gloo's point-to-point requests of the thread
        bool operator<(const LaneKey& o) const {
            return std::tie(device, profiler, pid, tid, requests) <
                   std::tie(o.device, o.profiler, o.pid, o.tid, o.requests);
        }
    };
    struct OpenKey {
        LaneId lane;
        std::string async_id;  // "" for B/E; "id\nname" for b/e
        bool operator<(const OpenKey& o) const {
            return std::tie(lane, async_id) < std::tie(o.lane, o.async_id);
        }
    };

    struct ThreadOp {
        std::int64_t pid = 0, tid = 0;
        structure::HostOp op;
    };
    // thread_starts' one thread and its operators' starts.
    std::optional<std::pair<std::int64_t, std::int64_t>> starts_thread_;
    std::vector<std::int64_t> thread_starts_;
    struct RecoveredStepRange {
        structure::RecoveredRange range;
        std::int32_t step = -1;
    };

    const ImportInput& input_;
    TraceSink& sink_;
    const ImportFileOptions& options_;
    // Structure recovery: pass 1's operators of interest, the grid, the passes recovered from
    // the sends (with no labels to read) and the thread they ran on.
    std::vector<ThreadOp> host_ops_;
    std::map<std::int64_t, std::size_t> last_op_of_process_;  // pid -> its last in host_ops_
    std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> sends_by_thread_;
    std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> autograd_by_thread_;
    bool has_pipeline_labels_ = false;
    structure::RecoveredGrid grid_;
    std::pair<std::int64_t, std::int64_t> schedule_thread_{-1, -1};
    std::pair<std::int64_t, std::int64_t> step_thread_{-1, -1};  // where the steps ran
    // Each thread's optimizer steps (start, end), for a trace without ProfilerStep#N.
    std::map<std::pair<std::int64_t, std::int64_t>,
             std::vector<std::pair<std::int64_t, std::int64_t>>>
        optimizer_steps_;
    bool inferred_steps_ = false;
    std::vector<RecoveredStepRange> recovered_;
    std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, structure::RecoveredRange>
        recovered_comm_;  // (pid, tid, start) of a send or receive -> what it handed over
    std::int64_t inconsistent_steps_ = 0, labelled_passes_ = 0;
    std::int64_t cut_steps_ = 0;  // 1 when the file ends inside its last step's passes
    // gloo's receive requests of pass 1 (pid, tid, [start, end]), and how many receives the
    // recovered passes wait in (structure::wait_for_receives).
    struct ThreadRequest {
        std::int64_t pid = 0, tid = 0;
        std::pair<std::int64_t, std::int64_t> span;
    };
    std::vector<ThreadRequest> gloo_recvs_;
    std::int64_t waited_receives_ = 0;
    std::int64_t interleaved_steps_ = 0;   // steps whose passes came in interleaved order
    std::int32_t interleaved_chunks_ = 0;  // their model chunks a stage
    // What the labels or the recovered passes say of the schedule.
    bool gpipe_labels_ = false, split_backward_ = false, one_f_one_b_ = false;
    std::int32_t max_stage_index_ = -1, max_microbatch_ = -1;
    std::set<std::int32_t> stage_indices_;  // the labels' model chunks (global stage indices)

    // The rank's chunks placed as a V: stage s and 2p − 1 − s (ZBV), not s and s + p (a loop).
    bool v_placement() const {
        const int p = grid_.grid.pp, s = grid_.coordinates.pp;
        return stage_indices_ == std::set<std::int32_t>{s, 2 * p - 1 - s};
    }

    // The schedule in run.config's names, where it can be told; "" otherwise.
    std::string recovered_schedule() const {
        if (has_pipeline_labels_) {
            if (gpipe_labels_)
                return "gpipe";
            const int chunks = grid_.grid.pp > 0 ? max_stage_index_ / grid_.grid.pp + 1 : 1;
            if (split_backward_)  // zero bubble: ZB-H1 with one chunk a stage, else ZBV and kin
                return chunks == 1 ? "zb-h1" : "";
            return chunks > 1 ? "interleaved" : "1f1b";
        }
        if (recovered_.empty() || grid_.grid.pp < 2)
            return "";  // no pipeline, no pipeline schedule
        if (interleaved_chunks_ > 1)
            return "interleaved";
        return one_f_one_b_ ? "1f1b" : "gpipe";
    }
    ImportLog log_;
    double input_size_ = 1;
    TopLevel top_;
    std::vector<RankInfo> ranks_;
    IdMap ids_;
    std::map<LaneKey, LaneId> lanes_;
    std::map<std::pair<std::int64_t, std::int64_t>, LaneId> exported_lanes_;
    std::map<std::pair<std::int64_t, std::int64_t>, std::string> thread_names_;
    std::int64_t first_host_pid_ = 0;
    std::int32_t first_device_ = -1;
    std::map<OpenKey, std::vector<Event>> open_ranges_;  // "B" waiting for "E", "b" for "e"
    std::unordered_map<std::int64_t, std::int32_t> launch_step_;  // correlation -> step
    std::map<std::string, std::int64_t> unknown_host_cats_, unknown_device_cats_;
    StringId step_name_;
    LaneId profiler_lane_;
    RawEvent event_;
    NameCache names_;
    std::vector<Event> batch_;
};

class KinetoImporter final : public Importer {
public:
    std::string_view name() const override { return "kineto-json"; }
    std::string_view description() const override {
        return "PyTorch profiler (Kineto) / Chrome trace JSON, plain or .gz";
    }
    // Kineto's events are 200-400 bytes of JSON each (name, ids, args); flows and metadata
    // take bytes without becoming events.
    bool sniff(std::string_view head) const override {
        std::size_t i = 0;
        if (head.substr(0, 3) == "\xEF\xBB\xBF")
            i = 3;
        while (i < head.size() && std::strchr(" \t\r\n", head[i]) != nullptr)
            ++i;
        if (i >= head.size())
            return false;
        if (head[i] == '[') {
            ++i;
            while (i < head.size() && std::strchr(" \t\r\n", head[i]) != nullptr)
                ++i;
            return i < head.size() && head[i] == '{' &&
                   (head.find("\"ph\"") != std::string_view::npos ||
                    head.find("\"ts\"") != std::string_view::npos || head.size() - i < 64);
        }
        if (head[i] != '{')
            return false;
        for (std::string_view key : {"\"traceEvents\"", "\"schemaVersion\"", "\"deviceProperties\"",
                                     "\"distributedInfo\"", "\"baseTimeNanoseconds\""}) {
            if (head.find(key) != std::string_view::npos)
                return true;
        }
        return false;
    }
    Status read(const ImportInput& input, TraceSink& sink,
                const ImportFileOptions& options) const override {
        return KinetoImport(input, sink, options).run();
    }
};

}  // namespace

std::unique_ptr<Importer> make_kineto_importer() {
    return std::make_unique<KinetoImporter>();
}

}  // namespace fulcrum::importer
