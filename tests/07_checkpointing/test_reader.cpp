// Lesson 07, task 2: the safetensors reader (io::parse_safetensors_header, through
// io::parse_safetensors) refuses every malformed file, with its message. The writer that
// makes the good files is the reference's (task 1).
#include <catch2/catch.hpp>

#include "io_files.h"
#include "malformed_cases.h"
#include "mgpu/io/safetensors.h"
#include "mgpu/ops.h"

using mgpu::DType;
using mgpu::Tensor;
namespace io = mgpu::io;

TEST_CASE("reader: reads what the reference writes, and the edge cases the format allows",
          "[07_checkpointing][task2][points:1]") {
  io::TensorDict d;
  d["w"] = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  d["b"] = Tensor::from_vector<double>({-1}, {1});
  d["h"] = Tensor::from_vector<float>({0.5f, 2.0f}, {2}).to(DType::bf16);
  d["step"] = Tensor::full({}, 7.0, DType::i64);
  d["none"] = Tensor::zeros({3, 0}, DType::i32);
  const io::SafetensorsFile back = io::parse_safetensors(io::serialize_safetensors(d, {{"k", "v"}}), "a.safetensors");
  REQUIRE(back.tensors.size() == d.size());
  for (const auto& [name, t] : d) {
    INFO(name);
    CHECK(mgpu::testing::bitwise_equal(back.tensors.at(name), t));
  }
  CHECK(back.metadata == io::Metadata{{"k", "v"}});
  for (const auto& [bytes, count] : mgpu::testing::accepted_cases()) {
    INFO(Catch::Detail::stringify(bytes.substr(8)));
    CHECK(io::parse_safetensors(bytes, "ok.safetensors").tensors.size() == count);
  }
}

TEST_CASE("reader: refuses every malformed file, naming the file, the tensor and the rule",
          "[07_checkpointing][task2][points:3]") {
  for (const mgpu::testing::MalformedCase& c : mgpu::testing::malformed_cases()) {
    INFO(c.what << ": must be refused by rule " << io::rule_name(c.rule)
                << (c.tensor.empty() ? std::string() : ", naming tensor '" + c.tensor + "'"));
    try {
      io::parse_safetensors(c.bytes, "bad.safetensors");
      FAIL_CHECK("accepted");
    } catch (const io::SafetensorsError& e) {
      INFO("refused with: " << e.what());
      CHECK(e.rule() == c.rule);
      CHECK(e.tensor() == c.tensor);
      CHECK(std::string(e.what()).rfind("bad.safetensors: ", 0) == 0);
    } catch (const std::exception& e) {
      FAIL_CHECK("refused, but not through io::refuse: " << e.what());
    }
  }
}
