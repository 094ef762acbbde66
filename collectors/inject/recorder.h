// The recorder: one per traced process. It owns the rank's TraceWriter and the facts every
// event needs (rank, lanes of threads and streams), and it decides when recording starts,
// stops and finishes.
//
// Lifecycle. The writer is opened lazily, at the process's first event (or at cuInit for a
// CUDA program), so that a process which loads NVTX but never uses it leaves no file, and so
// that a `fulcrum.rank` mark emitted first can name the file when no launcher gave a rank.
// At exit an atexit handler flushes CUPTI, closes the writer (indexes, rank.complete = 1)
// and leaves a single file. A killed process keeps what the writer committed (at most
// 350 ms are lost: a thread's undrained blocks, then a commit). A full disk stops recording
// with one warning line; the program runs on.
//
// Fork. A child forked without exec does not record: the writer's and the housekeeper's
// threads do not exist in it, and the writer's lock may have been held by another thread
// at the fork. Its NVTX calls return at once. A child that execs starts afresh, like any
// other process.
//
// Files in FULCRUM_CAPTURE_DIR: rank-N.sqlite, and rank-N.status, a one-line status that
// `fulcrum capture` reads for its progress line and summary:
//   pid=123 rank=3 state=recording events=4567 dropped=0 gpu=none
// Creating the status file with O_EXCL is how a process claims rank N, so two processes
// never write one file.
#pragma once

#include <time.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "collectors/inject/gpu_tracer.h"
#include "collectors/inject/rank_environment.h"
#include "collectors/inject/say.h"
#include "collectors/inject/tsc_clock.h"
#include "core/store/trace_writer.h"
#include "core/trace/annotations.h"

namespace fulcrum::collect {

enum class GpuMode { off, automatic, on };

// Events of one thread on their way to the writer, with their times in raw clock ticks
// (tsc_clock.h); they become nanoseconds as they are drained.
//
// The owner thread appends to a chain of fixed blocks without a lock or an atomic
// read-modify-write: it writes the event, then publishes the block's count with a release
// store (a plain store on x86). The housekeeper drains every buffer every 100 ms, and at
// once when a buffer holds kWakeBlocks blocks, so an idle thread's events reach the disk
// within about one commit interval and a busy thread never waits for the writer's lock.
// Drained blocks go back to their owner for reuse, so a steady stream allocates nothing
// and writes into memory that is already mapped and cached; past kMaxBlocks undrained blocks (the
// writer has fallen far behind) events are dropped and counted, as the writer itself does when its
// queue is full.
class EventBuffer {
public:
    static constexpr std::uint32_t kBlockEvents = 1024;  // 64 KiB
    static constexpr std::int32_t kWakeBlocks = 4;
    // 16 MiB of undrained events per thread (the writer itself queues up to 512 Ki events);
    // drained blocks beyond kSpareBlocks are freed, so an idle thread keeps about 1 MiB.
    static constexpr std::int32_t kMaxBlocks = 256;
    static constexpr std::int32_t kSpareBlocks = 16;

    EventBuffer();
    ~EventBuffer();
    EventBuffer(const EventBuffer&) = delete;
    EventBuffer& operator=(const EventBuffer&) = delete;

    // The owner thread only: `event`, ending at `end_ticks`.
    void add(const Event& event, std::int64_t end_ticks) {
        if (used_ == kBlockEvents && !next_block()) [[unlikely]] {
            drop_one();
            return;
        }
        Event* slot = new (current_->slot(used_)) Event(event);
        slot->end_ns = end_ticks;
        ++used_;
        current_->count.store(used_, std::memory_order_release);
    }
    // Any thread; drains run one at a time. Converts the ticks of what it takes to ns and
    // hands it to the writer; returns how many events it took.
    std::size_t drain(store::TraceWriter& writer);
    // Events dropped so far, counted once: the caller reports them.
    std::int64_t take_dropped();

    // Set by the owner thread as it exits; the housekeeper then drains and frees it.
    std::atomic<bool> orphaned{false};

private:
    struct Block {
        std::atomic<std::uint32_t> count{0};
        std::atomic<Block*> next{nullptr};  // in the chain, or in a list of free blocks
        // Raw storage: a new block is not filled with default events it would never use.
        alignas(64) unsigned char storage[kBlockEvents * sizeof(Event)];

        void* slot(std::uint32_t index) { return storage + index * sizeof(Event); }
        Event* events() { return std::launder(reinterpret_cast<Event*>(storage)); }
    };
    bool next_block();
    void drop_one();
    static void delete_list(Block* block);

    // The owner's side.
    Block* current_;
    std::uint32_t used_ = 0;
    std::atomic<std::int64_t> dropped_{0};
    Block* reusable_ = nullptr;  // taken from free_ in one exchange
    // Shared: blocks in the chain, and drained blocks on their way back to the owner.
    std::atomic<std::int32_t> blocks_{1};
    std::atomic<Block*> free_{nullptr};
    std::atomic<std::int32_t> spare_blocks_{0};  // in free_ and reusable_
    // The drainer's side.
    std::mutex drain_mutex_;
    Block* read_;
    std::uint32_t read_index_ = 0;
    std::int64_t dropped_reported_ = 0;
};

class Recorder : public GpuRecordTarget {
public:
    enum class State : int {
        idle,  // nothing recorded yet; the writer opens at the first event
        recording,
        stopped,   // the writer failed (full disk) or the process is exiting
        disabled,  // not recording: no capture directory, rank taken, forked child
    };

    static Recorder& instance() { return *instance_; }

    // The check at the top of every hook: one atomic load when recording.
    bool recording() {
        const State state = state_.load(std::memory_order_acquire);
        return state == State::recording || (state == State::idle && start(-1));
    }
    // Opens the writer. `rank_hint`: the rank of a `fulcrum.rank` mark when it is the first
    // event, used only when no launcher variable gives one.
    bool start(std::int32_t rank_hint);
    State state() const { return state_.load(std::memory_order_acquire); }
    bool declined() const;  // true when FULCRUM_CAPTURE_DIR is not set

    store::TraceWriter& writer() override { return *writer_; }
    std::int32_t rank() const override { return rank_.rank; }
    bool takes_records() const override {
        return state() == State::recording || state() == State::stopped;
    }
    GpuMode gpu_mode() const { return gpu_mode_; }

    // Host lanes by OS thread id, created at a thread's first event.
    LaneId thread_lane(std::int64_t tid) override;
    void name_thread(std::int64_t tid, std::string name);

    // From the `fulcrum.rank` mark.
    void set_coordinates(const RankMark& mark);
    void log_problem(std::string reason, std::string record);
    void add_dropped(std::int64_t count) override;
    // A buffer for the calling thread's events, drained by the housekeeper and at exit.
    EventBuffer* new_event_buffer();
    // Asks the housekeeper to drain now (a buffer is filling up); never blocks.
    void wake_housekeeper() { housekeeper_wake_.notify_one(); }

    // Runs at exit in the process that opened the writer; idempotent.
    void finish();
    void after_fork_in_child();
    void lock_for_fork();
    void unlock_after_fork();

private:
    static Recorder* const instance_;  // made as the library loads; never destroyed
    Recorder();
    bool open_writer(std::int32_t rank_hint);
    bool claim_rank(const std::string& directory, std::int32_t rank, bool fallback);
    void run_housekeeper();
    void write_status(std::string_view state);
    std::string lane_name_for(std::int64_t tid);
    void drain_event_buffers();
    void report_writer_state();

    std::atomic<State> state_{State::idle};
    std::mutex start_mutex_;
    std::unique_ptr<store::TraceWriter> writer_;  // leaked at exit: other threads may still call it
    RankInfo rank_;
    // What the launcher said of this process (rank_environment.h), for the status file.
    LauncherRank launcher_;
    GpuMode gpu_mode_ = GpuMode::automatic;
    std::string directory_;
    int status_fd_ = -1;
    int owner_pid_ = 0;

    std::mutex lanes_mutex_;
    std::unordered_map<std::int64_t, LaneId> thread_lanes_;
    std::unordered_map<std::int64_t, std::string> thread_names_;

    std::mutex buffers_mutex_;
    std::vector<EventBuffer*> buffers_;

    std::mutex housekeeper_mutex_;
    std::condition_variable housekeeper_wake_;
    bool housekeeper_stop_ = false;
    std::thread housekeeper_;
    std::int64_t writer_drops_reported_ = 0;
    bool failure_reported_ = false;
    std::once_flag finish_once_;
};

}  // namespace fulcrum::collect
