// Linear layer: the GEMMs of the QKV and output projections, the MLP and the LM head.
//
// Math (PyTorch's nn.Linear convention, weight stored [out_features, in_features]):
//     out = inp · Wᵀ + b
// Backward:
//     dinp += dout · W          dW += doutᵀ · inp          db += Σ_rows dout
// Each of the three is optional. Zero Bubble's split backward (Qi et al., ICLR'24, §2) runs
// them apart: the input-gradient pass B computes dinp alone (it needs W, not inp), and the
// weight-gradient pass W later computes dW and db from the saved dout and inp.
//
// Memory layout: inp [N, C] and dout [N, OC] may have strided rows (lda = row stride);
// W [OC, C], b [OC], out/dinp contiguous. The bias is optional (nullptr): the tied LM head
// has none.
//
// Host GEMMs go to OpenBLAS (cblas_sgemm for float; cblas_dgemm when the tests run the same
// layer in double). A CUDA backend maps the same three products onto cuBLAS.
#pragma once

#include <cblas.h>

#include <cstdint>
#include <type_traits>

namespace fulcrum::engine::kernels {

// C[M,N] = alpha · op(A) · op(B) + beta · C, row-major, in float or double.
template <typename T>
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
          const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c,
          std::int64_t ldc) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
    const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
    const CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
    if constexpr (std::is_same_v<T, float>) {
        cblas_sgemm(CblasRowMajor, ta, tb, blasint(m), blasint(n), blasint(k), alpha, a,
                    blasint(lda), b, blasint(ldb), beta, c, blasint(ldc));
    } else {
        cblas_dgemm(CblasRowMajor, ta, tb, blasint(m), blasint(n), blasint(k), alpha, a,
                    blasint(lda), b, blasint(ldb), beta, c, blasint(ldc));
    }
}

// out [rows, out_ch] = inp [rows, in_ch] (row stride inp_stride) · weightᵀ + bias
template <typename T>
void matmul_forward(T* out, const T* inp, std::int64_t inp_stride, const T* weight, const T* bias,
                    std::int64_t rows, int in_ch, int out_ch) {
    if (rows == 0)
        return;
    gemm<T>(false, true, rows, out_ch, in_ch, T(1), inp, inp_stride, weight, in_ch, T(0), out,
            out_ch);
    if (bias != nullptr) {
        for (std::int64_t r = 0; r < rows; ++r) {
            T* o = out + r * out_ch;
            for (int c = 0; c < out_ch; ++c)
                o[c] += bias[c];
        }
    }
}

// Accumulates into dinp, dweight and dbias, each nullptr when not wanted (dbias also when the
// layer has no bias); inp is read only for dweight.
template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, std::int64_t dout_stride,
                     const T* inp, std::int64_t inp_stride, const T* weight, std::int64_t rows,
                     int in_ch, int out_ch) {
    if (rows == 0)
        return;
    if (dinp != nullptr) {
        gemm<T>(false, false, rows, in_ch, out_ch, T(1), dout, dout_stride, weight, in_ch, T(1),
                dinp, in_ch);
    }
    if (dweight != nullptr) {
        gemm<T>(true, false, out_ch, in_ch, rows, T(1), dout, dout_stride, inp, inp_stride, T(1),
                dweight, in_ch);
    }
    if (dbias != nullptr) {
        for (std::int64_t r = 0; r < rows; ++r) {
            const T* g = dout + r * dout_stride;
            for (int c = 0; c < out_ch; ++c)
                dbias[c] += g[c];
        }
    }
}

}  // namespace fulcrum::engine::kernels
