#include "core/balance/packing.h"

#include "core/balance/ilp_packing.h"

#include <algorithm>
#include <exception>
#include <iterator>
#include <string>
#include <unordered_map>

namespace fulcrum::balance {
namespace {

Error invalid(std::string message) {
    return Error{ErrorCode::invalid_input, std::move(message)};
}

std::int64_t wlb_max_tokens(const PackingOptions& options) {
    return options.wlb_max_tokens > 0 ? options.wlb_max_tokens : options.capacity;
}

std::vector<std::int64_t> wlb_thresholds(const PackingOptions& options) {
    return options.wlb_thresholds ? *options.wlb_thresholds
                                  : default_wlb_thresholds(options.capacity);
}

Status check_lengths(std::span<const Document> documents, std::int64_t limit,
                     std::string_view limit_name, Balancer balancer) {
    for (const auto& document : documents) {
        if (document.length < 1) {
            return invalid("document " + std::to_string(document.id) + " has length " +
                           std::to_string(document.length) + "; every document needs ≥ 1 token");
        }
        if (document.length > limit) {
            return invalid("document " + std::to_string(document.id) + " has " +
                           std::to_string(document.length) + " tokens but a " +
                           balancer_name(balancer) + " micro-batch holds at most " +
                           std::to_string(limit) + " (" + std::string(limit_name) +
                           "); raise it or truncate the document");
        }
    }
    return {};
}

std::size_t least(std::span<const MicroBatch> microbatches, auto key) {
    std::size_t best = 0;
    for (std::size_t j = 1; j < microbatches.size(); ++j) {
        if (key(microbatches[j]) < key(microbatches[best])) {
            best = j;
        }
    }
    return best;
}

// WLB-LLM packing of one global batch (WLB-LLM §4, steps 1–4). `draining` is the end of
// the epoch: no documents will arrive to fill a queue, so every queue releases all it holds.
PackedBatch pack_wlb(std::span<const Document> documents, const PackingOptions& options,
                     PackingState& state, bool draining) {
    const auto thresholds = wlb_thresholds(options);
    const std::int64_t max_tokens = wlb_max_tokens(options);
    const auto n = static_cast<std::size_t>(options.microbatches);
    if (state.outlier_queues.size() < thresholds.size()) {
        state.outlier_queues.resize(thresholds.size());
    }

    // 1. outliers wait in the queue of their length band; the rest are new this batch.
    std::vector<Document> new_documents;
    new_documents.reserve(documents.size() + n * thresholds.size());
    for (const auto& document : documents) {
        const auto band = std::upper_bound(thresholds.begin(), thresholds.end(), document.length);
        if (band == thresholds.begin()) {
            new_documents.push_back(document);
        } else {
            state.outlier_queues[band - thresholds.begin() - 1].push_back(document);
        }
    }
    // 2. a queue releases only once it holds N: N outliers of one band, placed longest first
    // into the least-loaded micro-batches below, land one per micro-batch instead of stacking.
    for (auto& queue : state.outlier_queues) {
        if (queue.size() >= n || draining) {
            const auto released = std::min(queue.size(), draining ? queue.size() : n);
            new_documents.insert(new_documents.end(), queue.begin(), queue.begin() + released);
            queue.erase(queue.begin(), queue.begin() + released);
        }
    }
    // With a delay bound K, whatever has waited K batches leaves its queue now and goes
    // first, longest first: into empty micro-batches it always fits.
    std::vector<Document> due;
    if (options.wlb_max_delay) {
        const auto overdue = [&](const Document& d) { return d.waited >= *options.wlb_max_delay; };
        for (auto& queue : state.outlier_queues) {
            std::copy_if(queue.begin(), queue.end(), std::back_inserter(due), overdue);
            std::erase_if(queue, overdue);
        }
        std::copy_if(state.left_over.begin(), state.left_over.end(), std::back_inserter(due),
                     overdue);
        std::erase_if(state.left_over, overdue);
        std::stable_sort(due.begin(), due.end(),
                         [](const Document& a, const Document& b) { return a.length > b.length; });
    }
    // 3. longest first; what did not fit last time goes before everything new.
    std::stable_sort(new_documents.begin(), new_documents.end(),
                     [](const Document& a, const Document& b) { return a.length > b.length; });
    std::vector<Document> document_set = std::move(due);
    document_set.insert(document_set.end(), state.left_over.begin(), state.left_over.end());
    state.left_over.clear();
    document_set.insert(document_set.end(), new_documents.begin(), new_documents.end());

    // 4. least predicted work if it fits under S_max, else the shortest if it fits, else wait.
    PackedBatch packed;
    packed.microbatches.resize(n);
    for (const auto& document : document_set) {
        auto target =
            least(packed.microbatches, [](const MicroBatch& m) { return m.predicted_cost; });
        if (packed.microbatches[target].tokens + document.length > max_tokens) {
            target = least(packed.microbatches, [](const MicroBatch& m) { return m.tokens; });
            if (packed.microbatches[target].tokens + document.length > max_tokens) {
                state.left_over.push_back(document);
                continue;
            }
        }
        packed.microbatches[target].add(document, options.cost);
    }
    for (auto& queue : state.outlier_queues) {
        for (auto& document : queue) {
            ++document.waited;
        }
    }
    for (auto& document : state.left_over) {
        ++document.waited;
    }
    return packed;
}

}  // namespace

Result<Balancer> parse_balancer(std::string_view name) {
    if (name == "fixed") {
        return Balancer::fixed;
    }
    if (name == "ilp") {
        return Balancer::ilp;
    }
    if (name == "wlb") {
        return Balancer::wlb;
    }
    return invalid("unknown balancer '" + std::string(name) + "'; expected fixed, ilp or wlb");
}

const char* balancer_name(Balancer balancer) {
    switch (balancer) {
        case Balancer::fixed:
            return "fixed";
        case Balancer::ilp:
            return "ilp";
        case Balancer::wlb:
            return "wlb";
    }
    return "unknown";
}

// Derived with tune_wlb_thresholds (mean token delay ≤ 1 iteration) on 20,000 documents of
// long-tail:context=S, seed 2025, for S ∈ {32K, 64K, 128K} × N ∈ {8, 16, 32, 64}
// (`bench_balance --tune` reruns one cell). The best set differs per cell — the lognormal body
// does not scale with S, so at 128K the best L_1 drops to S/8 — with mean imbalance 1.20–1.37.
// Of seven fixed-fraction sets compared, {S/4, 3S/8, S/2} did best over the twelve: mean 1.42
// (worst 1.69, at 64K × 64), mean delay 0.62–0.98 iterations; {S/4, S/2} averaged 1.54 and
// {3S/16, S/4, 3S/8} 1.45. Without queues the same cells range 2.4–7.7 (mean 4.53). Data not
// shaped like this mix should be tuned on a sample of itself.
std::vector<std::int64_t> default_wlb_thresholds(std::int64_t capacity) {
    return {capacity / 4, 3 * capacity / 8, capacity / 2};
}

Result<std::optional<std::vector<std::int64_t>>> parse_wlb_thresholds(std::string_view text) {
    if (text == "tuned") {
        return std::optional<std::vector<std::int64_t>>{};
    }
    std::vector<std::int64_t> thresholds;
    if (text == "none") {
        return std::optional<std::vector<std::int64_t>>{thresholds};
    }
    const auto bad = [&] {
        return invalid(
            "--wlb-thresholds takes tuned, none or increasing token counts L1,L2,... "
            "(e.g. 256,512), not '" +
            std::string(text) + "'");
    };
    std::size_t at = 0;
    while (at <= text.size()) {
        const std::size_t comma = std::min(text.find(',', at), text.size());
        const std::string item(text.substr(at, comma - at));
        std::size_t used = 0;
        long long value = 0;
        try {
            value = std::stoll(item, &used);
        } catch (const std::exception&) {
            return bad();
        }
        if (used != item.size() || value < 1 ||
            (!thresholds.empty() && value <= thresholds.back())) {
            return bad();
        }
        thresholds.push_back(value);
        at = comma + 1;
    }
    return std::optional<std::vector<std::int64_t>>{thresholds};
}

std::string wlb_thresholds_text(const std::optional<std::vector<std::int64_t>>& thresholds) {
    if (!thresholds) {
        return "tuned";
    }
    if (thresholds->empty()) {
        return "none";
    }
    std::string text;
    for (std::int64_t threshold : *thresholds) {
        text += (text.empty() ? "" : ",") + std::to_string(threshold);
    }
    return text;
}

Status validate(const PackingOptions& options) {
    if (options.microbatches < 1) {
        return invalid("a global batch needs at least 1 micro-batch, got " +
                       std::to_string(options.microbatches));
    }
    if (options.capacity < 1) {
        return invalid("micro-batch capacity must be at least 1 token, got " +
                       std::to_string(options.capacity));
    }
    if (options.cost.linear < 0 || options.cost.attention < 0) {
        return invalid("cost coefficients a (linear) and b (attention) must be ≥ 0");
    }
    if (options.balancer == Balancer::ilp) {
        if (!(options.ilp_time_limit_s > 0)) {
            return invalid("ilp time limit must be positive seconds");
        }
        if (!(options.ilp_relative_gap >= 0)) {
            return invalid("ilp relative gap must be ≥ 0");
        }
        if (options.ilp_max_binaries < options.microbatches) {
            return invalid("ilp_max_binaries (" + std::to_string(options.ilp_max_binaries) +
                           ") must be at least the number of micro-batches (" +
                           std::to_string(options.microbatches) + ")");
        }
    }
    if (options.balancer == Balancer::wlb) {
        if (options.wlb_max_tokens != 0 && options.wlb_max_tokens < options.capacity) {
            return invalid("wlb S_max (" + std::to_string(options.wlb_max_tokens) +
                           ") must be ≥ the fixed capacity S (" + std::to_string(options.capacity) +
                           "), or 0 to use S");
        }
        if (options.wlb_max_delay && *options.wlb_max_delay < 0) {
            return invalid("the wlb delay bound must be ≥ 0 global batches, got " +
                           std::to_string(*options.wlb_max_delay));
        }
        const auto thresholds = wlb_thresholds(options);
        for (std::size_t i = 0; i < thresholds.size(); ++i) {
            if (thresholds[i] < 1 || (i > 0 && thresholds[i] <= thresholds[i - 1])) {
                return invalid(
                    "wlb thresholds must be positive and strictly increasing "
                    "(L_1 < L_2 < ...)");
            }
        }
    }
    return {};
}

std::size_t PackingState::pending_documents() const {
    std::size_t pending = left_over.size();
    for (const auto& queue : outlier_queues) {
        pending += queue.size();
    }
    return pending;
}

Result<PackedBatch> pack_global_batch(std::span<const Document> documents,
                                      const PackingOptions& options, PackingState& state) {
    if (auto valid = validate(options); !valid) {
        return valid.error();
    }
    const bool variable = options.balancer == Balancer::wlb;
    const std::int64_t limit = variable ? wlb_max_tokens(options) : options.capacity;
    if (auto fits =
            check_lengths(documents, limit, variable ? "S_max" : "capacity S", options.balancer);
        !fits) {
        return fits.error();
    }
    switch (options.balancer) {
        case Balancer::fixed: {
            PackedBatch packed;
            packed.microbatches =
                detail::next_fit(documents, options.microbatches, options.capacity, options.cost);
            return packed;
        }
        case Balancer::ilp:
            return detail::pack_ilp(documents, options);
        case Balancer::wlb:
            return pack_wlb(documents, options, state, false);
    }
    return invalid("unknown balancer");
}

Result<std::vector<PackedBatch>> pack_ilp_window(std::span<const std::vector<Document>> batches,
                                                 const PackingOptions& options) {
    if (options.balancer != Balancer::ilp) {
        return invalid("a packing window is for the ilp balancer");
    }
    if (auto valid = validate(options); !valid) {
        return valid.error();
    }
    std::vector<Document> documents;
    for (const auto& batch : batches) {
        documents.insert(documents.end(), batch.begin(), batch.end());
    }
    if (auto fits = check_lengths(documents, options.capacity, "capacity S", options.balancer);
        !fits) {
        return fits.error();
    }
    const int window = static_cast<int>(batches.size());
    PackingOptions joint = options;
    joint.microbatches = options.microbatches * std::max(window, 1);
    PackedBatch packed = detail::pack_ilp(documents, joint);
    auto& microbatches = packed.microbatches;
    std::stable_sort(microbatches.begin(), microbatches.end(),
                     [](const MicroBatch& a, const MicroBatch& b) {
                         return a.attention_work > b.attention_work;
                     });
    std::unordered_map<std::uint64_t, int> arrival;
    for (int b = 0; b < window; ++b) {
        for (const auto& document : batches[static_cast<std::size_t>(b)]) {
            arrival[document.id] = b;
        }
    }
    std::vector<PackedBatch> result(static_cast<std::size_t>(window));
    const std::size_t per_batch = (microbatches.size() + window - 1) / std::max(window, 1);
    for (std::size_t i = 0; i < microbatches.size(); ++i) {
        const int trained = static_cast<int>(i / per_batch);
        for (auto& document : microbatches[i].documents) {
            // A document dealt to an earlier batch than its own was read ahead, not delayed.
            document.waited = std::max(0, trained - arrival.at(document.id));
        }
        result[static_cast<std::size_t>(trained)].microbatches.push_back(
            std::move(microbatches[i]));
    }
    result.front().ilp = packed.ilp;
    return result;
}

Result<std::vector<PackedBatch>> drain(const PackingOptions& options, PackingState& state) {
    if (auto valid = validate(options); !valid) {
        return valid.error();
    }
    std::vector<Document> pending = state.left_over;
    for (const auto& queue : state.outlier_queues) {
        pending.insert(pending.end(), queue.begin(), queue.end());
    }
    if (auto fits = check_lengths(pending, wlb_max_tokens(options), "S_max", Balancer::wlb);
        !fits) {
        return fits.error();
    }
    std::vector<PackedBatch> batches;
    // Each round places at least the first pending document (it fits an empty micro-batch,
    // having passed the length check on arrival), so this ends.
    while (state.pending_documents() > 0) {
        batches.push_back(pack_wlb({}, options, state, true));
    }
    return batches;
}

double imbalance_degree(std::span<const MicroBatch> microbatches) {
    if (microbatches.empty()) {
        return 1.0;
    }
    std::int64_t largest = 0;
    double total = 0;
    for (const auto& microbatch : microbatches) {
        largest = std::max(largest, microbatch.attention_work);
        total += static_cast<double>(microbatch.attention_work);
    }
    if (total <= 0) {
        return 1.0;
    }
    return static_cast<double>(largest) / (total / static_cast<double>(microbatches.size()));
}

std::vector<Document> make_documents(std::span<const std::int64_t> lengths,
                                     std::uint64_t first_id) {
    std::vector<Document> documents;
    documents.reserve(lengths.size());
    for (const auto length : lengths) {
        documents.push_back(Document{first_id++, length});
    }
    return documents;
}

Result<std::vector<std::vector<Document>>> split_into_global_batches(
    std::span<const Document> stream, int microbatches, std::int64_t capacity) {
    if (microbatches < 1 || capacity < 1) {
        return invalid("a global batch needs at least 1 micro-batch of at least 1 token");
    }
    if (auto fits = check_lengths(stream, capacity, "capacity S", Balancer::fixed); !fits) {
        return fits.error();
    }
    std::vector<std::vector<Document>> batches(1);
    int microbatch = 0;
    std::int64_t filled = 0;
    for (const auto& document : stream) {
        if (filled + document.length > capacity) {
            filled = 0;
            if (++microbatch == microbatches) {
                microbatch = 0;
                batches.emplace_back();
            }
        }
        filled += document.length;
        batches.back().push_back(document);
    }
    if (batches.back().empty()) {
        batches.pop_back();
    }
    return batches;
}

}  // namespace fulcrum::balance
