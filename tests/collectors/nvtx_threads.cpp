// A program that uses plain NVTX, as any third-party program does: push/pop and start/end
// ranges, marks, a custom domain with registered strings, wide-character messages, thread
// names given before and after a thread's first event, and two threads. test_collectors
// captures it and checks that every range arrives as emitted.
//
//   nvtx_threads [--iterations N] [--threads N] [--fork] [--flood N] [--unique]
//
// --threads  N more threads ("worker 0", ...), each with N iterations of a "work" range
//            holding a "step" range and a "tick" mark, all at once: many buffers filling
//            and draining while the others write.
// --fork   forks a child that emits NVTX and calls exit() (its atexit handlers run).
// --flood  then emits N more push/pop pairs ("flood", or "flood i" with --unique), paced
//          at ~1M/s, to fill a small disk.
#include <nvtx3/nvToolsExt.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace {

nvtxEventAttributes_t attributes_with(nvtxStringHandle_t registered) {
    nvtxEventAttributes_t attributes = {};
    attributes.version = NVTX_VERSION;
    attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attributes.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    attributes.message.registered = registered;
    return attributes;
}

nvtxEventAttributes_t attributes_with(const char* message) {
    nvtxEventAttributes_t attributes = {};
    attributes.version = NVTX_VERSION;
    attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
    attributes.message.ascii = message;
    return attributes;
}

}  // namespace

int main(int argc, char** argv) {
    int iterations = 5;
    long flood = 0;
    bool fork_child = false;
    bool unique = false;
    int threads = 0;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--iterations" && i + 1 < argc) {
            iterations = std::atoi(argv[++i]);
        } else if (arg == "--threads" && i + 1 < argc) {
            threads = std::atoi(argv[++i]);
        } else if (arg == "--flood" && i + 1 < argc) {
            flood = std::atol(argv[++i]);
        } else if (arg == "--fork") {
            fork_child = true;
        } else if (arg == "--unique") {
            unique = true;
        }
    }

    nvtxMarkA("program start");
    nvtxDomainHandle_t library = nvtxDomainCreateA("my-lib");
    nvtxStringHandle_t operation = nvtxDomainRegisterStringA(library, "registered op");

    std::promise<nvtxRangeId_t> handed_over;
    std::thread worker([&] {
        nvtxNameOsThreadA(static_cast<uint32_t>(gettid()), "data loader");
        for (int i = 0; i < iterations; ++i) {
            nvtxRangePushA("load batch");
            nvtxRangePushA("decode");
            nvtxRangePop();
            nvtxRangePop();
        }
        // A start/end range may end on another thread than the one that started it.
        nvtxRangeEnd(handed_over.get_future().get());
    });

    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
        workers.emplace_back([t, iterations] {
            const std::string name = "worker " + std::to_string(t);
            nvtxNameOsThreadA(static_cast<uint32_t>(gettid()), name.c_str());
            for (int i = 0; i < iterations; ++i) {
                nvtxRangePushA("work");
                nvtxRangePushA("step");
                nvtxRangePop();
                nvtxMarkA("tick");
                nvtxRangePop();
            }
        });
    }

    for (int i = 0; i < iterations; ++i) {
        nvtxRangePushA("outer");
        nvtxRangePushA("inner A");
        nvtxRangePop();
        const auto registered = attributes_with(operation);
        nvtxDomainRangePushEx(library, &registered);
        nvtxDomainRangePop(library);
        nvtxRangePushW(L"wide \u00b5s");
        nvtxRangePop();
        nvtxRangePop();
    }
    // Named after its first events: the lane is renamed.
    nvtxNameOsThreadA(static_cast<uint32_t>(gettid()), "trainer");

    const nvtxRangeId_t id = nvtxRangeStartA("start-end range");
    nvtxRangeEnd(id);
    handed_over.set_value(nvtxRangeStartA("handed over"));
    const auto lib_mark = attributes_with("lib mark");
    nvtxDomainMarkEx(library, &lib_mark);
    worker.join();
    for (auto& thread : workers) {
        thread.join();
    }

    if (fork_child) {
        const pid_t child = fork();
        if (child == 0) {
            nvtxRangePushA("in child");
            nvtxRangePop();
            nvtxMarkA("child mark");
            std::exit(0);
        }
        int status = 0;
        waitpid(child, &status, 0);
        std::printf("child exited %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        nvtxRangePushA("after fork");
        nvtxRangePop();
    }

    std::string name = "flood";
    for (long i = 0; i < flood; ++i) {
        if (unique) {
            name = "flood " + std::to_string(i);
        }
        nvtxRangePushA(name.c_str());
        nvtxRangePop();
        if (i % 2000 == 1999) {
            // Paced, so that the writer commits several times before the disk fills.
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
    }

    nvtxMarkA("program end");
    std::printf("done\n");
    return 0;
}
