// ZeRO-3's parameters (Rajbhandari et al. 2020, §5.3) in fulcrum-train: no DP × CP rank holds
// its stage's parameters whole between uses.
//
// Each of the d DP × CP ranks that hold a stage's parameters keeps one contiguous shard of the
// stage's flat buffer (params.h): zero_shard_counts, the same shards ZeRO-1 and -2 give the
// optimizer state, so its optimizer updates its shard in place and nothing is gathered after
// the update. A range a pass reads — one block's, or the tensors before (wte, wpe) or after
// (lnf) the blocks — is all-gathered from the shards that overlap it (each rank sends what it
// has of the range, often nothing) into one device buffer kept for that kind of range, and
// given back when the pass is done with it: the model's weights are its shard, a block and
// the embedding's and head's tensors. The gathers are `zero all-gather params` ranges
// (docs/annotations.md), inside the passes that make them.
//
// Gradients are ZeRO-2's (zero_gradients.h), or, under a split backward, whole and
// reduce-scattered into the shards after the passes (parallel_trainer.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/comm/communicator.h"
#include "engine/model/params.h"

namespace fulcrum::engine {

// ZeRO's shards of a flat buffer of `total` elements over `ranks` ranks: equal counts, the
// first total mod ranks one element longer.
std::vector<int> zero_shard_counts(std::int64_t total, int ranks);
// Member `member`'s shard of `counts`: the range of the flat buffer it keeps.
ElementRange zero_shard(const std::vector<int>& counts, int member);
// How much of `range` each member's shard of `counts` holds, in member order (often nothing):
// the counts of a gather into the range, or of a reduce-scatter out of it.
std::vector<int> zero_counts_in(const std::vector<int>& counts, ElementRange range);
// The elements of the largest block `layout` holds: one buffer of it serves every block in
// turn (a stage's blocks all have the same size).
std::int64_t largest_block(const ParameterLayout& layout);

class ZeroParameters final : public ShardedParameters {
public:
    // `layout`: the stage's (its TP rank's, its held tensors); `group`: the DP × CP ranks
    // holding the same tensors, which must outlive this.
    ZeroParameters(Backend& backend, const ParameterLayout& layout, Communicator& group);

    void set_whole(std::span<const float> host) override;
    std::vector<float> whole_to_host() override;
    Tensor acquire(ElementRange range) override;
    void release(ElementRange range) override;
    ElementRange shard_range() const override { return shard_range_; }
    Tensor shard() const override { return shard_; }

    const std::vector<int>& counts() const { return counts_; }

private:
    // A device buffer for one kind of range, and whether a pass holds it.
    struct Slot {
        DeviceBuffer storage;
        std::int64_t capacity = 0;
        bool in_use = false;
    };
    Slot& slot_for(ElementRange range);

    Backend& backend_;
    ParameterLayout layout_;
    Communicator& group_;
    std::vector<int> counts_;
    ElementRange shard_range_;
    DeviceBuffer shard_storage_;
    Tensor shard_;
    Slot before_blocks_, block_, after_blocks_;
};

}  // namespace fulcrum::engine
