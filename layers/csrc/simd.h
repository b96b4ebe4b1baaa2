// The widest vector register of the CPU the kernels are compiled for (`-march=native`, cli build-kernels), for the
// kernels whose register tiles are sized in whole registers.
//
// A GCC/Clang vector type wider than the CPU's registers (a 64-byte `vector_size` on an AVX2 CPU) is split into
// register halves, and arrays of such vectors (register tiles `V acc[R]`) are then kept on the stack: measured 3x
// slower on a depthwise 3x3 conv on AMD Zen 3 than the same tile in 32-byte vectors. Sizing tiles by kVectorBytes
// keeps them in registers on AVX-512 (64), AVX/AVX2 (32) and SSE/NEON (16) CPUs alike.
#pragma once

#include <cstdint>

namespace porter {

#if defined(__AVX512F__)
constexpr int kVectorBytes = 64;
constexpr int kVectorRegisters = 32;
#elif defined(__AVX__)
constexpr int kVectorBytes = 32;
constexpr int kVectorRegisters = 16;
#elif defined(__aarch64__)
constexpr int kVectorBytes = 16;
constexpr int kVectorRegisters = 32;
#else
constexpr int kVectorBytes = 16;
constexpr int kVectorRegisters = 16;
#endif

}  // namespace porter
