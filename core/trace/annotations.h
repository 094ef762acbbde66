// The `fulcrum` annotation scheme (docs/annotations.md), parsed into the store's terms: the
// trace vocabulary that the engine writes, the collector and the Nsight Systems importer read,
// and the analyses and the simulator speak. Pure functions with no NVTX and no writer, so the
// scheme is tested on plain strings.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/trace/model.h"
#include "core/trace/trace_sink.h"
#include "core/util/result.h"

namespace fulcrum {

// A range or mark message "NAME[ key=value]...": NAME is free text without '=', what the
// timeline shows; recognised keys fill the semantic columns, any other key goes to args.
// `chunk` (the model chunk of a pipeline stage that a pass runs: its virtual stage under the
// interleaved schedule, 0 otherwise) has no column of its own: it goes into args as the
// integer "chunk", where chunk_of_args() finds it.
struct RangeAnnotation {
    std::string name;
    std::int32_t step = -1;
    std::int32_t microbatch = -1;
    std::int16_t stage = -1;
    Phase phase = Phase::none;
    std::int64_t bytes = -1;
    std::int32_t chunk = -1;
    std::string args_json;  // a JSON object of chunk and the other keys; empty when none
};

RangeAnnotation parse_range_message(std::string_view message);
// The message parse_range_message reads back: NAME, then step, mb, stage, phase (fwd, bwd,
// wgrad), chunk and bytes, each only when set (≥ 0, a phase); args_json is not written.
std::string format_range_message(const RangeAnnotation& annotation);

// The "chunk" of an event's args JSON (RangeAnnotation::chunk), −1 when it has none.
std::int32_t chunk_of_args(std::string_view args_json);

// The args of an event from a named NVTX domain other than `fulcrum`: {"domain":"NAME"}. The
// collector and the nsys importer both record a foreign domain this way.
std::string domain_args(std::string_view domain);

// The store's category for an NVTX category number of the `fulcrum` domain; numbers the
// scheme does not define are "other".
Category category_from_nvtx(std::uint32_t nvtx_category);

// Marks carry "NAME JSON": the name up to the first space, the JSON after it.
struct MarkMessage {
    std::string_view name;
    std::string_view json;
};
MarkMessage split_mark_message(std::string_view message);

// Names of the ranges the engine emits (docs/annotations.md, "Ranges the engine emits"). The
// analyses give them their roles, the simulator writes them, a fitted cost model is keyed by
// them: one spelling for all.
namespace range_name {
inline constexpr std::string_view kStep = "step";
inline constexpr std::string_view kForward = "forward";
inline constexpr std::string_view kBackward = "backward";
// The W pass of a split backward (Zero Bubble's weight gradients), phase wgrad; the B pass
// keeps the name "backward" (docs/decisions.md says why).
inline constexpr std::string_view kWeightGradients = "weight gradients";
// Activation recomputation inside a backward or weight-gradient pass.
inline constexpr std::string_view kRecompute = "recompute";
inline constexpr std::string_view kAttention = "attention";
inline constexpr std::string_view kMlp = "mlp";
inline constexpr std::string_view kRecvActivations = "recv activations";
inline constexpr std::string_view kRecvGradients = "recv gradients";
inline constexpr std::string_view kSendActivations = "send activations";
inline constexpr std::string_view kSendGradients = "send gradients";
inline constexpr std::string_view kCpAllGather = "cp all-gather kv";
inline constexpr std::string_view kCpReduceScatter = "cp reduce-scatter dkv";
// DeepSpeed-Ulysses' all-to-alls: Q, K and V from token shards to head shards and the
// attention's output back (and their gradients the other way).
inline constexpr std::string_view kCpAllToAll = "cp all-to-all";
inline constexpr std::string_view kTpAllReduce = "tp all-reduce";
// Sequence parallelism's collectives in place of TP's all-reduce.
inline constexpr std::string_view kTpAllGather = "tp all-gather";
inline constexpr std::string_view kTpReduceScatter = "tp reduce-scatter";
inline constexpr std::string_view kDpAllReduce = "dp all-reduce gradients";
// The host call that starts one layer's overlapped reduction (--overlap-grad-reduce), category
// runtime: the transfer runs beside the passes and is waited for in kDpAllReduce.
inline constexpr std::string_view kDpAllReduceStart = "dp all-reduce start";
// After the passes of an overlapped reduction, kDpAllReduce reduces the rest of the buffer
// (its bytes are the rest's) and this range waits for the started layers' reductions: the
// reduction time the overlap did not hide. Communication time, not a collective: the
// transfers it waits for began in the starts.
inline constexpr std::string_view kDpAllReduceWait = "dp all-reduce wait";
// ZeRO-3: a layer's parameters gathered over DP × CP before its forward and its backward,
// and the gradients reduce-scattered instead of all-reduced.
inline constexpr std::string_view kZeroAllGather = "zero all-gather params";
inline constexpr std::string_view kZeroReduceScatter = "zero reduce-scatter grads";
// Copies to or from pinned host memory that the compute beside them could not hide
// (offloaded activation checkpoints, FPDT's chunks).
inline constexpr std::string_view kOffloadWait = "offload wait";
// One copy between a device and pinned host memory on a copy stream (category offload): the
// CPU backend's copy threads record them so, and simulated runs on their copy lanes.
inline constexpr std::string_view kMemcpyToHost = "memcpy DtoH";
inline constexpr std::string_view kMemcpyToDevice = "memcpy HtoD";
inline constexpr std::string_view kEmbeddingAllReduce = "pp all-reduce embedding";
inline constexpr std::string_view kOptimizer = "optimizer";
// Hot switching (HotSPa, SOSP'24): a length bucket played under its layout, and a switch of
// the parameters (and gradient accumulators) from one layout to the next; their args are in
// docs/annotations.md, "Hot switching".
inline constexpr std::string_view kHotSwitchBucket = "hot-switch bucket";
inline constexpr std::string_view kHotSwitch = "hot-switch";
}  // namespace range_name

// Names of the metadata marks (docs/annotations.md, "Marks"); fulcrum.clock_sync is
// kClockSyncMark in core/trace/model.h.
inline constexpr std::string_view kRankMark = "fulcrum.rank";
inline constexpr std::string_view kRunMark = "fulcrum.run";
inline constexpr std::string_view kWorkloadMark = "fulcrum.workload";
// `cp sharding`: what adaptive CP sharding chose in a step, on rank 0:
// {"step":3,"per-doc":5,"zigzag":3} (micro-batches of every replica).
inline constexpr std::string_view kCpShardingMark = "cp sharding";
// `fulcrum.memory`: a rank's peak of counted allocations over the run, once at its end:
// {"peak_device_bytes":N,"peak_pinned_bytes":M} (docs/plan.md predicts it per stage).
inline constexpr std::string_view kMemoryMark = "fulcrum.memory";
// `fulcrum.cpu`: right after a pass (forward, backward, weight gradients) or the optimizer step
// ends, on its thread, the thread CPU time it used in ns, as the mark's payload (the event's
// `bytes`). Where ranks time-share cores, that is the pass's work without its waits for a core.
inline constexpr std::string_view kCpuMark = "fulcrum.cpu";

// `fulcrum.rank`: {"rank":5,"world":8,"dp":1,"tp":0,"pp":0,"cp":1,"device":-1}. Fills the
// rank number, coordinates and device of `rank`; other fields are left as they are.
struct RankMark {
    std::int32_t rank = -1;
    std::int32_t world = -1;
    std::int32_t dp = -1, tp = -1, pp = -1, cp = -1;
    std::int32_t device = -1;
};
Result<RankMark> parse_rank_mark(std::string_view json);
std::string rank_mark_json(const RankMark& mark);

// `fulcrum.run`: any JSON object; returned in compact form for run.config.
Result<std::string> parse_run_mark(std::string_view json);

// Records a `fulcrum.run` mark as the run's configuration and a `fulcrum.workload` mark as
// workload rows of `rank`, into `sink`: the collector and the nsys importer do it this one
// way. False when `mark` is neither (nothing recorded); an error naming the mark when its JSON
// is not what the scheme says.
Result<bool> record_metadata_mark(const MarkMessage& mark, std::int32_t rank, TraceSink& sink);

// `fulcrum.workload`: {"step":3,"balancer":"wlb","microbatches":[[[doc_id,doc_length,
// token_begin,token_end],...],...]}, one row per document per micro-batch.
Result<std::vector<WorkloadEntry>> parse_workload_mark(std::string_view json, std::int32_t rank);

// step, micro-batch, stage and phase of a range in one 64-bit CUPTI external correlation id,
// so that the kernels and copies it launches carry them too. Each is stored + 1 (0 is
// "unknown"): step 32 bits, micro-batch 16, stage 12, phase 4; a value too large for its
// field is stored as unknown.
std::uint64_t pack_semantic_keys(std::int32_t step, std::int32_t microbatch, std::int16_t stage,
                                 Phase phase);
struct SemanticKeys {
    std::int32_t step = -1;
    std::int32_t microbatch = -1;
    std::int16_t stage = -1;
    Phase phase = Phase::none;
};
SemanticKeys unpack_semantic_keys(std::uint64_t id);

}  // namespace fulcrum
