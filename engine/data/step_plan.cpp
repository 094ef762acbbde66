#include "engine/data/step_plan.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/util/random.h"
#include "engine/comm/communicator.h"

namespace fulcrum::engine {

std::int64_t TrainingDocuments::total_tokens() const {
    std::int64_t total = 0;
    for (const auto& text : texts) {
        total += static_cast<std::int64_t>(text.size());
    }
    return total;
}

std::vector<std::int64_t> document_lengths(const TrainingDocuments& documents) {
    std::vector<std::int64_t> lengths;
    lengths.reserve(documents.texts.size());
    for (const auto& text : documents.texts) {
        lengths.push_back(static_cast<std::int64_t>(text.size()));
    }
    return lengths;
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
                result.texts.push_back(
                    text.substr(begin, static_cast<std::size_t>(options.max_length)));
                cut += begin > 0;
            }
        }
        result.description =
            "text from " + directory + ": " + std::to_string(result.texts.size()) + " documents" +
            (cut > 0 ? " (" + std::to_string(cut) + " pieces cut at the context length)" : "");
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
            const std::size_t take = std::min(
                text.size() - offset, static_cast<std::size_t>((*lengths)[i]) - document.size());
            document.append(text, offset, take);
            offset = 0;
        }
        result.texts.push_back(std::move(document));
    }
    result.description = std::to_string(result.texts.size()) + " synthetic documents, lengths " +
                         balance::length_spec(*distribution) + ", bytes from " + directory;
    return result;
}

namespace {

// The packing of a step as int64 words: status, epoch, whether it is the run's last step,
// replicas, then per replica its micro-batch count and per micro-batch its document count
// and (id, length, waited) triples. On failure: status 1 followed by the message's bytes,
// one per word.
std::vector<std::int64_t> encode(
    const Result<std::vector<std::vector<balance::MicroBatch>>>& packed, int epoch, bool last) {
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
    words.push_back(last ? 1 : 0);
    words.push_back(static_cast<std::int64_t>(packed->size()));
    for (const auto& replica : *packed) {
        words.push_back(static_cast<std::int64_t>(replica.size()));
        for (const auto& microbatch : replica) {
            words.push_back(static_cast<std::int64_t>(microbatch.documents.size()));
            for (const auto& document : microbatch.documents) {
                words.push_back(static_cast<std::int64_t>(document.id));
                words.push_back(document.length);
                words.push_back(document.waited);
            }
        }
    }
    return words;
}

Result<std::vector<std::vector<balance::MicroBatch>>> decode(const std::vector<std::int64_t>& words,
                                                             const balance::PackingCost& cost,
                                                             int& epoch, bool& last) {
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
    last = next() != 0;
    std::vector<std::vector<balance::MicroBatch>> replicas(static_cast<std::size_t>(next()));
    for (auto& replica : replicas) {
        replica.resize(static_cast<std::size_t>(next()));
        for (auto& microbatch : replica) {
            const auto documents = next();
            for (std::int64_t d = 0; d < documents; ++d) {
                balance::Document document;
                document.id = static_cast<std::uint64_t>(next());
                document.length = next();
                document.waited = static_cast<std::int32_t>(next());
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
        words = encode(packed, planner.epoch(), planner.finished());
    }
    std::int64_t size = static_cast<std::int64_t>(words.size());
    world.broadcast_bytes(std::as_writable_bytes(std::span(&size, 1)), 0);
    words.resize(static_cast<std::size_t>(size));
    world.broadcast_bytes(std::as_writable_bytes(std::span(words)), 0);
    int epoch = 0;
    bool last = false;
    auto replicas = decode(words, planner.packing().cost, epoch, last);
    if (!replicas) {
        return replicas.error();
    }
    auto plan = planner.complete(std::move(*replicas));
    if (plan) {
        plan->epoch = epoch;
        plan->last = last;
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
