// The loop nests of Porter's depthwise convolution (forward, input gradient, weight gradient).
//
// Layouts: the input `x` is contiguous channels-last `(N, L0, L1, L2, C)` (1d/2d inputs padded on the left with
// size-1 dims), the output `(N, O0, O1, O2, C*m)` with output channel `c*m + j` reading input channel `c` (torch's
// order). The kernels see the weight transposed once per call to `wt[tap][j*C + c]` and the output gradient in
// `(N, O0, O1, O2, m, C)` order (the same as the output when m = 1), so that every inner loop runs over contiguous
// channels. Zero padding is never materialized: the per-dim tables below list only the taps that read real input.
//
// Every result is a sum of products of contiguous channel rows (`dot_rows`), accumulated in registers (GCC/Clang
// vector types) in a fixed order, so the results do not depend on the thread count. The kernels run in float32 or
// float64; float16/bfloat16 inputs are widened to float32 by the caller (torch's CPU kernel accumulates them in
// float32 too).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "parallel.h"
#include "simd.h"

namespace porter {

// ------------------------------------------------------------------------------------------------ geometry
struct DwGeometry {
  int64_t n = 1, c = 1, m = 1;
  int64_t L[3] = {1, 1, 1}, O[3] = {1, 1, 1};
  int64_t k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1}, lo[3] = {0, 0, 0};

  int64_t taps() const { return k[0] * k[1] * k[2]; }
  int64_t cout() const { return c * m; }
  int64_t in_plane() const { return L[0] * L[1] * L[2]; }
  int64_t out_plane() const { return O[0] * O[1] * O[2]; }
};

// Along one dim, output o reads input o*s - lo + t*d for the taps t in [first[o], end[o]) (the others fall on the
// zero padding).
struct DwTaps {
  std::vector<int64_t> first, end;

  static DwTaps of(const DwGeometry& g, int dim) {
    DwTaps r;
    const int64_t L = g.L[dim], k = g.k[dim], s = g.s[dim], d = g.d[dim], lo = g.lo[dim];
    for (int64_t o = 0; o < g.O[dim]; ++o) {
      const int64_t base = o * s - lo;  // input position of tap 0
      int64_t t0 = 0, t1 = k;
      if (base < 0) t0 = (-base + d - 1) / d;                       // first t with base + t*d >= 0
      t1 = std::min(k, base >= L ? 0 : (L - 1 - base) / d + 1);    // past the last t with base + t*d < L
      r.first.push_back(std::min(t0, k));
      r.end.push_back(std::max(t1, std::min(t0, k)));
    }
    return r;
  }
};

// The transpose of DwTaps: input p is read by the (tap, output) pairs `tap[i], out[i]` for i in [start[p], start[p+1]).
struct DwReaders {
  std::vector<int64_t> start, tap, out;

  static DwReaders of(const DwGeometry& g, int dim) {
    DwReaders r;
    const int64_t L = g.L[dim], k = g.k[dim], s = g.s[dim], d = g.d[dim], lo = g.lo[dim], O = g.O[dim];
    for (int64_t p = 0; p < L; ++p) {
      r.start.push_back(static_cast<int64_t>(r.tap.size()));
      for (int64_t t = 0; t < k; ++t) {
        const int64_t q = p + lo - t * d;  // = o*s
        if (q < 0 || q % s) continue;
        if (q / s < O) {
          r.tap.push_back(t);
          r.out.push_back(q / s);
        }
      }
    }
    r.start.push_back(static_cast<int64_t>(r.tap.size()));
    return r;
  }
};

// wt[t*(m*C) + j*C + c] = w[(c*m + j)*taps + t]: the weight with the taps outermost and channels contiguous.
template <typename T>
std::vector<T> transpose_weight(const T* w, const DwGeometry& g) {
  const int64_t taps = g.taps(), C = g.c, m = g.m, mc = g.cout();
  std::vector<T> wt(taps * mc);
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t j = 0; j < m; ++j) {
      for (int64_t t = 0; t < taps; ++t) wt[t * mc + j * C + c] = w[(c * m + j) * taps + t];
    }
  }
  return wt;
}

// ------------------------------------------------------------------------------------------------ row dot products
// One vector is the build CPU's register width (kVectorBytes, simd.h; the kernels are compiled with -march=native). A
// GCC vector type wider than the hardware's is kept on the stack and moved through integer registers on every
// `acc += a * b` (measured on AMD Zen 3 / AVX2 with 64-byte vectors: the forward of (8, 56, 56, 144) 3x3 took 15 ms
// of CPU against torch's 5).
template <typename T>
struct Lanes {
  typedef T vec __attribute__((vector_size(kVectorBytes)));
  typedef T half_vec __attribute__((vector_size(kVectorBytes / 2)));
  static constexpr int64_t n = kVectorBytes / sizeof(T);
};

// res[c] (+)= sum_p a[p][aoff + c] * b[p][boff + c] for the K*lanes channels at c, in K vector registers.
template <typename T, int K, bool Add>
inline void dot_rows_k(const T* const* a, const T* const* b, int64_t pairs, int64_t aoff, int64_t boff, T* res) {
  using V = typename Lanes<T>::vec;
  constexpr int64_t W = Lanes<T>::n;
  V acc[K];
  for (int k = 0; k < K; ++k) {
    if constexpr (Add) {
      std::memcpy(&acc[k], res + k * W, sizeof(V));
    } else {
      acc[k] = V{};
    }
  }
  for (int64_t p = 0; p < pairs; ++p) {
    const T* ap = a[p] + aoff;
    const T* bp = b[p] + boff;
    for (int k = 0; k < K; ++k) {
      V va, vb;
      std::memcpy(&va, ap + k * W, sizeof(V));
      std::memcpy(&vb, bp + k * W, sizeof(V));
      acc[k] += va * vb;
    }
  }
  for (int k = 0; k < K; ++k) std::memcpy(res + k * W, &acc[k], sizeof(V));
}

// The same for the half vector of channels at c (a remainder of 8 float32 channels, e.g. C = 24).
template <typename T, bool Add>
inline void dot_rows_half(const T* const* a, const T* const* b, int64_t pairs, int64_t aoff, int64_t boff, T* res) {
  using V = typename Lanes<T>::half_vec;
  V acc;
  if constexpr (Add) {
    std::memcpy(&acc, res, sizeof(V));
  } else {
    acc = V{};
  }
  for (int64_t p = 0; p < pairs; ++p) {
    V va, vb;
    std::memcpy(&va, a[p] + aoff, sizeof(V));
    std::memcpy(&vb, b[p] + boff, sizeof(V));
    acc += va * vb;
  }
  std::memcpy(res, &acc, sizeof(V));
}

// res[c] (+)= sum_p a[p][aoff + c] * b[p][boff + c] for c in [0, len), pairs in order.
template <typename T, bool Add>
inline void dot_rows(const T* const* a, const T* const* b, int64_t pairs, int64_t aoff, int64_t boff, int64_t len,
                     T* res) {
  constexpr int64_t W = Lanes<T>::n;
  int64_t c = 0;
  for (; c + 4 * W <= len; c += 4 * W) dot_rows_k<T, 4, Add>(a, b, pairs, aoff + c, boff + c, res + c);
  switch ((len - c) / W) {
    case 3: dot_rows_k<T, 3, Add>(a, b, pairs, aoff + c, boff + c, res + c); c += 3 * W; break;
    case 2: dot_rows_k<T, 2, Add>(a, b, pairs, aoff + c, boff + c, res + c); c += 2 * W; break;
    case 1: dot_rows_k<T, 1, Add>(a, b, pairs, aoff + c, boff + c, res + c); c += W; break;
    default: break;
  }
  if (c + W / 2 <= len) {
    dot_rows_half<T, Add>(a, b, pairs, aoff + c, boff + c, res + c);
    c += W / 2;
  }
  if (c < len) {  // fewer channels than half a vector: the same sums, lane by lane
    T tail[W];
    for (int64_t i = 0; i < len - c; ++i) tail[i] = Add ? res[c + i] : T(0);
    for (int64_t p = 0; p < pairs; ++p) {
      const T* ap = a[p] + aoff + c;
      const T* bp = b[p] + boff + c;
      for (int64_t i = 0; i < len - c; ++i) tail[i] += ap[i] * bp[i];
    }
    for (int64_t i = 0; i < len - c; ++i) res[c + i] = tail[i];
  }
}

// ------------------------------------------------------------------------------------------------ forward
// R outputs along the last dim at once for one vector of channels (m = 1): each tap's weights are loaded once for
// the R outputs. Row q of the (t0, t1) taps starts at xr[q] (input position 0 of the last dim) with its k2 weights
// at wq[q]; every tap of the last dim is real for these outputs. The sums run in the generic loop's order.
template <typename T, int R>
inline void dw_forward_tile(const T* const* xr, const T* const* wq, int64_t rows, const DwGeometry& g, int64_t i2,
                            int64_t c0, T* y) {
  using V = typename Lanes<T>::vec;
  const int64_t C = g.c, step = g.s[2] * C;
  V acc[R];
  for (int r = 0; r < R; ++r) acc[r] = V{};
  for (int64_t q = 0; q < rows; ++q) {
    for (int64_t t2 = 0; t2 < g.k[2]; ++t2) {
      V wv;
      std::memcpy(&wv, wq[q] + t2 * C + c0, sizeof(V));
      const T* xp = xr[q] + (i2 * g.s[2] - g.lo[2] + t2 * g.d[2]) * C + c0;
      for (int r = 0; r < R; ++r) {
        V xv;
        std::memcpy(&xv, xp + r * step, sizeof(V));
        acc[r] += xv * wv;
      }
    }
  }
  for (int r = 0; r < R; ++r) std::memcpy(y + r * C + c0, &acc[r], sizeof(V));
}

// The same for R outputs of a last dim with stride 1, dilation 1 and K2 taps: the K2 weights of a row stay in
// registers and each of the R + K2 - 1 input pixels the outputs read is loaded once, instead of once per tap (K2
// times): half the loads of dw_forward_tile for 3x3 and R independent sums. Output r still adds its taps in order
// (rows outer, t2 ascending), so the results are those of dw_forward_tile bit for bit.
template <typename T, int R, int K2>
inline void dw_forward_tile_s1(const T* const* xr, const T* const* wq, int64_t rows, const DwGeometry& g, int64_t i2,
                               int64_t c0, T* y) {
  using V = typename Lanes<T>::vec;
  const int64_t C = g.c;
  V acc[R];
  for (int r = 0; r < R; ++r) acc[r] = V{};
  for (int64_t q = 0; q < rows; ++q) {
    V wv[K2];
#pragma GCC unroll 8
    for (int t = 0; t < K2; ++t) std::memcpy(&wv[t], wq[q] + t * C + c0, sizeof(V));
    const T* xp = xr[q] + (i2 - g.lo[2]) * C + c0;
#pragma GCC unroll 16
    for (int p = 0; p < R + K2 - 1; ++p) {
      V xv;
      std::memcpy(&xv, xp + p * C, sizeof(V));
#pragma GCC unroll 8
      for (int t = 0; t < K2; ++t) {
        if (p - t >= 0 && p - t < R) acc[p - t] += xv * wv[t];
      }
    }
  }
  for (int r = 0; r < R; ++r) std::memcpy(y + r * C + c0, &acc[r], sizeof(V));
}

// Outputs per dw_forward_tile_s1: as many sums as the registers left after the K2 weights and an input vector hold
// (8 at most: 16 vector registers with AVX2/NEON, 32 with AVX-512).
template <int K2>
constexpr int dw_s1_outputs() {
  return std::min(8, kVectorRegisters - K2 - 2);
}

// Runs dw_forward_tile_s1 over the outputs [i2, to) of one row in tiles of its width, for the whole vectors of
// channels [0, cv); returns where it stopped.
template <typename T, int K2>
inline int64_t dw_forward_row_s1(const T* const* xr, const T* const* wq, int64_t rows, const DwGeometry& g, int64_t i2,
                                 int64_t to, int64_t cv, T* yr) {
  constexpr int R = dw_s1_outputs<K2>();
  const int64_t C = g.c;
  for (; i2 + R <= to; i2 += R) {
    for (int64_t c0 = 0; c0 < cv; c0 += Lanes<T>::n) dw_forward_tile_s1<T, R, K2>(xr, wq, rows, g, i2, c0, yr + i2 * C);
  }
  return i2;
}

// y[n, o, c*m + j] = sum over the real taps t of x[n, o*s - lo + t*d, c] * w[c*m + j, t]. Split over output rows.
template <typename T>
void depthwise_forward(const T* x, const T* w, const DwGeometry& g, T* y) {
  const int64_t C = g.c, m = g.m, mc = g.cout(), taps = g.taps();
  const std::vector<T> wt = transpose_weight(w, g);
  const DwTaps ax[3] = {DwTaps::of(g, 0), DwTaps::of(g, 1), DwTaps::of(g, 2)};
  const int64_t xs0 = g.L[1] * g.L[2] * C, xs1 = g.L[2] * C, xs2 = C, xsn = g.in_plane() * C;
  const int64_t rows = g.n * g.O[0] * g.O[1];
  // the outputs of the last dim whose taps are all real: a contiguous run [inner_from, inner_to)
  int64_t inner_from = 0, inner_to = 0;
  for (int64_t i2 = 0; i2 < g.O[2]; ++i2) {
    if (ax[2].first[i2] == 0 && ax[2].end[i2] == g.k[2]) {
      if (inner_from == inner_to) inner_from = i2;
      inner_to = i2 + 1;
    }
  }
  // tiles cover the whole vectors of channels [0, cv); the rest (C = 116: 14 vectors of 8 and 4) per output
  const int64_t cv = C - C % Lanes<T>::n;
  const bool tiles = m == 1 && cv > 0 && inner_to - inner_from >= 4;
  parallel_for(rows, g.O[2] * mc * taps, [&](int64_t begin, int64_t end) {
    std::vector<const T*> a(taps), b(taps), pa(cv < C ? taps : 0), pb(cv < C ? taps : 0);
    std::vector<T> tmp(m > 1 ? C : 0);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t n = row / (g.O[0] * g.O[1]), i0 = (row / g.O[1]) % g.O[0], i1 = row % g.O[1];
      const int64_t b0 = i0 * g.s[0] - g.lo[0], b1 = i1 * g.s[1] - g.lo[1];
      int64_t from = g.O[2], to = g.O[2];  // the interior outputs [from, to), handled in tiles
      if (tiles) {
        int64_t q = 0;
        for (int64_t t0 = ax[0].first[i0]; t0 < ax[0].end[i0]; ++t0) {
          for (int64_t t1 = ax[1].first[i1]; t1 < ax[1].end[i1]; ++t1) {
            a[q] = x + n * xsn + (b0 + t0 * g.d[0]) * xs0 + (b1 + t1 * g.d[1]) * xs1;
            b[q] = wt.data() + (t0 * g.k[1] + t1) * g.k[2] * mc;
            ++q;
          }
        }
        from = inner_from, to = inner_to;
        T* yr = y + row * g.O[2] * mc;
        int64_t i2 = from;
        if (g.s[2] == 1 && g.d[2] == 1) {
          switch (g.k[2]) {
            case 3: i2 = dw_forward_row_s1<T, 3>(a.data(), b.data(), q, g, i2, to, cv, yr); break;
            case 5: i2 = dw_forward_row_s1<T, 5>(a.data(), b.data(), q, g, i2, to, cv, yr); break;
            case 7: i2 = dw_forward_row_s1<T, 7>(a.data(), b.data(), q, g, i2, to, cv, yr); break;
            default: break;
          }
        }
        for (; i2 + 4 <= to; i2 += 4) {
          for (int64_t c0 = 0; c0 < cv; c0 += Lanes<T>::n) {
            dw_forward_tile<T, 4>(a.data(), b.data(), q, g, i2, c0, yr + i2 * C);
          }
        }
        for (; i2 < to; ++i2) {
          for (int64_t c0 = 0; c0 < cv; c0 += Lanes<T>::n) {
            dw_forward_tile<T, 1>(a.data(), b.data(), q, g, i2, c0, yr + i2 * C);
          }
        }
        for (i2 = from; cv < C && i2 < to; ++i2) {  // the channels past the last whole vector, in the same order
          int64_t pairs = 0;
          for (int64_t r = 0; r < q; ++r) {
            for (int64_t t2 = 0; t2 < g.k[2]; ++t2) {
              pa[pairs] = a[r] + (i2 * g.s[2] - g.lo[2] + t2 * g.d[2]) * C;
              pb[pairs] = b[r] + t2 * mc;
              ++pairs;
            }
          }
          dot_rows<T, false>(pa.data(), pb.data(), pairs, cv, cv, C - cv, yr + i2 * C + cv);
        }
      }
      for (int64_t i2 = 0; i2 < g.O[2]; ++i2) {
        if (i2 == from) i2 = to;
        if (i2 >= g.O[2]) break;
        const int64_t b2 = i2 * g.s[2] - g.lo[2];
        int64_t pairs = 0;
        for (int64_t t0 = ax[0].first[i0]; t0 < ax[0].end[i0]; ++t0) {
          for (int64_t t1 = ax[1].first[i1]; t1 < ax[1].end[i1]; ++t1) {
            for (int64_t t2 = ax[2].first[i2]; t2 < ax[2].end[i2]; ++t2) {
              a[pairs] = x + n * xsn + (b0 + t0 * g.d[0]) * xs0 + (b1 + t1 * g.d[1]) * xs1 + (b2 + t2 * g.d[2]) * xs2;
              b[pairs] = wt.data() + ((t0 * g.k[1] + t1) * g.k[2] + t2) * mc;
              ++pairs;
            }
          }
        }
        T* yp = y + (row * g.O[2] + i2) * mc;
        if (m == 1) {
          dot_rows<T, false>(a.data(), b.data(), pairs, 0, 0, C, yp);
        } else {
          for (int64_t j = 0; j < m; ++j) {
            dot_rows<T, false>(a.data(), b.data(), pairs, 0, j * C, C, tmp.data());
            for (int64_t c = 0; c < C; ++c) yp[c * m + j] = tmp[c];
          }
        }
      }
    }
  });
}

// ------------------------------------------------------------------------------------------------ input gradient
// R inputs of the last dim s2 apart (the same phase) at once, for one vector of channels (m = 1). They are read by
// the same taps, at outputs one apart: the taps `tap[e], out[e] + r` for the entries e of the first input. Row q of
// the (t0, t1) pairs has its output gradient row at gr[q] and its k2 weights at wq[q]. The sums run in the generic
// loop's order.
template <typename T, int R>
inline void dw_input_tile(const T* const* gr, const T* const* wq, int64_t rows, const DwReaders& rd, int64_t p2,
                          int64_t C, int64_t c0, int64_t out_step, T* dx) {
  using V = typename Lanes<T>::vec;
  V acc[R];
  for (int r = 0; r < R; ++r) acc[r] = V{};
  for (int64_t q = 0; q < rows; ++q) {
    for (int64_t e = rd.start[p2]; e < rd.start[p2 + 1]; ++e) {
      V wv;
      std::memcpy(&wv, wq[q] + rd.tap[e] * C + c0, sizeof(V));
      const T* gp = gr[q] + rd.out[e] * C + c0;
      for (int r = 0; r < R; ++r) {
        V gv;
        std::memcpy(&gv, gp + r * C, sizeof(V));
        acc[r] += gv * wv;
      }
    }
  }
  for (int r = 0; r < R; ++r) std::memcpy(dx + r * out_step + c0, &acc[r], sizeof(V));
}

// dx[n, p, c] = sum over the (tap t, output o) pairs that read p, and over j, of gy[n, o, j, c] * w[c*m + j, t]
// (gy in (N, *O, m, C) order). A gather per input position: no two threads write the same element. Split over input
// rows.
template <typename T>
void depthwise_input_grad(const T* gy, const T* w, const DwGeometry& g, T* dx) {
  const int64_t C = g.c, m = g.m, mc = g.cout();
  const std::vector<T> wt = transpose_weight(w, g);
  const DwReaders rd[3] = {DwReaders::of(g, 0), DwReaders::of(g, 1), DwReaders::of(g, 2)};
  int64_t top[3];  // the most (tap, output) pairs any input position has, per dim
  for (int dim = 0; dim < 3; ++dim) {
    top[dim] = 0;
    for (int64_t p = 0; p < g.L[dim]; ++p) top[dim] = std::max(top[dim], rd[dim].start[p + 1] - rd[dim].start[p]);
  }
  const int64_t most = top[0] * top[1] * top[2];
  const int64_t rows = g.n * g.L[0] * g.L[1];
  // run[p]: how many inputs p, p + s2, p + 2*s2, ... are read by the same taps at outputs one apart
  const int64_t s2 = g.s[2];
  std::vector<int64_t> run(g.L[2], 1);
  for (int64_t p = g.L[2] - 1 - s2; p >= 0; --p) {
    const DwReaders& r = rd[2];
    bool same = r.start[p + 1] - r.start[p] == r.start[p + s2 + 1] - r.start[p + s2];
    for (int64_t e = r.start[p], f = r.start[p + s2]; same && e < r.start[p + 1]; ++e, ++f) {
      same = r.tap[e] == r.tap[f] && r.out[e] + 1 == r.out[f];
    }
    if (same) run[p] = run[p + s2] + 1;
  }
  const bool tiles = m == 1 && C % Lanes<T>::n == 0;
  parallel_for(rows, g.L[2] * C * std::max<int64_t>(1, most * m), [&](int64_t begin, int64_t end) {
    std::vector<const T*> a(std::max(most * m, top[0] * top[1])), b(a.size());
    for (int64_t row = begin; row < end; ++row) {
      const int64_t n = row / (g.L[0] * g.L[1]), p0 = (row / g.L[1]) % g.L[0], p1 = row % g.L[1];
      if (tiles) {
        int64_t q = 0;
        for (int64_t e0 = rd[0].start[p0]; e0 < rd[0].start[p0 + 1]; ++e0) {
          for (int64_t e1 = rd[1].start[p1]; e1 < rd[1].start[p1 + 1]; ++e1) {
            a[q] = gy + ((n * g.O[0] + rd[0].out[e0]) * g.O[1] + rd[1].out[e1]) * g.O[2] * mc;
            b[q] = wt.data() + (rd[0].tap[e0] * g.k[1] + rd[1].tap[e1]) * g.k[2] * mc;
            ++q;
          }
        }
        T* dr = dx + row * g.L[2] * C;
        for (int64_t phase = 0; phase < std::min(s2, g.L[2]); ++phase) {
          for (int64_t p2 = phase; p2 < g.L[2];) {
            if (run[p2] >= 8) {  // 8 independent sums: 4 waited on the multiply-add latency
              for (int64_t c0 = 0; c0 < C; c0 += Lanes<T>::n) {
                dw_input_tile<T, 8>(a.data(), b.data(), q, rd[2], p2, C, c0, s2 * C, dr + p2 * C);
              }
              p2 += 8 * s2;
            } else if (run[p2] >= 4) {
              for (int64_t c0 = 0; c0 < C; c0 += Lanes<T>::n) {
                dw_input_tile<T, 4>(a.data(), b.data(), q, rd[2], p2, C, c0, s2 * C, dr + p2 * C);
              }
              p2 += 4 * s2;
            } else {
              for (int64_t c0 = 0; c0 < C; c0 += Lanes<T>::n) {
                dw_input_tile<T, 1>(a.data(), b.data(), q, rd[2], p2, C, c0, s2 * C, dr + p2 * C);
              }
              p2 += s2;
            }
          }
        }
        continue;
      }
      for (int64_t p2 = 0; p2 < g.L[2]; ++p2) {
        int64_t pairs = 0;
        for (int64_t e0 = rd[0].start[p0]; e0 < rd[0].start[p0 + 1]; ++e0) {
          for (int64_t e1 = rd[1].start[p1]; e1 < rd[1].start[p1 + 1]; ++e1) {
            for (int64_t e2 = rd[2].start[p2]; e2 < rd[2].start[p2 + 1]; ++e2) {
              const int64_t o = ((n * g.O[0] + rd[0].out[e0]) * g.O[1] + rd[1].out[e1]) * g.O[2] + rd[2].out[e2];
              const int64_t t = (rd[0].tap[e0] * g.k[1] + rd[1].tap[e1]) * g.k[2] + rd[2].tap[e2];
              for (int64_t j = 0; j < m; ++j) {
                a[pairs] = gy + o * mc + j * C;
                b[pairs] = wt.data() + t * mc + j * C;
                ++pairs;
              }
            }
          }
        }
        dot_rows<T, false>(a.data(), b.data(), pairs, 0, 0, C, dx + (row * g.L[2] + p2) * C);
      }
    }
  });
}

// ------------------------------------------------------------------------------------------------ weight gradient
// The K2 taps of the last dim of R kernel rows at once, for one vector of channels (m = 1) along one output row:
// each output gradient is loaded once for all the R*K2 taps it meets. at[r][t2*C + c0] += sum over i2 (ascending,
// where tap t2 is real) of gy[i2] * xrow[r][i2*s2 - lo2 + t2*d2]: the generic loop's order, bit for bit. The R*K2
// sums are independent chains: one row of 3 taps alone (3 chains) waited on the multiply-add latency (4 cycles on
// AMD Zen 3) and ran the weight gradient at ~1.6x the forward's time.
template <typename T, int K2, int R>
inline void dw_weight_tile(const T* grow, const T* const* xrow, const DwGeometry& g, const DwTaps& ax2, int64_t c0,
                           T* const* at) {
  using V = typename Lanes<T>::vec;
  const int64_t C = g.c, tap_step = g.d[2] * C;
  V acc[R][K2];
  for (int r = 0; r < R; ++r) {
    for (int t2 = 0; t2 < K2; ++t2) std::memcpy(&acc[r][t2], at[r] + t2 * C + c0, sizeof(V));
  }
  for (int64_t i2 = 0; i2 < g.O[2]; ++i2) {
    V gv;
    std::memcpy(&gv, grow + i2 * C + c0, sizeof(V));
    const int64_t base = (i2 * g.s[2] - g.lo[2]) * C + c0;
    const int64_t first = ax2.first[i2], end = ax2.end[i2];
    if (first == 0 && end == K2) {
      for (int r = 0; r < R; ++r) {
        for (int t2 = 0; t2 < K2; ++t2) {
          V xv;
          std::memcpy(&xv, xrow[r] + base + t2 * tap_step, sizeof(V));
          acc[r][t2] += gv * xv;
        }
      }
    } else {
      for (int r = 0; r < R; ++r) {
        for (int t2 = 0; t2 < K2; ++t2) {
          if (t2 >= first && t2 < end) {
            V xv;
            std::memcpy(&xv, xrow[r] + base + t2 * tap_step, sizeof(V));
            acc[r][t2] += gv * xv;
          }
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t2 = 0; t2 < K2; ++t2) std::memcpy(at[r] + t2 * C + c0, &acc[r][t2], sizeof(V));
  }
}

// Kernel rows per dw_weight_tile: as many as keep the R*K2 sums, an output gradient and an input vector in
// registers (kVectorRegisters: 16 with AVX2, 32 with AVX-512 and NEON), at most 4.
template <int K2>
constexpr int dw_weight_rows() {
  return std::max(1, std::min(4, (kVectorRegisters - 2) / K2));
}

// The `rows` kernel rows whose input rows start at xrow[q] and whose sums are at at[q], for every vector of
// channels, in tiles of up to dw_weight_rows<K2>() rows (3x3: the 3 rows at once, 2 at the top and bottom edges).
template <typename T, int K2>
inline void dw_weight_rows_k(const T* grow, const T* const* xrow, T* const* at, int64_t rows, const DwGeometry& g,
                             const DwTaps& ax2) {
  constexpr int R = dw_weight_rows<K2>();
  for (int64_t c0 = 0; c0 < g.c; c0 += Lanes<T>::n) {
    for (int64_t q = 0; q < rows;) {
      const int64_t r = std::min<int64_t>(R, rows - q);
      if (R >= 4 && r == 4) {
        dw_weight_tile<T, K2, (R >= 4 ? 4 : 1)>(grow, xrow + q, g, ax2, c0, at + q);
      } else if (R >= 3 && r == 3) {
        dw_weight_tile<T, K2, (R >= 3 ? 3 : 1)>(grow, xrow + q, g, ax2, c0, at + q);
      } else if (R >= 2 && r == 2) {
        dw_weight_tile<T, K2, (R >= 2 ? 2 : 1)>(grow, xrow + q, g, ax2, c0, at + q);
      } else {
        dw_weight_tile<T, K2, 1>(grow, xrow + q, g, ax2, c0, at + q);
      }
      q += r;
    }
  }
}

template <typename T>
inline bool dw_weight_tiles(const T* grow, const T* const* xrow, T* const* at, int64_t rows, const DwGeometry& g,
                            const DwTaps& ax2) {
  switch (g.k[2]) {
#define PORTER_DW_TAPS(K) \
  case K: dw_weight_rows_k<T, K>(grow, xrow, at, rows, g, ax2); return true;
    PORTER_DW_TAPS(1) PORTER_DW_TAPS(2) PORTER_DW_TAPS(3) PORTER_DW_TAPS(4)
    PORTER_DW_TAPS(5) PORTER_DW_TAPS(6) PORTER_DW_TAPS(7)
#undef PORTER_DW_TAPS
    default: return false;
  }
}

// dw[c*m + j, t] = sum over n and the outputs o where tap t is real of gy[n, o, j, c] * x[n, o*s - lo + t*d, c].
// The output rows are cut into chunks whose number depends on the sizes only; each chunk sums into its own buffer
// and the chunks are added in order, so the result does not depend on the thread count.
template <typename T>
void depthwise_weight_grad(const T* x, const T* gy, const DwGeometry& g, T* dw) {
  const int64_t C = g.c, m = g.m, mc = g.cout(), taps = g.taps();
  const DwTaps ax[3] = {DwTaps::of(g, 0), DwTaps::of(g, 1), DwTaps::of(g, 2)};
  const int64_t xs0 = g.L[1] * g.L[2] * C, xs1 = g.L[2] * C, xsn = g.in_plane() * C;
  const int64_t rows = g.n * g.O[0] * g.O[1];
  const int64_t work = rows * g.O[2] * taps * mc;
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>({rows, 64, work >> 17}));
  std::vector<T> part(chunks * taps * mc, T(0));
  // along the last dim, tap t2 is real for the outputs i2 in [lo2[t2], hi2[t2])
  std::vector<int64_t> lo2(g.k[2]), hi2(g.k[2]);
  for (int64_t t2 = 0; t2 < g.k[2]; ++t2) {
    int64_t a = 0, b = 0;
    for (int64_t i2 = 0; i2 < g.O[2]; ++i2) {
      if (t2 >= ax[2].first[i2] && t2 < ax[2].end[i2]) {
        if (a == b) a = i2;
        b = i2 + 1;
      }
    }
    lo2[t2] = a;
    hi2[t2] = b;
  }
  const bool tiles = m == 1 && C % Lanes<T>::n == 0 && g.k[2] <= 7;
  parallel_for(chunks, work / chunks, [&](int64_t begin, int64_t end) {
    std::vector<const T*> a(g.O[2]), b(g.O[2]), xrows(g.k[0] * g.k[1]);
    std::vector<T*> ats(g.k[0] * g.k[1]);
    for (int64_t ch = begin; ch < end; ++ch) {
      T* acc = part.data() + ch * taps * mc;
      for (int64_t row = rows * ch / chunks; row < rows * (ch + 1) / chunks; ++row) {
        const int64_t n = row / (g.O[0] * g.O[1]), i0 = (row / g.O[1]) % g.O[0], i1 = row % g.O[1];
        const int64_t b0 = i0 * g.s[0] - g.lo[0], b1 = i1 * g.s[1] - g.lo[1];
        const T* grow = gy + row * g.O[2] * mc;
        int64_t real = 0;  // the kernel rows (t0, t1) that read real input for this output row
        for (int64_t t0 = ax[0].first[i0]; t0 < ax[0].end[i0]; ++t0) {
          for (int64_t t1 = ax[1].first[i1]; t1 < ax[1].end[i1]; ++t1) {
            xrows[real] = x + n * xsn + (b0 + t0 * g.d[0]) * xs0 + (b1 + t1 * g.d[1]) * xs1;
            ats[real++] = acc + (t0 * g.k[1] + t1) * g.k[2] * mc;
          }
        }
        if (tiles && dw_weight_tiles<T>(grow, xrows.data(), ats.data(), real, g, ax[2])) continue;
        for (int64_t t0 = ax[0].first[i0]; t0 < ax[0].end[i0]; ++t0) {
          for (int64_t t1 = ax[1].first[i1]; t1 < ax[1].end[i1]; ++t1) {
            const T* xrow = x + n * xsn + (b0 + t0 * g.d[0]) * xs0 + (b1 + t1 * g.d[1]) * xs1;
            for (int64_t t2 = 0; t2 < g.k[2]; ++t2) {
              int64_t pairs = 0;
              for (int64_t i2 = lo2[t2]; i2 < hi2[t2]; ++i2) {
                a[pairs] = grow + i2 * mc;
                b[pairs] = xrow + (i2 * g.s[2] - g.lo[2] + t2 * g.d[2]) * C;
                ++pairs;
              }
              T* at = acc + ((t0 * g.k[1] + t1) * g.k[2] + t2) * mc;
              for (int64_t j = 0; j < m; ++j) dot_rows<T, true>(a.data(), b.data(), pairs, j * C, 0, C, at + j * C);
            }
          }
        }
      }
    }
  });
  // the chunks added in chunk order, element by element along contiguous rows (each chunk's buffer read once;
  // gathering every element's chunks at a stride of taps*mc missed the cache on every read: a 7x7 768@7 weight
  // gradient at batch 8, 56 chunks of 150 KB, spent most of its time here), then transposed
  const int64_t size = taps * mc;
  parallel_for(size, chunks, [&](int64_t begin, int64_t end) {
    for (int64_t ch = 1; ch < chunks; ++ch) {
      const T* src = part.data() + ch * size;
      for (int64_t i = begin; i < end; ++i) part[i] += src[i];
    }
  });
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t j = 0; j < m; ++j) {
      for (int64_t t = 0; t < taps; ++t) dw[(c * m + j) * taps + t] = part[t * mc + j * C + c];
    }
  }
}

}  // namespace porter
