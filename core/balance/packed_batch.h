// What packing works with and returns (packing.h): documents, micro-batches and the work
// model that prices them, the balancer and its options, and a packed global batch with how
// the ILP balancer reached it. Apart from packing.h so that the balancers' pieces
// (ilp_packing.h) need only these and not the dispatch over them.
#pragma once

#include <cstdint>
#include <optional>
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

}  // namespace fulcrum::balance
