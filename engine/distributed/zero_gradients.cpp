#include "engine/distributed/zero_gradients.h"

#include <algorithm>

#include "core/trace/annotations.h"
#include "engine/distributed/zero_parameters.h"
#include "engine/instrument/annotations.h"

namespace fulcrum::engine {
namespace {

// A buffer of `elements` floats; none, and an empty tensor, for none.
Tensor allocated(Backend& backend, DeviceBuffer& storage, std::int64_t elements) {
    if (elements == 0) {
        return Tensor{};
    }
    storage = backend.allocate(std::size_t(elements) * sizeof(float));
    return storage.f32(0, {elements});
}

}  // namespace

ZeroGradients::ZeroGradients(Backend& backend, const ParameterLayout& layout, Communicator& group)
    : backend_(backend),
      layout_(layout),
      group_(group),
      counts_(zero_shard_counts(layout.total(), group.size())) {
    shard_range_ = zero_shard(counts_, group_.rank());
    block_capacity_ = largest_block(layout_);
    shard_ = allocated(backend_, shard_storage_, shard_range_.count);
    allocated(backend_, block_storage_, block_capacity_);  // acquire() views it
    before_ = allocated(backend_, before_storage_, layout_.before_blocks().count);
    after_ = allocated(backend_, after_storage_, layout_.after_blocks().count);
}

Tensor ZeroGradients::outer(ElementRange range) {
    FULCRUM_CHECK(range == layout_.before_blocks() || range == layout_.after_blocks(),
                  "ZeRO-2: outer gradients are those before or after the blocks");
    return range == layout_.before_blocks() ? before_ : after_;
}

Tensor ZeroGradients::acquire(ElementRange range) {
    FULCRUM_CHECK(range.count <= block_capacity_ && range.offset >= 0 &&
                      range.offset + range.count <= layout_.total(),
                  "ZeRO-2: a range that is not a block");
    FULCRUM_CHECK(!block_in_use_, "ZeRO-2: a block's gradients acquired twice before release");
    block_in_use_ = true;
    const Tensor block = block_storage_.f32(0, {range.count});
    backend_.fill_zero(block);
    return block;
}

void ZeroGradients::release(ElementRange range) {
    FULCRUM_CHECK(block_in_use_, "ZeRO-2: a block's gradients released that were not acquired");
    block_in_use_ = false;
    reduce_into_shard(block_storage_.f32(0, {range.count}), range);
}

void ZeroGradients::zero() {
    for (const Tensor& t : {shard_, before_, after_}) {
        if (t.numel() > 0) {
            backend_.fill_zero(t);
        }
    }
}

void ZeroGradients::reduce_outer() {
    for (const ElementRange& range : {layout_.before_blocks(), layout_.after_blocks()}) {
        if (range.count > 0) {
            reduce_into_shard(outer(range), range);
        }
    }
}

void ZeroGradients::reduce_into_shard(Tensor whole, ElementRange range) {
    const std::vector<int> counts = zero_counts_in(counts_, range);
    const ElementRange mine = overlap(shard_range_, range);
    const std::int64_t own = mine.count;
    Tensor sums;
    if (own > 0) {
        // This rank's earlier sums ride along in its own part of the buffer, so that the
        // reduce-scatter writes the shard's new sums over them: no staging buffer needed.
        sums = shard_.slice(mine.offset - shard_range_.offset, own);
        const Tensor part = whole.slice(mine.offset - range.offset, own);
        backend_.residual_forward(part, part, sums);
    }
    instrument::Range reduce(range_name::kZeroReduceScatter, Category::communication,
                             instrument::with_bytes(range.count * std::int64_t(sizeof(float))));
    group_.reduce_scatter_sum(std::span<const float>(whole.f32(), std::size_t(range.count)),
                              std::span<float>(own > 0 ? sums.f32() : nullptr, std::size_t(own)),
                              counts);
}

}  // namespace fulcrum::engine
