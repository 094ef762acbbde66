#include "core/sim/grad_reduction.h"

#include <algorithm>
#include <cmath>

namespace fulcrum::sim {

double nccl_sm_share(const HardwareAssumptions& hardware, const analysis::CollectiveCost& call) {
    if (hardware.sms <= 0 || !call.nccl || call.nccl->prices.empty()) {
        return 0;
    }
    return std::min(1.0, double(call.nccl->runtime_channels) / double(hardware.sms));
}

GradientReductionEnd gradient_reduction_end(
    const GradientReductionInput& input, const std::vector<const parallel::ReplayResult*>& replays,
    const analysis::CollectiveCost& all_reduce) {
    const auto s = static_cast<std::size_t>(input.stage);
    std::int64_t pipeline_end = input.step_start_ns;
    for (const parallel::ReplayResult* replay : replays) {
        pipeline_end = std::max(pipeline_end, input.step_start_ns + replay->stage_end_ns[s]);
    }
    if (!input.overlap) {
        return {pipeline_end + predict_moved_ns(all_reduce, input.stage_bytes), input.stage_bytes};
    }
    const int v = std::max(input.virtual_stages, 1);
    // When each layer's gradients are final: the latest over the replicas.
    std::vector<std::int64_t> ready;
    std::int64_t layer_count = 0;
    for (int chunk = 0; chunk < v; ++chunk) {
        const parallel::LayerRange range = parallel::model_chunk_layers(
            chunk * input.stages + input.stage, input.stages * v, input.layers,
            input.stage_layers.size() == std::size_t(input.stages * v)
                ? std::span<const int>(input.stage_layers)
                : std::span<const int>{});
        const int n = range.last - range.first;
        layer_count += n;
        std::vector<std::int64_t> chunk_ready(static_cast<std::size_t>(n), input.step_start_ns);
        for (const parallel::ReplayResult* replay : replays) {
            const parallel::ReplayedOp* last = nullptr;
            for (const parallel::ReplayedOp& op : replay->stages[s]) {
                if (op.chunk == chunk && op.kind == input.writes_weights) {
                    last = &op;
                }
            }
            if (last == nullptr) {
                continue;
            }
            for (int i = 0; i < n; ++i) {
                const std::int64_t done =
                    last->start_ns + (last->end_ns - last->start_ns) * (i + 1) / n;
                auto& at = chunk_ready[static_cast<std::size_t>(i)];
                at = std::max(at, input.step_start_ns + done);
            }
        }
        ready.insert(ready.end(), chunk_ready.begin(), chunk_ready.end());
    }
    std::sort(ready.begin(), ready.end());
    // The passes lose sm_share of the time a bucket runs beside them: what comes after (the
    // next layers' gradients, the stage's last pass) that much later.
    std::int64_t stream = input.step_start_ns;
    std::int64_t overlapped = 0;  // of the buckets' time, what ran beside the passes
    const auto delay = [&] {
        return static_cast<std::int64_t>(std::llround(input.sm_share * double(overlapped)));
    };
    struct Bucket {
        std::int64_t start = 0, end = 0;
    };
    std::vector<Bucket> buckets;
    buckets.reserve(ready.size());
    for (std::int64_t at : ready) {
        const std::int64_t start = std::max(stream, at + delay());
        stream = start + predict_collective_ns(all_reduce, input.layer_bytes);
        overlapped += std::max<std::int64_t>(0, std::min(stream, pipeline_end + delay()) - start);
        buckets.push_back({start, stream});
    }
    pipeline_end += delay();
    const std::int64_t rest = input.stage_bytes - layer_count * input.layer_bytes;
    // What the buckets still had to move at the pipeline's end, each at its own pace.
    std::int64_t exposed = rest;
    for (const Bucket& bucket : buckets) {
        if (bucket.end > pipeline_end) {
            exposed +=
                exposed_bytes(input.layer_bytes, bucket.end - std::max(bucket.start, pipeline_end),
                              bucket.end - bucket.start);
        }
    }
    stream = std::max(stream, pipeline_end);
    return {stream + predict_moved_ns(all_reduce, rest), exposed};
}

}  // namespace fulcrum::sim
