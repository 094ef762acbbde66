// The trace model: plain value types shared by the store, the importers, the exporters and
// the analyses. Every timestamp is int64 nanoseconds; within a run database all of them are
// on one clock whose zero is `RunInfo::start_utc_ns`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/util/interned_text.h"

namespace fulcrum {

// Strongly typed ids (heaptrack's Index<Tag>): a lane id cannot be passed where a string id
// is expected. 0 is "none" for every kind; real ids start at 1, as SQLite rowids do.
template <typename Tag>
struct Id {
    std::uint32_t value = 0;
    constexpr bool valid() const { return value != 0; }
    friend constexpr bool operator==(Id, Id) = default;
    friend constexpr auto operator<=>(Id, Id) = default;
};
using LaneId = Id<struct LaneTag>;
using StringId = Id<struct StringTag>;

enum class LaneKind : std::uint8_t {
    host_thread = 0,  // a CPU thread: NVTX ranges, API calls
    gpu_stream = 1,   // a CUDA stream: kernels, copies, memsets
};

enum class EventKind : std::uint8_t {
    range = 0,   // a host range (NVTX push/pop or start/end)
    mark = 1,    // an instant; end_ns == start_ns
    kernel = 2,  // a GPU kernel that is not communication
    memcpy = 3,
    memset = 4,
    sync = 5,        // a synchronization the host waited on
    collective = 6,  // communication: an NCCL kernel, or a host-side MPI/NCCL call
    api = 7,         // a CUDA runtime or driver API call
};
inline constexpr int kEventKindCount = 8;

// What an event spends time on; the analyses group by it.
enum class Category : std::uint8_t {
    other = 0,
    compute = 1,
    attention = 2,
    communication = 3,
    offload = 4,  // host<->device copies of activations or K/V chunks
    optimizer = 5,
    memory = 6,    // allocation, memset, device-to-device copies
    runtime = 7,   // CUDA API overhead
    schedule = 8,  // containers: step, micro-batch, stage ranges
};
inline constexpr int kCategoryCount = 9;

enum class Phase : std::int8_t {
    none = -1,
    forward = 0,
    backward = 1,
    weight_grad = 2,  // the W half of a split backward (Zero Bubble)
};

// CUPTI's CUpti_ActivityMemcpyKind values, stored as they come ("A" is a CUDA array).
enum class CopyKind : std::int8_t {
    none = -1,
    host_to_device = 1,
    device_to_host = 2,
    host_to_array = 3,
    array_to_host = 4,
    array_to_array = 5,
    array_to_device = 6,
    device_to_array = 7,
    device_to_device = 8,
    host_to_host = 9,
    peer_to_peer = 10,
};

// Whether a copy crosses between host memory and a device: the only copies that are
// offload (FPDT's chunks, activation offload). Device-to-device and peer copies stay on the
// devices (docs/analyses.md, "Offload overlap").
constexpr bool crosses_host_and_device(CopyKind kind) {
    return kind == CopyKind::host_to_device || kind == CopyKind::device_to_host ||
           kind == CopyKind::host_to_array || kind == CopyKind::array_to_host;
}

// CUPTI's CUpti_ActivityMemoryKind values: the memory a copy reads or writes. Pageable host
// memory makes a copy synchronous and slower than pinned memory.
enum class MemoryKind : std::int8_t {
    none = -1,  // not recorded
    unknown = 0,
    pageable = 1,
    pinned = 2,
    device = 3,
    array = 4,
    managed = 5,
    device_static = 6,
    managed_static = 7,
};

// One event, fixed size (Tracy's zone events are the model): the writer's queue and the
// reader's result vectors hold millions of these. -1 means "not known" for every optional
// field; the store maps it to SQL NULL.
struct Event {
    std::int64_t start_ns = 0;
    std::int64_t end_ns = 0;
    std::int64_t bytes = -1;
    std::int64_t correlation = -1;  // CUPTI correlation id, or our external id
    LaneId lane;
    StringId name;
    StringId args;  // a JSON object's text, interned; none when there are no args
    std::int32_t step = -1;
    std::int32_t microbatch = -1;
    std::int16_t stage = -1;
    EventKind kind = EventKind::range;
    Category category = Category::other;
    Phase phase = Phase::none;
    CopyKind copy_kind = CopyKind::none;
    MemoryKind src_memory = MemoryKind::none;  // copies: the memory read and written
    MemoryKind dst_memory = MemoryKind::none;

    std::int64_t duration_ns() const { return end_ns - start_ns; }
    friend bool operator==(const Event&, const Event&) = default;
};
static_assert(sizeof(Event) == 64, "Event is a fixed 64-byte record; keep it that way");

enum class RunOrigin : std::uint8_t { captured = 0, imported = 1, simulated = 2 };

struct RunInfo {
    std::string name;
    std::string command;  // the command line that produced it
    std::int64_t start_utc_ns = 0;
    std::string config_json = "{}";  // model, parallel degrees, balancer, dataset, backend
    RunOrigin origin = RunOrigin::captured;
    std::string producer;  // e.g. "fulcrum 0.1.0"
};

// Clock alignment applied to a rank by merge.
enum class ClockAlignment : std::uint8_t { none = 0, utc_offset = 1, barrier_marks = 2 };

// One rank of the 4D grid. Coordinates are -1 when unknown (an imported trace without them).
struct RankInfo {
    std::int32_t rank = 0;
    std::string host;
    std::int64_t pid = 0;
    std::int32_t device = -1;  // CUDA device ordinal, -1 for a CPU rank
    std::int32_t dp = -1, tp = -1, pp = -1, cp = -1;
    std::int64_t utc_offset_ns = 0;  // add to this rank's timestamps to get UTC
    bool complete = false;           // its writer closed cleanly
    std::int64_t dropped_records = 0;
    ClockAlignment alignment = ClockAlignment::none;
    std::int64_t clock_shift_ns = 0;  // what merge added to this rank's timestamps
};

struct LaneInfo {
    LaneId id;
    std::int32_t rank = 0;
    LaneKind kind = LaneKind::host_thread;
    std::string name;
    std::int64_t native_id = -1;  // OS thread id or CUDA stream id
    std::int64_t max_duration_ns = 0;
};

// One document (or the part of it) that a rank was given in one micro-batch of one step.
struct WorkloadEntry {
    std::int32_t rank = 0;
    std::int32_t step = 0;
    std::int32_t microbatch = 0;
    std::int64_t doc_id = 0;
    std::int32_t doc_length = 0;   // tokens in the whole document
    std::int32_t token_begin = 0;  // [begin, end) of the document held by this rank
    std::int32_t token_end = 0;
    InternedText balancer;  // one copy a distinct name: ~9 M rows at 1 B events
};

struct CounterSample {
    std::int32_t rank = 0;
    std::string name;
    std::int64_t time_ns = 0;
    double value = 0.0;
};

// What an importer or collector could not map, kept with the offending record; or a note
// about the input that skipped nothing (`skipped` = 0: "no baseTimeNanoseconds", "two
// processes became two ranks").
struct ImportLogEntry {
    std::string source;
    std::int64_t record_index = -1;
    std::string reason;
    std::string record;
    // Records this row stands for as skipped: 1 for one record, N for a row that counts N
    // more records like the ones before it, 0 for a note.
    std::int64_t skipped = 1;
};

// Names used in files, CSV and the CLI; stable, so scripts can rely on them.
std::string_view to_string(LaneKind kind);
std::string_view to_string(EventKind kind);
std::string_view to_string(Category category);
std::string_view to_string(Phase phase);
std::string_view to_string(CopyKind kind);
std::string_view to_string(MemoryKind kind);
// The copy kind and memory kinds that Kineto and Nsight Systems name in a copy's name:
// "Memcpy HtoD (Pageable -> Device)", "Memcpy DtoD (Device -> Device)", "Memcpy PtoP".
// Fields the name does not give are left as they are.
void copy_kinds_from_name(std::string_view name, CopyKind& kind, MemoryKind& src, MemoryKind& dst);
std::string_view to_string(RunOrigin origin);
std::string_view to_string(ClockAlignment alignment);

// The name of the mark the engine emits right after each start-up barrier; merge aligns
// ranks' clocks on the k-th occurrence of it in every rank file.
inline constexpr std::string_view kClockSyncMark = "fulcrum.clock_sync";

}  // namespace fulcrum
