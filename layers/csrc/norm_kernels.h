// LayerNorm over the last axis and GroupNorm over channels-last data, forward and backward, for MLX's CPU backend:
// a few multi-threaded, channel-vectorized passes where MLX runs a chain of single-threaded reductions and
// elementwise ops (LayerNorm (1,56,56,96): MLX 0.78 ms, torch 0.15 ms).
//
// Layouts: LayerNorm takes x as row-major (rows, C) and normalises each row; GroupNorm takes (N, S, C) (S: the
// flattened spatial positions) with G groups of C / G consecutive channels, each (n, g) normalised over S x C/G.
// Statistics are two-pass (mean, then the mean of squared deviations: no E[x^2] - E[x]^2 cancellation), summed in
// float lanes and combined in double; float16/bfloat16 are computed in float32 and rounded once (torch's CPU
// kernels do the same), float64 in double. Weight and bias are given in the compute type A (float or double) and may
// be null (no affine). The backward recomputes the statistics (a row is in L1 for LayerNorm; one extra pass for
// GroupNorm) and returns dx plus dweight/dbias in A (summed over the batch as torch does).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "half_rows.h"
#include "parallel.h"
#include "simd.h"

namespace porter {

template <typename T>
using NormAcc = std::conditional_t<std::is_same_v<T, double>, double, float>;

constexpr int64_t kNormLanes = 16;

// The total of kNormLanes partial sums as a halving tree (vector shuffles, not 16 scalar adds: with LayerNorm's short
// rows the per-row reductions are most of the time).
template <typename A>
inline double lane_total(A* lanes) {
  for (int64_t w = kNormLanes / 2; w >= 1; w /= 2) {
    for (int64_t k = 0; k < w; ++k) lanes[k] += lanes[k + w];
  }
  return static_cast<double>(lanes[0]);
}

// sum of n values in kNormLanes partial lanes (so the loop vectorizes without reassociation flags)
template <typename A, typename F>
inline double lane_sum(int64_t n, F&& value) {
  A lanes[kNormLanes] = {};
  const int64_t full = n - n % kNormLanes;
  for (int64_t i = 0; i < full; i += kNormLanes) {
    for (int64_t k = 0; k < kNormLanes; ++k) lanes[k] += value(i + k);
  }
  for (int64_t i = full; i < n; ++i) lanes[0] += value(i);
  return lane_total(lanes);
}

// Splits `rows` rows of `width` elements into chunks whose partial sums are combined in a fixed order: one chunk
// when the work is too small to share, else 16 whatever the thread count (so results do not depend on it).
inline int64_t norm_chunks(int64_t rows, int64_t width) {
  if (rows * width < (int64_t{1} << 18)) return 1;
  return std::min<int64_t>(rows, 16);
}

// -------------------------------------------------------------------------------------------------- LayerNorm
// One row: its values as A (a copy for 16-bit T), mean and 1/sqrt(var + eps).
template <typename T, typename A>
inline const A* ln_row(const T* xr, int64_t C, A eps, A* buf, A& mean, A& rstd) {
  const A* v;
  if constexpr (std::is_same_v<T, A>) {
    v = xr;
  } else if constexpr (std::is_same_v<A, float>) {
    widen_row(xr, C, buf);  // 16-bit rows (half_rows.h)
    v = buf;
  } else {
    for (int64_t c = 0; c < C; ++c) buf[c] = static_cast<A>(xr[c]);
    v = buf;
  }
  const A m = static_cast<A>(lane_sum<A>(C, [&](int64_t c) { return v[c]; }) / static_cast<double>(C));
  const double var = lane_sum<A>(C, [&](int64_t c) { const A d = v[c] - m; return d * d; }) / static_cast<double>(C);
  mean = m;
  rstd = static_cast<A>(1.0 / std::sqrt(var + static_cast<double>(eps)));
  return v;
}

// y = (v - mean) rstd w + b over one row (w, b optional).
template <typename T, typename A>
inline void ln_output(const A* v, int64_t C, A mean, A rstd, const A* w, const A* b, T* yr) {
  if (w && b) {
    for (int64_t c = 0; c < C; ++c) yr[c] = static_cast<T>((v[c] - mean) * rstd * w[c] + b[c]);
  } else if (w) {
    for (int64_t c = 0; c < C; ++c) yr[c] = static_cast<T>((v[c] - mean) * rstd * w[c]);
  } else if (b) {
    for (int64_t c = 0; c < C; ++c) yr[c] = static_cast<T>((v[c] - mean) * rstd + b[c]);
  } else {
    for (int64_t c = 0; c < C; ++c) yr[c] = static_cast<T>((v[c] - mean) * rstd);
  }
}

// Float rows, kLnBlock at a time. One row's statistics are two chains of dependent vector adds, each ending in a
// reduction tree and a few double operations (a divide, a square root): one row at a time left the core waiting on
// those latencies ((3136, 96), Swin-T's first stage: 88 ns a row, 0.9 ns an element). Four independent rows
// interleaved overlap them. Lanes (kNormLanes, the tail into lane 0), the halving tree and the double steps are
// lane_sum's and ln_row's, so the results are the same bits as the one-row path.
using NormVec = float __attribute__((vector_size(kVectorBytes)));
constexpr int kNormVecLanes = kVectorBytes / 4;
static_assert(kNormLanes % kNormVecLanes == 0, "a row's lanes are whole vectors");
constexpr int kNormVecs = kNormLanes / kNormVecLanes;
constexpr int kLnBlock = 4;

inline NormVec load_norm_vec(const float* p) {
  NormVec v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

// out[i] = sum over c of value(i, v[i][c]) for R rows (value takes a NormVec or a float), in lane_sum's order.
template <int R, typename F>
inline void lane_sums_rows(const float* const* v, int64_t C, F&& value, double* out) {
  NormVec acc[R][kNormVecs];
  for (int i = 0; i < R; ++i) {
    for (int k = 0; k < kNormVecs; ++k) acc[i][k] = NormVec{};
  }
  const int64_t full = C - C % kNormLanes;
  for (int64_t c = 0; c < full; c += kNormLanes) {
    for (int i = 0; i < R; ++i) {
      for (int k = 0; k < kNormVecs; ++k) acc[i][k] += value(i, load_norm_vec(v[i] + c + k * kNormVecLanes));
    }
  }
  for (int i = 0; i < R; ++i) {
    float lanes[kNormLanes];
    __builtin_memcpy(lanes, acc[i], sizeof lanes);
    for (int64_t c = full; c < C; ++c) lanes[0] += value(i, v[i][c]);
    out[i] = lane_total(lanes);
  }
}

template <typename T, int R>
inline void ln_rows_block(const T* x, int64_t r0, int64_t C, const float* w, const float* b, float eps, float* buf,
                          T* y) {
  const float* v[R];
  for (int i = 0; i < R; ++i) {
    const T* xr = x + (r0 + i) * C;
    if constexpr (std::is_same_v<T, float>) {
      v[i] = xr;
    } else {
      float* o = buf + i * C;
      widen_row(xr, C, o);
      v[i] = o;
    }
  }
  double sums[R];
  float mean[R], rstd[R];
  lane_sums_rows<R>(v, C, [](int, auto a) { return a; }, sums);
  for (int i = 0; i < R; ++i) mean[i] = static_cast<float>(sums[i] / static_cast<double>(C));
  lane_sums_rows<R>(v, C, [&](int i, auto a) { const auto d = a - mean[i]; return d * d; }, sums);
  for (int i = 0; i < R; ++i) {
    const double var = sums[i] / static_cast<double>(C);
    rstd[i] = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps)));
  }
  for (int i = 0; i < R; ++i) {
    if constexpr (std::is_same_v<T, float>) {
      ln_output(v[i], C, mean[i], rstd[i], w, b, y + (r0 + i) * C);
    } else {  // in float over the row's own buffer, then rounded in one vector pass (half_rows.h)
      float* o = buf + i * C;
      ln_output(v[i], C, mean[i], rstd[i], w, b, o);
      narrow_row(o, C, y + (r0 + i) * C);
    }
  }
}

template <typename T>
void layer_norm(const T* x, int64_t rows, int64_t C, const NormAcc<T>* w, const NormAcc<T>* b, NormAcc<T> eps,
                T* y) {
  using A = NormAcc<T>;
  if constexpr (std::is_same_v<A, float>) {
    parallel_for(rows, C * 4, [&](int64_t begin, int64_t end) {
      std::vector<float> buf(std::is_same_v<T, float> ? 0 : kLnBlock * C);
      int64_t r = begin;
      for (; r + kLnBlock <= end; r += kLnBlock) ln_rows_block<T, kLnBlock>(x, r, C, w, b, eps, buf.data(), y);
      for (; r < end; ++r) ln_rows_block<T, 1>(x, r, C, w, b, eps, buf.data(), y);
    });
  } else {
    parallel_for(rows, C * 4, [&](int64_t begin, int64_t end) {
      std::vector<A> buf(std::is_same_v<T, A> ? 0 : C);
      for (int64_t r = begin; r < end; ++r) {
        A mean, rstd;
        const A* v = ln_row(x + r * C, C, eps, buf.data(), mean, rstd);
        ln_output(v, C, mean, rstd, w, b, y + r * C);
      }
    });
  }
}

// dx = rstd (g w - mean(g w) - xhat mean(g w xhat)) per row; dw = sum over rows of g xhat, db = sum of g.
template <typename T, bool Weighted>
void layer_norm_grad_rows(const T* x, const T* g, int64_t r0, int64_t r1, int64_t C, const NormAcc<T>* __restrict w,
                          NormAcc<T> eps, T* dx, NormAcc<T>* __restrict pw, NormAcc<T>* __restrict pb,
                          NormAcc<T>* __restrict buf, NormAcc<T>* __restrict gbuf) {
  using A = NormAcc<T>;
  for (int64_t r = r0; r < r1; ++r) {
    A mean, rstd;
    const A* __restrict v = ln_row(x + r * C, C, eps, buf, mean, rstd);
    const A* __restrict gv;
    if constexpr (std::is_same_v<T, A>) {
      gv = g + r * C;
    } else {
      if constexpr (std::is_same_v<A, float>) {
        widen_row(g + r * C, C, gbuf);
      } else {
        for (int64_t c = 0; c < C; ++c) gbuf[c] = static_cast<A>(g[r * C + c]);
      }
      gv = gbuf;
    }
    // sums of g w and of g w (x - mean): one lane sum each (one loop filling two lane arrays ran 3x slower: GCC 12
    // kept them in memory)
    const double sa = lane_sum<A>(C, [&](int64_t c) { return Weighted ? gv[c] * w[c] : gv[c]; });
    const double sb = lane_sum<A>(C, [&](int64_t c) { return (Weighted ? gv[c] * w[c] : gv[c]) * (v[c] - mean); });
    const A a = static_cast<A>(sa / static_cast<double>(C));
    const A bb = static_cast<A>(sb * static_cast<double>(rstd) / static_cast<double>(C));
    T* __restrict dr = dx + r * C;
    for (int64_t c = 0; c < C; ++c) {
      const A xh = (v[c] - mean) * rstd;
      const A gw = Weighted ? gv[c] * w[c] : gv[c];
      dr[c] = static_cast<T>(rstd * (gw - a - xh * bb));
      pw[c] += gv[c] * xh;
      pb[c] += gv[c];
    }
  }
}

template <typename T>
void layer_norm_grad(const T* x, const T* g, int64_t rows, int64_t C, const NormAcc<T>* w, NormAcc<T> eps, T* dx,
                     NormAcc<T>* dw, NormAcc<T>* db) {
  using A = NormAcc<T>;
  const int64_t chunks = norm_chunks(rows, C);
  std::vector<A> part_w(chunks * C, A(0)), part_b(chunks * C, A(0));
  parallel_for(chunks, rows / chunks * C * 8, [&](int64_t begin, int64_t end) {
    std::vector<A> buf(C), gbuf(C);
    for (int64_t k = begin; k < end; ++k) {
      const int64_t r0 = rows * k / chunks, r1 = rows * (k + 1) / chunks;
      A* pw = part_w.data() + k * C;
      A* pb = part_b.data() + k * C;
      if (w) {
        layer_norm_grad_rows<T, true>(x, g, r0, r1, C, w, eps, dx, pw, pb, buf.data(), gbuf.data());
      } else {
        layer_norm_grad_rows<T, false>(x, g, r0, r1, C, w, eps, dx, pw, pb, buf.data(), gbuf.data());
      }
    }
  });
  for (int64_t c = 0; c < C; ++c) {
    double sw = 0, sb = 0;
    for (int64_t k = 0; k < chunks; ++k) sw += part_w[k * C + c], sb += part_b[k * C + c];
    dw[c] = static_cast<A>(sw);
    db[c] = static_cast<A>(sb);
  }
}

// -------------------------------------------------------------------------------------------------- GroupNorm
// Per-(n, c) sums over the S positions of sample n: add_position(n, s, acc) adds position (n, s)'s C values to the
// accumulators acc[0..C) (in A). Each task (a block of positions, 32 Ki elements) sums kSumChunk positions at a time
// in A and those partial sums in double, the tasks combined in double: out[n * C + c]. A float accumulator over n
// terms errs by up to n ulp; one per task (8192 positions for 4 channels) put BasicUNet's gradients 0.1-1% off
// torch's (its cascade sums) on 148 Ki-position volumes; 256 positions keep a float partial sum within ~1.5e-5 of
// exact.
constexpr int64_t kSumChunk = 256;
template <typename A, typename F>
void channel_sums(int64_t N, int64_t S, int64_t C, F&& add_position, std::vector<double>& out) {
  const int64_t per = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(C, 1));  // positions per task
  const int64_t splits = (S + per - 1) / per, tasks = N * splits;
  std::vector<double> part(tasks * C, 0.0);
  parallel_for(tasks, std::min(per, S) * C * 2, [&](int64_t begin, int64_t end) {
    std::vector<A> acc(C);
    for (int64_t t = begin; t < end; ++t) {
      const int64_t n = t / splits, s0 = (t % splits) * per, s1 = std::min(S, s0 + per);
      double* p = part.data() + t * C;
      for (int64_t b = s0; b < s1; b += kSumChunk) {
        std::fill(acc.begin(), acc.end(), A(0));
        for (int64_t s = b; s < std::min(s1, b + kSumChunk); ++s) add_position(n, s, acc.data());
        for (int64_t c = 0; c < C; ++c) p[c] += acc[c];
      }
    }
  });
  out.assign(N * C, 0.0);
  for (int64_t t = 0; t < tasks; ++t) {
    double* o = out.data() + (t / splits) * C;
    const double* p = part.data() + t * C;
    for (int64_t c = 0; c < C; ++c) o[c] += p[c];
  }
}

// Per-(n, c) sums of v over the positions (channel_sums of the values themselves).
template <typename T>
void value_sums(const T* v, int64_t N, int64_t S, int64_t C, std::vector<double>& out) {
  using A = NormAcc<T>;
  channel_sums<A>(N, S, C, [&](int64_t n, int64_t s, A* __restrict acc) {
    const T* vs = v + (n * S + s) * C;
    for (int64_t c = 0; c < C; ++c) acc[c] += static_cast<A>(vs[c]);
  }, out);
}

// mean and rstd per (n, g), and the same broadcast per (n, c) in A for the vector loops.
template <typename T>
void group_stats(const T* x, int64_t N, int64_t S, int64_t C, int64_t G, double eps, std::vector<double>& mean,
                 std::vector<double>& rstd, std::vector<NormAcc<T>>& mean_c, std::vector<double>* var = nullptr) {
  using A = NormAcc<T>;
  const int64_t Cg = C / G;
  const double count = static_cast<double>(S) * static_cast<double>(Cg);
  std::vector<double> sums;
  value_sums(x, N, S, C, sums);
  mean.assign(N * G, 0.0);
  rstd.assign(N * G, 0.0);
  mean_c.assign(N * C, A(0));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) mean[n * G + c / Cg] += sums[n * C + c];
    for (int64_t q = 0; q < G; ++q) mean[n * G + q] /= count;
    for (int64_t c = 0; c < C; ++c) mean_c[n * C + c] = static_cast<A>(mean[n * G + c / Cg]);
  }
  channel_sums<A>(N, S, C, [&](int64_t n, int64_t s, A* __restrict acc) {
    const T* xs = x + (n * S + s) * C;
    const A* m = mean_c.data() + n * C;
    for (int64_t c = 0; c < C; ++c) {
      const A d = static_cast<A>(xs[c]) - m[c];
      acc[c] += d * d;
    }
  }, sums);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) rstd[n * G + c / Cg] += sums[n * C + c];
    for (int64_t q = 0; q < G; ++q) {
      const double v = rstd[n * G + q] / count;
      if (var) (*var)[n * G + q] = v;
      rstd[n * G + q] = 1.0 / std::sqrt(v + eps);
    }
  }
}

// One pass over (n, s): out[n, s, c] = (x[n, s, c] - m[n, c]) * p[n, c] + q[n, c], plus g[n, s, c] * r[n, c] when g
// is given (the input gradient). Centred first in both: a group of one value gives exactly the bias, and a large mean
// cancels before the scaling (folded, x * p + (b - m * p) missed the bias by the products' roundings, as torch's CPU
// forward kernel, which folds too, misses it by its own; the folded gradient x * P + Q lost ~1e-3 of a batch norm's
// input gradient over a 1x1 map with a large mean, where torch's backward, centred, does not).
template <typename T>
void apply_per_channel(const T* x, const T* g, int64_t N, int64_t S, int64_t C, const NormAcc<T>* m,
                       const NormAcc<T>* p, const NormAcc<T>* q, const NormAcc<T>* r, T* out) {
  using A = NormAcc<T>;
  parallel_for(N * S, C * 2, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t n = i / S;
      const A *pn = p + n * C, *qn = q + n * C;
      const A* mn = m + n * C;
      const T* xi = x + i * C;
      T* oi = out + i * C;
      if (g) {
        const T* gi = g + i * C;
        const A* rn = r + n * C;
        for (int64_t c = 0; c < C; ++c) {
          oi[c] = static_cast<T>(static_cast<A>(gi[c]) * rn[c] + (static_cast<A>(xi[c]) - mn[c]) * pn[c] + qn[c]);
        }
      } else {
        for (int64_t c = 0; c < C; ++c) oi[c] = static_cast<T>((static_cast<A>(xi[c]) - mn[c]) * pn[c] + qn[c]);
      }
    }
  });
}

// y = (x - mean) (rstd w) + b per (n, c); the per-(n, g) mean and biased variance written to mean_out / var_out when
// given (batch norm's batch statistics: one group per channel).
template <typename T>
void group_norm(const T* x, int64_t N, int64_t S, int64_t C, int64_t G, const NormAcc<T>* w, const NormAcc<T>* b,
                NormAcc<T> eps, T* y, NormAcc<T>* mean_out = nullptr, NormAcc<T>* var_out = nullptr) {
  using A = NormAcc<T>;
  std::vector<double> mean, rstd, var(var_out ? N * G : 0);
  std::vector<A> mean_c, scale(N * C), shift(N * C);
  group_stats(x, N, S, C, G, static_cast<double>(eps), mean, rstd, mean_c, var_out ? &var : nullptr);
  for (int64_t i = 0; mean_out && i < N * G; ++i) mean_out[i] = static_cast<A>(mean[i]);
  for (int64_t i = 0; var_out && i < N * G; ++i) var_out[i] = static_cast<A>(var[i]);
  const int64_t Cg = C / G;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      scale[n * C + c] = static_cast<A>(rstd[n * G + c / Cg] * (w ? static_cast<double>(w[c]) : 1.0));
      shift[n * C + c] = b ? b[c] : A(0);
    }
  }
  apply_per_channel<T>(x, nullptr, N, S, C, mean_c.data(), scale.data(), shift.data(), nullptr, y);
}

// With xhat = (x - mean) rstd, dxhat = g w: dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) per (n, g),
// i.e. dx = g (rstd w) + (x - mean) P + Q with per-(n, g) P, Q from the per-(n, c) sums of g and g (x - mean);
// dw = sum_n rstd (sum(g x) - mean sum(g)), db = sum_n sum(g).
template <typename T>
void group_norm_grad(const T* x, const T* g, int64_t N, int64_t S, int64_t C, int64_t G, const NormAcc<T>* w,
                     NormAcc<T> eps, T* dx, NormAcc<T>* dw, NormAcc<T>* db) {
  using A = NormAcc<T>;
  std::vector<double> mean, rstd, sg, sgx;
  std::vector<A> mean_c;
  group_stats(x, N, S, C, G, static_cast<double>(eps), mean, rstd, mean_c);
  // sums of g and of g * (x - mean) (centred: less cancellation than g * x - mean * g)
  value_sums(g, N, S, C, sg);
  channel_sums<A>(N, S, C, [&](int64_t n, int64_t s, A* __restrict acc) {
    const T* xs = x + (n * S + s) * C;
    const T* gs = g + (n * S + s) * C;
    const A* m = mean_c.data() + n * C;
    for (int64_t c = 0; c < C; ++c) acc[c] += static_cast<A>(gs[c]) * (static_cast<A>(xs[c]) - m[c]);
  }, sgx);
  const int64_t Cg = C / G;
  const double count = static_cast<double>(S) * static_cast<double>(Cg);
  std::vector<A> P(N * C), Q(N * C), R(N * C);
  std::vector<double> dwd(C, 0.0), dbd(C, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t q = 0; q < G; ++q) {
      const double rs = rstd[n * G + q];
      double a = 0, bb = 0;  // sums over the group of dxhat and dxhat * xhat
      for (int64_t c = q * Cg; c < (q + 1) * Cg; ++c) {
        const double wc = w ? static_cast<double>(w[c]) : 1.0;
        a += wc * sg[n * C + c];
        bb += wc * sgx[n * C + c] * rs;
        dwd[c] += sgx[n * C + c] * rs;
        dbd[c] += sg[n * C + c];
      }
      a /= count;
      bb /= count;
      for (int64_t c = q * Cg; c < (q + 1) * Cg; ++c) {
        const double wc = w ? static_cast<double>(w[c]) : 1.0;
        R[n * C + c] = static_cast<A>(rs * wc);
        P[n * C + c] = static_cast<A>(-rs * rs * bb);
        Q[n * C + c] = static_cast<A>(-rs * a);
      }
    }
  }
  for (int64_t c = 0; c < C; ++c) dw[c] = static_cast<A>(dwd[c]), db[c] = static_cast<A>(dbd[c]);
  apply_per_channel<T>(x, g, N, S, C, mean_c.data(), P.data(), Q.data(), R.data(), dx);
}

}  // namespace porter
