// Softmax over the last axis (attention's rows of keys) and its gradient, for MLX's CPU backend, written in vectors
// of the build CPU's register width (GCC/Clang vector types, simd.h: AVX2 here, AVX-512, SSE or NEON elsewhere).
//
// Layout: row-major (rows, len), each row normalised. activation_kernels.h's softmax over any axis left this case to
// the compiler's vectorizer, which kept every pass in 16 scalar partial lanes and a scalar tail, recomputed the
// exponentials of 16-bit rows, and cost 1.7-1.9x torch's time on Swin's 49-key rows (3.1-3.7x for float16).
// Here a row is three passes of whole vectors (max, e^{x - max} stored and summed, scale) with a padded last vector
// instead of a scalar tail, in float (16-bit rows are widened once into a per-thread row buffer and rounded once
// on the way out, as torch's CPU kernel does; half_rows.h: F16C for float16). e^s is exp_poly.h's Cephes arithmetic
// lane-wise (~1 ulp, as torch's Sleef exp). A row whose maximum is not finite (a NaN anywhere, a +inf, or every entry -inf) is NaN throughout, as
// torch's x - max gives; otherwise x - max is in [-inf, 0] and needs no NaN handling.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "activation_kernels.h"
#include "half_rows.h"
#include "parallel.h"
#include "simd.h"

namespace porter {

using SmVec = float __attribute__((vector_size(kVectorBytes)));
using SmInt = int32_t __attribute__((vector_size(kVectorBytes)));
constexpr int64_t kSmLanes = kVectorBytes / 4;

inline SmVec sm_splat(float v) { return SmVec{} + v; }

inline SmVec sm_load(const float* p) {
  SmVec v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

inline void sm_store(float* p, SmVec v) { __builtin_memcpy(p, &v, sizeof v); }

// The first n < kSmLanes floats of p in a vector, the other lanes `fill`.
inline SmVec sm_load_part(const float* p, int64_t n, float fill) {
  float lanes[kSmLanes];
  for (int64_t k = 0; k < kSmLanes; ++k) lanes[k] = k < n ? p[k] : fill;
  return sm_load(lanes);
}

inline void sm_store_part(float* p, int64_t n, SmVec v) {
  float lanes[kSmLanes];
  sm_store(lanes, v);
  for (int64_t k = 0; k < n; ++k) p[k] = lanes[k];
}

inline float sm_total(SmVec v) {
  float lanes[kSmLanes];
  sm_store(lanes, v);
  for (int64_t w = kSmLanes / 2; w >= 1; w /= 2) {
    for (int64_t k = 0; k < w; ++k) lanes[k] += lanes[k + w];
  }
  return lanes[0];
}

inline float sm_max(SmVec v) {
  float lanes[kSmLanes];
  sm_store(lanes, v);
  float m = lanes[0];
  for (int64_t k = 1; k < kSmLanes; ++k) m = lanes[k] > m ? lanes[k] : m;
  return m;
}

// e^s lane-wise for s in [-inf, 0] (never NaN): exp_poly.h's Cephes arithmetic (exp_nonpos_f's result).
inline SmVec sm_exp_nonpos(SmVec s) {
  const SmVec y = cephes_exp_core<SmVec, SmInt>(s > sm_splat(-104.0f) ? s : sm_splat(-104.0f));
  return s > sm_splat(-103.97208f) ? y : SmVec{};
}

// Lane k of the result is all ones where k >= first (the lanes of an overlapping last vector not yet counted).
inline SmInt sm_lanes_from(int64_t first) {
  SmInt idx;
  for (int64_t k = 0; k < kSmLanes; ++k) idx[k] = static_cast<int32_t>(k);
  return idx >= static_cast<int32_t>(first);
}

inline bool sm_any(SmInt m) {
  for (int64_t w = kSmLanes / 2; w >= 1; w /= 2) {
    SmInt h;
    for (int64_t k = 0; k < kSmLanes; ++k) h[k] = k < w ? m[k + w] : 0;
    m |= h;
  }
  return m[0] != 0;
}

// A row shorter than one vector: padded lanes (-inf for the max and the exponentials, which then add 0).
inline void softmax_short_row(const float* x, int64_t len, float* out) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const SmVec a = sm_load_part(x, len, kNegInf);
  const float mx = sm_max(a);
  if (sm_any(a != a) || !(std::fabs(mx) <= std::numeric_limits<float>::max())) {
    for (int64_t j = 0; j < len; ++j) out[j] = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  const SmVec e = sm_exp_nonpos(a - mx);
  sm_store_part(out, len, e * (1.0f / sm_total(e)));
}

// One float row of len >= kSmLanes values: out[i] = e^{x[i] - max} / sum (out may be x). A length that is not a
// whole number of vectors ends with the vector of the last kSmLanes values, which overlaps the one before: the max
// takes it whole, the sum only its new lanes, and it is read before (written after) the overlapped values change.
inline void softmax_row(const float* x, int64_t len, float* out) {
  const int64_t full = len - len % kSmLanes, last = len - kSmLanes;
  const bool tail = full != len;
  const SmVec xt = sm_load(x + last);
  // max in two vectors (two independent chains), NaNs noted apart: `v > m` never takes one
  SmVec m0 = xt, m1 = xt;
  SmInt nan = xt != xt;
  int64_t i = 0;
  for (; i + 2 * kSmLanes <= full; i += 2 * kSmLanes) {
    const SmVec a = sm_load(x + i), b = sm_load(x + i + kSmLanes);
    m0 = a > m0 ? a : m0;
    m1 = b > m1 ? b : m1;
    nan |= (a != a) | (b != b);
  }
  if (i < full) {
    const SmVec a = sm_load(x + i);
    m0 = a > m0 ? a : m0;
    nan |= a != a;
  }
  m0 = m1 > m0 ? m1 : m0;
  const float mx = sm_max(m0);
  if (sm_any(nan) || !(std::fabs(mx) <= std::numeric_limits<float>::max())) {
    for (int64_t j = 0; j < len; ++j) out[j] = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  const SmVec vmax = sm_splat(mx);
  SmVec s0 = SmVec{}, s1 = SmVec{};
  i = 0;
  for (; i + 2 * kSmLanes <= full; i += 2 * kSmLanes) {
    const SmVec a = sm_exp_nonpos(sm_load(x + i) - vmax), b = sm_exp_nonpos(sm_load(x + i + kSmLanes) - vmax);
    sm_store(out + i, a);
    sm_store(out + i + kSmLanes, b);
    s0 += a;
    s1 += b;
  }
  if (i < full) {
    const SmVec a = sm_exp_nonpos(sm_load(x + i) - vmax);
    sm_store(out + i, a);
    s0 += a;
  }
  SmVec et = SmVec{};
  if (tail) {
    et = sm_exp_nonpos(xt - vmax);
    s1 += sm_lanes_from(full - last) ? et : SmVec{};
  }
  const SmVec inv = sm_splat(1.0f / sm_total(s0 + s1));
  for (i = 0; i < full; i += kSmLanes) sm_store(out + i, sm_load(out + i) * inv);
  if (tail) sm_store(out + last, et * inv);
}

// Softmax of each of `rows` contiguous rows of `len` (float32, float16, bfloat16).
template <typename T>
void softmax_lastdim(const T* x, int64_t rows, int64_t len, T* out) {
  parallel_for(rows, len * kActCost, [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<T, float>) {
      if (len < kSmLanes) {
        for (int64_t r = begin; r < end; ++r) softmax_short_row(x + r * len, len, out + r * len);
      } else {
        for (int64_t r = begin; r < end; ++r) softmax_row(x + r * len, len, out + r * len);
      }
    } else {
      std::vector<float> row(static_cast<size_t>(len));
      for (int64_t r = begin; r < end; ++r) {
        const T* xr = x + r * len;
        T* yr = out + r * len;
        widen_row(xr, len, row.data());
        if (len < kSmLanes) {
          softmax_short_row(row.data(), len, row.data());
        } else {
          softmax_row(row.data(), len, row.data());
        }
        narrow_row(row.data(), len, yr);
      }
    }
  });
}

// torch's softmax backward over the last axis: dx = y * (g - sum(g * y)), one float row (out may be y or g). The
// last vector overlaps as in softmax_row (its new lanes summed; read before, written after the others).
inline void softmax_grad_row(const float* y, const float* g, int64_t len, float* out) {
  if (len < kSmLanes) {
    const SmVec yv = sm_load_part(y, len, 0.0f), gv = sm_load_part(g, len, 0.0f);
    sm_store_part(out, len, yv * (gv - sm_total(gv * yv)));
    return;
  }
  const int64_t full = len - len % kSmLanes, last = len - kSmLanes;
  const SmVec yt = sm_load(y + last), gt = sm_load(g + last);
  SmVec d0 = SmVec{}, d1 = full != len ? (sm_lanes_from(full - last) ? gt * yt : SmVec{}) : SmVec{};
  int64_t i = 0;
  for (; i + 2 * kSmLanes <= full; i += 2 * kSmLanes) {
    d0 += sm_load(g + i) * sm_load(y + i);
    d1 += sm_load(g + i + kSmLanes) * sm_load(y + i + kSmLanes);
  }
  if (i < full) d0 += sm_load(g + i) * sm_load(y + i);
  const SmVec dot = sm_splat(sm_total(d0 + d1));
  for (i = 0; i < full; i += kSmLanes) sm_store(out + i, sm_load(y + i) * (sm_load(g + i) - dot));
  if (full != len) sm_store(out + last, yt * (gt - dot));
}

template <typename T>
void softmax_grad_lastdim(const T* y, const T* g, int64_t rows, int64_t len, T* out) {
  parallel_for(rows, len * 4, [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<T, float>) {
      for (int64_t r = begin; r < end; ++r) softmax_grad_row(y + r * len, g + r * len, len, out + r * len);
    } else {
      std::vector<float> yb(static_cast<size_t>(len)), gb(static_cast<size_t>(len));
      for (int64_t r = begin; r < end; ++r) {
        const int64_t at = r * len;
        widen_row(y + at, len, yb.data());
        widen_row(g + at, len, gb.data());
        softmax_grad_row(yb.data(), gb.data(), len, yb.data());
        narrow_row(yb.data(), len, out + at);
      }
    }
  });
}

}  // namespace porter
