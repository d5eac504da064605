// cast / cast_ between all 36 dtype pairs on the CPU, against conversion rules written
// out here: round-to-nearest-even for floats, truncation with saturation float -> int.
#include <cmath>
#include <limits>

#include "ops_test_util.h"

using namespace mgpu;
using namespace opstest;

namespace {

// What `v` (exactly representable in double) becomes in dtype `t`, as a double.
double expected_cast(double v, DType t) {
  switch (t) {
    case DType::f64: return v;
    case DType::f32: return static_cast<float>(v);
    case DType::f16: return half_to_float(float_to_half(static_cast<float>(v)));
    case DType::bf16: return bf16_to_float(float_to_bf16(static_cast<float>(v)));
    case DType::i32:
      if (std::isnan(v)) return 0;
      return std::trunc(std::min(std::max(v, -2147483648.0), 2147483647.0));
    case DType::i64:
      if (std::isnan(v)) return 0;
      return std::trunc(std::min(std::max(v, -9223372036854775808.0), 9223372036854775807.0));
  }
  return 0;
}

Tensor tensor_of(const std::vector<double>& v, DType t) {
  // Build in f64, then store each value through the rules above, without cast().
  Tensor out = Tensor::empty({static_cast<std::int64_t>(v.size())}, t);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double e = expected_cast(v[i], t);
    switch (t) {
      case DType::f32: out.data<float>()[i] = static_cast<float>(e); break;
      case DType::f64: out.data<double>()[i] = e; break;
      case DType::f16: out.data<half>()[i] = float_to_half(static_cast<float>(e)); break;
      case DType::bf16: out.data<bfloat16>()[i] = float_to_bf16(static_cast<float>(e)); break;
      case DType::i32: out.data<std::int32_t>()[i] = static_cast<std::int32_t>(e); break;
      case DType::i64: out.data<std::int64_t>()[i] = static_cast<std::int64_t>(e); break;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("cast converts between every pair of dtypes", "[ops][cast]") {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> source = {0.0, 1.0, -1.0, 0.5, -2.5, 3.75, 1e-3, 1e-9, 255.0,
                                      65504.0, 65520.0, 70000.0, 1e10, -1e10, 3e38,
                                      2147483648.0, -2147483649.0, 1.0000001, inf, -inf,
                                      std::numeric_limits<double>::quiet_NaN()};
  for (DType from : all_dtypes()) {
    // Integer sources cannot hold inf/NaN/fractions: their values are already converted.
    const Tensor src = tensor_of(source, from);
    const std::vector<double> src_values = values(src);
    for (DType to : all_dtypes()) {
      Tensor out = cast(src, to);
      CHECK(out.dtype() == to);
      CHECK(out.shape() == src.shape());
      std::vector<double> want(src_values.size());
      for (std::size_t i = 0; i < want.size(); ++i) want[i] = expected_cast(src_values[i], to);
      if (from == DType::i64 && to == DType::i32)  // integer narrowing wraps (mod 2^32)
        for (std::size_t i = 0; i < want.size(); ++i)
          want[i] = static_cast<std::int32_t>(src.data<std::int64_t>()[i]);
      check_equal(values(out), want, "cast " + name(from) + " -> " + name(to));
    }
  }
}

TEST_CASE("cast of integers beyond 2^53 and i64 -> i32 wrap-around", "[ops][cast]") {
  const std::vector<std::int64_t> v = {(1ll << 53) + 1, INT64_MAX, INT64_MIN, (1ll << 32) + 5, -7};
  Tensor src = Tensor::from_vector(v, {5});
  auto back = cast(src, DType::i64);
  CHECK(std::vector<std::int64_t>(back.data<std::int64_t>(), back.data<std::int64_t>() + 5) == v);
  Tensor narrow = cast(src, DType::i32);
  for (int i = 0; i < 5; ++i) CHECK(narrow.data<std::int32_t>()[i] == static_cast<std::int32_t>(v[i]));
  Tensor f = cast(src, DType::f64);
  CHECK(f.data<double>()[0] == static_cast<double>(v[0]));  // rounds to nearest even
}

TEST_CASE("cast_ writes into an existing tensor; round trips are exact", "[ops][cast]") {
  for (std::int64_t n : sizes()) {
    Tensor h = random_tensor({n}, DType::f16, -100, 100);
    Tensor f = Tensor::empty({n}, DType::f32);
    cast_(f, h);
    Tensor h2 = Tensor::empty({n}, DType::f16);
    cast_(h2, f);
    CHECK(std::equal(h.data<half>(), h.data<half>() + n, h2.data<half>(),
                     [](half a, half b) { return a.bits == b.bits; }));
    // Same dtype: a copy into new memory.
    Tensor same = cast(h, DType::f16);
    CHECK(!same.shares_storage(h));
    check_equal(values(same), values(h), "cast to the same dtype");
  }
  // cast_ only needs equal element counts: a [2, 3] may land in a [6].
  Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::empty({6}, DType::f64);
  cast_(b, a);
  check_equal(values(b), {1, 2, 3, 4, 5, 6}, "cast_ across shapes");
  Tensor wrong = Tensor::empty({5}, DType::f64);
  CHECK_THROWS_WITH(cast_(wrong, a), Catch::Contains("cast_") && Catch::Contains("[2, 3]") &&
                                         Catch::Contains("[5]"));
  CHECK_THROWS_WITH(cast_(b, Tensor::empty({6}, DType::f32, Device::cpu(1))),
                    Catch::Contains("cast_") && Catch::Contains("cpu:1") && Catch::Contains("cpu:0"));
}
