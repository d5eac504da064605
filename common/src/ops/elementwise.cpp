// Elementwise ops (add/sub/mul/scale/axpy, add_rowwise_, relu and its backward): the CPU
// loops and the dispatch to elementwise.cu. 16-bit tensors compute in float and round
// once per element, so the CPU and CUDA results agree bit for bit. The CPU loops split
// their elements among the library's threads (parallel_for.h): each element is computed on
// its own, so the thread count never changes a result.
#include "dispatch.h"
#include "mgpu/ops.h"
#include "op_checks.h"
#include "ops_cuda.h"
#include "parallel_for.h"

namespace mgpu {
namespace {

using detail::BinaryOp;
using detail::kGrainSize;
using detail::parallel_for;
using detail::from_compute;
using detail::to_compute;

const char* binary_name(BinaryOp op, bool in_place) {
  switch (op) {
    case BinaryOp::add: return in_place ? "add_" : "add";
    case BinaryOp::sub: return in_place ? "sub_" : "sub";
    case BinaryOp::mul: return in_place ? "mul_" : "mul";
  }
  return "?";
}

// out <- a op b; out may be a itself (each element is read before it is written).
void binary(BinaryOp op, Tensor& out, const Tensor& a, const Tensor& b, const char* name) {
  if (a.numel() == 0) return;
  if (a.device().is_cuda()) {
    MGPU_IF_CUDA(detail::binary_cuda(op, out, a, b));
    return;
  }
  detail::dispatch_floating(a.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    parallel_for(0, a.numel(), kGrainSize, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        const auto x = to_compute(pa[i]);
        const auto y = to_compute(pb[i]);
        const auto r = op == BinaryOp::add ? x + y : op == BinaryOp::sub ? x - y : x * y;
        po[i] = from_compute<T>(r);
      }
    });
  });
}

Tensor binary_new(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_name(op, false);
  detail::check_same_layout(name, "a", a, "b", b);
  detail::check_floating(name, "a", a);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  binary(op, out, a, b, name);
  return out;
}

void binary_in_place(BinaryOp op, Tensor& a, const Tensor& b) {
  const char* name = binary_name(op, true);
  detail::check_same_layout(name, "a", a, "b", b);
  detail::check_floating(name, "a", a);
  binary(op, a, a, b, name);
}

// y[i] <- combine(s * a[i], &y[i]), s = alpha rounded to the compute type first and the
// product rounded on its own (no FMA: see elementwise.cu), as on the GPU; `cuda` is the
// CUDA branch. scale_into writes the product, axpy_ adds it to y.
template <typename Cuda, typename Combine>
void scaled_map(const char* op, Tensor& y, const Tensor& a, double alpha, Cuda cuda,
                Combine combine) {
  if (a.numel() == 0) return;
  detail::cpu_or_cuda(a, op, cuda, [&](auto tag) {
    using T = decltype(tag);
    using C = detail::compute_t<T>;
    const C s = static_cast<C>(alpha);
    const T* pa = a.data<T>();
    T* py = y.data<T>();
    parallel_for(0, a.numel(), kGrainSize, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        const C product = s * to_compute(pa[i]);
        py[i] = from_compute<T>(combine(product, py + i));
      }
    });
  });
}

// out <- alpha * a.
void scale_into(Tensor& out, const Tensor& a, double alpha) {
  scaled_map(
      "scale", out, a, alpha, [&] { MGPU_IF_CUDA(detail::scale_cuda(out, a, alpha)); },
      [](auto product, auto*) { return product; });
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary_new(BinaryOp::add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary_new(BinaryOp::sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_new(BinaryOp::mul, a, b); }
void add_(Tensor& a, const Tensor& b) { binary_in_place(BinaryOp::add, a, b); }
void sub_(Tensor& a, const Tensor& b) { binary_in_place(BinaryOp::sub, a, b); }
void mul_(Tensor& a, const Tensor& b) { binary_in_place(BinaryOp::mul, a, b); }

Tensor scale(const Tensor& a, double alpha) {
  detail::check_floating("scale", "a", a);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  scale_into(out, a, alpha);
  return out;
}

void scale_(Tensor& a, double alpha) {
  detail::check_floating("scale_", "a", a);
  scale_into(a, a, alpha);
}

void axpy_(Tensor& y, double alpha, const Tensor& x) {
  detail::check_same_layout("axpy_", "y", y, "x", x);
  detail::check_floating("axpy_", "y", y);
  scaled_map(
      "axpy_", y, x, alpha, [&] { MGPU_IF_CUDA(detail::axpy_cuda(y, alpha, x)); },
      [](auto product, auto* yi) { return to_compute(*yi) + product; });
}

void add_rowwise_(Tensor& y, const Tensor& bias) {
  detail::check_compatible("add_rowwise_", "y", y, "bias", bias);
  detail::check_floating("add_rowwise_", "y", y);
  const std::int64_t cols = bias.numel();
  MGPU_CHECK(cols > 0 ? y.numel() % cols == 0 : y.numel() == 0,
             "add_rowwise_: y is ", y.str(), ", which is not a whole number of rows of bias ",
             bias.str(), " (y.numel() must be a multiple of bias.numel())");
  if (y.numel() == 0) return;
  if (y.device().is_cuda()) {
    MGPU_IF_CUDA(detail::add_rowwise_cuda(y, bias));
    return;
  }
  detail::dispatch_floating(y.dtype(), "add_rowwise_", [&](auto tag) {
    using T = decltype(tag);
    const T* pb = bias.data<T>();
    T* py = y.data<T>();
    const std::int64_t rows = y.numel() / cols;
    // Whole rows per chunk; a chunk holds about kGrainSize elements at least.
    parallel_for(0, rows, kGrainSize / cols + 1, [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t j = 0; j < cols; ++j) {
          T& e = py[r * cols + j];
          e = from_compute<T>(to_compute(e) + to_compute(pb[j]));
        }
    });
  });
}

Tensor relu(const Tensor& x) {
  detail::check_floating("relu", "x", x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.numel() == 0) return out;
  if (x.device().is_cuda()) {
    MGPU_IF_CUDA(detail::relu_cuda(out, x));
    return out;
  }
  detail::dispatch_floating(x.dtype(), "relu", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    // x > 0 is false for NaN, so relu(NaN) = 0 here and on the GPU alike.
    parallel_for(0, x.numel(), kGrainSize, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) po[i] = to_compute(px[i]) > 0 ? px[i] : T{};
    });
  });
  return out;
}

Tensor relu_backward(const Tensor& grad_out, const Tensor& x) {
  detail::check_same_layout("relu_backward", "grad_out", grad_out, "x", x);
  detail::check_floating("relu_backward", "grad_out", grad_out);
  Tensor grad_in = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.numel() == 0) return grad_in;
  if (x.device().is_cuda()) {
    MGPU_IF_CUDA(detail::relu_backward_cuda(grad_in, grad_out, x));
    return grad_in;
  }
  detail::dispatch_floating(x.dtype(), "relu_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pg = grad_out.data<T>();
    const T* px = x.data<T>();
    T* po = grad_in.data<T>();
    // Both values are loaded before the choice: a select instead of a branch. The sign of
    // an activation is a coin flip, so a branch here is mispredicted about every other
    // element and costs more than the memory traffic; the select also vectorizes.
    parallel_for(0, x.numel(), kGrainSize, [=](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        const T g = pg[i];
        po[i] = to_compute(px[i]) > 0 ? g : T{};
      }
    });
  });
  return grad_in;
}

}  // namespace mgpu
