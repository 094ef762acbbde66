// Offload overlap: how much host↔device copying (FPDT-style K/V and activation offload,
// FPDT §3) hides behind compute, per rank. Only copies between pinned (or unknown) host
// memory and a device are offload: device-to-device and peer copies stay on the devices, and
// a copy from or to pageable host memory is synchronous for the host and cannot overlap as an
// offload does (CUDA's "API synchronization behavior"), so those — input uploads, loss
// read-backs, a communicator staging through ordinary host buffers — are counted apart. On
// the first GPU captures (tests/data) they were 27 of the 37 ms of copies and would have read
// as offload hidden 14% where the offload streams' copies hid about half. Offload sends data to
// the host before it brings it back: read-backs into pinned memory of less than a page (a
// loss, a norm) are not offload, and on a rank that sends nothing larger to pinned host memory
// its pinned host-to-device copies are uploads (a data loader's pinned batches); both are
// counted apart as staging (tests/data/gpu-torch-train.fulcrum, a plain PyTorch loop, had its
// batches read as offload). Only copies whose host memory CUPTI recorded as pinned are judged
// so; a copy of unrecorded memory stays offload.
//
//   copy       = |K|          K: the union of copy intervals (memcpy events, offload ranges)
//   overlapped = |K ∩ C|      C: the rank's compute (activity.h)
//   exposed    = |K − C|
//   bandwidth  = Σ bytes / Σ copy durations  (host↔device copies that give their bytes)
//
// The chunk size at which copying hides behind compute: moving one chunk of c tokens' K and
// V (bytes_per_token·c) takes bytes_per_token·c / bandwidth, while attending one chunk of
// queries to one chunk of keys takes per_pair·c²; copy time stays below compute time when
//   c ≥ bytes_per_token / (bandwidth · per_pair)
// with per_pair the cost model's attention time per causal pair and layer, and
// bytes_per_token = 2 (K and V) · hidden · element size.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/analysis/activity.h"
#include "core/analysis/cost_model.h"
#include "core/analysis/run_trace.h"

namespace fulcrum::analysis {

struct RankOffload {
    std::int32_t rank = 0;
    std::int64_t copy_ns = 0;
    std::int64_t overlapped_ns = 0;
    std::int64_t exposed_ns = 0;
    std::int64_t host_to_device_ns = 0;  // Σ durations by direction
    std::int64_t device_to_host_ns = 0;
    std::int64_t bytes = 0;
    std::optional<double> bandwidth_gb_s;  // absent when no copy gave its bytes
    std::int64_t copies = 0;
};

struct OffloadAnalysis {
    std::vector<RankOffload> ranks;  // ranks with at least one copy
    std::int64_t copy_ns = 0;        // totals over ranks
    std::int64_t overlapped_ns = 0;
    std::int64_t exposed_ns = 0;
    std::optional<double> bandwidth_gb_s;  // absent when no copy gave its bytes
    // Smallest chunk (tokens) whose copy hides behind its compute; absent when the run has
    // no copies with bytes, or no attention cost per pair, and `chunk_note` says which.
    std::optional<std::int64_t> min_hidden_chunk_tokens;
    std::string chunk_note;
    // Host↔device copies with pageable host memory, left out of the figures above.
    std::int64_t pageable_copies = 0;
    std::int64_t pageable_copy_ns = 0;  // Σ durations
    // Pinned copies that are not offload, left out likewise: small read-backs, and the uploads
    // of ranks that send nothing larger to the host.
    std::int64_t staging_copies = 0;
    std::int64_t staging_copy_ns = 0;  // Σ durations
};

// A host↔device memcpy whose host side is pageable memory (recorded by CUPTI).
bool is_pageable_host_copy(const Event& event);

// An offload copy: a memcpy of kind HtoD, DtoH, HtoA or AtoH whose host memory is not known to
// be pageable, or (when the kind is not recorded) a copy or range of category offload.
bool is_offload_copy(const Event& event);

// The smallest hidden chunk in words, as the CLI and the report print it: "unknown", "any
// size" (a token's K/V copies faster than a token attends to one: the CPU backend), "N tokens".
std::string chunk_size_text(const OffloadAnalysis& offload);

// `cost` may be null (no chunk size then). `element_bytes` is the size of one K/V element
// (4 for the CPU backend's fp32, 2 for bf16).
OffloadAnalysis analyze_offload(const RunTrace& trace, const CostModel* cost, int element_bytes);

// The same a rank at a time (run_analysis.h): each rank's copies, then the run's figures from
// every rank's, in rank order.
struct RankOffloadFigures {
    std::optional<RankOffload> row;  // absent without offload copies
    std::int64_t timed_ns = 0;       // Σ durations of the copies that gave their bytes
    std::int64_t pageable_copies = 0;
    std::int64_t pageable_copy_ns = 0;
    std::int64_t staging_copies = 0;
    std::int64_t staging_copy_ns = 0;
};
RankOffloadFigures rank_offload(const RankTrace& rank, const RankActivity& activity);
OffloadAnalysis analyze_offload(const RunTrace& trace, const std::vector<RankOffloadFigures>& ranks,
                                const CostModel* cost, int element_bytes);

}  // namespace fulcrum::analysis
