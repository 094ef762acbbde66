#include "collectors/inject/recorder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <system_error>

#include "collectors/inject/rank_environment.h"

#ifndef FULCRUM_VERSION
#define FULCRUM_VERSION "0"
#endif

namespace fulcrum::collect {
namespace {

const char* env(const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && *value != 0 ? value : nullptr;
}

std::string read_small_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return text;
}

std::string own_command_line() {
    std::string text = read_small_file("/proc/self/cmdline");
    while (!text.empty() && text.back() == '\0') {
        text.pop_back();
    }
    for (char& c : text) {
        if (c == '\0') {
            c = ' ';
        }
    }
    return text;
}

std::string thread_comm(std::int64_t tid) {
    std::string name = read_small_file("/proc/self/task/" + std::to_string(tid) + "/comm");
    while (!name.empty() && (name.back() == '\n' || name.back() == '\0')) {
        name.pop_back();
    }
    return name;
}

std::string host_name() {
    char buffer[256] = {};
    if (gethostname(buffer, sizeof buffer - 1) != 0) {
        return "";
    }
    return buffer;
}

std::string as_sentence(std::string text) {
    if (!text.empty() && text.back() != '.') {
        text += '.';
    }
    return text;
}

GpuMode gpu_mode_from_environment() {
    const char* value = env("FULCRUM_GPU");
    if (value == nullptr || std::strcmp(value, "auto") == 0) {
        return GpuMode::automatic;
    }
    if (std::strcmp(value, "off") == 0) {
        return GpuMode::off;
    }
    return GpuMode::on;
}

}  // namespace

// Never destroyed: threads of the traced program may call in while it exits.
Recorder* const Recorder::instance_ = new Recorder();

Recorder::Recorder() : gpu_mode_(gpu_mode_from_environment()) {}

bool Recorder::declined() const {
    return env("FULCRUM_CAPTURE_DIR") == nullptr;
}

bool Recorder::start(std::int32_t rank_hint) {
    bool opened = false;
    {
        std::lock_guard lock(start_mutex_);
        if (state_.load() != State::idle) {
            return state_.load() == State::recording;
        }
        opened = open_writer(rank_hint);
        state_.store(opened ? State::recording : State::disabled, std::memory_order_release);
    }
    if (!opened) {
        return false;
    }
    housekeeper_ = std::thread([this] { run_housekeeper(); });
    std::atexit([] { Recorder::instance().finish(); });
    if (gpu_mode_ == GpuMode::off) {
        turn_gpu_tracing_off();
    } else {
        const GpuStart gpu = start_gpu_tracing(*this);
        // Under `fulcrum capture` the launcher reads the status files and says this once
        // for all ranks.
        if (!gpu.message.empty() &&
            (gpu_mode_ == GpuMode::on || !env("FULCRUM_CAPTURE_LAUNCHER"))) {
            say(gpu.message);
        }
    }
    write_status("recording");
    return true;
}

bool Recorder::open_writer(std::int32_t rank_hint) {
    const char* directory = env("FULCRUM_CAPTURE_DIR");
    if (directory == nullptr) {
        return false;
    }
    directory_ = directory;
    std::error_code ec;
    std::filesystem::create_directories(directory_, ec);
    if (!std::filesystem::is_directory(directory_, ec)) {
        say("cannot create the capture directory '" + directory_ + "'; not recording");
        return false;
    }

    const LauncherRank launcher = rank_from_environment();
    const bool fallback = launcher.rank < 0;
    std::int32_t rank = fallback ? std::max(rank_hint, 0) : launcher.rank;
    // Without a launcher's rank, processes take the lowest free number, so that several
    // processes of one capture never write one file.
    const int attempts = fallback ? 4096 : 1;
    bool claimed = false;
    for (int attempt = 0; attempt < attempts; ++attempt, ++rank) {
        if (claim_rank(directory_, rank, fallback)) {
            claimed = true;
            break;
        }
    }
    if (!claimed) {
        return false;
    }

    rank_.rank = rank;
    launcher_ = launcher;
    rank_.host = host_name();
    rank_.pid = getpid();
    rank_.utc_offset_ns = 0;  // host_clock_ns() is on CLOCK_REALTIME's timeline
    owner_pid_ = getpid();

    RunInfo run;
    const char* run_name = env("FULCRUM_RUN_NAME");
    const char* command = env("FULCRUM_CAPTURE_COMMAND");
    run.command = command != nullptr ? command : own_command_line();
    run.name =
        run_name != nullptr ? run_name : std::filesystem::path(directory_).filename().string();
    run.start_utc_ns = TscClock::realtime_ns();
    run.origin = RunOrigin::captured;
    run.producer = "fulcrum-inject " FULCRUM_VERSION;

    store::WriterOptions options;
    options.overflow = store::WriterOptions::Overflow::drop;
    options.events = store::WriterOptions::EventStorage::blocks;  // a rank file (docs/schema.md)
    const std::string path = directory_ + "/rank-" + std::to_string(rank) + ".sqlite";
    auto writer = store::TraceWriter::create(path, run, options);
    if (!writer) {
        say(writer.error().message + "; not recording");
        write_status("failed");
        return false;
    }
    writer_ = std::move(*writer);
    writer_->add_rank(rank_);
    set_say_rank(rank);
    return true;
}

bool Recorder::claim_rank(const std::string& directory, std::int32_t rank, bool fallback) {
    const std::string status_path = directory + "/rank-" + std::to_string(rank) + ".status";
    const std::string trace_path = directory + "/rank-" + std::to_string(rank) + ".sqlite";
    const int fd = open(status_path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    const int open_errno = errno;
    std::error_code ec;
    if (fd >= 0 && std::filesystem::exists(trace_path, ec)) {
        // A trace without its status file: left by an older capture; never overwritten.
        close(fd);
        unlink(status_path.c_str());
        if (!fallback) {
            say("'" + trace_path + "' already exists; this process (pid " +
                std::to_string(getpid()) + ") is not recorded");
        }
        return false;
    }
    if (fd < 0) {
        if (fallback && open_errno == EEXIST) {
            return false;  // taken; the caller tries the next number
        }
        if (open_errno == EEXIST) {
            say("rank " + std::to_string(rank) + " of '" + directory +
                "' is already recorded by another process; this one (pid " +
                std::to_string(getpid()) + ") is not recorded");
        } else {
            say("cannot write '" + status_path + "': " + std::strerror(open_errno) +
                "; not recording");
        }
        return false;
    }
    status_fd_ = fd;
    return true;
}

void Recorder::write_status(std::string_view state) {
    if (status_fd_ < 0) {
        return;
    }
    const store::WriterStats stats = writer_ ? writer_->stats() : store::WriterStats{};
    const std::string line =
        "pid=" + std::to_string(getpid()) + " rank=" + std::to_string(rank_.rank) +
        " state=" + std::string(state) + " events=" + std::to_string(stats.events_written) +
        " dropped=" + std::to_string(stats.events_dropped) +
        " gpu=" + std::string(to_string(gpu_state())) +
        " launcher=" + (launcher_.variable.empty() ? std::string("none") : launcher_.variable) +
        " world=" + std::to_string(launcher_.world_size) + "\n";
    if (pwrite(status_fd_, line.data(), line.size(), 0) == static_cast<ssize_t>(line.size())) {
        (void)ftruncate(status_fd_, static_cast<off_t>(line.size()));
    }
}

EventBuffer::EventBuffer() : current_(new Block()), read_(current_) {}

EventBuffer::~EventBuffer() {
    delete_list(read_);
    delete_list(reusable_);
    delete_list(free_.load(std::memory_order_acquire));
}

void EventBuffer::delete_list(Block* block) {
    while (block != nullptr) {
        Block* next = block->next.load(std::memory_order_acquire);
        delete block;
        block = next;
    }
}

// The owner's slow path, once per block.
bool EventBuffer::next_block() {
    const std::int32_t blocks = blocks_.load(std::memory_order_acquire);
    if (blocks >= kMaxBlocks) {
        return false;
    }
    if (reusable_ == nullptr) {
        reusable_ = free_.exchange(nullptr, std::memory_order_acquire);
    }
    Block* fresh = reusable_;
    if (fresh != nullptr) {
        reusable_ = fresh->next.load(std::memory_order_relaxed);
        spare_blocks_.fetch_sub(1, std::memory_order_relaxed);
        fresh->count.store(0, std::memory_order_relaxed);
        fresh->next.store(nullptr, std::memory_order_relaxed);
    } else {
        fresh = new Block();
    }
    blocks_.fetch_add(1, std::memory_order_acq_rel);
    current_->next.store(fresh, std::memory_order_release);
    current_ = fresh;
    used_ = 0;
    if (blocks + 1 == kWakeBlocks) {
        Recorder::instance().wake_housekeeper();
    }
    return true;
}

// The chain is full: the housekeeper is far behind. It is woken once per block's worth of
// dropped events, not at every one.
void EventBuffer::drop_one() {
    const std::int64_t dropped = dropped_.load(std::memory_order_relaxed) + 1;
    dropped_.store(dropped, std::memory_order_relaxed);
    if (dropped % kBlockEvents == 1) {
        Recorder::instance().wake_housekeeper();
    }
}

std::size_t EventBuffer::drain(store::TraceWriter& writer) {
    std::lock_guard lock(drain_mutex_);
    std::size_t taken = 0;
    std::optional<TscClock::Conversion> to_ns;
    for (;;) {
        const std::uint32_t count = read_->count.load(std::memory_order_acquire);
        if (count > read_index_) {
            if (!to_ns) {
                to_ns = TscClock::instance().conversion();
            }
            // Below `count` the owner never writes again: the events are ours to convert.
            Event* events = read_->events() + read_index_;
            const std::size_t n = count - read_index_;
            for (std::size_t i = 0; i < n; ++i) {
                events[i].start_ns = (*to_ns)(static_cast<std::uint64_t>(events[i].start_ns));
                events[i].end_ns = (*to_ns)(static_cast<std::uint64_t>(events[i].end_ns));
            }
            writer.add_events(events, n);
            taken += n;
            read_index_ = count;
        }
        if (count < kBlockEvents) {
            return taken;
        }
        Block* next = read_->next.load(std::memory_order_acquire);
        if (next == nullptr) {
            return taken;  // full, and the owner has not linked the next one yet
        }
        Block* done = read_;
        read_ = next;
        read_index_ = 0;
        blocks_.fetch_sub(1, std::memory_order_acq_rel);
        if (spare_blocks_.load(std::memory_order_relaxed) >= kSpareBlocks) {
            delete done;  // the end of a burst: keep only a few
            continue;
        }
        spare_blocks_.fetch_add(1, std::memory_order_relaxed);
        // Back to the owner; it takes the whole list at once, so there is no ABA here.
        Block* head = free_.load(std::memory_order_relaxed);
        do {
            done->next.store(head, std::memory_order_relaxed);
        } while (!free_.compare_exchange_weak(head, done, std::memory_order_release,
                                              std::memory_order_relaxed));
    }
}

std::int64_t EventBuffer::take_dropped() {
    std::lock_guard lock(drain_mutex_);
    const std::int64_t dropped = dropped_.load(std::memory_order_relaxed);
    const std::int64_t fresh = dropped - dropped_reported_;
    dropped_reported_ = dropped;
    return fresh;
}

EventBuffer* Recorder::new_event_buffer() {
    auto* buffer = new EventBuffer();
    std::lock_guard lock(buffers_mutex_);
    buffers_.push_back(buffer);
    return buffer;
}

void Recorder::drain_event_buffers() {
    std::lock_guard lock(buffers_mutex_);
    std::int64_t dropped = 0;
    std::erase_if(buffers_, [&](EventBuffer* buffer) {
        const bool orphaned = buffer->orphaned.load(std::memory_order_acquire);
        buffer->drain(*writer_);
        dropped += buffer->take_dropped();
        if (orphaned) {
            delete buffer;  // its thread has exited: nobody else holds it
        }
        return orphaned;
    });
    if (dropped > 0) {
        writer_->add_dropped_records(rank_.rank, dropped);
    }
}

void Recorder::run_housekeeper() {
    using std::chrono::milliseconds;
    using std::chrono::steady_clock;
    // Buffers every 100 ms (sooner when one fills up); failure, dropped counts and the status
    // file every 500 ms; the clock's line against CLOCK_REALTIME every second.
    auto next_drain = steady_clock::now() + milliseconds(100);
    auto next_status = steady_clock::now() + milliseconds(500);
    auto next_anchor = steady_clock::now() + milliseconds(1000);
    std::unique_lock lock(housekeeper_mutex_);
    while (!housekeeper_stop_) {
        housekeeper_wake_.wait_until(lock, next_drain);
        if (housekeeper_stop_) {
            break;
        }
        lock.unlock();
        const auto now = steady_clock::now();
        drain_event_buffers();
        next_drain = now + milliseconds(100);
        if (now >= next_anchor) {
            TscClock::instance().reanchor();
            next_anchor = now + milliseconds(1000);
        }
        if (now >= next_status) {
            next_status = now + milliseconds(500);
            report_writer_state();
        }
        lock.lock();
    }
}

void Recorder::report_writer_state() {
    if (auto failure = writer_->failure(); failure && !failure_reported_) {
        failure_reported_ = true;
        state_.store(State::stopped, std::memory_order_release);
        say(as_sentence(failure->message) + " The program goes on unrecorded.");
    }
    // Events the writer dropped because the disk fell behind: a killed process keeps
    // the count too.
    const std::int64_t dropped = writer_->stats().events_dropped;
    if (dropped > writer_drops_reported_ && !failure_reported_) {
        writer_->add_dropped_records(rank_.rank, dropped - writer_drops_reported_);
        writer_drops_reported_ = dropped;
    }
    write_status(failure_reported_ ? "failed" : "recording");
}

LaneId Recorder::thread_lane(std::int64_t tid) {
    std::lock_guard lock(lanes_mutex_);
    if (auto found = thread_lanes_.find(tid); found != thread_lanes_.end()) {
        return found->second;
    }
    const LaneId lane =
        writer_->add_lane(rank_.rank, LaneKind::host_thread, lane_name_for(tid), tid);
    thread_lanes_.emplace(tid, lane);
    return lane;
}

// Called with lanes_mutex_ held.
std::string Recorder::lane_name_for(std::int64_t tid) {
    if (auto named = thread_names_.find(tid); named != thread_names_.end()) {
        return named->second;
    }
    if (tid == getpid()) {
        return "main";
    }
    // pthread_setname_np names ("pt_autograd_0") are worth showing; a thread that
    // inherited the program's name is told apart by its id.
    const std::string comm = thread_comm(tid);
    if (!comm.empty() && comm != thread_comm(getpid())) {
        return comm;
    }
    return "thread " + std::to_string(tid);
}

void Recorder::name_thread(std::int64_t tid, std::string name) {
    std::lock_guard lock(lanes_mutex_);
    if (state_.load() == State::recording) {
        if (auto found = thread_lanes_.find(tid); found != thread_lanes_.end()) {
            writer_->rename_lane(found->second, name);
        }
    }
    thread_names_[tid] = std::move(name);
}

void Recorder::set_coordinates(const RankMark& mark) {
    std::lock_guard lock(start_mutex_);
    if (mark.rank != rank_.rank) {
        // The file is named after the launcher's rank, and merge refuses two files of one
        // rank: the launcher's number stays, the disagreement is kept for the user.
        log_problem("fulcrum.rank says rank " + std::to_string(mark.rank) +
                        " but this process records rank " + std::to_string(rank_.rank) + "; kept " +
                        std::to_string(rank_.rank),
                    "");
    }
    RankInfo rank = rank_;
    rank.dp = mark.dp;
    rank.pp = mark.pp;
    rank.cp = mark.cp;
    rank.tp = mark.tp;
    rank.device = mark.device;
    rank_ = rank;
    writer_->add_rank(rank);
}

void Recorder::log_problem(std::string reason, std::string record) {
    ImportLogEntry entry;
    entry.source = "rank " + std::to_string(rank_.rank) + " (pid " + std::to_string(getpid()) + ")";
    entry.reason = std::move(reason);
    entry.record = std::move(record);
    writer_->add_import_log(entry);
}

void Recorder::add_dropped(std::int64_t count) {
    if (count > 0 && writer_ != nullptr) {
        writer_->add_dropped_records(rank_.rank, count);
    }
}

void Recorder::finish() {
    if (getpid() != owner_pid_ || writer_ == nullptr) {
        return;  // a forked child: its parent's writer is not ours to close
    }
    std::call_once(finish_once_, [this] {
        flush_gpu_tracing();
        const bool failed = state_.load() == State::stopped || writer_->failure().has_value();
        state_.store(State::stopped, std::memory_order_release);
        {
            std::lock_guard lock(housekeeper_mutex_);
            housekeeper_stop_ = true;
        }
        housekeeper_wake_.notify_all();
        if (housekeeper_.joinable()) {
            housekeeper_.join();
        }
        drain_event_buffers();
        const std::int64_t dropped = writer_->stats().events_dropped;
        if (dropped > writer_drops_reported_) {
            writer_->add_dropped_records(rank_.rank, dropped - writer_drops_reported_);
            writer_drops_reported_ = dropped;
        }
        const Status closed = writer_->close();
        if (!closed && !failure_reported_) {
            say(as_sentence(closed.error().message) +
                (failed ? " The program went on unrecorded." : ""));
        }
        write_status(failed || !closed ? "failed" : "closed");
        close(status_fd_);
        status_fd_ = -1;
    });
}

void Recorder::lock_for_fork() {
    start_mutex_.lock();
    lanes_mutex_.lock();
}

void Recorder::unlock_after_fork() {
    lanes_mutex_.unlock();
    start_mutex_.unlock();
}

void Recorder::after_fork_in_child() {
    state_.store(State::disabled, std::memory_order_release);
    if (status_fd_ >= 0) {
        close(status_fd_);
    }
    status_fd_ = -1;
    unlock_after_fork();
}

}  // namespace fulcrum::collect
