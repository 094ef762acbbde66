// LM head and cross-entropy loss.
//
// Math. The head is tied to the token embedding (Press & Wolf 2017, as GPT-2): for the final
// LayerNorm output x_t,
//     z_t = x_t · wteᵀ                            [V] logits, no bias   (matmul.h)
//     P_t = softmax(z_t)
//     ℓ_t = −log P_t[y_t] = logsumexp(z_t) − z_t[y_t]
// Backward with a loss scale s (the 1/N of a mean, see below):
//     dz_t += s · (P_t − onehot(y_t))
// and through the GEMM: dx_t += dz_t · wte, dwte += dzᵀ · x, which ADDS to the gradient the
// embedding lookup leaves in dwte (gradient kernels accumulate; backend.h).
//
// Targets. y_t is the next byte of the same document; the last token of every document has
// no target (y_t = −1): ℓ_t = 0 and dz_t = 0, and it is not counted. A document of d tokens
// therefore contributes d − 1 target tokens. TokenBatch builds targets this way.
//
// Loss normalisation. The loss of a training step is the mean of ℓ over ALL target tokens of
// ALL its micro-batches: L = (1/N_step) Σ ℓ_t. Each micro-batch's backward is run with
// s = 1/N_step (not 1/N_microbatch), so accumulating micro-batch gradients gives exactly the
// gradient of one batch made of all of them, whatever the split. Data-parallel ranks will use
// the global N_step of the step the same way.
//
// Memory layout: logits, probs, dlogits [N, V]; targets int32 [N]; losses [N]. `probs` may be
// the same memory as `logits` (the forward pass overwrites logits with probabilities).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace fulcrum::engine::kernels {

inline constexpr std::int32_t kNoTarget = -1;

template <typename T>
void crossentropy_forward(T* losses, T* probs, const T* logits, const std::int32_t* targets,
                          std::int64_t rows, int vocab) {
    for (std::int64_t r = 0; r < rows; ++r) {
        const T* z = logits + r * vocab;
        T* p = probs + r * vocab;
        T max_logit = z[0];
        for (int c = 1; c < vocab; ++c)
            max_logit = std::max(max_logit, z[c]);
        T sum = 0;
        for (int c = 0; c < vocab; ++c)
            sum += std::exp(z[c] - max_logit);
        const T logsumexp = max_logit + std::log(sum);
        const std::int32_t y = targets[r];
        // Read the target logit before p (which may alias z) is overwritten.
        losses[r] = y == kNoTarget ? T(0) : logsumexp - z[y];
        for (int c = 0; c < vocab; ++c)
            p[c] = std::exp(z[c] - logsumexp);
    }
}

// Accumulates into dlogits.
template <typename T>
void crossentropy_backward(T* dlogits, const T* probs, const std::int32_t* targets, T loss_scale,
                           std::int64_t rows, int vocab) {
    for (std::int64_t r = 0; r < rows; ++r) {
        const std::int32_t y = targets[r];
        if (y == kNoTarget)
            continue;
        const T* p = probs + r * vocab;
        T* dz = dlogits + r * vocab;
        for (int c = 0; c < vocab; ++c)
            dz[c] += loss_scale * p[c];
        dz[y] -= loss_scale;
    }
}

}  // namespace fulcrum::engine::kernels
