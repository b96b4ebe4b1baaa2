// Channels-last elementwise kernels for converted models: one multi-threaded pass where MLX's CPU backend makes
// several single-threaded ones.
#pragma once

#include <cmath>

#include "activation_kernels.h"  // ActMath, dispatch_act
#include "parallel.h"
#include "windows.h"

namespace porter {

// out[r, c] = x[r, c] * alpha[c] + beta[c] (then max(., 0) with `relu`; NaN stays NaN as in torch's relu), for a
// row-major (rows, C) x: eval-mode batch norm with torch's per-channel alpha/beta, computed in float32 (double for
// float64) and rounded once.
// The activation fused after the affine (eval batch norm followed by an activation): none, ReLU, ReLU6 (hardtanh
// 0..6), or an activation kind (activation_kernels.h: SiLU, hardswish, ...). torch computes it from the stored
// batch-norm output, so a 16-bit value is rounded to T before the activation.
struct AffineAct {
  enum Clamp : int { none = 0, relu, relu6, kind };
  Clamp clamp = none;
  Act act = Act::exp;  // when clamp == kind
  bool operator==(const AffineAct& o) const { return clamp == o.clamp && (clamp != kind || act == o.act); }
};

template <typename T, typename F>
void channel_affine_loop(const T* x, int64_t rows, int64_t C, const float* alpha, const float* beta, T* out, F f) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  parallel_for(rows, C, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * C;
      T* yr = out + r * C;
      for (int64_t c = 0; c < C; ++c) {
        A v = static_cast<A>(xr[c]) * static_cast<A>(alpha[c]) + static_cast<A>(beta[c]);
        if constexpr (!std::is_same_v<T, A>) v = static_cast<A>(static_cast<T>(v));
        yr[c] = static_cast<T>(f(v));
      }
    }
  });
}

template <typename T>
void channel_affine(const T* x, int64_t rows, int64_t C, const float* alpha, const float* beta, AffineAct act, T* out) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  switch (act.clamp) {
    case AffineAct::none: channel_affine_loop(x, rows, C, alpha, beta, out, [](A v) { return v; }); break;
    case AffineAct::relu:
      channel_affine_loop(x, rows, C, alpha, beta, out, [](A v) { return v < A(0) ? A(0) : v; });
      break;
    case AffineAct::relu6:  // torch's hardtanh: min(max(v, 0), 6), NaN stays NaN
      channel_affine_loop(x, rows, C, alpha, beta, out, [](A v) {
        A r = v < A(0) ? A(0) : v;
        return r > A(6) ? A(6) : r;
      });
      break;
    case AffineAct::kind:
      dispatch_act(act.act, [&](auto k) {
        channel_affine_loop(x, rows, C, alpha, beta, out, [](A v) { return ActMath<decltype(k)::value>::f(v); });
      });
      break;
  }
}

// out = max(x, 0) elementwise over n contiguous elements (NaN stays NaN, as torch's relu).
template <typename T>
void relu(const T* x, int64_t n, T* out) {
  constexpr int64_t kChunk = 1 << 14;
  parallel_for((n + kChunk - 1) / kChunk, kChunk, [&](int64_t begin, int64_t end) {
    const int64_t lo = begin * kChunk, hi = std::min(n, end * kChunk);
    for (int64_t i = lo; i < hi; ++i) out[i] = x[i] < T(0) ? T(0) : x[i];
  });
}

// LP pooling's last stage, torch's `(sign(a) * relu(|a|) * scale) ** inv_p` over n contiguous elements, which is
// `(a * scale) ** inv_p` (a == 0 gives 0 ** inv_p): the product rounded in T, then pow with torch's shortcuts for the
// common exponents and std::pow otherwise (float32 / float64).
template <typename T>
void lp_root(const T* a, int64_t n, T scale, T inv_p, T* out) {
  constexpr int64_t kChunk = 1 << 13;
  parallel_for((n + kChunk - 1) / kChunk, kChunk * 8, [&](int64_t begin, int64_t end) {
    const int64_t lo = begin * kChunk, hi = std::min(n, end * kChunk);
    if (inv_p == T(0.5)) {
      for (int64_t i = lo; i < hi; ++i) out[i] = std::sqrt(a[i] * scale);
    } else if (inv_p == T(1)) {
      for (int64_t i = lo; i < hi; ++i) out[i] = a[i] * scale;
    } else if (inv_p == T(-1)) {
      for (int64_t i = lo; i < hi; ++i) out[i] = T(1) / (a[i] * scale);
    } else if (inv_p == T(-0.5)) {
      for (int64_t i = lo; i < hi; ++i) out[i] = T(1) / std::sqrt(a[i] * scale);
    } else {
      for (int64_t i = lo; i < hi; ++i) out[i] = std::pow(a[i] * scale, inv_p);
    }
  });
}

}  // namespace porter
