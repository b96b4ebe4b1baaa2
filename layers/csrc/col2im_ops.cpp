// Columns <-> image (col2im_kernels.h): one primitive with two kinds, each the other's adjoint, and the checked ops.
//   scatter (col2im):  cols (N, H, W, kH, kW, C) -> image (N, Ho, Wo, C), the tap blocks summed where they land
//   gather (im2col):   image (N, Ho, Wo, C) -> cols (N, H, W, kH, kW, C), zeros where a tap lands outside
// Both are linear, so the VJP and JVP of one kind are the other / the same kind applied to the cotangent / tangent;
// vmap folds the mapped axis into the batch.
#include "ops_common.h"
#include "col2im_kernels.h"

namespace porter {

enum class ColKind { scatter, gather };

mx::array col2im_make(ColKind kind, const mx::array& a, const ColAxis& ay, const ColAxis& ax, mx::Shape shape,
                      mx::Stream s);

class Col2Im : public mx::UnaryPrimitive {
 public:
  // out_shape: the output's shape (its batch is replaced under vmap)
  Col2Im(mx::Stream s, ColAxis ay, ColAxis ax, ColKind kind, mx::Shape out_shape)
      : mx::UnaryPrimitive(s), ay_(ay), ax_(ax), kind_(kind), out_shape_(std::move(out_shape)) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& output) override {
    launch(stream(), inputs, output, [ay = ay_, ax = ax_, kind = kind_](auto& in, auto& out) {
      const auto& a = in[0];
      auto& o = out[0];
      if (kind == ColKind::scatter) {  // a: cols (N, H, W, kH, kW, C), o: image (N, Ho, Wo, C)
        dispatch_float(a.dtype(), "col2im", [&](auto tag) {
          using T = decltype(tag);
          columns_to_image<T>(a.template data<T>(), a.shape(0), a.shape(1), a.shape(2), a.shape(3), a.shape(4),
                              a.shape(5), ay, ax, o.shape(1), o.shape(2), o.template data<T>());
        });
        return;
      }
      auto gather = [&](auto tag) {  // a: image (N, Ho, Wo, C), o: cols (N, H, W, kH, kW, C)
        using T = decltype(tag);
        image_to_columns<T>(a.template data<T>(), a.shape(0), a.shape(1), a.shape(2), a.shape(3), ay, ax, o.shape(1),
                            o.shape(2), o.shape(3), o.shape(4), o.template data<T>());
      };
      switch (a.itemsize()) {
        case 2: gather(uint16_t{}); break;
        case 4: gather(uint32_t{}); break;
        default: gather(uint64_t{});
      }
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override { no_gpu("col2im"); }
  const char* name() const override { return kind_ == ColKind::scatter ? "PorterCol2Im" : "PorterIm2Col"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    if (!same_type<Col2Im>(*this, other)) return false;
    auto& o = static_cast<const Col2Im&>(other);
    return ay_ == o.ay_ && ax_ == o.ax_ && kind_ == o.kind_;
  }
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>&, const std::vector<mx::array>&) override {
    const auto c = cast_like(cotangents[0], primals[0], stream());
    return {col2im_make(other_kind(), c, ay_, ax_, primals[0].shape(), stream())};
  }
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>&) override {
    return {col2im_make(kind_, cast_like(tangents[0], primals[0], stream()), ay_, ax_, output_shape(primals[0]),
                        stream())};
  }
  std::pair<std::vector<mx::array>, std::vector<int>> vmap(const std::vector<mx::array>& inputs,
                                                           const std::vector<int>& axes) override {
    return vmap_into_batch(stream(), "col2im", inputs, axes, {true}, [&](const std::vector<mx::array>& in) {
      mx::Shape shape = out_shape_;
      shape[0] = in[0].shape(0);
      return std::vector<mx::array>{col2im_make(kind_, in[0], ay_, ax_, shape, stream())};
    });
  }
 private:
  ColKind other_kind() const { return kind_ == ColKind::scatter ? ColKind::gather : ColKind::scatter; }
  mx::Shape output_shape(const mx::array& in) const {
    mx::Shape shape = out_shape_;
    shape[0] = in.shape(0);
    return shape;
  }
  ColAxis ay_, ax_;
  ColKind kind_;
  mx::Shape out_shape_;
};

mx::array col2im_make(ColKind kind, const mx::array& a, const ColAxis& ay, const ColAxis& ax, mx::Shape shape,
                      mx::Stream s) {
  auto p = std::make_shared<Col2Im>(s, ay, ax, kind, shape);
  return mx::array(std::move(shape), a.dtype(), std::move(p), {a});
}

namespace {

ColAxis col_axis(const Ints& v, size_t d, const char* what) {
  if (v.size() != 6) fail(what, "geometry must be (stride_h, step_h, offset_h, stride_w, step_w, offset_w)");
  const ColAxis ax{v[3 * d], v[3 * d + 1], v[3 * d + 2]};
  if (ax.stride <= 0 || ax.step == 0) fail(what, "strides must be positive and tap steps non-zero");
  return ax;
}

void check_float(const mx::array& a, const char* what, const char* arg) {
  if (a.dtype() != mx::float32 && a.dtype() != mx::float16 && a.dtype() != mx::bfloat16 &&
      a.dtype() != mx::float64) {
    fail(what, std::string(arg) + " must be float16, bfloat16, float32 or float64");
  }
}

}  // namespace

// cols (N, H, W, kH, kW, C) -> image (N, out_h, out_w, C); geometry: per dim (stride, step, offset).
mx::array col2im_op(const mx::array& cols, int64_t out_h, int64_t out_w, const Ints& geometry) {
  auto s = cpu_stream("col2im");
  if (cols.ndim() != 6) fail("col2im", "cols must be (N, H, W, kH, kW, C)");
  check_float(cols, "col2im", "cols");
  if (out_h <= 0 || out_w <= 0) fail("col2im", "the output size must be positive");
  const ColAxis ay = col_axis(geometry, 0, "col2im"), ax = col_axis(geometry, 1, "col2im");
  mx::Shape shape{cols.shape(0), static_cast<int>(out_h), static_cast<int>(out_w), cols.shape(5)};
  return col2im_make(ColKind::scatter, cols, ay, ax, std::move(shape), s);
}

// image (N, Ho, Wo, C) -> cols (N, h, w, kh, kw, C); geometry as col2im's.
mx::array im2col_op(const mx::array& image, int64_t h, int64_t w, int64_t kh, int64_t kw, const Ints& geometry) {
  auto s = cpu_stream("im2col");
  if (image.ndim() != 4) fail("im2col", "image must be (N, H, W, C)");
  check_float(image, "im2col", "image");
  if (h <= 0 || w <= 0 || kh <= 0 || kw <= 0) fail("im2col", "the column sizes must be positive");
  const ColAxis ay = col_axis(geometry, 0, "im2col"), ax = col_axis(geometry, 1, "im2col");
  mx::Shape shape{image.shape(0), static_cast<int>(h), static_cast<int>(w), static_cast<int>(kh),
                  static_cast<int>(kw), image.shape(3)};
  return col2im_make(ColKind::gather, image, ay, ax, std::move(shape), s);
}

void bind_col2im(nb::module_& m) {
  m.def("col2im", &porter::col2im_op, nb::arg("cols"), nb::arg("out_h"), nb::arg("out_w"), nb::arg("geometry"));
  m.def("im2col", &porter::im2col_op, nb::arg("image"), nb::arg("h"), nb::arg("w"), nb::arg("kh"), nb::arg("kw"),
        nb::arg("geometry"));
}

}  // namespace porter
