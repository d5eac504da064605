/// @file tensor.h
/// @brief Tensor: a contiguous array of one dtype on one device, or a view into one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mgpu/allocator.h"
#include "mgpu/device.h"
#include "mgpu/dtype.h"
#include "mgpu/error.h"

namespace mgpu {

/// Sizes of each dimension, outermost first. {} is a scalar (one element).
using Shape = std::vector<std::int64_t>;

/// Number of elements of a shape (1 for a scalar).
std::int64_t shape_numel(const Shape& s);
/// "[2, 3]".
std::string shape_str(const Shape& s);

/// A row-major, contiguous tensor. Copying a Tensor shares its storage (like a
/// PyTorch tensor handle); clone() makes a deep copy. A view (view(), slice(), reshape())
/// shares the storage at an element offset, which is how DDP packs gradients into buckets.
class Tensor {
 public:
  /// An undefined tensor (defined() is false).
  Tensor() = default;

  /// Uninitialized memory of the given shape.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32,
                      const Device& device = Device::cpu());
  /// A new tensor of the given shape, every element 0.
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32,
                      const Device& device = Device::cpu());
  /// A new tensor of the given shape, every element `value` (converted to `dtype`).
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32,
                     const Device& device = Device::cpu());
  /// Page-locked host memory: the staging buffer for asynchronous host<->GPU copies.
  static Tensor empty_pinned(const Shape& shape, DType dtype = DType::f32);
  /// Copies `values` (host) into a new tensor on `device`. T must match a DType.
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape,
                            const Device& device = Device::cpu());

  /// False for a default-constructed tensor (no storage).
  bool defined() const { return storage_ != nullptr; }
  /// Sizes of each dimension, outermost first.
  const Shape& shape() const { return shape_; }
  /// Number of dimensions.
  int ndim() const { return static_cast<int>(shape_.size()); }
  /// Size of dimension `d` (negative counts from the end).
  std::int64_t size(int d) const;
  /// Number of elements (product of the shape; 1 for a scalar).
  std::int64_t numel() const { return numel_; }
  /// Bytes the elements occupy: numel() * dtype_size(dtype()).
  std::size_t nbytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }
  /// Element type.
  DType dtype() const { return dtype_; }
  /// Device the storage lives on and ops on this tensor run on.
  const Device& device() const { return device_; }
  /// "f32[64, 10] on cuda:0" — used in every error message.
  std::string str() const;

  /// Pointer to the first element (device memory for CUDA tensors).
  void* raw_data() const;
  /// Typed pointer; throws mgpu::Error when T does not match dtype().
  template <typename T>
  T* data() const {
    MGPU_CHECK(dtype_of<T>::value == dtype_, "Tensor::data: tensor is ", str(),
               " but the element type asked for is ", dtype_name(dtype_of<T>::value));
    return static_cast<T*>(raw_data());
  }

  /// A view of `shape` starting `offset` elements into this tensor (shares storage).
  Tensor view(std::int64_t offset, const Shape& shape) const;
  /// Same elements, another shape with the same numel (shares storage). One -1 is inferred.
  Tensor reshape(const Shape& shape) const;
  /// Rows [begin, end) along dimension 0 (shares storage).
  Tensor slice(std::int64_t begin, std::int64_t end) const;
  /// Shares storage with `other` (the same block, possibly different offsets).
  bool shares_storage(const Tensor& other) const { return storage_ == other.storage_; }
  /// Where this tensor starts in its storage, in elements (0 unless this is a view at an offset).
  std::int64_t offset() const { return offset_; }
  /// The shared memory block (null for an undefined tensor).
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  /// A copy on another device (same dtype). Returns *this if already there.
  Tensor to(const Device& device) const;
  /// A copy in another dtype (same device). Returns *this if already that dtype.
  Tensor to(DType dtype) const;
  /// A deep copy on the same device.
  Tensor clone() const;
  /// All elements as host values of type T (converting from the tensor's dtype; waits for
  /// pending GPU work).
  template <typename T>
  std::vector<T> to_vector() const;
  /// The single element of a one-element tensor, as double.
  double item() const;

 private:
  std::shared_ptr<Storage> storage_;
  std::int64_t offset_ = 0;  // in elements
  Shape shape_;
  std::int64_t numel_ = 0;
  DType dtype_ = DType::f32;
  Device device_;
};

/// Throws mgpu::Error unless `a` and `b` have the same shape; message names `op`.
void check_same_shape(const char* op, const Tensor& a, const Tensor& b);
/// Throws unless same dtype.
void check_same_dtype(const char* op, const Tensor& a, const Tensor& b);
/// Throws unless same device.
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
/// Throws unless the tensor is defined.
void check_defined(const char* op, const Tensor& t, const char* what = "tensor");

}  // namespace mgpu
