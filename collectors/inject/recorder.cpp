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
#include <system_error>

#include "collectors/inject/gpu_tracer.h"
#include "collectors/inject/rank_environment.h"

#ifndef FULCRUM_VERSION
#define FULCRUM_VERSION "0"
#endif

namespace fulcrum::collect {
namespace {

// Rank of the lines we print, -1 until known; read by say() from any thread.
std::atomic<std::int32_t> g_rank_for_messages{-1};

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

void say(std::string_view line) {
    std::string text = "fulcrum: ";
    if (const std::int32_t rank = g_rank_for_messages.load(); rank >= 0) {
        text += "rank " + std::to_string(rank) + ": ";
    }
    text += line;
    text += '\n';
    ssize_t ignored = write(STDERR_FILENO, text.data(), text.size());
    (void)ignored;
}

// Never destroyed: threads of the traced program may call in while it exits.
Recorder* const Recorder::instance_ = new Recorder();

Recorder::Recorder() : gpu_mode_(gpu_mode_from_environment()) {}

bool Recorder::declined() const { return env("FULCRUM_CAPTURE_DIR") == nullptr; }

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
        const GpuStart gpu = start_gpu_tracing();
        // Under `fulcrum capture` the launcher reads the status files and says this once
        // for all ranks.
        if (!gpu.message.empty() && (gpu_mode_ == GpuMode::on || !env("FULCRUM_CAPTURE_LAUNCHER"))) {
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
    rank_.host = host_name();
    rank_.pid = getpid();
    rank_.utc_offset_ns = 0;  // host_clock_ns() is CLOCK_REALTIME
    owner_pid_ = getpid();

    RunInfo run;
    const char* run_name = env("FULCRUM_RUN_NAME");
    const char* command = env("FULCRUM_CAPTURE_COMMAND");
    run.command = command != nullptr ? command : own_command_line();
    run.name = run_name != nullptr ? run_name
                                   : std::filesystem::path(directory_).filename().string();
    run.start_utc_ns = host_clock_ns();
    run.origin = RunOrigin::captured;
    run.producer = "fulcrum-inject " FULCRUM_VERSION;

    store::WriterOptions options;
    options.overflow = store::WriterOptions::Overflow::drop;
    const std::string path = directory_ + "/rank-" + std::to_string(rank) + ".sqlite";
    auto writer = store::TraceWriter::create(path, run, options);
    if (!writer) {
        say(writer.error().message + "; not recording");
        write_status("failed");
        return false;
    }
    writer_ = std::move(*writer);
    writer_->add_rank(rank_);
    g_rank_for_messages.store(rank);
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
    const std::string line = "pid=" + std::to_string(getpid()) + " rank=" +
                             std::to_string(rank_.rank) + " state=" + std::string(state) +
                             " events=" + std::to_string(stats.events_written) + " dropped=" +
                             std::to_string(stats.events_dropped) +
                             " gpu=" + std::string(to_string(gpu_state())) + "\n";
    if (pwrite(status_fd_, line.data(), line.size(), 0) == static_cast<ssize_t>(line.size())) {
        (void)ftruncate(status_fd_, static_cast<off_t>(line.size()));
    }
}

EventBuffer* Recorder::new_event_buffer() {
    auto* buffer = new EventBuffer();
    std::lock_guard lock(buffers_mutex_);
    buffers_.push_back(buffer);
    return buffer;
}

void Recorder::drain_event_buffers() {
    std::lock_guard lock(buffers_mutex_);
    std::erase_if(buffers_, [&](EventBuffer* buffer) {
        const bool orphaned = buffer->orphaned.load(std::memory_order_acquire);
        buffer->drain(*writer_);
        if (orphaned) {
            delete buffer;  // its thread has exited: nobody else holds it
        }
        return orphaned;
    });
}

void Recorder::run_housekeeper() {
    std::unique_lock lock(housekeeper_mutex_);
    // Buffers every 100 ms; failure, dropped counts and the status file every 500 ms.
    for (int tick = 1; !housekeeper_stop_; ++tick) {
        housekeeper_wake_.wait_for(lock, std::chrono::milliseconds(100));
        if (housekeeper_stop_) {
            break;
        }
        lock.unlock();
        drain_event_buffers();
        if (tick % 5 != 0) {
            lock.lock();
            continue;
        }
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
        lock.lock();
    }
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
                        " but this process records rank " + std::to_string(rank_.rank) +
                        "; kept " + std::to_string(rank_.rank),
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
