// Tensor: construction, views, conversions to other devices and dtypes.
#include "mgpu/tensor.h"

#include <cstdint>
#include <sstream>

#include "mgpu/copy.h"
#include "mgpu/host_reads.h"
#include "mgpu/ops.h"

namespace mgpu {

std::int64_t shape_numel(const Shape& s) {
  std::int64_t n = 1;
  for (std::int64_t d : s)
    MGPU_CHECK(!__builtin_mul_overflow(n, d, &n), "shape ", shape_str(s),
               " has more elements than a 64-bit count holds");
  return n;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

// Dimensions >= 0, and a byte count that fits a size_t (else it would wrap to a small
// block that every write overruns).
static void check_shape(const Shape& shape, DType dtype) {
  for (std::int64_t d : shape)
    MGPU_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
  const auto numel = static_cast<std::size_t>(shape_numel(shape));
  MGPU_CHECK(numel <= SIZE_MAX / dtype_size(dtype), "a ", dtype_name(dtype), " tensor of shape ",
             shape_str(shape), " needs more bytes than memory can address; ask for less: a "
             "smaller --batch-size or --size");
}

Tensor Tensor::empty(const Shape& shape, DType dtype, const Device& device) {
  check_shape(shape, dtype);
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = std::make_shared<Storage>(device, t.nbytes());
  return t;
}

Tensor Tensor::empty_pinned(const Shape& shape, DType dtype) {
  check_shape(shape, dtype);
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.device_ = Device::cpu();
  t.storage_ = std::make_shared<Storage>(t.device_, t.nbytes(), /*pinned=*/true);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, const Device& device) {
  return full(shape, 0.0, dtype, device);
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, const Device& device) {
  Tensor t = empty(shape, dtype, device);
  fill_(t, value);
  return t;
}

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, const Device& device) {
  MGPU_CHECK(static_cast<std::int64_t>(values.size()) == shape_numel(shape), "from_vector: ",
             values.size(), " values do not fill shape ", shape_str(shape));
  Tensor host = empty(shape, dtype_of<T>::value, Device::cpu());
  std::copy(values.begin(), values.end(), host.data<T>());
  return host.to(device);
}

std::int64_t Tensor::size(int d) const {
  const int n = ndim();
  const int k = d < 0 ? d + n : d;
  MGPU_CHECK(k >= 0 && k < n, "Tensor::size: dimension ", d, " out of range for ", str());
  return shape_[k];
}

std::string Tensor::str() const {
  if (!defined()) return "undefined tensor";
  std::ostringstream os;
  os << dtype_name(dtype_) << shape_str(shape_) << " on " << device_.str();
  return os.str();
}

void* Tensor::raw_data() const {
  MGPU_CHECK(defined(), "raw_data of an undefined tensor");
  MGPU_CHECK(storage_->holds_memory(), "the memory of ", str(), " was released (a fully "
             "sharded parameter outside its unit's forward and backward: read the full "
             "parameters from the sharded model's full_state_dict())");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<std::int64_t>(dtype_size(dtype_));
}

Tensor Tensor::view(std::int64_t offset, const Shape& shape) const {
  check_defined("view", *this);
  check_shape(shape, dtype_);
  const std::int64_t n = shape_numel(shape);
  MGPU_CHECK(offset >= 0 && offset + n <= numel_, "view: elements [", offset, ", ", offset + n,
             ") fall outside ", str());
  Tensor v = *this;
  v.offset_ = offset_ + offset;
  v.shape_ = shape;
  v.numel_ = n;
  return v;
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape s = shape;
  int infer = -1;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      MGPU_CHECK(infer < 0, "reshape: more than one -1 in ", shape_str(shape));
      infer = static_cast<int>(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    MGPU_CHECK(known > 0 && numel_ % known == 0, "reshape: cannot infer -1 in ", shape_str(shape),
               " for ", str());
    s[infer] = numel_ / known;
  }
  MGPU_CHECK(shape_numel(s) == numel_, "reshape: ", str(), " has ", numel_,
             " elements, shape ", shape_str(shape), " needs ", shape_numel(s));
  return view(0, s);
}

Tensor Tensor::slice(std::int64_t begin, std::int64_t end) const {
  check_defined("slice", *this);
  MGPU_CHECK(ndim() >= 1, "slice: ", str(), " is a scalar");
  MGPU_CHECK(0 <= begin && begin <= end && end <= shape_[0], "slice: rows [", begin, ", ", end,
             ") out of range for ", str());
  const std::int64_t row = shape_[0] ? numel_ / shape_[0] : 0;
  Shape s = shape_;
  s[0] = end - begin;
  return view(begin * row, s);
}

Tensor Tensor::to(const Device& device) const {
  check_defined("to", *this);
  if (device == device_) return *this;
  Tensor out = empty(shape_, dtype_, device);
  copy_(out, *this);
  return out;
}

Tensor Tensor::to(DType dtype) const {
  check_defined("to", *this);
  if (dtype == dtype_) return *this;
  return cast(*this, dtype);
}

Tensor Tensor::clone() const {
  check_defined("clone", *this);
  Tensor out = empty(shape_, dtype_, device_);
  copy_(out, *this);
  return out;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  check_defined("to_vector", *this);
  if (device_.is_cpu()) detail::note_host_read();  // from a GPU, copy_ counts it
  Tensor host = to(Device::cpu()).to(dtype_of<T>::value);
  const T* p = host.data<T>();
  return std::vector<T>(p, p + numel_);
}

double Tensor::item() const {
  MGPU_CHECK(numel_ == 1, "item: ", str(), " does not have exactly one element");
  return to_vector<double>()[0];
}

#define MGPU_INSTANTIATE(T)                                                                  \
  template Tensor Tensor::from_vector<T>(const std::vector<T>&, const Shape&, const Device&); \
  template std::vector<T> Tensor::to_vector<T>() const;
MGPU_INSTANTIATE(float)
MGPU_INSTANTIATE(double)
MGPU_INSTANTIATE(half)
MGPU_INSTANTIATE(bfloat16)
MGPU_INSTANTIATE(std::int32_t)
MGPU_INSTANTIATE(std::int64_t)
#undef MGPU_INSTANTIATE

void check_same_shape(const char* op, const Tensor& a, const Tensor& b) {
  MGPU_CHECK(a.shape() == b.shape(), op, ": shape mismatch: ", a.str(), " vs ", b.str());
}
void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  MGPU_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch: ", a.str(), " vs ", b.str(),
             " (cast one with .to(dtype))");
}
void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  MGPU_CHECK(a.device() == b.device(), op, ": device mismatch: ", a.str(), " vs ", b.str(),
             " (move one with .to(device))");
}
void check_defined(const char* op, const Tensor& t, const char* what) {
  MGPU_CHECK(t.defined(), op, ": ", what, " is undefined");
}

}  // namespace mgpu
