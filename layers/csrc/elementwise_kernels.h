// Channels-last elementwise kernels for converted models: one multi-threaded pass where MLX's CPU backend makes
// several single-threaded ones.
#pragma once

#include <cmath>
#include <mutex>
#include <vector>

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

// out[r, c] = act(x[r, c] * alpha[c] + beta[c] + res[r, c]), act none or ReLU: a residual block's last batch norm, its
// skip connection and the ReLU after it (ResNet's bottleneck ends, MobileNetV2's inverted residuals without one) in
// one pass instead of three (each of which reads and writes the whole map). torch stores the batch norm's output and
// the sum in T, so 16-bit values are rounded to T after each, as there; float32 and float64 round nothing extra.
template <typename T>
void channel_affine_residual(const T* x, const T* res, int64_t rows, int64_t C, const float* alpha, const float* beta,
                             bool relu, T* out) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  parallel_for(rows, 2 * C, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * C;
      const T* rr = res + r * C;
      T* yr = out + r * C;
      for (int64_t c = 0; c < C; ++c) {
        A v = static_cast<A>(xr[c]) * static_cast<A>(alpha[c]) + static_cast<A>(beta[c]);
        if constexpr (!std::is_same_v<T, A>) v = static_cast<A>(static_cast<T>(v));
        v = v + static_cast<A>(rr[c]);
        if constexpr (!std::is_same_v<T, A>) v = static_cast<A>(static_cast<T>(v));
        yr[c] = static_cast<T>(relu && v < A(0) ? A(0) : v);
      }
    }
  });
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

// torch's relu backward (threshold_backward on the output): dx = y <= 0 ? 0 : g, so a NaN output passes the gradient.
template <typename T>
void relu_grad(const T* g, const T* y, int64_t n, T* dx) {
  constexpr int64_t kChunk = 1 << 14;
  parallel_for((n + kChunk - 1) / kChunk, kChunk, [&](int64_t begin, int64_t end) {
    // unconditional loads into locals and restrict pointers, so the select vectorizes (a conditional load of g and
    // pointers reloaded through the captures made this a scalar, branchy loop: 25x slower)
    const T* __restrict gp = g;
    const T* __restrict yp = y;
    T* __restrict dp = dx;
    const int64_t lo = begin * kChunk, hi = std::min(n, end * kChunk);
    for (int64_t i = lo; i < hi; ++i) {
      const T gv = gp[i], yv = yp[i];
      dp[i] = yv <= T(0) ? T(0) : gv;
    }
  });
}

// torch's hardtanh (clamp to [lo, hi], NaN stays NaN), computed in float32 (double for float64), rounded once.
template <typename T>
void hardtanh(const T* x, int64_t n, double lo, double hi, T* out) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const A a = static_cast<A>(lo), b = static_cast<A>(hi);
  constexpr int64_t kChunk = 1 << 14;
  parallel_for((n + kChunk - 1) / kChunk, kChunk, [&](int64_t begin, int64_t end) {
    const A la = a, lb = b;  // locals: the stores through `out` could alias the captured bounds
    const T* __restrict xp = x;
    T* __restrict op = out;
    const int64_t first = begin * kChunk, last = std::min(n, end * kChunk);
    for (int64_t i = first; i < last; ++i) {
      const A v = static_cast<A>(xp[i]);
      const A low = v < la ? la : v;                   // NaN fails both tests and stays
      op[i] = static_cast<T>(low > lb ? lb : low);
    }
  });
}

// torch's hardtanh_backward: dx = (lo < x < hi) ? g : 0 (on the input; a NaN input gets 0, as in torch).
template <typename T>
void hardtanh_grad(const T* g, const T* x, int64_t n, double lo, double hi, T* dx) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const A a = static_cast<A>(lo), b = static_cast<A>(hi);
  constexpr int64_t kChunk = 1 << 14;
  parallel_for((n + kChunk - 1) / kChunk, kChunk, [&](int64_t begin, int64_t end) {
    const A la = a, lb = b;
    const T* __restrict gp = g;
    const T* __restrict xp = x;
    T* __restrict dp = dx;
    const int64_t first = begin * kChunk, last = std::min(n, end * kChunk);
    for (int64_t i = first; i < last; ++i) {
      const A v = static_cast<A>(xp[i]);
      const T gv = gp[i];
      dp[i] = (v > la && v < lb) ? gv : T(0);
    }
  });
}

// The backward of channel_affine (relu off) in one pass over row-major (rows, C) x and g: dx = g * alpha (rounded
// to T once), dalpha[c] = sum_r g * x, dbeta[c] = sum_r g (float32 results). Each thread's rows sum in blocks of
// 64 rows in A, then into its double partials, merged under a lock (a handful of merges of C values).
template <typename T>
void channel_affine_grad(const T* x, const T* g, int64_t rows, int64_t C, const float* alpha, T* dx, float* dalpha,
                         float* dbeta) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  std::vector<double> total_a(static_cast<size_t>(C), 0.0), total_b(static_cast<size_t>(C), 0.0);
  std::mutex merge;
  parallel_for(rows, 3 * C, [&](int64_t begin, int64_t end) {
    std::vector<double> part_a(static_cast<size_t>(C), 0.0), part_b(static_cast<size_t>(C), 0.0);
    std::vector<A> blk_a(static_cast<size_t>(C)), blk_b(static_cast<size_t>(C));
    constexpr int64_t kBlock = 64;
    for (int64_t r0 = begin; r0 < end; r0 += kBlock) {
      std::fill(blk_a.begin(), blk_a.end(), A(0));
      std::fill(blk_b.begin(), blk_b.end(), A(0));
      const int64_t r1 = std::min(end, r0 + kBlock);
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = x + r * C;
        const T* gr = g + r * C;
        T* dr = dx + r * C;
        for (int64_t c = 0; c < C; ++c) {
          const A gv = static_cast<A>(gr[c]);
          dr[c] = static_cast<T>(gv * static_cast<A>(alpha[c]));
          blk_a[c] += gv * static_cast<A>(xr[c]);
          blk_b[c] += gv;
        }
      }
      for (int64_t c = 0; c < C; ++c) {
        part_a[c] += blk_a[c];
        part_b[c] += blk_b[c];
      }
    }
    std::lock_guard<std::mutex> lock(merge);
    for (int64_t c = 0; c < C; ++c) {
      total_a[c] += part_a[c];
      total_b[c] += part_b[c];
    }
  });
  for (int64_t c = 0; c < C; ++c) {
    dalpha[c] = static_cast<float>(total_a[c]);
    dbeta[c] = static_cast<float>(total_b[c]);
  }
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
