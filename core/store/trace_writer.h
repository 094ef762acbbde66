// TraceWriter: records a trace into one SQLite file from any number of threads.
//
// Producers append to an in-memory batch under a short lock; a background thread writes
// batches in transactions. Memory is bounded (`max_queued_batches`): when the disk cannot keep
// up the producer either waits (`Overflow::block`, for importers and the simulator) or the
// batch's events are counted as dropped (`Overflow::drop`, for collectors inside a traced
// program, which must never wait on disk). The writer commits at least every
// `commit_interval`, so a killed process loses at most that much; WAL mode with
// synchronous=NORMAL keeps committed data across a process kill.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/store/event_blocks.h"
#include "core/store/sqlite_handle.h"
#include "core/trace/model.h"
#include "core/trace/trace_sink.h"
#include "core/util/result.h"

namespace fulcrum::store {

struct WriterOptions {
    enum class Overflow { block, drop };
    std::size_t batch_events = 16384;
    // 32 batches of 16384 64-byte events: at most 32 MiB queued.
    std::size_t max_queued_batches = 32;
    Overflow overflow = Overflow::block;
    std::chrono::milliseconds commit_interval{250};
    // Replace an existing file instead of refusing to touch it.
    bool overwrite = false;
    // False for files that are thrown away when the process stops before close() (imports,
    // which remove a failed file anyway): no journal and no syncs, so every page is written
    // once instead of to the WAL and then again into the file (docs/decisions.md).
    bool durable = true;
    // True where the producer is slower than the writer (an import's parser): the lane index
    // (event_by_lane_time) is made with the tables and kept up as rows go in, on the writer's
    // thread while the producer still works, so that close() builds only the others after the
    // last row (docs/decisions.md, "Import at full speed").
    bool lane_index_while_writing = false;
    // False for a file that is read once and thrown away (import's scratch rank files, which
    // merge copies and indexes itself): close() builds no indexes; readers scan without them.
    bool build_indexes = true;
    // Where events go: rows of the event table (what users query with SQL: merged and
    // simulated runs), or compressed blocks of up to 16K events of a lane in event_block (rank
    // files: ~6 bytes an event instead of ~85, and several times the rows' rate; event_blocks.h).
    // With blocks a lane's events wait for their block to fill, and go out anyway once they
    // have waited half a commit interval, so a killed process loses at most two intervals.
    enum class EventStorage { rows, blocks };
    EventStorage events = EventStorage::rows;
};

struct WriterStats {
    std::int64_t events_written = 0;
    std::int64_t events_dropped = 0;  // by Overflow::drop, or after a write failure
    std::int64_t commits = 0;
};

class TraceWriter final : public TraceSink {
public:
    static Result<std::unique_ptr<TraceWriter>> create(const std::string& path, const RunInfo& run,
                                                       WriterOptions options = {});
    ~TraceWriter();  // closes, if close() was not called
    TraceWriter(const TraceWriter&) = delete;
    TraceWriter& operator=(const TraceWriter&) = delete;

    // Every call below is thread-safe and never touches the disk itself.
    void add_rank(const RankInfo& rank) override;
    LaneId add_lane(std::int32_t rank, LaneKind kind, std::string_view name,
                    std::int64_t native_id = -1) override;
    // A collector learns a thread's or stream's name (nvtxNameOsThread) after its lane
    // already holds events.
    void rename_lane(LaneId lane, std::string_view name) override;
    // The run's configuration arrives from inside the traced program (the `fulcrum.run`
    // mark), after create() wrote the run row.
    void set_run_config(std::string config_json) override;
    StringId intern(std::string_view text) override;
    void add_event(const Event& event);
    // Many at once under one lock: collectors buffer events per thread and hand them over
    // in blocks, so that threads do not meet on the writer's lock at every event.
    void add_events(const Event* events, std::size_t count) override;
    void add_workload(const WorkloadEntry& entry) override;
    void add_counter(const CounterSample& sample) override;
    void add_import_log(const ImportLogEntry& entry) override;
    // Records lost before they reached the writer (e.g. CUPTI's dropped-record count).
    void add_dropped_records(std::int32_t rank, std::int64_t count);

    // Blocks until everything added so far is committed (or the writer has failed).
    void flush();
    // Flushes, builds indexes, marks the file's ranks complete and leaves a single
    // self-contained file (no -wal beside it). Returns the first write failure, if any.
    Status close();

    // The first write failure (a full disk, say): recording stopped, the program goes on.
    std::optional<Error> failure() const;
    WriterStats stats() const;
    const std::string& path() const { return path_; }

private:
    struct Batch {
        std::vector<Event> events;
        std::vector<std::pair<StringId, std::string>> strings;
        std::vector<LaneInfo> lanes;
        std::vector<RankInfo> ranks;
        std::vector<WorkloadEntry> workload;
        std::vector<CounterSample> counters;
        std::vector<ImportLogEntry> import_log;
        std::vector<std::pair<LaneId, std::string>> lane_names;
        std::optional<std::string> run_config;
        bool empty() const;
    };
    struct Statements;

    TraceWriter(Database db, std::string path, WriterOptions options);
    void run_writer_thread();
    void hand_over_current_batch(std::unique_lock<std::mutex>& lock);
    // `write_all_blocks`: every staged block goes out in this transaction (flush, close).
    Status write_batches(std::deque<Batch>& batches, Statements& statements, bool write_all_blocks);
    bool blocks_due(bool write_all_blocks) const;
    Status write_lane_statistics();
    // Rows: each lane's longest event so far, for lane.max_duration_ns at close (blocks keep
    // theirs in event_block.duration_max).
    void note_longest(const std::vector<Event>& events);

    Database db_;
    std::string path_;
    WriterOptions options_;

    mutable std::mutex mutex_;
    std::condition_variable work_ready_;
    std::condition_variable space_free_;
    std::condition_variable batches_written_;
    Batch current_;
    std::deque<Batch> queue_;
    bool writing_ = false;
    bool stopping_ = false;
    bool closed_ = false;
    bool write_all_blocks_ = false;  // flush() asks for the staged blocks too
    std::optional<Error> failure_;
    WriterStats stats_;

    struct StringHash {
        using is_transparent = void;
        std::size_t operator()(std::string_view text) const {
            return std::hash<std::string_view>{}(text);
        }
    };
    std::unordered_map<std::string, StringId, StringHash, std::equal_to<>> string_ids_;
    std::uint32_t next_string_id_ = 1;
    std::uint32_t next_lane_id_ = 1;
    std::unordered_map<std::int32_t, RankInfo> ranks_;
    // The longest event of each lane written, for lane.max_duration_ns; the writer thread's
    // own until close() joins it. An end − start beyond int64 leaves the column to SQL.
    std::unordered_map<std::uint32_t, std::int64_t> longest_;
    bool longest_overflowed_ = false;
    // Block storage (WriterOptions::EventStorage::blocks): the writer thread's, like longest_.
    std::unique_ptr<EventBlockWriter> blocks_;
    std::chrono::steady_clock::time_point staged_since_;  // when blocks_ last went from empty

    std::thread thread_;
};

}  // namespace fulcrum::store
