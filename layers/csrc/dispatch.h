// dtype dispatch for Porter's native kernels: from an array's MLX dtype to the C++ type a kernel template runs in,
// and the type it accumulates in. One switch per dtype set, so no primitive writes its own.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "mlx/dtype.h"
#include "mlx/types/half_types.h"
#include "mlx/utils.h"  // operator<< for a dtype in the errors

namespace porter {

namespace mx = mlx::core;

// The float type a kernel accumulates or compares in.
template <typename T>
struct Acc {
  using type = T;
};
template <>
struct Acc<mx::float16_t> {
  using type = float;
};
template <>
struct Acc<mx::bfloat16_t> {
  using type = float;
};

template <typename T>
constexpr bool is_float_v = std::is_floating_point_v<T> || std::is_same_v<T, mx::float16_t> ||
                            std::is_same_v<T, mx::bfloat16_t>;

// Calls f(T{}) for the C++ type of dtype; `what` names the kernel in the error for an unsupported dtype.
template <typename F>
void dispatch(mx::Dtype dtype, const char* what, F&& f) {
  switch (dtype) {
    case mx::float32: f(float{}); break;
    case mx::float16: f(mx::float16_t{}); break;
    case mx::bfloat16: f(mx::bfloat16_t{}); break;
    case mx::float64: f(double{}); break;
    case mx::int8: f(int8_t{}); break;
    case mx::int16: f(int16_t{}); break;
    case mx::int32: f(int32_t{}); break;
    case mx::int64: f(int64_t{}); break;
    case mx::uint8: f(uint8_t{}); break;
    default: {
      std::ostringstream msg;
      msg << "[porter." << what << "] unsupported dtype " << dtype;
      throw std::invalid_argument(msg.str());
    }
  }
}

template <typename F>
void dispatch_float(mx::Dtype dtype, const char* what, F&& f) {
  switch (dtype) {
    case mx::float32: f(float{}); break;
    case mx::float16: f(mx::float16_t{}); break;
    case mx::bfloat16: f(mx::bfloat16_t{}); break;
    case mx::float64: f(double{}); break;
    default: {
      std::ostringstream msg;
      msg << "[porter." << what << "] expected a floating dtype, got " << dtype;
      throw std::invalid_argument(msg.str());
    }
  }
}

// Calls f(T{}) for float32 (float) or float64 (double), the kernels that have no 16-bit path.
template <typename F>
void dispatch_real(mx::Dtype dtype, const char* what, F&& f) {
  switch (dtype) {
    case mx::float32: f(float{}); break;
    case mx::float64: f(double{}); break;
    default: {
      std::ostringstream msg;
      msg << "[porter." << what << "] expected float32 or float64, got " << dtype;
      throw std::invalid_argument(msg.str());
    }
  }
}

}  // namespace porter
