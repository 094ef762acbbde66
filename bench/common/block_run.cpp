#include "bench/common/block_run.h"

#include <vector>

#include "bench/common/bench_support.h"
#include "core/store/trace_writer.h"

namespace fulcrum::bench {

std::int64_t BlockRunShape::events_per_rank_step() const {
    const std::int64_t passes = 2 * std::int64_t{microbatches};
    return 1 + passes * (1 + layers)  // host: step, passes, layers
           + passes * layers * 4      // compute kernels
           + passes * layers;         // communication kernels
}

BlockRunShape block_run_shape(std::int32_t ranks, std::int64_t target_events) {
    BlockRunShape shape;
    shape.ranks = ranks;
    const std::int64_t per_step = shape.events_per_rank_step() * ranks;
    shape.steps = static_cast<std::int32_t>(std::max<std::int64_t>(1, target_events / per_step));
    return shape;
}

Result<std::int64_t> make_block_run(const std::string& path, const BlockRunShape& shape) {
    remove_run_file(path);
    RunInfo run;
    run.name = "block-run";
    run.command = "bench make_block_run";
    store::WriterOptions options;
    options.events = store::WriterOptions::EventStorage::blocks;
    options.durable = false;
    auto writer = store::TraceWriter::create(path, run, options);
    if (!writer) {
        return writer.error();
    }
    store::TraceWriter& out = **writer;
    const StringId step_name = out.intern("step");
    const StringId forward = out.intern("forward");
    const StringId backward = out.intern("backward");
    const StringId layer = out.intern("layer");
    const StringId kernels[4] = {out.intern("gemm"), out.intern("attention kernel"),
                                 out.intern("layernorm"), out.intern("gelu")};
    const StringId comm = out.intern("ncclAllReduce");
    const std::int64_t passes = 2 * std::int64_t{shape.microbatches};
    const std::int64_t pass_ns = shape.step_ns * 9 / 10 / passes;
    const std::int64_t layer_ns = pass_ns / shape.layers;
    std::vector<Event> host, compute, network;
    std::int64_t written = 0;
    for (std::int32_t rank = 0; rank < shape.ranks; ++rank) {
        RankInfo info;
        info.rank = rank;
        info.host = "node" + std::to_string(rank / 8);
        info.device = rank % 8;
        out.add_rank(info);
        const LaneId host_lane = out.add_lane(rank, LaneKind::host_thread, "main");
        const LaneId compute_lane = out.add_lane(rank, LaneKind::gpu_stream, "stream 7");
        const LaneId network_lane = out.add_lane(rank, LaneKind::gpu_stream, "stream 13");
        // Ranks drift apart by a few µs, as real ones do.
        const std::int64_t skew = (rank * 7919) % 5000;
        for (std::int32_t step = 0; step < shape.steps; ++step) {
            host.clear();
            compute.clear();
            network.clear();
            auto range = [&](std::vector<Event>& into, LaneId lane, StringId name,
                             Category category, std::int64_t start, std::int64_t end,
                             std::int32_t microbatch, EventKind kind) {
                Event event;
                event.start_ns = start;
                event.end_ns = end;
                event.lane = lane;
                event.name = name;
                event.step = step;
                event.microbatch = microbatch;
                event.kind = kind;
                event.category = category;
                into.push_back(event);
            };
            const std::int64_t step_start = step * shape.step_ns + skew;
            range(host, host_lane, step_name, Category::schedule, step_start,
                  step_start + shape.step_ns - 1000, -1, EventKind::range);
            for (std::int64_t p = 0; p < passes; ++p) {
                const auto microbatch = static_cast<std::int32_t>(p % shape.microbatches);
                const bool fwd = p < shape.microbatches;
                const std::int64_t pass_start = step_start + 10'000 + p * pass_ns;
                range(host, host_lane, fwd ? forward : backward, Category::compute, pass_start,
                      pass_start + pass_ns - 500, microbatch, EventKind::range);
                for (std::int32_t l = 0; l < shape.layers; ++l) {
                    const std::int64_t layer_start = pass_start + l * layer_ns;
                    range(host, host_lane, layer, Category::compute, layer_start,
                          layer_start + layer_ns - 200, microbatch, EventKind::range);
                    const std::int64_t kernel_ns = layer_ns / 5;
                    for (int k = 0; k < 4; ++k) {
                        const std::int64_t start = layer_start + 2'000 + k * kernel_ns;
                        range(compute, compute_lane, kernels[k],
                              k == 1 ? Category::attention : Category::compute, start,
                              start + kernel_ns - 300, microbatch, EventKind::kernel);
                    }
                    const std::int64_t comm_start = layer_start + 4 * kernel_ns;
                    range(network, network_lane, comm, Category::communication, comm_start,
                          comm_start + kernel_ns / 2, microbatch, EventKind::kernel);
                }
            }
            out.add_events(host.data(), host.size());
            out.add_events(compute.data(), compute.size());
            out.add_events(network.data(), network.size());
            written += static_cast<std::int64_t>(host.size() + compute.size() + network.size());
        }
    }
    if (auto closed = out.close(); !closed) {
        return closed.error();
    }
    return written;
}

}  // namespace fulcrum::bench
