// NVTX injection: the entry points NVTX3 and CUDA look for in the library named by
// NVTX_INJECTION64_PATH / CUDA_INJECTION64_PATH, and the NVTX callbacks that turn ranges,
// marks and names into events.
//
// NVTX3 is header-only: every executable or shared object that uses it has its own copy of
// the NVTX globals and calls InitializeInjectionNvtx2 once, at its first NVTX call. So the
// entry point runs several times per process and fills each copy's function tables; all of
// them share this library's one recorder, domains and registered strings.
//
// Hot path (push/pop): one atomic load, the thread's state from TLS, a lookup of the message
// in a per-thread cache of parsed templates (no lock), two reads of the time-stamp counter
// (tsc_clock.h; raw ticks, converted when drained), and the event appended to the thread's
// own buffer (recorder.h: EventBuffer) with no lock and no allocation. Timestamps are taken
// so that our own work falls outside the range: start as late as possible in push, end first
// thing in pop.
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

#include <pthread.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "collectors/inject/gpu_tracer.h"
#include "collectors/inject/immortal.h"
#include "collectors/inject/rank_environment.h"
#include "collectors/inject/recorder.h"
#include "collectors/inject/wide_text.h"
#include "core/trace/annotations.h"

// NVTX leaves these opaque to programs; the tool defines what a handle points to.
struct nvtxDomainRegistration_st {
    std::string name;  // "" for the default domain
    bool is_fulcrum = false;
    bool is_nccl = false;
    std::once_flag args_once;
    fulcrum::StringId args;  // {"domain":"NAME"} for domains other than default and fulcrum
};

struct nvtxStringRegistration_st {
    nvtxDomainRegistration_st* domain = nullptr;
    std::string text;
    // Made at the string's first use. Checked on every use with one acquire load:
    // std::call_once would go through pthread_once and two thread-locals each time.
    std::atomic<bool> template_ready{false};
    std::mutex template_mutex;
    fulcrum::Event event_template;
};

namespace fulcrum::collect {
namespace {

using Domain = nvtxDomainRegistration_st;
using RegisteredString = nvtxStringRegistration_st;

// Globals are Immortal (immortal.h): the program may call NVTX while it exits.
Immortal<Domain> g_default_domain;

std::mutex g_registry_mutex;  // domains and registered strings; locked around fork
Immortal<std::map<std::string, Domain*, std::less<>>> g_domains;
// Registered strings live as long as the process (NVTX has no way to release one); kept
// here so that they stay reachable.
Immortal<std::vector<RegisteredString*>> g_registered_strings;

// Ranges opened with RangeStart may end on any thread.
std::mutex g_started_mutex;
Immortal<std::unordered_map<std::uint64_t, Event>> g_started_ranges;
std::atomic<std::uint64_t> g_next_range_id{1};
constexpr std::size_t kMaxStartedRanges = 1 << 20;
constexpr std::size_t kMaxStackDepth = 1024;
constexpr std::size_t kMaxTemplatesPerDomain = 4096;

// ---- per-thread state ----

struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view text) const {
        return std::hash<std::string_view>{}(text);
    }
};
using TemplateMap = std::unordered_map<std::string, Event, StringHash, std::equal_to<>>;

struct OpenRange {
    const Domain* domain = nullptr;
    Event event;
    bool tagged_gpu_work = false;
};

struct ThreadState {
    LaneId lane;
    EventBuffer* buffer = nullptr;
    // The sentinel state of a thread whose thread_local objects are being destroyed: a
    // destructor of the program's that still calls NVTX afterwards finds nothing to touch.
    bool exited = false;
    std::vector<OpenRange> stack;
    // Parsed messages per domain: a message repeats millions of times and is parsed once
    // per thread.
    std::vector<std::pair<const Domain*, TemplateMap>> templates;
    // The last ASCII message, compared with strcmp before hashing: loops repeat one name.
    const Domain* last_domain = nullptr;
    std::string last_text;
    Event last_template;

    explicit ThreadState(bool exited_sentinel = false) : exited(exited_sentinel) {}

    LaneId current_lane(Recorder& recorder) {
        if (!lane.valid()) {
            lane = recorder.thread_lane(gettid());
        }
        return lane;
    }
    void emit(Recorder& recorder, const Event& event) { emit(recorder, event, event.end_ns); }
    // The end is written into the buffer's copy, not into `event`: a fresh store read back
    // within a wider copy would stall on store forwarding.
    void emit(Recorder& recorder, const Event& event, std::int64_t end_ticks) {
        if (buffer == nullptr) [[unlikely]] {
            buffer = recorder.new_event_buffer();
        }
        buffer->add(event, end_ticks);
    }
    TemplateMap& templates_of(const Domain* domain) {
        for (auto& [owner, map] : templates) {
            if (owner == domain) {
                return map;
            }
        }
        return templates.emplace_back(domain, TemplateMap{}).second;
    }
};

// The thread's state is reached through a plain pointer: a thread_local with a constructor
// or destructor would be reached through a wrapper that checks its initialisation at every
// access. A second thread_local, touched once per thread, ends the state at thread exit.
thread_local ThreadState* t_state = nullptr;
Immortal<ThreadState> g_exited_thread{true};

struct ThreadExit {
    bool armed = false;
    ~ThreadExit() {
        ThreadState* state = t_state;
        t_state = g_exited_thread.get();
        if (state == nullptr || state == g_exited_thread.get()) {
            return;
        }
        if (state->buffer != nullptr) {
            Recorder& recorder = Recorder::instance();
            if (recorder.state() == Recorder::State::recording) {
                state->buffer->drain(recorder.writer());
            }
            state->buffer->orphaned.store(true, std::memory_order_release);
        }
        delete state;
    }
};
thread_local ThreadExit t_exit;

[[gnu::noinline]] ThreadState& attach_thread() {
    t_exit.armed = true;  // constructs it, so that its destructor runs at thread exit
    t_state = new ThreadState();
    return *t_state;
}

inline ThreadState& current_thread() {
    ThreadState* state = t_state;
    return state != nullptr ? *state : attach_thread();
}

// Events carry raw clock ticks in start_ns and end_ns until their buffer is drained.
inline std::int64_t clock_ticks() {
    return static_cast<std::int64_t>(TscClock::instance().ticks());
}

Domain* domain_or_default(nvtxDomainHandle_t domain) {
    return domain != nullptr ? domain : g_default_domain.get();
}

// ---- from a message to an event template ----

Event make_template(Domain& domain, std::string_view message) {
    store::TraceWriter& writer = Recorder::instance().writer();
    Event event;
    if (domain.is_fulcrum) {
        const RangeAnnotation annotation = parse_range_message(message);
        event.name = writer.intern(annotation.name);
        event.step = annotation.step;
        event.microbatch = annotation.microbatch;
        event.stage = annotation.stage;
        event.phase = annotation.phase;
        event.bytes = annotation.bytes;
        if (!annotation.args_json.empty()) {
            event.args = writer.intern(annotation.args_json);
        }
        return event;
    }
    event.name = writer.intern(message);
    if (!domain.name.empty()) {
        // Names stay as the program wrote them ("ncclAllReduce"); the domain goes to args.
        std::call_once(domain.args_once,
                       [&] { domain.args = writer.intern(domain_args(domain.name)); });
        event.args = domain.args;
    }
    if (domain.is_nccl) {
        // NCCL's own ranges time the host-side enqueue of a collective, not the GPU work
        // (that is the ncclDevKernel_* kernels): communication, but kind range.
        event.category = Category::communication;
    }
    return event;
}

Event template_for_text(ThreadState& thread, Domain& domain, std::string_view text) {
    TemplateMap& map = thread.templates_of(&domain);
    if (auto found = map.find(text); found != map.end()) {
        return found->second;
    }
    if (map.size() >= kMaxTemplatesPerDomain) {
        map.clear();  // messages with ever-changing keys (step=N): keep memory bounded
    }
    return map.emplace(std::string(text), make_template(domain, text)).first->second;
}

const Event& template_for_registered(RegisteredString* string) {
    if (!string->template_ready.load(std::memory_order_acquire)) [[unlikely]] {
        std::lock_guard lock(string->template_mutex);
        if (!string->template_ready.load(std::memory_order_relaxed)) {
            string->event_template = make_template(*string->domain, string->text);
            string->template_ready.store(true, std::memory_order_release);
        }
    }
    return string->event_template;
}

// The event an attribute structure describes, without lane and time.
// Written into `event` (a stack entry or a local), not returned: read back field by field
// after a copy returned in vector registers, the result stalls on store forwarding.
void resolve_into(Event& event, ThreadState& thread, Domain& domain,
                  const nvtxEventAttributes_t* attributes) {
    if (attributes == nullptr || attributes->size < NVTX_EVENT_ATTRIB_STRUCT_SIZE) {
        event = template_for_text(thread, domain, "");
        return;
    }
    switch (attributes->messageType) {
        case NVTX_MESSAGE_TYPE_ASCII: {
            const char* text =
                attributes->message.ascii != nullptr ? attributes->message.ascii : "";
            if (thread.last_domain == &domain && std::strcmp(text, thread.last_text.c_str()) == 0) {
                event = thread.last_template;
                break;
            }
            event = template_for_text(thread, domain, text);
            thread.last_domain = &domain;
            thread.last_text = text;
            thread.last_template = event;
            break;
        }
        case NVTX_MESSAGE_TYPE_UNICODE:
            event = template_for_text(thread, domain, utf8_from_wide(attributes->message.unicode));
            break;
        case NVTX_MESSAGE_TYPE_REGISTERED:
            if (attributes->message.registered != nullptr) {
                event = template_for_registered(attributes->message.registered);
                break;
            }
            [[fallthrough]];
        default:
            event = template_for_text(thread, domain, "");
            break;
    }
    if (domain.is_fulcrum) {
        event.category = category_from_nvtx(attributes->category);
        if (event.category == Category::communication) {
            event.kind = EventKind::collective;
        }
        if (event.bytes < 0) {
            if (attributes->payloadType == NVTX_PAYLOAD_TYPE_UNSIGNED_INT64) {
                event.bytes = static_cast<std::int64_t>(attributes->payload.ullValue);
            } else if (attributes->payloadType == NVTX_PAYLOAD_TYPE_INT64) {
                event.bytes = attributes->payload.llValue;
            }
        }
    }
}

Event resolve(ThreadState& thread, Domain& domain, const nvtxEventAttributes_t* attributes) {
    Event event;
    resolve_into(event, thread, domain, attributes);
    return event;
}

std::string message_text(const nvtxEventAttributes_t* attributes) {
    if (attributes == nullptr || attributes->size < NVTX_EVENT_ATTRIB_STRUCT_SIZE) {
        return "";
    }
    switch (attributes->messageType) {
        case NVTX_MESSAGE_TYPE_ASCII:
            return attributes->message.ascii != nullptr ? attributes->message.ascii : "";
        case NVTX_MESSAGE_TYPE_UNICODE:
            return utf8_from_wide(attributes->message.unicode);
        case NVTX_MESSAGE_TYPE_REGISTERED:
            return attributes->message.registered != nullptr ? attributes->message.registered->text
                                                             : "";
        default:
            return "";
    }
}

// ---- push / pop ----

int push_range(Domain& domain, const nvtxEventAttributes_t* attributes) {
    Recorder& recorder = Recorder::instance();
    if (!recorder.recording()) {
        return 0;
    }
    ThreadState& thread = current_thread();
    if (thread.exited) {
        return 0;
    }
    if (thread.stack.size() >= kMaxStackDepth) {
        recorder.add_dropped(1);  // pushes without pops: keep memory bounded
        return static_cast<int>(thread.stack.size());
    }
    const LaneId lane = thread.current_lane(recorder);
    const int depth = static_cast<int>(thread.stack.size());
    OpenRange& open = thread.stack.emplace_back();
    open.domain = &domain;
    Event& event = open.event;
    resolve_into(event, thread, domain, attributes);
    event.lane = lane;
    if (domain.is_fulcrum && event.step >= 0 && gpu_state() == GpuState::on) {
        push_gpu_correlation(
            pack_semantic_keys(event.step, event.microbatch, event.stage, event.phase));
        open.tagged_gpu_work = true;
    }
    event.start_ns = clock_ticks();
    return depth;
}

int pop_range(Domain& domain) {
    const std::int64_t end_ticks = clock_ticks();
    Recorder& recorder = Recorder::instance();
    if (!recorder.recording()) {
        return -1;
    }
    ThreadState& thread = current_thread();
    if (thread.exited) {
        return -1;
    }
    // Each domain has its own stack per thread; they interleave on one lane.
    for (std::size_t i = thread.stack.size(); i-- > 0;) {
        if (thread.stack[i].domain != &domain) {
            continue;
        }
        const OpenRange& open = thread.stack[i];
        if (open.tagged_gpu_work) {
            pop_gpu_correlation();
        }
        thread.emit(recorder, open.event, end_ticks);
        thread.stack.erase(thread.stack.begin() + static_cast<std::ptrdiff_t>(i));
        return static_cast<int>(i);
    }
    return -1;  // a pop without a push
}

nvtxRangeId_t start_range(Domain& domain, const nvtxEventAttributes_t* attributes) {
    Recorder& recorder = Recorder::instance();
    if (!recorder.recording()) {
        return 0;
    }
    ThreadState& thread = current_thread();
    if (thread.exited) {
        return 0;
    }
    Event event = resolve(thread, domain, attributes);
    event.lane = thread.current_lane(recorder);
    const std::uint64_t id = g_next_range_id.fetch_add(1, std::memory_order_relaxed);
    event.start_ns = clock_ticks();
    std::lock_guard lock(g_started_mutex);
    if (g_started_ranges->size() >= kMaxStartedRanges) {
        recorder.add_dropped(1);  // starts that never end
        return 0;
    }
    g_started_ranges->emplace(id, event);
    return id;
}

void end_range(nvtxRangeId_t id) {
    const std::int64_t end_ticks = clock_ticks();
    Recorder& recorder = Recorder::instance();
    if (!recorder.recording()) {
        return;
    }
    ThreadState& thread = current_thread();
    if (thread.exited) {
        return;
    }
    Event event;
    {
        std::lock_guard lock(g_started_mutex);
        auto found = g_started_ranges->find(id);
        if (found == g_started_ranges->end()) {
            return;
        }
        event = found->second;
        g_started_ranges->erase(found);
    }
    event.end_ns = end_ticks;
    thread.emit(recorder, event);
}

// ---- marks ----

void add_mark(Recorder& recorder, ThreadState& thread, Event event, std::int64_t ticks) {
    if (thread.exited) {
        return;
    }
    event.kind = EventKind::mark;
    event.lane = thread.current_lane(recorder);
    event.start_ns = ticks;
    event.end_ns = ticks;
    thread.emit(recorder, event);
}

// The `fulcrum` domain's metadata marks fill rows, not events; docs/annotations.md.
void fulcrum_mark(Domain& domain, const nvtxEventAttributes_t* attributes, std::int64_t ticks) {
    Recorder& recorder = Recorder::instance();
    const std::string message = message_text(attributes);
    const MarkMessage mark = split_mark_message(message);
    if (mark.name == kRankMark) {
        auto rank = parse_rank_mark(mark.json);
        if (recorder.state() == Recorder::State::idle) {
            recorder.start(rank ? rank->rank : -1);
        }
        if (!recorder.recording()) {
            return;
        }
        if (rank) {
            recorder.set_coordinates(*rank);
        } else {
            recorder.log_problem(rank.error().message, message);
        }
        return;
    }
    if (!recorder.recording()) {
        return;
    }
    const Result<bool> recorded = record_metadata_mark(mark, recorder.rank(), recorder.writer());
    if (!recorded) {
        recorder.log_problem(recorded.error().message, message);
        return;
    }
    if (*recorded) {
        return;
    }
    ThreadState& thread = current_thread();
    if (thread.exited) {
        return;
    }
    if (mark.name == kClockSyncMark) {
        Event event;
        event.name = recorder.writer().intern(kClockSyncMark);
        add_mark(recorder, thread, event, ticks);
        return;
    }
    add_mark(recorder, thread, resolve(thread, domain, attributes), ticks);
}

void mark(Domain& domain, const nvtxEventAttributes_t* attributes) {
    const std::int64_t ticks = clock_ticks();
    if (domain.is_fulcrum) {
        fulcrum_mark(domain, attributes, ticks);
        return;
    }
    Recorder& recorder = Recorder::instance();
    if (!recorder.recording()) {
        return;
    }
    ThreadState& thread = current_thread();
    if (thread.exited) {
        return;
    }
    add_mark(recorder, thread, resolve(thread, domain, attributes), ticks);
}

nvtxEventAttributes_t ascii_attributes(const char* message) {
    nvtxEventAttributes_t attributes = {};
    attributes.version = NVTX_VERSION;
    attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
    attributes.message.ascii = message;
    return attributes;
}

nvtxEventAttributes_t wide_attributes(const wchar_t* message) {
    nvtxEventAttributes_t attributes = ascii_attributes(nullptr);
    attributes.messageType = NVTX_MESSAGE_TYPE_UNICODE;
    attributes.message.unicode = message;
    return attributes;
}

// ---- the callbacks NVTX calls, by module and slot ----

void NVTX_API on_mark_ex(const nvtxEventAttributes_t* a) {
    mark(*g_default_domain, a);
}
void NVTX_API on_mark_a(const char* m) {
    const auto a = ascii_attributes(m);
    mark(*g_default_domain, &a);
}
void NVTX_API on_mark_w(const wchar_t* m) {
    const auto a = wide_attributes(m);
    mark(*g_default_domain, &a);
}
nvtxRangeId_t NVTX_API on_range_start_ex(const nvtxEventAttributes_t* a) {
    return start_range(*g_default_domain, a);
}
nvtxRangeId_t NVTX_API on_range_start_a(const char* m) {
    const auto a = ascii_attributes(m);
    return start_range(*g_default_domain, &a);
}
nvtxRangeId_t NVTX_API on_range_start_w(const wchar_t* m) {
    const auto a = wide_attributes(m);
    return start_range(*g_default_domain, &a);
}
void NVTX_API on_range_end(nvtxRangeId_t id) {
    end_range(id);
}
int NVTX_API on_range_push_ex(const nvtxEventAttributes_t* a) {
    return push_range(*g_default_domain, a);
}
int NVTX_API on_range_push_a(const char* m) {
    const auto a = ascii_attributes(m);
    return push_range(*g_default_domain, &a);
}
int NVTX_API on_range_push_w(const wchar_t* m) {
    const auto a = wide_attributes(m);
    return push_range(*g_default_domain, &a);
}
int NVTX_API on_range_pop() {
    return pop_range(*g_default_domain);
}
void NVTX_API on_name_os_thread_a(uint32_t tid, const char* name) {
    if (name != nullptr) {
        Recorder::instance().name_thread(tid, name);
    }
}
void NVTX_API on_name_os_thread_w(uint32_t tid, const wchar_t* name) {
    if (name != nullptr) {
        Recorder::instance().name_thread(tid, utf8_from_wide(name));
    }
}

void NVTX_API on_domain_mark_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
    mark(*domain_or_default(d), a);
}
nvtxRangeId_t NVTX_API on_domain_range_start_ex(nvtxDomainHandle_t d,
                                                const nvtxEventAttributes_t* a) {
    return start_range(*domain_or_default(d), a);
}
void NVTX_API on_domain_range_end(nvtxDomainHandle_t, nvtxRangeId_t id) {
    end_range(id);
}
int NVTX_API on_domain_range_push_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
    return push_range(*domain_or_default(d), a);
}
int NVTX_API on_domain_range_pop(nvtxDomainHandle_t d) {
    return pop_range(*domain_or_default(d));
}

nvtxStringHandle_t register_string(nvtxDomainHandle_t d, std::string text) {
    auto* string = new RegisteredString();
    string->domain = domain_or_default(d);
    string->text = std::move(text);
    std::lock_guard lock(g_registry_mutex);
    g_registered_strings->push_back(string);
    return string;
}
nvtxStringHandle_t NVTX_API on_domain_register_string_a(nvtxDomainHandle_t d, const char* s) {
    return register_string(d, s != nullptr ? s : "");
}
nvtxStringHandle_t NVTX_API on_domain_register_string_w(nvtxDomainHandle_t d, const wchar_t* s) {
    return register_string(d, utf8_from_wide(s));
}

nvtxDomainHandle_t create_domain(std::string name) {
    // One handle per name for the whole process: each shared object creates its own, and
    // NCCL's and the program's must land in one domain.
    std::lock_guard lock(g_registry_mutex);
    if (auto found = g_domains->find(name); found != g_domains->end()) {
        return found->second;
    }
    auto* domain = new Domain();
    domain->name = name;
    domain->is_fulcrum = name == "fulcrum";
    domain->is_nccl = name == "NCCL";
    g_domains->emplace(std::move(name), domain);
    return domain;
}
nvtxDomainHandle_t NVTX_API on_domain_create_a(const char* name) {
    return create_domain(name != nullptr ? name : "");
}
nvtxDomainHandle_t NVTX_API on_domain_create_w(const wchar_t* name) {
    return create_domain(utf8_from_wide(name));
}
// Handles are shared by every module that created the domain: they outlive any one destroy.
void NVTX_API on_domain_destroy(nvtxDomainHandle_t) {}

void NVTX_API on_name_cuda_stream_a(void* stream, const char* name) {
    if (name != nullptr) {
        name_gpu_stream(stream, name);
    }
}
void NVTX_API on_name_cuda_stream_w(void* stream, const wchar_t* name) {
    if (name != nullptr) {
        name_gpu_stream(stream, utf8_from_wide(name));
    }
}

// ---- installation ----

template <typename Function>
NvtxFunctionPointer as_slot(Function function) {
    return reinterpret_cast<NvtxFunctionPointer>(function);
}

struct Slot {
    unsigned int id;
    NvtxFunctionPointer function;
};

bool fill_module(const NvtxExportTableCallbacks& callbacks, NvtxCallbackModule module,
                 std::initializer_list<Slot> slots) {
    NvtxFunctionTable table = nullptr;
    unsigned int size = 0;
    if (callbacks.GetModuleFunctionTable(module, &table, &size) == 0 || table == nullptr) {
        return false;
    }
    for (const Slot& slot : slots) {
        if (slot.id < size && table[slot.id] != nullptr) {
            *table[slot.id] = slot.function;
        }
    }
    return true;
}

void before_fork() {
    g_registry_mutex.lock();
    g_started_mutex.lock();
    Recorder::instance().lock_for_fork();
}
void after_fork_in_parent() {
    Recorder::instance().unlock_after_fork();
    g_started_mutex.unlock();
    g_registry_mutex.unlock();
}
void after_fork_in_child() {
    Recorder::instance().after_fork_in_child();
    g_started_mutex.unlock();
    g_registry_mutex.unlock();
}

// Once per process, whichever entry point comes first. The library is linked with
// -z nodelete, so these handlers never outlive its code.
bool set_up_process() {
    static std::once_flag once;
    static bool accepted = false;
    std::call_once(once, [] {
        if (Recorder::instance().declined()) {
            say("FULCRUM_CAPTURE_DIR is not set; not recording (run the program under "
                "`fulcrum capture`)");
            return;
        }
        // mpirun's daemons are not ranks (rank_environment.h); they are left alone quietly.
        std::error_code ec;
        const std::string executable =
            std::filesystem::read_symlink("/proc/self/exe", ec).filename().string();
        if (is_launcher_program(program_invocation_short_name) || is_launcher_program(executable)) {
            return;
        }
        pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
        accepted = true;
    });
    return accepted;
}

}  // namespace
}  // namespace fulcrum::collect

using namespace fulcrum::collect;

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    NvtxGetExportTableFunc_t get_export_table) {
    if (!set_up_process() || get_export_table == nullptr) {
        return 0;
    }
    const auto* callbacks =
        static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
    if (callbacks == nullptr || callbacks->struct_size < sizeof(NvtxExportTableCallbacks)) {
        return 0;
    }
    if (const auto* version =
            static_cast<const NvtxExportTableVersionInfo*>(get_export_table(NVTX_ETID_VERSIONINFO));
        version != nullptr && version->struct_size >= sizeof(NvtxExportTableVersionInfo) &&
        version->SetInjectionNvtxVersion != nullptr) {
        version->SetInjectionNvtxVersion(NVTX_VERSION);
    }
    const bool core = fill_module(*callbacks, NVTX_CB_MODULE_CORE,
                                  {{NVTX_CBID_CORE_MarkEx, as_slot(on_mark_ex)},
                                   {NVTX_CBID_CORE_MarkA, as_slot(on_mark_a)},
                                   {NVTX_CBID_CORE_MarkW, as_slot(on_mark_w)},
                                   {NVTX_CBID_CORE_RangeStartEx, as_slot(on_range_start_ex)},
                                   {NVTX_CBID_CORE_RangeStartA, as_slot(on_range_start_a)},
                                   {NVTX_CBID_CORE_RangeStartW, as_slot(on_range_start_w)},
                                   {NVTX_CBID_CORE_RangeEnd, as_slot(on_range_end)},
                                   {NVTX_CBID_CORE_RangePushEx, as_slot(on_range_push_ex)},
                                   {NVTX_CBID_CORE_RangePushA, as_slot(on_range_push_a)},
                                   {NVTX_CBID_CORE_RangePushW, as_slot(on_range_push_w)},
                                   {NVTX_CBID_CORE_RangePop, as_slot(on_range_pop)},
                                   {NVTX_CBID_CORE_NameOsThreadA, as_slot(on_name_os_thread_a)},
                                   {NVTX_CBID_CORE_NameOsThreadW, as_slot(on_name_os_thread_w)}});
    const bool core2 =
        fill_module(*callbacks, NVTX_CB_MODULE_CORE2,
                    {{NVTX_CBID_CORE2_DomainMarkEx, as_slot(on_domain_mark_ex)},
                     {NVTX_CBID_CORE2_DomainRangeStartEx, as_slot(on_domain_range_start_ex)},
                     {NVTX_CBID_CORE2_DomainRangeEnd, as_slot(on_domain_range_end)},
                     {NVTX_CBID_CORE2_DomainRangePushEx, as_slot(on_domain_range_push_ex)},
                     {NVTX_CBID_CORE2_DomainRangePop, as_slot(on_domain_range_pop)},
                     {NVTX_CBID_CORE2_DomainRegisterStringA, as_slot(on_domain_register_string_a)},
                     {NVTX_CBID_CORE2_DomainRegisterStringW, as_slot(on_domain_register_string_w)},
                     {NVTX_CBID_CORE2_DomainCreateA, as_slot(on_domain_create_a)},
                     {NVTX_CBID_CORE2_DomainCreateW, as_slot(on_domain_create_w)},
                     {NVTX_CBID_CORE2_DomainDestroy, as_slot(on_domain_destroy)}});
    // Stream names matter only with GPU tracing; a program without CUDA has no such module.
    fill_module(*callbacks, NVTX_CB_MODULE_CUDART,
                {{NVTX_CBID_CUDART_NameCudaStreamA, as_slot(on_name_cuda_stream_a)},
                 {NVTX_CBID_CUDART_NameCudaStreamW, as_slot(on_name_cuda_stream_w)}});
    fill_module(*callbacks, NVTX_CB_MODULE_CUDA,
                {{NVTX_CBID_CUDA_NameCuStreamA, as_slot(on_name_cuda_stream_a)},
                 {NVTX_CBID_CUDA_NameCuStreamW, as_slot(on_name_cuda_stream_w)}});
    return core && core2 ? 1 : 0;
}

// CUDA_INJECTION64_PATH: called from cuInit, before the program's first CUDA work.
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
    if (!set_up_process()) {
        return 0;
    }
    Recorder& recorder = Recorder::instance();
    if (recorder.gpu_mode() == GpuMode::off) {
        return 1;
    }
    if (recorder.state() == Recorder::State::idle) {
        recorder.start(-1);  // opens the writer and starts GPU tracing
    }
    // Registered now, after the CUDA runtime registered its own teardown, so it runs before
    // it: CUPTI's last buffers are flushed while the driver is still there.
    std::atexit([] { flush_gpu_tracing(); });
    return 1;
}
