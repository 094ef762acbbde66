#include "collectors/inject/gpu_tracer.h"

#include <atomic>

#include "collectors/inject/immortal.h"
#include "collectors/inject/say.h"
#include "collectors/inject/tsc_clock.h"
#include "core/store/trace_writer.h"
#include "core/trace/annotations.h"

namespace fulcrum::collect {
namespace {

std::atomic<GpuState> g_state{GpuState::pending};

}  // namespace

std::string_view to_string(GpuState state) {
    switch (state) {
        case GpuState::pending:
            return "pending";
        case GpuState::off:
            return "off";
        case GpuState::on:
            return "on";
        case GpuState::no_gpu:
            return "none";
        case GpuState::other_profiler:
            return "other-profiler";
        case GpuState::unavailable:
            return "unavailable";
        case GpuState::failed:
            return "failed";
    }
    return "pending";
}

GpuState gpu_state() {
    return g_state.load(std::memory_order_relaxed);
}

void turn_gpu_tracing_off() {
    GpuState expected = GpuState::pending;
    g_state.compare_exchange_strong(expected, GpuState::off);
}

}  // namespace fulcrum::collect

#if !FULCRUM_HAVE_CUDA

namespace fulcrum::collect {

GpuStart start_gpu_tracing(GpuRecordTarget&) {
    GpuState expected = GpuState::pending;
    g_state.compare_exchange_strong(expected, GpuState::unavailable);
    return {GpuState::unavailable,
            "this fulcrum was built without CUDA; GPU tracing off, NVTX capture on"};
}
void flush_gpu_tracing() {}
void push_gpu_correlation(std::uint64_t) {}
void pop_gpu_correlation() {}
void name_gpu_stream(void*, std::string_view) {}

}  // namespace fulcrum::collect

#else  // FULCRUM_HAVE_CUDA

#include <cupti.h>
#include <cxxabi.h>
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectors/inject/quiet_api.h"

namespace fulcrum::collect {
namespace {

// The CUPTI entry points we use, looked up in a dlopen'ed libcupti.
struct CuptiApi {
    decltype(&cuptiActivityRegisterTimestampCallback) register_timestamp = nullptr;
    decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
    decltype(&cuptiActivityEnable) enable = nullptr;
    decltype(&cuptiActivityFlushAll) flush_all = nullptr;
    decltype(&cuptiActivityFlushPeriod) flush_period = nullptr;
    decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
    decltype(&cuptiActivityGetNumDroppedRecords) dropped_records = nullptr;
    decltype(&cuptiActivityPushExternalCorrelationId) push_external = nullptr;
    decltype(&cuptiActivityPopExternalCorrelationId) pop_external = nullptr;
    decltype(&cuptiGetResultString) result_string = nullptr;
    decltype(&cuptiGetCallbackName) callback_name = nullptr;
    decltype(&cuptiGetStreamIdEx) stream_id = nullptr;
    decltype(&cuptiSetThreadIdType) thread_id_type = nullptr;
    // Per-call control of API records (CUPTI 12.x and later); null where this CUPTI lacks it.
    decltype(&cuptiActivityEnableRuntimeApi) enable_runtime_api = nullptr;
    decltype(&cuptiActivityEnableDriverApi) enable_driver_api = nullptr;

    bool load() {
        void* library = nullptr;
        std::vector<std::string> candidates = {"libcupti.so.13", "libcupti.so"};
        for (const char* variable : {"CUDA_HOME", "CUDA_PATH"}) {
            if (const char* home = std::getenv(variable); home != nullptr && *home != 0) {
                candidates.push_back(std::string(home) + "/extras/CUPTI/lib64/libcupti.so");
                candidates.push_back(std::string(home) + "/lib64/libcupti.so");
                candidates.push_back(std::string(home) + "/lib/libcupti.so");
            }
        }
#ifdef FULCRUM_CUPTI_LIBRARY
        candidates.push_back(FULCRUM_CUPTI_LIBRARY);  // the toolkit we were built with
#endif
        candidates.push_back("/usr/local/cuda/extras/CUPTI/lib64/libcupti.so");
        candidates.push_back("/usr/local/cuda/lib64/libcupti.so");
        for (const auto& candidate : candidates) {
            library = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
            if (library != nullptr) {
                break;
            }
        }
        if (library == nullptr) {
            return false;
        }
        bool complete = true;
        const auto bind = [&](auto& function, const char* name) {
            function = reinterpret_cast<std::remove_reference_t<decltype(function)> >(
                dlsym(library, name));
            complete = complete && function != nullptr;
        };
        bind(register_timestamp, "cuptiActivityRegisterTimestampCallback");
        bind(register_callbacks, "cuptiActivityRegisterCallbacks");
        bind(enable, "cuptiActivityEnable");
        bind(flush_all, "cuptiActivityFlushAll");
        bind(flush_period, "cuptiActivityFlushPeriod");
        bind(next_record, "cuptiActivityGetNextRecord");
        bind(dropped_records, "cuptiActivityGetNumDroppedRecords");
        bind(push_external, "cuptiActivityPushExternalCorrelationId");
        bind(pop_external, "cuptiActivityPopExternalCorrelationId");
        bind(result_string, "cuptiGetResultString");
        bind(callback_name, "cuptiGetCallbackName");
        bind(stream_id, "cuptiGetStreamIdEx");
        enable_runtime_api = reinterpret_cast<decltype(enable_runtime_api)>(
            dlsym(library, "cuptiActivityEnableRuntimeApi"));
        enable_driver_api = reinterpret_cast<decltype(enable_driver_api)>(
            dlsym(library, "cuptiActivityEnableDriverApi"));
        bind(thread_id_type, "cuptiSetThreadIdType");
        return complete;
    }
};

CuptiApi g_cupti;
// The recorder records go to: set before CUPTI can deliver any (start_gpu_tracing).
GpuRecordTarget* g_target = nullptr;
std::mutex g_start_mutex;

constexpr std::size_t kBufferBytes = 8 << 20;
constexpr std::size_t kMaxCorrelations = 1 << 20;
constexpr CUpti_ExternalCorrelationKind kOurCorrelationKind =
    CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;

std::uint64_t CUPTIAPI host_timestamp() {
    return static_cast<std::uint64_t>(host_clock_ns());
}

// ---- records to events; runs on CUPTI's worker thread (or the flushing thread) ----

struct StreamKey {
    std::uint32_t context;
    std::uint32_t stream;
    friend bool operator<(StreamKey a, StreamKey b) {
        return a.context != b.context ? a.context < b.context : a.stream < b.stream;
    }
};

struct KernelName {
    StringId name;
    bool collective;
};

class RecordSink {
public:
    void take(std::uint8_t* buffer, std::size_t valid_bytes);
    void name_stream(std::uint32_t stream, std::string name);

private:
    LaneId stream_lane(std::uint32_t context, std::uint32_t stream, std::uint32_t device);
    LaneId context_lane(std::uint32_t context);
    KernelName kernel_name(const char* mangled);
    StringId api_name(CUpti_CallbackDomain domain, CUpti_CallbackId cbid);
    void apply_semantic_keys(Event& event, std::uint32_t correlation);
    void add(const Event& event);

    void on_kernel(const CUpti_ActivityKernel10& record);
    void on_memcpy(const CUpti_ActivityMemcpy6& record);
    void on_memset(const CUpti_ActivityMemset4& record);
    void on_synchronization(const CUpti_ActivitySynchronization2& record);
    void on_api(const CUpti_ActivityAPI& record, CUpti_CallbackDomain domain);

    std::mutex mutex_;
    std::map<StreamKey, LaneId> stream_lanes_;
    std::map<std::uint32_t, LaneId> context_lanes_;
    std::map<std::uint32_t, std::uint32_t> context_devices_;
    std::map<std::uint32_t, std::string> stream_names_;
    std::unordered_map<const char*, KernelName> kernel_names_;
    std::map<std::pair<int, std::uint32_t>, StringId> api_names_;
    std::unordered_map<std::uint32_t, std::uint64_t> external_ids_;
    std::int64_t unusable_records_ = 0;
};

Immortal<RecordSink> g_sink;  // CUPTI may deliver buffers while the program exits

LaneId RecordSink::stream_lane(std::uint32_t context, std::uint32_t stream, std::uint32_t device) {
    context_devices_[context] = device;
    const StreamKey key{context, stream};
    if (auto found = stream_lanes_.find(key); found != stream_lanes_.end()) {
        return found->second;
    }
    auto named = stream_names_.find(stream);
    const std::string name = named != stream_names_.end() ? named->second
                                                          : "GPU " + std::to_string(device) +
                                                                " stream " + std::to_string(stream);
    GpuRecordTarget& recorder = *g_target;
    const LaneId lane =
        recorder.writer().add_lane(recorder.rank(), LaneKind::gpu_stream, name, stream);
    stream_lanes_.emplace(key, lane);
    return lane;
}

// Context-wide synchronizations (cudaDeviceSynchronize) belong to no stream.
LaneId RecordSink::context_lane(std::uint32_t context) {
    if (auto found = context_lanes_.find(context); found != context_lanes_.end()) {
        return found->second;
    }
    auto device = context_devices_.find(context);
    const std::string name =
        "GPU " +
        (device != context_devices_.end() ? std::to_string(device->second)
                                          : "context " + std::to_string(context)) +
        " synchronize";
    GpuRecordTarget& recorder = *g_target;
    const LaneId lane = recorder.writer().add_lane(recorder.rank(), LaneKind::gpu_stream, name);
    context_lanes_.emplace(context, lane);
    return lane;
}

// CUPTI shares one name pointer among all records of a kernel, so the pointer is the key.
KernelName RecordSink::kernel_name(const char* mangled) {
    if (auto found = kernel_names_.find(mangled); found != kernel_names_.end()) {
        return found->second;
    }
    std::string name = mangled != nullptr ? mangled : "";
    int status = 0;
    if (char* demangled = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status)) {
        name = demangled;
        std::free(demangled);
    }
    // NCCL's device kernels (docs/sources.md, "CUDA, CUPTI, NVTX"): the GPU time of a collective.
    const bool collective = name.find("ncclDevKernel_") != std::string::npos ||
                            name.find("ncclKernel_") != std::string::npos;
    const KernelName entry{g_target->writer().intern(name), collective};
    kernel_names_.emplace(mangled, entry);
    return entry;
}

StringId RecordSink::api_name(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
    const auto key = std::make_pair(static_cast<int>(domain), static_cast<std::uint32_t>(cbid));
    if (auto found = api_names_.find(key); found != api_names_.end()) {
        return found->second;
    }
    const char* raw = nullptr;
    std::string name;
    if (g_cupti.callback_name(domain, cbid, &raw) == CUPTI_SUCCESS && raw != nullptr) {
        name = raw;
        // "cudaLaunchKernel_v7000": the version suffix is CUPTI's, not the API's name.
        if (const auto suffix = name.rfind("_v");
            suffix != std::string::npos && suffix + 2 < name.size() &&
            name.find_first_not_of("0123456789", suffix + 2) == std::string::npos) {
            name.erase(suffix);
        }
    } else {
        name = (domain == CUPTI_CB_DOMAIN_RUNTIME_API ? "runtime API " : "driver API ") +
               std::to_string(cbid);
    }
    const StringId id = g_target->writer().intern(name);
    api_names_.emplace(key, id);
    return id;
}

void RecordSink::apply_semantic_keys(Event& event, std::uint32_t correlation) {
    auto found = external_ids_.find(correlation);
    if (found == external_ids_.end()) {
        return;
    }
    const SemanticKeys keys = unpack_semantic_keys(found->second);
    event.step = keys.step;
    event.microbatch = keys.microbatch;
    event.stage = keys.stage;
    event.phase = keys.phase;
}

void RecordSink::add(const Event& event) {
    // A device buffer too small for the work yields records without timestamps
    // (docs/sources.md, "CUDA, CUPTI, NVTX"): they cannot be placed, so they count as dropped.
    if (event.start_ns <= 0 || event.end_ns < event.start_ns) {
        ++unusable_records_;
        return;
    }
    g_target->writer().add_event(event);
}

void RecordSink::on_kernel(const CUpti_ActivityKernel10& record) {
    const KernelName name = kernel_name(record.name);
    Event event;
    event.lane = stream_lane(record.contextId, record.streamId, record.deviceId);
    event.start_ns = static_cast<std::int64_t>(record.start);
    event.end_ns = static_cast<std::int64_t>(record.end);
    event.name = name.name;
    event.kind = name.collective ? EventKind::collective : EventKind::kernel;
    event.category = name.collective ? Category::communication : Category::compute;
    event.correlation = record.correlationId;
    apply_semantic_keys(event, record.correlationId);
    add(event);
}

const char* copy_kind_name(std::uint8_t kind) {
    switch (kind) {
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
            return "Memcpy HtoD";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
            return "Memcpy DtoH";
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
            return "Memcpy HtoA";
        case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
            return "Memcpy AtoH";
        case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
            return "Memcpy AtoA";
        case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
            return "Memcpy AtoD";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA:
            return "Memcpy DtoA";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
            return "Memcpy DtoD";
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
            return "Memcpy HtoH";
        case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
            return "Memcpy PtoP";
        default:
            return "Memcpy";
    }
}

void RecordSink::on_memcpy(const CUpti_ActivityMemcpy6& record) {
    store::TraceWriter& writer = g_target->writer();
    Event event;
    event.lane = stream_lane(record.contextId, record.streamId, record.deviceId);
    event.start_ns = static_cast<std::int64_t>(record.start);
    event.end_ns = static_cast<std::int64_t>(record.end);
    event.name = writer.intern(copy_kind_name(record.copyKind));
    event.kind = EventKind::memcpy;
    event.bytes = static_cast<std::int64_t>(record.bytes);
    event.copy_kind = record.copyKind >= 1 && record.copyKind <= 10
                          ? static_cast<CopyKind>(record.copyKind)
                          : CopyKind::none;
    // Host<->device traffic is what offloading moves; device-side copies are memory work.
    event.category =
        crosses_host_and_device(event.copy_kind) ? Category::offload : Category::memory;
    // CUPTI's memory kinds are the store's (0 unknown … 7 managed static).
    auto memory = [](std::uint8_t kind) {
        return kind <= 7 ? static_cast<MemoryKind>(kind) : MemoryKind::unknown;
    };
    event.src_memory = memory(record.srcKind);
    event.dst_memory = memory(record.dstKind);
    event.correlation = record.correlationId;
    apply_semantic_keys(event, record.correlationId);
    add(event);
}

void RecordSink::on_memset(const CUpti_ActivityMemset4& record) {
    Event event;
    event.lane = stream_lane(record.contextId, record.streamId, record.deviceId);
    event.start_ns = static_cast<std::int64_t>(record.start);
    event.end_ns = static_cast<std::int64_t>(record.end);
    event.name = g_target->writer().intern("Memset");
    event.kind = EventKind::memset;
    event.category = Category::memory;
    event.bytes = static_cast<std::int64_t>(record.bytes);
    event.correlation = record.correlationId;
    apply_semantic_keys(event, record.correlationId);
    add(event);
}

void RecordSink::on_synchronization(const CUpti_ActivitySynchronization2& record) {
    const char* name = "synchronize";
    switch (record.type) {
        case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE:
            name = "cudaEventSynchronize";
            break;
        case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT:
            name = "cudaStreamWaitEvent";
            break;
        case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE:
            name = "cudaStreamSynchronize";
            break;
        case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE:
            name = "cudaDeviceSynchronize";
            break;
        default:
            break;
    }
    Event event;
    if (record.streamId == CUPTI_SYNCHRONIZATION_INVALID_VALUE) {
        event.lane = context_lane(record.contextId);
    } else {
        auto device = context_devices_.find(record.contextId);
        event.lane = stream_lane(record.contextId, record.streamId,
                                 device != context_devices_.end() ? device->second : 0);
    }
    event.start_ns = static_cast<std::int64_t>(record.start);
    event.end_ns = static_cast<std::int64_t>(record.end);
    event.name = g_target->writer().intern(name);
    event.kind = EventKind::sync;
    event.category = Category::runtime;
    event.correlation = record.correlationId;
    add(event);
}

void RecordSink::on_api(const CUpti_ActivityAPI& record, CUpti_CallbackDomain domain) {
    Event event;
    // API calls go on the host lane of the calling thread, inside its NVTX ranges.
    event.lane = g_target->thread_lane(record.threadId);
    event.start_ns = static_cast<std::int64_t>(record.start);
    event.end_ns = static_cast<std::int64_t>(record.end);
    event.name = api_name(domain, record.cbid);
    event.kind = EventKind::api;
    event.category = Category::runtime;
    event.correlation = record.correlationId;
    add(event);
}

void RecordSink::take(std::uint8_t* buffer, std::size_t valid_bytes) {
    std::lock_guard lock(mutex_);
    GpuRecordTarget& recorder = *g_target;
    if (!recorder.takes_records()) {
        return;
    }
    CUpti_Activity* record = nullptr;
    while (g_cupti.next_record(buffer, valid_bytes, &record) == CUPTI_SUCCESS) {
        switch (record->kind) {
            case CUPTI_ACTIVITY_KIND_KERNEL:
            case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
                on_kernel(*reinterpret_cast<const CUpti_ActivityKernel10*>(record));
                break;
            case CUPTI_ACTIVITY_KIND_MEMCPY:
                on_memcpy(*reinterpret_cast<const CUpti_ActivityMemcpy6*>(record));
                break;
            case CUPTI_ACTIVITY_KIND_MEMSET:
                on_memset(*reinterpret_cast<const CUpti_ActivityMemset4*>(record));
                break;
            case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
                on_synchronization(
                    *reinterpret_cast<const CUpti_ActivitySynchronization2*>(record));
                break;
            case CUPTI_ACTIVITY_KIND_RUNTIME:
                on_api(*reinterpret_cast<const CUpti_ActivityAPI*>(record),
                       CUPTI_CB_DOMAIN_RUNTIME_API);
                break;
            case CUPTI_ACTIVITY_KIND_DRIVER:
                on_api(*reinterpret_cast<const CUpti_ActivityAPI*>(record),
                       CUPTI_CB_DOMAIN_DRIVER_API);
                break;
            case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
                const auto& external =
                    *reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
                if (external.externalKind == kOurCorrelationKind) {
                    if (external_ids_.size() >= kMaxCorrelations) {
                        external_ids_.clear();  // old launches' kernels have long been seen
                    }
                    external_ids_[external.correlationId] = external.externalId;
                }
                break;
            }
            default:
                break;
        }
    }
    if (unusable_records_ > 0) {
        recorder.add_dropped(unusable_records_);
        unusable_records_ = 0;
    }
}

void RecordSink::name_stream(std::uint32_t stream, std::string name) {
    std::lock_guard lock(mutex_);
    for (const auto& [key, lane] : stream_lanes_) {
        if (key.stream == stream) {
            g_target->writer().rename_lane(lane, name);
        }
    }
    stream_names_[stream] = std::move(name);
}

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
    // CUPTI requires 8-byte aligned buffers (docs/sources.md, "CUDA, CUPTI, NVTX").
    *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(8, kBufferBytes));
    *size = *buffer != nullptr ? kBufferBytes : 0;
    *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext context, std::uint32_t stream, std::uint8_t* buffer,
                               std::size_t, std::size_t valid_bytes) {
    if (buffer != nullptr && valid_bytes > 0) {
        g_sink->take(buffer, valid_bytes);
    }
    std::size_t dropped = 0;
    if (g_cupti.dropped_records(context, stream, &dropped) == CUPTI_SUCCESS && dropped > 0) {
        g_target->add_dropped(static_cast<std::int64_t>(dropped));
    }
    std::free(buffer);
}

std::string result_text(CUptiResult result) {
    const char* text = nullptr;
    if (g_cupti.result_string != nullptr && g_cupti.result_string(result, &text) == CUPTI_SUCCESS &&
        text != nullptr) {
        return text;
    }
    return "CUPTI error " + std::to_string(static_cast<int>(result));
}

GpuStart refused(CUptiResult result) {
    switch (result) {
        case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
            return {GpuState::other_profiler,
                    "another CUDA profiler (Nsight Systems?) already traces this process; fulcrum "
                    "steps aside: GPU tracing off, NVTX capture on"};
        case CUPTI_ERROR_UNKNOWN:          // the driver stub of a machine without a GPU
        case CUPTI_ERROR_NOT_INITIALIZED:  // no driver
        case CUPTI_ERROR_INVALID_DEVICE:
            return {GpuState::no_gpu, "no GPU found; GPU tracing off, NVTX capture on"};
        case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
            return {GpuState::failed,
                    "CUPTI needs profiling permission on this machine "
                    "(CUPTI_ERROR_INSUFFICIENT_PRIVILEGES); GPU tracing off, NVTX "
                    "capture on"};
        default:
            return {GpuState::failed, "CUPTI refused GPU tracing (" + result_text(result) +
                                          "); GPU tracing off, NVTX capture on"};
    }
}

// The queries of quiet_api.h left unrecorded, after the API kinds are enabled (enabling a kind
// again would record them), unless FULCRUM_GPU_API=all (`fulcrum capture --gpu-api all`).
void quiet_query_apis() {
    const char* wanted = std::getenv("FULCRUM_GPU_API");
    if (wanted != nullptr && std::strcmp(wanted, "all") == 0) {
        return;
    }
    if (g_cupti.enable_runtime_api == nullptr || g_cupti.enable_driver_api == nullptr) {
        say("this CUPTI cannot leave single API calls out; every query is recorded");
        return;
    }
    CUptiResult failed = CUPTI_SUCCESS;
    for (const QuietApi& api : kQuietRuntimeApis) {
        if (const CUptiResult r = g_cupti.enable_runtime_api(api.cbid, 0); r != CUPTI_SUCCESS) {
            failed = r;
        }
    }
    for (const QuietApi& api : kQuietDriverApis) {
        if (const CUptiResult r = g_cupti.enable_driver_api(api.cbid, 0); r != CUPTI_SUCCESS) {
            failed = r;
        }
    }
    if (failed != CUPTI_SUCCESS) {
        say("CUPTI kept recording some query calls (" + result_text(failed) + ")");
    }
}

}  // namespace

GpuStart start_gpu_tracing(GpuRecordTarget& target) {
    std::lock_guard lock(g_start_mutex);
    g_target = &target;
    if (g_state.load() != GpuState::pending) {
        return {g_state.load(), ""};
    }
    GpuStart result;
    if (!g_cupti.load()) {
        result = {GpuState::unavailable,
                  "libcupti not found (set CUDA_HOME or LD_LIBRARY_PATH); GPU tracing off, NVTX "
                  "capture on"};
        g_state.store(result.state);
        return result;
    }
    // The timestamp callback first, before any kind is enabled, so that every GPU record is
    // on the host ranges' clock (docs/sources.md, "CUDA, CUPTI, NVTX").
    CUptiResult status = g_cupti.register_timestamp(host_timestamp);
    // API records carry gettid() like the NVTX lanes (nvtx_injection.cpp), not CUPTI's
    // default pthread_self(), so a runtime call lands on its thread's lane inside its ranges.
    if (status == CUPTI_SUCCESS) {
        status = g_cupti.thread_id_type(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
    }
    if (status == CUPTI_SUCCESS) {
        status = g_cupti.register_callbacks(buffer_requested, buffer_completed);
    }
    if (status == CUPTI_SUCCESS) {
        // CONCURRENT_KERNEL, not KERNEL: the latter serialises all kernels.
        status = g_cupti.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    }
    if (status != CUPTI_SUCCESS) {
        result = refused(status);
        g_state.store(result.state);
        return result;
    }
    // The rest are wanted but not essential: a kind this CUPTI lacks is skipped.
    for (const CUpti_ActivityKind kind :
         {CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
          CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, CUPTI_ACTIVITY_KIND_RUNTIME,
          CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION}) {
        if (const CUptiResult enabled = g_cupti.enable(kind); enabled != CUPTI_SUCCESS) {
            say("CUPTI activity kind " + std::to_string(static_cast<int>(kind)) +
                " not recorded: " + result_text(enabled));
        }
    }
    quiet_query_apis();
    // Full buffers reach the writer at least this often; the rest at exit.
    (void)g_cupti.flush_period(500);
    g_state.store(GpuState::on);
    return {GpuState::on, ""};
}

void flush_gpu_tracing() {
    if (g_state.load() == GpuState::on) {
        (void)g_cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    }
}

void push_gpu_correlation(std::uint64_t id) {
    (void)g_cupti.push_external(kOurCorrelationKind, id);
}

void pop_gpu_correlation() {
    std::uint64_t last = 0;
    (void)g_cupti.pop_external(kOurCorrelationKind, &last);
}

void name_gpu_stream(void* stream, std::string_view name) {
    if (g_state.load() != GpuState::on) {
        return;
    }
    std::uint32_t id = 0;
    if (g_cupti.stream_id(nullptr, static_cast<CUstream>(stream), 0, &id) == CUPTI_SUCCESS) {
        g_sink->name_stream(id, std::string(name));
    }
}

}  // namespace fulcrum::collect

#endif  // FULCRUM_HAVE_CUDA
