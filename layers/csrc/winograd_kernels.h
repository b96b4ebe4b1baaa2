// Winograd F(2x2, 3x3) convolution pieces (Lavin & Gray, 2015) for a stride-1, undilated 3x3 conv, float32.
//
// A 3x3 conv of a 4x4 input tile d gives a 2x2 output tile  Y = A^T [ (G g G^T) * (B^T d B) ] A ,  where `*` is
// elementwise over the 16 "positions" of the transformed 4x4 tile. Summed over input channels, each position is a
// matrix product, so the conv becomes three passes and 16 GEMMs (2.25x fewer multiply-adds than direct):
//   weight:  w (C_out, 3, 3, C_in)     -> U (16, C_in, C_out)    U[p] = (G g G^T)[p]
//   input:   x (N, H, W, C_in)         -> V (16, T, C_in)        V[p][t] = (B^T d_t B)[p], zero padding lo_h/lo_w
//   GEMMs:   M[p] = V[p] @ U[p]        -> M (16, T, C_out)       (mx.matmul, MLX's BLAS)
//   output:  M (and x, w)              -> y (N, Ho, Wo, C_out)   (A^T m_t A), edge tiles cropped
// Tile t = (n, i, j) covers outputs rows 2i..2i+1, cols 2j..2j+1 and reads input rows 2i-lo_h .. 2i-lo_h+3 (same
// for columns); T = N * ceil(Ho/2) * ceil(Wo/2). Position p = 4a + b: a transforms rows, b columns.
// The transforms are exact adds/subtracts and halvings; float32 results match a direct conv to ~1e-6 relative.
// Non-finite values would spread over a whole tile (inf - inf), so tiles whose outputs are not all finite are redone
// as a direct conv (winograd_output): torch's inf/NaN pattern, at a direct conv's cost for those tiles only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "parallel.h"
#include "simd.h"

namespace porter {

struct WinoGeometry {
  int64_t n = 0, h = 0, w = 0, c = 0;  // input (N, H, W, C)
  int64_t lo_h = 0, lo_w = 0;          // zero padding before the first row / column
  int64_t ho = 0, wo = 0;              // output rows / columns
  int64_t th() const { return (ho + 1) / 2; }
  int64_t tw() const { return (wo + 1) / 2; }
  int64_t tiles() const { return n * th() * tw(); }
  bool operator==(const WinoGeometry&) const = default;
};

namespace wino {

// The transforms' register tiles (16 vectors in input_tile) in the CPU's own vectors: a 64-byte type on an AVX2 CPU
// keeps them on the stack (simd.h).
typedef float f32v __attribute__((vector_size(kVectorBytes)));
constexpr int64_t kLanes = kVectorBytes / sizeof(float);

template <typename V>
inline V load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

template <typename V>
inline void store(float* p, V v) {
  std::memcpy(p, &v, sizeof(V));
}

// V = B^T d B for channels [c, c + lanes) of one tile; rows[r][k] points at input pixel (r, k) of the tile (a
// zero pixel outside the input); out[p * stride] receives position p.
template <typename V>
inline void input_tile(const float* const (&rows)[4][4], int64_t c, float* out, int64_t stride) {
  V m[4][4];
  for (int k = 0; k < 4; ++k) {
    V d0 = load<V>(rows[0][k] + c), d1 = load<V>(rows[1][k] + c);
    V d2 = load<V>(rows[2][k] + c), d3 = load<V>(rows[3][k] + c);
    m[0][k] = d0 - d2;
    m[1][k] = d1 + d2;
    m[2][k] = d2 - d1;
    m[3][k] = d1 - d3;
  }
  for (int a = 0; a < 4; ++a) {
    float* o = out + (4 * a) * stride + c;
    store<V>(o, m[a][0] - m[a][2]);
    store<V>(o + stride, m[a][1] + m[a][2]);
    store<V>(o + 2 * stride, m[a][2] - m[a][1]);
    store<V>(o + 3 * stride, m[a][1] - m[a][3]);
  }
}

// y = A^T m A for channels [c, c + lanes) of one tile: m[p * stride] is position p; dst[r][k] is output pixel (r, k)
// of the tile or null when it lies past the output's edge. Returns false when any of the four outputs (cropped ones
// too) is not finite: every position feeds one of them, so that catches a non-finite m anywhere in the tile.
template <typename V>
inline bool output_tile(const float* m, int64_t stride, int64_t c, float* const (&dst)[2][2]) {
  V s[2][4];
  for (int k = 0; k < 4; ++k) {
    V m0 = load<V>(m + k * stride + c), m1 = load<V>(m + (4 + k) * stride + c);
    V m2 = load<V>(m + (8 + k) * stride + c), m3 = load<V>(m + (12 + k) * stride + c);
    s[0][k] = m0 + m1 + m2;
    s[1][k] = m1 - m2 - m3;
  }
  V o[2][2];
  for (int r = 0; r < 2; ++r) {
    o[r][0] = s[r][0] + s[r][1] + s[r][2];
    o[r][1] = s[r][1] - s[r][2] - s[r][3];
    for (int k = 0; k < 2; ++k) {
      if (dst[r][k]) store<V>(dst[r][k] + c, o[r][k]);
    }
  }
  V z = (o[0][0] - o[0][0]) + (o[0][1] - o[0][1]) + (o[1][0] - o[1][0]) + (o[1][1] - o[1][1]);  // NaN if any is not
  float lanes[sizeof(V) / sizeof(float)];
  std::memcpy(lanes, &z, sizeof(V));
  for (float l : lanes) {
    if (l != 0.0f) return false;
  }
  return true;
}

}  // namespace wino

// x (N, H, W, C) contiguous -> v (16, T, C).
inline void winograd_input(const float* x, const WinoGeometry& g, float* v) {
  const int64_t C = g.c, th = g.th(), tw = g.tw(), T = g.tiles();
  const std::vector<float> zeros(static_cast<size_t>(C), 0.0f);
  parallel_for(T, 32 * C, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t n = t / (th * tw), i = (t / tw) % th, j = t % tw;
      const float* rows[4][4];
      for (int r = 0; r < 4; ++r) {
        const int64_t y = 2 * i - g.lo_h + r;
        for (int k = 0; k < 4; ++k) {
          const int64_t xc = 2 * j - g.lo_w + k;
          rows[r][k] = (y < 0 || y >= g.h || xc < 0 || xc >= g.w) ? zeros.data()
                                                                   : x + ((n * g.h + y) * g.w + xc) * C;
        }
      }
      float* out = v + t * C;
      int64_t c = 0;
      for (; c + wino::kLanes <= C; c += wino::kLanes) wino::input_tile<wino::f32v>(rows, c, out, T * C);
      for (; c < C; ++c) wino::input_tile<float>(rows, c, out, T * C);
    }
  });
}

// Output (oy, ox) channels [c0, c1) as a direct conv of x (N, H, W, C_in) and w (C_out, 3, 3, C_in), summed in
// float32 like any conv: used where the Winograd outputs are not finite, so that an inf or NaN reaches exactly the
// outputs whose window holds it (as in torch) instead of the whole tile, and an overflow in the transforms is redone.
inline void direct_outputs(const float* x, const float* w, const WinoGeometry& g, int64_t n, int64_t oy, int64_t ox,
                           int64_t c0, int64_t c1, float* out) {
  for (int64_t o = c0; o < c1; ++o) {
    float acc = 0.0f;
    for (int kh = 0; kh < 3; ++kh) {
      const int64_t iy = oy - g.lo_h + kh;
      if (iy < 0 || iy >= g.h) continue;
      for (int kw = 0; kw < 3; ++kw) {
        const int64_t ix = ox - g.lo_w + kw;
        if (ix < 0 || ix >= g.w) continue;
        const float* xp = x + ((n * g.h + iy) * g.w + ix) * g.c;
        const float* wp = w + ((o * 3 + kh) * 3 + kw) * g.c;
        for (int64_t ci = 0; ci < g.c; ++ci) acc += xp[ci] * wp[ci];
      }
    }
    out[o] = acc;
  }
}

// m (16, T, C_out) -> y (N, Ho, Wo, C_out); x and w are the conv's input and weight, for direct_outputs.
inline void winograd_output(const float* m, const float* x, const float* w, const WinoGeometry& g, int64_t co,
                            float* y) {
  const int64_t th = g.th(), tw = g.tw(), T = g.tiles();
  parallel_for(T, 32 * co, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t n = t / (th * tw), i = (t / tw) % th, j = t % tw;
      float* dst[2][2];
      for (int r = 0; r < 2; ++r) {
        for (int k = 0; k < 2; ++k) {
          const int64_t oy = 2 * i + r, ox = 2 * j + k;
          dst[r][k] = (oy < g.ho && ox < g.wo) ? y + ((n * g.ho + oy) * g.wo + ox) * co : nullptr;
        }
      }
      const float* src = m + t * co;
      auto redo = [&](int64_t c0, int64_t c1) {
        for (int r = 0; r < 2; ++r) {
          for (int k = 0; k < 2; ++k) {
            if (dst[r][k]) direct_outputs(x, w, g, n, 2 * i + r, 2 * j + k, c0, c1, dst[r][k]);
          }
        }
      };
      int64_t c = 0;
      for (; c + wino::kLanes <= co; c += wino::kLanes) {
        if (!wino::output_tile<wino::f32v>(src, T * co, c, dst)) redo(c, c + wino::kLanes);
      }
      for (; c < co; ++c) {
        if (!wino::output_tile<float>(src, T * co, c, dst)) redo(c, c + 1);
      }
    }
  });
}

// w (C_out, 3, 3, C_in) contiguous -> u (16, C_in, C_out): u[4a + b][ci][co] = sum_kl G[a][k] G[b][l] w[co][k][l][ci]
// with G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]]. Blocked 64 output x 16 input channels: rows of
// 16 input channels read into a [tap][c][o] tile, then for each input channel the transform runs along the output
// channels (vectorized) and writes 16 rows of 64 output channels straight into u. (An element-at-a-time walk wrote
// every value to a different cache line: 7.5 ms for a 256x3x3x256 weight; a 16 x 16 block with [o][tap][c] tiles
// wrote 64-byte rows a weight row apart: 89 ms for 1024x3x3x1024, paid on every call that caches nothing.)
inline void winograd_weight(const float* w, int64_t co, int64_t ci, float* u) {
  constexpr int64_t BO = 64, BC = 16;
  const int64_t ob = (co + BO - 1) / BO, cb = (ci + BC - 1) / BC;
  parallel_for(ob * cb, 16 * 9 * BO * BC, [&](int64_t begin, int64_t end) {
    float tile[9][BC][BO];  // [tap][c][o]
    float t[12][BO];        // G g: [3a + l][o]
    for (int64_t job = begin; job < end; ++job) {
      const int64_t o0 = (job / cb) * BO, c0 = (job % cb) * BC;
      const int64_t on = std::min(BO, co - o0), cn = std::min(BC, ci - c0);
      for (int64_t o = 0; o < on; ++o) {
        for (int k = 0; k < 9; ++k) {
          const float* src = w + ((o0 + o) * 9 + k) * ci + c0;
          for (int64_t c = 0; c < cn; ++c) tile[k][c][o] = src[c];
        }
      }
      for (int64_t c = 0; c < cn; ++c) {
        for (int l = 0; l < 3; ++l) {  // G g: along rows
          const float* g0 = tile[l][c];
          const float* g1 = tile[3 + l][c];
          const float* g2 = tile[6 + l][c];
          for (int64_t o = 0; o < on; ++o) {
            t[l][o] = g0[o];
            t[3 + l][o] = 0.5f * (g0[o] + g1[o] + g2[o]);
            t[6 + l][o] = 0.5f * (g0[o] - g1[o] + g2[o]);
            t[9 + l][o] = g2[o];
          }
        }
        for (int a = 0; a < 4; ++a) {  // (G g) G^T: along columns
          const float* t0 = t[3 * a];
          const float* t1 = t[3 * a + 1];
          const float* t2 = t[3 * a + 2];
          float* r0 = u + ((4 * a) * ci + c0 + c) * co + o0;
          float* r1 = r0 + ci * co;
          float* r2 = r1 + ci * co;
          float* r3 = r2 + ci * co;
          for (int64_t o = 0; o < on; ++o) {
            r0[o] = t0[o];
            r1[o] = 0.5f * (t0[o] + t1[o] + t2[o]);
            r2[o] = 0.5f * (t0[o] - t1[o] + t2[o]);
            r3[o] = t2[o];
          }
        }
      }
    }
  });
}

}  // namespace porter
