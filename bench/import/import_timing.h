// Timing for the importer benchmarks (bench_kineto, bench_nsys): wall and CPU seconds of a
// stage, printed as MB/s of the input next to the same-run baseline's ratio.
#pragma once

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <ctime>

namespace fulcrum::bench {

struct Timing {
    double wall = 0, cpu = 0;
};

// CPU seconds of the whole process (every thread): on a machine shared with other work the
// wall clock measures the neighbours as much as the importer.
inline double cpu_seconds() {
    timespec now{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    return double(now.tv_sec) + double(now.tv_nsec) * 1e-9;
}

inline double peak_rss_mb() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return double(usage.ru_maxrss) / 1024.0;
}

template <typename Fn>
Timing timed(Fn&& fn) {
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = cpu_seconds();
    fn();
    return {std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
            cpu_seconds() - cpu_start};
}

inline void print_header() {
    std::printf("%-36s %8s %8s %8s %8s %7s\n", "stage", "wall s", "MB/s", "CPU s", "MB/CPU-s",
                "ratio");
}

// `ratio`: the baseline's wall time over this stage's (1 is as fast as the baseline).
inline void print_row(const char* stage, Timing t, double size_mb, Timing baseline) {
    std::printf("%-36s %8.2f %8.1f %8.2f %8.1f %7.3f\n", stage, t.wall, size_mb / t.wall, t.cpu,
                size_mb / t.cpu, baseline.wall / t.wall);
}

}  // namespace fulcrum::bench
