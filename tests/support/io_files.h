// Files for the checkpoint tests (the library's io tests and lesson 07's): hand-made
// safetensors files, bitwise tensor comparison, temporary folders.
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "mgpu/tensor.h"
#include "temp_dir.h"

namespace mgpu::testing {

/// A file made by hand: the 8-byte little-endian length of `header`, `header`, `data`.
inline std::string raw_safetensors(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

/// `n` bytes 0, 1, 2, ... (mod 256).
inline std::string counting_bytes(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i & 0xFF);
  return s;
}

/// The bytes of a tensor (on the host).
inline std::string tensor_bytes(const Tensor& t) {
  const Tensor h = t.to(Device::cpu());
  return std::string(static_cast<const char*>(h.raw_data()), h.nbytes());
}

/// Same dtype, same shape, same bytes.
inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && tensor_bytes(a) == tensor_bytes(b);
}

/// The bytes of f32 values.
inline std::string f32_bytes(const std::vector<float>& v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

/// A dict with every dtype, names out of dtype order, a 0-d and an empty tensor.
inline std::map<std::string, Tensor> every_dtype_dict() {
  std::map<std::string, Tensor> d;
  d["a_f16"] = Tensor::from_vector<float>({1, 2}, {2}).to(DType::f16);
  d["b_bf16"] = Tensor::from_vector<float>({3, 4}, {2}).to(DType::bf16);
  d["c_i32"] = Tensor::from_vector<std::int32_t>({5}, {1});
  d["d_f32"] = Tensor::from_vector<float>({6}, {1});
  d["e_f64"] = Tensor::from_vector<double>({7}, {1});
  d["f_i64"] = Tensor::from_vector<std::int64_t>({8}, {1});
  d["g_f64"] = Tensor::zeros({0, 3}, DType::f64);
  d["h_f32"] = Tensor::full({}, 9.0, DType::f32);
  return d;
}

/// every_dtype_dict()'s tensors as a safetensors header lists them after the metadata, in
/// the writer's order (I64, F64, F32, I32, BF16, F16; by name within a dtype), with the
/// header's closing brace.
inline std::string every_dtype_dict_entries() {
  return
      R"("f_i64":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)"
      R"("e_f64":{"dtype":"F64","shape":[1],"data_offsets":[8,16]},)"
      R"("g_f64":{"dtype":"F64","shape":[0,3],"data_offsets":[16,16]},)"
      R"("d_f32":{"dtype":"F32","shape":[1],"data_offsets":[16,20]},)"
      R"("h_f32":{"dtype":"F32","shape":[],"data_offsets":[20,24]},)"
      R"("c_i32":{"dtype":"I32","shape":[1],"data_offsets":[24,28]},)"
      R"("b_bf16":{"dtype":"BF16","shape":[2],"data_offsets":[28,32]},)"
      R"("a_f16":{"dtype":"F16","shape":[2],"data_offsets":[32,36]}})";
}

/// The whole content of a file ("" when it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace mgpu::testing
