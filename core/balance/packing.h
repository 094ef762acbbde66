// Packing the documents of a global batch into micro-batches.
//
// One API for the training engine, which places data with it, and for the simulator, which
// predicts step time with it: both call pack_global_batch once per global batch with the
// state carried from the previous one, and drain() once at the end of the epoch. The state
// is a plain value, so a simulator can copy it to try alternatives.
//
// Work model (WLB-LLM §3; docs/sources.md, "Workload balancing"): under a causal mask a packed
// micro-batch's attention work grows with Σd² and everything else with Σd, so two micro-batches of
// equal length can differ several-fold in time when one holds a long document.
#pragma once

#include "core/util/result.h"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fulcrum::balance {

struct Document {
    std::uint64_t id = 0;
    std::int64_t length = 0;  // tokens
    // Global batches it was held back after the one it arrived in: by wlb's queues and
    // left-overs, or by an ilp window that trains it in a later batch. 0 for fixed.
    std::int32_t waited = 0;
};

// Predicted time of a micro-batch as a·Σd + b·Σd², in units of one token's linear work.
// Per layer, training spends 72·S·h² FLOPs on linear work and 6h·Σd² on causal attention
// (the FLOP count of Narayanan et al., "Efficient Large-Scale Language Model Training on GPU
// Clusters Using Megatron-LM", SC'21), so b/a = 1/(12h): a document's attention equals its linear
// work at d = 12h. The default is a 7B-class model, h = 4096; from_model and from_fit give
// the run's own.
struct PackingCost {
    double linear = 1.0;
    double attention = 1.0 / (12.0 * 4096.0);

    double predict(std::int64_t tokens, std::int64_t attention_work) const {
        return linear * static_cast<double>(tokens) +
               attention * static_cast<double>(attention_work);
    }

    // A GPT's training FLOPs: L·72h² + 6hV per token (the LM head's 6hV included), L·6h per
    // unit of Σd². Heads do not change the FLOPs.
    static PackingCost from_model(int layers, int hidden, int vocab);
    // A fitted time model: per token, and per causal query·key pair (a document of d tokens
    // has d(d+1)/2 ≈ d²/2 of them), summed over the passes of a step. Both ≥ 0, one > 0.
    static PackingCost from_fit(double per_token_ns, double per_pair_ns);
};

struct MicroBatch {
    std::vector<Document> documents;
    std::int64_t tokens = 0;          // Σd
    std::int64_t attention_work = 0;  // Σd²
    double predicted_cost = 0;        // PackingCost::predict(tokens, attention_work)

    void add(const Document& document, const PackingCost& cost);
};

enum class Balancer {
    fixed,  // arrival order, next-fit into micro-batches of `capacity` tokens
    ilp,    // attention-aware min-max packing solved with CBC
    wlb,    // WLB-LLM variable-length packing with outlier delay queues
};

// "fixed", "ilp" or "wlb".
Result<Balancer> parse_balancer(std::string_view name);
const char* balancer_name(Balancer balancer);

struct PackingOptions {
    Balancer balancer = Balancer::fixed;
    int microbatches = 32;          // N: micro-batches per global batch on one DP rank
    std::int64_t capacity = 32768;  // S: tokens of one fixed-length micro-batch (the context)
    PackingCost cost;

    // ilp: CBC stops at whichever comes first; the greedy incumbent is returned if CBC finds
    // nothing better, so the limit bounds latency without risking quality.
    double ilp_time_limit_s = 2.0;
    double ilp_relative_gap = 0.01;
    int ilp_max_binaries = 2048;  // x_ij columns in the model; see ilp_packing.cpp

    // wlb: S_max, the memory cap of one variable-length micro-batch; 0 means `capacity`.
    std::int64_t wlb_max_tokens = 0;
    // Outlier thresholds L_1 < L_2 < ... in tokens. nullopt: default_wlb_thresholds(capacity);
    // an empty list: no delay queues (plain variable-length greedy packing).
    std::optional<std::vector<std::int64_t>> wlb_thresholds;
    // K: a document held back K global batches goes first into the next one, ahead of
    // everything else, whatever its queue holds. Only when the overdue documents alone do
    // not fit under N·S_max does one of them wait longer. nullopt: unbounded (the paper's
    // packer).
    std::optional<int> wlb_max_delay;
};

// --wlb-thresholds: "tuned" (nullopt: tuned on the run's first epoch), "none" (no queues),
// or L1,L2,... strictly increasing token counts.
Result<std::optional<std::vector<std::int64_t>>> parse_wlb_thresholds(std::string_view text);
// "tuned", "none" or "L1,L2,...".
std::string wlb_thresholds_text(const std::optional<std::vector<std::int64_t>>& thresholds);

// Thresholds for `capacity`, from replaying tune_wlb_thresholds (wlb_tuning.h) on the
// long-tail mix; the derivation is in packing.cpp.
std::vector<std::int64_t> default_wlb_thresholds(std::int64_t capacity);

Status validate(const PackingOptions& options);

// What wlb carries from one global batch to the next; fixed and ilp carry nothing. Every
// document still held at the end of a batch has its `waited` raised by one.
struct PackingState {
    std::vector<std::deque<Document>> outlier_queues;  // queue i: L_i ≤ d < L_{i+1}, FIFO
    std::vector<Document> left_over;                   // did not fit under S_max last time

    std::size_t pending_documents() const;
};

// How the ILP balancer reached its answer, for reports and benchmarks.
struct IlpSolve {
    enum class Outcome {
        not_run,            // not the ilp balancer, or an empty batch
        greedy_within_gap,  // the greedy incumbent was already within the gap of the bound
        no_time_left,       // the greedy passes used up the time limit; greedy kept
        solver_improved,    // CBC's solution is better than the greedy one and was used
        solver_no_better,   // CBC ran but its solution was not better; greedy kept
    };
    Outcome outcome = Outcome::not_run;
    int model_documents = 0;       // documents given binary columns
    double seconds = 0;            // whole ilp balancer, greedy and CBC included
    std::int64_t lower_bound = 0;  // max(d_max², ⌈Σd²/M⌉), on max Σd²
};

struct PackedBatch {
    std::vector<MicroBatch> microbatches;
    IlpSolve ilp;
};

// Packs one global batch. fixed and ilp return max(N, what next-fit needs) micro-batches, so
// both see the same count and the same mean; wlb returns exactly N and may keep documents in
// `state` for later batches. A document longer than a micro-batch can hold (S, or S_max for
// wlb) is an invalid_input error and leaves `state` unchanged.
Result<PackedBatch> pack_global_batch(std::span<const Document> documents,
                                      const PackingOptions& options, PackingState& state);

// ilp over a window of W global batches (WLB-LLM §3.3 "ILP over 2/4 batches"): the documents
// of W consecutive batches are packed together into W·N micro-batches, then dealt back as W
// batches of N in order of Σd², heaviest first, so that each batch holds micro-batches of
// similar attention work. One outlier document no longer sets its own batch's maximum
// against N−1 light micro-batches, which bounds what any single-batch packer can reach.
// Documents wait at most W−1 iterations. W = batches.size(); the balancer must be ilp.
Result<std::vector<PackedBatch>> pack_ilp_window(std::span<const std::vector<Document>> batches,
                                                 const PackingOptions& options);

// End of epoch: packs everything still delayed into as many further global batches as it
// takes (each of N micro-batches), so no document is ever dropped.
Result<std::vector<PackedBatch>> drain(const PackingOptions& options, PackingState& state);

// max / mean of per-micro-batch Σd² (WLB-LLM §3.3); 1 is perfect balance. 1 for no work.
double imbalance_degree(std::span<const MicroBatch> microbatches);

// Documents with ids first_id, first_id+1, ... in the order of `lengths`.
std::vector<Document> make_documents(std::span<const std::int64_t> lengths,
                                     std::uint64_t first_id = 0);

// Cuts an arrival-ordered stream into global batches the way a fixed-length data loader
// does: next-fit into N micro-batches of `capacity` tokens; the document that does not fit
// the N-th starts the next batch. So every balancer gets the same documents per batch, and N
// micro-batches of S tokens always suffice for them.
Result<std::vector<std::vector<Document>>> split_into_global_batches(
    std::span<const Document> stream, int microbatches, std::int64_t capacity);

}  // namespace fulcrum::balance
