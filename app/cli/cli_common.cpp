#include "app/cli/cli_common.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>

#include "core/util/output_file.h"

namespace fulcrum::cli {
namespace {

std::atomic<bool> g_interrupted{false};
bool g_progress_shown = false;

extern "C" void on_interrupt(int) {
    g_interrupted.store(true);
}

}  // namespace

int report_error(const Error& error) {
    std::fprintf(stderr, "fulcrum: error: %s\n", error.message.c_str());
    return kExitError;
}

void warn(const std::string& message) {
    std::fprintf(stderr, "fulcrum: warning: %s\n", message.c_str());
}

std::function<bool(double)> progress_line(std::string label) {
    const bool terminal = isatty(STDERR_FILENO) != 0;
    return [label = std::move(label), terminal, last = -1](double fraction) mutable {
        const int percent = static_cast<int>(fraction * 100.0);
        if (terminal && percent != last) {
            std::fprintf(stderr, "\r%s %3d%%", label.c_str(), percent);
            std::fflush(stderr);
            last = percent;
            g_progress_shown = true;
        }
        return !g_interrupted.load();
    };
}

void finish_progress_line() {
    if (g_progress_shown) {
        std::fprintf(stderr, "\r\033[K");
        g_progress_shown = false;
    }
}

void install_interrupt_handler() {
    struct sigaction action = {};
    action.sa_handler = on_interrupt;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, nullptr);
}

Status write_output(const std::string& path, bool force, std::string_view text) {
    if (path.empty()) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        return {};
    }
    auto file = OutputFile::create(path, force);
    if (!file) {
        return file.error();
    }
    file->write(text);
    return file->commit();
}

}  // namespace fulcrum::cli
