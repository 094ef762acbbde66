#include "collectors/capture/capture.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <system_error>
#include <thread>

extern char** environ;

namespace fulcrum::collect {
namespace fs = std::filesystem;
namespace {

constexpr const char* kLibraryName = "libfulcrum_inject.so";

bool is_file(const fs::path& path) {
    std::error_code ec;
    return fs::is_regular_file(path, ec);
}

// rank-12.sqlite -> 12; -1 for anything else.
std::int32_t rank_of_file(const std::string& name, std::string_view suffix) {
    if (!name.starts_with("rank-") || !name.ends_with(suffix)) {
        return -1;
    }
    const std::string_view digits =
        std::string_view(name).substr(5, name.size() - 5 - suffix.size());
    std::int32_t rank = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), rank);
    return ec == std::errc() && end == digits.data() + digits.size() && !digits.empty() ? rank : -1;
}

// What an earlier capture leaves in its directory; --force removes these and only these.
bool is_capture_output(const std::string& name) {
    if (name.starts_with("run.fulcrum")) {
        return true;
    }
    for (const char* suffix :
         {".sqlite", ".sqlite-wal", ".sqlite-shm", ".sqlite-journal", ".status"}) {
        if (rank_of_file(name, suffix) >= 0) {
            return true;
        }
    }
    return false;
}

}  // namespace

Result<std::string> find_injection_library() {
    if (const char* explicit_path = std::getenv("FULCRUM_INJECT_LIBRARY");
        explicit_path != nullptr && *explicit_path != 0) {
        if (!is_file(explicit_path)) {
            return Error{ErrorCode::io, std::string("FULCRUM_INJECT_LIBRARY names '") +
                                            explicit_path + "', which does not exist"};
        }
        std::error_code ec;
        return fs::absolute(explicit_path, ec).string();
    }
    std::error_code ec;
    const fs::path executable = fs::read_symlink("/proc/self/exe", ec);
    const fs::path folder = executable.parent_path();
    std::vector<fs::path> candidates = {folder / kLibraryName, folder / "../lib" / kLibraryName,
                                        folder / "../lib/fulcrum" / kLibraryName,
                                        folder / "../collectors" / kLibraryName};
    for (const auto& candidate : candidates) {
        if (is_file(candidate)) {
            return fs::weakly_canonical(candidate, ec).string();
        }
    }
    return Error{ErrorCode::io, std::string("cannot find ") + kLibraryName + " next to '" +
                                    executable.string() +
                                    "' (nor in ../lib or ../collectors); set "
                                    "FULCRUM_INJECT_LIBRARY to its path"};
}

std::string default_capture_directory(std::time_t now) {
    std::tm local{};
    localtime_r(&now, &local);
    char text[64];
    std::strftime(text, sizeof text, "fulcrum-capture-%Y%m%d-%H%M%S", &local);
    return text;
}

Status prepare_capture_directory(const std::string& directory, bool force) {
    std::error_code ec;
    if (fs::exists(directory, ec)) {
        if (!fs::is_directory(directory, ec)) {
            return Error{ErrorCode::io, "'" + directory + "' exists and is not a directory"};
        }
        std::vector<fs::path> ours;
        std::size_t others = 0;
        for (const auto& entry : fs::directory_iterator(directory, ec)) {
            if (is_capture_output(entry.path().filename().string())) {
                ours.push_back(entry.path());
            } else {
                ++others;
            }
        }
        if (ours.empty() && others == 0) {
            return {};
        }
        if (!force) {
            return Error{ErrorCode::io, "'" + directory +
                                            "' already holds files; choose another "
                                            "directory with -o, or pass --force to replace the "
                                            "capture in it"};
        }
        for (const auto& path : ours) {
            fs::remove(path, ec);
            if (ec) {
                return Error{ErrorCode::io,
                             "cannot remove '" + path.string() + "': " + ec.message()};
            }
        }
        return {};
    }
    fs::create_directories(directory, ec);
    if (ec) {
        return Error{ErrorCode::io, "cannot create '" + directory + "': " + ec.message()};
    }
    return {};
}

Result<std::string> find_executable(const std::string& program) {
    if (program.empty()) {
        return Error{ErrorCode::invalid_input, "no command given"};
    }
    const auto runnable = [](const fs::path& path) {
        return is_file(path) && access(path.c_str(), X_OK) == 0;
    };
    if (program.find('/') != std::string::npos) {
        if (!runnable(program)) {
            return Error{ErrorCode::invalid_input,
                         "cannot run '" + program + "': no such executable file"};
        }
        return program;
    }
    const char* path = std::getenv("PATH");
    std::stringstream folders(path != nullptr ? path : "/usr/bin:/bin");
    std::string folder;
    while (std::getline(folders, folder, ':')) {
        const fs::path candidate = fs::path(folder.empty() ? "." : folder) / program;
        if (runnable(candidate)) {
            return candidate.string();
        }
    }
    return Error{ErrorCode::invalid_input, "cannot run '" + program + "': not found in PATH"};
}

std::vector<OtherTool> other_tools_attached(const std::string& our_library) {
    std::vector<OtherTool> tools;
    std::error_code ec;
    const fs::path ours = fs::weakly_canonical(our_library, ec);
    for (const char* variable : {"NVTX_INJECTION64_PATH", "CUDA_INJECTION64_PATH"}) {
        const char* value = std::getenv(variable);
        if (value == nullptr || *value == 0) {
            continue;
        }
        if (fs::weakly_canonical(value, ec) != ours) {
            tools.push_back({variable, value});
        }
    }
    return tools;
}

std::vector<std::string> capture_variable_names(bool cuda_injection) {
    std::vector<std::string> names = {
        "NVTX_INJECTION64_PATH",   "FULCRUM_CAPTURE_DIR", "FULCRUM_GPU",
        "FULCRUM_GPU_API",         "FULCRUM_RUN_NAME",    "FULCRUM_CAPTURE_COMMAND",
        "FULCRUM_CAPTURE_LAUNCHER"};
    if (cuda_injection) {
        names.insert(names.begin() + 1, "CUDA_INJECTION64_PATH");
    }
    return names;
}

std::vector<std::pair<std::string, std::string>> capture_environment(
    const std::string& library, const std::string& directory, GpuRequest gpu,
    const std::string& command_line, bool cuda_injection, bool all_api) {
    std::error_code ec;
    const std::string absolute = fs::absolute(directory, ec).lexically_normal().string();
    std::vector<std::pair<std::string, std::string>> environment = {
        {"NVTX_INJECTION64_PATH", library},
        {"FULCRUM_CAPTURE_DIR", absolute},
        {"FULCRUM_GPU", gpu == GpuRequest::off  ? "off"
                        : gpu == GpuRequest::on ? "on"
                                                : "auto"},
        {"FULCRUM_GPU_API", all_api ? "all" : "work"},
        {"FULCRUM_RUN_NAME", fs::path(absolute).filename().string()},
        {"FULCRUM_CAPTURE_COMMAND", command_line},
        // The injection leaves saying "no GPU" to us: one line for all ranks.
        {"FULCRUM_CAPTURE_LAUNCHER", "1"},
    };
    if (cuda_injection) {
        environment.insert(environment.begin() + 1, {"CUDA_INJECTION64_PATH", library});
    }
    return environment;
}

bool gpu_present() {
    void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (driver == nullptr) {
        return false;
    }
    using InitFunction = int (*)(unsigned int);
    using CountFunction = int (*)(int*);
    auto init = reinterpret_cast<InitFunction>(dlsym(driver, "cuInit"));
    auto count = reinterpret_cast<CountFunction>(dlsym(driver, "cuDeviceGetCount"));
    int devices = 0;
    const bool found =
        init != nullptr && count != nullptr && init(0) == 0 && count(&devices) == 0 && devices > 0;
    return found;  // the driver stays loaded: unloading an initialised driver is not safe
}

std::vector<RankStatus> read_rank_statuses(const std::string& directory) {
    std::vector<RankStatus> statuses;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(directory, ec)) {
        const std::string name = entry.path().filename().string();
        const std::int32_t rank = rank_of_file(name, ".status");
        if (rank < 0) {
            continue;
        }
        std::ifstream in(entry.path());
        std::string line;
        std::getline(in, line);
        RankStatus status;
        status.rank = rank;
        std::stringstream fields(line);
        std::string field;
        while (fields >> field) {
            const auto equals = field.find('=');
            if (equals == std::string::npos) {
                continue;
            }
            const std::string key = field.substr(0, equals);
            const std::string value = field.substr(equals + 1);
            const auto number = [&](std::int64_t& out) {
                std::from_chars(value.data(), value.data() + value.size(), out);
            };
            if (key == "pid") {
                number(status.pid);
            } else if (key == "state") {
                status.state = value;
            } else if (key == "events") {
                number(status.events);
            } else if (key == "dropped") {
                number(status.dropped);
            } else if (key == "gpu") {
                status.gpu = value;
            } else if (key == "launcher") {
                status.launcher = value;
            } else if (key == "world") {
                number(status.world);
            }
        }
        statuses.push_back(std::move(status));
    }
    std::sort(statuses.begin(), statuses.end(),
              [](const RankStatus& a, const RankStatus& b) { return a.rank < b.rank; });
    return statuses;
}

std::vector<std::string> rank_files(const std::string& directory) {
    std::vector<std::pair<std::int32_t, std::string>> files;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(directory, ec)) {
        const std::int32_t rank = rank_of_file(entry.path().filename().string(), ".sqlite");
        if (rank >= 0) {
            files.emplace_back(rank, entry.path().string());
        }
    }
    std::sort(files.begin(), files.end());
    std::vector<std::string> paths;
    for (auto& [rank, path] : files) {
        paths.push_back(std::move(path));
    }
    return paths;
}

// ---- running the command ----

namespace {

std::atomic<pid_t> g_child{0};
std::atomic<bool> g_command_done{false};
std::atomic<bool> g_interrupted{false};
std::atomic<bool> g_interrupted_after{false};

extern "C" void on_stop_signal(int signal, siginfo_t* info, void*) {
    if (g_command_done.load()) {
        g_interrupted_after.store(true);
        return;
    }
    g_interrupted.store(true);
    const pid_t child = g_child.load();
    // A terminal's Ctrl-C (si_code SI_KERNEL) already reached the command, which shares our
    // process group; a second SIGINT would make mpirun abort instead of shutting down.
    const bool sent_to_us_only =
        info == nullptr || info->si_code == SI_USER || info->si_code == SI_QUEUE;
    if (child > 0 && (signal == SIGTERM || sent_to_us_only)) {
        kill(child, signal);
    }
}

}  // namespace

bool interrupted_after_command() {
    return g_interrupted_after.load();
}

Result<CommandOutcome> run_command(
    const std::vector<std::string>& command,
    const std::vector<std::pair<std::string, std::string>>& environment,
    const std::function<void(double)>& tick) {
    auto executable = find_executable(command.empty() ? "" : command.front());
    if (!executable) {
        return executable.error();
    }
    // Everything the child needs is built before fork: between fork and exec only
    // async-signal-safe calls are allowed.
    std::vector<std::string> variables;
    for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
        const std::string_view text(*entry);
        const std::string_view name = text.substr(0, text.find('='));
        const bool overridden = std::any_of(environment.begin(), environment.end(),
                                            [&](const auto& pair) { return pair.first == name; });
        if (!overridden) {
            variables.emplace_back(text);
        }
    }
    for (const auto& [name, value] : environment) {
        variables.push_back(name + "=" + value);
    }
    std::vector<char*> envp;
    for (auto& variable : variables) {
        envp.push_back(variable.data());
    }
    envp.push_back(nullptr);
    std::vector<std::string> arguments(command.begin(), command.end());
    std::vector<char*> argv;
    for (auto& argument : arguments) {
        argv.push_back(argument.data());
    }
    argv.push_back(nullptr);

    int exec_error[2];
    if (pipe2(exec_error, O_CLOEXEC) != 0) {
        return Error{ErrorCode::io,
                     std::string("cannot start the command: ") + std::strerror(errno)};
    }
    struct sigaction action = {};
    action.sa_sigaction = on_stop_signal;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    struct sigaction previous_int = {}, previous_term = {};
    sigaction(SIGINT, &action, &previous_int);
    sigaction(SIGTERM, &action, &previous_term);

    const auto started = std::chrono::steady_clock::now();
    const pid_t child = fork();
    if (child < 0) {
        close(exec_error[0]);
        close(exec_error[1]);
        return Error{ErrorCode::io,
                     std::string("cannot start the command: ") + std::strerror(errno)};
    }
    if (child == 0) {
        // Exec resets caught signals to their defaults; the previous dispositions of ignored
        // ones (nohup) are what the command should inherit.
        sigaction(SIGINT, &previous_int, nullptr);
        sigaction(SIGTERM, &previous_term, nullptr);
        execve(executable->c_str(), argv.data(), envp.data());
        const int error = errno;
        ssize_t ignored = write(exec_error[1], &error, sizeof error);
        (void)ignored;
        _exit(127);
    }
    g_child.store(child);
    close(exec_error[1]);
    int exec_errno = 0;
    ssize_t got;
    do {
        got = read(exec_error[0], &exec_errno, sizeof exec_errno);
    } while (got < 0 && errno == EINTR);
    close(exec_error[0]);

    int status = 0;
    const auto elapsed = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    };
    double last_tick = 0;
    while (true) {
        const pid_t done = waitpid(child, &status, WNOHANG);
        if (done == child || (done < 0 && errno != EINTR)) {
            break;
        }
        // Short sleeps so that a short command is not kept waiting; ticks every 250 ms.
        if (tick && elapsed() - last_tick >= 0.25) {
            last_tick = elapsed();
            tick(last_tick);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    g_command_done.store(true);
    g_child.store(0);
    if (got == static_cast<ssize_t>(sizeof exec_errno)) {
        return Error{ErrorCode::invalid_input,
                     "cannot run '" + command.front() + "': " + std::strerror(exec_errno)};
    }
    CommandOutcome outcome;
    outcome.seconds = elapsed();
    outcome.interrupted = g_interrupted.load();
    if (WIFEXITED(status)) {
        outcome.exit_status = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
        outcome.exit_status = 128 + WTERMSIG(status);
    }
    return outcome;
}

}  // namespace fulcrum::collect
