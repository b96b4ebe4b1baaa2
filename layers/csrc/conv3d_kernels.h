// Winograd F(2x2, 3x3) for 3-d convs with a (kD, 3, 3) kernel, stride 1, undilated, one group, float32: every frame
// of the input is transformed ONCE, and the kD depth taps are summed inside the GEMMs instead of as kD 2-d convs.
//
//   input:   x (N, D, H, W, C_in)            -> V (16, F, N, T, C_in)   F = D_out + kD - 1 padded frames, T tiles/frame
//   GEMMs:   M[p] = sum_j V[p, j : j + D_out] @ U[j][p]   -> M (16, D_out, N, T, C_out)   (mx.matmul / mx.addmm)
//   output:  M (and x, w)                    -> y (N, D_out, Ho, Wo, C_out)
// Frames run slowest (frame-major, then batch, then tile), so the rows tap j reads, frames j .. j + D_out - 1 of
// every batch element, are ONE contiguous block of V: the GEMMs read V in place, and the only temporaries are V and
// M (4x the input and output: a 2x2 output tile has 16 transformed values), never one output per tap.
// Frame f of V is input depth f - lo_d (all zero outside the input: depth padding is never materialized).
//
// Gradients (training): the input gradient is this same conv of the output gradient with the kernel flipped and its
// channels swapped; the weight gradient is computed in the Winograd domain, dU[j][p] = V[p, j : j + D_out]^T @ dM[p]
// with dM = the output transform's adjoint of the output gradient (output_adjoint), then dw = G^T dU G
// (weight_adjoint). Non-finite values: output tiles that are not finite are redone as a direct conv (as
// winograd_kernels.h does), and a weight gradient that is not finite is redone as a direct sum, so inf and NaN land
// where torch puts them.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "parallel.h"
#include "winograd_kernels.h"

namespace porter {

struct Wino3dGeometry {
  int64_t n = 0, d = 0, h = 0, w = 0, ci = 0;  // input (N, D, H, W, C_in)
  int64_t kd = 1;                              // depth taps
  int64_t lo_d = 0, lo_h = 0, lo_w = 0;        // zero padding before the first frame / row / column
  int64_t dout = 0, ho = 0, wo = 0;            // output frames / rows / columns
  int64_t block = 0;                           // the fused pass's rows per GEMM (conv3d_fused_kernels.h)
  // The direct redos (forward: wino3d_direct; weight gradient) add x * 0 / gy * 0 for the taps on the zero padding,
  // as torch's 3-d im2col does (a non-finite value there gives NaN); false: those taps add nothing, as torch's 2-d
  // kernels (an inf stays inf).
  bool padding_products = true;
  int64_t th() const { return (ho + 1) / 2; }
  int64_t tw() const { return (wo + 1) / 2; }
  int64_t tiles() const { return th() * tw(); }          // per frame
  int64_t frames() const { return dout + kd - 1; }       // transformed input frames
  int64_t in_rows() const { return frames() * n * tiles(); }
  int64_t out_rows() const { return dout * n * tiles(); }
  bool operator==(const Wino3dGeometry&) const = default;
};

// x (N, D, H, W, C) contiguous -> v (16, F, N, T, C).
inline void wino3d_input(const float* x, const Wino3dGeometry& g, float* v) {
  const int64_t C = g.ci, tw = g.tw(), T = g.tiles(), R = g.in_rows();
  const std::vector<float> zeros(static_cast<size_t>(C), 0.0f);
  parallel_for(R, 32 * C, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t f = t / (g.n * T), n = (t / T) % g.n, i = (t % T) / tw, j = t % tw;
      const int64_t z = f - g.lo_d;
      const bool empty = z < 0 || z >= g.d;
      const float* rows[4][4];
      for (int r = 0; r < 4; ++r) {
        const int64_t y = 2 * i - g.lo_h + r;
        for (int k = 0; k < 4; ++k) {
          const int64_t xc = 2 * j - g.lo_w + k;
          rows[r][k] = (empty || y < 0 || y >= g.h || xc < 0 || xc >= g.w)
                           ? zeros.data()
                           : x + (((n * g.d + z) * g.h + y) * g.w + xc) * C;
        }
      }
      float* out = v + t * C;
      int64_t c = 0;
      for (; c + wino::kLanes <= C; c += wino::kLanes) wino::input_tile<wino::f32v>(rows, c, out, R * C);
      for (; c < C; ++c) wino::input_tile<float>(rows, c, out, R * C);
    }
  });
}

// Output (n, o, oy, ox) channels [c0, c1) as a direct 3-d conv of x (N, D, H, W, C_in), w (C_out, kD, 3, 3, C_in).
// With g.padding_products, padding taps add 0 * w, as torch's 3-d conv does (its im2col holds the zeros): a
// non-finite weight makes every output of its channel NaN there too; without (a 2-d conv run as one frame), they add
// nothing, as torch's 2-d kernels.
inline void wino3d_direct(const float* x, const float* w, const Wino3dGeometry& g, int64_t n, int64_t o, int64_t oy,
                          int64_t ox, int64_t c0, int64_t c1, float* out) {
  for (int64_t co = c0; co < c1; ++co) {
    float acc = 0.0f;
    for (int64_t a = 0; a < g.kd; ++a) {
      const int64_t iz = o - g.lo_d + a;
      for (int kh = 0; kh < 3; ++kh) {
        const int64_t iy = oy - g.lo_h + kh;
        for (int kw = 0; kw < 3; ++kw) {
          const int64_t ix = ox - g.lo_w + kw;
          const float* wp = w + (((co * g.kd + a) * 3 + kh) * 3 + kw) * g.ci;
          if (iz < 0 || iz >= g.d || iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) {
            if (g.padding_products) {
              for (int64_t c = 0; c < g.ci; ++c) acc += 0.0f * wp[c];
            }
            continue;
          }
          const float* xp = x + (((n * g.d + iz) * g.h + iy) * g.w + ix) * g.ci;
          for (int64_t c = 0; c < g.ci; ++c) acc += xp[c] * wp[c];
        }
      }
    }
    out[co] = acc;
  }
}

// m (16, D_out, N, T, C_out) -> y (N, D_out, Ho, Wo, C_out); x and w are the conv's input and weight (direct redo).
inline void wino3d_output(const float* m, const float* x, const float* w, const Wino3dGeometry& g, int64_t co,
                          float* y) {
  const int64_t tw = g.tw(), T = g.tiles(), R = g.out_rows();
  parallel_for(R, 32 * co, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / (g.n * T), n = (t / T) % g.n, i = (t % T) / tw, j = t % tw;
      float* dst[2][2];
      for (int r = 0; r < 2; ++r) {
        for (int k = 0; k < 2; ++k) {
          const int64_t oy = 2 * i + r, ox = 2 * j + k;
          dst[r][k] = (oy < g.ho && ox < g.wo) ? y + (((n * g.dout + o) * g.ho + oy) * g.wo + ox) * co : nullptr;
        }
      }
      const float* src = m + t * co;
      auto redo = [&](int64_t c0, int64_t c1) {
        for (int r = 0; r < 2; ++r) {
          for (int k = 0; k < 2; ++k) {
            if (dst[r][k]) wino3d_direct(x, w, g, n, o, 2 * i + r, 2 * j + k, c0, c1, dst[r][k]);
          }
        }
      };
      int64_t c = 0;
      for (; c + wino::kLanes <= co; c += wino::kLanes) {
        if (!wino::output_tile<wino::f32v>(src, R * co, c, dst)) redo(c, c + wino::kLanes);
      }
      for (; c < co; ++c) {
        if (!wino::output_tile<float>(src, R * co, c, dst)) redo(c, c + 1);
      }
    }
  });
}

// The output transform's adjoint: gy (N, D_out, Ho, Wo, C_out) -> dm (16, D_out, N, T, C_out),
// dm[4a + b] = sum_rk A[a][r] A[b][k] gy_tile[r][k] with A = [[1, 0], [1, 1], [1, -1], [0, -1]] (zero past the edge).
template <typename V>
inline void wino3d_adjoint_tile(const float* const (&src)[2][2], int64_t c, float* out, int64_t stride) {
  V gv[2][2];
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < 2; ++k) gv[r][k] = wino::load<V>(src[r][k] + c);
  }
  V s[4][2];
  for (int k = 0; k < 2; ++k) {
    s[0][k] = gv[0][k];
    s[1][k] = gv[0][k] + gv[1][k];
    s[2][k] = gv[0][k] - gv[1][k];
    s[3][k] = -gv[1][k];
  }
  for (int a = 0; a < 4; ++a) {
    float* o = out + (4 * a) * stride + c;
    wino::store<V>(o, s[a][0]);
    wino::store<V>(o + stride, s[a][0] + s[a][1]);
    wino::store<V>(o + 2 * stride, s[a][0] - s[a][1]);
    wino::store<V>(o + 3 * stride, -s[a][1]);
  }
}

inline void wino3d_output_adjoint(const float* gy, const Wino3dGeometry& g, int64_t co, float* dm) {
  const int64_t tw = g.tw(), T = g.tiles(), R = g.out_rows();
  const std::vector<float> zeros(static_cast<size_t>(co), 0.0f);
  parallel_for(R, 32 * co, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / (g.n * T), n = (t / T) % g.n, i = (t % T) / tw, j = t % tw;
      const float* src[2][2];
      for (int r = 0; r < 2; ++r) {
        for (int k = 0; k < 2; ++k) {
          const int64_t oy = 2 * i + r, ox = 2 * j + k;
          src[r][k] = (oy < g.ho && ox < g.wo) ? gy + (((n * g.dout + o) * g.ho + oy) * g.wo + ox) * co
                                               : zeros.data();
        }
      }
      float* out = dm + t * co;
      int64_t c = 0;
      for (; c + wino::kLanes <= co; c += wino::kLanes) wino3d_adjoint_tile<wino::f32v>(src, c, out, R * co);
      for (; c < co; ++c) wino3d_adjoint_tile<float>(src, c, out, R * co);
    }
  });
}

// The weight gradient as a direct sum (used when the Winograd one is not finite): dw (C_out, kD, 3, 3, C_in).
inline void wino3d_weight_grad_direct(const float* x, const float* gy, const Wino3dGeometry& g, int64_t co,
                                      float* dw) {
  const int64_t taps = g.kd * 9, C = g.ci;
  parallel_for(co * taps, g.n * g.dout * g.ho * g.wo * C, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(static_cast<size_t>(C));
    for (int64_t task = begin; task < end; ++task) {
      const int64_t o_ch = task / taps, t = task % taps, a = t / 9, kh = (t / 3) % 3, kw = t % 3;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t n = 0; n < g.n; ++n) {
        for (int64_t o = 0; o < g.dout; ++o) {
          const int64_t iz = o - g.lo_d + a;
          for (int64_t oy = 0; oy < g.ho; ++oy) {
            const int64_t iy = oy - g.lo_h + kh;
            for (int64_t ox = 0; ox < g.wo; ++ox) {
              const int64_t ix = ox - g.lo_w + kw;
              const float gv = gy[(((n * g.dout + o) * g.ho + oy) * g.wo + ox) * co + o_ch];
              if (iz < 0 || iz >= g.d || iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) {
                if (g.padding_products && !std::isfinite(gv)) {  // gv * a padding zero, as torch's 3-d im2col
                  for (int64_t c = 0; c < C; ++c) acc[c] += gv * 0.0f;
                }
                continue;
              }
              const float* xp = x + (((n * g.d + iz) * g.h + iy) * g.w + ix) * C;
              for (int64_t c = 0; c < C; ++c) acc[c] += gv * xp[c];
            }
          }
        }
      }
      std::memcpy(dw + (o_ch * taps + t) * C, acc.data(), C * sizeof(float));
    }
  });
}

// du (kD, 16, C_in, C_out) -> dw (C_out, kD, 3, 3, C_in): dw[co][a][k][l][ci] = sum_pq G[p][k] G[q][l] du[a][4p+q][ci][co]
// with G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]] (the weight transform's adjoint); redone as a
// direct sum of x (N, D, H, W, C_in) and gy (N, D_out, Ho, Wo, C_out) when any entry is not finite.
inline void wino3d_weight_adjoint(const float* du, const float* x, const float* gy, const Wino3dGeometry& g,
                                  int64_t co, float* dw) {
  const int64_t C = g.ci, plane = C * co;
  std::atomic<bool> finite{true};
  parallel_for(g.kd * C, 16 * 9 * co, [&](int64_t begin, int64_t end) {
    bool ok = true;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t a = task / C, c = task % C;
      const float* src = du + a * 16 * plane + c * co;
      for (int64_t o = 0; o < co; ++o) {
        float u[4][4], t[3][4];
        for (int p = 0; p < 16; ++p) u[p / 4][p % 4] = src[p * plane + o];
        for (int q = 0; q < 4; ++q) {  // G^T along the first index
          t[0][q] = u[0][q] + 0.5f * (u[1][q] + u[2][q]);
          t[1][q] = 0.5f * (u[1][q] - u[2][q]);
          t[2][q] = 0.5f * (u[1][q] + u[2][q]) + u[3][q];
        }
        float* out = dw + ((o * g.kd + a) * 9) * C + c;
        for (int k = 0; k < 3; ++k) {  // then along the second
          const float v0 = t[k][0] + 0.5f * (t[k][1] + t[k][2]);
          const float v1 = 0.5f * (t[k][1] - t[k][2]);
          const float v2 = 0.5f * (t[k][1] + t[k][2]) + t[k][3];
          out[(3 * k) * C] = v0;
          out[(3 * k + 1) * C] = v1;
          out[(3 * k + 2) * C] = v2;
          ok = ok && std::isfinite(v0) && std::isfinite(v1) && std::isfinite(v2);
        }
      }
    }
    if (!ok) finite.store(false);
  });
  if (!finite.load()) wino3d_weight_grad_direct(x, gy, g, co, dw);
}

// w (C_out, kD, 3, 3, C_in) contiguous -> u (kD, 16, C_in, C_out): u[a][4p + q][ci][co] = (G g G^T)[p][q] of the 3x3
// tap g = w[co][a][:, :][ci] (G as in winograd_weight). Blocks of 16 x 16 channels through a local buffer, so both
// the reads (along C_in) and the writes (along C_out) are contiguous runs.
inline void wino3d_weight(const float* w, int64_t co, int64_t kd, int64_t ci, float* u) {
  constexpr int64_t B = 16;
  const int64_t cib = (ci + B - 1) / B, cob = (co + B - 1) / B;
  parallel_for(kd * cib * cob, 16 * 9 * B * B, [&](int64_t begin, int64_t end) {
    std::vector<float> buf(16 * B * B);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t a = task / (cib * cob), c0 = ((task / cob) % cib) * B, o0 = (task % cob) * B;
      const int64_t nc = std::min(B, ci - c0), no = std::min(B, co - o0);
      for (int64_t o = 0; o < no; ++o) {
        const float* src = w + ((o0 + o) * kd + a) * 9 * ci + c0;
        for (int64_t c = 0; c < nc; ++c) {
          float g[3][3], t[4][3];
          for (int k = 0; k < 3; ++k) {
            for (int l = 0; l < 3; ++l) g[k][l] = src[(3 * k + l) * ci + c];
          }
          for (int l = 0; l < 3; ++l) {
            t[0][l] = g[0][l];
            t[1][l] = 0.5f * (g[0][l] + g[1][l] + g[2][l]);
            t[2][l] = 0.5f * (g[0][l] - g[1][l] + g[2][l]);
            t[3][l] = g[2][l];
          }
          for (int p = 0; p < 4; ++p) {
            float* out = buf.data() + ((4 * p) * B + c) * B + o;
            out[0] = t[p][0];
            out[B * B] = 0.5f * (t[p][0] + t[p][1] + t[p][2]);
            out[2 * B * B] = 0.5f * (t[p][0] - t[p][1] + t[p][2]);
            out[3 * B * B] = t[p][2];
          }
        }
      }
      for (int64_t p = 0; p < 16; ++p) {
        for (int64_t c = 0; c < nc; ++c) {
          std::memcpy(u + ((a * 16 + p) * ci + c0 + c) * co + o0, buf.data() + (p * B + c) * B, no * sizeof(float));
        }
      }
    }
  });
}

}  // namespace porter
