#include "engine/model/tensor_parallel.h"

#include "core/trace/annotations.h"
#include "engine/instrument/annotations.h"

#include <algorithm>

namespace fulcrum::engine {

namespace {

// `count` floats at `local` in a TP rank's buffer that are `full` in the serial one.
struct ElementRun {
    std::int64_t full = 0;
    std::int64_t local = 0;
    std::int64_t count = 0;
};

// Every element of TP rank `rank`'s buffer, as runs into the serial buffer, tensor by tensor.
std::vector<ElementRun> shard_runs(const ParameterLayout& serial, const ParameterLayout& local,
                                   int rank) {
    std::vector<ElementRun> runs;
    const auto full_tensors = serial.tensors();
    const auto local_tensors = local.tensors();
    for (std::size_t i = 0; i < local_tensors.size(); ++i) {
        const ParameterTensor& f = full_tensors[i];
        const ParameterTensor& l = local_tensors[i];
        // A 1-D tensor is one column of `rows` rows here.
        const std::int64_t row_width = l.cols == 0 ? 1 : l.cols;
        switch (l.tp_split) {
            case TpSplit::replicated:
                runs.push_back({f.offset, l.offset, l.numel()});
                break;
            case TpSplit::output_rows:
                runs.push_back({f.offset + rank * l.numel(), l.offset, l.numel()});
                break;
            case TpSplit::head_rows: {
                // Local rows: [Q_r; K_r; V_r], each rows/3 long; serial block b starts at
                // b·C, and rank r's heads at r·C_l inside it.
                const std::int64_t block_rows = l.rows / 3;
                for (int b = 0; b < 3; ++b) {
                    const std::int64_t full_row = b * (f.rows / 3) + rank * block_rows;
                    runs.push_back({f.offset + full_row * row_width,
                                    l.offset + b * block_rows * row_width, block_rows * row_width});
                }
                break;
            }
            case TpSplit::input_columns:
                for (std::int64_t row = 0; row < l.rows; ++row) {
                    runs.push_back(
                        {f.offset + row * f.cols + rank * l.cols, l.offset + row * l.cols, l.cols});
                }
                break;
        }
    }
    return runs;
}

}  // namespace

std::vector<float> shard_parameters(std::span<const float> full, const ModelShape& config,
                                    int tp_size, int tp_rank) {
    const ParameterLayout serial(config);
    const ParameterLayout local(config, tp_size);
    FULCRUM_CHECK(std::int64_t(full.size()) == serial.total(), "not a serial parameter buffer");
    FULCRUM_CHECK(0 <= tp_rank && tp_rank < tp_size, "TP rank outside the TP group");
    std::vector<float> out(std::size_t(local.total()));
    for (const ElementRun& run : shard_runs(serial, local, tp_rank)) {
        std::copy_n(full.begin() + run.full, run.count, out.begin() + run.local);
    }
    return out;
}

std::vector<float> gather_parameters(std::span<const std::vector<float>> locals,
                                     const ModelShape& config) {
    const int tp_size = int(locals.size());
    FULCRUM_CHECK(tp_size >= 1, "no TP rank to gather from");
    const ParameterLayout serial(config);
    const ParameterLayout local(config, tp_size);
    std::vector<float> full(std::size_t(serial.total()));
    // Backwards, so rank 0's copy of a replicated tensor is the one that stays.
    for (int rank = tp_size - 1; rank >= 0; --rank) {
        const std::vector<float>& part = locals[std::size_t(rank)];
        FULCRUM_CHECK(std::int64_t(part.size()) == local.total(), "not a TP-local buffer");
        for (const ElementRun& run : shard_runs(serial, local, rank)) {
            std::copy_n(part.begin() + run.local, run.count, full.begin() + run.full);
        }
    }
    return full;
}

std::vector<float> gather_parameters(std::span<const float> local, const ModelShape& config,
                                     Communicator& tp) {
    const int n = int(local.size());
    std::vector<float> all(std::size_t(n) * std::size_t(tp.size()));
    tp.all_gather(local, all, std::vector<int>(std::size_t(tp.size()), n));
    std::vector<std::vector<float>> locals;
    for (int r = 0; r < tp.size(); ++r) {
        locals.emplace_back(all.begin() + std::int64_t(r) * n,
                            all.begin() + std::int64_t(r + 1) * n);
    }
    return gather_parameters(locals, config);
}

std::vector<ElementRange> tp_replicated_ranges(const ParameterLayout& layout) {
    std::vector<ElementRange> ranges;
    for (const ParameterTensor& t : layout.tensors()) {
        if (!t.tp_replicated())
            continue;
        if (!ranges.empty() && ranges.back().offset + ranges.back().count == t.offset) {
            ranges.back().count += t.numel();
        } else {
            ranges.push_back({t.offset, t.numel()});
        }
    }
    return ranges;
}

void all_reduce_sum(Communicator* comm, Tensor t) {
    if (comm == nullptr || comm->size() == 1)
        return;
    FULCRUM_CHECK(t.dtype() == DType::f32 && t.contiguous(), "all-reduce of a strided tensor");
    instrument::Range range("tp all-reduce", Category::communication,
                            instrument::with_bytes(t.numel() * std::int64_t(sizeof(float))));
    comm->all_reduce_sum(std::span<float>(static_cast<float*>(t.raw()), std::size_t(t.numel())));
}

std::vector<int> sequence_counts(std::int64_t rows, int tp, std::int64_t width) {
    std::vector<int> counts;
    for (int r = 0; r < tp; ++r) {
        counts.push_back(int(sequence_shard(rows, tp, r).rows * width));
    }
    return counts;
}

void all_gather_sequence(Communicator& tp, Tensor shard, Tensor full) {
    FULCRUM_CHECK(shard.contiguous() && full.contiguous() && shard.cols() == full.cols(),
                  "sequence all-gather: shapes");
    FULCRUM_CHECK(sequence_shard(full.rows(), tp.size(), tp.rank()).rows == shard.rows(),
                  "sequence all-gather: not this rank's shard of the rows");
    instrument::Range range(range_name::kTpAllGather, Category::communication,
                            instrument::with_bytes(full.numel() * std::int64_t(sizeof(float))));
    tp.all_gather(std::span<const float>(shard.f32(), std::size_t(shard.numel())),
                  std::span<float>(full.f32(), std::size_t(full.numel())),
                  sequence_counts(full.rows(), tp.size(), full.cols()));
}

void reduce_scatter_sequence(Communicator& tp, Tensor full, Tensor shard) {
    FULCRUM_CHECK(shard.contiguous() && full.contiguous() && shard.cols() == full.cols(),
                  "sequence reduce-scatter: shapes");
    FULCRUM_CHECK(sequence_shard(full.rows(), tp.size(), tp.rank()).rows == shard.rows(),
                  "sequence reduce-scatter: not this rank's shard of the rows");
    instrument::Range range(range_name::kTpReduceScatter, Category::communication,
                            instrument::with_bytes(full.numel() * std::int64_t(sizeof(float))));
    tp.reduce_scatter_sum(std::span<const float>(full.f32(), std::size_t(full.numel())),
                          std::span<float>(shard.f32(), std::size_t(shard.numel())),
                          sequence_counts(full.rows(), tp.size(), full.cols()));
}

}  // namespace fulcrum::engine
