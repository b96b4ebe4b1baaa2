// Grouped (non-depthwise) convolution, direct, channels-last: ResNeXt / RegNet style convs (e.g. 104 channels in 13
// groups of 8), where MLX's CPU conv runs one small im2col + GEMM per group and is ~60x slower than torch.
//
// y[n, o, g*Mg + j] = sum over taps t (real input only: zero padding is never materialized, DwTaps) and ci < Cg of
//   x[n, in(o, t), g*Cg + ci] * w[g*Mg + j, t, ci]
// with Cg = C_in / groups input and Mg = C_out / groups output channels per group. The weight is reordered once per
// call to wt[g][t][ci][j] so the innermost loop is a contiguous axpy over the group's Mg outputs, held in a register
// tile of native-width vectors (with_group_tile), accumulated in a fixed order: results do not depend on the thread
// count. float32 / float64.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "conv_kernels.h"
#include "parallel.h"
#include "simd.h"

namespace porter {

// A group's channels as a register tile: L lanes per vector, NV vectors, L * NV >= the group's width (the lanes past
// it are zero padding). L is the build CPU's vector width (kVectorBytes, simd.h) for groups at least that wide, else
// the narrowest power of two that holds the group, so a vector type is never wider than the registers: GCC splits a
// wider one (the former `vector_size(16 * 4)` for RegNet-X's 16 outputs per group on AVX2) and keeps arrays of it on
// the stack. Groups wider than kMaxTileVectors vectors take the runtime-width loops.
constexpr int kMaxTileVectors = 8;

template <typename T>
constexpr int tile_lanes(int64_t width) {
  const int native = kVectorBytes / static_cast<int>(sizeof(T));
  int lanes = 2;
  while (lanes < width && lanes < native) lanes *= 2;
  return lanes;
}

// Calls f(std::integral_constant<int, L>, std::integral_constant<int, NV>) for the tile of a group `width` channels
// wide and returns true, or returns false when the group needs more than kMaxTileVectors vectors.
template <typename T, typename F>
bool with_group_tile(int64_t width, F&& f) {
  constexpr int native = kVectorBytes / static_cast<int>(sizeof(T));
  const int lanes = tile_lanes<T>(width);
  const int64_t vectors = (width + lanes - 1) / lanes;
  if (lanes < native) {  // narrower than a register: one vector
    if constexpr (native > 2) {
      if (lanes == 2) return f(std::integral_constant<int, 2>{}, std::integral_constant<int, 1>{}), true;
    }
    if constexpr (native > 4) {
      if (lanes == 4) return f(std::integral_constant<int, 4>{}, std::integral_constant<int, 1>{}), true;
    }
    if constexpr (native > 8) {
      if (lanes == 8) return f(std::integral_constant<int, 8>{}, std::integral_constant<int, 1>{}), true;
    }
    return false;
  }
  bool done = false;
  [&]<int... I>(std::integer_sequence<int, I...>) {
    ((vectors == I + 1 ? (f(std::integral_constant<int, native>{}, std::integral_constant<int, I + 1>{}), done = true)
                       : false),
     ...);
  }(std::make_integer_sequence<int, kMaxTileVectors>{});
  return done;
}

// A tile's vector type (L lanes; L = 0: none, the runtime-width loops) and unaligned loads and stores of it.
template <typename T, int L, int NV>
struct GroupTile {
  typedef T V __attribute__((vector_size((L > 0 ? L : 2) * sizeof(T))));
  static V load(const T* p) { V v; std::memcpy(&v, p, sizeof(V)); return v; }
  static void store(T* p, V v) { std::memcpy(p, &v, sizeof(V)); }
  // the first `width` lanes of the tile v[NV] to or from p (a fixed-size copy when the tile has no padding lanes,
  // which the compiler keeps in registers; a runtime-length memcpy is a library call)
  static void store_first(T* p, const V* v, int64_t width) {
    if (width == L * NV) std::memcpy(p, v, NV * sizeof(V));
    else std::memcpy(p, v, width * sizeof(T));
  }
  static void load_first(V* v, const T* p, int64_t width) {
    if (width == L * NV) std::memcpy(v, p, NV * sizeof(V));
    else std::memcpy(v, p, width * sizeof(T));
  }
};

// wt[((grp * taps + t) * Cg + ci) * stride + j] = w[((grp * Mg + j) * taps + t) * Cg + ci] for j < Mg, zero for
// Mg <= j < stride (a tile's padding lanes).
template <typename T>
std::vector<T> grouped_weight(const T* w, int64_t groups, int64_t taps, int64_t cg, int64_t mg, int64_t stride) {
  std::vector<T> wt(groups * taps * cg * stride, T(0));
  for (int64_t grp = 0; grp < groups; ++grp) {
    for (int64_t j = 0; j < mg; ++j) {
      for (int64_t t = 0; t < taps; ++t) {
        for (int64_t ci = 0; ci < cg; ++ci) {
          wt[((grp * taps + t) * cg + ci) * stride + j] = w[((grp * mg + j) * taps + t) * cg + ci];
        }
      }
    }
  }
  return wt;
}

// Forward with the group's Mg outputs in an (L, NV) tile (wt from grouped_weight with stride L * NV): up to PMAX
// interior positions along the last dim (every tap there reads real input) share each weight load, PMAX sized so the
// P * NV accumulators, P broadcast inputs and a weight vector fit kVectorRegisters; border positions go one at a time
// with their taps clipped.
template <typename T, int L, int NV>
void grouped_conv_tiled(const T* x, const T* wt, const DwGeometry& g, int64_t groups, int64_t mg, T* y) {
  using Tile = GroupTile<T, L, NV>;
  using V = typename Tile::V;
  constexpr int MP = L * NV;
  constexpr int PMAX = std::clamp((kVectorRegisters - 1) / (NV + 1), 1, 6);
  const int64_t C = g.c, cg = C / groups, cout = groups * mg, taps = g.taps();
  const DwTaps t0 = DwTaps::of(g, 0), t1 = DwTaps::of(g, 1), t2 = DwTaps::of(g, 2);
  const int64_t rows = g.n * g.O[0] * g.O[1], k2 = g.k[2], step = g.s[2] * C;
  std::vector<char> interior(g.O[2]);
  for (int64_t o = 0; o < g.O[2]; ++o) interior[o] = t2.first[o] == 0 && t2.end[o] == k2;
  parallel_for(rows, g.O[2] * taps * C * mg, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t o1 = r % g.O[1], o0 = (r / g.O[1]) % g.O[0], n = r / (g.O[1] * g.O[0]);
      const T* xn = x + n * g.L[0] * g.L[1] * g.L[2] * C;
      // P positions from o2 (all interior when P > 1), every group
      auto block = [&]<int P>(int64_t o2) {
        T* yp = y + (r * g.O[2] + o2) * cout;
        const int64_t c0 = t2.first[o2], c1 = t2.end[o2];
        for (int64_t grp = 0; grp < groups; ++grp) {
          V acc[P][NV] = {};
          for (int64_t a = t0.first[o0]; a < t0.end[o0]; ++a) {
            const int64_t i0 = o0 * g.s[0] - g.lo[0] + a * g.d[0];
            for (int64_t b = t1.first[o1]; b < t1.end[o1]; ++b) {
              const int64_t i1 = o1 * g.s[1] - g.lo[1] + b * g.d[1];
              const T* xrow = xn + (i0 * g.L[1] + i1) * g.L[2] * C + grp * cg;
              for (int64_t c = c0; c < c1; ++c) {
                const T* wp = wt + ((grp * taps + (a * g.k[1] + b) * k2 + c) * cg) * MP;
                const T* xp = xrow + (o2 * g.s[2] - g.lo[2] + c * g.d[2]) * C;
                for (int64_t ci = 0; ci < cg; ++ci) {
                  T xv[P];
                  for (int p = 0; p < P; ++p) xv[p] = xp[p * step + ci];
                  for (int v = 0; v < NV; ++v) {
                    const V wv = Tile::load(wp + ci * MP + v * L);
                    for (int p = 0; p < P; ++p) acc[p][v] += xv[p] * wv;
                  }
                }
              }
            }
          }
          for (int p = 0; p < P; ++p) Tile::store_first(yp + p * cout + grp * mg, acc[p], mg);
        }
      };
      for (int64_t o2 = 0; o2 < g.O[2];) {
        int64_t run = 0;  // interior positions from o2, at most PMAX
        while (run < PMAX && o2 + run < g.O[2] && interior[o2 + run]) ++run;
        const int64_t P = std::max<int64_t>(run, 1);
        [&]<int... I>(std::integer_sequence<int, I...>) {
          ((P == I + 1 ? (block.template operator()<I + 1>(o2), true) : false), ...);
        }(std::make_integer_sequence<int, PMAX>{});
        o2 += P;
      }
    }
  });
}

// g: the conv's geometry (g.c = C_in; g.m unused); y: (N, O0, O1, O2, C_out) contiguous.
template <typename T>
void grouped_conv(const T* x, const T* w, const DwGeometry& g, int64_t groups, int64_t cout, T* y) {
  const int64_t C = g.c, cg = C / groups, mg = cout / groups, taps = g.taps();
  const bool tiled = with_group_tile<T>(mg, [&](auto lanes, auto vectors) {
    const std::vector<T> wt = grouped_weight(w, groups, taps, cg, mg, lanes() * vectors());
    grouped_conv_tiled<T, lanes(), vectors()>(x, wt.data(), g, groups, mg, y);
  });
  if (tiled) return;
  const std::vector<T> wt = grouped_weight(w, groups, taps, cg, mg, mg);
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
// L2, C_in) contiguous. With a tile (L, NV) over the group's Cg inputs (with_group_tile) the accumulators stay in
// registers and the weight is read from a copy whose rows are padded to L * NV; without one, runtime-width loops.
template <typename T, int L = 0, int NV = 0>
void grouped_conv_input_grad(const T* gy, const T* w, const DwGeometry& g, int64_t groups, int64_t cout, T* dx) {
  const int64_t C = g.c, cg = C / groups, mg = cout / groups, taps = g.taps();
  if constexpr (L == 0) {
    const bool tiled = with_group_tile<T>(cg, [&](auto lanes, auto vectors) {
      grouped_conv_input_grad<T, lanes(), vectors()>(gy, w, g, groups, cout, dx);
    });
    if (tiled) return;
  }
  constexpr int CP = L * NV;
  // wt[((grp * Mg + j) * taps + t) * CP + ci] = w[((grp * Mg + j) * taps + t) * Cg + ci], zero for ci >= Cg
  std::vector<T> padded;
  if constexpr (L > 0) {
    padded.assign(cout * taps * CP, T(0));
    for (int64_t row = 0; row < cout * taps; ++row) std::copy(w + row * cg, w + (row + 1) * cg, &padded[row * CP]);
  }
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
          [[maybe_unused]] typename GroupTile<T, L, NV>::V av[NV > 0 ? NV : 1] = {};
          if constexpr (L == 0) std::fill(acc, acc + cg, T(0));
          for (int64_t ia = r0.start[i0]; ia < r0.start[i0 + 1]; ++ia) {
            const int64_t a = r0.tap[ia], o0 = r0.out[ia];
            for (int64_t ib = r1.start[i1]; ib < r1.start[i1 + 1]; ++ib) {
              const int64_t b = r1.tap[ib], o1 = r1.out[ib];
              for (int64_t ic = r2.start[i2]; ic < r2.start[i2 + 1]; ++ic) {
                const int64_t c = r2.tap[ic], o2 = r2.out[ic];
                const int64_t t = (a * g.k[1] + b) * g.k[2] + c;
                const T* gp = gy + (((n * g.O[0] + o0) * g.O[1] + o1) * g.O[2] + o2) * cout + grp * mg;
                if constexpr (L > 0) {
                  for (int64_t j = 0; j < mg; ++j) {
                    const T* wr = padded.data() + ((grp * mg + j) * taps + t) * CP;
                    for (int v = 0; v < NV; ++v) av[v] += gp[j] * GroupTile<T, L, NV>::load(wr + v * L);
                  }
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
          if constexpr (L > 0) {
            GroupTile<T, L, NV>::store_first(xp + grp * cg, av, cg);
          } else {
            std::copy(acc, acc + cg, xp + grp * cg);
          }
        }
      }
    }
  });
}

// The weight gradient: dw[grp*Mg + j, t, ci] = sum over n, o of gy[n, o, grp*Mg + j] * x[n, in(o, t), grp*Cg + ci],
// one task per (group, tap), accumulated over the positions in a fixed order. With a tile (L, NV) over the group's
// Mg outputs (with_group_tile) a position's output gradients are loaded once into registers (zero past Mg) and each
// accumulator row is L * NV wide; without one, runtime-width loops.
template <typename T, int L = 0, int NV = 0>
void grouped_conv_weight_grad(const T* x, const T* gy, const DwGeometry& g, int64_t groups, int64_t cout, T* dw) {
  const int64_t C = g.c, cg = C / groups, mg = cout / groups, taps = g.taps();
  if constexpr (L == 0) {
    const bool tiled = with_group_tile<T>(mg, [&](auto lanes, auto vectors) {
      grouped_conv_weight_grad<T, lanes(), vectors()>(x, gy, g, groups, cout, dw);
    });
    if (tiled) return;
  }
  const int64_t mp = L > 0 ? L * NV : mg;  // an accumulator row's width
  const DwTaps t0 = DwTaps::of(g, 0), t1 = DwTaps::of(g, 1), t2 = DwTaps::of(g, 2);
  const int64_t positions = g.n * g.out_plane();
  parallel_for(groups * taps, positions * cg * mg, [&](int64_t begin, int64_t end) {
    std::vector<T> acc_buf(cg * mp);
    T* __restrict acc = acc_buf.data();
    for (int64_t task = begin; task < end; ++task) {
      const int64_t grp = task / taps, t = task % taps;
      const int64_t a = t / (g.k[1] * g.k[2]), b = (t / g.k[2]) % g.k[1], c = t % g.k[2];
      std::fill(acc, acc + cg * mp, T(0));
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
              if constexpr (L > 0) {
                using Tile = GroupTile<T, L, NV>;
                typename Tile::V gv[NV] = {};
                Tile::load_first(gv, gp, mg);
                for (int64_t ci = 0; ci < cg; ++ci) {
                  T* ar = acc + ci * mp;
                  for (int v = 0; v < NV; ++v) Tile::store(ar + v * L, Tile::load(ar + v * L) + xp[ci] * gv[v]);
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
        for (int64_t j = 0; j < mg; ++j) dw[((grp * mg + j) * taps + t) * cg + ci] = acc[ci * mp + j];
      }
    }
  });
}

}  // namespace porter
