#include "tests/support/synthetic_run.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "core/store/trace_writer.h"

namespace fulcrum::testing {
namespace {

// Micro-batch cost model: a·Σd + b·Σd² nanoseconds per layer (WLB-LLM's Σd and Σd² work), forward.
constexpr double kLinearNsPerToken = 40.0;
constexpr double kAttentionNsPerPair = 0.004;
constexpr std::int64_t kP2pLatencyNs = 20'000;

struct Op {
    int microbatch;
    bool forward;
};

// 1F1B on stage s of p with m micro-batches: min(p-s-1, m) warm-up forwards, then one
// forward and one backward alternately, then the remaining backwards (Narayanan et al., SC'21,
// §2.2).
std::vector<Op> one_f_one_b(int stage, int stages, int microbatches) {
    std::vector<Op> ops;
    const int warmup = std::min(stages - stage - 1, microbatches);
    int next_forward = 0, next_backward = 0;
    for (; next_forward < warmup; ++next_forward) {
        ops.push_back({next_forward, true});
    }
    while (next_backward < microbatches) {
        if (next_forward < microbatches) {
            ops.push_back({next_forward++, true});
        }
        ops.push_back({next_backward++, false});
    }
    return ops;
}

}  // namespace

double uniform(std::mt19937_64& rng) {
    return (rng() >> 11) * (1.0 / 9007199254740992.0);
}

std::vector<std::int32_t> document_lengths(std::mt19937_64& rng, int tokens) {
    std::vector<std::int32_t> lengths;
    int used = 0;
    while (used < tokens) {
        const double u1 = std::max(uniform(rng), 1e-12), u2 = uniform(rng);
        const double normal = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
        int length = static_cast<int>(std::exp(7.55 + 0.9 * normal));
        length = std::clamp(length, std::min(16, tokens - used), tokens - used);
        lengths.push_back(length);
        used += length;
    }
    return lengths;
}

Result<std::vector<std::string>> write_synthetic_rank_files(const std::string& directory,
                                                            const SyntheticRunOptions& o) {
    std::error_code ec;
    std::filesystem::create_directories(directory, ec);
    if (ec) {
        return Error{ErrorCode::io, "cannot create '" + directory + "': " + ec.message()};
    }
    const int world = o.dp * o.pp * o.cp * o.tp;
    const int stages = o.pp;
    std::mt19937_64 rng(o.seed);

    // Documents of every (step, dp replica, micro-batch), and their forward time per layer.
    constexpr int kTokensPerMicrobatch = 8192;
    struct Microbatch {
        std::vector<std::int32_t> lengths;
        std::int64_t forward_ns_per_layer = 0;
    };
    std::vector<Microbatch> microbatches(static_cast<std::size_t>(o.steps * o.dp * o.microbatches));
    std::int64_t next_doc_id = 0;
    std::vector<std::int64_t> first_doc_id(microbatches.size());
    for (std::size_t i = 0; i < microbatches.size(); ++i) {
        auto& mb = microbatches[i];
        mb.lengths = document_lengths(rng, kTokensPerMicrobatch);
        double pairs = 0;
        for (auto d : mb.lengths) {
            pairs += static_cast<double>(d) * d;
        }
        mb.forward_ns_per_layer =
            static_cast<std::int64_t>(kLinearNsPerToken * kTokensPerMicrobatch / o.tp / o.cp +
                                      kAttentionNsPerPair * pairs / o.tp / o.cp);
        first_doc_id[i] = next_doc_id;
        next_doc_id += static_cast<std::int64_t>(mb.lengths.size());
    }
    auto microbatch_of = [&](int step, int dp, int m) -> std::size_t {
        return static_cast<std::size_t>((step * o.dp + dp) * o.microbatches + m);
    };
    const int layers_per_stage = std::max(1, o.layers / stages);

    // Per-rank clocks: local = true + skew; recorded offset = -skew + NTP error.
    std::vector<std::int64_t> skew(world), offset_error(world);
    for (int r = 0; r < world; ++r) {
        skew[r] = static_cast<std::int64_t>((uniform(rng) * 2 - 1) * o.clock_skew_ns);
        offset_error[r] = static_cast<std::int64_t>((uniform(rng) * 2 - 1) * o.utc_offset_error_ns);
    }
    const std::int64_t true_start = 1'795'000'000'000'000'000;  // 2026-11-18, UTC ns

    // Simulate each step's 1F1B pipeline per dp replica (the same for every cp/tp rank of a
    // stage): op start = max(stage free, dependency done + p2p latency).
    struct Timed {
        Op op;
        std::int64_t start, end;
    };
    std::vector<std::vector<std::vector<Timed>>> timeline(static_cast<std::size_t>(o.steps * o.dp),
                                                          std::vector<std::vector<Timed>>(stages));
    std::vector<std::int64_t> step_start(o.steps), step_end(o.steps);
    std::int64_t clock = 1'000'000;  // the first barrier at true_start + 1 ms
    const std::int64_t barrier_time = 500'000;
    for (int step = 0; step < o.steps; ++step) {
        step_start[step] = clock;
        std::int64_t latest = clock;
        for (int dp = 0; dp < o.dp; ++dp) {
            auto& stage_ops = timeline[static_cast<std::size_t>(step * o.dp + dp)];
            std::vector<std::vector<Op>> order(stages);
            for (int s = 0; s < stages; ++s) {
                order[s] = one_f_one_b(s, stages, o.microbatches);
            }
            std::vector<std::vector<std::int64_t>> fwd_done(
                stages, std::vector<std::int64_t>(o.microbatches, -1));
            auto bwd_done = fwd_done;
            std::vector<std::size_t> next(stages, 0);
            std::vector<std::int64_t> free_at(stages, clock);
            bool progressed = true;
            while (progressed) {
                progressed = false;
                for (int s = 0; s < stages; ++s) {
                    while (next[s] < order[s].size()) {
                        const Op op = order[s][next[s]];
                        std::int64_t ready = free_at[s];
                        if (op.forward && s > 0) {
                            if (fwd_done[s - 1][op.microbatch] < 0)
                                break;
                            ready = std::max(ready, fwd_done[s - 1][op.microbatch] + kP2pLatencyNs);
                        }
                        if (!op.forward) {
                            if (s + 1 < stages) {
                                if (bwd_done[s + 1][op.microbatch] < 0)
                                    break;
                                ready =
                                    std::max(ready, bwd_done[s + 1][op.microbatch] + kP2pLatencyNs);
                            } else if (fwd_done[s][op.microbatch] < 0) {
                                break;
                            }
                        }
                        const auto& mb = microbatches[microbatch_of(step, dp, op.microbatch)];
                        const std::int64_t duration =
                            mb.forward_ns_per_layer * layers_per_stage * (op.forward ? 1 : 2);
                        const std::int64_t end = ready + duration;
                        (op.forward ? fwd_done : bwd_done)[s][op.microbatch] = end;
                        stage_ops[s].push_back({op, ready, end});
                        free_at[s] = end;
                        ++next[s];
                        progressed = true;
                    }
                }
            }
            for (int s = 0; s < stages; ++s) {
                latest = std::max(latest, free_at[s]);
            }
        }
        step_end[step] = latest;
        clock = latest + 2'000'000;  // all-reduce and optimizer
    }

    std::vector<std::string> paths;
    for (int rank = 0; rank < world; ++rank) {
        // picotron's grid order: rank = ((dp * pp + pp_i) * cp + cp_i) * tp + tp_i
        const int tp_i = rank % o.tp;
        const int cp_i = (rank / o.tp) % o.cp;
        const int pp_i = (rank / (o.tp * o.cp)) % o.pp;
        const int dp_i = rank / (o.tp * o.cp * o.pp);
        const std::string path = directory + "/rank-" + std::to_string(rank) + ".sqlite";
        RunInfo run;
        run.name = o.name;
        run.command = "synthetic (tests/support/synthetic_run.cpp), seed " + std::to_string(o.seed);
        run.start_utc_ns = true_start;
        run.config_json = "{\"synthetic\":true,\"dp\":" + std::to_string(o.dp) +
                          ",\"pp\":" + std::to_string(o.pp) + ",\"cp\":" + std::to_string(o.cp) +
                          ",\"tp\":" + std::to_string(o.tp) + ",\"schedule\":\"1f1b\"," +
                          "\"microbatches\":" + std::to_string(o.microbatches) +
                          ",\"layers\":" + std::to_string(o.layers) + ",\"balancer\":\"fixed\"}";
        run.producer = "fulcrum synthetic";
        store::WriterOptions writer_options;
        writer_options.overwrite = true;
        writer_options.events = o.event_blocks ? store::WriterOptions::EventStorage::blocks
                                               : store::WriterOptions::EventStorage::rows;
        auto writer = store::TraceWriter::create(path, run, writer_options);
        if (!writer) {
            return writer.error();
        }
        auto& w = **writer;
        const std::int64_t to_local = true_start + skew[rank];  // true offset -> local clock
        RankInfo info;
        info.rank = rank;
        info.host = o.host_prefix + std::to_string(rank / 8);
        info.pid = 1000 + rank;
        info.dp = dp_i;
        info.pp = pp_i;
        info.cp = cp_i;
        info.tp = tp_i;
        info.utc_offset_ns = -skew[rank] + offset_error[rank];
        w.add_rank(info);
        const LaneId host = w.add_lane(rank, LaneKind::host_thread, "main", 1000 + rank);
        const LaneId stream = o.kernels_per_layer > 0
                                  ? w.add_lane(rank, LaneKind::gpu_stream, "stream 7 (compute)", 7)
                                  : LaneId{};
        const StringId n_step = w.intern("step"), n_fwd = w.intern("forward"),
                       n_bwd = w.intern("backward"), n_attn = w.intern("attention"),
                       n_mlp = w.intern("mlp"), n_send = w.intern("send activations"),
                       n_send_grad = w.intern("send gradients"),
                       n_allreduce = w.intern("dp all-reduce gradients"),
                       n_opt = w.intern("optimizer"), n_sync = w.intern(kClockSyncMark),
                       n_kernel = w.intern("sm90_xmma_gemm_bf16"),
                       n_attn_kernel = w.intern("flash_attention_varlen");
        auto add = [&](LaneId lane, StringId name, EventKind kind, Category category,
                       std::int64_t start, std::int64_t end, int step, int mb, Phase phase,
                       std::int64_t bytes = -1) {
            Event e;
            e.lane = lane;
            e.name = name;
            e.kind = kind;
            e.category = category;
            e.start_ns = start + to_local;
            e.end_ns = end + to_local;
            e.step = step;
            e.microbatch = mb;
            e.stage = static_cast<std::int16_t>(pp_i);
            e.phase = phase;
            e.bytes = bytes;
            w.add_event(e);
        };
        if (o.clock_sync_marks) {
            add(host, n_sync, EventKind::mark, Category::schedule, barrier_time, barrier_time, -1,
                -1, Phase::none);
        }
        for (int step = 0; step < o.steps; ++step) {
            add(host, n_step, EventKind::range, Category::schedule, step_start[step],
                step_end[step] + 1'900'000, step, -1, Phase::none);
            for (const auto& t : timeline[static_cast<std::size_t>(step * o.dp + dp_i)][pp_i]) {
                const Phase phase = t.op.forward ? Phase::forward : Phase::backward;
                add(host, t.op.forward ? n_fwd : n_bwd, EventKind::range, Category::compute,
                    t.start, t.end, step, t.op.microbatch, phase);
                const std::int64_t per_layer = (t.end - t.start) / layers_per_stage;
                for (int layer = 0; layer < layers_per_stage; ++layer) {
                    const std::int64_t begin = t.start + layer * per_layer;
                    const std::int64_t mid = begin + per_layer * 2 / 3;
                    const std::int64_t finish = begin + per_layer;
                    add(host, n_attn, EventKind::range, Category::attention, begin, mid, step,
                        t.op.microbatch, phase);
                    add(host, n_mlp, EventKind::range, Category::compute, mid, finish, step,
                        t.op.microbatch, phase);
                    for (int k = 0; k < o.kernels_per_layer; ++k) {
                        const std::int64_t slice = per_layer / o.kernels_per_layer;
                        add(stream, k == 0 ? n_attn_kernel : n_kernel, EventKind::kernel,
                            k == 0 ? Category::attention : Category::compute, begin + k * slice,
                            begin + (k + 1) * slice - 1, step, t.op.microbatch, phase);
                    }
                }
                const bool sends = t.op.forward ? pp_i + 1 < o.pp : pp_i > 0;
                if (sends) {
                    add(host, t.op.forward ? n_send : n_send_grad, EventKind::collective,
                        Category::communication, t.end - kP2pLatencyNs / 2, t.end, step,
                        t.op.microbatch, phase, 8192LL * 1024 * 4 / o.tp);
                }
            }
            add(host, n_allreduce, EventKind::collective, Category::communication,
                step_end[step] + 100'000, step_end[step] + 1'500'000, step, -1, Phase::none,
                64LL << 20);
            add(host, n_opt, EventKind::range, Category::optimizer, step_end[step] + 1'500'000,
                step_end[step] + 1'900'000, step, -1, Phase::none);
            for (int m = 0; m < o.microbatches; ++m) {
                const std::size_t index = microbatch_of(step, dp_i, m);
                const auto& mb = microbatches[index];
                std::int64_t doc_id = first_doc_id[index];
                for (auto length : mb.lengths) {
                    w.add_workload({rank, step, m, doc_id++, length, 0, length, "fixed"});
                }
            }
        }
        if (auto status = w.close(); !status) {
            return status.error();
        }
        paths.push_back(path);
    }
    return paths;
}

}  // namespace fulcrum::testing
