#include "bench/common/scale_run.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <string_view>
#include <vector>

#include "bench/common/bench_support.h"
#include "core/parallel/run_config.h"
#include "core/store/trace_reader.h"
#include "core/store/trace_writer.h"
#include "core/trace/annotations.h"
#include "core/trace/trace_sink.h"
#include "tests/support/synthetic_run.h"

namespace fulcrum::bench {
namespace {

// The costs of one layer in bf16 on an H100-class GPU, for the tokens a rank holds: the GEMMs
// per token (24h² FLOPs of h = 4096 at ~400 TFLOP/s, before TP divides them), the causal
// attention core per (query, key) pair, and communication by bytes over NVLink inside a node
// (TP and CP groups: tp × cp = 8 ranks, one node) or over the network (PP, DP).
constexpr double kLinearNsPerToken = 1000.0;
constexpr double kAttentionNsPerPair = 0.08;
constexpr double kNvlinkBytesPerNs = 300.0;  // 300 GB/s
constexpr double kNetworkBytesPerNs = 50.0;  // 400 Gb/s
constexpr std::int64_t kCollectiveLatencyNs = 15'000;
constexpr int kHidden = 4096, kHeads = 32, kKeyValueWidth = 1024, kVocab = 128256;
constexpr std::int64_t kMinKernelNs = 8'000;
// A CUDA host thread runs ahead of its GPU; each launch call takes a few µs.
constexpr std::int64_t kLaunchLeadNs = 40'000;
constexpr std::int64_t kLaunchNs = 3'000;
constexpr std::int64_t kInputCopyNs = 20'000;  // stage 0's host-to-device copy of the tokens
constexpr std::int64_t kOptimizerKernelNs = 1'200'000;
constexpr std::int64_t kStepGapNs = 1'000'000;  // data loading between steps
// One node (a tp × cp group of one dp replica and stage) runs its kernels this much slower,
// as a throttled or faulty node does: the straggler the analyses should find.
constexpr double kStragglerSlowdown = 1.3;
constexpr std::string_view kGemm = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n";
constexpr std::string_view kAllReduceKernel = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL";

// One step of a layer on a rank's GPU: a kernel on the compute stream (its time a share of
// the layer's linear or attention time) or a collective on the NCCL stream with its host range.
struct Segment {
    enum Kind { kernel, attention_kernel, tp_collective, cp_collective } kind;
    std::string_view device_name;
    std::string_view range_name;  // collectives' host range
    double share = 0;
};

// Forward: LayerNorm, QKV projection, CP all-gather of K and V, the attention core, the output
// projection and its TP all-reduce (the attention block, docs/analyses.md "Attention time");
// then the MLP and its TP all-reduce. Backward runs the MLP first, at twice the GEMM work
// (input and weight gradients), and ends the attention block with the reduce-scatter of dK, dV.
constexpr Segment kForwardLayer[] = {
    {Segment::kernel, "layer_norm_fwd_kernel", "", 0.03},
    {Segment::kernel, kGemm, "", 0.25},
    {Segment::cp_collective, "ncclDevKernel_AllGather_RING_LL", range_name::kCpAllGather, 0},
    {Segment::attention_kernel, "flash_fwd_kernel", "", 1.0},
    {Segment::kernel, kGemm, "", 0.08},
    {Segment::tp_collective, kAllReduceKernel, range_name::kTpAllReduce, 0},
    {Segment::kernel, "layer_norm_fwd_kernel", "", 0.03},
    {Segment::kernel, kGemm, "", 0.32},
    {Segment::kernel, "gelu_fwd_kernel", "", 0.02},
    {Segment::kernel, kGemm, "", 0.32},
    {Segment::tp_collective, kAllReduceKernel, range_name::kTpAllReduce, 0},
};
constexpr Segment kBackwardLayer[] = {
    {Segment::kernel, kGemm, "", 0.64},
    {Segment::kernel, "gelu_bwd_kernel", "", 0.04},
    {Segment::kernel, kGemm, "", 0.64},
    {Segment::tp_collective, kAllReduceKernel, range_name::kTpAllReduce, 0},
    {Segment::kernel, "layer_norm_bwd_kernel", "", 0.06},
    {Segment::kernel, kGemm, "", 0.16},
    {Segment::attention_kernel, "flash_bwd_kernel", "", 2.5},
    {Segment::cp_collective, "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL",
     range_name::kCpReduceScatter, 0},
    {Segment::kernel, kGemm, "", 0.5},
    {Segment::tp_collective, kAllReduceKernel, range_name::kTpAllReduce, 0},
    {Segment::kernel, "layer_norm_bwd_kernel", "", 0.06},
};
constexpr std::size_t kLayerSegments = std::size(kForwardLayer);
static_assert(std::size(kBackwardLayer) == kLayerSegments);
// Segments [0, 6) of a forward layer are its attention range, the rest its mlp range; a
// backward layer's mlp range is [0, 5), its attention range the rest.
constexpr std::size_t kForwardAttentionEnd = 6, kBackwardMlpEnd = 5;

using testing::document_lengths;

// One micro-batch of one DP replica and step: its documents, and what each CP rank holds of
// them under contiguous sharding (CP rank c the c-th slice of the packed sequence).
struct Microbatch {
    std::vector<std::int32_t> lengths;
    std::int64_t first_doc_id = 0;
    std::int64_t linear_ns = 0;              // forward GEMMs of one layer on one rank
    std::vector<std::int64_t> attention_ns;  // forward attention core of one layer, by CP rank
};

// One pass of a stage in a step's pipeline, on the GPU clock. Every rank of the node (the
// tp × cp group) starts it together; CP ranks meet in their collectives, so the pass's layers
// end at `layers_end` on the slowest CP rank, earlier on the others.
struct TimedPass {
    int microbatch = 0;
    bool forward = true;
    std::int64_t start = 0;         // the stage was free; a receive waits from here
    std::int64_t layers_start = 0;  // input arrived (and, stage 0, was copied)
    std::int64_t layers_end = 0;    // the slowest CP rank's last layer ended; sends start
    std::int64_t end = 0;           // the stage is free again
};

struct Interval {
    std::int64_t start, end;
};

class ScaleRun {
public:
    explicit ScaleRun(const ScaleRunOptions& o) : o_(o) {
        layers_per_stage_ = std::max(1, o.layers / o.pp);
        tokens_per_rank_ = o.tokens_per_microbatch / o.cp;
        const double held = tokens_per_rank_;
        tp_ns_ = collective_ns(held * kHidden * 2 * 2.0 * (o.tp - 1) / o.tp, kNvlinkBytesPerNs);
        cp_ns_ =
            collective_ns(held * kKeyValueWidth * 2 * 2 / o.tp * (o.cp - 1), kNvlinkBytesPerNs);
        p2p_bytes_ = static_cast<std::int64_t>(held * kHidden * 2 / o.tp);
        p2p_ns_ = collective_ns(static_cast<double>(p2p_bytes_), kNetworkBytesPerNs);
        // The stage's weight gradients, 12h² parameters a layer in bf16, split by TP, in a ring.
        gradient_bytes_ = std::int64_t{12} * kHidden * kHidden * 2 * layers_per_stage_ / o.tp;
        dp_ns_ = collective_ns(2.0 * gradient_bytes_ * (o.dp - 1) / std::max(o.dp, 1),
                               kNetworkBytesPerNs);
        straggler_dp_ = 11 % o.dp;
        straggler_stage_ = 5 % o.pp;
        buffer_.resize(static_cast<std::size_t>(o.cp) * layers_per_stage_ * kLayerSegments);
    }

    int world() const { return o_.dp * o_.tp * o_.pp * o_.cp; }

    // Draws the documents of `steps` steps and plays every DP replica's 1F1B pipeline.
    void plan(int steps) {
        steps_ = steps;
        std::mt19937_64 rng(o_.seed);
        microbatches_.assign(static_cast<std::size_t>(steps) * o_.dp * o_.microbatches, {});
        std::int64_t next_doc = 0;
        for (Microbatch& mb : microbatches_) {
            mb.lengths = document_lengths(rng, o_.tokens_per_microbatch);
            mb.first_doc_id = next_doc;
            next_doc += static_cast<std::int64_t>(mb.lengths.size());
            mb.linear_ns = static_cast<std::int64_t>(kLinearNsPerToken * tokens_per_rank_ / o_.tp);
            mb.attention_ns.assign(static_cast<std::size_t>(o_.cp), 0);
            for (int c = 0; c < o_.cp; ++c) {
                mb.attention_ns[c] =
                    static_cast<std::int64_t>(kAttentionNsPerPair * held_pairs(mb, c) / o_.tp);
            }
        }
        passes_.assign(static_cast<std::size_t>(steps) * o_.dp * o_.pp, {});
        step_start_.assign(static_cast<std::size_t>(steps) + 1, 0);
        optimizer_start_.assign(static_cast<std::size_t>(steps) * o_.pp, 0);
        std::int64_t clock = 2'000'000;
        for (int step = 0; step < steps; ++step) {
            step_start_[step] = clock;
            std::vector<std::int64_t> stage_done(static_cast<std::size_t>(o_.pp), clock);
            for (int dp = 0; dp < o_.dp; ++dp) {
                play_pipeline(step, dp, clock, stage_done);
            }
            std::int64_t latest = clock;
            for (int s = 0; s < o_.pp; ++s) {
                // The DP all-reduce of stage s ends when its last replica arrives, plus the ring.
                optimizer_start_[step * o_.pp + s] = stage_done[s] + dp_ns_;
                latest = std::max(latest, stage_done[s] + dp_ns_ + optimizer_ns());
            }
            clock = latest + kStepGapNs;
        }
        step_start_[steps] = clock;
    }

    // Events of one step on one rank of each stage; every rank of a stage writes as many.
    std::int64_t events_per_step() {
        std::int64_t total = 0;
        for (int s = 0; s < o_.pp; ++s) {
            Emitter counting(*this, names_for_counting(), s * o_.tp * o_.cp);
            counting.emit_step(0);
            total += counting.events() * o_.dp * o_.tp * o_.cp;
        }
        return total;
    }

    Status write(store::TraceWriter& writer) {
        Names names(writer);
        for (int rank = 0; rank < world(); ++rank) {
            Emitter emitter(*this, names, rank);
            emitter.lanes(writer);
            emitter.clock_sync();
            for (int step = 0; step < steps_; ++step) {
                emitter.emit_step(step);
            }
            emitter.hand_over(writer);
            for (int step = 0; step < steps_; ++step) {
                add_workload(writer, rank, step);
            }
            if (auto failure = writer.failure()) {
                return *failure;
            }
        }
        return {};
    }

    std::string config_json() const {
        RunConfig c;
        c.model = {.layers = o_.layers,
                   .hidden = kHidden,
                   .heads = kHeads,
                   .context = o_.tokens_per_microbatch,
                   .vocab = kVocab};
        c.layout.grid = {.dp = o_.dp, .tp = o_.tp, .pp = o_.pp, .cp = o_.cp};
        c.layout.schedule = parallel::PipelineSchedule::one_f_one_b;
        c.dtype = "bf16";
        c.balancer = "fixed";
        c.cp_shard = "contiguous";
        c.layout.microbatches = o_.microbatches;
        c.steps = steps_;
        c.seed = o_.seed;
        c.data = "synthetic documents (bench/common/scale_run.cpp)";
        // The draw of tests/support/synthetic_run.cpp, exp(7.55 + 0.9 N), as the simulator spells
        // it, so that `fulcrum simulate --calibrate` plays these documents.
        c.lengths = kLengths;
        c.backend = "cuda";
        c.comm = "nccl";
        // Labelled synthetic, as tests/support/synthetic_run.cpp labels its runs.
        return "{\"synthetic\":true," + run_config_json(c).substr(1);
    }

private:
    // The run's interned names.
    struct Names {
        explicit Names(TraceSink& sink) {
            for (std::size_t i = 0; i < kLayerSegments; ++i) {
                forward_device[i] = sink.intern(kForwardLayer[i].device_name);
                backward_device[i] = sink.intern(kBackwardLayer[i].device_name);
                forward_range[i] = sink.intern(kForwardLayer[i].range_name);
                backward_range[i] = sink.intern(kBackwardLayer[i].range_name);
            }
            step = sink.intern(range_name::kStep);
            forward = sink.intern(range_name::kForward);
            backward = sink.intern(range_name::kBackward);
            attention = sink.intern(range_name::kAttention);
            mlp = sink.intern(range_name::kMlp);
            recv_activations = sink.intern(range_name::kRecvActivations);
            recv_gradients = sink.intern(range_name::kRecvGradients);
            send_activations = sink.intern(range_name::kSendActivations);
            send_gradients = sink.intern(range_name::kSendGradients);
            dp_all_reduce = sink.intern(range_name::kDpAllReduce);
            optimizer = sink.intern(range_name::kOptimizer);
            clock_sync = sink.intern(kClockSyncMark);
            launch = sink.intern("cudaLaunchKernel");
            copy_call = sink.intern("cudaMemcpyAsync");
            send_kernel = sink.intern("ncclDevKernel_SendRecv");
            input_copy = sink.intern("Memcpy HtoD (Pinned -> Device)");
            gradient_copy = sink.intern("Memcpy DtoD (Device -> Device)");
            optimizer_kernel = sink.intern("multi_tensor_apply_kernel");
            all_reduce_kernel = sink.intern(kAllReduceKernel);
        }
        StringId forward_device[kLayerSegments], backward_device[kLayerSegments];
        StringId forward_range[kLayerSegments], backward_range[kLayerSegments];
        StringId step, forward, backward, attention, mlp, recv_activations, recv_gradients,
            send_activations, send_gradients, dp_all_reduce, optimizer, clock_sync, launch,
            copy_call, send_kernel, input_copy, gradient_copy, optimizer_kernel, all_reduce_kernel;
    };

    // Interns into nothing: counting needs no names.
    struct NullSink final : TraceSink {
        void add_rank(const RankInfo&) override {}
        LaneId add_lane(std::int32_t, LaneKind, std::string_view, std::int64_t) override {
            return LaneId{1};
        }
        void rename_lane(LaneId, std::string_view) override {}
        void set_run_config(std::string) override {}
        StringId intern(std::string_view) override { return StringId{1}; }
        void add_events(const Event*, std::size_t) override {}
        void add_workload(const WorkloadEntry&) override {}
        void add_counter(const CounterSample&) override {}
        void add_import_log(const ImportLogEntry&) override {}
    };
    const Names& names_for_counting() {
        static NullSink sink;
        static const Names names(sink);
        return names;
    }

    // One rank's events, per lane in time order.
    class Emitter {
    public:
        Emitter(ScaleRun& run, const Names& names, int rank)
            : run_(run), n_(names), rank_(rank), o_(run.o_) {
            tp_ = rank % o_.tp;
            cp_ = (rank / o_.tp) % o_.cp;
            stage_ = (rank / (o_.tp * o_.cp)) % o_.pp;
            dp_ = rank / (o_.tp * o_.cp * o_.pp);
        }

        void lanes(store::TraceWriter& writer) {
            RankInfo info;
            info.rank = rank_;
            info.host = "node" + std::to_string(rank_ / (o_.tp * o_.cp));
            info.pid = 4000 + rank_;
            info.device = rank_ % (o_.tp * o_.cp);
            info.dp = dp_;
            info.tp = tp_;
            info.pp = stage_;
            info.cp = cp_;
            writer.add_rank(info);
            host_lane_ = writer.add_lane(rank_, LaneKind::host_thread, "main", 4000 + rank_);
            compute_lane_ = writer.add_lane(rank_, LaneKind::gpu_stream, "stream 7 (compute)", 7);
            nccl_lane_ = writer.add_lane(rank_, LaneKind::gpu_stream, "stream 13 (nccl)", 13);
        }

        void clock_sync() {
            Event mark =
                event(n_.clock_sync, EventKind::mark, Category::schedule, -1, -1, Phase::none);
            mark.lane = host_lane_;
            mark.start_ns = mark.end_ns = 500'000;
            host_.push_back(mark);
        }

        void emit_step(int step) {
            const std::int64_t start = run_.step_start_[step];
            const std::int64_t optimizer_start = run_.optimizer_start_[step * o_.pp + stage_];
            const std::int64_t optimizer_end = optimizer_start + run_.optimizer_ns();
            host_range(n_.step, EventKind::range, Category::schedule, start, optimizer_end, step,
                       -1, Phase::none);
            const auto& passes = run_.passes_of(step, dp_, stage_);
            for (const TimedPass& pass : passes) {
                emit_pass(step, pass);
            }
            // Gradients: this rank arrives after its last pass; the ring ends after the last
            // replica of its stage has arrived.
            const std::int64_t arrival = passes.empty() ? start : passes.back().end;
            host_range(n_.dp_all_reduce, EventKind::collective, Category::communication, arrival,
                       optimizer_start, step, -1, Phase::none, run_.gradient_bytes_);
            device(Stream::nccl, n_.launch, n_.all_reduce_kernel, EventKind::collective,
                   Category::communication, arrival, optimizer_start, step, -1, Phase::none,
                   run_.gradient_bytes_);
            host_range(n_.optimizer, EventKind::range, Category::optimizer, optimizer_start,
                       optimizer_end, step, -1, Phase::none);
            std::int64_t at = optimizer_start;
            const std::int64_t copy_ns = run_.optimizer_ns() - 3 * kOptimizerKernelNs;
            Event& copy = device(Stream::compute, n_.copy_call, n_.gradient_copy, EventKind::memcpy,
                                 Category::memory, at, at + copy_ns, step, -1, Phase::none,
                                 run_.gradient_bytes_);
            copy.copy_kind = CopyKind::device_to_device;
            copy.src_memory = copy.dst_memory = MemoryKind::device;
            at += copy_ns;
            for (int k = 0; k < 3; ++k, at += kOptimizerKernelNs) {
                device(Stream::compute, n_.launch, n_.optimizer_kernel, EventKind::kernel,
                       Category::optimizer, at, at + kOptimizerKernelNs, step, -1, Phase::none);
            }
        }

        std::int64_t events() const {
            return static_cast<std::int64_t>(host_.size() + compute_.size() + nccl_.size());
        }

        void hand_over(store::TraceWriter& writer) {
            for (auto* lane : {&host_, &compute_, &nccl_}) {
                // Built in time order; a parent before the children that start with it.
                if (!std::is_sorted(lane->begin(), lane->end(), in_store_order)) {
                    std::stable_sort(lane->begin(), lane->end(), in_store_order);
                }
                writer.add_events(lane->data(), lane->size());
            }
        }

    private:
        static bool in_store_order(const Event& a, const Event& b) {
            return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
        }

        Event event(StringId name, EventKind kind, Category category, int step, int mb,
                    Phase phase) const {
            Event e;
            e.name = name;
            e.kind = kind;
            e.category = category;
            e.step = step;
            e.microbatch = mb;
            e.stage = static_cast<std::int16_t>(stage_);
            e.phase = phase;
            return e;
        }

        // A host range, given on the GPU clock: the host ran kLaunchLeadNs ahead.
        void host_range(StringId name, EventKind kind, Category category, std::int64_t start,
                        std::int64_t end, int step, int mb, Phase phase, std::int64_t bytes = -1) {
            Event e = event(name, kind, category, step, mb, phase);
            e.lane = host_lane_;
            e.start_ns = start - kLaunchLeadNs;
            e.end_ns = end - kLaunchLeadNs;
            e.bytes = bytes;
            host_.push_back(e);
        }

        // Device work and the host call that launched it, joined by a correlation id.
        enum class Stream { compute, nccl };
        Event& device(Stream stream, StringId call, StringId name, EventKind kind,
                      Category category, std::int64_t start, std::int64_t end, int step, int mb,
                      Phase phase, std::int64_t bytes = -1) {
            const std::int64_t correlation = next_correlation_++;
            Event launch = event(call, EventKind::api, Category::runtime, step, mb, phase);
            launch.lane = host_lane_;
            launch.start_ns = start - kLaunchLeadNs;
            launch.end_ns = launch.start_ns + std::min(kLaunchNs, (end - start) / 2);
            launch.correlation = correlation;
            host_.push_back(launch);
            Event work = event(name, kind, category, step, mb, phase);
            work.lane = stream == Stream::compute ? compute_lane_ : nccl_lane_;
            work.start_ns = start;
            work.end_ns = end;
            work.bytes = bytes;
            work.correlation = correlation;
            std::vector<Event>& events = stream == Stream::compute ? compute_ : nccl_;
            events.push_back(work);
            return events.back();
        }

        void emit_pass(int step, const TimedPass& pass) {
            const Phase phase = pass.forward ? Phase::forward : Phase::backward;
            const int mb = pass.microbatch;
            const bool first = stage_ == 0, last = stage_ == o_.pp - 1;
            const bool receives = pass.forward ? !first : !last;
            const bool sends = pass.forward ? !last : !first;
            const std::int64_t own_end =
                run_.play_pass(step, dp_, stage_, pass, cp_) + (sends ? run_.p2p_ns_ : 0);
            host_range(pass.forward ? n_.forward : n_.backward, EventKind::range, Category::compute,
                       pass.start, own_end, step, mb, phase);
            if (receives) {
                const StringId name = pass.forward ? n_.recv_activations : n_.recv_gradients;
                host_range(name, EventKind::collective, Category::communication, pass.start,
                           pass.layers_start, step, mb, phase, run_.p2p_bytes_);
                device(Stream::nccl, n_.launch, n_.send_kernel, EventKind::collective,
                       Category::communication, pass.start, pass.layers_start, step, mb, phase,
                       run_.p2p_bytes_);
            }
            if (pass.forward && first) {
                Event& copy =
                    device(Stream::compute, n_.copy_call, n_.input_copy, EventKind::memcpy,
                           Category::offload, pass.start, pass.start + kInputCopyNs, step, mb,
                           phase, std::int64_t{o_.tokens_per_microbatch} * 4);
                copy.copy_kind = CopyKind::host_to_device;
                copy.src_memory = MemoryKind::pinned;
                copy.dst_memory = MemoryKind::device;
            }
            const Segment* layer = pass.forward ? kForwardLayer : kBackwardLayer;
            const StringId* device_names = pass.forward ? n_.forward_device : n_.backward_device;
            const StringId* range_names = pass.forward ? n_.forward_range : n_.backward_range;
            const std::size_t split = pass.forward ? kForwardAttentionEnd : kBackwardMlpEnd;
            const Interval* times = run_.buffer_.data() + static_cast<std::size_t>(cp_) *
                                                              run_.layers_per_stage_ *
                                                              kLayerSegments;
            for (int l = 0; l < run_.layers_per_stage_; ++l) {
                const Interval* at = times + static_cast<std::size_t>(l) * kLayerSegments;
                const StringId blocks[2] = {pass.forward ? n_.attention : n_.mlp,
                                            pass.forward ? n_.mlp : n_.attention};
                for (int b = 0; b < 2; ++b) {
                    const std::size_t begin = b == 0 ? 0 : split;
                    const std::size_t end = b == 0 ? split : kLayerSegments;
                    host_range(blocks[b], EventKind::range,
                               blocks[b] == n_.attention ? Category::attention : Category::compute,
                               at[begin].start, at[end - 1].end, step, mb, phase);
                    for (std::size_t s = begin; s < end; ++s) {
                        const Segment& segment = layer[s];
                        const bool collective = segment.kind == Segment::tp_collective ||
                                                segment.kind == Segment::cp_collective;
                        if (collective) {
                            const std::int64_t bytes = segment.kind == Segment::tp_collective
                                                           ? run_.tp_bytes()
                                                           : run_.cp_bytes();
                            host_range(range_names[s], EventKind::collective,
                                       Category::communication, at[s].start, at[s].end, step, mb,
                                       phase, bytes);
                            device(Stream::nccl, n_.launch, device_names[s], EventKind::collective,
                                   Category::communication, at[s].start, at[s].end, step, mb, phase,
                                   bytes);
                        } else {
                            device(Stream::compute, n_.launch, device_names[s], EventKind::kernel,
                                   segment.kind == Segment::attention_kernel ? Category::attention
                                                                             : Category::compute,
                                   at[s].start, at[s].end, step, mb, phase);
                        }
                    }
                }
            }
            if (sends) {
                const StringId name = pass.forward ? n_.send_activations : n_.send_gradients;
                const std::int64_t send_start = own_end - run_.p2p_ns_;
                host_range(name, EventKind::collective, Category::communication, send_start,
                           own_end, step, mb, phase, run_.p2p_bytes_);
                device(Stream::nccl, n_.launch, n_.send_kernel, EventKind::collective,
                       Category::communication, send_start, own_end, step, mb, phase,
                       run_.p2p_bytes_);
            }
        }

        ScaleRun& run_;
        const Names& n_;
        int rank_;
        const ScaleRunOptions& o_;
        int dp_ = 0, tp_ = 0, stage_ = 0, cp_ = 0;
        LaneId host_lane_{1}, compute_lane_{1}, nccl_lane_{1};
        std::vector<Event> host_, compute_, nccl_;
        std::int64_t next_correlation_ = 1;
    };

    static std::int64_t collective_ns(double bytes, double bytes_per_ns) {
        return kCollectiveLatencyNs + static_cast<std::int64_t>(bytes / bytes_per_ns);
    }
    std::int64_t tp_bytes() const { return std::int64_t{tokens_per_rank_} * kHidden * 2; }
    std::int64_t cp_bytes() const {
        return std::int64_t{tokens_per_rank_} * kKeyValueWidth * 2 * 2 / o_.tp;
    }
    std::int64_t optimizer_ns() const { return 3 * kOptimizerKernelNs + 400'000; }

    // Causal (query, key) pairs of CP rank c's slice of the packed sequence: a token at
    // position t of its document attends to t + 1 keys (docs/analyses.md, "Held work").
    std::int64_t held_pairs(const Microbatch& mb, int c) const {
        const std::int64_t lo = std::int64_t{c} * tokens_per_rank_, hi = lo + tokens_per_rank_;
        std::int64_t offset = 0, pairs = 0;
        for (const std::int32_t length : mb.lengths) {
            const std::int64_t begin = std::max(offset, lo), end = std::min(offset + length, hi);
            if (begin < end) {
                const std::int64_t p = begin - offset, l = end - begin;
                pairs += (2 * p + 1 + l) * l / 2;
            }
            offset += length;
        }
        return pairs;
    }

    void add_workload(store::TraceWriter& writer, int rank, int step) const {
        const int dp = rank / (o_.tp * o_.cp * o_.pp), c = (rank / o_.tp) % o_.cp;
        const std::int64_t lo = std::int64_t{c} * tokens_per_rank_, hi = lo + tokens_per_rank_;
        for (int m = 0; m < o_.microbatches; ++m) {
            const Microbatch& mb = microbatch(step, dp, m);
            std::int64_t offset = 0, doc = mb.first_doc_id;
            for (const std::int32_t length : mb.lengths) {
                const std::int64_t begin = std::max(offset, lo),
                                   end = std::min(offset + length, hi);
                if (begin < end) {
                    writer.add_workload({rank, step, m, doc, length,
                                         static_cast<std::int32_t>(begin - offset),
                                         static_cast<std::int32_t>(end - offset), "fixed"});
                }
                offset += length;
                ++doc;
            }
        }
    }

    const Microbatch& microbatch(int step, int dp, int m) const {
        return microbatches_[(static_cast<std::size_t>(step) * o_.dp + dp) * o_.microbatches + m];
    }
    std::vector<TimedPass>& passes_of(int step, int dp, int stage) {
        return passes_[(static_cast<std::size_t>(step) * o_.dp + dp) * o_.pp + stage];
    }
    double slowdown(int dp, int stage) const {
        return dp == straggler_dp_ && stage == straggler_stage_ ? kStragglerSlowdown : 1.0;
    }

    // Plays one pass's layers on every CP rank from `layers_start` into buffer_ (segment times
    // by CP rank, layer and segment); CP ranks meet in their CP collectives, TP ranks are alike.
    // Returns CP rank `cp_rank`'s end (−1: the latest).
    std::int64_t play_pass(int step, int dp, int stage, const TimedPass& pass, int cp_rank) {
        const Microbatch& mb = microbatch(step, dp, pass.microbatch);
        const Segment* layer = pass.forward ? kForwardLayer : kBackwardLayer;
        const double slow = slowdown(dp, stage);
        const double gemm_scale = static_cast<double>(mb.linear_ns) * slow;
        std::int64_t at[16];
        std::fill(at, at + o_.cp, pass.layers_start);
        const std::size_t per_rank = static_cast<std::size_t>(layers_per_stage_) * kLayerSegments;
        for (int l = 0; l < layers_per_stage_; ++l) {
            for (std::size_t s = 0; s < kLayerSegments; ++s) {
                const Segment& segment = layer[s];
                if (segment.kind == Segment::cp_collective) {
                    const std::int64_t last = *std::max_element(at, at + o_.cp) + cp_ns_;
                    for (int c = 0; c < o_.cp; ++c) {
                        buffer_[c * per_rank + l * kLayerSegments + s] = {at[c], last};
                        at[c] = last;
                    }
                    continue;
                }
                for (int c = 0; c < o_.cp; ++c) {
                    std::int64_t ns = tp_ns_;
                    if (segment.kind == Segment::kernel) {
                        ns = static_cast<std::int64_t>(gemm_scale * segment.share);
                    } else if (segment.kind == Segment::attention_kernel) {
                        ns = static_cast<std::int64_t>(static_cast<double>(mb.attention_ns[c]) *
                                                       slow * segment.share);
                    }
                    ns = std::max(ns, kMinKernelNs);
                    buffer_[c * per_rank + l * kLayerSegments + s] = {at[c], at[c] + ns};
                    at[c] += ns;
                }
            }
        }
        return cp_rank >= 0 ? at[cp_rank] : *std::max_element(at, at + o_.cp);
    }

    // 1F1B on each stage (Narayanan et al., SC'21, §2.2: min(p − s − 1, m) warm-up forwards,
    // then one forward and one backward alternately, then the remaining backwards); a pass
    // starts when its stage is free and, past a receive, when its input has arrived.
    void play_pipeline(int step, int dp, std::int64_t clock, std::vector<std::int64_t>& done) {
        const int p = o_.pp, m = o_.microbatches;
        std::vector<std::vector<std::pair<int, bool>>> order(static_cast<std::size_t>(p));
        for (int s = 0; s < p; ++s) {
            const int warmup = std::min(p - s - 1, m);
            int f = 0, b = 0;
            for (; f < warmup; ++f) {
                order[s].push_back({f, true});
            }
            while (b < m) {
                if (f < m) {
                    order[s].push_back({f++, true});
                }
                order[s].push_back({b++, false});
            }
        }
        std::vector<std::vector<std::int64_t>> forward_done(
            static_cast<std::size_t>(p),
            std::vector<std::int64_t>(static_cast<std::size_t>(m), -1));
        auto backward_done = forward_done;
        std::vector<std::size_t> next(static_cast<std::size_t>(p), 0);
        std::vector<std::int64_t> free_at(static_cast<std::size_t>(p), clock);
        for (bool progressed = true; progressed;) {
            progressed = false;
            for (int s = 0; s < p; ++s) {
                auto& passes = passes_of(step, dp, s);
                while (next[s] < order[s].size()) {
                    const auto [mb, forward] = order[s][next[s]];
                    std::int64_t input = -1;  // when the pass's input left its neighbour
                    if (forward && s > 0) {
                        if (forward_done[s - 1][mb] < 0)
                            break;
                        input = forward_done[s - 1][mb];
                    } else if (!forward && s + 1 < p) {
                        if (backward_done[s + 1][mb] < 0)
                            break;
                        input = backward_done[s + 1][mb];
                    } else if (!forward && forward_done[s][mb] < 0) {
                        break;
                    }
                    TimedPass pass;
                    pass.microbatch = mb;
                    pass.forward = forward;
                    pass.start = free_at[s];
                    pass.layers_start =
                        input >= 0 ? std::max(pass.start + kCollectiveLatencyNs, input + p2p_ns_)
                                   : pass.start + (forward && s == 0 ? kInputCopyNs : 0);
                    pass.layers_end = play_pass(step, dp, s, pass, -1);
                    const bool sends = forward ? s + 1 < p : s > 0;
                    pass.end = pass.layers_end + (sends ? p2p_ns_ : 0);
                    (forward ? forward_done : backward_done)[s][mb] = pass.layers_end;
                    free_at[s] = pass.end;
                    passes.push_back(pass);
                    ++next[s];
                    progressed = true;
                }
            }
        }
        for (int s = 0; s < p; ++s) {
            done[s] = std::max(done[s], free_at[s]);
        }
    }

    ScaleRunOptions o_;
    int layers_per_stage_ = 1, tokens_per_rank_ = 0, steps_ = 0;
    std::int64_t tp_ns_ = 0, cp_ns_ = 0, p2p_ns_ = 0, p2p_bytes_ = 0, dp_ns_ = 0;
    std::int64_t gradient_bytes_ = 0;
    int straggler_dp_ = 0, straggler_stage_ = 0;
    std::vector<Microbatch> microbatches_;
    std::vector<std::vector<TimedPass>> passes_;  // by (step, dp, stage)
    std::vector<std::int64_t> step_start_;
    std::vector<std::int64_t> optimizer_start_;  // by (step, stage): the DP all-reduce ended
    std::vector<Interval> buffer_;               // play_pass's segment times
};

// The command line recorded in the run: what make_scale_run compares to keep a file.
std::string command_of(const ScaleRunOptions& o) {
    return "make_scale_run (bench/common/scale_run.cpp v1) --dp " + std::to_string(o.dp) +
           " --tp " + std::to_string(o.tp) + " --pp " + std::to_string(o.pp) + " --cp " +
           std::to_string(o.cp) + " --microbatches " + std::to_string(o.microbatches) +
           " --layers " + std::to_string(o.layers) + " --tokens " +
           std::to_string(o.tokens_per_microbatch) + " --events " +
           std::to_string(o.target_events) + " --seed " + std::to_string(o.seed);
}

std::int64_t file_bytes(const std::string& path) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    return ec ? 0 : static_cast<std::int64_t>(size);
}

// The file at `path` when it is complete and was made with these options.
std::optional<ScaleRunFile> existing(const std::string& path, const ScaleRunOptions& o) {
    auto reader = store::TraceReader::open(path);
    if (!reader || reader->incomplete() || reader->run().command != command_of(o)) {
        return std::nullopt;
    }
    // From the blocks' rows: summary() would decode every block for its kinds and steps.
    auto pack = reader->event_pack();
    if (!pack || !pack->has_value() || (*pack)->events == 0) {
        return std::nullopt;
    }
    ScaleRunFile file;
    file.events = (*pack)->events;
    file.bytes = file_bytes(path);
    file.steps = parse_run_config(reader->run().config_json, reader->ranks()).steps;
    file.kept = true;
    return file;
}

}  // namespace

Result<ScaleRunOptions> scale_run_options(int ranks, std::int64_t target_events) {
    ScaleRunOptions o;
    const int per_replica = o.tp * o.pp * o.cp;
    if (ranks < per_replica || ranks % per_replica != 0) {
        return Error{ErrorCode::invalid_input,
                     "ranks must be a positive multiple of " + std::to_string(per_replica) +
                         " (tp 4 × pp 8 × cp 2 a DP replica), got " + std::to_string(ranks)};
    }
    if (target_events <= 0) {
        return Error{ErrorCode::invalid_input,
                     "events must be positive, got " + std::to_string(target_events)};
    }
    o.dp = ranks / per_replica;
    o.target_events = target_events;
    return o;
}

Result<ScaleRunFile> make_scale_run(const std::string& path, const ScaleRunOptions& options,
                                    bool remake) {
    if (options.cp < 1 || options.cp > 16 || options.dp < 1 || options.tp < 1 || options.pp < 1 ||
        options.microbatches < 1 || options.layers < 1 || options.tokens_per_microbatch < 16) {
        return Error{ErrorCode::invalid_input, "make_scale_run: options out of range"};
    }
    if (!remake) {
        if (auto kept = existing(path, options)) {
            return *kept;
        }
    }
    const auto start = Clock::now();
    ScaleRun run(options);
    run.plan(1);
    const std::int64_t per_step = std::max<std::int64_t>(run.events_per_step(), 1);
    const int steps = static_cast<int>(
        std::max<std::int64_t>(1, (options.target_events + per_step / 2) / per_step));
    run.plan(steps);

    const std::string partial = path + ".partial";
    remove_run_file(path);  // and a .partial left by a killed run
    RunInfo info;
    info.name = "scale-" + std::to_string(run.world()) + "-ranks";
    info.command = command_of(options);
    info.start_utc_ns = 1'795'000'000'000'000'000;  // 2026-11-18, UTC ns
    info.config_json = run.config_json();
    info.producer = "fulcrum bench (scale_run)";
    store::WriterOptions writer_options;
    writer_options.overwrite = true;
    writer_options.durable = false;  // written to .partial and renamed when whole
    writer_options.events = store::WriterOptions::EventStorage::blocks;
    auto writer = store::TraceWriter::create(partial, info, writer_options);
    if (!writer) {
        return writer.error();
    }
    Status written = run.write(**writer);
    Status closed = (*writer)->close();
    const std::int64_t events = (*writer)->stats().events_written;
    writer->reset();
    if (!written || !closed) {
        remove_run_file(partial);
        return written ? closed.error() : written.error();
    }
    std::error_code ec;
    std::filesystem::rename(partial, path, ec);
    if (ec) {
        return Error{ErrorCode::io,
                     "cannot rename '" + partial + "' to '" + path + "': " + ec.message()};
    }
    ScaleRunFile file;
    file.events = events;
    file.bytes = file_bytes(path);
    file.steps = steps;
    file.seconds = seconds_since(start);
    return file;
}

Result<ScaleRunFile> make_scale_run(const std::string& path, int ranks,
                                    std::int64_t target_events) {
    auto options = scale_run_options(ranks, target_events);
    if (!options) {
        return options.error();
    }
    return make_scale_run(path, *options);
}

}  // namespace fulcrum::bench
