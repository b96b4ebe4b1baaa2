// L2 normalisation over the last axis (torch's F.normalize(x, p=2, dim=-1, eps): x / max(||x||_2, eps)) and its
// gradient, for MLX's CPU backend: one pass a row where the ops it is made of took four graph nodes (a norm, a clamp,
// a broadcast, a divide; Swin V2's cosine attention normalises q and k in every block).
//
// Layout: row-major (rows, C), each row normalised. float32, float16 and bfloat16 (16-bit rows widened once into a
// per-thread float row, half_rows.h). Each step rounds where torch's ops round, so a 16-bit result is torch's:
// the sum of squares in float lanes combined in double (norm_kernels.h's lane_sums_rows), the norm rounded to T, the
// clamp of that to eps rounded to T (float16 rounds eps = 1e-12 to 0: a zero row is 0 / 0 = NaN there, as torch's),
// then x / c in float rounded once. A NaN norm stays NaN through the clamp (torch's clamp_min propagates it).
//
// The gradient is the one torch's autograd builds for those ops, in float: with c = max(n, eps) and s = sum(g x),
// dx = g / c + x k, k = -s / (c^2 n) where n >= eps (the clamp passes the gradient there, torch's `self >= min`, eps
// rounded to T) and n != 0; at n = 0 linalg_vector_norm's backward is 0 for a finite incoming gradient, NaN otherwise.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "half_rows.h"
#include "norm_kernels.h"
#include "parallel.h"

namespace porter {

// T-rounded norm and clamp of one float row: n = ||v|| and c = max(n, eps), both as torch stores them in T.
template <typename T>
inline void l2_norm_and_clamp(const float* v, int64_t C, float eps, float& n, float& c) {
  const float* rows[1] = {v};
  double sumsq;
  lane_sums_rows<1>(rows, C, [](int, auto a) { return a * a; }, &sumsq);
  n = static_cast<float>(std::sqrt(sumsq));
  float e = eps;
  if constexpr (!std::is_same_v<T, float>) {
    n = static_cast<float>(static_cast<T>(n));
  }
  float clamped = n != n ? n : (n < e ? e : n);
  if constexpr (!std::is_same_v<T, float>) {
    clamped = static_cast<float>(static_cast<T>(clamped));
  }
  c = clamped;
}

template <typename T>
void l2_normalize_lastdim(const T* x, int64_t rows, int64_t C, float eps, T* y) {
  parallel_for(rows, C * 4, [&](int64_t begin, int64_t end) {
    std::vector<float> buf(std::is_same_v<T, float> ? 0 : C);
    for (int64_t r = begin; r < end; ++r) {
      const float* v;
      if constexpr (std::is_same_v<T, float>) {
        v = x + r * C;
      } else {
        widen_row(x + r * C, C, buf.data());
        v = buf.data();
      }
      float n, c;
      l2_norm_and_clamp<T>(v, C, eps, n, c);
      if constexpr (std::is_same_v<T, float>) {
        float* yr = y + r * C;
        for (int64_t k = 0; k < C; ++k) yr[k] = v[k] / c;
      } else {
        float* o = buf.data();
        for (int64_t k = 0; k < C; ++k) o[k] = v[k] / c;
        narrow_row(o, C, y + r * C);
      }
    }
  });
}

template <typename T>
void l2_normalize_grad_lastdim(const T* x, const T* g, int64_t rows, int64_t C, float eps, T* dx) {
  const float eps_t = static_cast<float>(static_cast<T>(eps));  // the clamp compares in T
  parallel_for(rows, C * 6, [&](int64_t begin, int64_t end) {
    std::vector<float> xb(std::is_same_v<T, float> ? 0 : C), gb(std::is_same_v<T, float> ? 0 : C);
    for (int64_t r = begin; r < end; ++r) {
      const float *v, *gv;
      if constexpr (std::is_same_v<T, float>) {
        v = x + r * C;
        gv = g + r * C;
      } else {
        widen_row(x + r * C, C, xb.data());
        widen_row(g + r * C, C, gb.data());
        v = xb.data();
        gv = gb.data();
      }
      float n, c;
      l2_norm_and_clamp<T>(v, C, eps, n, c);
      const double s = lane_sum<float>(C, [&](int64_t k) { return gv[k] * v[k]; });
      // the gradient reaching the norm: the divide's -sum(g x) / c^2, passed by the clamp where n >= eps (eps as
      // T: float16's 0 passes a zero row's 0 / 0 = NaN, as torch's); the norm's backward is 0 at n = 0 for a finite
      // gradient only (x (g / n) with the 0 / 0 masked: a NaN or inf gradient there gives NaN)
      const float gn = n >= eps_t ? static_cast<float>(-s / (static_cast<double>(c) * c)) : 0.0f;
      const float k_ = n != 0.0f ? gn / n : (std::isfinite(gn) ? 0.0f : std::numeric_limits<float>::quiet_NaN());
      if constexpr (std::is_same_v<T, float>) {
        float* d = dx + r * C;
        for (int64_t k = 0; k < C; ++k) d[k] = gv[k] / c + v[k] * k_;
      } else {
        float* o = xb.data();  // each element read before it is written
        for (int64_t k = 0; k < C; ++k) o[k] = gv[k] / c + v[k] * k_;
        narrow_row(o, C, dx + r * C);
      }
    }
  });
}

}  // namespace porter
