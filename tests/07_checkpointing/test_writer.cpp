// Lesson 07, task 1: the safetensors writer (io::serialize_safetensors), byte for byte. The
// expected bytes are written out here, or checked field by field; the reader that reads
// them back is the reference's (task 2).
#include <catch2/catch.hpp>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "io_files.h"
#include "malformed_cases.h"
#include "mgpu/io/safetensors.h"
#include "mgpu/ops.h"

using mgpu::DType;
using mgpu::Tensor;
using mgpu::testing::le64;
namespace io = mgpu::io;

using mgpu::testing::every_dtype_dict;
using mgpu::testing::f32_bytes;
using mgpu::testing::tensor_bytes;

namespace {

/// Shows where `mine` and `expected` part, or nothing when they are equal.
void check_same_bytes(const std::string& mine, const std::string& expected) {
  if (mine == expected) return;
  std::size_t i = 0;
  while (i < mine.size() && i < expected.size() && mine[i] == expected[i]) ++i;
  FAIL_CHECK("the bytes differ from byte " << i << " on:\n  yours:    " << mine.substr(i, 80)
             << "\n  expected: " << expected.substr(i, 80));
}

/// Checks the file `bytes` that the writer made of `d`, field by field: the header's length,
/// compact JSON padded with spaces to a multiple of 8, the tensors in the reference order
/// (dtype rank, largest first, then name) with their dtype, shape and back-to-back offsets,
/// the data in that order; and the reference's reader gives every tensor back, bit for bit.
void check_file_of(const std::string& bytes, const io::TensorDict& d) {
  REQUIRE(bytes.size() >= 8);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  REQUIRE(8 + n <= bytes.size());
  CHECK(n % 8 == 0);
  std::string text = bytes.substr(8, n);
  const std::size_t end = text.find_last_not_of(' ');
  CHECK(n - (end + 1) < 8);  // fewer than 8 spaces of padding
  text.resize(end + 1);
  const nlohmann::ordered_json header = nlohmann::ordered_json::parse(text);
  CHECK(header.dump() == text);  // compact, fields in the order written
  std::vector<std::string> order;
  for (const auto& [name, t] : d) order.push_back(name);
  std::sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) {
    const int ra = io::safetensors_dtype_rank(d.at(a).dtype());
    const int rb = io::safetensors_dtype_rank(d.at(b).dtype());
    return ra != rb ? ra > rb : a < b;
  });
  std::vector<std::string> written;
  for (const auto& [name, entry] : header.items()) written.push_back(name);
  REQUIRE(written == order);
  std::uint64_t offset = 0;
  std::string data;
  for (const std::string& name : order) {
    INFO("tensor '" << name << "'");
    const Tensor& t = d.at(name);
    const nlohmann::ordered_json& e = header.at(name);
    CHECK(e.dump() == nlohmann::ordered_json{{"dtype", io::safetensors_dtype_name(t.dtype())},
                                             {"shape", t.shape()},
                                             {"data_offsets", {offset, offset + t.nbytes()}}}.dump());
    offset += t.nbytes();
    data += tensor_bytes(t);
  }
  CHECK(bytes.substr(8 + n) == data);
  const io::SafetensorsFile back = io::parse_safetensors(bytes, "yours");
  REQUIRE(back.tensors.size() == d.size());
  for (const auto& [name, t] : d) CHECK(mgpu::testing::bitwise_equal(back.tensors.at(name), t));
}

}  // namespace

TEST_CASE("writer: a small dict, byte for byte", "[07_checkpointing][task1][points:2]") {
  // The example of the contract: 54 bytes of JSON, 2 spaces, the data.
  const std::string json = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  CHECK(io::serialize_safetensors({{"a", Tensor::from_vector<float>({1, 2}, {2})}}) ==
        le64(56) + json + "  " + f32_bytes({1, 2}));
  // The format's own vectors: no padding needed; 7 spaces; nothing; metadata alone.
  const Tensor attn = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {1, 2, 3});
  CHECK(io::serialize_safetensors({{"attn.0", attn}}) ==
        le64(64) + R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})" +
            f32_bytes({0, 1, 2, 3, 4, 5}));
  CHECK(io::serialize_safetensors({{"attn0", attn.reshape({1, 1, 2, 3})}}) ==
        le64(72) + R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})" +
            "       " + f32_bytes({0, 1, 2, 3, 4, 5}));
  CHECK(io::serialize_safetensors({}) == le64(8) + "{}      ");
  CHECK(io::serialize_safetensors({}, {{"framework", "pt"}}) ==
        le64(40) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
}

TEST_CASE("writer: every dtype in the reference order, metadata, 0-d and empty tensors",
          "[07_checkpointing][task1][points:2]") {
  const io::TensorDict d = every_dtype_dict();
  const io::Metadata meta{{"step", "12"}, {"note", "é \"q\"\n"}};
  // I64, then F64, F32, I32, BF16, F16; by name within a dtype; metadata keys in order.
  const std::string header =
      R"({"__metadata__":{"note":"é \"q\"\n","step":"12"},)" +
      mgpu::testing::every_dtype_dict_entries();
  const std::string padding((8 - header.size() % 8) % 8, ' ');
  std::string data;
  for (const char* name : {"f_i64", "e_f64", "g_f64", "d_f32", "h_f32", "c_i32", "b_bf16", "a_f16"})
    data += tensor_bytes(d.at(name));
  check_same_bytes(io::serialize_safetensors(d, meta),
                   le64(header.size() + padding.size()) + header + padding + data);
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
    check_file_of(io::serialize_safetensors(r), r);
  }
}

TEST_CASE("writer: a name the format reserves is refused", "[07_checkpointing][task1][points:1]") {
  CHECK_THROWS_AS(io::serialize_safetensors({{"__metadata__", Tensor::full({1}, 1.0)}}), mgpu::Error);
  // And what it writes, the reference's reader reads back.
  const io::TensorDict d = every_dtype_dict();
  const io::SafetensorsFile back = io::parse_safetensors(io::serialize_safetensors(d), "yours");
  REQUIRE(back.tensors.size() == d.size());
  for (const auto& [name, t] : d) CHECK(mgpu::testing::bitwise_equal(back.tensors.at(name), t));
}
