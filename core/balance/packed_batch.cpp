#include "core/balance/packed_batch.h"

#include <algorithm>

namespace fulcrum::balance {

void MicroBatch::add(const Document& document, const PackingCost& cost) {
    documents.push_back(document);
    tokens += document.length;
    attention_work += document.length * document.length;
    predicted_cost = cost.predict(tokens, attention_work);
}

PackingCost PackingCost::from_model(int layers, int hidden, int vocab) {
    const double h = hidden;
    const double linear = layers * 72.0 * h * h + 6.0 * h * vocab;
    return PackingCost{1.0, layers * 6.0 * h / linear};
}

PackingCost PackingCost::from_fit(double per_token_ns, double per_pair_ns) {
    if (per_token_ns <= 0) {
        // Only attention measured: predict in its units, one token of linear work ≈ 0.
        return PackingCost{0.0, 1.0};
    }
    return PackingCost{1.0, 0.5 * std::max(per_pair_ns, 0.0) / per_token_ns};
}

}  // namespace fulcrum::balance
