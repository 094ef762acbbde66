#include "engine/data/packer.h"

#include <algorithm>
#include <numeric>

#include "core/util/random.h"
#include "engine/backend/backend.h"

namespace fulcrum::engine {

MicroBatchSampler::MicroBatchSampler(const Corpus& corpus, PackingConfig config)
    : corpus_(corpus), config_(config) {
    FULCRUM_CHECK(config.context >= 1 && config.sequences_per_micro_batch >= 1,
                  "packing needs a positive context and sequence count");
    FULCRUM_CHECK(corpus.total_bytes() > 0, "packing an empty corpus");
    order_.resize(corpus.documents.size());
    shuffle();
}

void MicroBatchSampler::shuffle() {
    std::iota(order_.begin(), order_.end(), 0u);
    Random random(derive_seed(config_.seed, std::uint64_t(epoch_)));
    for (std::size_t i = order_.size(); i > 1; --i) {
        std::swap(order_[i - 1], order_[random.below(i)]);
    }
    cursor_ = 0;
    consumed_ = 0;
}

TokenBatch MicroBatchSampler::next() {
    TokenBatch batch;
    for (int s = 0; s < config_.sequences_per_micro_batch; ++s) {
        std::size_t room = std::size_t(config_.context);
        while (room > 0) {
            const std::string& text = corpus_.documents[order_[cursor_]].text;
            const std::size_t take = std::min(room, text.size() - consumed_);
            batch.append_document(std::string_view(text).substr(consumed_, take));
            consumed_ += take;
            room -= take;
            if (consumed_ == text.size()) {
                consumed_ = 0;
                if (++cursor_ == order_.size()) {
                    ++epoch_;
                    shuffle();
                }
            }
        }
    }
    return batch;
}

}  // namespace fulcrum::engine
