#include "core/balance/step_planner.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "core/util/random.h"

namespace fulcrum::balance {

StepPlanner::StepPlanner(std::vector<std::int64_t> lengths, PlannerOptions options)
    : lengths_(std::move(lengths)), options_(options) {
    global_ = options_.packing;
    global_.microbatches = options_.packing.microbatches * options_.dp;
    cp_state_.chunk = options_.cp_chunk;
}

Result<StepPlanner> StepPlanner::create(std::vector<std::int64_t> lengths, PlannerOptions options) {
    if (auto status = validate(options.packing); !status) {
        return status.error();
    }
    if (options.epochs < 0) {
        return Error{ErrorCode::invalid_input,
                     "the number of epochs must be at least 1 (or 0 for a run by steps)"};
    }
    if (options.dp < 1 || options.cp < 1) {
        return Error{ErrorCode::invalid_input, "dp and cp must be at least 1"};
    }
    if (lengths.empty()) {
        return Error{ErrorCode::invalid_input, "there are no documents to train on"};
    }
    const std::int64_t capacity =
        options.packing.balancer == Balancer::wlb && options.packing.wlb_max_tokens > 0
            ? options.packing.wlb_max_tokens
            : options.packing.capacity;
    for (std::size_t id = 0; id < lengths.size(); ++id) {
        if (lengths[id] > capacity) {
            return Error{ErrorCode::invalid_input,
                         "document " + std::to_string(id) + " has " + std::to_string(lengths[id]) +
                             " tokens, more than any micro-batch can hold (" +
                             std::to_string(capacity) + "); raise --context"};
        }
    }
    StepPlanner planner(std::move(lengths), options);
    if (options.packing.balancer == Balancer::wlb) {
        if (!options.packing.wlb_thresholds) {
            planner.options_.packing.wlb_thresholds =
                default_wlb_thresholds(options.packing.capacity);
        }
        if (options.tune_wlb_thresholds && !options.packing.wlb_thresholds) {
            if (auto status = planner.start_epoch(); !status) {
                return status.error();
            }
            auto tuned = tune_wlb_thresholds(planner.batches_, planner.global_);
            if (!tuned) {
                return tuned.error();
            }
            planner.options_.packing.wlb_thresholds = tuned->thresholds;
            planner.wlb_tuning_ = std::move(*tuned);
        }
        planner.global_.wlb_thresholds = planner.options_.packing.wlb_thresholds;
    }
    return planner;
}

Status StepPlanner::start_epoch() {
    ++epoch_;
    std::vector<std::uint32_t> order(lengths_.size());
    std::iota(order.begin(), order.end(), 0u);
    Random random(derive_seed(options_.seed, 2'000'000 + static_cast<std::uint64_t>(epoch_)));
    for (std::size_t i = order.size(); i > 1; --i) {  // Fisher–Yates
        std::swap(order[i - 1], order[random.below(i)]);
    }
    std::vector<Document> stream;
    stream.reserve(order.size());
    for (auto id : order) {
        const std::int64_t length = lengths_[id];
        if (length > 0) {
            stream.push_back({id, length});
        }
    }
    auto batches = split_into_global_batches(stream, global_.microbatches, global_.capacity);
    if (!batches) {
        return batches.error();
    }
    batches_ = std::move(*batches);
    next_batch_ = 0;
    window_.clear();
    next_window_ = 0;
    drained_.clear();
    next_drained_ = 0;
    return {};
}

bool StepPlanner::finished() const {
    return options_.epochs > 0 && epoch_ >= options_.epochs - 1 && next_batch_ >= batches_.size() &&
           next_window_ >= window_.size() && next_drained_ >= drained_.size() &&
           state_.pending_documents() == 0;
}

void TrainedTotals::add(const StepPlan& plan) {
    ++steps;
    tokens += plan.tokens;
    documents += plan.documents;
    delayed_token_steps += plan.delayed_token_steps;
    max_delay_steps = std::max(max_delay_steps, plan.max_delay_steps);
    for (const auto& replica : plan.replicas) {
        for (const auto& microbatch : replica) {
            per_document_microbatches += microbatch.cp.sharding == CpSharding::per_document;
            zigzag_microbatches += microbatch.cp.sharding == CpSharding::zigzag;
        }
    }
}

double TrainedTotals::mean_delay_steps() const {
    return tokens > 0 ? delayed_token_steps / static_cast<double>(tokens) : 0.0;
}

// A global batch whose documents the balancer all delayed (wlb can, with few short
// documents) makes no step: the next batch is packed in its place.
Result<StepPlan> StepPlanner::next() {
    auto packed = pack_next();
    if (!packed) {
        return packed.error();
    }
    return complete(std::move(*packed));
}

Result<std::vector<std::vector<MicroBatch>>> StepPlanner::pack_next() {
    if (finished()) {
        return Error{ErrorCode::invalid_input, "every step of the run's " +
                                                   std::to_string(options_.epochs) +
                                                   " epoch(s) has been planned"};
    }
    for (std::size_t attempt = 0; attempt <= batches_.size() + 2; ++attempt) {
        auto replicas = pack_one();
        if (!replicas) {
            return replicas;
        }
        for (const auto& replica : *replicas) {
            if (!replica.empty()) {
                return replicas;
            }
        }
    }
    return Error{ErrorCode::invalid_input, "the balancer delayed every document of the epoch"};
}

Result<std::vector<std::vector<MicroBatch>>> StepPlanner::pack_one() {
    if (epoch_ < 0) {
        if (auto status = start_epoch(); !status) {
            return status.error();
        }
    }
    for (int attempt = 0; attempt < 4; ++attempt) {
        if (next_window_ < window_.size()) {
            return deal_to_replicas(std::move(window_[next_window_++].microbatches));
        }
        if (next_batch_ < batches_.size() && options_.packing.balancer == Balancer::ilp &&
            options_.ilp_window > 1) {
            const std::size_t count = std::min<std::size_t>(
                static_cast<std::size_t>(options_.ilp_window), batches_.size() - next_batch_);
            auto packed = pack_ilp_window(
                std::span<const std::vector<Document>>(batches_.data() + next_batch_, count),
                global_);
            if (!packed) {
                return packed.error();
            }
            next_batch_ += count;
            window_ = std::move(*packed);
            next_window_ = 0;
            continue;
        }
        if (next_batch_ < batches_.size()) {
            auto packed = pack_global_batch(batches_[next_batch_++], global_, state_);
            if (!packed) {
                return packed.error();
            }
            return deal_to_replicas(std::move(packed->microbatches));
        }
        // End of the epoch: what the balancer delayed is trained now, before the next
        // epoch starts, so each epoch trains every document exactly once.
        if (next_batch_ == batches_.size() && drained_.empty() && state_.pending_documents() > 0) {
            auto drained = drain(global_, state_);
            if (!drained) {
                return drained.error();
            }
            drained_ = std::move(*drained);
            next_drained_ = 0;
            ++next_batch_;  // past the end: the epoch's drain is done
        }
        if (next_drained_ < drained_.size()) {
            return deal_to_replicas(std::move(drained_[next_drained_++].microbatches));
        }
        if (auto status = start_epoch(); !status) {
            return status.error();
        }
    }
    return Error{ErrorCode::invalid_input, "the data yields no global batch"};
}

// fixed deals micro-batches to replicas in order (replica r gets the r-th run of N), as a
// plain data loader does; the balancers deal longest-predicted-first to the replica with the
// least predicted work, so that DP replicas also finish together.
std::vector<std::vector<MicroBatch>> StepPlanner::deal_to_replicas(
    std::vector<MicroBatch> microbatches) const {
    std::erase_if(microbatches, [](const MicroBatch& mb) { return mb.documents.empty(); });
    const int dp = options_.dp;
    std::vector<std::vector<MicroBatch>> replicas(static_cast<std::size_t>(dp));
    if (options_.packing.balancer == Balancer::fixed) {
        const std::size_t per_replica = (microbatches.size() + dp - 1) / dp;
        for (std::size_t i = 0; i < microbatches.size(); ++i) {
            replicas[i / std::max<std::size_t>(per_replica, 1)].push_back(
                std::move(microbatches[i]));
        }
        return replicas;
    }
    std::vector<std::size_t> order(microbatches.size());
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return microbatches[a].predicted_cost > microbatches[b].predicted_cost;
    });
    const std::size_t cap = (microbatches.size() + dp - 1) / dp;
    std::vector<double> load(static_cast<std::size_t>(dp), 0.0);
    for (std::size_t index : order) {
        std::size_t best = 0;
        bool found = false;
        for (std::size_t r = 0; r < load.size(); ++r) {
            if (replicas[r].size() < cap && (!found || load[r] < load[best])) {
                best = r;
                found = true;
            }
        }
        load[best] += microbatches[index].predicted_cost;
        replicas[best].push_back(std::move(microbatches[index]));
    }
    return replicas;
}

Result<StepPlan> StepPlanner::complete(std::vector<std::vector<MicroBatch>> replicas) {
    StepPlan plan;
    plan.step = step_++;
    plan.epoch = std::max(epoch_, 0);
    std::vector<MicroBatch> all;
    for (auto& replica : replicas) {
        std::vector<PlannedMicroBatch> planned;
        for (auto& microbatch : replica) {
            auto cp = shard_microbatch(microbatch.documents, options_.cp, options_.sharding,
                                       cp_state_, options_.attention_kernel);
            if (!cp) {
                return cp.error();
            }
            // A micro-batch of a few tiny documents can leave a CP rank nothing under per-doc
            // sharding; every rank must hold a token, so such a one is split contiguously.
            const auto holds_nothing = [](const CpPlan& plan) {
                for (const auto& shard : plan.ranks) {
                    if (shard.tokens == 0) {
                        return true;
                    }
                }
                return false;
            };
            if (holds_nothing(*cp)) {
                CpShardingState unused;
                cp = shard_microbatch(microbatch.documents, options_.cp, CpSharding::contiguous,
                                      unused);
                if (!cp || holds_nothing(*cp)) {
                    return Error{ErrorCode::invalid_input,
                                 "a micro-batch of " + std::to_string(microbatch.tokens) +
                                     " tokens cannot give each of " + std::to_string(options_.cp) +
                                     " CP ranks a token; use longer documents or a lower --cp"};
                }
            }
            for (const auto& document : microbatch.documents) {
                plan.target_tokens += std::max<std::int64_t>(document.length - 1, 0);
                plan.tokens += document.length;
                ++plan.documents;
                plan.delayed_token_steps +=
                    static_cast<double>(document.waited) * static_cast<double>(document.length);
                plan.max_delay_steps = std::max(plan.max_delay_steps, document.waited);
            }
            all.push_back(microbatch);
            planned.push_back({std::move(microbatch), std::move(*cp)});
        }
        plan.replicas.push_back(std::move(planned));
    }
    plan.imbalance = imbalance_degree(all);
    plan.last = finished();
    return plan;
}

}  // namespace fulcrum::balance
