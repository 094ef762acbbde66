// Softmax cross-entropy of the LM head on the GPU. Math: engine/model/lm_head.h.
//     P_t = softmax(z_t),  ℓ_t = logsumexp(z_t) − z_t[y_t]   (0 when y_t = −1)
//     dz_t += s · (P_t − onehot(y_t))                          (skipped when y_t = −1)
// Forward: one block per row — block max, block Σ exp, then the row is overwritten with P
// (probs may alias logits, so the target logit is read before the barrier that precedes the
// writes). Backward: elementwise over [N, V].
#pragma once

#include "engine/backend/cuda/common.cuh"

namespace fulcrum::engine::cuda {

// ---- kernels ------------------------------------------------------------------------------

__global__ void crossentropy_forward_kernel(float* losses, float* probs, const float* logits,
                                            const int* targets, int vocab) {
    const long long row = blockIdx.x;
    const float* z = logits + row * vocab;
    float* p = probs + row * vocab;
    float max_logit = -INFINITY;
    for (int c = threadIdx.x; c < vocab; c += blockDim.x)
        max_logit = fmaxf(max_logit, z[c]);
    max_logit = block_max(max_logit);
    float sum = 0.0f;
    for (int c = threadIdx.x; c < vocab; c += blockDim.x)
        sum += expf(z[c] - max_logit);
    sum = block_sum(sum);
    const float logsumexp = max_logit + logf(sum);
    if (threadIdx.x == 0) {
        const int y = targets[row];
        losses[row] = y < 0 ? 0.0f : logsumexp - z[y];
    }
    __syncthreads();  // the target logit is read before any thread overwrites the row
    for (int c = threadIdx.x; c < vocab; c += blockDim.x)
        p[c] = expf(z[c] - logsumexp);
}

__global__ void crossentropy_backward_kernel(float* dlogits, const float* probs, const int* targets,
                                             float loss_scale, long long rows, int vocab) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= rows * vocab)
        return;
    const long long row = i / vocab;
    const int y = targets[row];
    if (y < 0)
        return;
    float d = dlogits[i] + loss_scale * probs[i];
    if (int(i % vocab) == y)
        d -= loss_scale;
    dlogits[i] = d;
}

// ---- launchers ----------------------------------------------------------------------------

inline void crossentropy_forward(float* losses, float* probs, const float* logits,
                                 const int* targets, long long rows, int vocab,
                                 cudaStream_t stream) {
    NvtxRange range("crossentropy_forward");
    if (rows == 0)
        return;
    crossentropy_forward_kernel<<<unsigned(rows), 256, 0, stream>>>(losses, probs, logits, targets,
                                                                    vocab);
    FULCRUM_CUDA_CHECK_LAUNCH();
}

inline void crossentropy_backward(float* dlogits, const float* probs, const int* targets,
                                  float loss_scale, long long rows, int vocab,
                                  cudaStream_t stream) {
    NvtxRange range("crossentropy_backward");
    const long long n = rows * vocab;
    if (n == 0)
        return;
    crossentropy_backward_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(dlogits, probs, targets,
                                                                       loss_scale, rows, vocab);
    FULCRUM_CUDA_CHECK_LAUNCH();
}

}  // namespace fulcrum::engine::cuda
