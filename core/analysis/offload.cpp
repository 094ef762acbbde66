#include "core/analysis/offload.h"

#include <cmath>

#include "core/analysis/activity.h"
#include "core/util/text_table.h"

namespace fulcrum::analysis {

bool is_pageable_host_copy(const Event& event) {
    if (event.kind != EventKind::memcpy || !crosses_host_and_device(event.copy_kind)) {
        return false;
    }
    const bool to_device =
        event.copy_kind == CopyKind::host_to_device || event.copy_kind == CopyKind::host_to_array;
    return (to_device ? event.src_memory : event.dst_memory) == MemoryKind::pageable;
}

bool is_offload_copy(const Event& event) {
    if (event.kind == EventKind::memcpy && event.copy_kind != CopyKind::none) {
        return crosses_host_and_device(event.copy_kind) && !is_pageable_host_copy(event);
    }
    // A copy of no known direction, or a range around one (the CPU backend's copy threads),
    // is offload when whoever recorded it said so.
    return (event.kind == EventKind::memcpy || event.kind == EventKind::range) &&
           event.category == Category::offload;
}

std::string chunk_size_text(const OffloadAnalysis& offload) {
    if (!offload.min_hidden_chunk_tokens) {
        return "unknown";
    }
    if (*offload.min_hidden_chunk_tokens <= 1) {
        return "any size";
    }
    return std::to_string(*offload.min_hidden_chunk_tokens) + " tokens";
}

namespace {

bool is_upload_direction(CopyKind kind) {
    return kind == CopyKind::host_to_device || kind == CopyKind::host_to_array;
}

// A host↔device memcpy whose host side CUPTI recorded as pinned memory. Only these are judged
// by size and direction below; a copy of unrecorded memory stays offload, as before.
bool is_pinned_host_copy(const Event& event) {
    if (event.kind != EventKind::memcpy || !crosses_host_and_device(event.copy_kind)) {
        return false;
    }
    return (is_upload_direction(event.copy_kind) ? event.src_memory : event.dst_memory) ==
           MemoryKind::pinned;
}

// A device-to-host copy into pinned memory of less than a page: a loss, a norm or a flag read
// back (PyTorch's `.item()` goes through a pinned buffer), not offloaded activations.
constexpr std::int64_t kReadBackBytes = 4096;
bool is_small_read_back(const Event& event) {
    return is_pinned_host_copy(event) && !is_upload_direction(event.copy_kind) &&
           event.bytes >= 0 && event.bytes < kReadBackBytes;
}

// The offload copies of one rank, gathered as they come: pinned uploads wait apart until the
// rank is known to send something out (offload) or not (staging).
struct RankCopies {
    IntervalSet intervals;
    std::int64_t copies = 0, host_to_device_ns = 0, device_to_host_ns = 0, bytes = 0;
    std::int64_t duration_ns = 0;  // Σ durations
    std::int64_t timed_ns = 0;     // durations of the copies that gave their bytes

    void add(const Event& event) {
        intervals.add(event.start_ns, event.end_ns);
        ++copies;
        duration_ns += event.duration_ns();
        if (event.copy_kind == CopyKind::host_to_device) {
            host_to_device_ns += event.duration_ns();
        } else if (event.copy_kind == CopyKind::device_to_host) {
            device_to_host_ns += event.duration_ns();
        }
        if (event.bytes > 0 && event.duration_ns() > 0) {
            bytes += event.bytes;
            timed_ns += event.duration_ns();
        }
    }
    void add(const RankCopies& more) {
        intervals = intervals.united(more.intervals);
        copies += more.copies;
        duration_ns += more.duration_ns;
        host_to_device_ns += more.host_to_device_ns;
        device_to_host_ns += more.device_to_host_ns;
        bytes += more.bytes;
        timed_ns += more.timed_ns;
    }
};

}  // namespace

RankOffloadFigures rank_offload(const RankTrace& rank, const RankActivity& activity) {
    RankOffloadFigures out;
    RankCopies offload, uploads;  // uploads: pinned host-to-device copies, judged at the end
    std::int64_t staging_ns = 0, staging = 0;
    bool sends = false;  // anything larger than a read-back to host memory that is not pageable
    for (const LaneTrace& lane : rank.lanes) {
        for (const Event& event : lane.events) {
            if (is_pageable_host_copy(event)) {
                ++out.pageable_copies;
                out.pageable_copy_ns += event.duration_ns();
                continue;
            }
            if (!is_offload_copy(event)) {
                continue;
            }
            if (is_small_read_back(event)) {
                ++staging;
                staging_ns += event.duration_ns();
            } else if (is_pinned_host_copy(event) && is_upload_direction(event.copy_kind)) {
                uploads.add(event);
            } else {
                sends |= event.kind == EventKind::memcpy &&
                         crosses_host_and_device(event.copy_kind) &&
                         !is_upload_direction(event.copy_kind);
                offload.add(event);
            }
        }
    }
    // Offload moves data out before it brings it back: a rank that never sends anything out
    // has uploads only.
    if (sends) {
        offload.add(uploads);
    } else {
        staging += uploads.copies;
        staging_ns += uploads.duration_ns;
    }
    out.staging_copies = staging;
    out.staging_copy_ns = staging_ns;
    if (offload.copies == 0) {
        return out;
    }
    RankOffload row;
    row.rank = rank.info.rank;
    row.copies = offload.copies;
    row.host_to_device_ns = offload.host_to_device_ns;
    row.device_to_host_ns = offload.device_to_host_ns;
    row.bytes = offload.bytes;
    out.timed_ns = offload.timed_ns;
    row.copy_ns = offload.intervals.total();
    row.overlapped_ns = offload.intervals.overlap(activity.compute);
    row.exposed_ns = row.copy_ns - row.overlapped_ns;
    if (out.timed_ns > 0) {
        row.bandwidth_gb_s = double(row.bytes) / double(out.timed_ns);  // B/ns = GB/s
    }
    out.row = row;
    return out;
}

OffloadAnalysis analyze_offload(const RunTrace& trace, const CostModel* cost, int element_bytes) {
    std::vector<RankOffloadFigures> ranks;
    for (const RankTrace& rank : trace.ranks) {
        ranks.push_back(rank_offload(rank, rank_activity(rank)));
    }
    return analyze_offload(trace, ranks, cost, element_bytes);
}

OffloadAnalysis analyze_offload(const RunTrace& trace, const std::vector<RankOffloadFigures>& ranks,
                                const CostModel* cost, int element_bytes) {
    OffloadAnalysis result;
    std::int64_t bytes_total = 0, timed_total = 0;
    for (const RankOffloadFigures& figures : ranks) {
        result.pageable_copies += figures.pageable_copies;
        result.pageable_copy_ns += figures.pageable_copy_ns;
        result.staging_copies += figures.staging_copies;
        result.staging_copy_ns += figures.staging_copy_ns;
        if (!figures.row) {
            continue;
        }
        const RankOffload& row = *figures.row;
        result.copy_ns += row.copy_ns;
        result.overlapped_ns += row.overlapped_ns;
        result.exposed_ns += row.exposed_ns;
        bytes_total += row.bytes;
        timed_total += figures.timed_ns;
        result.ranks.push_back(row);
    }
    if (timed_total > 0) {
        result.bandwidth_gb_s = double(bytes_total) / double(timed_total);
    }

    if (result.ranks.empty()) {
        result.chunk_note =
            result.staging_copies > 0
                ? "the run's pinned copies are uploads and small read-backs (nothing larger "
                  "than a page goes to the host first): no offload"
            : result.pageable_copies > 0
                ? "the run's host/device copies all use pageable host memory "
                  "(data loads, read-backs): no offload"
                : "the run has no host/device copies";
        return result;
    }
    if (!result.bandwidth_gb_s || *result.bandwidth_gb_s <= 0) {
        result.chunk_note = "no copy gave its bytes, so the bandwidth is unknown";
        return result;
    }
    const PassCost* forward = cost != nullptr ? cost->pass(0, Phase::forward) : nullptr;
    const int layers = trace.config.model.layers > 0 ? stage_layer_count(trace.config, 0) : 0;
    if (forward == nullptr || forward->per_pair_ns <= 0 || layers <= 0 ||
        trace.config.model.hidden <= 0) {
        result.chunk_note =
            "no attention cost per pair (needs a cost model with a per-pair term, and the "
            "model's layers and hidden size in the run's config)";
        return result;
    }
    const double per_pair_per_layer = forward->per_pair_ns / double(layers);
    // A token's K and V: h_kv wide each under grouped-query attention (Llama's), h without.
    const parallel::ModelShape& model = trace.config.model;
    const int kv_hidden = model.heads > 0 ? parallel::kv_hidden_of(model) : model.hidden;
    const double bytes_per_token = 2.0 * kv_hidden * element_bytes;
    result.min_hidden_chunk_tokens = static_cast<std::int64_t>(
        std::ceil(bytes_per_token / (*result.bandwidth_gb_s * per_pair_per_layer)));
    result.chunk_note = "from " + format_significant(*result.bandwidth_gb_s) + " GB/s and " +
                        format_significant(per_pair_per_layer) + " ns per pair and layer";
    return result;
}

}  // namespace fulcrum::analysis
