#include "engine/data/step_plan.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "engine/comm/communicator.h"
#include "engine/util/random.h"

namespace fulcrum::engine {

std::int64_t TrainingDocuments::total_tokens() const {
    std::int64_t total = 0;
    for (const auto& text : texts) {
        total += static_cast<std::int64_t>(text.size());
    }
    return total;
}

Result<TrainingDocuments> load_training_documents(const DataOptions& options) {
    const std::string directory = options.data_dir.empty() ? kBuiltinCorpus : options.data_dir;
    auto corpus = load_text_corpus(directory, options.split);
    if (!corpus) {
        return corpus.error();
    }
    TrainingDocuments result;
    if (options.lengths_spec.empty()) {
        std::int64_t cut = 0;
        for (const auto& document : corpus->documents) {
            const std::string& text = document.text;
            for (std::size_t begin = 0; begin < text.size();
                 begin += static_cast<std::size_t>(options.max_length)) {
                result.texts.push_back(text.substr(begin, static_cast<std::size_t>(options.max_length)));
                cut += begin > 0;
            }
        }
        result.description = "text from " + directory + ": " +
                             std::to_string(result.texts.size()) + " documents" +
                             (cut > 0 ? " (" + std::to_string(cut) +
                                            " pieces cut at the context length)"
                                      : "");
        return result;
    }

    auto distribution = balance::parse_length_spec(options.lengths_spec);
    if (!distribution) {
        return distribution.error();
    }
    std::size_t count = static_cast<std::size_t>(options.synthetic_documents);
    if (const auto* file = std::get_if<balance::LengthFile>(&*distribution)) {
        auto lengths = balance::read_length_file(file->path);
        if (!lengths) {
            return lengths.error();
        }
        for (std::size_t line = 0; line < lengths->size(); ++line) {
            if ((*lengths)[line] > options.max_length) {
                return Error{ErrorCode::invalid_input,
                             "'" + file->path + "' asks for a document of " +
                                 std::to_string((*lengths)[line]) + " tokens (entry " +
                                 std::to_string(line + 1) +
                                 "), longer than any micro-batch can hold (--context " +
                                 std::to_string(options.max_length) +
                                 "); raise --context or shorten the entry"};
            }
        }
        count = lengths->size();
    }
    auto lengths = balance::sample_lengths(*distribution, count, options.seed, options.max_length);
    if (!lengths) {
        return lengths.error();
    }
    // Synthetic documents have the requested lengths and real bytes: each is a run of the
    // corpus text (read as a ring) starting at a random offset.
    std::string text;
    for (const auto& document : corpus->documents) {
        text += document.text;
    }
    if (text.empty()) {
        return Error{ErrorCode::invalid_input, "'" + directory + "' holds no text"};
    }
    result.texts.reserve(lengths->size());
    for (std::size_t i = 0; i < lengths->size(); ++i) {
        Random random(derive_seed(options.seed, 1'000'000 + i));
        std::size_t offset = static_cast<std::size_t>(random.below(text.size()));
        std::string document;
        document.reserve(static_cast<std::size_t>((*lengths)[i]));
        while (document.size() < static_cast<std::size_t>((*lengths)[i])) {
            const std::size_t take = std::min(text.size() - offset,
                                              static_cast<std::size_t>((*lengths)[i]) - document.size());
            document.append(text, offset, take);
            offset = 0;
        }
        result.texts.push_back(std::move(document));
    }
    result.description = std::to_string(result.texts.size()) + " synthetic documents, lengths " +
                         balance::length_spec(*distribution) + ", bytes from " + directory;
    return result;
}

StepPlanner::StepPlanner(const TrainingDocuments& documents, PlannerOptions options)
    : documents_(&documents), options_(options) {
    global_ = options_.packing;
    global_.microbatches = options_.packing.microbatches * options_.dp;
}

Result<StepPlanner> StepPlanner::create(const TrainingDocuments& documents,
                                        PlannerOptions options) {
    if (auto status = balance::validate(options.packing); !status) {
        return status.error();
    }
    if (options.dp < 1 || options.cp < 1) {
        return Error{ErrorCode::invalid_input, "dp and cp must be at least 1"};
    }
    if (documents.texts.empty()) {
        return Error{ErrorCode::invalid_input, "there are no documents to train on"};
    }
    const std::int64_t capacity = options.packing.balancer == balance::Balancer::wlb &&
                                          options.packing.wlb_max_tokens > 0
                                      ? options.packing.wlb_max_tokens
                                      : options.packing.capacity;
    for (std::size_t id = 0; id < documents.texts.size(); ++id) {
        if (static_cast<std::int64_t>(documents.texts[id].size()) > capacity) {
            return Error{ErrorCode::invalid_input,
                         "document " + std::to_string(id) + " has " +
                             std::to_string(documents.texts[id].size()) +
                             " tokens, more than any micro-batch can hold (" +
                             std::to_string(capacity) + "); raise --context"};
        }
    }
    StepPlanner planner(documents, options);
    return planner;
}

Status StepPlanner::start_epoch() {
    ++epoch_;
    std::vector<std::uint32_t> order(documents_->texts.size());
    std::iota(order.begin(), order.end(), 0u);
    Random random(derive_seed(options_.seed, 2'000'000 + static_cast<std::uint64_t>(epoch_)));
    for (std::size_t i = order.size(); i > 1; --i) {  // Fisher–Yates
        std::swap(order[i - 1], order[random.below(i)]);
    }
    std::vector<balance::Document> stream;
    stream.reserve(order.size());
    for (auto id : order) {
        const auto length = static_cast<std::int64_t>(documents_->texts[id].size());
        if (length > 0) {
            stream.push_back({id, length});
        }
    }
    auto batches = balance::split_into_global_batches(stream, global_.microbatches,
                                                      global_.capacity);
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

// A global batch whose documents the balancer all delayed (wlb can, with few short
// documents) makes no step: the next batch is packed in its place.
Result<std::vector<std::vector<balance::MicroBatch>>> StepPlanner::pack_next() {
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

Result<std::vector<std::vector<balance::MicroBatch>>> StepPlanner::pack_one() {
    if (epoch_ < 0) {
        if (auto status = start_epoch(); !status) {
            return status.error();
        }
    }
    for (int attempt = 0; attempt < 4; ++attempt) {
        if (next_window_ < window_.size()) {
            return deal_to_replicas(std::move(window_[next_window_++].microbatches));
        }
        if (next_batch_ < batches_.size() && options_.packing.balancer == balance::Balancer::ilp &&
            options_.ilp_window > 1) {
            const std::size_t count = std::min<std::size_t>(
                static_cast<std::size_t>(options_.ilp_window), batches_.size() - next_batch_);
            auto packed = balance::pack_ilp_window(
                std::span<const std::vector<balance::Document>>(batches_.data() + next_batch_, count),
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
            auto packed = balance::pack_global_batch(batches_[next_batch_++], global_, state_);
            if (!packed) {
                return packed.error();
            }
            return deal_to_replicas(std::move(packed->microbatches));
        }
        // End of the epoch: what the balancer delayed is trained now, before the next
        // epoch starts, so each epoch trains every document exactly once.
        if (next_batch_ == batches_.size() && drained_.empty() && state_.pending_documents() > 0) {
            auto drained = balance::drain(global_, state_);
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
std::vector<std::vector<balance::MicroBatch>> StepPlanner::deal_to_replicas(
    std::vector<balance::MicroBatch> microbatches) const {
    std::erase_if(microbatches, [](const balance::MicroBatch& mb) { return mb.documents.empty(); });
    const int dp = options_.dp;
    std::vector<std::vector<balance::MicroBatch>> replicas(static_cast<std::size_t>(dp));
    if (options_.packing.balancer == balance::Balancer::fixed) {
        const std::size_t per_replica = (microbatches.size() + dp - 1) / dp;
        for (std::size_t i = 0; i < microbatches.size(); ++i) {
            replicas[i / std::max<std::size_t>(per_replica, 1)].push_back(std::move(microbatches[i]));
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

Result<StepPlan> StepPlanner::complete(std::vector<std::vector<balance::MicroBatch>> replicas) {
    StepPlan plan;
    plan.step = step_++;
    plan.epoch = std::max(epoch_, 0);
    std::vector<balance::MicroBatch> all;
    for (auto& replica : replicas) {
        std::vector<PlannedMicroBatch> planned;
        for (auto& microbatch : replica) {
            auto cp = balance::shard_microbatch(microbatch.documents, options_.cp,
                                                options_.sharding, cp_state_);
            if (!cp) {
                return cp.error();
            }
            // A micro-batch of a few tiny documents can leave a CP rank nothing under per-doc
            // sharding; every rank must hold a token, so such a one is split contiguously.
            const auto holds_nothing = [](const balance::CpPlan& plan) {
                for (const auto& shard : plan.ranks) {
                    if (shard.tokens == 0) {
                        return true;
                    }
                }
                return false;
            };
            if (holds_nothing(*cp)) {
                balance::CpShardingState unused;
                cp = balance::shard_microbatch(microbatch.documents, options_.cp,
                                               balance::CpSharding::contiguous, unused);
                if (!cp || holds_nothing(*cp)) {
                    return Error{ErrorCode::invalid_input,
                                 "a micro-batch of " + std::to_string(microbatch.tokens) +
                                     " tokens cannot give each of " + std::to_string(options_.cp) +
                                     " CP ranks a token; use longer documents or a lower --cp"};
                }
            }
            for (const auto& document : microbatch.documents) {
                plan.target_tokens += std::max<std::int64_t>(document.length - 1, 0);
            }
            all.push_back(microbatch);
            planned.push_back({std::move(microbatch), std::move(*cp)});
        }
        plan.replicas.push_back(std::move(planned));
    }
    plan.imbalance = balance::imbalance_degree(all);
    return plan;
}

namespace {

// The packing of a step as int64 words: status, epoch, replicas, then per replica its
// micro-batch count and per micro-batch its document count and (id, length) pairs. On
// failure: status 1 followed by the message's bytes, one per word.
std::vector<std::int64_t> encode(const Result<std::vector<std::vector<balance::MicroBatch>>>& packed,
                                 int epoch) {
    std::vector<std::int64_t> words;
    if (!packed) {
        words.push_back(1);
        words.push_back(static_cast<std::int64_t>(packed.error().code));
        for (char c : packed.error().message) {
            words.push_back(static_cast<unsigned char>(c));
        }
        return words;
    }
    words.push_back(0);
    words.push_back(epoch);
    words.push_back(static_cast<std::int64_t>(packed->size()));
    for (const auto& replica : *packed) {
        words.push_back(static_cast<std::int64_t>(replica.size()));
        for (const auto& microbatch : replica) {
            words.push_back(static_cast<std::int64_t>(microbatch.documents.size()));
            for (const auto& document : microbatch.documents) {
                words.push_back(static_cast<std::int64_t>(document.id));
                words.push_back(document.length);
            }
        }
    }
    return words;
}

Result<std::vector<std::vector<balance::MicroBatch>>> decode(const std::vector<std::int64_t>& words,
                                                            const balance::CostModel& cost,
                                                            int& epoch) {
    std::size_t at = 0;
    auto next = [&] { return words.at(at++); };
    if (next() != 0) {
        const auto code = static_cast<ErrorCode>(next());
        std::string message;
        while (at < words.size()) {
            message.push_back(static_cast<char>(next()));
        }
        return Error{code, message};
    }
    epoch = static_cast<int>(next());
    std::vector<std::vector<balance::MicroBatch>> replicas(static_cast<std::size_t>(next()));
    for (auto& replica : replicas) {
        replica.resize(static_cast<std::size_t>(next()));
        for (auto& microbatch : replica) {
            const auto documents = next();
            for (std::int64_t d = 0; d < documents; ++d) {
                balance::Document document;
                document.id = static_cast<std::uint64_t>(next());
                document.length = next();
                microbatch.add(document, cost);
            }
        }
    }
    return replicas;
}

}  // namespace

Result<StepPlan> plan_step(StepPlanner& planner, Communicator& world) {
    std::vector<std::int64_t> words;
    if (world.rank() == 0) {
        auto packed = planner.pack_next();  // before epoch(): it may start a new epoch
        words = encode(packed, planner.epoch());
    }
    std::int64_t size = static_cast<std::int64_t>(words.size());
    world.broadcast_bytes(std::as_writable_bytes(std::span(&size, 1)), 0);
    words.resize(static_cast<std::size_t>(size));
    world.broadcast_bytes(std::as_writable_bytes(std::span(words)), 0);
    int epoch = 0;
    auto replicas = decode(words, balance::CostModel{}, epoch);
    if (!replicas) {
        return replicas.error();
    }
    auto plan = planner.complete(std::move(*replicas));
    if (plan) {
        plan->epoch = epoch;
    }
    return plan;
}

std::vector<std::string_view> document_bytes(const TrainingDocuments& documents,
                                             const balance::MicroBatch& microbatch) {
    std::vector<std::string_view> bytes;
    bytes.reserve(microbatch.documents.size());
    for (const auto& document : microbatch.documents) {
        bytes.emplace_back(documents.texts.at(document.id));
    }
    return bytes;
}

}  // namespace fulcrum::engine
