// Context parallelism: one CP rank's share of a micro-batch, and the K/V exchange of
// attention (WLB-LLM §4: all-gather K/V forward, reduce-scatter dK/dV backward).
//
// Math. A CP rank owns the query rows of its TokenRanges (balance/cp_shard.h). For a query at
// position p of document D, causal attention needs k_j, v_j for j = 0 … p of D, which other
// ranks own. So in each block, after the local QKV projection:
//     forward   KV = AllGather_cp(kv_local)        every rank's rows, then reordered so that
//                                                  each document is contiguous (document order)
//               y  = Attention(q_local, KV)        spans: local query rows, prefix = position
//     backward  dKV = ∂L/∂KV from the LOCAL queries only   (attention_backward, document order)
//               dkv_local = ReduceScatter_cp(dKV)  Σ over ranks of what their queries put on
//                                                  this rank's K/V rows
// The reduce-scatter is the only sum across CP ranks inside the model. Everything else a rank
// computes — loss, parameter gradients — is its part of a sum over the micro-batch's tokens:
// the trainer all-reduces the parameter gradients over CP (with DP) and adds the losses.
//
// Memory convention: kv_local [T_local, W] and the document-ordered KV [T_total, W] are
// contiguous row-major (W = 2·C/tp: the K columns, then the V columns). The exchange goes
// through a staging buffer [T_total, W] in rank-major order — what the collectives read and
// write — and is reordered with one row-block copy per RowRun.
#pragma once

#include <span>
#include <string_view>

#include "core/balance/cp_shard.h"
#include "core/balance/packing.h"
#include "core/util/result.h"
#include "engine/backend/backend.h"
#include "engine/comm/communicator.h"
#include "engine/model/parallel_context.h"

namespace fulcrum::engine {

// CP rank cp_rank's share of one micro-batch. document_bytes[i] is the text of documents[i]
// (the micro-batch's documents in packed order; lengths must agree); `plan` says which token
// ranges each CP rank holds, naming documents by id (balance::shard_microbatch). The plan
// must cover every token of every document exactly once. invalid_input otherwise, and when
// cp_rank gets no token at all (a micro-batch shorter than the CP degree).
Result<ContextShard> make_context_shard(std::span<const std::string_view> document_bytes,
                                        std::span<const balance::Document> documents,
                                        const balance::CpPlan& plan, int cp_rank);

// Forward exchange: `local` [rows_per_rank[me], W] → `gathered` [total, W] in document order
// (every rank's rows). `staging` [total, W] is scratch. cp null means a group of one.
void gather_context_rows(Backend& backend, Communicator* cp, const ContextExchange& exchange,
                         Tensor local, Tensor staging, Tensor gathered);

// Backward exchange: `gathered_grad` [total, W] in document order → `local` [rows, W] (over-
// written) = the sum over CP ranks of their gathered_grad rows that this rank owns.
void reduce_scatter_context_rows(Backend& backend, Communicator* cp,
                                 const ContextExchange& exchange, Tensor gathered_grad,
                                 Tensor staging, Tensor local);

// ---- DeepSpeed-Ulysses (Jacobs et al. 2023, §3) --------------------------------------------
//
// The other way to split attention over CP: instead of gathering K/V, each rank trades its
// token shard of Q, K and V for a HEAD shard of the whole micro-batch — an all-to-all — runs
// attention for its H/P heads over every token (balanced by construction: the causal work of
// each head is the same on every rank), and trades the output back:
//     forward   [Q|K|V]_heads = AllToAll_cp(q, k, v local)   [T_total, 3·H/P], document order
//               o_heads = Attention(Q_heads, K_heads, V_heads)   spans: ContextExchange::
//               o_local = AllToAll_cp(o_heads)                   document_spans; [T_local, H]
//     backward  do_heads = AllToAll_cp(do_local); attention backward on the head shard;
//               dq, dk, dv local = AllToAll_cp(d[Q|K|V]_heads)
// No sum across ranks anywhere: every element of the attention is computed once, by the rank
// that holds its head. H is this TP rank's columns (heads/tp · head size), so P must divide
// heads/tp. The all-to-all moves (P−1)/P of the rank's rows each way, whatever the sharding.
//
// Layouts. The local tensors are k column blocks (views) [T_local, H]; block i's columns
// [j·H/P, (j+1)·H/P) are rank j's heads. The head shard is k blocks (views) [T_total, H/P],
// block i holding local block i's columns of this rank's heads, in document order: the model
// lays them out as Q [T_total, H/P], then K|V [T_total, 2H/P], each contiguous, as chunked
// attention stores them. `staging` (heads_staging_elements floats, contiguous) holds the
// rank-major rows the collective reads and writes.

// The part of `exchange` that carries the document-ordered rows [first, first + rows): FPDT's
// all-to-all of one chunk (Yao et al. 2024, §3.2), which trades only the local rows that land
// in the chunk. A rank's local rows keep document order, so those of one window are one run of
// them, starting at local_first[rank] (0 where the rank has none); exchange.runs are the
// clipped runs, rank-major among the window's rows and relative to `first` in document order
// (document_spans stay empty). invalid_input if the window leaves the micro-batch.
struct ExchangeWindow {
    ContextExchange exchange;
    std::vector<std::int64_t> local_first;  // index = CP rank
};
Result<ExchangeWindow> exchange_window(const ContextExchange& exchange, std::int64_t first,
                                       std::int64_t rows);

// Floats of staging an exchange of `width` head-shard columns needs: P·T_local rows to send
// (or receive) and T_total rows in rank-major order.
std::int64_t heads_staging_elements(const ContextExchange& exchange, int cp_rank,
                                    std::int64_t width);

// Token shard → head shard (the forward's Q, K, V; the backward's ∂L/∂o). cp null means a
// group of one. The range `cp all-to-all` (with the bytes sent) covers the wait for the
// collective, where the rank spends the time it did not hide.
void scatter_heads(Backend& backend, Communicator* cp, const ContextExchange& exchange,
                   std::span<const Tensor> local, Tensor staging, std::span<const Tensor> heads);
// Head shard → token shard (the forward's o; the backward's dQ, dK, dV): overwrites `local`.
void gather_heads(Backend& backend, Communicator* cp, const ContextExchange& exchange,
                  std::span<const Tensor> heads, Tensor staging, std::span<const Tensor> local);

// The same in two halves, so that the all-to-all overlaps the work issued between them (FPDT's
// chunks, Yao et al. 2024, §3.2: chunk i + 1 traded while chunk i's attention computes):
// start_* packs the sending half of `staging` and starts Communicator::start_all_to_all;
// finish_heads_exchange waits for it and unpacks into `destination` (the head-shard blocks
// after start_scatter_heads, the local blocks after start_gather_heads), which need not exist
// at the start. The staging must be left alone in between; what start read may be reused at
// once (the packing is ordered before any later work on the compute stream). Every started
// exchange is finished exactly once.
// The shape of one exchange of k blocks of w head-shard columns, and its staging's halves.
struct HeadsExchange {
    int size = 1, rank = 0;
    std::int64_t local_rows = 0, total = 0, width = 0, block = 0;  // width k·w, block w
    std::size_t blocks = 0;                                        // k
    Tensor token_major;  // [P·T_local, k·w]: rank j's rows to send (or received from j)
    Tensor rank_major;   // [T_total, k·w]: every rank's rows, rank after rank
};
struct PendingHeadsExchange {
    bool started = false, to_heads = true;
    Communicator* cp = nullptr;
    std::int64_t ticket = Communicator::kNoTicket;
    std::int64_t bytes = 0;  // sent
    HeadsExchange x;
    std::vector<RowRun> runs;
};
PendingHeadsExchange start_scatter_heads(Backend& backend, Communicator* cp,
                                         const ContextExchange& exchange,
                                         std::span<const Tensor> local, Tensor staging);
PendingHeadsExchange start_gather_heads(Backend& backend, Communicator* cp,
                                        const ContextExchange& exchange,
                                        std::span<const Tensor> heads, Tensor staging);
void finish_heads_exchange(Backend& backend, PendingHeadsExchange& pending,
                           std::span<const Tensor> destination);

}  // namespace fulcrum::engine
