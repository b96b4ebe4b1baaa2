// Transcendental activations (exp, sigmoid, SiLU, tanh, GELU exact and tanh-approximate), their gradients, and
// softmax over any axis, for MLX's CPU backend: one multi-threaded pass each, vectorized by the compiler.
//
// MLX's CPU unary ops call the scalar libm function per element on one thread (15-35x torch's time). Here every
// float function is branch-free arithmetic (Cephes-style range reduction and polynomials, selects for inf/NaN), so
// GCC/Clang vectorize the loops at -O3 -march=native -fno-trapping-math (checked with -fopt-info-vec: std::floor and
// some nested selects stop GCC 12, hence the forms used below). Accuracy, float32: exp ~1 ulp (Cephes expf), tanh <= ~3 ulp,
// GELU's erfc Numerical-Recipes form with one exponential (<= ~8 ulp, also in the tails, where torch's 1 + erf
// cancels);
// float16/bfloat16 are computed in float32 and rounded once (torch's CPU kernels do the same); float64 uses libm.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "exp_poly.h"
#include "parallel.h"

namespace porter {

enum class Act : int { exp = 0, sigmoid, silu, tanh, gelu, gelu_tanh, hardswish, hardsigmoid };

// ------------------------------------------------------------------------------------------------ float32 pieces
// e^x's range reduction and polynomial for a finite x in [-104, 88.8] (callers clamp): exp_poly.h's Cephes arithmetic,
// shared with softmax_kernels.h's vector rows. exp_f and exp_nonpos_f add only their own range and NaN handling.
inline float exp_core(float xc) { return cephes_exp_core<float, int32_t>(xc); }

// e^x: overflow -> inf, underflow -> 0, NaN stays NaN.
inline float exp_f(float x) {
  float xc = x < -104.0f ? -104.0f : (x > 88.8f ? 88.8f : x);
  xc = x != x ? 0.0f : xc;
  float y = exp_core(xc);
  y = x > 88.72283905206835f ? std::numeric_limits<float>::infinity() : y;
  y = x < -103.97208f ? 0.0f : y;
  return x != x ? x : y;
}

inline float tanh_f(float x) {
  const float a = std::fabs(x);
  const float s = x * x;
  // |x| < 0.625: odd polynomial (Cephes tanhf); above, 1 - 2 / (e^{2|x|} + 1) with x's sign
  float small = -5.70498872745e-3f;
  small = small * s + 2.06390887954e-2f;
  small = small * s - 5.37397155531e-2f;
  small = small * s + 1.33314422036e-1f;
  small = small * s - 3.33332819422e-1f;
  small = small * s * x + x;
  float big = 1.0f - 2.0f / (exp_f(2.0f * a) + 1.0f);
  big = x < 0.0f ? -big : big;
  return a < 0.625f ? small : big;
}

inline float sigmoid_f(float x) { return 1.0f / (1.0f + exp_f(-x)); }

// e^a for a double argument, to float accuracy of the *unrounded* a: e^hi (1 + lo) with hi = a rounded to float.
// Where a is large (|a| ~ 10-80), rounding it to float first would cost |a| * 2^-24 relative error (tens of ulp).
inline double exp_dd(double a) {
  const float hi = static_cast<float>(a);  // callers keep |a| within float range (then lo is finite)
  return static_cast<double>(exp_f(hi)) * (1.0 + (a - static_cast<double>(hi)));
}

// e^s for GELU's exponent s <= 0: exp_f without its overflow and NaN selects (GELU multiplies the result by x,
// which carries a NaN through): a NaN s is taken as -104 (never cast to int), below -103.97 the result is 0.
inline float exp_nonpos_f(float s) {
  const float y = exp_core(s > -104.0f ? s : -104.0f);
  return s > -103.97208f ? y : 0.0f;
}

// erfc(a / sqrt2) for a = |x| (Numerical Recipes' erfcc, fractional error < 1.2e-7), in float with one
// exponential: erfcc = t e^s with s = p(t) - a^2/2. s is carried as sh + sl: a^2 = hi + lo exactly (an FMA gives
// the rounding error; -hi/2 is exact), and TwoSum adds p, so rounding s to float (|s| up to ~800, hundreds of ulp of
// e^s) costs nothing; e^{sh + sl} = e^sh (1 + sl) to float accuracy since |sl| <= ulp(sh). Rounding z = a/sqrt2 to
// float costs nothing either (it would cost z^2 * 2^-24 relative, ~8 ulp at z = 2). a is at most 40 (beyond,
// the tail is 0 in float anyway), so a^2 stays finite; NaN stays NaN.
inline float erfc_scaled_f(float a) {
  a = a < 40.0f ? a : 40.0f;
  const float t = 1.0f / (1.0f + 0.35355339059327376f * a);  // 1 / (1 + z / 2)
  // the fit's degree-9 polynomial by Estrin's scheme: a quarter of Horner's dependency chain, which (with the
  // exponential's) kept the loop latency-bound
  const float t2 = t * t, t4 = t2 * t2, t8 = t4 * t4;
  const float q01 = 1.00002368f * t - 1.26551223f, q23 = 0.09678418f * t + 0.37409196f;
  const float q45 = 0.27886807f * t - 0.18628806f, q67 = 1.48851587f * t - 1.13520398f;
  const float q89 = 0.17087277f * t - 0.82215223f;
  const float p = ((q23 * t2 + q01) + (q67 * t2 + q45) * t4) + q89 * t8;
  const float hi = a * a;
  const float lo = std::fma(a, a, -hi);  // a^2 = hi + lo exactly
  const float u = -0.5f * hi;            // exact
  const float sh = u + p;                // TwoSum: sh + e = u + p exactly (no fast-math: the order is kept)
  const float pb = sh - u;
  const float ub = sh - pb;
  const float sl = ((u - ub) + (p - pb)) - 0.5f * lo;
  return t * (exp_nonpos_f(sh) * (1.0f + sl));
}

// 2 * Phi(x) = 1 + erf(x / sqrt2) = erfc(-x / sqrt2), accurate relative to its value for every x: the tail
// erfc(|x| / sqrt2) for x < 0, 2 minus it for x >= 0 (no cancellation: the tail is <= 1 there). NaN for a NaN x is
// not promised (callers multiply by x).
inline float two_cdf_f(float x) {
  const float tail = erfc_scaled_f(std::fabs(x));
  return x < 0.0f ? tail : 2.0f - tail;
}

constexpr float kSqrtHalf = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kGeluBeta = 0.79788456080286536f;  // sqrt(2 / pi)
constexpr float kGeluKappa = 0.044715f;

// ------------------------------------------------------------------------------------------------ per-kind math
// f(x) and g * f'(x), in float (fast forms above) and double (libm); the gradients follow torch's backward formulas.
template <Act K>
struct ActMath;

// v rounded to the storage type T and back (torch's exp/sigmoid/tanh backward read the stored result)
template <typename T, typename F>
inline F rounded(F v) {
  if constexpr (std::is_same_v<T, F>) {
    return v;
  } else {
    return static_cast<F>(static_cast<T>(v));
  }
}

template <>
struct ActMath<Act::exp> {
  static float f(float x) { return exp_f(x); }
  static double f(double x) { return std::exp(x); }
  template <typename T, typename F>
  static F df(F x, F g) {  // torch: g * result (the result as stored, in T)
    return g * rounded<T>(f(x));
  }
};

template <>
struct ActMath<Act::sigmoid> {
  static float f(float x) { return sigmoid_f(x); }
  static double f(double x) { return 1.0 / (1.0 + std::exp(-x)); }
  template <typename T, typename F>
  static F df(F x, F g) {  // torch: g * (1 - y) * y, from the result as stored
    const F y = rounded<T>(f(x));
    return g * (F(1) - y) * y;
  }
};

template <>
struct ActMath<Act::silu> {
  static float f(float x) { return x / (1.0f + exp_f(-x)); }
  static double f(double x) { return x / (1.0 + std::exp(-x)); }
  template <typename T, typename F>
  static F df(F x, F g) {  // torch: g * s * (1 + x * (1 - s))
    const F s = ActMath<Act::sigmoid>::f(x);
    return g * s * (F(1) + x * (F(1) - s));
  }
};

template <>
struct ActMath<Act::tanh> {
  static float f(float x) { return tanh_f(x); }
  static double f(double x) { return std::tanh(x); }
  template <typename T, typename F>
  static F df(F x, F g) {  // torch: g * (1 - y^2), from the result as stored
    const F y = rounded<T>(f(x));
    return g * (F(1) - y * y);
  }
};

template <>
struct ActMath<Act::gelu> {
  // x * Phi(x) = x/2 * erfc(-x/sqrt2): no cancellation for negative x
  static float f(float x) { return 0.5f * x * two_cdf_f(x); }
  static double f(double x) { return 0.5 * x * std::erfc(-x * 0.70710678118654752); }
  template <typename T>
  static float df(float x, float g) {  // torch: g * (cdf + x * pdf)
    const float cdf = 0.5f * two_cdf_f(x);
    const float pdf = exp_f(-0.5f * x * x) * kInvSqrt2Pi;
    return g * (cdf + x * pdf);
  }
  template <typename T>
  static double df(double x, double g) {
    const double cdf = 0.5 * std::erfc(-x * 0.70710678118654752);
    const double pdf = std::exp(-0.5 * x * x) * 0.39894228040143268;
    return g * (cdf + x * pdf);
  }
};

template <>
struct ActMath<Act::gelu_tanh> {
  // x/2 * (1 + tanh(u)) = x / (1 + e^{-2u}), u = sqrt(2/pi) (x + 0.044715 x^3): no cancellation for negative x
  static float f(float x) {
    // the exponent in double: it reaches |2u| ~ 80, where float rounding costs tens of ulp; x clamped to +-1e4
    // for it only (e^{-2u} is already 0 or inf there), so it stays within float range
    double d = x;
    d = d < -1e4 ? -1e4 : d;  // two statements: GCC 12 if-converts (vectorizes) this form, not a nested ternary
    d = d > 1e4 ? 1e4 : d;
    const float e = static_cast<float>(exp_dd(-2.0 * 0.79788456080286536 * (d + 0.044715 * d * d * d)));
    return x / (1.0f + e);
  }
  static double f(double x) {
    return 0.5 * x * (1.0 + std::tanh(0.79788456080286536 * (x + 0.044715 * x * x * x)));
  }
  template <typename T, typename F>
  static F df(F x, F g) {  // torch's GeluBackward (tanh)
    const F beta = F(0.79788456080286536), kappa = F(0.044715);
    const F xsq = x * x;
    const F t = ActMath<Act::tanh>::f(beta * (x + kappa * xsq * x));
    const F left = F(0.5) * x, right = F(1) + t;
    const F right_d = left * (F(1) - t * t) * beta * (F(1) + F(3) * kappa * xsq);
    return g * (F(0.5) * right + right_d);
  }
};

// Hardswish / hardsigmoid: torch's CPU arithmetic (x * min(max(x + 3, 0), 6) / 6 and min(max(x + 3, 0), 6) / 6;
// NaN stays NaN) and its backward's branches as torch 2.13's vectorized CPU kernel takes them (hardswish: 0 at or
// below -3, g at or above 3, g (x / 3 + 1/2) between, NaN for NaN; hardsigmoid: g / 6 strictly inside (-3, 3),
// else 0, NaN included).
template <typename F>
inline F hard_gate(F x) {  // min(max(x + 3, 0), 6) with NaN propagated (torch's vectorized maximum/minimum do)
  const F t = x + F(3);
  F c = t < F(0) ? F(0) : t;
  c = c > F(6) ? F(6) : c;
  return c;
}

template <>
struct ActMath<Act::hardswish> {
  static float f(float x) { return x * hard_gate(x) / 6.0f; }
  static double f(double x) { return x * hard_gate(x) / 6.0; }
  template <typename T, typename F>
  static F df(F x, F g) {
    const F mid = g * (x / F(3) + F(0.5));  // torch 2.13's vectorized kernel: NaN in, NaN out
    F r = x >= F(3) ? g : mid;
    r = x <= F(-3) ? F(0) : r;
    return r;
  }
};

template <>
struct ActMath<Act::hardsigmoid> {
  static float f(float x) { return hard_gate(x) / 6.0f; }
  static double f(double x) { return hard_gate(x) / 6.0; }
  template <typename T, typename F>
  static F df(F x, F g) {
    const F inside = g * F(1.0f / 6.0f);  // torch's constant is the float 1/6, for double too
    return (x > F(-3) && x < F(3)) ? inside : F(0);
  }
};

template <typename F>
void dispatch_act(Act kind, F&& f) {
  switch (kind) {
    case Act::exp: f(std::integral_constant<Act, Act::exp>{}); break;
    case Act::sigmoid: f(std::integral_constant<Act, Act::sigmoid>{}); break;
    case Act::silu: f(std::integral_constant<Act, Act::silu>{}); break;
    case Act::tanh: f(std::integral_constant<Act, Act::tanh>{}); break;
    case Act::gelu: f(std::integral_constant<Act, Act::gelu>{}); break;
    case Act::gelu_tanh: f(std::integral_constant<Act, Act::gelu_tanh>{}); break;
    case Act::hardswish: f(std::integral_constant<Act, Act::hardswish>{}); break;
    case Act::hardsigmoid: f(std::integral_constant<Act, Act::hardsigmoid>{}); break;
  }
}

// ------------------------------------------------------------------------------------------------ loops
constexpr int64_t kActChunk = 1 << 12;  // elements per task
constexpr int64_t kActBlock = 256;      // float staging block for 16-bit types
constexpr int64_t kActCost = 16;        // element-steps per element, for parallel_for's threshold

// out[i] = f(x[i]) (grad: out[i] = g[i] * f'(x[i])) over n contiguous elements, computed in float (double for
// float64) and rounded once.
template <Act K, bool Grad, typename T>
void activation(const T* x, const T* g, int64_t n, T* out) {
  using M = ActMath<K>;
  parallel_for((n + kActChunk - 1) / kActChunk, kActChunk * kActCost, [&](int64_t begin, int64_t end) {
    const int64_t lo = begin * kActChunk, hi = std::min(n, end * kActChunk);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      if constexpr (Grad) {
        for (int64_t i = lo; i < hi; ++i) out[i] = M::template df<T>(x[i], g[i]);
      } else {
        for (int64_t i = lo; i < hi; ++i) out[i] = M::f(x[i]);
      }
    } else {
      float xb[kActBlock], gb[kActBlock];
      for (int64_t i = lo; i < hi; i += kActBlock) {
        const int64_t m = std::min(kActBlock, hi - i);
        for (int64_t j = 0; j < m; ++j) xb[j] = static_cast<float>(x[i + j]);
        if constexpr (Grad) {
          for (int64_t j = 0; j < m; ++j) gb[j] = static_cast<float>(g[i + j]);
          for (int64_t j = 0; j < m; ++j) xb[j] = M::template df<T>(xb[j], gb[j]);
        } else {
          for (int64_t j = 0; j < m; ++j) xb[j] = M::f(xb[j]);
        }
        for (int64_t j = 0; j < m; ++j) out[i + j] = static_cast<T>(xb[j]);
      }
    }
  });
}

// Softmax over the middle axis of a contiguous (outer, len, inner) array: max, sum of e^{x - max}, scale, in float
// (double for float64; torch's CPU softmax accumulates in float for 16-bit types too). float32/float64 store the
// exponentials in `out` and rescale them; 16-bit types recompute them rather than round twice.
template <typename T>
void softmax(const T* x, int64_t outer, int64_t len, int64_t inner, T* out) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  constexpr bool kStore = std::is_same_v<T, A>;
  constexpr int64_t kLanes = 64;
  const int64_t blocks = (inner + kLanes - 1) / kLanes;
  parallel_for(outer * blocks, len * std::min(inner, kLanes) * kActCost, [&](int64_t begin, int64_t end) {
    A m[kLanes], s[kLanes];
    for (int64_t task = begin; task < end; ++task) {
      const int64_t o = task / blocks, j0 = (task % blocks) * kLanes, w = std::min(kLanes, inner - j0);
      const T* xo = x + o * len * inner + j0;
      T* yo = out + o * len * inner + j0;
      if (inner == 1) {  // one row: reduce along it, in kLanes / 4 partial lanes so the loops vectorize
        constexpr int64_t kL = kLanes / 4;
        const int64_t full = len - len % kL;
        for (int64_t k = 0; k < kL; ++k) m[k] = -std::numeric_limits<A>::infinity(), s[k] = 0;
        for (int64_t l = 0; l < full; l += kL) {
          for (int64_t k = 0; k < kL; ++k) {
            const A v = static_cast<A>(xo[l + k]);
            m[k] = v > m[k] ? v : m[k];
          }
        }
        for (int64_t l = full; l < len; ++l) m[0] = std::max(m[0], static_cast<A>(xo[l]));
        A mx = m[0];
        for (int64_t k = 1; k < kL; ++k) mx = std::max(mx, m[k]);
        for (int64_t l = 0; l < full; l += kL) {
          for (int64_t k = 0; k < kL; ++k) {
            const A e = ActMath<Act::exp>::f(static_cast<A>(xo[l + k]) - mx);
            if constexpr (kStore) yo[l + k] = e;
            s[k] += e;
          }
        }
        for (int64_t l = full; l < len; ++l) {
          const A e = ActMath<Act::exp>::f(static_cast<A>(xo[l]) - mx);
          if constexpr (kStore) yo[l] = e;
          s[0] += e;
        }
        A sum = 0;
        for (int64_t k = 0; k < kL; ++k) sum += s[k];
        const A inv = A(1) / sum;
        if constexpr (kStore) {
          for (int64_t l = 0; l < len; ++l) yo[l] *= inv;
        } else {
          for (int64_t l = 0; l < len; ++l) {
            yo[l] = static_cast<T>(ActMath<Act::exp>::f(static_cast<A>(xo[l]) - mx) * inv);
          }
        }
        continue;
      }
      for (int64_t j = 0; j < w; ++j) m[j] = -std::numeric_limits<A>::infinity(), s[j] = 0;
      for (int64_t l = 0; l < len; ++l) {
        const T* xl = xo + l * inner;
        for (int64_t j = 0; j < w; ++j) m[j] = std::max(m[j], static_cast<A>(xl[j]));
      }
      for (int64_t l = 0; l < len; ++l) {
        const T* xl = xo + l * inner;
        T* yl = yo + l * inner;
        for (int64_t j = 0; j < w; ++j) {
          const A e = ActMath<Act::exp>::f(static_cast<A>(xl[j]) - m[j]);
          if constexpr (kStore) yl[j] = e;
          s[j] += e;
        }
      }
      for (int64_t j = 0; j < w; ++j) s[j] = A(1) / s[j];
      for (int64_t l = 0; l < len; ++l) {
        const T* xl = xo + l * inner;
        T* yl = yo + l * inner;
        if constexpr (kStore) {
          for (int64_t j = 0; j < w; ++j) yl[j] *= s[j];
        } else {
          for (int64_t j = 0; j < w; ++j) {
            yl[j] = static_cast<T>(ActMath<Act::exp>::f(static_cast<A>(xl[j]) - m[j]) * s[j]);
          }
        }
      }
    }
  });
}

// Softmax's input gradient, torch's: dx = y * (g - sum(g * y)) along the middle axis of (outer, len, inner).
template <typename T>
void softmax_grad(const T* y, const T* g, int64_t outer, int64_t len, int64_t inner, T* out) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  constexpr int64_t kLanes = 64;
  const int64_t blocks = (inner + kLanes - 1) / kLanes;
  parallel_for(outer * blocks, len * std::min(inner, kLanes) * 4, [&](int64_t begin, int64_t end) {
    A s[kLanes];
    for (int64_t task = begin; task < end; ++task) {
      const int64_t o = task / blocks, j0 = (task % blocks) * kLanes, w = std::min(kLanes, inner - j0);
      const int64_t base = o * len * inner + j0;
      for (int64_t j = 0; j < kLanes; ++j) s[j] = 0;
      if (inner == 1) {  // one row: partial sums in kLanes lanes so the loop vectorizes
        const int64_t full = len - len % kLanes;
        for (int64_t l = 0; l < full; l += kLanes) {
          for (int64_t k = 0; k < kLanes; ++k) s[k] += static_cast<A>(g[base + l + k]) * static_cast<A>(y[base + l + k]);
        }
        for (int64_t l = full; l < len; ++l) s[0] += static_cast<A>(g[base + l]) * static_cast<A>(y[base + l]);
        for (int64_t k = 1; k < kLanes; ++k) s[0] += s[k];
      } else {
        for (int64_t l = 0; l < len; ++l) {
          const int64_t at = base + l * inner;
          for (int64_t j = 0; j < w; ++j) s[j] += static_cast<A>(g[at + j]) * static_cast<A>(y[at + j]);
        }
      }
      for (int64_t l = 0; l < len; ++l) {
        const int64_t at = base + l * inner;
        for (int64_t j = 0; j < w; ++j) {
          out[at + j] = static_cast<T>(static_cast<A>(y[at + j]) * (static_cast<A>(g[at + j]) - s[j]));
        }
      }
    }
  });
}

}  // namespace porter
