// fulcrum-train: the bundled GPT trainer, one process per rank under mpirun.
//
//   mpirun -np 8 fulcrum-train --dp 2 --pp 2 --cp 2 --balancer wlb --lengths long-tail:context=1024
//
// Every option is checked before any work, identically on every rank; rank 0 says what is
// wrong and every rank exits with status 2.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/balance/cp_shard.h"
#include "core/balance/packing.h"
#include "engine/backend/cpu_backend.h"
#if FULCRUM_HAVE_CUDA_BACKEND
#include "engine/backend/cuda/cuda_backend.h"
#endif
#include "engine/comm/mpi_communicator.h"
#include "engine/comm/rendezvous.h"
#include "engine/comm/staged_communicator.h"
#if FULCRUM_HAVE_NCCL
#include "engine/comm/nccl_communicator.h"
#endif
#include "core/parallel/hot_switch_spec.h"
#include "core/parallel/layout.h"
#include "core/parallel/layout_flags.h"
#include "core/parallel/memory_model.h"
#include "core/parallel/run_config.h"
#include "core/parallel/schedule.h"
#include "core/trace/annotations.h"
#include "engine/data/step_plan.h"
#include "engine/distributed/hot_switch_trainer.h"
#include "engine/distributed/parallel_trainer.h"
#include "engine/distributed/topology.h"
#include "engine/distributed/zero_gradients.h"
#include "engine/distributed/zero_parameters.h"
#include "engine/instrument/annotations.h"
#include "engine/model/gpt.h"
#include "engine/train/trainer.h"

using namespace fulcrum;
using namespace fulcrum::engine;

namespace {

struct Options {
    GridShape grid;
    std::string schedule = "1f1b";
    int virtual_stages = 1;
    std::string stage_layers;  // empty: the even split
    std::string recompute = "none";
    bool sequence_parallel = false;
    std::string balancer = "fixed";
    std::string cp_shard = "per-doc";
    std::string data_dir;
    std::string split = "blank-line";
    std::string lengths;
    std::int64_t documents = 4096;
    int steps = 10;
    int epochs = 0;  // > 0: train this many whole epochs instead of --steps
    std::uint64_t seed = 1;
    int microbatches = 4;
    parallel::ModelShape model;  // --vocab is not an option: fulcrum-train models bytes
    float learning_rate = 1e-3f;
    int warmup = 0;
    double ilp_time_limit = 1.0;
    int ilp_window = 4;
    std::int64_t wlb_max_tokens = 0;  // 0: the context
    int wlb_max_delay = -1;           // -1: unbounded
    std::string wlb_thresholds = "tuned";
    std::string packing_cost = "model";
    std::string backend = "auto";
    std::string precision;  // empty: bf16 on CUDA
    std::string comm = "auto";
    std::string rendezvous;
    int attention_chunk = 0;
    std::string overlap_grad_reduce = "auto";
    std::string mpi_wait = "auto";
    std::string offload = "on";
    std::string dump_parameters;
    std::string losses_file;
    std::string hot_switch;  // empty: the one layout of --dp, --tp, --pp, --cp
    bool hot_switch_check = false;
    int zero_stage = 0;  // ZeRO over DP × CP: 1 the optimizer state, 2 the gradients too
    parallel::ContextParallelism cp_impl = parallel::ContextParallelism::all_gather;
    bool offload_checkpoints = false;  // with --recompute full: block outputs in host memory
};

int fail(int rank, const std::string& message) {
    if (rank == 0) {
        std::fprintf(stderr, "fulcrum-train: error: %s\n", message.c_str());
    }
    return 2;
}

// Whether gradients are reduced layer by layer during the last backward pass: asked for, or by
// default with NCCL (whose collectives run beside compute); never under --hot-switch, whose
// buckets reduce after their passes (a bucket may take several rounds over one buffer).
bool overlaps_grad_reduce(const Options& o, const std::string& comm) {
    return o.hot_switch.empty() && o.zero_stage < 2 &&
           (o.overlap_grad_reduce == "on" || (o.overlap_grad_reduce == "auto" && comm == "nccl"));
}

// run.config (core/parallel/run_config.h): how this run trains, in the keys every reader knows.
// `layout`: the one fulcrum-train checked (its stage_layers empty for the even split).
std::string run_config_json(const Options& o, const parallel::Layout& layout,
                            const std::string& data, const std::string& backend,
                            const std::string& comm, const double (&gemm_gflops)[2],
                            int host_cores) {
    RunConfig config;
    config.model = o.model;
    config.layout = layout;
    config.overlap_grad_reduce = overlaps_grad_reduce(o, comm);
    config.dtype = "fp32";
    config.balancer = o.balancer;
    config.cp_shard = o.cp_shard;
    config.steps = o.epochs > 0 ? 0 : o.steps;
    config.epochs = o.epochs;
    config.seed = o.seed;
    config.ilp_window = o.ilp_window;
    config.wlb_max_tokens = o.wlb_max_tokens > 0 ? o.wlb_max_tokens : o.model.context;
    config.wlb_max_delay = o.wlb_max_delay;
    config.wlb_thresholds = o.wlb_thresholds;
    config.packing_cost = o.packing_cost;
    config.attention_chunk = o.attention_chunk;
    config.offload = o.attention_chunk > 0 && o.offload == "on";
    config.data = data;
    config.lengths = o.lengths;
    config.documents = o.documents;
    config.backend = backend;
    config.gemm_gflops = gemm_gflops[0];
    config.gemm_gflops_cold = gemm_gflops[1];
    config.host_cores = host_cores;
    config.comm = comm;
    config.hot_switch = o.hot_switch;
    return fulcrum::run_config_json(config);
}

// The backend's rate on one layer's weight-gradient GEMMs (dW of QKV, the projection and the
// MLP's two, TP-local, 24·rows·C²/tp FLOPs), GFLOP/s, best of three: what the simulator needs to
// take W out of a 1F1B run's backward (Zero Bubble, Qi et al., ICLR'24, §2: W is the dW GEMMs;
// on the CPU backend they run at BLAS speed, several times the rate of the LayerNorm, GeLU and
// attention loops that share the backward, so no FLOP count can say W's share of its time).
// Its buffers are freed before the model allocates, so the memory peak is not the probe's.
// CPU only (0 on CUDA): a GPU's backward is its GEMMs, whose FLOPs split it exactly.
// `cold`: with the caches emptied before each try (64 MiB written over, more than this class
// of machine's last-level cache), the rate of ZB-H1's W, which runs long after B read the
// layer's activations; measured here at about 0.73× the hot rate (bench/README.md).
double weight_gradient_gemm_gflops(Backend& backend, const ModelShape& model, std::int64_t rows,
                                   int tp, bool cold) {
    if (backend.device() != Device::cpu) {
        return 0;
    }
    std::vector<unsigned char> eviction(cold ? std::size_t{64} << 20 : 0);
    const std::int64_t c = model.hidden, cl = c / tp;
    rows = std::max<std::int64_t>(rows, 1);
    struct Gemm {
        std::int64_t in, out;
    };
    const Gemm gemms[] = {{c, 3 * cl}, {cl, c}, {c, 4 * cl}, {4 * cl, c}};
    DeviceBuffer buffer = backend.allocate(std::size_t(2 * rows * 4 * c + 5 * c * c) * 4);
    double flops = 0;
    for (const Gemm& g : gemms) {
        flops += 2.0 * double(rows) * double(g.in) * double(g.out);
    }
    double best = 0;
    for (int rep = 0; rep < 3; ++rep) {
        backend.synchronize(kComputeStream);
        for (std::size_t i = 0; i < eviction.size(); i += 64) {
            eviction[i] = static_cast<unsigned char>(eviction[i] + 1);
        }
        const auto start = std::chrono::steady_clock::now();
        for (const Gemm& g : gemms) {
            // With the bias gradient, as W computes it.
            backend.matmul_backward(Tensor{}, buffer.f32(2 * rows * 4 * c, {g.out, g.in}),
                                    buffer.f32(2 * rows * 4 * c + 4 * c * c, {g.out}),
                                    buffer.f32(0, {rows, g.out}),
                                    buffer.f32(rows * 4 * c, {rows, g.in}),
                                    buffer.f32(2 * rows * 4 * c, {g.out, g.in}));
        }
        backend.synchronize(kComputeStream);
        const double ns =
            std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
                .count();
        best = std::max(best, ns > 0 ? flops / ns : 0.0);
    }
    return best;
}

// Every rank's peak of counted device and pinned memory (backend.h), bytes, gathered on
// every rank: stages differ (embedding, head, the schedule's micro-batches in flight), so
// rank 0's alone does not say which rank needs the most. Every rank must call it.
std::vector<double> peaks_by_rank(Communicator& world, const MemoryUse& use) {
    std::vector<double> peaks(std::size_t(2 * world.size()), 0.0);
    peaks[std::size_t(2 * world.rank())] = double(use.peak_device_bytes);
    peaks[std::size_t(2 * world.rank() + 1)] = double(use.peak_pinned_bytes);
    world.all_reduce_sum(std::span<double>(peaks));
    return peaks;
}

// --hot-switch's spec, checked against the model and the world, and against the options it
// cannot go with: each bucket names a whole layout, split evenly over the stages.
Result<parallel::HotSwitchSpec> check_hot_switch(const CLI::App& app, const Options& o, int world) {
    const auto invalid = [](std::string message) {
        return Error{ErrorCode::invalid_input, std::move(message)};
    };
    std::string given;
    for (const char* name : {"--dp", "--tp", "--pp", "--cp"}) {
        if (app.get_option(name)->count() > 0) {
            given += (given.empty() ? "" : ", ") + std::string(name);
        }
    }
    if (!given.empty()) {
        return invalid("--hot-switch names a layout for each length bucket; leave out " + given +
                       " (the static layout)");
    }
    if (!o.stage_layers.empty() || o.virtual_stages != 1 || o.schedule == "interleaved") {
        return invalid(
            "--hot-switch splits each layout's layers evenly over its stages, one model chunk "
            "each; leave out --stage-layers, --virtual-stages and the interleaved schedule");
    }
    if (o.overlap_grad_reduce == "on") {
        return invalid(
            "--hot-switch reduces each bucket's gradients after its passes; leave "
            "out --overlap-grad-reduce on");
    }
    if (o.zero_stage > 0) {
        return invalid("--hot-switch moves whole parameters between layouts; leave out --zero");
    }
    if (o.cp_impl != parallel::ContextParallelism::all_gather) {
        return invalid(
            "--hot-switch's layouts use all-gather context parallelism; leave out "
            "--cp-impl");
    }
    if (o.offload_checkpoints) {
        return invalid(
            "--hot-switch does not offload checkpoints; leave out "
            "--offload-checkpoints");
    }
    if (o.sequence_parallel) {
        return invalid(
            "--hot-switch does not take --sequence-parallel (its layouts' TP degrees "
            "differ, and some have none)");
    }
    auto spec = parallel::parse_hot_switch_spec(
        o.hot_switch, {.world = world, .heads = o.model.heads, .layers = o.model.layers});
    if (!spec) {
        return spec.error();
    }
    if (auto status = HotSwitchTrainer::check(*spec, o.model); !status) {
        return status.error();
    }
    return spec;
}

// Every rank's bytes sent to every peer ([from · world + to]) and received ([world² + rank]),
// gathered on every rank. Every rank must call it.
std::vector<double> traffic_by_rank(Communicator& world, const SwitchTraffic& traffic) {
    const auto n = static_cast<std::size_t>(world.size());
    std::vector<double> all(n * n + n, 0.0);
    const auto me = static_cast<std::size_t>(world.rank());
    for (std::size_t peer = 0; peer < n; ++peer) {
        all[me * n + peer] = traffic.sent_to[peer];
    }
    all[n * n + me] = traffic.received;
    world.all_reduce_sum(std::span<double>(all));
    return all;
}

void print_traffic(const std::vector<double>& traffic, int world, int switches) {
    const auto n = static_cast<std::size_t>(world);
    std::printf("hot-switch traffic over %d switches (bytes):\n", switches);
    for (std::size_t r = 0; r < n; ++r) {
        double sent = 0;
        std::string to;
        for (std::size_t peer = 0; peer < n; ++peer) {
            sent += traffic[r * n + peer];
            if (traffic[r * n + peer] > 0) {
                to += (to.empty() ? "" : ", ") + std::to_string(peer) + ": " +
                      std::to_string(std::llround(traffic[r * n + peer]));
            }
        }
        std::printf("  rank %zu sent %lld%s, received %lld\n", r,
                    static_cast<long long>(std::llround(sent)),
                    to.empty() ? "" : (" (to " + to + ")").c_str(),
                    static_cast<long long>(std::llround(traffic[n * n + r])));
    }
}

// Where this rank computes and how it talks to the others.
struct Placement {
    bool use_cuda = false;
    int devices = 0;  // GPUs on this node
    NodeRanks node;
    bool shared_gpu = false;  // more ranks on this node than GPUs
    std::string comm;         // "mpi", "staged" or "nccl"
};

// Which backend: the same answer on every rank, since every rank asks the same question of its
// own node (a mixed cluster would have to say --backend explicitly); then how device buffers
// travel between ranks (comm/staged_communicator.h says why there are two ways on a GPU).
Result<Placement> place(const Options& o, int world_size) {
    const auto invalid = [](std::string message) {
        return Error{ErrorCode::invalid_input, std::move(message)};
    };
    std::string no_gpu_reason = "this build has no CUDA backend (no CUDA toolkit at build time)";
    Placement p;
    p.node = node_ranks();
#if FULCRUM_HAVE_CUDA_BACKEND
    const bool gpu = cuda_device_available(&no_gpu_reason);
    p.devices = gpu ? cuda_device_count() : 0;
    p.use_cuda = o.backend == "cuda" || (o.backend == "auto" && gpu);
    if (o.backend == "cuda" && !gpu) {
        return invalid("--backend cuda: no usable GPU (" + no_gpu_reason +
                       "); use --backend cpu or auto");
    }
#else
    if (o.backend == "cuda") {
        return invalid("--backend cuda: " + no_gpu_reason + "; use --backend cpu or auto");
    }
#endif
#if FULCRUM_HAVE_NCCL
    constexpr bool have_nccl = true;
#else
    constexpr bool have_nccl = false;
#endif
    p.shared_gpu = p.node.local_size > p.devices;
    std::string& comm = p.comm;
    comm = o.comm;
    if (comm == "auto") {
        comm = !p.use_cuda                                    ? "mpi"
               : have_nccl && world_size > 1 && !p.shared_gpu ? "nccl"
                                                              : "staged";
    }
    if (comm == "mpi" && p.use_cuda) {
        return invalid(
            "--comm mpi cannot carry the CUDA backend's device buffers; use "
            "--comm staged (through host memory) or nccl");
    }
    if (comm == "nccl" && !p.use_cuda) {
        return invalid("--comm nccl needs the CUDA backend (--backend cuda)");
    }
    if (comm == "nccl" && !have_nccl) {
        return invalid("--comm nccl: this build has no NCCL; use --comm staged");
    }
    if (!o.rendezvous.empty() && comm != "nccl") {
        return invalid("--rendezvous is for NCCL's bootstrap; this run communicates by " + comm);
    }
    if (comm == "nccl" && p.shared_gpu) {
        return invalid(std::to_string(p.node.local_size) + " ranks on this node share " +
                       std::to_string(p.devices) +
                       " GPU(s), and NCCL refuses two ranks of "
                       "one communicator on one GPU; use --comm staged");
    }
    return p;
}

// The options' choices, checked (before any work, the same way on every rank).
struct Choices {
    PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
    Recompute recompute = Recompute::none;
    balance::Balancer balancer = balance::Balancer::fixed;
    balance::CpSharding sharding = balance::CpSharding::contiguous;
    std::optional<std::vector<std::int64_t>> wlb_thresholds;
};

Result<Choices> check_choices(const CLI::App& app, const Options& o) {
    const auto invalid = [](std::string message) {
        return Error{ErrorCode::invalid_input, std::move(message)};
    };
    Choices c;
    auto schedule = parse_schedule(o.schedule);
    if (!schedule) {
        return schedule.error();
    }
    c.schedule = *schedule;
    auto recompute = parse_recompute(o.recompute);
    if (!recompute) {
        return recompute.error();
    }
    c.recompute = *recompute;
    if (*recompute == Recompute::selective && o.attention_chunk > 0) {
        return invalid(
            "--recompute selective re-runs attention on the Q, K and V a layer "
            "keeps on the device, but chunked attention (--attention-chunk) keeps "
            "them by chunk, in host memory; use --recompute full or none with it");
    }
    auto balancer = balance::parse_balancer(o.balancer);
    if (!balancer) {
        return balancer.error();
    }
    c.balancer = *balancer;
    auto sharding = balance::parse_cp_sharding(o.cp_shard);
    if (!sharding) {
        return sharding.error();
    }
    c.sharding = *sharding;
    if (c.sharding == balance::CpSharding::chunked && o.attention_chunk < 1) {
        return invalid(
            "--cp-shard chunked cuts every chunk of the attention over the CP ranks; give "
            "--attention-chunk N too");
    }
    auto wlb_thresholds = balance::parse_wlb_thresholds(o.wlb_thresholds);
    if (!wlb_thresholds) {
        return wlb_thresholds.error();
    }
    c.wlb_thresholds = std::move(*wlb_thresholds);
    if (o.wlb_max_tokens != 0 && o.wlb_max_tokens < o.model.context) {
        return invalid("--wlb-max-tokens " + std::to_string(o.wlb_max_tokens) +
                       " is less than --context " + std::to_string(o.model.context) +
                       "; S_max is at least the fixed micro-batch's tokens");
    }
    if (app.get_option("--wlb-max-delay")->count() > 0 && o.wlb_max_delay < 0) {
        return invalid("--wlb-max-delay must be at least 0 steps, not " +
                       std::to_string(o.wlb_max_delay));
    }
    if (o.packing_cost != "model") {
        return invalid("--packing-cost must be model, not '" + o.packing_cost + "'");
    }
    if (o.split != "file" && o.split != "blank-line") {
        return invalid("--split must be file or blank-line, not '" + o.split + "'");
    }
    if (o.backend != "cpu" && o.backend != "cuda" && o.backend != "auto") {
        return invalid("--backend must be cpu, cuda or auto, not '" + o.backend + "'");
    }
    if (!o.precision.empty() && o.precision != "bf16" && o.precision != "fp32") {
        return invalid("--precision must be bf16 or fp32, not '" + o.precision + "'");
    }
    if (o.comm != "auto" && o.comm != "mpi" && o.comm != "staged" && o.comm != "nccl") {
        return invalid("--comm must be auto, mpi, staged or nccl, not '" + o.comm + "'");
    }
    return c;
}

// --dump-parameters and --losses, on rank 0 after training.
Status write_outputs(const Options& o, const std::vector<float>& parameters,
                     const std::vector<double>& losses) {
    if (!o.dump_parameters.empty()) {
        std::ofstream out(o.dump_parameters, std::ios::binary);
        out.write(reinterpret_cast<const char*>(parameters.data()),
                  static_cast<std::streamsize>(parameters.size() * sizeof(float)));
        if (!out) {
            return Error{ErrorCode::io, "cannot write '" + o.dump_parameters + "'"};
        }
    }
    if (!o.losses_file.empty()) {
        std::FILE* file = std::fopen(o.losses_file.c_str(), "w");
        if (file == nullptr) {
            return Error{ErrorCode::io, "cannot write '" + o.losses_file + "'"};
        }
        for (double loss : losses) {
            std::fprintf(file, "%.9g\n", loss);
        }
        std::fclose(file);
    }
    return {};
}

// Rank 0's peak and every rank's (`peaks`: device and pinned bytes by rank, peaks_by_rank),
// each beside the memory model's prediction for its stage where there is one (`shape`: the
// CPU backend's runs without --hot-switch).
void print_memory(const MemoryUse& use, bool use_cuda, const Topology& topology,
                  const std::vector<double>& peaks, const parallel::MemoryShape* shape) {
    std::printf("memory on rank 0: peak %.2f MiB on the %s, %.2f MiB pinned host memory\n",
                double(use.peak_device_bytes) / (1 << 20), use_cuda ? "GPU" : "CPU backend",
                double(use.peak_pinned_bytes) / (1 << 20));
    for (std::size_t r = 0; 2 * r + 1 < peaks.size(); ++r) {
        const GridCoordinates at = topology.coordinates_of(static_cast<int>(r));
        std::printf(
            "memory by rank: rank %zu (dp %d, tp %d, pp %d, cp %d): peak %.3f MiB, %.3f MiB "
            "pinned",
            r, at.dp, at.tp, at.pp, at.cp, peaks[2 * r] / (1 << 20), peaks[2 * r + 1] / (1 << 20));
        if (shape != nullptr) {
            const parallel::EngineMemory predicted = parallel::engine_stage_memory(*shape, at.pp);
            std::printf("; predicted for full micro-batches %.3f MiB, %.3f MiB pinned",
                        predicted.peak_bytes() / (1 << 20), predicted.pinned_bytes / (1 << 20));
        }
        std::printf("\n");
    }
}

// fulcrum-train's options, into `o` (docs/cli.md lists them).
void add_options(CLI::App& app, Options& o) {
    parallel::add_grid_flags(app, o.grid);
    parallel::add_pipeline_flags(app, {.microbatches = o.microbatches,
                                       .schedule = o.schedule,
                                       .virtual_stages = o.virtual_stages,
                                       .stage_layers = o.stage_layers,
                                       .recompute = o.recompute,
                                       .sequence_parallel = o.sequence_parallel});
    app.add_option("--balancer", o.balancer, "Packing: fixed, ilp or wlb")->capture_default_str();
    app.add_option("--cp-shard", o.cp_shard,
                   "CP sharding: contiguous, zigzag, per-doc, adaptive, or chunked (each "
                   "--attention-chunk chunk cut over the CP ranks: FPDT's input order)")
        ->capture_default_str();
    app.add_option("--data", o.data_dir,
                   "Directory of text files (default: /usr/share/common-licenses)");
    app.add_option("--split", o.split,
                   "Documents per file or per blank-line block: file, blank-line")
        ->capture_default_str();
    app.add_option("--lengths", o.lengths,
                   "Synthetic documents with lengths from a distribution, e.g. "
                   "lognormal:median=200,sigma=0.9, long-tail:context=1024, file:PATH; bytes "
                   "from the text");
    app.add_option("--documents", o.documents, "How many synthetic documents")
        ->capture_default_str();
    auto* steps_option = app.add_option("--steps", o.steps)->capture_default_str();
    app.add_option("--epochs", o.epochs,
                   "Train whole epochs instead of --steps: every document exactly once per "
                   "epoch, whatever the balancer delayed trained before the epoch ends")
        ->excludes(steps_option);
    app.add_option("--seed", o.seed)->capture_default_str();
    parallel::add_model_flags(app, o.model, /*vocab=*/false);
    app.add_option("--lr", o.learning_rate)->capture_default_str();
    app.add_option("--warmup", o.warmup, "Linear learning-rate warm-up steps")
        ->capture_default_str();
    app.add_option("--ilp-time-limit", o.ilp_time_limit,
                   "Seconds the ILP balancer may take per step")
        ->capture_default_str();
    app.add_option("--ilp-window", o.ilp_window,
                   "Global batches the ILP balancer packs jointly (documents wait up to W-1 steps)")
        ->capture_default_str()
        ->check(CLI::Range(1, 64));
    app.add_option("--wlb-max-tokens", o.wlb_max_tokens,
                   "wlb: S_max, the most tokens one variable-length micro-batch may hold "
                   "(at least --context; default --context, as this device has no memory "
                   "model)");
    app.add_option("--wlb-max-delay", o.wlb_max_delay,
                   "wlb: a document held back this many steps goes first into the next one "
                   "(default: unbounded, the published packer)");
    app.add_option("--wlb-thresholds", o.wlb_thresholds,
                   "wlb: outlier queue thresholds L1,L2,... in tokens, none (no queues), or "
                   "tuned (replayed on the first epoch, mean delay at most 1 step)")
        ->capture_default_str();
    app.add_option("--packing-cost", o.packing_cost,
                   "What ilp and wlb balance: model (this model's training FLOPs per token "
                   "and per Σd²)")
        ->capture_default_str();
    app.add_option("--backend", o.backend,
                   "cpu, cuda or auto (CUDA when a GPU is usable, else the CPU)")
        ->capture_default_str();
    app.add_option("--precision", o.precision,
                   "CUDA GEMM precision: bf16 (default; fp32 master weights) or fp32 (for "
                   "checks); the CPU computes in fp32");
    app.add_option("--comm", o.comm,
                   "How ranks exchange device buffers: auto (NCCL when every rank has its own "
                   "GPU, else staged; MPI on the CPU), mpi, staged (through host memory over "
                   "MPI: several ranks on one GPU) or nccl")
        ->capture_default_str();
    app.add_option("--rendezvous", o.rendezvous,
                   "With NCCL: hand its unique id over file:PATH or tcp:HOST:PORT instead of MPI "
                   "(ranks from the launcher's variables: Open MPI, torchrun or SLURM)");
    app.add_option("--overlap-grad-reduce", o.overlap_grad_reduce,
                   "Reduce each layer's gradients over DP x CP during the last backward pass "
                   "(on), or all at once after it (off); auto: on with NCCL")
        ->capture_default_str()
        ->check(CLI::IsMember({"auto", "on", "off"}));
    app.add_option("--zero", o.zero_stage,
                   "ZeRO over the DP x CP ranks: 1 shards the optimizer state (each rank "
                   "updates its shard of the parameters, then they are all-gathered), 2 also "
                   "keeps only the shard of the gradients (each layer's reduce-scattered after "
                   "its backward; under zb-h1 all after the passes), 3 keeps only the shard of "
                   "the parameters too and gathers a layer's just before each pass that reads "
                   "it; 0: none")
        ->capture_default_str();
    parallel::add_cp_impl_flag(app, o.cp_impl);
    app.add_flag("--offload-checkpoints", o.offload_checkpoints,
                 "With --recompute full: every block's output but a pipeline stage's last (the "
                 "checkpoint its backward recomputes from) waits in pinned host memory between "
                 "the passes, two on the device at a time, copies on their own streams (FPDT)");
    app.add_option("--mpi-wait", o.mpi_wait,
                   "How a rank waits in MPI: spin (Open MPI polls), nap (test, then sleep 50 us, "
                   "so a waiting rank leaves its core to the others); auto: nap on the CPU "
                   "backend when a node's ranks outnumber its cores")
        ->capture_default_str()
        ->check(CLI::IsMember({"auto", "spin", "nap"}));
    app.add_option("--attention-chunk", o.attention_chunk,
                   "FPDT-style chunked attention: each block's QKV projection and attention "
                   "in chunks of this many tokens of the micro-batch (0: whole documents)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    app.add_option("--offload", o.offload,
                   "With --attention-chunk: every block's Q, K and V wait in pinned host memory "
                   "between forward and backward, two chunks on the device, copies "
                   "double-buffered (on), or stay on the device (off); under Ulysses the "
                   "attention's output, lse, its gradient and dQ too (FPDT's offloading passes)")
        ->capture_default_str()
        ->check(CLI::IsMember({"on", "off"}));
    app.add_option("--dump-parameters", o.dump_parameters,
                   "After training, write the whole model's parameters (float32, serial layout)");
    app.add_option("--losses", o.losses_file, "Write each step's loss, one per line (%.9g)");
    app.add_option("--hot-switch", o.hot_switch,
                   "HotSPa's hot switching: a layout per length bucket of each step, e.g. "
                   "'0-64:dp4;64-:dp2,tp2' (docs/plan.md, \"The hot-switch spec\"); every "
                   "layout over all ranks, the first one's is home. Replaces --dp, --tp, --pp "
                   "and --cp");
    app.add_flag("--hot-switch-check", o.hot_switch_check,
                 "With --hot-switch: before training, move the parameters from the first "
                 "layout to every other and back, and check that they come back bit for bit");
}

}  // namespace

int main(int argc, char** argv) {
    MpiSession mpi(&argc, &argv);
    auto world = MpiCommunicator::world();
    const int rank = world->rank();

    Options o;
    CLI::App app{
        "fulcrum-train: a GPT trained with DP × TP × PP × CP on documents packed by a "
        "balancer. Run one process per rank under mpirun.",
        "fulcrum-train"};
    add_options(app, o);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) {  // --help
            if (rank == 0) {
                app.exit(e);
            }
            return 0;
        }
        return fail(rank, std::string(e.what()) + " (fulcrum-train --help lists the options)");
    }

    // Everything is checked before any work, the same way on every rank.
    std::optional<parallel::HotSwitchSpec> hot_switch;
    if (!o.hot_switch.empty()) {
        auto spec = check_hot_switch(app, o, world->size());
        if (!spec) {
            return fail(rank, spec.error().message);
        }
        hot_switch = std::move(*spec);
        o.grid = hot_switch->buckets.front().layout;  // home: the global batch is planned here
        o.hot_switch = parallel::hot_switch_spec_string(*hot_switch);
    } else if (o.hot_switch_check) {
        return fail(rank, "--hot-switch-check checks the layouts of --hot-switch; give one");
    }
    auto topology = Topology::create(o.grid, world->size(), rank);
    if (!topology) {
        return fail(rank, topology.error().message);
    }
    auto choices = check_choices(app, o);
    if (!choices) {
        return fail(rank, choices.error().message);
    }
    const Choices& checked = *choices;
    auto placement = place(o, world->size());
    if (!placement) {
        return fail(rank, placement.error().message);
    }
    const bool use_cuda = placement->use_cuda;
    const int devices = placement->devices;
    const NodeRanks& node = placement->node;
    const bool shared_gpu = placement->shared_gpu;
    const std::string& comm = placement->comm;
    MpiCommunicator::nap_while_waiting(
        o.mpi_wait == "nap" ||
        (o.mpi_wait == "auto" && !use_cuda && node.cores > 0 && node.local_size > node.cores));
    if (o.steps < 1 || o.microbatches < 1 || o.model.context < 2) {
        return fail(rank, "--steps and --micro-batches must be at least 1, --context at least 2");
    }
    if (app.get_option("--epochs")->count() > 0 && o.epochs < 1) {
        return fail(rank, "--epochs must be at least 1, not " + std::to_string(o.epochs));
    }
    std::vector<int> stage_layers;
    if (!o.stage_layers.empty()) {
        auto parsed = parallel::parse_stage_layers(o.stage_layers);
        if (!parsed) {
            return fail(rank, parsed.error().message);
        }
        stage_layers = std::move(*parsed);
    }
    // The layout against the model, as the simulator and the planner check it.
    const parallel::Layout layout{.grid = o.grid,
                                  .microbatches = o.microbatches,
                                  .schedule = checked.schedule,
                                  .virtual_stages = o.virtual_stages,
                                  .stage_layers = stage_layers,
                                  .recompute = checked.recompute,
                                  .sequence_parallel = o.sequence_parallel,
                                  .rank_order = parallel::kFulcrumOrder,
                                  .context_parallelism = o.cp_impl,
                                  .zero_stage = o.zero_stage,
                                  .offload_checkpoints = o.offload_checkpoints};
    if (auto status = parallel::check_layout(layout, o.model); !status) {
        return fail(rank, status.error().message);
    }
    if (o.zero_stage >= 2 && o.overlap_grad_reduce == "on") {
        return fail(rank, "--zero " + std::to_string(o.zero_stage) +
                              " reduce-scatters the gradients after the passes; leave out "
                              "--overlap-grad-reduce on");
    }
    if (auto status = validate(o.model); !status) {
        return fail(rank, status.error().message);
    }
    DataOptions data_options;
    data_options.data_dir = o.data_dir;
    data_options.split = o.split == "file" ? DocumentSplit::file : DocumentSplit::blank_line;
    data_options.lengths_spec = o.lengths;
    data_options.synthetic_documents = o.documents;
    data_options.max_length = o.model.context;
    data_options.seed = o.seed;
    auto documents = load_training_documents(data_options);
    if (!documents) {
        return fail(rank, documents.error().message);
    }
    PlannerOptions planner_options;
    planner_options.packing.balancer = checked.balancer;
    planner_options.packing.microbatches = o.microbatches;
    planner_options.packing.capacity = o.model.context;
    planner_options.packing.ilp_time_limit_s = o.ilp_time_limit;
    planner_options.dp = o.grid.dp;
    planner_options.cp = o.grid.cp;
    planner_options.sharding = checked.sharding;
    planner_options.cp_chunk = o.attention_chunk;
    planner_options.seed = o.seed;
    planner_options.ilp_window = o.ilp_window;
    planner_options.epochs = o.epochs;
    planner_options.packing.cost =
        balance::PackingCost::from_model(o.model.layers, o.model.hidden, 256);
    planner_options.packing.wlb_max_tokens = o.wlb_max_tokens;
    if (o.wlb_max_delay >= 0) {
        planner_options.packing.wlb_max_delay = o.wlb_max_delay;
    }
    planner_options.packing.wlb_thresholds = checked.wlb_thresholds;
    planner_options.tune_wlb_thresholds = true;
    // Adaptive CP sharding weighs this backend's own attention kernel on short shards.
    planner_options.attention_kernel = *balance::attention_kernel_model(use_cuda ? "cuda" : "cpu");
    auto planner = StepPlanner::create(document_lengths(*documents), planner_options);
    if (!planner) {
        return fail(rank, planner.error().message);
    }

    if (rank == 0) {
        if (o.backend == "auto" && !use_cuda) {
            std::printf("no GPU found; using the CPU backend\n");
        }
        if (!use_cuda && !o.precision.empty()) {
            std::printf("note: --precision %s is ignored by the CPU backend (fp32)\n",
                        o.precision.c_str());
        }
        std::printf("grid %s on %d ranks\n%s", topology->describe().c_str(), world->size(),
                    topology->describe_ranks().c_str());
        const std::string schedule_text =
            o.schedule + (o.virtual_stages > 1
                              ? " (" + std::to_string(o.virtual_stages) + " virtual stages)"
                              : std::string());
        std::printf(
            "model %s\ndata %s\nbalancer %s, cp sharding %s, schedule %s, %d micro-batches "
            "per replica\n",
            describe(o.model).c_str(), documents->description.c_str(), o.balancer.c_str(),
            o.cp_shard.c_str(), schedule_text.c_str(), o.microbatches);
        if (checked.balancer == balance::Balancer::wlb) {
            const balance::PackingOptions& packing = planner->packing();
            std::printf("wlb: S_max %lld tokens, max delay %s, thresholds %s",
                        static_cast<long long>(packing.wlb_max_tokens > 0 ? packing.wlb_max_tokens
                                                                          : packing.capacity),
                        packing.wlb_max_delay ? std::to_string(*packing.wlb_max_delay).c_str()
                                              : "unbounded",
                        balance::wlb_thresholds_text(packing.wlb_thresholds).c_str());
            if (const auto& tuning = planner->wlb_tuning()) {
                std::printf(" (tuned on the first epoch: imbalance %.2f, mean delay %.2f steps)",
                            tuning->replay.mean_imbalance, tuning->replay.mean_delay_iterations);
            }
            std::printf("\n");
        }
        if (!stage_layers.empty()) {
            std::printf("layers by %s: %s\n", o.virtual_stages > 1 ? "model chunk" : "stage",
                        o.stage_layers.c_str());
        }
        if (checked.recompute != Recompute::none || o.sequence_parallel) {
            std::printf("activations: recompute %s%s\n", recompute_name(checked.recompute),
                        o.sequence_parallel ? ", sequence parallel over TP" : "");
        }
        std::fflush(stdout);
    }

    // Ranks of a node take its GPUs in turn; with more ranks than GPUs, several share one.
    const int device = devices > 0 ? node.local_rank % devices : 0;

    // Who this rank is, for the collector; then the clock-sync marks merge aligns on.
    const GridCoordinates me = topology->coordinates();
    instrument::name_this_thread("main");
    RankMark rank_mark;
    rank_mark.rank = rank;
    rank_mark.world = world->size();
    rank_mark.dp = me.dp;
    rank_mark.tp = me.tp;
    rank_mark.pp = me.pp;
    rank_mark.cp = me.cp;
    rank_mark.device = use_cuda ? device : -1;
    std::unique_ptr<Backend> backend;
#if FULCRUM_HAVE_CUDA_BACKEND
    [[maybe_unused]] CudaBackend* cuda_backend = nullptr;
    if (use_cuda) {
        auto cuda = std::make_unique<CudaBackend>(
            o.precision == "fp32" ? Precision::fp32 : Precision::bf16, device);
        if (rank == 0) {
            std::printf("backend: cuda, %s\n", cuda->description().c_str());
        }
        cuda_backend = cuda.get();
        backend = std::move(cuda);
    }
#endif
    if (!backend) {
        backend = std::make_unique<CpuBackend>(1);
    }
    instrument::mark(kRankMark, rank_mark_json(rank_mark));
    const std::int64_t probe_rows = o.model.context / (o.grid.cp * o.grid.tp);
    const double gemm_gflops[] = {
        weight_gradient_gemm_gflops(*backend, o.model, probe_rows, o.grid.tp, false),
        weight_gradient_gemm_gflops(*backend, o.model, probe_rows, o.grid.tp, true)};
    instrument::mark(kRunMark,
                     run_config_json(o, layout, documents->description, use_cuda ? "cuda" : "cpu",
                                     comm, gemm_gflops, use_cuda ? 0 : node.cores));
    for (int i = 0; i < 2; ++i) {
        world->barrier();
        instrument::mark("fulcrum.clock_sync");
    }
    // The groups' communicators carry device buffers; `world` stays MPI for the host-side
    // agreement (plans, barriers) that needs no device.
    std::unique_ptr<Communicator> device_world;
    StagedCommunicator* staged = nullptr;
    if (comm == "staged") {
        auto wrapped =
            std::make_unique<StagedCommunicator>(world->split(0, rank, "world"), *backend);
        staged = wrapped.get();
        device_world = std::move(wrapped);
    }
#if FULCRUM_HAVE_NCCL
    if (comm == "nccl") {
        void* stream = cuda_backend->native_stream(kComputeStream);
        Result<std::unique_ptr<NcclCommunicator>> nccl =
            Error{ErrorCode::invalid_input, "no NCCL bootstrap"};
        if (o.rendezvous.empty()) {
            nccl = NcclCommunicator::bootstrap_over(*world, cuda_backend->device_index(), stream);
        } else if (auto launch = launch_rank_from_environment(); !launch) {
            nccl = launch.error();
        } else {
            nccl = NcclCommunicator::bootstrap_with_rendezvous(o.rendezvous, *launch,
                                                               cuda_backend->device_index(), stream,
                                                               std::chrono::seconds(120));
        }
        if (!nccl) {
            return fail(rank, nccl.error().message);
        }
        device_world = std::move(*nccl);
    }
#endif
    if (rank == 0 && world->size() > 1) {
        std::printf("communication: %s\n",
                    comm == "nccl" ? "NCCL"
                    : comm == "staged"
                        ? (shared_gpu && use_cuda
                               ? "staged through host memory over MPI (ranks share a GPU)"
                               : "staged through host memory over MPI")
                        : "MPI");
        std::fflush(stdout);
    }
    ParallelTrainConfig train_config;
    train_config.train.adamw.learning_rate = o.learning_rate;
    train_config.train.warmup_steps = o.warmup;
    train_config.layout = layout;
    train_config.balancer = checked.balancer;
    train_config.overlap_grad_reduce = overlaps_grad_reduce(o, comm);
    if (rank == 0 && train_config.overlap_grad_reduce && o.grid.dp * o.grid.cp > 1) {
        std::printf("gradient reduction: layer by layer during the last backward pass\n");
        std::fflush(stdout);
    }
    if (rank == 0 && o.zero_stage > 0 && o.grid.dp * o.grid.cp > 1) {
        std::printf("ZeRO-%d: the optimizer state%s sharded over the %d DP x CP ranks%s\n",
                    o.zero_stage,
                    o.zero_stage == 3   ? ", the gradients and the parameters"
                    : o.zero_stage == 2 ? " and the gradients"
                                        : "",
                    o.grid.dp * o.grid.cp,
                    o.zero_stage >= 2 && parallel::splits_backward(layout.schedule)
                        ? " (the gradients whole until the passes end: a split backward)"
                        : "");
        std::fflush(stdout);
    }
    if (rank == 0 && o.cp_impl == parallel::ContextParallelism::ulysses && o.grid.cp > 1) {
        std::printf(
            "context parallelism: Ulysses, %d heads a CP rank (all-to-all of Q, K, V "
            "and the attention's output)\n",
            o.model.heads / o.grid.tp / o.grid.cp);
        if (o.attention_chunk > 0) {
            // FPDT's pipeline trades each chunk alone, the next one's all-to-all in flight
            // beside this one's attention (docs/engine.md); only FPDT's input order gives
            // every rank a share of every chunk.
            std::printf(
                "  chunks of %d traded one at a time, each while the one before computes%s%s\n",
                o.attention_chunk,
                checked.sharding == balance::CpSharding::chunked
                    ? ", each cut over the CP ranks (FPDT's input order)"
                    : "; under this sharding a chunk may come from one rank "
                      "(--cp-shard chunked spreads each over the ranks)",
                o.offload == "on" ? "; the backward's ∂L/∂o and dQ wait in host memory" : "");
        }
        std::fflush(stdout);
    }
    // One layout, or one per bucket of --hot-switch (hot_switch_trainer.h).
    std::optional<ParallelGroups> groups;
    // ZeRO-3's parameters and ZeRO-2's gradients; before the model using them.
    std::unique_ptr<ZeroParameters> zero_parameters;
    std::unique_ptr<ZeroGradients> zero_gradients;
    std::unique_ptr<GptModel> static_model;
    std::unique_ptr<ParallelTrainer> trainer;
    std::unique_ptr<HotSwitchTrainer> hot;
    if (hot_switch) {
        HotSwitchConfig hot_config;
        hot_config.spec = *hot_switch;
        hot_config.model = o.model;
        hot_config.seed = o.seed;
        hot_config.attention = {o.attention_chunk, o.offload == "on"};
        hot_config.train = train_config;
        hot_config.packing = planner_options;
        hot_config.gpus_per_node = node.local_size;
        hot = std::make_unique<HotSwitchTrainer>(*backend, *world,
                                                 device_world ? *device_world : *world, *documents,
                                                 std::move(hot_config));
        if (rank == 0) {
            std::printf("hot switch %s: home layout %s\n", o.hot_switch.c_str(),
                        parallel::layout_string(o.grid).c_str());
            std::fflush(stdout);
        }
        if (o.hot_switch_check) {
            const bool equal = hot->parameters_survive_round_trips();
            if (!equal) {
                return fail(rank,
                            "--hot-switch-check: parameters changed on a round trip "
                            "between layouts");
            }
            if (rank == 0) {
                std::printf(
                    "hot-switch check: parameters bitwise equal after a round trip "
                    "from the first layout to each other one\n");
                std::fflush(stdout);
            }
        }
    } else {
        groups.emplace(ParallelGroups::create(device_world ? *device_world : *world, *topology));
        StageParameters held =
            stage_parameters(topology->coordinates().pp, o.grid.pp, layout, o.model.layers);
        const ParameterLayout held_layout(o.model, o.grid.tp, held);
        if (o.zero_stage == 3 && groups->dp_cp->size() > 1) {
            zero_parameters =
                std::make_unique<ZeroParameters>(*backend, held_layout, *groups->dp_cp);
        }
        // Under a split backward (ZB-H1) the gradients stay whole (zero_gradients.h).
        if (o.zero_stage >= 2 && groups->dp_cp->size() > 1 &&
            !parallel::splits_backward(layout.schedule)) {
            zero_gradients = std::make_unique<ZeroGradients>(*backend, held_layout, *groups->dp_cp);
        }
        static_model =
            std::make_unique<GptModel>(*backend, o.model,
                                       ModelParallel{groups->tp.get(), groups->cp.get(), o.cp_impl,
                                                     zero_parameters.get(), zero_gradients.get()},
                                       std::move(held));
        static_model->initialize(o.seed);
        static_model->set_attention_chunking({o.attention_chunk, o.offload == "on"});
        trainer = std::make_unique<ParallelTrainer>(*static_model, *topology, *groups, *documents,
                                                    train_config);
    }
    GptModel& model = hot ? hot->home_model() : *static_model;

    std::vector<double> losses;
    double total_seconds = 0;
    balance::TrainedTotals trained;
    using Clock = std::chrono::steady_clock;
    for (int s = 0; o.epochs > 0 || s < o.steps; ++s) {
        const auto start = Clock::now();
        auto plan = plan_step(*planner, *world);
        if (!plan) {
            return fail(rank, plan.error().message);
        }
        Result<StepReport> report = hot ? hot->step(*plan) : trainer->step(*plan);
        if (!report) {
            return fail(rank, report.error().message);
        }
        const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        total_seconds += seconds;
        const std::int64_t step_tokens = plan->tokens;
        const balance::TrainedTotals before = trained;
        trained.add(*plan);
        if (checked.sharding == balance::CpSharding::adaptive && rank == 0) {
            instrument::mark(
                std::string(kCpShardingMark),
                "{\"step\":" + std::to_string(plan->step) + ",\"per-doc\":" +
                    std::to_string(trained.per_document_microbatches -
                                   before.per_document_microbatches) +
                    ",\"zigzag\":" +
                    std::to_string(trained.zigzag_microbatches - before.zigzag_microbatches) + "}");
        }
        losses.push_back(report->loss);
        // The packer's prediction: max / mean Σd² over the step's micro-batches (step_planner.h),
        // not the measured compute imbalance that `fulcrum analyze` and the views report.
        if (rank == 0) {
            std::printf(
                "step %4d | epoch %d | loss %.4f | grad norm %.3f | attention work max/mean %.2f | "
                "%lld tokens | %.1f ms | %.0f tokens/s\n",
                plan->step, plan->epoch, report->loss, report->grad_norm, plan->imbalance,
                static_cast<long long>(step_tokens), seconds * 1e3, step_tokens / seconds);
            std::fflush(stdout);
        }
        if (plan->last) {
            break;
        }
    }
    std::vector<float> parameters = hot ? hot->gather_parameters() : trainer->gather_parameters();
    const std::vector<double> traffic =
        hot ? traffic_by_rank(*world, hot->traffic()) : std::vector<double>{};
    const MemoryUse memory_use = backend->memory_use();
    instrument::mark(std::string(kMemoryMark),
                     "{\"peak_device_bytes\":" + std::to_string(memory_use.peak_device_bytes) +
                         ",\"peak_pinned_bytes\":" + std::to_string(memory_use.peak_pinned_bytes) +
                         "}");
    const std::vector<double> peaks = peaks_by_rank(*world, memory_use);
    if (rank == 0) {
        std::printf("done: %d steps, %.3f s, %.0f tokens/s, final loss %.4f\n", trained.steps,
                    total_seconds, static_cast<double>(trained.tokens) / total_seconds,
                    losses.back());
        // The figures to compare balancers by on the same documents (bench/README.md).
        std::printf("trained: %lld documents, %lld tokens%s; delay mean %.2f, max %d steps\n",
                    static_cast<long long>(trained.documents),
                    static_cast<long long>(trained.tokens),
                    o.epochs > 0 ? (", " + std::to_string(o.epochs) + " epoch(s)").c_str() : "",
                    trained.mean_delay_steps(), trained.max_delay_steps);
        if (checked.sharding == balance::CpSharding::adaptive) {
            std::printf(
                "adaptive cp sharding (%s kernel model): %lld micro-batches per "
                "document, %lld per sequence (zigzag)\n",
                use_cuda ? "cuda" : "cpu",
                static_cast<long long>(trained.per_document_microbatches),
                static_cast<long long>(trained.zigzag_microbatches));
        }
        const parallel::MemoryShape shape =
            parallel::engine_memory_shape(o.model, layout, o.attention_chunk, o.offload == "on");
        print_memory(backend->memory_use(), use_cuda, *topology, peaks,
                     use_cuda || hot ? nullptr : &shape);
        if (o.attention_chunk > 0) {
            const AttentionMemory& memory = model.attention_memory();
            const auto mib = [](std::int64_t bytes) { return double(bytes) / (1 << 20); };
            std::printf(
                "attention in chunks of %d tokens, offload %s: %.2f MiB of device "
                "double buffers, %.2f MiB of partial output, %.3f MiB of gradient slots; %.2f "
                "MiB offloaded, %.2f MiB prefetched (rank 0)\n",
                o.attention_chunk, o.offload.c_str(), mib(memory.double_buffer_bytes),
                mib(memory.partial_bytes), mib(memory.gradient_buffer_bytes),
                mib(memory.offloaded_bytes), mib(memory.prefetched_bytes));
        }
        if (const CheckpointMemory* checkpoints = model.checkpoint_memory()) {
            const auto mib = [](std::int64_t bytes) { return double(bytes) / (1 << 20); };
            std::printf(
                "checkpoints offloaded: %.2f MiB of device slots; %.2f MiB offloaded, %.2f MiB "
                "prefetched (rank 0)\n",
                mib(checkpoints->slot_bytes), mib(checkpoints->offloaded_bytes),
                mib(checkpoints->prefetched_bytes));
        }
        if (hot) {
            print_traffic(traffic, world->size(), hot->traffic().switches);
        }
        if (staged != nullptr) {
            std::printf("staged %.2f MiB between device and host memory on rank 0\n",
                        double(staged->bytes_staged()) / (1 << 20));
        }
        if (auto status = write_outputs(o, parameters, losses); !status) {
            return fail(rank, status.error().message);
        }
    }
    return 0;
}
