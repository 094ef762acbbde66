// TraceSink: where a producer of trace data (an importer, a collector, the simulator) puts
// it. The store's TraceWriter is the sink that writes a file; MemorySink keeps everything in
// memory and checks it, so importers can be tested and fuzzed without SQLite (Perfetto's
// importers write through "trackers" the same way).
//
// Ids come from the sink: a lane id from add_lane, a string id from intern. Events refer to
// both; a sink may assume they were handed out before the events that use them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/trace/model.h"

namespace fulcrum {

class TraceSink {
public:
    virtual ~TraceSink() = default;

    // A rank's row; a second call for the same rank replaces the first.
    virtual void add_rank(const RankInfo& rank) = 0;
    virtual LaneId add_lane(std::int32_t rank, LaneKind kind, std::string_view name,
                            std::int64_t native_id = -1) = 0;
    // A thread's or stream's name learnt after its lane already holds events.
    virtual void rename_lane(LaneId lane, std::string_view name) = 0;
    // The run's configuration JSON (docs/schema.md, run.config).
    virtual void set_run_config(std::string config_json) = 0;
    virtual StringId intern(std::string_view text) = 0;
    virtual void add_events(const Event* events, std::size_t count) = 0;
    void add_event(const Event& event) { add_events(&event, 1); }
    virtual void add_workload(const WorkloadEntry& entry) = 0;
    virtual void add_counter(const CounterSample& sample) = 0;
    virtual void add_import_log(const ImportLogEntry& entry) = 0;
};

}  // namespace fulcrum
