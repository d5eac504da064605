// The autocast region: thread-local state and the weight-cast cache.
#include "mgpu/nn/autocast.h"

#include <map>
#include <memory>
#include <tuple>

#include "mgpu/ops.h"

namespace mgpu::amp {
namespace {

struct RegionState {
  bool enabled = false;
  DType dtype = DType::bf16;
  bool cache_enabled = true;
  int nesting = 0;  // open Autocast objects on this thread, enabled or not
};

// A weight is identified by the memory it occupies (storage, offset) and the dtype asked
// for. The entry keeps the storage alive, so its address cannot be reused by another
// tensor while the region is open (which would return a stale cast).
using CacheKey = std::tuple<const Storage*, std::int64_t, std::int64_t, DType>;
struct CacheEntry {
  std::shared_ptr<Storage> source;
  Tensor cast;
};

thread_local RegionState region;
thread_local std::map<CacheKey, CacheEntry> cache;

}  // namespace

Autocast::Autocast(DType dtype, bool enabled, bool cache_enabled)
    : prev_enabled_(region.enabled),
      prev_dtype_(region.dtype),
      prev_cache_enabled_(region.cache_enabled) {
  MGPU_CHECK(dtype == DType::f16 || dtype == DType::bf16, "Autocast: dtype is ",
             dtype_name(dtype), "; an autocast region computes in f16 or bf16");
  region.enabled = enabled;
  region.dtype = dtype;
  region.cache_enabled = cache_enabled;
  ++region.nesting;
}

Autocast::~Autocast() {
  region.enabled = prev_enabled_;
  region.dtype = prev_dtype_;
  region.cache_enabled = prev_cache_enabled_;
  if (--region.nesting == 0) cache.clear();
}

bool is_autocast_enabled() { return region.enabled; }
DType autocast_dtype() { return region.dtype; }

DType gemm_dtype(const Tensor& weight) {
  return region.enabled && weight.dtype() == DType::f32 ? region.dtype : weight.dtype();
}

Tensor cast_operand(const Tensor& t, DType dtype) {
  return t.dtype() == dtype ? t : cast(t, dtype);
}

Tensor cast_weight(const Tensor& weight, DType dtype) {
  if (weight.dtype() == dtype) return weight;
  if (!(region.enabled && region.cache_enabled && weight.dtype() == DType::f32))
    return cast(weight, dtype);
  const CacheKey key{weight.storage().get(), weight.offset(), weight.numel(), dtype};
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, CacheEntry{weight.storage(), cast(weight, dtype)}).first;
  // A view of the same memory with another shape (Conv2d reshapes its weight) shares the
  // cast: same elements, same order.
  return it->second.cast.shape() == weight.shape() ? it->second.cast
                                                   : it->second.cast.reshape(weight.shape());
}

std::size_t autocast_cache_size() { return cache.size(); }

void check_gemm_input(const std::string& layer, const char* what, const Tensor& x,
                      const Tensor& weight, DType compute) {
  check_defined(layer.c_str(), x, what);
  MGPU_CHECK(x.device() == weight.device(), layer, ": ", what, " is ", x.str(),
             " but the layer's parameters are on ", weight.device().str(),
             " (move the model with model.to(device) or the batch with .to(device))");
  if (compute == weight.dtype()) {
    MGPU_CHECK(x.dtype() == weight.dtype(), layer, ": ", what, " is ", x.str(),
               " but the layer's parameters are ", dtype_name(weight.dtype()),
               " (convert one with .to(dtype), or run the layer inside an amp::Autocast region)");
  } else {
    MGPU_CHECK(is_floating(x.dtype()), layer, ": ", what, " is ", x.str(),
               " but a floating-point input is needed");
  }
}

}  // namespace mgpu::amp
