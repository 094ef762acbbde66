#include "core/store/trace_writer.h"

#include <sqlite3.h>

#include <filesystem>
#include <system_error>

#include "core/store/event_rows.h"
#include "core/store/schema.h"

namespace fulcrum::store {

struct TraceWriter::Statements {
    Statement string, lane, rank, workload, counter, import_log, lane_name, run_config;
    EventInserter events;
};

bool TraceWriter::Batch::empty() const {
    return events.empty() && strings.empty() && lanes.empty() && ranks.empty() &&
           workload.empty() && counters.empty() && import_log.empty() && lane_names.empty() &&
           !run_config.has_value();
}

Result<std::unique_ptr<TraceWriter>> TraceWriter::create(const std::string& path,
                                                         const RunInfo& run,
                                                         WriterOptions options) {
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) {
        if (!options.overwrite) {
            return Error{ErrorCode::io, "'" + path +
                                            "' already exists; remove it or choose another "
                                            "path (nothing was overwritten)."};
        }
        for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
            std::filesystem::remove(path + suffix, ec);
        }
    }
    auto db = Database::open(path, Database::Mode::create);
    if (!db) {
        return db.error();
    }
    if (auto status = options.durable ? configure_for_recording(*db) : configure_for_bulk(*db);
        !status) {
        return Error{ErrorCode::io, "cannot write '" + path + "': " + status.error().message};
    }
    if (auto status = create_schema(*db); !status) {
        return Error{ErrorCode::io, "cannot write '" + path + "': " + status.error().message};
    }
    if (options.lane_index_while_writing && options.build_indexes) {
        if (auto status = create_lane_index(*db); !status) {
            return Error{ErrorCode::io, "cannot write '" + path + "': " + status.error().message};
        }
    }
    auto insert_run = db->prepare(
        "INSERT INTO run (id, name, command, start_utc_ns, config, origin, producer) "
        "VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6)");
    if (!insert_run) {
        return insert_run.error();
    }
    insert_run->bind(1, run.name);
    insert_run->bind(2, run.command);
    insert_run->bind(3, run.start_utc_ns);
    insert_run->bind(4, run.config_json);
    insert_run->bind(5, to_string(run.origin));
    insert_run->bind(6, run.producer);
    if (!insert_run->run()) {
        return db->error_for("cannot write");
    }
    insert_run = Statement();
    return std::unique_ptr<TraceWriter>(new TraceWriter(std::move(*db), path, options));
}

TraceWriter::TraceWriter(Database db, std::string path, WriterOptions options)
    : db_(std::move(db)), path_(std::move(path)), options_(options) {
    current_.events.reserve(options_.batch_events);
    thread_ = std::thread([this] { run_writer_thread(); });
}

TraceWriter::~TraceWriter() {
    if (!closed_) {
        (void)close();
    }
}

void TraceWriter::add_rank(const RankInfo& rank) {
    std::lock_guard lock(mutex_);
    auto& stored = ranks_[rank.rank];
    const std::int64_t dropped = stored.dropped_records;
    stored = rank;
    stored.dropped_records += dropped;
    current_.ranks.push_back(stored);
}

void TraceWriter::add_dropped_records(std::int32_t rank, std::int64_t count) {
    std::lock_guard lock(mutex_);
    auto found = ranks_.find(rank);
    if (found == ranks_.end()) {
        ranks_[rank].dropped_records = count;  // written with the rank when it is added
        ranks_[rank].rank = rank;
        return;
    }
    found->second.dropped_records += count;
    current_.ranks.push_back(found->second);
}

LaneId TraceWriter::add_lane(std::int32_t rank, LaneKind kind, std::string_view name,
                             std::int64_t native_id) {
    std::lock_guard lock(mutex_);
    LaneInfo lane;
    lane.id = LaneId{next_lane_id_++};
    lane.rank = rank;
    lane.kind = kind;
    lane.name = std::string(name);
    lane.native_id = native_id;
    current_.lanes.push_back(lane);
    return lane.id;
}

void TraceWriter::rename_lane(LaneId lane, std::string_view name) {
    std::lock_guard lock(mutex_);
    current_.lane_names.emplace_back(lane, std::string(name));
}

void TraceWriter::set_run_config(std::string config_json) {
    std::lock_guard lock(mutex_);
    current_.run_config = std::move(config_json);
}

StringId TraceWriter::intern(std::string_view text) {
    std::lock_guard lock(mutex_);
    if (auto found = string_ids_.find(text); found != string_ids_.end()) {
        return found->second;
    }
    const StringId id{next_string_id_++};
    string_ids_.emplace(std::string(text), id);
    current_.strings.emplace_back(id, std::string(text));
    return id;
}

void TraceWriter::add_event(const Event& event) {
    std::unique_lock lock(mutex_);
    if (failure_) {
        ++stats_.events_dropped;
        return;
    }
    current_.events.push_back(event);
    if (current_.events.size() >= options_.batch_events) {
        hand_over_current_batch(lock);
    }
}

void TraceWriter::add_events(const Event* events, std::size_t count) {
    std::unique_lock lock(mutex_);
    if (failure_) {
        stats_.events_dropped += static_cast<std::int64_t>(count);
        return;
    }
    current_.events.insert(current_.events.end(), events, events + count);
    if (current_.events.size() >= options_.batch_events) {
        hand_over_current_batch(lock);
    }
}

void TraceWriter::add_workload(const WorkloadEntry& entry) {
    std::lock_guard lock(mutex_);
    current_.workload.push_back(entry);
}

void TraceWriter::add_counter(const CounterSample& sample) {
    std::lock_guard lock(mutex_);
    current_.counters.push_back(sample);
}

void TraceWriter::add_import_log(const ImportLogEntry& entry) {
    std::lock_guard lock(mutex_);
    current_.import_log.push_back(entry);
}

// Called with the lock held and a full batch of events.
void TraceWriter::hand_over_current_batch(std::unique_lock<std::mutex>& lock) {
    if (queue_.size() >= options_.max_queued_batches) {
        if (options_.overflow == WriterOptions::Overflow::drop) {
            // Keep strings, lanes and the rest: later events refer to them.
            stats_.events_dropped += static_cast<std::int64_t>(current_.events.size());
            current_.events.clear();
            return;
        }
        space_free_.wait(lock, [&] {
            return queue_.size() < options_.max_queued_batches || failure_.has_value();
        });
        if (failure_) {
            stats_.events_dropped += static_cast<std::int64_t>(current_.events.size());
            current_.events.clear();
            return;
        }
    }
    queue_.push_back(std::move(current_));
    current_ = Batch{};
    current_.events.reserve(options_.batch_events);
    work_ready_.notify_one();
}

void TraceWriter::run_writer_thread() {
    Statements statements;
    auto prepare = [&](Statement& target, std::string_view sql) {
        if (auto stmt = db_.prepare(sql)) {
            target = std::move(*stmt);
        } else if (!failure_) {
            failure_ = stmt.error();
        }
    };
    {
        std::lock_guard lock(mutex_);
        if (auto status = statements.events.prepare(db_); !status && !failure_) {
            failure_ = status.error();
        }
        prepare(statements.string, "INSERT INTO string (id, value) VALUES (?1, ?2)");
        prepare(statements.lane,
                "INSERT INTO lane (id, rank, kind, name, native_id) VALUES (?1, ?2, ?3, ?4, ?5)");
        prepare(statements.rank,
                "INSERT OR REPLACE INTO rank (rank, host, pid, device, dp, pp, cp, tp, "
                "utc_offset_ns, complete, dropped_records) VALUES "
                "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 0, ?10)");
        prepare(statements.workload,
                "INSERT INTO workload (rank, step, microbatch, doc_id, doc_length, token_begin, "
                "token_end, balancer) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
        prepare(statements.counter,
                "INSERT INTO counter (rank, name, time_ns, value) VALUES (?1, ?2, ?3, ?4)");
        prepare(statements.import_log,
                "INSERT INTO import_log (source, record_index, reason, record, skipped) VALUES "
                "(?1, ?2, ?3, ?4, ?5)");
        prepare(statements.lane_name, "UPDATE lane SET name = ?2 WHERE id = ?1");
        prepare(statements.run_config, "UPDATE run SET config = ?1 WHERE id = 1");
        if (options_.events == WriterOptions::EventStorage::blocks) {
            blocks_ = std::make_unique<EventBlockWriter>();
            if (auto status = blocks_->prepare(db_); !status && !failure_) {
                failure_ = status.error();
            }
        }
    }

    std::unique_lock lock(mutex_);
    while (true) {
        work_ready_.wait_for(lock, options_.commit_interval,
                             [&] { return stopping_ || write_all_blocks_ || !queue_.empty(); });
        // Whatever arrived since the last commit goes out now, full batch or not: this is
        // what bounds the loss of a killed process to one commit interval.
        if (!current_.empty()) {
            queue_.push_back(std::move(current_));
            current_ = Batch{};
            current_.events.reserve(options_.batch_events);
        }
        const bool write_all_blocks = stopping_ || write_all_blocks_;
        write_all_blocks_ = false;
        if (failure_ && blocks_ != nullptr) {
            blocks_->discard();
        }
        if (queue_.empty() && !blocks_due(write_all_blocks)) {
            batches_written_.notify_all();  // a flush() with nothing left to write
            if (stopping_) {
                break;
            }
            continue;
        }
        std::deque<Batch> batches;
        batches.swap(queue_);
        writing_ = true;
        space_free_.notify_all();
        lock.unlock();

        Status status;
        std::int64_t event_count = 0;
        for (const auto& batch : batches) {
            event_count += static_cast<std::int64_t>(batch.events.size());
        }
        const bool already_failed = [&] {
            std::lock_guard guard(mutex_);
            return failure_.has_value();
        }();
        if (!already_failed) {
            status = write_batches(batches, statements, write_all_blocks);
        }

        lock.lock();
        writing_ = false;
        if (already_failed || !status) {
            if (!failure_) {
                failure_ = status.error();
            }
            stats_.events_dropped += event_count;
            space_free_.notify_all();
        } else {
            stats_.events_written += event_count;
            ++stats_.commits;
        }
        batches_written_.notify_all();
    }
    batches_written_.notify_all();
}

void TraceWriter::note_longest(const std::vector<Event>& events) {
    for (const Event& e : events) {
        std::int64_t duration = 0;
        if (__builtin_sub_overflow(e.end_ns, e.start_ns, &duration)) {
            longest_overflowed_ = true;
            continue;
        }
        auto [longest, added] = longest_.try_emplace(e.lane.value, duration);
        if (!added && duration > longest->second) {
            longest->second = duration;
        }
    }
}

// Staged blocks go out when asked (flush, close) or once their oldest event has waited half a
// commit interval: with the interval an event can wait in the producers' batch first, a killed
// process loses at most two intervals, while a busy lane still fills whole blocks.
bool TraceWriter::blocks_due(bool write_all_blocks) const {
    return blocks_ != nullptr && blocks_->has_pending() &&
           (write_all_blocks ||
            std::chrono::steady_clock::now() - staged_since_ >= options_.commit_interval / 2);
}

Status TraceWriter::write_batches(std::deque<Batch>& batches, Statements& st,
                                  bool write_all_blocks) {
    if (auto status = db_.exec("BEGIN"); !status) {
        return status;
    }
    bool ok = true;
    for (const auto& batch : batches) {
        for (const auto& [id, text] : batch.strings) {
            st.string.bind(1, std::int64_t{id.value});
            st.string.bind(2, text);
            ok = ok && st.string.run();
        }
        for (const auto& lane : batch.lanes) {
            st.lane.bind(1, std::int64_t{lane.id.value});
            st.lane.bind(2, std::int64_t{lane.rank});
            st.lane.bind(3, static_cast<std::int64_t>(lane.kind));
            st.lane.bind(4, lane.name);
            st.lane.bind_optional(5, lane.native_id);
            ok = ok && st.lane.run();
        }
        for (const auto& [lane, name] : batch.lane_names) {
            st.lane_name.bind(1, std::int64_t{lane.value});
            st.lane_name.bind(2, name);
            ok = ok && st.lane_name.run();
        }
        if (batch.run_config) {
            st.run_config.bind(1, *batch.run_config);
            ok = ok && st.run_config.run();
        }
        for (const auto& rank : batch.ranks) {
            st.rank.bind(1, std::int64_t{rank.rank});
            st.rank.bind(2, rank.host);
            st.rank.bind(3, rank.pid);
            st.rank.bind_optional(4, rank.device);
            st.rank.bind_optional(5, rank.dp);
            st.rank.bind_optional(6, rank.pp);
            st.rank.bind_optional(7, rank.cp);
            st.rank.bind_optional(8, rank.tp);
            st.rank.bind(9, rank.utc_offset_ns);
            st.rank.bind(10, rank.dropped_records);
            ok = ok && st.rank.run();
        }
        // Blocks keep their own longest event (event_block.duration_max), which close() reads.
        if (blocks_ == nullptr) {
            note_longest(batch.events);
        }
        if (blocks_ != nullptr) {
            if (!blocks_->has_pending()) {
                staged_since_ = std::chrono::steady_clock::now();
            }
            ok = ok && blocks_->add(batch.events);
        } else {
            ok = ok && st.events.insert(batch.events);
        }
        for (const auto& w : batch.workload) {
            st.workload.bind(1, std::int64_t{w.rank});
            st.workload.bind(2, std::int64_t{w.step});
            st.workload.bind(3, std::int64_t{w.microbatch});
            st.workload.bind(4, w.doc_id);
            st.workload.bind(5, std::int64_t{w.doc_length});
            st.workload.bind(6, std::int64_t{w.token_begin});
            st.workload.bind(7, std::int64_t{w.token_end});
            st.workload.bind(8, w.balancer.str());
            ok = ok && st.workload.run();
        }
        for (const auto& c : batch.counters) {
            st.counter.bind(1, std::int64_t{c.rank});
            st.counter.bind(2, c.name);
            st.counter.bind(3, c.time_ns);
            st.counter.bind(4, c.value);
            ok = ok && st.counter.run();
        }
        for (const auto& entry : batch.import_log) {
            st.import_log.bind(1, entry.source);
            st.import_log.bind_optional(2, entry.record_index);
            st.import_log.bind(3, entry.reason);
            st.import_log.bind(4, entry.record);
            st.import_log.bind(5, entry.skipped);
            ok = ok && st.import_log.run();
        }
        if (!ok) {
            break;
        }
    }
    if (ok && blocks_due(write_all_blocks)) {
        ok = blocks_->write_pending();
    }
    if (!ok) {
        if (blocks_ != nullptr) {
            blocks_->discard();
        }
        Error error = db_.error_for("recording stopped: cannot write");
        if ((sqlite3_errcode(db_.handle()) & 0xff) == SQLITE_FULL) {
            error.message = "recording stopped: the disk holding '" + path_ +
                            "' is full. What was committed before is kept.";
        }
        (void)db_.exec("ROLLBACK");
        return error;
    }
    if (auto status = db_.exec("COMMIT"); !status) {
        (void)db_.exec("ROLLBACK");
        return Error{ErrorCode::io, "recording stopped: " + status.error().message};
    }
    return {};
}

void TraceWriter::flush() {
    std::unique_lock lock(mutex_);
    if (closed_ || !thread_.joinable()) {
        return;
    }
    if (!current_.empty()) {
        queue_.push_back(std::move(current_));
        current_ = Batch{};
        current_.events.reserve(options_.batch_events);
    }
    write_all_blocks_ = true;
    work_ready_.notify_one();
    batches_written_.wait(lock, [&] { return queue_.empty() && !writing_ && !write_all_blocks_; });
}

Status TraceWriter::close() {
    {
        std::lock_guard lock(mutex_);
        if (closed_) {
            return failure_ ? Status(*failure_) : Status();
        }
        closed_ = true;
        stopping_ = true;
    }
    work_ready_.notify_one();
    if (thread_.joinable()) {
        thread_.join();
    }
    if (failure_) {
        return *failure_;
    }
    // Ranks told only of dropped records, never added, still get their row.
    if (auto status = db_.exec("BEGIN"); !status) {
        return status;
    }
    for (const auto& [id, rank] : ranks_) {
        auto stmt = db_.prepare(
            "INSERT INTO rank (rank, host, pid, dropped_records) VALUES (?1, '', 0, ?2) "
            "ON CONFLICT (rank) DO UPDATE SET dropped_records = excluded.dropped_records");
        if (!stmt) {
            return stmt.error();
        }
        stmt->bind(1, std::int64_t{id});
        stmt->bind(2, rank.dropped_records);
        if (!stmt->run()) {
            return db_.error_for("cannot finish");
        }
    }
    if (auto status = db_.exec("COMMIT"); !status) {
        return status;
    }
    const bool statistics_by_sql = longest_overflowed_ || blocks_ != nullptr;
    if (options_.build_indexes) {
        if (auto status = create_indexes(db_, statistics_by_sql); !status) {
            return status;
        }
    }
    if (!statistics_by_sql) {
        if (auto status = write_lane_statistics(); !status) {
            return status;
        }
    }
    // A single self-contained file: people copy traces off cluster nodes one file at a time.
    if (auto status = db_.exec("UPDATE rank SET complete = 1; PRAGMA wal_checkpoint(TRUNCATE); "
                               "PRAGMA journal_mode = DELETE;");
        !status) {
        return status;
    }
    return {};
}

// lane.max_duration_ns from what the writer saw, as create_indexes would compute it by reading
// every event back: the longest end − start of each lane, 0 for a lane without events.
Status TraceWriter::write_lane_statistics() {
    if (auto status = db_.exec("BEGIN; UPDATE lane SET max_duration_ns = 0;"); !status) {
        return status;
    }
    auto update = db_.prepare("UPDATE lane SET max_duration_ns = ?2 WHERE id = ?1");
    if (!update) {
        (void)db_.exec("ROLLBACK");
        return update.error();
    }
    for (const auto& [lane, longest] : longest_) {
        update->bind(1, std::int64_t{lane});
        update->bind(2, longest);
        if (!update->run()) {
            Error error = db_.error_for("cannot finish");
            (void)db_.exec("ROLLBACK");
            return error;
        }
    }
    return db_.exec("COMMIT");
}

std::optional<Error> TraceWriter::failure() const {
    std::lock_guard lock(mutex_);
    return failure_;
}

WriterStats TraceWriter::stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
}

}  // namespace fulcrum::store
