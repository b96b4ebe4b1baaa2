// 16-bit rows widened to float and float rows rounded back, for the kernels that compute float16/bfloat16 in float32
// and round once (softmax_kernels.h, norm_kernels.h's LayerNorm, normalize_kernels.h).
//
// MLX's float16_t on x86 is a struct whose conversions are bit arithmetic per element (mlx/types/fp16.h): one at a
// time they were most of a float16 softmax row's time (float16 softmax 1.6x torch's, float32 at parity). Here:
// - float16 with F16C (x86 `-march=native` on any AVX2 CPU): 8 values per `vcvtph2ps` / `vcvtps2ph`, round to nearest
//   even (the struct's rounding; a NaN stays a NaN, its payload may differ);
// - float16 on arm64: MLX's float16_t is the native __fp16 there, so the plain loop is the CPU's own conversions
//   (GCC/Clang vectorize it to fcvtl/fcvtn);
// - bfloat16: the conversions are integer shifts and a rounding add (NaN -> 0x7fc0 as the struct does): widening
//   vectorized by the compiler, rounding 8 at a time in AVX2 where the build CPU has it (GCC 12 left the loop scalar);
// - anything else: the element type's own conversions.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "dispatch.h"

namespace porter {

// dst[0, n) = src[0, n) as float.
template <typename T>
inline void widen_row(const T* __restrict src, int64_t n, float* __restrict dst) {
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else if constexpr (std::is_same_v<T, mx::bfloat16_t>) {
    const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
    uint32_t* d = reinterpret_cast<uint32_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = static_cast<uint32_t>(s[i]) << 16;
  } else {
    int64_t i = 0;
#if defined(__F16C__)
    if constexpr (sizeof(T) == 2 && !std::is_same_v<T, mx::bfloat16_t>) {
      for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
      }
    }
#endif
    for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
  }
}

// dst[0, n) = src[0, n) rounded to T (round to nearest even).
template <typename T>
inline void narrow_row(const float* __restrict src, int64_t n, T* __restrict dst) {
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else if constexpr (std::is_same_v<T, mx::bfloat16_t>) {
    const uint32_t* s = reinterpret_cast<const uint32_t*>(src);
    uint16_t* d = reinterpret_cast<uint16_t*>(dst);
    int64_t i = 0;
#if defined(__AVX2__)
    // the loop below is not vectorized by GCC 12 (bfloat16 rows ran 2.5x slower than float16 ones): 8 at a time
    const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff), quiet = _mm256_set1_epi32(0x7fc0);
    const __m256i magnitude = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    for (; i + 8 <= n; i += 8) {
      const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
      __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, lsb), half), 16);
      const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, magnitude), inf);
      r = _mm256_blendv_epi8(r, quiet, nan);
      // r < 2^16 in each int32: packus keeps the values; it packs per 128-bit half, so reorder the 64-bit quarters
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xD8);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm256_castsi256_si128(packed));
    }
#endif
    for (; i < n; ++i) {
      const uint32_t u = s[i];
      const uint32_t rounded = (u + ((u >> 16) & 1u) + 0x7fffu) >> 16;
      const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
      d[i] = static_cast<uint16_t>(nan ? 0x7fc0u : rounded);
    }
  } else {
    int64_t i = 0;
#if defined(__F16C__)
    if constexpr (sizeof(T) == 2 && !std::is_same_v<T, mx::bfloat16_t>) {
      for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
      }
    }
#endif
    for (; i < n; ++i) dst[i] = static_cast<T>(src[i]);
  }
}

}  // namespace porter
