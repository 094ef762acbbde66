// MemorySink: a TraceSink that keeps what it is given in plain vectors and checks it as it
// comes, for importer tests and fuzz targets that must not touch SQLite.
//
// Checks (each failure is one line in problems()): an event's lane was handed out, its name
// and args ids were interned, it does not end before it starts, a mark has no duration, and
// its enums hold values the model defines; a lane's rank and a renamed lane exist. Memory is
// bounded for fuzzing: past `max_events` events are counted, not kept.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "core/trace/trace_sink.h"

namespace fulcrum {

class MemorySink final : public TraceSink {
public:
    explicit MemorySink(std::size_t max_events = SIZE_MAX) : max_events_(max_events) {}

    void add_rank(const RankInfo& rank) override;
    LaneId add_lane(std::int32_t rank, LaneKind kind, std::string_view name,
                    std::int64_t native_id = -1) override;
    void rename_lane(LaneId lane, std::string_view name) override;
    void set_run_config(std::string config_json) override { config_json_ = std::move(config_json); }
    StringId intern(std::string_view text) override;
    void add_events(const Event* events, std::size_t count) override;
    void add_workload(const WorkloadEntry& entry) override { workload_.push_back(entry); }
    void add_counter(const CounterSample& sample) override { counters_.push_back(sample); }
    void add_import_log(const ImportLogEntry& entry) override { import_log_.push_back(entry); }

    const std::vector<RankInfo>& ranks() const { return ranks_; }
    const std::vector<LaneInfo>& lanes() const { return lanes_; }  // lanes_[id - 1]
    const LaneInfo* lane(LaneId id) const;
    const std::vector<Event>& events() const { return events_; }
    std::int64_t event_count() const { return event_count_; }  // including those not kept
    std::string_view string(StringId id) const;
    const std::string& config_json() const { return config_json_; }
    const std::vector<WorkloadEntry>& workload() const { return workload_; }
    const std::vector<CounterSample>& counters() const { return counters_; }
    const std::vector<ImportLogEntry>& import_log() const { return import_log_; }
    // Records the log says were skipped (Σ ImportLogEntry::skipped).
    std::int64_t skipped() const;
    const std::vector<std::string>& problems() const { return problems_; }

private:
    void problem(std::string text);

    std::size_t max_events_;
    std::vector<RankInfo> ranks_;
    std::vector<LaneInfo> lanes_;
    std::vector<Event> events_;
    std::int64_t event_count_ = 0;
    std::vector<std::string> strings_ = {""};  // index = StringId value
    std::unordered_map<std::string, StringId> string_ids_;
    std::string config_json_ = "{}";
    std::vector<WorkloadEntry> workload_;
    std::vector<CounterSample> counters_;
    std::vector<ImportLogEntry> import_log_;
    std::vector<std::string> problems_;
};

}  // namespace fulcrum
