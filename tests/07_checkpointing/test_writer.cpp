// Lesson 07, task 1: the safetensors writer, byte for byte.
#include <catch2/catch.hpp>

#include "../common/io/io_test_util.h"
#include "../common/io/malformed_cases.h"
#include "checkpoint_lesson.h"
#include "mgpu/ops.h"

using mgpu::DType;
using mgpu::Tensor;
using mgpu::testing::le64;
namespace io = mgpu::io;
namespace l07 = mgpu::lesson07;

using mgpu::testing::every_dtype_dict;
using mgpu::testing::f32_bytes;

TEST_CASE("writer: a small dict, byte for byte", "[07_checkpointing][task1][points:2]") {
  // The example of the contract: 54 bytes of JSON, 2 spaces, the data.
  const std::string json = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  CHECK(l07::serialize_safetensors({{"a", Tensor::from_vector<float>({1, 2}, {2})}}) ==
        le64(56) + json + "  " + f32_bytes({1, 2}));
  // The format's own vectors: no padding needed; 7 spaces; nothing; metadata alone.
  const Tensor attn = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {1, 2, 3});
  CHECK(l07::serialize_safetensors({{"attn.0", attn}}) ==
        le64(64) + R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})" +
            f32_bytes({0, 1, 2, 3, 4, 5}));
  CHECK(l07::serialize_safetensors({{"attn0", attn.reshape({1, 1, 2, 3})}}) ==
        le64(72) + R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})" +
            "       " + f32_bytes({0, 1, 2, 3, 4, 5}));
  CHECK(l07::serialize_safetensors({}) == le64(8) + "{}      ");
  CHECK(l07::serialize_safetensors({}, {{"framework", "pt"}}) ==
        le64(40) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
}

TEST_CASE("writer: every dtype in the reference order, metadata, 0-d and empty tensors",
          "[07_checkpointing][task1][points:2]") {
  const io::TensorDict d = every_dtype_dict();
  const io::Metadata meta{{"step", "12"}, {"note", "é \"q\"\n"}};
  const std::string mine = l07::serialize_safetensors(d, meta);
  const std::string reference = io::serialize_safetensors(d, meta);
  if (mine != reference) {  // show where they part
    std::size_t i = 0;
    while (i < mine.size() && i < reference.size() && mine[i] == reference[i]) ++i;
    FAIL("the bytes differ from byte " << i << " on:\n  yours:     "
         << mine.substr(i, 80) << "\n  reference: " << reference.substr(i, 80));
  }
  // Random dicts too.
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    io::TensorDict r;
    const DType dtypes[] = {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i64, DType::i32};
    for (std::uint64_t i = 0; i < 1 + seed % 5; ++i) {
      Tensor t = Tensor::empty({static_cast<std::int64_t>(1 + (seed + i) % 4), 3});
      mgpu::uniform_(t, seed * 10 + i, -100.0, 100.0);
      r["layer" + std::to_string((seed * 7 + i) % 5) + "." + std::to_string(i)] = t.to(dtypes[(seed + i) % 6]);
    }
    INFO("random dict " << seed);
    CHECK(l07::serialize_safetensors(r) == io::serialize_safetensors(r));
  }
}

TEST_CASE("writer: a name the format reserves is refused", "[07_checkpointing][task1][points:1]") {
  CHECK_THROWS_AS(l07::serialize_safetensors({{"__metadata__", Tensor::full({1}, 1.0)}}), mgpu::Error);
  // And what it writes, the library's reader reads back.
  const io::TensorDict d = every_dtype_dict();
  const io::SafetensorsFile back = io::parse_safetensors(l07::serialize_safetensors(d), "yours");
  REQUIRE(back.tensors.size() == d.size());
  for (const auto& [name, t] : d) CHECK(mgpu::testing::bitwise_equal(back.tensors.at(name), t));
}
