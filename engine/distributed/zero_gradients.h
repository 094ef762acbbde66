// ZeRO-2's gradients (Rajbhandari et al. 2020, §5.2) in fulcrum-train: no DP × CP rank holds
// its stage's block gradients whole.
//
// Each of the d DP × CP ranks that hold a stage's parameters keeps the gradient sums of one
// contiguous shard of the stage's flat buffer: zero_shard_counts, the shard its optimizer
// updates. A block's backward writes into one device buffer kept for blocks, zeroed when the
// pass acquires it; releasing it reduce-scatters it over the group (each rank receives the sum
// of its shard's part of the block, often nothing) and adds that to the shard, so the passes'
// sums accumulate there and a rank's gradient memory is its shard, one block and the tensors
// around the blocks (the sums so far ride in the reduce-scatter, so nothing is staged). Those (wte
// and wpe before the blocks, lnf after) are written by the embedding and the head at any point of
// the step, and wte's is summed between the first and last stage before it is reduced: they stay
// whole until reduce_outer() scatters them at the step's end. The reductions are `zero
// reduce-scatter grads` ranges (docs/annotations.md), inside the passes that make them.
//
// Not under a split backward (ZB-H1's W passes write a chunk's weight gradients long after
// its B): there the gradients stay whole and are reduce-scattered after the passes
// (parallel_trainer.h).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/comm/communicator.h"
#include "engine/model/params.h"

namespace fulcrum::engine {

class ZeroGradients final : public ShardedGradients {
public:
    // `layout`: the stage's (its TP rank's, its held tensors); `group`: the DP × CP ranks
    // holding the same tensors, which must outlive this.
    ZeroGradients(Backend& backend, const ParameterLayout& layout, Communicator& group);

    Tensor outer(ElementRange range) override;
    Tensor acquire(ElementRange range) override;
    void release(ElementRange range) override;
    void zero() override;
    void reduce_outer() override;
    ElementRange shard_range() const override { return shard_range_; }
    Tensor shard() const override { return shard_; }

private:
    // Sums `whole` (the gradients of `range`, which this overwrites) over the group and adds
    // this rank's part to the shard.
    void reduce_into_shard(Tensor whole, ElementRange range);

    Backend& backend_;
    ParameterLayout layout_;
    Communicator& group_;
    std::vector<int> counts_;
    ElementRange shard_range_;
    DeviceBuffer shard_storage_, block_storage_, before_storage_, after_storage_;
    Tensor shard_, before_, after_;
    std::int64_t block_capacity_ = 0;
    bool block_in_use_ = false;
};

}  // namespace fulcrum::engine
