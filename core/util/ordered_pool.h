// Work on every core whose results are used in order: `produce(worker, index)` runs for every
// index of [0, count) on a pool of threads, and `consume(index, result)` on the calling thread
// in index order, as each result is there. Producers run at most `ahead` results ahead of the
// consumer, so memory is bounded by what `ahead` results hold, not by `count`. What the analyses
// read a rank at a time (core/analysis/run_analysis.cpp) and what merge reads a lane at a time
// (core/store/merge.cpp) both go through it.
//
// `worker` is in [0, workers): a producer may keep state per worker (a database connection,
// an encoder) in a vector the caller sizes. The pool's threads end before produce_in_order
// returns, and their thread_local objects with them.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/util/result.h"

namespace fulcrum {

// Threads for work spread over every core: one a core, at least one, at most 64.
inline int worker_threads() {
    return static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 64));
}

// The first error stops the run: from a producer (the consumer sees it in order, after the
// results before it), from the consumer, or `cancel` set (an ErrorCode::cancelled error).
template <typename T>
Status produce_in_order(std::size_t count, int workers, std::size_t ahead,
                        const std::function<Result<T>(int worker, std::size_t index)>& produce,
                        const std::function<Status(std::size_t index, T&& result)>& consume,
                        const std::atomic<bool>* cancel = nullptr) {
    if (count == 0) {
        return {};
    }
    workers = static_cast<int>(
        std::min<std::size_t>(static_cast<std::size_t>(std::max(workers, 1)), count));
    ahead = std::max<std::size_t>(ahead, 1);
    std::mutex mutex;
    std::condition_variable changed;
    std::vector<std::optional<Result<T>>> slots(count);
    std::size_t next = 0, consumed = 0;
    bool stop = false;
    auto work = [&](int worker) {
        for (;;) {
            std::size_t index;
            {
                std::unique_lock lock(mutex);
                changed.wait(lock,
                             [&] { return stop || next >= count || next < consumed + ahead; });
                if (stop || next >= count) {
                    return;
                }
                index = next++;
            }
            Result<T> made = cancel != nullptr && cancel->load()
                                 ? Result<T>(Error{ErrorCode::cancelled, "cancelled"})
                                 : produce(worker, index);
            {
                std::lock_guard lock(mutex);
                slots[index] = std::move(made);
            }
            changed.notify_all();
        }
    };
    std::vector<std::thread> pool;
    for (int w = 0; w < workers; ++w) {
        pool.emplace_back(work, w);
    }
    Status status;
    for (std::size_t i = 0; i < count && status; ++i) {
        std::optional<Result<T>> made;
        {
            std::unique_lock lock(mutex);
            changed.wait(lock, [&] { return slots[i].has_value(); });
            made = std::move(slots[i]);
            slots[i].reset();
            consumed = i + 1;
        }
        changed.notify_all();
        if (!*made) {
            status = made->error();
            break;
        }
        status = consume(i, std::move(**made));
    }
    {
        std::lock_guard lock(mutex);
        stop = true;
    }
    changed.notify_all();
    for (std::thread& thread : pool) {
        thread.join();
    }
    return status;
}

}  // namespace fulcrum
