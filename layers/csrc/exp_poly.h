// e^x's Cephes range reduction and polynomial, once, for a float (activation_kernels.h's exp_core: loops the compiler
// vectorizes) and for an explicit GCC/Clang float vector (softmax_kernels.h's rows: SmVec with its int32 twin).
//
// For a finite x in [-104, 88.8] (callers clamp and handle NaN/inf around it): x = n ln2 + r, |r| <= ln2/2, e^r by
// Cephes expf's degree-6 polynomial (~1 ulp, as torch's Sleef exp), 2^n applied as two normal powers of two so that
// results in the subnormal range round once.
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

namespace porter {

// F: float or a float vector type; I: int32_t or the int32 vector of F's width.
template <typename F, typename I>
inline F cephes_exp_core(F xc) {
  static_assert(sizeof(F) == sizeof(I), "F and I must have the same lanes");
  // round to nearest by adding and subtracting 1.5 * 2^23 (|n| <= 150): std::floor would block vectorization
  const F n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  F r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  const F z = r * r;
  F p = F{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * z + r + 1.0f;
  I ni;
  if constexpr (std::is_same_v<F, float>) {
    ni = static_cast<I>(n);
  } else {
    ni = __builtin_convertvector(n, I);
  }
  const I n1 = ni >> 1, n2 = ni - n1;
  const F s1 = std::bit_cast<F>(static_cast<I>((n1 + 127) << 23));
  const F s2 = std::bit_cast<F>(static_cast<I>((n2 + 127) << 23));
  return p * s1 * s2;
}

}  // namespace porter
