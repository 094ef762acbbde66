#include "engine/instrument/annotations.h"

#include "core/trace/annotations.h"

#include <algorithm>
#include <cstdlib>
#include <ctime>

#if FULCRUM_HAVE_NVTX
#include <sys/syscall.h>
#include <unistd.h>

#include <nvtx3/nvToolsExt.h>
#endif

namespace fulcrum::engine::instrument {
namespace {

#if FULCRUM_HAVE_NVTX
nvtxDomainHandle_t domain() {
    static const nvtxDomainHandle_t handle = nvtxDomainCreateA("fulcrum");
    return handle;
}

nvtxEventAttributes_t attributes(const std::string& message, Category category,
                                 std::int64_t bytes) {
    nvtxEventAttributes_t attributes{};
    attributes.version = NVTX_VERSION;
    attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attributes.category = static_cast<std::uint32_t>(category);
    attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
    attributes.message.ascii = message.c_str();
    if (bytes >= 0) {
        attributes.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
        attributes.payload.ullValue = static_cast<std::uint64_t>(bytes);
    }
    return attributes;
}
#endif

thread_local Keys t_current_keys;

}  // namespace

KeyScope::KeyScope(const Keys& keys) : saved_(t_current_keys) {
    t_current_keys = keys;
}
KeyScope::~KeyScope() {
    t_current_keys = saved_;
}
const Keys& current_keys() {
    return t_current_keys;
}

Keys with_bytes(std::int64_t bytes) {
    Keys keys = t_current_keys;
    keys.bytes = bytes;
    return keys;
}

bool active() {
#if FULCRUM_HAVE_NVTX
    static const bool attached = std::getenv("NVTX_INJECTION64_PATH") != nullptr;
    return attached;
#else
    return false;
#endif
}

std::string format_message(std::string_view name, const Keys& keys) {
    RangeAnnotation annotation;
    annotation.name = std::string(name);
    annotation.step = keys.step;
    annotation.microbatch = keys.microbatch;
    annotation.stage = static_cast<std::int16_t>(keys.stage);
    annotation.phase = keys.phase;
    annotation.chunk = keys.chunk;
    annotation.bytes = keys.bytes;
    return format_range_message(annotation);
}

Range::Range(std::string_view name, Category category, const Keys& keys) {
#if FULCRUM_HAVE_NVTX
    if (active()) {
        const std::string message = format_message(name, keys);
        const nvtxEventAttributes_t attr = attributes(message, category, keys.bytes);
        nvtxDomainRangePushEx(domain(), &attr);
        pushed_ = true;
    }
#else
    (void)name;
    (void)category;
    (void)keys;
#endif
}

void Range::end() {
#if FULCRUM_HAVE_NVTX
    if (pushed_) {
        nvtxDomainRangePop(domain());
        pushed_ = false;
    }
#endif
}

namespace {
std::int64_t thread_cpu_ns() {
    timespec now{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}
}  // namespace

CpuTimedRange::CpuTimedRange(std::string_view name, Category category)
    : range_(name, category), cpu_start_ns_(active() ? thread_cpu_ns() : -1) {}

void CpuTimedRange::end() {
    range_.end();
#if FULCRUM_HAVE_NVTX
    if (cpu_start_ns_ >= 0) {
        const std::string message(kCpuMark);
        const nvtxEventAttributes_t attr =
            attributes(message, Category::schedule,
                       std::max<std::int64_t>(0, thread_cpu_ns() - cpu_start_ns_));
        nvtxDomainMarkEx(domain(), &attr);
        cpu_start_ns_ = -1;
    }
#endif
}

void mark(std::string_view name, std::string_view json) {
#if FULCRUM_HAVE_NVTX
    if (!active()) {
        return;
    }
    std::string message(name);
    if (!json.empty()) {
        message += ' ';
        message += json;
    }
    const nvtxEventAttributes_t attr = attributes(message, Category::schedule, -1);
    nvtxDomainMarkEx(domain(), &attr);
#else
    (void)name;
    (void)json;
#endif
}

void name_this_thread(std::string_view name) {
#if FULCRUM_HAVE_NVTX
    if (active()) {
        nvtxNameOsThreadA(static_cast<std::uint32_t>(syscall(SYS_gettid)),
                          std::string(name).c_str());
    }
#else
    (void)name;
#endif
}

}  // namespace fulcrum::engine::instrument
