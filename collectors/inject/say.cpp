#include "collectors/inject/say.h"

#include <unistd.h>

#include <atomic>
#include <string>

namespace fulcrum::collect {
namespace {

// Rank of the lines we print, -1 until known; read by say() from any thread.
std::atomic<std::int32_t> g_rank_for_messages{-1};

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

void set_say_rank(std::int32_t rank) {
    g_rank_for_messages.store(rank);
}

}  // namespace fulcrum::collect
