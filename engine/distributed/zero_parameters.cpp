#include "engine/distributed/zero_parameters.h"

#include <algorithm>
#include <numeric>

#include "core/trace/annotations.h"
#include "engine/instrument/annotations.h"

namespace fulcrum::engine {
namespace {

Tensor allocated(Backend& backend, DeviceBuffer& storage, std::int64_t elements) {
    const std::int64_t n = std::max<std::int64_t>(elements, 1);
    storage = backend.allocate(std::size_t(n) * sizeof(float));
    return storage.f32(0, {n});
}

}  // namespace

std::vector<int> zero_shard_counts(std::int64_t total, int ranks) {
    std::vector<int> counts(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) {
        counts[static_cast<std::size_t>(r)] =
            static_cast<int>(total / ranks + (r < total % ranks ? 1 : 0));
    }
    return counts;
}

ElementRange zero_shard(const std::vector<int>& counts, int member) {
    return {std::accumulate(counts.begin(), counts.begin() + member, std::int64_t{0}),
            counts[static_cast<std::size_t>(member)]};
}

std::vector<int> zero_counts_in(const std::vector<int>& counts, ElementRange range) {
    std::vector<int> in(counts.size());
    for (std::size_t r = 0; r < counts.size(); ++r) {
        in[r] = static_cast<int>(overlap(zero_shard(counts, int(r)), range).count);
    }
    return in;
}

std::int64_t largest_block(const ParameterLayout& layout) {
    std::int64_t block = 0;
    for (int l = 0; l < layout.config().layers; ++l) {
        if (layout.held().holds_block(l)) {
            block = std::max(block, layout.block_range(l, l + 1).count);
        }
    }
    return block;
}

ZeroParameters::ZeroParameters(Backend& backend, const ParameterLayout& layout, Communicator& group)
    : backend_(backend),
      layout_(layout),
      group_(group),
      counts_(zero_shard_counts(layout.total(), group.size())) {
    shard_range_ = zero_shard(counts_, group_.rank());
    shard_ = allocated(backend_, shard_storage_, shard_range_.count).slice(0, shard_range_.count);
    const std::int64_t block = largest_block(layout_);
    for (auto [slot, count] :
         {std::pair{&before_blocks_, layout_.before_blocks().count}, std::pair{&block_, block},
          std::pair{&after_blocks_, layout_.after_blocks().count}}) {
        if (count > 0) {
            allocated(backend_, slot->storage, count);
            slot->capacity = count;
        }
    }
}

void ZeroParameters::set_whole(std::span<const float> host) {
    FULCRUM_CHECK(std::int64_t(host.size()) == layout_.total(), "wrong parameter count");
    if (shard_range_.count > 0) {
        backend_.upload(shard_, host.data() + shard_range_.offset, kComputeStream);
    }
}

std::vector<float> ZeroParameters::whole_to_host() {
    std::vector<float> host(std::size_t(layout_.total()));
    std::vector<ElementRange> ranges = {layout_.before_blocks()};
    for (int l = 0; l < layout_.config().layers; ++l) {
        if (layout_.held().holds_block(l)) {
            ranges.push_back(layout_.block_range(l, l + 1));
        }
    }
    ranges.push_back(layout_.after_blocks());
    for (const ElementRange& range : ranges) {
        if (range.count == 0) {
            continue;
        }
        const Tensor whole = acquire(range);
        backend_.download(host.data() + range.offset, whole, kComputeStream);
        release(range);
    }
    return host;
}

ZeroParameters::Slot& ZeroParameters::slot_for(ElementRange range) {
    Slot& slot = range == layout_.before_blocks()  ? before_blocks_
                 : range == layout_.after_blocks() ? after_blocks_
                                                   : block_;
    FULCRUM_CHECK(range.count <= slot.capacity && range.offset >= 0 &&
                      range.offset + range.count <= layout_.total(),
                  "ZeRO-3: a range that is neither a block nor the tensors around the blocks");
    return slot;
}

Tensor ZeroParameters::acquire(ElementRange range) {
    Slot& slot = slot_for(range);
    FULCRUM_CHECK(!slot.in_use, "ZeRO-3: a range acquired twice before its release");
    slot.in_use = true;
    const Tensor whole = slot.storage.f32(0, {range.count});
    // Each rank sends its shard's part of the range; in rank order the parts are the range.
    const std::vector<int> counts = zero_counts_in(counts_, range);
    const ElementRange mine = overlap(shard_range_, range);
    const std::int64_t own = mine.count;
    const Tensor part = own > 0 ? shard_.slice(mine.offset - shard_range_.offset, own) : Tensor{};
    instrument::Range gather(range_name::kZeroAllGather, Category::communication,
                             instrument::with_bytes(range.count * std::int64_t(sizeof(float))));
    group_.all_gather(std::span<const float>(own > 0 ? part.f32() : nullptr, std::size_t(own)),
                      std::span<float>(whole.f32(), std::size_t(range.count)), counts);
    return whole;
}

void ZeroParameters::release(ElementRange range) {
    Slot& slot = slot_for(range);
    FULCRUM_CHECK(slot.in_use, "ZeRO-3: a range released that was not acquired");
    slot.in_use = false;
}

}  // namespace fulcrum::engine
