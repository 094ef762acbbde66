// The engine's NVTX annotations in the `fulcrum` domain (docs/annotations.md), which the
// collector turns into steps, micro-batches, stages, phases, collectives with bytes, the
// rank's 4D coordinates and the workload table.
//
// When no NVTX tool is attached (NVTX_INJECTION64_PATH unset) every call returns at once,
// without formatting its message; NVTX itself would ignore the calls, but the strings would
// still be built.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/trace/model.h"

namespace fulcrum::engine::instrument {

struct Keys {
    int step = -1;
    int microbatch = -1;
    int stage = -1;
    Phase phase = Phase::none;
    std::int64_t bytes = -1;
    int chunk = -1;  // the stage's model chunk a pass runs (its virtual stage when interleaved)
};

// True when an NVTX tool is attached to this process.
bool active();

// Keys that ranges opened on this thread inherit: the model's layer ranges know nothing of
// steps and micro-batches, the schedule that calls them does.
class KeyScope {
public:
    explicit KeyScope(const Keys& keys);
    ~KeyScope();
    KeyScope(const KeyScope&) = delete;
    KeyScope& operator=(const KeyScope&) = delete;

private:
    Keys saved_;
};
const Keys& current_keys();
// The current keys with `bytes` set, for a collective inside the current scope.
Keys with_bytes(std::int64_t bytes);

// A push/pop range for the lifetime of the object, on the calling thread.
class Range {
public:
    Range(std::string_view name, Category category, const Keys& keys);
    // With the keys of the enclosing KeyScope.
    Range(std::string_view name, Category category) : Range(name, category, current_keys()) {}
    ~Range() { end(); }
    // Closes the range before the object's scope does (ranges must nest on a thread).
    void end();
    Range(const Range&) = delete;
    Range& operator=(const Range&) = delete;

private:
    bool pushed_ = false;
};

// A Range that also says how much CPU its thread used inside it: after the pop, a
// `fulcrum.cpu` mark whose payload is that thread CPU time in ns (docs/annotations.md). The
// passes and the optimizer step use it: where ranks time-share cores a pass's wall time holds
// the waits for a core, its CPU time only the work (core/analysis/cost_model.cpp fits on it).
class CpuTimedRange {
public:
    CpuTimedRange(std::string_view name, Category category);
    ~CpuTimedRange() { end(); }
    void end();
    CpuTimedRange(const CpuTimedRange&) = delete;
    CpuTimedRange& operator=(const CpuTimedRange&) = delete;

private:
    Range range_;
    std::int64_t cpu_start_ns_ = -1;  // -1: no tool attached, nothing to mark
};

// A mark `NAME JSON` (JSON may be empty).
void mark(std::string_view name, std::string_view json = {});
void name_this_thread(std::string_view name);

// `NAME key=value...` as docs/annotations.md spells it (core/trace format_range_message).
std::string format_message(std::string_view name, const Keys& keys);

}  // namespace fulcrum::engine::instrument
