// Token + learned position embedding.
//
// Math: for token t with id x_t and position p_t inside its document,
//     out[t] = wte[x_t] + wpe[p_t]
// Backward: dwte[x_t] += dout[t], dwpe[p_t] += dout[t] (a scatter-add: ids repeat).
//
// Positions restart at 0 at the start of every document of a packed sequence (TokenBatch
// computes them), so a document's representation does not depend on what was packed before
// it — the same property attention.h keeps for the attention pattern.
//
// Memory layout: tokens, positions int32 [T]; out, dout [T, C]; wte [V, C] (V = 256 bytes,
// shared with the LM head, see lm_head.h); wpe [max_context, C]. All contiguous row-major.
#pragma once

#include <cstdint>

namespace fulcrum::engine::kernels {

template <typename T>
void embedding_forward(T* out, const std::int32_t* tokens, const std::int32_t* positions,
                       const T* wte, const T* wpe, std::int64_t n_tokens, int channels) {
    for (std::int64_t t = 0; t < n_tokens; ++t) {
        const T* token_row = wte + std::int64_t(tokens[t]) * channels;
        const T* position_row = wpe + std::int64_t(positions[t]) * channels;
        T* o = out + t * channels;
        for (int c = 0; c < channels; ++c)
            o[c] = token_row[c] + position_row[c];
    }
}

// Accumulates into dwte and dwpe.
template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const std::int32_t* tokens,
                        const std::int32_t* positions, std::int64_t n_tokens, int channels) {
    for (std::int64_t t = 0; t < n_tokens; ++t) {
        T* dtoken = dwte + std::int64_t(tokens[t]) * channels;
        T* dposition = dwpe + std::int64_t(positions[t]) * channels;
        const T* g = dout + t * channels;
        for (int c = 0; c < channels; ++c) {
            dtoken[c] += g[c];
            dposition[c] += g[c];
        }
    }
}

}  // namespace fulcrum::engine::kernels
