// mgpu::io safetensors: the writer's exact bytes, round trips, every refusal of the reader
// and the edge cases it must accept.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>

#include "io_files.h"
#include "malformed_cases.h"
#include "mgpu/device.h"
#include "mgpu/io/safetensors.h"
#include "mgpu/ops.h"

using mgpu::DType;
using mgpu::Tensor;
using mgpu::io::SafetensorsError;
using mgpu::io::SafetensorsRule;
using mgpu::testing::bitwise_equal;
using mgpu::testing::f32_bytes;
using mgpu::testing::le64;
using mgpu::testing::raw_safetensors;
namespace io = mgpu::io;

namespace {

// Parses `bytes` (named "bad.safetensors") and checks the refusal: its rule, the tensor it
// names, and that the message carries the file, the tensor and the rule.
void expect_refusal(const std::string& bytes, SafetensorsRule rule, const std::string& tensor) {
  try {
    io::parse_safetensors(bytes, "bad.safetensors");
  } catch (const SafetensorsError& e) {
    INFO(e.what());
    CHECK(e.rule() == rule);
    CHECK(e.tensor() == tensor);
    CHECK(e.file() == "bad.safetensors");
    const std::string msg = e.what();
    CHECK(msg.find("bad.safetensors") == 0);
    CHECK(msg.find(std::string("rule ") + io::rule_name(rule)) != std::string::npos);
    if (!tensor.empty()) CHECK(msg.find("tensor '" + tensor + "'") != std::string::npos);
    return;
  }
  FAIL("accepted a file that breaks rule " << io::rule_name(rule));
}

}  // namespace

TEST_CASE("safetensors writer: the format's own test vectors, byte for byte", "[io][safetensors]") {
  // One f32 tensor of shape [1, 2, 3]: a 64-byte header needs no padding.
  const Tensor attn = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {1, 2, 3});
  const std::string h1 = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  REQUIRE(h1.size() == 64);
  CHECK(io::serialize_safetensors({{"attn.0", attn}}) ==
        le64(64) + h1 + f32_bytes({0, 1, 2, 3, 4, 5}));

  // A shorter name: 65 bytes of JSON padded with 7 spaces to 72.
  const std::string h2 = R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})";
  REQUIRE(h2.size() == 65);
  CHECK(io::serialize_safetensors({{"attn0", attn.reshape({1, 1, 2, 3})}}) ==
        le64(72) + h2 + "       " + f32_bytes({0, 1, 2, 3, 4, 5}));

  // Nothing at all, and metadata alone.
  CHECK(io::serialize_safetensors({}) == le64(8) + "{}      ");
  CHECK(io::serialize_safetensors({}, {{"framework", "pt"}}) ==
        le64(40) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
}

TEST_CASE("safetensors writer: dtype order (largest first), then name; 0-d and empty tensors",
          "[io][safetensors]") {
  const io::TensorDict d = mgpu::testing::every_dtype_dict();
  const std::string bytes = io::serialize_safetensors(d, {{"note", "é \"q\" \n\x01"}});
  const std::string expected_json =
      R"({"__metadata__":{"note":"é \"q\" \n\u0001"},)" +
      mgpu::testing::every_dtype_dict_entries();
  const std::uint64_t n = (expected_json.size() + 7) / 8 * 8;
  REQUIRE(bytes.size() == 8 + n + 36);
  CHECK(bytes.substr(0, 8) == le64(n));
  CHECK(bytes.substr(8, n) == expected_json + std::string(n - expected_json.size(), ' '));

  // And everything comes back bit for bit.
  const io::SafetensorsFile back = io::parse_safetensors(bytes, "order.safetensors");
  REQUIRE(back.tensors.size() == d.size());
  for (const auto& [name, t] : d) {
    INFO(name);
    CHECK(bitwise_equal(back.tensors.at(name), t));
  }
  CHECK(back.metadata.at("note") == "é \"q\" \n\x01");
}

TEST_CASE("safetensors: random dicts survive a file round trip bit for bit", "[io][safetensors]") {
  mgpu::testing::TempDir dir;
  const DType dtypes[] = {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i64, DType::i32};
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    io::TensorDict d;
    for (std::uint64_t i = 0; i < 1 + seed % 6; ++i) {
      mgpu::Shape shape;
      for (std::uint64_t k = 0; k < (seed + i) % 4; ++k) shape.push_back(static_cast<std::int64_t>((seed * 7 + i * 3 + k) % 5));
      Tensor t = Tensor::empty(shape, DType::f32);
      mgpu::uniform_(t, seed * 100 + i, -1000.0, 1000.0);
      d["layer" + std::to_string(i) + ".w"] = t.to(dtypes[(seed + i) % 6]);
    }
    const io::Metadata meta{{"seed", std::to_string(seed)}, {"step", "12"}};
    const std::string path = dir.file("r" + std::to_string(seed) + ".safetensors");
    io::save_safetensors(path, d, meta);
    const std::string bytes = io::serialize_safetensors(d, meta);
    std::ifstream in(path, std::ios::binary);
    const std::string on_disk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(on_disk == bytes);  // save writes exactly what serialize returns
    std::uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    CHECK(n % 8 == 0);
    const io::SafetensorsFile back = io::load_safetensors(path);
    CHECK(back.metadata == meta);
    REQUIRE(back.tensors.size() == d.size());
    for (const auto& [name, t] : d) CHECK(bitwise_equal(back.tensors.at(name), t));
  }
}

TEST_CASE("safetensors reader: accepts what the format allows", "[io][safetensors]") {
  const std::string data = f32_bytes({1, 2, 3, 4});
  SECTION("__metadata__ null, a header not padded to 8, fields it does not know") {
    const auto f = io::parse_safetensors(
        raw_safetensors(R"({"__metadata__":null,"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16],"extra":1}})", data),
        "ok.safetensors");
    CHECK(f.metadata.empty());
    CHECK(f.tensors.at("w").to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  }
  SECTION("entries in any order, other whitespace as padding, empty tensors anywhere") {
    const auto f = io::parse_safetensors(
        raw_safetensors("{ \"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},\n"
                        "\"e\":{\"dtype\":\"I64\",\"shape\":[0],\"data_offsets\":[16,16]},"
                        "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"z\":{\"dtype\":\"F16\",\"shape\":[3,0],\"data_offsets\":[8,8]}}\t\r\n ",
                        data),
        "ok.safetensors");
    CHECK(f.tensors.at("a").to_vector<float>() == std::vector<float>{1, 2});
    CHECK(f.tensors.at("b").to_vector<float>() == std::vector<float>{3, 4});
    CHECK(f.tensors.at("e").shape() == mgpu::Shape{0});
    CHECK(f.tensors.at("z").shape() == mgpu::Shape{3, 0});
  }
  SECTION("a 0-d tensor and no tensors at all") {
    const auto f = io::parse_safetensors(
        raw_safetensors(R"({"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})", f32_bytes({7})),
        "ok.safetensors");
    CHECK(f.tensors.at("s").shape().empty());
    CHECK(f.tensors.at("s").item() == 7.0);
    CHECK(io::parse_safetensors(raw_safetensors("{}"), "ok.safetensors").tensors.empty());
  }
}

TEST_CASE("safetensors reader: refuses each malformed file, naming the file, tensor and rule",
          "[io][safetensors]") {
  for (const mgpu::testing::MalformedCase& c : mgpu::testing::malformed_cases()) {
    INFO(c.what);
    expect_refusal(c.bytes, c.rule, c.tensor);
  }
  for (const auto& [bytes, count] : mgpu::testing::accepted_cases())
    CHECK(io::parse_safetensors(bytes, "ok.safetensors").tensors.size() == count);
}

TEST_CASE("safetensors: a refusal from a file names the file's path", "[io][safetensors]") {
  mgpu::testing::TempDir dir;
  const std::string path = dir.file("truncated.safetensors");
  const std::string good = io::serialize_safetensors({{"w", Tensor::full({4}, 1.0)}});
  std::ofstream(path, std::ios::binary) << good.substr(0, good.size() - 4);
  try {
    io::load_safetensors(path);
    FAIL("a truncated file was accepted");
  } catch (const SafetensorsError& e) {
    CHECK(e.rule() == SafetensorsRule::past_end);
    CHECK(std::string(e.what()).find(path + ": tensor 'w'") == 0);
  }
  CHECK_THROWS_WITH(io::load_safetensors(dir.file("missing.safetensors")),
                    Catch::Contains("missing.safetensors") && Catch::Contains("No such file"));
}

TEST_CASE("safetensors writer: refuses names the format cannot hold", "[io][safetensors]") {
  CHECK_THROWS_WITH(io::serialize_safetensors({{"__metadata__", Tensor::full({1}, 1.0)}}),
                    Catch::Contains("reserves"));
  CHECK_THROWS_WITH(io::serialize_safetensors({{"bad\xff", Tensor::full({1}, 1.0)}}),
                    Catch::Contains("UTF-8"));
}

TEST_CASE("safetensors: CUDA tensors are saved and loaded through the host", "[io][safetensors][gpu]") {
  const mgpu::Device gpu = mgpu::Device::cuda(0);
  io::TensorDict d{{"w", Tensor::from_vector<float>({1, 2, 3}, {3}, gpu)},
                   {"b", Tensor::from_vector<double>({4}, {1}, gpu)}};
  const io::SafetensorsFile back = io::parse_safetensors(io::serialize_safetensors(d), "gpu", gpu);
  CHECK(back.tensors.at("w").device() == gpu);
  CHECK(bitwise_equal(back.tensors.at("w"), d.at("w")));
  CHECK(bitwise_equal(back.tensors.at("b"), d.at("b")));
}
