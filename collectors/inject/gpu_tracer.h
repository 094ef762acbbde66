// GPU tracing through CUPTI's activity API: kernels, copies, memsets, synchronizations,
// runtime and driver calls, external correlations, written as events of the rank's GPU
// stream lanes (and its host thread lanes, for API calls).
//
// libcupti is opened with dlopen when tracing starts, never linked: the injection library
// must load in processes on machines without a GPU or driver, and in CUDA programs built
// against another toolkit. Without a GPU, CUPTI answers CUPTI_ERROR_UNKNOWN (999) or "no
// device"; that is "GPU tracing off", not an error. Another CUPTI subscriber (Nsight
// Systems) makes CUPTI answer CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED; we step aside.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/trace/model.h"

namespace fulcrum::store {
class TraceWriter;
}

namespace fulcrum::collect {

// Where GPU records go: the rank's recorder (recorder.h), which starts the tracer with itself.
// An interface, so that the tracer does not reach back into the recorder that owns it.
class GpuRecordTarget {
public:
    virtual store::TraceWriter& writer() = 0;
    virtual std::int32_t rank() const = 0;
    // The lane of a host thread (for API records), by its system thread id.
    virtual LaneId thread_lane(std::int64_t tid) = 0;
    // Records arrive until the recorder has stopped; after that they are dropped.
    virtual bool takes_records() const = 0;
    virtual void add_dropped(std::int64_t count) = 0;

protected:
    ~GpuRecordTarget() = default;
};

enum class GpuState {
    pending,         // not tried yet
    off,             // FULCRUM_GPU=off
    on,              // CUPTI activity tracing is running
    no_gpu,          // no GPU or no driver on this machine
    other_profiler,  // another CUPTI subscriber holds the GPU (Nsight Systems)
    unavailable,     // libcupti not found, or built without CUDA
    failed,          // CUPTI refused for another reason (said on stderr)
};
std::string_view to_string(GpuState state);

// Idempotent; the first call decides. `message` is one line for the user when tracing did
// not start and it was asked for.
struct GpuStart {
    GpuState state = GpuState::pending;
    std::string message;
};
GpuStart start_gpu_tracing(GpuRecordTarget& target);
// FULCRUM_GPU=off: CUPTI is never loaded.
void turn_gpu_tracing_off();
GpuState gpu_state();

// Hands every completed CUPTI buffer to the writer (cuptiActivityFlushAll, forced).
void flush_gpu_tracing();

// Tags the CUDA work launched by this thread until the matching pop with `id`
// (cuptiActivityPushExternalCorrelationId): the semantic keys of the enclosing `fulcrum`
// range, packed by pack_semantic_keys (core/trace/annotations.h), so kernels and copies get step /
// micro-batch / stage / phase.
void push_gpu_correlation(std::uint64_t id);
void pop_gpu_correlation();

// nvtxNameCudaStreamA / nvtxNameCuStreamA: names the stream's lane.
void name_gpu_stream(void* stream, std::string_view name);

}  // namespace fulcrum::collect
