// Helpers shared by the engine's tests: finite differences, error measures, and moving host
// vectors in and out of a backend.
//
// The gradient checks are done twice, with two different tolerances:
//   1. In double. The layer kernels are templates, so the same code runs in double and its
//      analytic gradient is compared with central differences
//          (f(x + h) − f(x − h)) / 2h,   h = 1e-5.
//      Truncation error is h²·f‴/6 ≈ 1e-11 and rounding error ≈ ε₆₄·|f|/h ≈ 1e-16·100/1e-5
//      = 1e-9 for objectives of magnitude ≤ 100, so a correct gradient agrees to ~1e-9
//      absolute; we allow |a − n| ≤ 1e-6·max(|a|, |n|) + 1e-7, a hundred times that, while a
//      wrong formula is off by O(|a|).
//   2. In fp32, through the backend, against the double results: ‖x₃₂ − x₆₄‖ / ‖x₆₄‖. fp32
//      rounds at u = 6e-8 per operation and our reductions run over at most a few hundred
//      terms, so the typical (√K·u) error is ~1e-6; the tolerance is stated where used.
#pragma once

#include <QtTest/qtestassert.h>
#include <QTest>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/util/random.h"
#include "engine/backend/backend.h"

namespace fulcrum::engine::test {

inline std::vector<double> random_values(std::size_t n, std::uint64_t seed, double scale = 1.0,
                                         double offset = 0.0) {
    Random random(seed);
    std::vector<double> v(n);
    for (double& x : v)
        x = offset + scale * random.normal();
    return v;
}

inline std::vector<float> to_float(const std::vector<double>& v) {
    return std::vector<float>(v.begin(), v.end());
}

inline double norm(const std::vector<double>& v) {
    double s = 0;
    for (double x : v)
        s += x * x;
    return std::sqrt(s);
}

// ‖a − b‖ / ‖b‖ (b is the reference).
inline double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
    if (a.size() != b.size())
        return INFINITY;
    double diff = 0, ref = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        diff += (a[i] - b[i]) * (a[i] - b[i]);
        ref += b[i] * b[i];
    }
    return std::sqrt(diff) / std::max(std::sqrt(ref), 1e-30);
}

struct FiniteDifferenceResult {
    double worst_excess = 0.0;  // max over elements of |a − n| / (rtol·max(|a|,|n|) + atol)
    std::size_t worst_index = 0;
    double analytic = 0.0, numeric = 0.0;
    std::size_t checked = 0;
};

// Central differences of `objective` with respect to each element of `x` listed in
// `indices` (all elements when empty), compared with `analytic`.
inline FiniteDifferenceResult check_gradient(std::vector<double>& x,
                                             const std::vector<double>& analytic,
                                             const std::function<double()>& objective,
                                             std::vector<std::size_t> indices = {}, double h = 1e-5,
                                             double rtol = 1e-6, double atol = 1e-7) {
    if (indices.empty()) {
        indices.resize(x.size());
        for (std::size_t i = 0; i < x.size(); ++i)
            indices[i] = i;
    }
    FiniteDifferenceResult result;
    for (std::size_t i : indices) {
        const double saved = x[i];
        x[i] = saved + h;
        const double up = objective();
        x[i] = saved - h;
        const double down = objective();
        x[i] = saved;
        const double numeric = (up - down) / (2 * h);
        const double a = analytic[i];
        const double excess =
            std::abs(a - numeric) / (rtol * std::max(std::abs(a), std::abs(numeric)) + atol);
        if (excess > result.worst_excess || result.checked == 0) {
            result.worst_excess = excess;
            result.worst_index = i;
            result.analytic = a;
            result.numeric = numeric;
        }
        ++result.checked;
    }
    return result;
}

#define FULCRUM_VERIFY_GRADIENT(result, what)                                                   \
    QVERIFY2((result).worst_excess <= 1.0,                                                      \
             qPrintable(QStringLiteral("%1: element %2 analytic %3 numeric %4 (%5x tolerance)") \
                            .arg(what)                                                          \
                            .arg((result).worst_index)                                          \
                            .arg((result).analytic, 0, 'g', 10)                                 \
                            .arg((result).numeric, 0, 'g', 10)                                  \
                            .arg((result).worst_excess, 0, 'g', 3)))

#define FULCRUM_VERIFY_CLOSE(actual, reference, tolerance, what)                               \
    do {                                                                                       \
        const double fulcrum_err = ::fulcrum::engine::test::relative_error(actual, reference); \
        QVERIFY2(fulcrum_err <= (tolerance),                                                   \
                 qPrintable(QStringLiteral("%1: relative error %2 > %3")                       \
                                .arg(what)                                                     \
                                .arg(fulcrum_err, 0, 'g', 3)                                   \
                                .arg(double(tolerance), 0, 'g', 3)));                          \
    } while (false)

// A backend allocation holding a copy of host values.
struct DeviceArray {
    DeviceBuffer buffer;
    Tensor tensor;
};

inline DeviceArray upload_f32(Backend& backend, const std::vector<double>& values,
                              std::initializer_list<std::int64_t> shape) {
    DeviceArray a;
    a.buffer = backend.allocate(values.size() * sizeof(float));
    a.tensor = a.buffer.f32(0, shape);
    QTEST_ASSERT(std::size_t(a.tensor.numel()) == values.size());
    const std::vector<float> f = to_float(values);
    backend.upload(a.tensor, f.data(), kComputeStream);
    return a;
}

inline DeviceArray upload_i32(Backend& backend, const std::vector<std::int32_t>& values) {
    DeviceArray a;
    a.buffer = backend.allocate(values.size() * sizeof(std::int32_t));
    a.tensor = a.buffer.i32(0, {std::int64_t(values.size())});
    backend.upload(a.tensor, values.data(), kComputeStream);
    return a;
}

inline DeviceArray zeros_f32(Backend& backend, std::initializer_list<std::int64_t> shape) {
    std::int64_t n = 1;
    for (std::int64_t d : shape)
        n *= d;
    return upload_f32(backend, std::vector<double>(std::size_t(n), 0.0), shape);
}

inline std::vector<double> download_f64(Backend& backend, const Tensor& t) {
    std::vector<float> f(std::size_t(t.numel()));
    backend.download(f.data(), t, kComputeStream);
    return std::vector<double>(f.begin(), f.end());
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
        s += a[i] * b[i];
    return s;
}

}  // namespace fulcrum::engine::test
