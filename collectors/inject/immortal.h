// Immortal<T>: a global that is constructed when the library loads and never destroyed.
//
// The injection library's globals must outlive the program's own exit: other threads, static
// destructors and atexit handlers of the traced program may still call NVTX, or CUPTI may
// deliver a buffer, after static destruction has begun. (Chromium's base::NoDestructor.)
#pragma once

#include <new>
#include <utility>

namespace fulcrum::collect {

template <typename T>
class Immortal {
public:
    template <typename... Args>
    explicit Immortal(Args&&... args) {
        new (storage_) T(std::forward<Args>(args)...);
    }
    Immortal(const Immortal&) = delete;
    Immortal& operator=(const Immortal&) = delete;
    ~Immortal() = default;  // deliberately leaves T alive

    T& operator*() { return *get(); }
    T* operator->() { return get(); }
    T* get() { return std::launder(reinterpret_cast<T*>(storage_)); }

private:
    alignas(T) unsigned char storage_[sizeof(T)];
};

}  // namespace fulcrum::collect
