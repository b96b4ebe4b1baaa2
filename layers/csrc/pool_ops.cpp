// Pooling's primitives (pool_kernels.h): window max and its gradient, fractional max, window sum (average, adaptive
// average, LP pooling's power sum) and its adjoint, and the plane scatter/gather of max unpool; their checked ops.
#include <algorithm>

#include "ops_common.h"
#include "pool_kernels.h"

namespace porter {

// Builds the per-dim window tables of the nd spatial dims (nd = first.size()), padded on the left to three.
std::vector<Axis> make_axes(const char* what, const Table& first, const Table& end, const Ints& step,
                            const Table& divisor, const mx::Shape& shape) {
  const size_t nd = shape.size() - 2;
  if (first.size() != nd || end.size() != nd || step.size() != nd || (!divisor.empty() && divisor.size() != nd)) {
    fail(what, "window tables must give one entry per spatial dim of the input");
  }
  std::vector<Axis> axes(nd);
  for (size_t d = 0; d < nd; ++d) {
    const int64_t extent = shape[1 + d];
    Axis& a = axes[d];
    a.first = first[d];
    a.end = end[d];
    a.step = step[d];
    if (!divisor.empty()) a.divisor = divisor[d];
    if (a.first.empty() || a.end.size() != a.first.size() ||
        (!divisor.empty() && a.divisor.size() != a.first.size()) || a.step <= 0) {
      fail(what, "window tables of a spatial dim must be non-empty, of equal length, with a positive step");
    }
    for (size_t o = 0; o < a.first.size(); ++o) {
      // taps run over [first, end) and must be real positions; `first` may lie past `end` (a window with no tap)
      if (a.end[o] > extent || (a.first[o] < 0 && a.first[o] < a.end[o])) {
        fail(what, "window table reads outside the input");
      }
    }
  }
  return pad_axes(std::move(axes));
}

mx::Shape out_shape(const mx::array& x, const std::vector<int64_t>& out_spatial) {
  mx::Shape shape{x.shape(0)};
  for (int64_t o : out_spatial) shape.push_back(static_cast<int>(o));
  shape.push_back(x.shape(-1));
  return shape;
}

// The output shape of a window kernel: x's shape with the nd spatial extents replaced by the tables' outputs.
mx::Shape window_out_shape(const mx::array& x, const std::vector<Axis>& axes) {
  mx::Shape shape = x.shape();
  const size_t nd = x.ndim() - 2;
  for (size_t d = 0; d < nd; ++d) shape[1 + d] = static_cast<int>(axes[3 - nd + d].out());
  return shape;
}

mx::array make_window_max_grad(mx::Stream s, const std::vector<Axis>& axes, const mx::array& x, const mx::array& g);
mx::array make_window_sum(mx::Stream s, const std::vector<Axis>& axes, int64_t ov, bool seq, bool grad,
                          const mx::Shape& shape, const mx::array& in, const mx::Shape& plane);
mx::array make_scatter_add(mx::Stream s, const mx::Shape& shape, const mx::array& src, const mx::array& index);
mx::array make_gather(mx::Stream s, const mx::array& src, const mx::array& index);

class WindowMax : public mx::Primitive {
 public:
  WindowMax(mx::Stream s, std::vector<Axis> axes, bool with_indices)
      : mx::Primitive(s), axes_(std::move(axes)), with_indices_(with_indices) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    launch(stream(), inputs, outputs, [axes = axes_, wi = with_indices_](auto& in, auto& out) {
      Geometry g = Geometry::of(in[0]);
      dispatch(in[0].dtype(), "window_max", [&](auto tag) {
        using T = decltype(tag);
        window_max<T>(in[0].template data<T>(), g, axes, out[0].template data<T>(),
                      wi ? out[1].template data<int64_t>() : nullptr);
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override { no_gpu("window_max"); }
  const char* name() const override { return "PorterWindowMax"; }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    return vmap_into_batch(stream(), "window_max", inputs, axes, {true}, [&](const std::vector<mx::array>& in) {
      auto shape = window_out_shape(in[0], axes_);
      std::vector<mx::Shape> shapes{shape};
      std::vector<mx::Dtype> dtypes{in[0].dtype()};
      if (with_indices_) {
        shapes.push_back(shape);
        dtypes.push_back(mx::int64);
      }
      return mx::array::make_arrays(shapes, dtypes, std::make_shared<WindowMax>(stream(), axes_, with_indices_), in);
    });
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>&) override {
    // torch's gradient: all of each output's gradient to the tap the scan chose (recomputed from x)
    const auto& x = primals[0];
    return {make_window_max_grad(stream(), axes_, x, cast_like(cotangents[0], x, stream()))};
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    if (!same_type<WindowMax>(*this, other)) return false;
    auto& o = static_cast<const WindowMax&>(other);
    return axes_ == o.axes_ && with_indices_ == o.with_indices_;
  }

 private:
  std::vector<Axis> axes_;
  bool with_indices_;
};

class WindowMaxGrad : public mx::Primitive {
 public:
  WindowMaxGrad(mx::Stream s, std::vector<Axis> axes) : mx::Primitive(s), axes_(std::move(axes)) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    launch(stream(), inputs, outputs, [axes = axes_](auto& in, auto& out) {
      Geometry g = Geometry::of(in[0]);
      dispatch(in[0].dtype(), "window_max_grad", [&](auto tag) {
        using T = decltype(tag);
        window_max_grad<T>(in[0].template data<T>(), g, axes, in[1].template data<T>(), out[0].template data<T>());
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override { no_gpu("window_max_grad"); }
  const char* name() const override { return "PorterWindowMaxGrad"; }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    return vmap_into_batch(stream(), "window_max", inputs, axes, {true, true}, [&](const std::vector<mx::array>& in) {
      return std::vector<mx::array>{
          mx::array(in[0].shape(), in[0].dtype(), std::make_shared<WindowMaxGrad>(stream(), axes_), in)};
    });
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>&, const std::vector<mx::array>&, const std::vector<int>&,
                             const std::vector<mx::array>&) override {
    throw std::invalid_argument("[porter.window_max] second derivatives of max pooling are not supported");
  }

 private:
  std::vector<Axis> axes_;
};

class FractionalMax : public mx::Primitive {
 public:
  FractionalMax(mx::Stream s, Ints kernel, Ints out, Ints column)
      : mx::Primitive(s), kernel_(std::move(kernel)), out_(std::move(out)), column_(std::move(column)) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    launch(stream(), inputs, outputs, [k = kernel_, o = out_, col = column_](auto& in, auto& out) {
      Geometry g = Geometry::of(in[0]);
      const int nd = static_cast<int>(k.size());
      int64_t kernel[3] = {1, 1, 1}, size[3] = {1, 1, 1}, column[3] = {0, 0, 0};
      for (int d = 0; d < nd; ++d) {
        kernel[3 - nd + d] = k[d];
        size[3 - nd + d] = o[d];
        column[3 - nd + d] = col[d];
      }
      dispatch_float(in[0].dtype(), "fractional_max", [&](auto tag) {
        using T = decltype(tag);
        fractional_max<T>(in[0].template data<T>(), g, in[1].template data<T>(), column, nd, size, kernel,
                          out[0].template data<T>(), out[1].template data<int64_t>());
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override { no_gpu("fractional_max"); }
  const char* name() const override { return "PorterFractionalMax"; }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    return vmap_into_batch(stream(), "fractional_max", inputs, axes, {true, true},
                           [&](const std::vector<mx::array>& in) {
      mx::Shape shape = in[0].shape();
      for (size_t d = 0; d < out_.size(); ++d) shape[1 + d] = static_cast<int>(out_[d]);
      return mx::array::make_arrays({shape, shape}, {in[0].dtype(), mx::int64},
                                    std::make_shared<FractionalMax>(stream(), kernel_, out_, column_),
                                    {in[0], in[1]});
    });
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>& outputs) override {
    std::vector<mx::array> grads;
    for (int arg : argnums) {
      if (arg == 0) {  // to each output's index; the samples get none (they only place the windows)
        const auto& x = primals[0];
        grads.push_back(make_scatter_add(stream(), x.shape(), cast_like(cotangents[0], x, stream()), outputs[1]));
      } else {
        grads.push_back(mx::zeros_like(primals[arg], stream()));
      }
    }
    return grads;
  }

 private:
  Ints kernel_, out_, column_;
};

class WindowSum : public mx::Primitive {
 public:
  // plane: the spatial extents of the forward's input (the adjoint's output)
  // power (forward only): sum x ** power over each window (LP pooling), 1 for a plain sum
  WindowSum(mx::Stream s, std::vector<Axis> axes, int64_t override_div, bool sequential, bool grad, mx::Shape plane,
            double power = 1.0)
      : mx::Primitive(s),
        axes_(std::move(axes)),
        override_(override_div),
        sequential_(sequential),
        grad_(grad),
        plane_(std::move(plane)),
        power_(power) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    launch(stream(), inputs, outputs,
           [axes = axes_, ov = override_, seq = sequential_, grad = grad_, power = power_](auto& in, auto& out) {
             dispatch_float(in[0].dtype(), grad ? "window_sum_grad" : "window_sum", [&](auto tag) {
               using T = decltype(tag);
               if (grad) {
                 window_sum_grad<T>(in[0].template data<T>(), Geometry::of(out[0]), axes, ov, seq,
                                    out[0].template data<T>());
               } else {
                 window_sum<T>(in[0].template data<T>(), Geometry::of(in[0]), axes, ov, seq,
                               out[0].template data<T>(), power);
               }
             });
           });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override { no_gpu("window_sum"); }
  const char* name() const override { return grad_ ? "PorterWindowSumGrad" : "PorterWindowSum"; }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    return vmap_into_batch(stream(), "window_sum", inputs, axes, {true}, [&](const std::vector<mx::array>& in) {
      mx::Shape shape = in[0].shape();
      const size_t nd = shape.size() - 2;
      for (size_t d = 0; d < nd; ++d) {  // forward: window outputs; adjoint: back to the input extents
        shape[1 + d] = grad_ ? plane_[d] : static_cast<int>(axes_[3 - nd + d].out());
      }
      auto input = grad_ ? in[0] : in[0];
      return std::vector<mx::array>{mx::array(
          shape, in[0].dtype(),
          std::make_shared<WindowSum>(stream(), axes_, override_, sequential_, grad_, plane_, power_), {input})};
    });
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>&, const std::vector<mx::array>&) override {
    // linear: the adjoint of the window average is its scatter, and the adjoint of that the average again
    const auto& in = primals[0];
    auto g = make_window_sum(stream(), axes_, override_, sequential_, !grad_, in.shape(),
                             cast_like(cotangents[0], in, stream()), plane_);
    if (power_ == 1.0) return {g};
    // x ** p inside: torch's pow backward, grad * (p * x ** (p - 1)), with the same shortcuts as the forward
    return {mx::multiply(g, mx::multiply(mx::array(power_, in.dtype()), power_of(in, power_ - 1.0, stream()),
                                         stream()), stream())};
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    if (!same_type<WindowSum>(*this, other)) return false;
    auto& o = static_cast<const WindowSum&>(other);
    return axes_ == o.axes_ && override_ == o.override_ && sequential_ == o.sequential_ && grad_ == o.grad_ &&
           plane_ == o.plane_ && power_ == o.power_;
  }

 private:
  std::vector<Axis> axes_;
  int64_t override_;
  bool sequential_, grad_;
  mx::Shape plane_;
  double power_;
};

class PlaneScatter : public mx::Primitive {
 public:
  // dims: the spatial extents of the output plane
  PlaneScatter(mx::Stream s, mx::Shape dims, bool assign)
      : mx::Primitive(s), dims_(std::move(dims)), plane_(1), assign_(assign) {
    for (int d : dims_) plane_ *= d;
  }

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    launch(stream(), inputs, outputs, [plane = plane_, assign = assign_](auto& in, auto& out) {
      const auto& src = in[0];
      const int64_t n = src.shape(0), c = src.shape(-1), positions = src.size() / std::max<int64_t>(1, n * c);
      dispatch(src.dtype(), "plane_scatter", [&](auto tag) {
        using T = decltype(tag);
        int64_t bad = plane_scatter<T>(src.template data<T>(), in[1].template data<int64_t>(), n, positions, c,
                                       plane, assign, out[0].template data<T>());
        if (out.size() > 1) *out[1].template data<int64_t>() = bad;
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override { no_gpu("plane_scatter"); }
  const char* name() const override { return assign_ ? "PorterPlaneAssign" : "PorterPlaneScatterAdd"; }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    return vmap_into_batch(stream(), "plane_scatter", inputs, axes, {true, true},
                           [&](const std::vector<mx::array>& in) {
      mx::Shape shape{in[0].shape(0)};
      shape.insert(shape.end(), dims_.begin(), dims_.end());
      shape.push_back(in[0].shape(-1));
      std::vector<mx::Shape> shapes{shape};
      std::vector<mx::Dtype> dtypes{in[0].dtype()};
      if (assign_) {
        shapes.push_back({});
        dtypes.push_back(mx::int64);
      }
      return mx::array::make_arrays(shapes, dtypes, std::make_shared<PlaneScatter>(stream(), dims_, assign_),
                                    {in[0], in[1]});
    });
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>&) override {
    // torch's unpool backward gathers at every index, duplicates included (each gets the full gradient)
    std::vector<mx::array> grads;
    for (int arg : argnums) {
      if (arg == 0) {
        grads.push_back(make_gather(stream(), cast_like(cotangents[0], primals[0], stream()), primals[1]));
      } else {
        grads.push_back(mx::zeros_like(primals[arg], stream()));
      }
    }
    return grads;
  }

 private:
  mx::Shape dims_;
  int64_t plane_;
  bool assign_;
};

class PlaneGather : public mx::Primitive {
 public:
  PlaneGather(mx::Stream s, int64_t plane) : mx::Primitive(s), plane_(plane) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    launch(stream(), inputs, outputs, [plane = plane_](auto& in, auto& out) {
      const auto& idx = in[1];
      const int64_t n = idx.shape(0), c = idx.shape(-1), positions = idx.size() / std::max<int64_t>(1, n * c);
      dispatch(in[0].dtype(), "plane_gather", [&](auto tag) {
        using T = decltype(tag);
        plane_gather<T>(in[0].template data<T>(), idx.template data<int64_t>(), n, positions, c, plane,
                        out[0].template data<T>());
      });
    });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override { no_gpu("plane_gather"); }
  const char* name() const override { return "PorterPlaneGather"; }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    return vmap_into_batch(stream(), "plane_gather", inputs, axes, {true, true}, [&](const std::vector<mx::array>& in) {
      return std::vector<mx::array>{
          mx::array(in[1].shape(), in[0].dtype(), std::make_shared<PlaneGather>(stream(), plane_), in)};
    });
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>&) override {
    std::vector<mx::array> grads;
    for (int arg : argnums) {
      if (arg == 0) {
        const auto& src = primals[0];
        grads.push_back(make_scatter_add(stream(), src.shape(), cast_like(cotangents[0], src, stream()), primals[1]));
      } else {
        grads.push_back(mx::zeros_like(primals[arg], stream()));
      }
    }
    return grads;
  }

 private:
  int64_t plane_;
};

mx::array make_window_max_grad(mx::Stream s, const std::vector<Axis>& axes, const mx::array& x, const mx::array& g) {
  return mx::array(x.shape(), x.dtype(), std::make_shared<WindowMaxGrad>(s, axes), {x, g});
}

mx::array make_window_sum(mx::Stream s, const std::vector<Axis>& axes, int64_t ov, bool seq, bool grad,
                          const mx::Shape& shape, const mx::array& in, const mx::Shape& plane) {
  return mx::array(shape, in.dtype(), std::make_shared<WindowSum>(s, axes, ov, seq, grad, plane),
                   {grad ? in : in});
}

mx::array make_scatter_add(mx::Stream s, const mx::Shape& shape, const mx::array& src, const mx::array& index) {
  mx::Shape dims(shape.begin() + 1, shape.end() - 1);
  return mx::array(shape, src.dtype(), std::make_shared<PlaneScatter>(s, dims, false),
                   {src, mx::astype(index, mx::int64, s)});
}

mx::array make_gather(mx::Stream s, const mx::array& src, const mx::array& index) {
  int64_t plane = 1;
  for (size_t d = 1; d + 1 < src.ndim(); ++d) plane *= src.shape(d);
  return mx::array(index.shape(), src.dtype(), std::make_shared<PlaneGather>(s, plane),
                   {src, mx::astype(index, mx::int64, s)});
}

// ------------------------------------------------------------------------------------------------ ops
std::vector<mx::array> window_max_op(const mx::array& x, const Table& first, const Table& end, const Ints& step,
                                     bool with_indices) {
  auto s = cpu_stream("window_max");
  check_batched(x, "window_max", "x");
  auto axes = make_axes("window_max", first, end, step, {}, x.shape());
  Ints out;
  for (size_t d = 3 - first.size(); d < 3; ++d) out.push_back(axes[d].out());
  auto shape = out_shape(x, out);
  std::vector<mx::Shape> shapes{shape};
  std::vector<mx::Dtype> dtypes{x.dtype()};
  if (with_indices) {
    shapes.push_back(shape);
    dtypes.push_back(mx::int64);
  }
  return mx::array::make_arrays(shapes, dtypes, std::make_shared<WindowMax>(s, std::move(axes), with_indices), {x});
}

// samples: (N, C, nd) in x's dtype (torch's random_samples); column[d]: the sample column of spatial dim d.
std::vector<mx::array> fractional_max_op(const mx::array& x, const mx::array& samples, const Ints& kernel,
                                         const Ints& out, const Ints& column) {
  auto s = cpu_stream("fractional_max");
  check_batched(x, "fractional_max", "x");
  const size_t nd = x.ndim() - 2;
  if (kernel.size() != nd || out.size() != nd || column.size() != nd) {
    fail("fractional_max", "kernel, out and column must give one entry per spatial dim of the input");
  }
  if (samples.ndim() != 3 || samples.shape(0) != x.shape(0) || samples.shape(1) != x.shape(-1) ||
      samples.shape(2) != static_cast<int>(nd) || samples.dtype() != x.dtype()) {
    fail("fractional_max", "samples must be (N, C, nd) in the input's dtype");
  }
  int64_t plane = 1;
  for (size_t d = 0; d < nd; ++d) plane *= x.shape(1 + d);
  if (plane >= (int64_t{1} << 31)) fail("fractional_max", "planes of 2**31 elements or more are not supported");
  for (size_t d = 0; d < nd; ++d) {
    if (kernel[d] <= 0 || kernel[d] > x.shape(1 + d)) fail("fractional_max", "kernel must fit the input");
    if (out[d] <= 0) fail("fractional_max", "out sizes must be positive");
    if (column[d] < 0 || column[d] >= static_cast<int64_t>(nd)) fail("fractional_max", "column out of range");
  }
  auto shape = out_shape(x, out);
  return mx::array::make_arrays({shape, shape}, {x.dtype(), mx::int64},
                                std::make_shared<FractionalMax>(s, kernel, out, column),
                                {x, samples});
}

mx::array window_max_grad_op(const mx::array& x, const mx::array& grad, const Table& first, const Table& end,
                             const Ints& step) {
  auto s = cpu_stream("window_max_grad");
  check_batched(x, "window_max_grad", "x");
  auto axes = make_axes("window_max_grad", first, end, step, {}, x.shape());
  if (grad.ndim() != x.ndim() || grad.shape(0) != x.shape(0) || grad.shape(-1) != x.shape(-1) ||
      grad.dtype() != x.dtype()) {
    fail("window_max_grad", "grad must be (N, *out, C) in the dtype of x");
  }
  for (size_t d = 0; d + 2 < x.ndim(); ++d) {
    if (axes[3 - (x.ndim() - 2) + d].out() != grad.shape(1 + d)) {
      fail("window_max_grad", "window tables do not match the gradient's shape");
    }
  }
  return mx::array(x.shape(), x.dtype(), std::make_shared<WindowMaxGrad>(s, std::move(axes)),
                   {x, grad});
}

mx::array window_sum_op(const mx::array& x, const Table& first, const Table& end, const Table& divisor,
                        int64_t override_div, bool sequential, double power) {
  if (power != 1.0 && x.dtype() != mx::float32 && x.dtype() != mx::float64) {
    fail("window_sum", "power sums are float32/float64 only (fp16/bf16 round between torch's stages)");
  }
  auto s = cpu_stream("window_sum");
  check_batched(x, "window_sum", "x");
  Ints step(first.size(), 1);
  auto axes = make_axes("window_sum", first, end, step, divisor, x.shape());
  Ints out;
  for (size_t d = 3 - first.size(); d < 3; ++d) out.push_back(axes[d].out());
  mx::Shape plane(x.shape().begin() + 1, x.shape().end() - 1);
  return mx::array(out_shape(x, out), x.dtype(),
                   std::make_shared<WindowSum>(s, std::move(axes), override_div, sequential, false, plane, power),
                   {x});
}

mx::array window_sum_grad_op(const mx::array& grad, const Ints& plane, const Table& first, const Table& end,
                             const Table& divisor, int64_t override_div, bool sequential) {
  auto s = cpu_stream("window_sum_grad");
  check_batched(grad, "window_sum_grad", "grad");
  if (plane.size() != grad.ndim() - 2) fail("window_sum_grad", "plane must give one extent per spatial dim");
  mx::Shape in_shape{grad.shape(0)};
  for (int64_t p : plane) in_shape.push_back(static_cast<int>(p));
  in_shape.push_back(grad.shape(-1));
  Ints step(first.size(), 1);
  auto axes = make_axes("window_sum_grad", first, end, step, divisor, in_shape);
  for (size_t d = 0; d < plane.size(); ++d) {
    if (axes[3 - plane.size() + d].out() != grad.shape(1 + d)) {
      fail("window_sum_grad", "window tables do not match the gradient's shape");
    }
  }
  mx::Shape plane_shape(in_shape.begin() + 1, in_shape.end() - 1);
  return mx::array(in_shape, grad.dtype(),
                   std::make_shared<WindowSum>(s, std::move(axes), override_div, sequential, true, plane_shape),
                   {grad});
}

// With `assign` (max unpool), also returns the number of out-of-range indices (skipped) as an int64 scalar.
std::vector<mx::array> plane_scatter_op(const mx::array& src, const mx::array& index, const Ints& plane,
                                        bool assign) {
  auto s = cpu_stream("plane_scatter");
  check_batched(src, "plane_scatter", "src");
  if (index.shape() != src.shape()) fail("plane_scatter", "index must have the shape of src");
  mx::Shape shape{src.shape(0)};
  int64_t flat = 1;
  for (int64_t p : plane) {
    if (p <= 0) fail("plane_scatter", "plane extents must be positive");
    shape.push_back(static_cast<int>(p));
    flat *= p;
  }
  shape.push_back(src.shape(-1));
  std::vector<mx::Shape> shapes{shape};
  std::vector<mx::Dtype> dtypes{src.dtype()};
  if (assign) {
    shapes.push_back({});
    dtypes.push_back(mx::int64);
  }
  return mx::array::make_arrays(
      shapes, dtypes, std::make_shared<PlaneScatter>(s, mx::Shape(shape.begin() + 1, shape.end() - 1), assign),
      {src, mx::astype(index, mx::int64, s)});
}

mx::array plane_gather_op(const mx::array& src, const mx::array& index) {
  auto s = cpu_stream("plane_gather");
  check_batched(src, "plane_gather", "src");
  check_batched(index, "plane_gather", "index");
  if (index.shape(0) != src.shape(0) || index.shape(-1) != src.shape(-1)) {
    fail("plane_gather", "index and src must share N and C");
  }
  int64_t flat = 1;
  for (size_t d = 1; d + 1 < src.ndim(); ++d) flat *= src.shape(d);
  return mx::array(index.shape(), src.dtype(), std::make_shared<PlaneGather>(s, flat),
                   {src, mx::astype(index, mx::int64, s)});
}

void bind_pool(nb::module_& m) {
  m.def("window_max", &porter::window_max_op, nb::arg("x"), nb::arg("first"), nb::arg("end"), nb::arg("step"),
        nb::arg("with_indices"));
  m.def("window_max_grad", &porter::window_max_grad_op, nb::arg("x"), nb::arg("grad"), nb::arg("first"),
        nb::arg("end"), nb::arg("step"));
  m.def("fractional_max", &porter::fractional_max_op, nb::arg("x"), nb::arg("samples"), nb::arg("kernel"),
        nb::arg("out"), nb::arg("column"));
  m.def("window_sum", &porter::window_sum_op, nb::arg("x"), nb::arg("first"), nb::arg("end"), nb::arg("divisor"),
        nb::arg("override"), nb::arg("sequential"), nb::arg("power") = 1.0);
  m.def("window_sum_grad", &porter::window_sum_grad_op, nb::arg("grad"), nb::arg("plane"), nb::arg("first"),
        nb::arg("end"), nb::arg("divisor"), nb::arg("override"), nb::arg("sequential"));
  m.def("plane_scatter", &porter::plane_scatter_op, nb::arg("src"), nb::arg("index"), nb::arg("plane"),
        nb::arg("assign"));
  m.def("plane_gather", &porter::plane_gather_op, nb::arg("src"), nb::arg("index"));
}

}  // namespace porter
