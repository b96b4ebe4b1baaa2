// Grouped (non-depthwise) convolution, direct, channels-last: ResNeXt / RegNet style convs (e.g. 104 channels in 13
// groups of 8), where MLX's CPU conv runs one small im2col + GEMM per group and is ~60x slower than torch.
//
// y[n, o, g*Mg + j] = sum over taps t (real input only: zero padding is never materialized, DwTaps) and ci < Cg of
//   x[n, in(o, t), g*Cg + ci] * w[g*Mg + j, t, ci]
// with Cg = C_in / groups input and Mg = C_out / groups output channels per group. The weight is reordered once per
// call to wt[g][t][ci][j] so the innermost loop is a contiguous axpy over the group's Mg outputs (vectorized by the
// compiler), accumulated in a fixed order: results do not depend on the thread count. float32 / float64.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "conv_kernels.h"
#include "parallel.h"

namespace porter {

// wt[((grp * taps + t) * Cg + ci) * Mg + j] = w[((grp * Mg + j) * taps + t) * Cg + ci]
template <typename T>
std::vector<T> grouped_weight(const T* w, int64_t groups, int64_t taps, int64_t cg, int64_t mg) {
  std::vector<T> wt(groups * taps * cg * mg);
  for (int64_t grp = 0; grp < groups; ++grp) {
    for (int64_t j = 0; j < mg; ++j) {
      for (int64_t t = 0; t < taps; ++t) {
        for (int64_t ci = 0; ci < cg; ++ci) {
          wt[((grp * taps + t) * cg + ci) * mg + j] = w[((grp * mg + j) * taps + t) * cg + ci];
        }
      }
    }
  }
  return wt;
}

// Forward for a compile-time group output width M: the M accumulators of a position live in one vector register
// (GCC vector extension); interior positions go four at a time along the last dim, sharing each weight row load.
// (A runtime-length inner loop over 8 outputs never reaches GCC's 16-lane vector body: it ran scalar.)
template <typename T, int M>
void grouped_conv_m(const T* x, const std::vector<T>& wt, const DwGeometry& g, int64_t groups, T* y) {
  typedef T V __attribute__((vector_size(M * sizeof(T))));
  const int64_t C = g.c, cg = C / groups, cout = groups * M, taps = g.taps();
  const DwTaps t0 = DwTaps::of(g, 0), t1 = DwTaps::of(g, 1), t2 = DwTaps::of(g, 2);
  const int64_t rows = g.n * g.O[0] * g.O[1], k2 = g.k[2];
  auto load = [](const T* p) { V v; std::memcpy(&v, p, sizeof(V)); return v; };
  parallel_for(rows, g.O[2] * taps * C * M, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t o1 = r % g.O[1], o0 = (r / g.O[1]) % g.O[0], n = r / (g.O[1] * g.O[0]);
      const T* xn = x + n * g.L[0] * g.L[1] * g.L[2] * C;
      for (int64_t o2 = 0; o2 < g.O[2];) {
        int64_t P = 1;
        if (o2 + 4 <= g.O[2] && t2.first[o2] == 0 && t2.first[o2 + 3] == 0 && t2.end[o2] == k2 && t2.end[o2 + 3] == k2) {
          P = 4;  // all four read every tap along the last dim (interior)
        }
        T* yp = y + (r * g.O[2] + o2) * cout;
        for (int64_t grp = 0; grp < groups; ++grp) {
          V acc[4] = {};
          for (int64_t a = t0.first[o0]; a < t0.end[o0]; ++a) {
            const int64_t i0 = o0 * g.s[0] - g.lo[0] + a * g.d[0];
            for (int64_t b = t1.first[o1]; b < t1.end[o1]; ++b) {
              const int64_t i1 = o1 * g.s[1] - g.lo[1] + b * g.d[1];
              const T* xrow = xn + (i0 * g.L[1] + i1) * g.L[2] * C + grp * cg;
              const int64_t c0 = P == 4 ? 0 : t2.first[o2], c1 = P == 4 ? k2 : t2.end[o2];
              for (int64_t c = c0; c < c1; ++c) {
                const T* wp = wt.data() + ((grp * taps + (a * g.k[1] + b) * k2 + c) * cg) * M;
                const int64_t i2 = o2 * g.s[2] - g.lo[2] + c * g.d[2];
                const T* xp = xrow + i2 * C;
                if (P == 4) {
                  const int64_t step = g.s[2] * C;
                  for (int64_t ci = 0; ci < cg; ++ci) {
                    const V wv = load(wp + ci * M);
                    acc[0] += xp[ci] * wv;
                    acc[1] += xp[step + ci] * wv;
                    acc[2] += xp[2 * step + ci] * wv;
                    acc[3] += xp[3 * step + ci] * wv;
                  }
                } else {
                  for (int64_t ci = 0; ci < cg; ++ci) acc[0] += xp[ci] * load(wp + ci * M);
                }
              }
            }
          }
          for (int64_t p = 0; p < P; ++p) std::memcpy(yp + p * cout + grp * M, &acc[p], sizeof(V));
        }
        o2 += P;
      }
    }
  });
}

// g: the conv's geometry (g.c = C_in; g.m unused); y: (N, O0, O1, O2, C_out) contiguous.
template <typename T>
void grouped_conv(const T* x, const T* w, const DwGeometry& g, int64_t groups, int64_t cout, T* y) {
  const int64_t C = g.c, cg = C / groups, mg = cout / groups, taps = g.taps();
  const std::vector<T> wt = grouped_weight(w, groups, taps, cg, mg);
  switch (mg) {  // the common group widths (ResNeXt 4-32, RegNet 8-64) in registers
    case 4: return grouped_conv_m<T, 4>(x, wt, g, groups, y);
    case 8: return grouped_conv_m<T, 8>(x, wt, g, groups, y);
    case 16: return grouped_conv_m<T, 16>(x, wt, g, groups, y);
    case 32: return grouped_conv_m<T, 32>(x, wt, g, groups, y);
    case 64: return grouped_conv_m<T, 64>(x, wt, g, groups, y);
    default: break;
  }
  const DwTaps t0 = DwTaps::of(g, 0), t1 = DwTaps::of(g, 1), t2 = DwTaps::of(g, 2);
  const int64_t rows = g.n * g.O[0] * g.O[1];
  parallel_for(rows, g.O[2] * taps * C * mg, [&](int64_t begin, int64_t end) {
    std::vector<T> acc_buf(mg);
    T* __restrict acc = acc_buf.data();
    for (int64_t r = begin; r < end; ++r) {
      const int64_t o1 = r % g.O[1], o0 = (r / g.O[1]) % g.O[0], n = r / (g.O[1] * g.O[0]);
      for (int64_t o2 = 0; o2 < g.O[2]; ++o2) {
        T* yp = y + (r * g.O[2] + o2) * cout;
        for (int64_t grp = 0; grp < groups; ++grp) {
          for (int64_t j = 0; j < mg; ++j) acc[j] = T(0);
          for (int64_t a = t0.first[o0]; a < t0.end[o0]; ++a) {
            const int64_t i0 = o0 * g.s[0] - g.lo[0] + a * g.d[0];
            for (int64_t b = t1.first[o1]; b < t1.end[o1]; ++b) {
              const int64_t i1 = o1 * g.s[1] - g.lo[1] + b * g.d[1];
              for (int64_t c = t2.first[o2]; c < t2.end[o2]; ++c) {
                const int64_t i2 = o2 * g.s[2] - g.lo[2] + c * g.d[2];
                const T* xp = x + (((n * g.L[0] + i0) * g.L[1] + i1) * g.L[2] + i2) * C + grp * cg;
                const T* wp = wt.data() + ((grp * taps + (a * g.k[1] + b) * g.k[2] + c) * cg) * mg;
                for (int64_t ci = 0; ci < cg; ++ci) {
                  const T xv = xp[ci];
                  const T* __restrict wr = wp + ci * mg;
                  for (int64_t j = 0; j < mg; ++j) acc[j] += xv * wr[j];
                }
              }
            }
          }
          for (int64_t j = 0; j < mg; ++j) yp[grp * mg + j] = acc[j];
        }
      }
    }
  });
}

// The input gradient (the forward's adjoint): dx[n, i, grp*Cg + ci] = sum over the (tap, output) pairs that read
// input position i (DwReaders, per dim) and j < Mg of gy[n, o, grp*Mg + j] * w[grp*Mg + j, t, ci]; x: (N, L0, L1,
// L2, C_in) contiguous.
// CG > 0: the group's input width as a compile-time vector width (the accumulators in one register); 0: any.
template <typename T, int CG = 0>
void grouped_conv_input_grad(const T* gy, const T* w, const DwGeometry& g, int64_t groups, int64_t cout, T* dx) {
  const int64_t C = g.c, cg = C / groups, mg = cout / groups, taps = g.taps();
  if constexpr (CG == 0) {
    switch (cg) {
      case 4: return grouped_conv_input_grad<T, 4>(gy, w, g, groups, cout, dx);
      case 8: return grouped_conv_input_grad<T, 8>(gy, w, g, groups, cout, dx);
      case 16: return grouped_conv_input_grad<T, 16>(gy, w, g, groups, cout, dx);
      case 32: return grouped_conv_input_grad<T, 32>(gy, w, g, groups, cout, dx);
      case 64: return grouped_conv_input_grad<T, 64>(gy, w, g, groups, cout, dx);
      default: break;
    }
  }
  // wt[((grp * taps + t) * Mg + j) * Cg + ci] = w[((grp * Mg + j) * taps + t) * Cg + ci]: already that order
  const DwReaders r0 = DwReaders::of(g, 0), r1 = DwReaders::of(g, 1), r2 = DwReaders::of(g, 2);
  const int64_t rows = g.n * g.L[0] * g.L[1];
  parallel_for(rows, g.L[2] * taps * C * mg, [&](int64_t begin, int64_t end) {
    std::vector<T> acc_buf(cg);
    T* __restrict acc = acc_buf.data();
    for (int64_t r = begin; r < end; ++r) {
      const int64_t i1 = r % g.L[1], i0 = (r / g.L[1]) % g.L[0], n = r / (g.L[1] * g.L[0]);
      for (int64_t i2 = 0; i2 < g.L[2]; ++i2) {
        T* xp = dx + (r * g.L[2] + i2) * C;
        for (int64_t grp = 0; grp < groups; ++grp) {
          for (int64_t ci = 0; ci < cg; ++ci) acc[ci] = T(0);
          for (int64_t ia = r0.start[i0]; ia < r0.start[i0 + 1]; ++ia) {
            const int64_t a = r0.tap[ia], o0 = r0.out[ia];
            for (int64_t ib = r1.start[i1]; ib < r1.start[i1 + 1]; ++ib) {
              const int64_t b = r1.tap[ib], o1 = r1.out[ib];
              for (int64_t ic = r2.start[i2]; ic < r2.start[i2 + 1]; ++ic) {
                const int64_t c = r2.tap[ic], o2 = r2.out[ic];
                const int64_t t = (a * g.k[1] + b) * g.k[2] + c;
                const T* gp = gy + (((n * g.O[0] + o0) * g.O[1] + o1) * g.O[2] + o2) * cout + grp * mg;
                if constexpr (CG > 0) {
                  typedef T V __attribute__((vector_size(CG * sizeof(T))));
                  V av;
                  std::memcpy(&av, acc, sizeof(V));
                  for (int64_t j = 0; j < mg; ++j) {
                    V wv;
                    std::memcpy(&wv, w + ((grp * mg + j) * taps + t) * cg, sizeof(V));
                    av += gp[j] * wv;
                  }
                  std::memcpy(acc, &av, sizeof(V));
                } else {
                  for (int64_t j = 0; j < mg; ++j) {
                    const T gv = gp[j];
                    const T* __restrict wr = w + ((grp * mg + j) * taps + t) * cg;
                    for (int64_t ci = 0; ci < cg; ++ci) acc[ci] += gv * wr[ci];
                  }
                }
              }
            }
          }
          for (int64_t ci = 0; ci < cg; ++ci) xp[grp * cg + ci] = acc[ci];
        }
      }
    }
  });
}

// The weight gradient: dw[grp*Mg + j, t, ci] = sum over n, o of gy[n, o, grp*Mg + j] * x[n, in(o, t), grp*Cg + ci],
// one task per (group, tap), accumulated over the positions in a fixed order.
template <typename T, int M = 0>
void grouped_conv_weight_grad(const T* x, const T* gy, const DwGeometry& g, int64_t groups, int64_t cout, T* dw) {
  const int64_t C = g.c, cg = C / groups, mg = cout / groups, taps = g.taps();
  if constexpr (M == 0) {
    switch (mg) {
      case 4: return grouped_conv_weight_grad<T, 4>(x, gy, g, groups, cout, dw);
      case 8: return grouped_conv_weight_grad<T, 8>(x, gy, g, groups, cout, dw);
      case 16: return grouped_conv_weight_grad<T, 16>(x, gy, g, groups, cout, dw);
      case 32: return grouped_conv_weight_grad<T, 32>(x, gy, g, groups, cout, dw);
      case 64: return grouped_conv_weight_grad<T, 64>(x, gy, g, groups, cout, dw);
      default: break;
    }
  }
  const DwTaps t0 = DwTaps::of(g, 0), t1 = DwTaps::of(g, 1), t2 = DwTaps::of(g, 2);
  const int64_t positions = g.n * g.out_plane();
  parallel_for(groups * taps, positions * cg * mg, [&](int64_t begin, int64_t end) {
    std::vector<T> acc_buf(cg * mg);
    T* __restrict acc = acc_buf.data();
    for (int64_t task = begin; task < end; ++task) {
      const int64_t grp = task / taps, t = task % taps;
      const int64_t a = t / (g.k[1] * g.k[2]), b = (t / g.k[2]) % g.k[1], c = t % g.k[2];
      std::fill(acc, acc + cg * mg, T(0));
      for (int64_t n = 0; n < g.n; ++n) {
        for (int64_t o0 = 0; o0 < g.O[0]; ++o0) {
          if (a < t0.first[o0] || a >= t0.end[o0]) continue;
          const int64_t i0 = o0 * g.s[0] - g.lo[0] + a * g.d[0];
          for (int64_t o1 = 0; o1 < g.O[1]; ++o1) {
            if (b < t1.first[o1] || b >= t1.end[o1]) continue;
            const int64_t i1 = o1 * g.s[1] - g.lo[1] + b * g.d[1];
            for (int64_t o2 = 0; o2 < g.O[2]; ++o2) {
              if (c < t2.first[o2] || c >= t2.end[o2]) continue;
              const int64_t i2 = o2 * g.s[2] - g.lo[2] + c * g.d[2];
              const T* xp = x + (((n * g.L[0] + i0) * g.L[1] + i1) * g.L[2] + i2) * C + grp * cg;
              const T* __restrict gp = gy + (((n * g.O[0] + o0) * g.O[1] + o1) * g.O[2] + o2) * cout + grp * mg;
              if constexpr (M > 0) {
                typedef T V __attribute__((vector_size(M * sizeof(T))));
                V gv, av;
                std::memcpy(&gv, gp, sizeof(V));
                for (int64_t ci = 0; ci < cg; ++ci) {
                  std::memcpy(&av, acc + ci * M, sizeof(V));
                  av += xp[ci] * gv;
                  std::memcpy(acc + ci * M, &av, sizeof(V));
                }
              } else {
                for (int64_t ci = 0; ci < cg; ++ci) {
                  const T xv = xp[ci];
                  T* __restrict ar = acc + ci * mg;
                  for (int64_t j = 0; j < mg; ++j) ar[j] += xv * gp[j];
                }
              }
            }
          }
        }
      }
      for (int64_t ci = 0; ci < cg; ++ci) {
        for (int64_t j = 0; j < mg; ++j) dw[((grp * mg + j) * taps + t) * cg + ci] = acc[ci * mg + j];
      }
    }
  });
}

}  // namespace porter
