// Bilinear 2-d resampling over channels-last (N, H, W, C) arrays, torch's upsample_bilinear2d arithmetic: each
// output is (x[h0, w0] * lw0 + x[h0, w1] * lw1) * lh0 + (x[h1, w0] * lw0 + x[h1, w1] * lw1) * lh1 (width taps
// inside, as torch's generic CPU kernel), in float (double for float64) and rounded once. Every tap is multiplied
// by its weight, a zero weight included, so an inf or NaN reaches exactly the outputs torch's reaches (an
// interpolation matmul would spread it over the whole row). Index/weight tables come from the caller, one per
// axis: `i0[o]`, `i1[o]`, `l1[o]` (torch's lambda1; lambda0 = 1 - lambda1).
//
// The adjoint (the input gradient) is a gather: each input row/column lists the output rows/columns whose taps read
// it (`Taps`, in output order), so one thread owns each input row and the sums run in torch's accumulation order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "parallel.h"

namespace porter {

struct LinearAxis {  // one axis' taps: output o reads i0[o] with weight 1 - l1[o] and i1[o] with l1[o]
  std::vector<int64_t> i0, i1;
  std::vector<float> l1;
  int64_t in = 0;
  int64_t out() const { return static_cast<int64_t>(i0.size()); }
};

// For each input index, the (output index, weight) pairs of the taps that read it, in output order (CSR).
struct Taps {
  std::vector<int64_t> start, out;
  std::vector<float> weight;
};

inline Taps invert_axis(const LinearAxis& a) {
  Taps t;
  t.start.assign(a.in + 1, 0);
  for (int64_t o = 0; o < a.out(); ++o) {
    ++t.start[a.i0[o] + 1];
    ++t.start[a.i1[o] + 1];
  }
  for (int64_t i = 0; i < a.in; ++i) t.start[i + 1] += t.start[i];
  t.out.resize(t.start[a.in]);
  t.weight.resize(t.start[a.in]);
  std::vector<int64_t> fill(t.start.begin(), t.start.end() - 1);
  for (int64_t o = 0; o < a.out(); ++o) {
    const float l1 = a.l1[o], l0 = 1.0f - l1;
    t.out[fill[a.i0[o]]] = o;
    t.weight[fill[a.i0[o]]++] = l0;
    t.out[fill[a.i1[o]]] = o;
    t.weight[fill[a.i1[o]]++] = l1;
  }
  return t;
}

template <typename T>
using Accum = std::conditional_t<std::is_same_v<T, double>, double, float>;

// x (N, H, W, C) -> out (N, Ho, Wo, C).
template <typename T>
void bilinear2d(const T* x, int64_t N, int64_t C, const LinearAxis& ah, const LinearAxis& aw, T* out) {
  using A = Accum<T>;
  const int64_t H = ah.in, W = aw.in, Ho = ah.out(), Wo = aw.out();
  parallel_for(N * Ho, Wo * C * 8, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t n = row / Ho, oh = row % Ho;
      const A lh1 = ah.l1[oh], lh0 = A(1) - lh1;
      const T* x0 = x + ((n * H + ah.i0[oh]) * W) * C;
      const T* x1 = x + ((n * H + ah.i1[oh]) * W) * C;
      T* o = out + row * Wo * C;
      for (int64_t ow = 0; ow < Wo; ++ow) {
        const A lw1 = aw.l1[ow], lw0 = A(1) - lw1;
        const int64_t c0 = aw.i0[ow] * C, c1 = aw.i1[ow] * C;
        T* y = o + ow * C;
        for (int64_t c = 0; c < C; ++c) {
          const A t0 = static_cast<A>(x0[c0 + c]) * lw0 + static_cast<A>(x0[c1 + c]) * lw1;
          const A t1 = static_cast<A>(x1[c0 + c]) * lw0 + static_cast<A>(x1[c1 + c]) * lw1;
          y[c] = static_cast<T>(t0 * lh0 + t1 * lh1);
        }
      }
    }
  });
}

// g (N, Ho, Wo, C) -> dx (N, H, W, C): dx[h, w] = sum over the taps reading (h, w) of (lh * lw) * g[oh, ow].
template <typename T>
void bilinear2d_adjoint(const T* g, int64_t N, int64_t C, const LinearAxis& ah, const LinearAxis& aw,
                        const Taps& th, const Taps& tw, T* dx) {
  using A = Accum<T>;
  const int64_t H = ah.in, W = aw.in, Ho = ah.out(), Wo = aw.out();
  const int64_t per_row = std::max<int64_t>(1, (th.start[H] * tw.start[W] * C) / std::max<int64_t>(H, 1));
  parallel_for(N * H, per_row, [&](int64_t begin, int64_t end) {
    std::vector<A> acc(W * C);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t n = row / H, h = row % H;
      std::fill(acc.begin(), acc.end(), A(0));
      for (int64_t a = th.start[h]; a < th.start[h + 1]; ++a) {
        const A lh = th.weight[a];
        const T* grow = g + (n * Ho + th.out[a]) * Wo * C;
        for (int64_t w = 0; w < W; ++w) {
          A* d = acc.data() + w * C;
          for (int64_t b = tw.start[w]; b < tw.start[w + 1]; ++b) {
            const A wt = lh * static_cast<A>(tw.weight[b]);
            const T* gv = grow + tw.out[b] * C;
            for (int64_t c = 0; c < C; ++c) d[c] += wt * static_cast<A>(gv[c]);
          }
        }
      }
      T* o = dx + row * W * C;
      for (int64_t i = 0; i < W * C; ++i) o[i] = static_cast<T>(acc[i]);
    }
  });
}

}  // namespace porter
