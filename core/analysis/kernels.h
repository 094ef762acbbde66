// What the GPU did, kernel by kernel: the answers Holistic Trace Analysis gives on a trace
// (HTA 0.5, hta/analyzers), for every rank with device lanes. Definitions in
// docs/analyses.md, "Kernels".
//
// Kernel types, as HTA types them: communication (NCCL and other collective kernels), memory
// (copies and memsets), computation (every other kernel). Synchronisation records and stream
// annotations are not kernels.
//
// Time by type: every instant some kernel runs on the rank is given to the set of types
//   running then: computation, communication, memory, or any overlap of them; the rows add up
//   to the union of all kernels, and `idle` is the rest of [first kernel start, last end].
// Top kernels: per name over all ranks, count, total, mean, min and max duration, and the
//   spread of the per-rank totals (min, max, and which rank is slowest).
// Idle time by cause, per stream: each gap before a kernel (from the end of everything
//   earlier on the stream) is
//   host wait    the kernel's launch (its API call, joined by correlation id) began after the
//                previous kernel ended: the CPU was not enqueueing fast enough;
//   kernel wait  else, a gap shorter than 30 µs: launch overhead between queued kernels;
//   other        the rest (events, syncs, waits on other streams).
//   HTA lets overlapping kernels give negative gaps; here a gap is never below 0.
// Launch statistics: per launch, the API call's duration (CPU), the kernel's (GPU) and the
//   launch delay, kernel start − (call start + call duration), at least 0; short kernels (call
//   ≤ 50 µs and kernel shorter than its call), calls over 50 µs and delays over 100 µs are
//   counted (HTA's defaults).
// Queue length per stream: kernels launched and not yet finished, rising at each launch call's
//   start and falling at each kernel's end; its mean over the stream's span and its maximum.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/analysis/run_trace.h"

namespace fulcrum::analysis {

enum class KernelType : std::uint8_t { computation, communication, memory };
inline constexpr int kKernelTypeCount = 3;
std::string_view to_string(KernelType type);

// The kernel type of a device event, or false for what is not a kernel (sync, annotations).
inline bool kernel_type_of(const Event& event, KernelType& type) {
    switch (event.kind) {
        case EventKind::kernel:
            type = KernelType::computation;
            return true;
        case EventKind::collective:
            type = KernelType::communication;
            return true;
        case EventKind::memcpy:
        case EventKind::memset:
            type = KernelType::memory;
            return true;
        default:
            return false;
    }
}

// Time of one rank's device, by which types of kernel ran at once.
struct KernelTimeByType {
    std::int32_t rank = 0;
    // Indexed by a bit set of KernelType (bit 0 computation, 1 communication, 2 memory):
    // [1] computation only, [2] communication only, [3] both, [4] memory only, …; [0] unused.
    std::int64_t ns[8] = {};
    std::int64_t kernel_span_ns = 0;  // first kernel start to last kernel end
    std::int64_t idle_ns = 0;         // span less the union of kernels
    std::int64_t busy_ns() const;     // Σ ns[1..7]: the union of kernels
};

struct KernelStats {
    std::string name;
    KernelType type = KernelType::computation;
    std::int64_t count = 0;
    std::int64_t total_ns = 0;
    std::int64_t min_ns = 0;
    std::int64_t max_ns = 0;
    double mean_ns() const { return count > 0 ? double(total_ns) / double(count) : 0.0; }
    // Spread of the per-rank totals over the ranks that ran it.
    int ranks = 0;
    std::int64_t rank_total_min_ns = 0;
    std::int64_t rank_total_max_ns = 0;
    std::int32_t slowest_rank = -1;
};

struct StreamIdle {
    std::int32_t rank = 0;
    std::string lane;  // the stream's lane name
    std::int64_t kernels = 0;
    std::int64_t host_wait_ns = 0;
    std::int64_t kernel_wait_ns = 0;
    std::int64_t other_ns = 0;
    std::int64_t idle_ns() const { return host_wait_ns + kernel_wait_ns + other_ns; }
    // Queue length: launched and not finished.
    double mean_queue_length = 0;
    std::int64_t max_queue_length = 0;
};

struct LaunchStats {
    std::int32_t rank = 0;
    std::int64_t launches = 0;  // API calls joined with a kernel
    std::int64_t cpu_total_ns = 0;
    std::int64_t gpu_total_ns = 0;
    std::int64_t delay_total_ns = 0;
    std::int64_t delay_max_ns = 0;
    std::int64_t short_kernels = 0;   // call ≤ 50 µs and the kernel shorter than its call
    std::int64_t slow_calls = 0;      // call > 50 µs
    std::int64_t delay_outliers = 0;  // delay > 100 µs
    double mean_delay_ns() const {
        return launches > 0 ? double(delay_total_ns) / double(launches) : 0.0;
    }
};

struct KernelAnalysis {
    std::vector<KernelTimeByType> time_by_type;  // ranks with kernels, by rank
    std::vector<KernelStats> top_kernels;        // by total time, descending
    std::vector<StreamIdle> idle;                // by rank, then stream
    std::vector<LaunchStats> launches;           // ranks with joined launches
};

struct KernelOptions {
    std::size_t top = 20;
    std::int64_t kernel_wait_threshold_ns = 30'000;  // HTA's consecutive_kernel_delay
    std::int64_t runtime_cutoff_ns = 50'000;
    std::int64_t launch_delay_cutoff_ns = 100'000;
};

KernelAnalysis analyze_kernels(const RunTrace& trace, const KernelOptions& options = {});

// analyze_kernels a rank at a time (run_analysis.h): each rank's figures, then their totals
// over the ranks, added in rank order.
class RankKernels {
public:
    // Nothing for a rank without device lanes.
    void add(const RankTrace& rank, const KernelOptions& options);

private:
    friend class KernelTotals;
    struct NameTotal {
        KernelType type = KernelType::computation;
        std::int64_t count = 0, total = 0, min = INT64_MAX, max = 0;
    };
    std::int32_t rank_ = 0;
    std::optional<KernelTimeByType> time_by_type_;
    std::vector<StreamIdle> idle_;
    std::optional<LaunchStats> launches_;
    std::unordered_map<std::uint32_t, NameTotal> by_name_;
};

class KernelTotals {
public:
    void add(RankKernels&& rank);
    KernelAnalysis finish(const RunTrace& trace, const KernelOptions& options) &&;

private:
    struct Total {
        RankKernels::NameTotal sum;
        std::unordered_map<std::int32_t, std::int64_t> by_rank;
    };
    KernelAnalysis result_;
    std::unordered_map<std::uint32_t, Total> by_name_;
};

}  // namespace fulcrum::analysis
