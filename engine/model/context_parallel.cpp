#include "engine/model/context_parallel.h"

#include "core/trace/annotations.h"
#include "engine/instrument/annotations.h"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "engine/model/lm_head.h"

namespace fulcrum::engine {

namespace {

Error invalid(std::string message) {
    return Error{ErrorCode::invalid_input, "CP shard: " + std::move(message)};
}

std::span<float> floats_of(const Tensor& t) {
    FULCRUM_CHECK(t.dtype() == DType::f32 && t.contiguous(), "exchange of a strided tensor");
    return {static_cast<float*>(t.raw()), std::size_t(t.numel())};
}

// Checks the shapes of an exchange: `local` is this rank's rows, the others all rows.
void check_exchange(Communicator* cp, const ContextExchange& exchange, const Tensor& local,
                    const Tensor& staging, const Tensor& gathered) {
    const int size = cp == nullptr ? 1 : cp->size();
    const int rank = cp == nullptr ? 0 : cp->rank();
    FULCRUM_CHECK(int(exchange.rows_per_rank.size()) == size,
                  "the context shard was made for another CP degree");
    const std::int64_t total = exchange.total_rows();
    const std::int64_t width = local.cols();
    FULCRUM_CHECK(local.rows() == exchange.rows_per_rank[std::size_t(rank)],
                  "local rows differ from the exchange's count for this rank");
    FULCRUM_CHECK(staging.rows() == total && staging.cols() == width, "staging [total, W]");
    FULCRUM_CHECK(gathered.rows() == total && gathered.cols() == width, "gathered [total, W]");
}

std::vector<int> element_counts(const ContextExchange& exchange, std::int64_t width) {
    std::vector<int> counts;
    for (int rows : exchange.rows_per_rank)
        counts.push_back(int(rows * width));
    return counts;
}

}  // namespace

Result<ContextShard> make_context_shard(std::span<const std::string_view> document_bytes,
                                        std::span<const balance::Document> documents,
                                        const balance::CpPlan& plan, int cp_rank) {
    if (document_bytes.size() != documents.size()) {
        return invalid(std::to_string(document_bytes.size()) + " document texts for " +
                       std::to_string(documents.size()) + " documents");
    }
    const int cp_size = int(plan.ranks.size());
    if (cp_rank < 0 || cp_rank >= cp_size) {
        return invalid("CP rank " + std::to_string(cp_rank) + " outside a plan for " +
                       std::to_string(cp_size) + " ranks");
    }
    // Where each document starts in document order, and which index an id names.
    std::unordered_map<std::uint64_t, std::size_t> index_of;
    std::vector<std::int64_t> start(documents.size());
    std::int64_t total = 0;
    for (std::size_t i = 0; i < documents.size(); ++i) {
        if (documents[i].length != std::int64_t(document_bytes[i].size())) {
            return invalid("document " + std::to_string(documents[i].id) + " has length " +
                           std::to_string(documents[i].length) + " but " +
                           std::to_string(document_bytes[i].size()) + " bytes of text");
        }
        if (!index_of.emplace(documents[i].id, i).second) {
            return invalid("document id " + std::to_string(documents[i].id) + " appears twice");
        }
        start[i] = total;
        total += documents[i].length;
    }

    ContextShard shard;
    ContextExchange& exchange = shard.exchange;
    std::vector<std::uint8_t> covered(std::size_t(total), 0);
    std::int64_t gathered_row = 0;
    for (int rank = 0; rank < cp_size; ++rank) {
        std::int64_t rows = 0;
        for (const balance::TokenRange& range : plan.ranks[std::size_t(rank)].ranges) {
            const auto found = index_of.find(range.document_id);
            if (found == index_of.end()) {
                return invalid("the plan names document " + std::to_string(range.document_id) +
                               ", which is not in the micro-batch");
            }
            const std::size_t doc = found->second;
            if (range.begin < 0 || range.begin >= range.end || range.end > documents[doc].length) {
                return invalid("range [" + std::to_string(range.begin) + ", " +
                               std::to_string(range.end) + ") of document " +
                               std::to_string(range.document_id) + " (length " +
                               std::to_string(documents[doc].length) + ")");
            }
            const std::int64_t count = range.end - range.begin;
            const std::int64_t document_row = start[doc] + range.begin;
            for (std::int64_t t = document_row; t < document_row + count; ++t) {
                if (covered[std::size_t(t)]++ != 0) {
                    return invalid("token " + std::to_string(t - start[doc]) + " of document " +
                                   std::to_string(range.document_id) +
                                   " is in two ranges of the plan");
                }
            }
            // Ranges that continue each other in both orders (a contiguous or zigzag piece
            // spanning a document boundary) make one run: fewer, longer copies.
            RowRun* last = exchange.runs.empty() ? nullptr : &exchange.runs.back();
            if (last != nullptr && last->gathered_row + last->count == gathered_row &&
                last->document_row + last->count == document_row) {
                last->count += count;
            } else {
                exchange.runs.push_back({gathered_row, document_row, count});
            }

            if (rank == cp_rank) {
                const std::string_view text = document_bytes[doc];
                const std::int64_t length = documents[doc].length;
                shard.spans.push_back({std::int32_t(shard.tokens.size()), std::int32_t(start[doc]),
                                       std::int32_t(range.begin), std::int32_t(count)});
                for (std::int64_t p = range.begin; p < range.end; ++p) {
                    shard.tokens.push_back(static_cast<unsigned char>(text[std::size_t(p)]));
                    shard.targets.push_back(
                        p + 1 < length ? static_cast<unsigned char>(text[std::size_t(p + 1)])
                                       : kernels::kNoTarget);
                    shard.positions.push_back(std::int32_t(p));
                }
            }
            rows += count;
            gathered_row += count;
        }
        exchange.rows_per_rank.push_back(int(rows));
    }
    for (std::size_t i = 0; i < documents.size(); ++i) {
        exchange.document_spans.push_back(
            {std::int32_t(start[i]), std::int32_t(start[i]), 0, std::int32_t(documents[i].length)});
    }
    for (std::size_t i = 0; i < documents.size(); ++i) {
        for (std::int64_t p = 0; p < documents[i].length; ++p) {
            if (covered[std::size_t(start[i] + p)] == 0) {
                return invalid("token " + std::to_string(p) + " of document " +
                               std::to_string(documents[i].id) + " is in no range of the plan");
            }
        }
    }
    if (shard.tokens.empty()) {
        return invalid("CP rank " + std::to_string(cp_rank) + " gets no token of this " +
                       std::to_string(total) + "-token micro-batch; every rank needs at least one");
    }
    return shard;
}

void gather_context_rows(Backend& backend, Communicator* cp, const ContextExchange& exchange,
                         Tensor local, Tensor staging, Tensor gathered) {
    check_exchange(cp, exchange, local, staging, gathered);
    if (cp == nullptr || cp->size() == 1) {
        backend.copy(staging, local);
    } else {
        instrument::Range range(
            range_name::kCpAllGather, Category::communication,
            instrument::with_bytes(staging.numel() * std::int64_t(sizeof(float))));
        cp->all_gather(floats_of(local), floats_of(staging),
                       element_counts(exchange, local.cols()));
    }
    for (const RowRun& run : exchange.runs) {
        backend.copy(gathered.slice(run.document_row, run.count),
                     staging.slice(run.gathered_row, run.count));
    }
}

void reduce_scatter_context_rows(Backend& backend, Communicator* cp,
                                 const ContextExchange& exchange, Tensor gathered_grad,
                                 Tensor staging, Tensor local) {
    check_exchange(cp, exchange, local, staging, gathered_grad);
    for (const RowRun& run : exchange.runs) {
        backend.copy(staging.slice(run.gathered_row, run.count),
                     gathered_grad.slice(run.document_row, run.count));
    }
    if (cp == nullptr || cp->size() == 1) {
        backend.copy(local, staging);
    } else {
        instrument::Range range(
            range_name::kCpReduceScatter, Category::communication,
            instrument::with_bytes(staging.numel() * std::int64_t(sizeof(float))));
        cp->reduce_scatter_sum(floats_of(staging), floats_of(local),
                               element_counts(exchange, local.cols()));
    }
}

// ---- DeepSpeed-Ulysses ------------------------------------------------------------------------

namespace {

// The exchange of k blocks of w head-shard columns through `staging`.
HeadsExchange heads_exchange(Communicator* cp, const ContextExchange& exchange, std::size_t k,
                             std::int64_t w, const Tensor& staging) {
    HeadsExchange x;
    x.size = cp == nullptr ? 1 : cp->size();
    x.rank = cp == nullptr ? 0 : cp->rank();
    FULCRUM_CHECK(int(exchange.rows_per_rank.size()) == x.size,
                  "the context shard was made for another CP degree");
    FULCRUM_CHECK(k > 0, "an exchange of no tensors");
    x.local_rows = exchange.rows_per_rank[std::size_t(x.rank)];
    x.total = exchange.total_rows();
    x.blocks = k;
    x.block = w;
    x.width = w * std::int64_t(k);
    const std::int64_t send = x.size * x.local_rows * x.width;
    FULCRUM_CHECK(staging.contiguous() && staging.numel() >= send + x.total * x.width,
                  "Ulysses staging too small");
    const Tensor flat = staging.reshaped({staging.numel()});
    x.token_major = flat.slice(0, send).reshaped({x.size * x.local_rows, x.width});
    x.rank_major = flat.slice(send, x.total * x.width).reshaped({x.total, x.width});
    return x;
}

void check_local(const HeadsExchange& x, std::span<const Tensor> local) {
    FULCRUM_CHECK(local.size() == x.blocks, "one local block per head-shard block");
    for (const Tensor& t : local) {
        FULCRUM_CHECK(t.rows() == x.local_rows && t.cols() == x.block * x.size,
                      "local blocks [T_local, H] with H = P · the head shard's block");
    }
}

void check_heads(const HeadsExchange& x, std::span<const Tensor> heads) {
    FULCRUM_CHECK(heads.size() == x.blocks, "one head-shard block per local block");
    for (const Tensor& t : heads) {
        FULCRUM_CHECK(t.rows() == x.total && t.cols() == x.block, "head-shard blocks [total, H/P]");
    }
}

// The sending half of the staging filled from the local blocks (to the heads) or from the
// head shard's (to the rows).
HeadsExchange pack_for_heads(Backend& backend, Communicator* cp, const ContextExchange& exchange,
                             std::span<const Tensor> local, const Tensor& staging) {
    FULCRUM_CHECK(!local.empty(), "an exchange of no tensors");
    const int size = cp == nullptr ? 1 : cp->size();
    const HeadsExchange x =
        heads_exchange(cp, exchange, local.size(), local.front().cols() / size, staging);
    check_local(x, local);
    for (int j = 0; j < x.size; ++j) {
        const Tensor to_rank = x.token_major.slice(j * x.local_rows, x.local_rows);
        for (std::size_t i = 0; i < local.size(); ++i) {
            backend.copy(to_rank.columns(std::int64_t(i) * x.block, x.block),
                         local[i].columns(j * x.block, x.block));
        }
    }
    return x;
}

HeadsExchange pack_for_rows(Backend& backend, Communicator* cp, const ContextExchange& exchange,
                            std::span<const Tensor> heads, const Tensor& staging) {
    FULCRUM_CHECK(!heads.empty(), "an exchange of no tensors");
    const HeadsExchange x =
        heads_exchange(cp, exchange, heads.size(), heads.front().cols(), staging);
    check_heads(x, heads);
    for (const RowRun& run : exchange.runs) {
        const Tensor rows = x.rank_major.slice(run.gathered_row, run.count);
        for (std::size_t i = 0; i < heads.size(); ++i) {
            backend.copy(rows.columns(std::int64_t(i) * x.block, x.block),
                         heads[i].slice(run.document_row, run.count));
        }
    }
    return x;
}

// The all-to-all between the two staging halves — token-major out, rank-major in (to the
// heads) or the reverse — once the sending half is packed: started (`overlap`) or run to its
// end. The range `cp all-to-all` covers what the rank waits: the blocking call here, or the
// started one's wait in finish_heads_exchange.
PendingHeadsExchange start_exchange(Communicator* cp, const ContextExchange& exchange,
                                    const HeadsExchange& x, bool to_heads, Backend& backend,
                                    bool overlap) {
    PendingHeadsExchange pending{true,
                                 to_heads,
                                 cp,
                                 Communicator::kNoTicket,
                                 x.token_major.numel() * std::int64_t(sizeof(float)),
                                 x,
                                 exchange.runs};
    if (x.size == 1) {
        to_heads ? backend.copy(x.rank_major, x.token_major)
                 : backend.copy(x.token_major, x.rank_major);
        return pending;
    }
    const std::vector<int> mine(std::size_t(x.size), int(x.local_rows * x.width));
    const std::vector<int> theirs = element_counts(exchange, x.width);
    const std::span<const float> in = floats_of(to_heads ? x.token_major : x.rank_major);
    const std::span<float> out = floats_of(to_heads ? x.rank_major : x.token_major);
    const std::vector<int>& sends = to_heads ? mine : theirs;
    const std::vector<int>& receives = to_heads ? theirs : mine;
    if (overlap) {
        pending.ticket = cp->start_all_to_all(in, sends, out, receives);
    } else {
        instrument::Range range(range_name::kCpAllToAll, Category::communication,
                                instrument::with_bytes(pending.bytes));
        cp->all_to_all(in, sends, out, receives);
    }
    return pending;
}

}  // namespace

Result<ExchangeWindow> exchange_window(const ContextExchange& exchange, std::int64_t first,
                                       std::int64_t rows) {
    const std::size_t size = exchange.rows_per_rank.size();
    if (first < 0 || rows < 0 || first + rows > exchange.total_rows()) {
        return invalid("rows [" + std::to_string(first) + ", " + std::to_string(first + rows) +
                       ") outside a micro-batch of " + std::to_string(exchange.total_rows()));
    }
    // Where each rank's rows start in the rank-major order of the whole exchange.
    std::vector<std::int64_t> rank_start(size + 1, 0);
    for (std::size_t r = 0; r < size; ++r)
        rank_start[r + 1] = rank_start[r] + exchange.rows_per_rank[r];
    struct Piece {
        std::size_t rank;
        std::int64_t local_row, document_row, count;
    };
    std::vector<Piece> pieces;
    std::vector<std::int64_t> low(size, -1), high(size, 0), count(size, 0);
    const std::int64_t end = first + rows;
    for (const RowRun& run : exchange.runs) {
        std::int64_t a = std::max(run.document_row, first);
        const std::int64_t b = std::min(run.document_row + run.count, end);
        // A run may cross from one rank's rows into the next one's: cut it there.
        while (a < b) {
            const std::int64_t gathered = run.gathered_row + (a - run.document_row);
            const std::size_t r =
                std::size_t(std::upper_bound(rank_start.begin(), rank_start.end(), gathered) -
                            rank_start.begin() - 1);
            const std::int64_t n = std::min(b, a + rank_start[r + 1] - gathered) - a;
            const std::int64_t local = gathered - rank_start[r];
            low[r] = low[r] < 0 ? local : std::min(low[r], local);
            high[r] = std::max(high[r], local + n);
            count[r] += n;
            pieces.push_back({r, local, a - first, n});
            a += n;
        }
    }
    ExchangeWindow window;
    window.local_first.assign(size, 0);
    std::vector<std::int64_t> window_start(size + 1, 0);
    for (std::size_t r = 0; r < size; ++r) {
        if (count[r] > 0) {
            FULCRUM_CHECK(high[r] - low[r] == count[r],
                          "a CP rank's local rows out of document order");
            window.local_first[r] = low[r];
        }
        window.exchange.rows_per_rank.push_back(int(count[r]));
        window_start[r + 1] = window_start[r] + count[r];
    }
    for (const Piece& piece : pieces) {
        window.exchange.runs.push_back(
            {window_start[piece.rank] + piece.local_row - window.local_first[piece.rank],
             piece.document_row, piece.count});
    }
    std::sort(window.exchange.runs.begin(), window.exchange.runs.end(),
              [](const RowRun& a, const RowRun& b) { return a.gathered_row < b.gathered_row; });
    return window;
}

std::int64_t heads_staging_elements(const ContextExchange& exchange, int cp_rank,
                                    std::int64_t width) {
    const std::int64_t size = std::int64_t(exchange.rows_per_rank.size());
    return (size * exchange.rows_per_rank[std::size_t(cp_rank)] + exchange.total_rows()) * width;
}

PendingHeadsExchange start_scatter_heads(Backend& backend, Communicator* cp,
                                         const ContextExchange& exchange,
                                         std::span<const Tensor> local, Tensor staging) {
    const HeadsExchange x = pack_for_heads(backend, cp, exchange, local, staging);
    return start_exchange(cp, exchange, x, true, backend, true);
}

PendingHeadsExchange start_gather_heads(Backend& backend, Communicator* cp,
                                        const ContextExchange& exchange,
                                        std::span<const Tensor> heads, Tensor staging) {
    const HeadsExchange x = pack_for_rows(backend, cp, exchange, heads, staging);
    return start_exchange(cp, exchange, x, false, backend, true);
}

void finish_heads_exchange(Backend& backend, PendingHeadsExchange& pending,
                           std::span<const Tensor> destination) {
    FULCRUM_CHECK(pending.started, "an all-to-all finished twice, or never started");
    pending.started = false;
    if (pending.ticket != Communicator::kNoTicket) {
        instrument::Range range(range_name::kCpAllToAll, Category::communication,
                                instrument::with_bytes(pending.bytes));
        pending.cp->wait_all_to_all(pending.ticket);
    }
    const HeadsExchange& x = pending.x;
    const std::int64_t w = x.block;
    if (pending.to_heads) {
        check_heads(x, destination);
        for (const RowRun& run : pending.runs) {
            const Tensor rows = x.rank_major.slice(run.gathered_row, run.count);
            for (std::size_t i = 0; i < destination.size(); ++i) {
                backend.copy(destination[i].slice(run.document_row, run.count),
                             rows.columns(std::int64_t(i) * w, w));
            }
        }
        return;
    }
    check_local(x, destination);
    for (int j = 0; j < x.size; ++j) {
        const Tensor from_rank = x.token_major.slice(j * x.local_rows, x.local_rows);
        for (std::size_t i = 0; i < destination.size(); ++i) {
            backend.copy(destination[i].columns(j * w, w),
                         from_rank.columns(std::int64_t(i) * w, w));
        }
    }
}

void scatter_heads(Backend& backend, Communicator* cp, const ContextExchange& exchange,
                   std::span<const Tensor> local, Tensor staging, std::span<const Tensor> heads) {
    const HeadsExchange x = pack_for_heads(backend, cp, exchange, local, staging);
    check_heads(x, heads);
    PendingHeadsExchange done = start_exchange(cp, exchange, x, true, backend, false);
    finish_heads_exchange(backend, done, heads);
}

void gather_heads(Backend& backend, Communicator* cp, const ContextExchange& exchange,
                  std::span<const Tensor> heads, Tensor staging, std::span<const Tensor> local) {
    const HeadsExchange x = pack_for_rows(backend, cp, exchange, heads, staging);
    check_local(x, local);
    PendingHeadsExchange done = start_exchange(cp, exchange, x, false, backend, false);
    finish_heads_exchange(backend, done, local);
}

}  // namespace fulcrum::engine
