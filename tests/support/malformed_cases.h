// Malformed safetensors files, one or more per rule, with the rule and the tensor a reader
// must name when it refuses them; and files a reader must accept. Shared by the library's
// tests and lesson 07's graded tests.
#pragma once

#include <string>
#include <vector>

#include "io_files.h"
#include "mgpu/io/safetensors.h"

namespace mgpu::testing {

/// One malformed file.
struct MalformedCase {
  std::string what;             ///< what is wrong, for the test's output
  std::string bytes;            ///< the whole file
  io::SafetensorsRule rule;     ///< the rule it breaks
  std::string tensor;           ///< the tensor a refusal names ("" for the header)
};

/// The 8 bytes of `n`, little-endian.
inline std::string le64(std::uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return s;
}

/// "NAME":{"dtype":...,"shape":...,"data_offsets":[b,e]}
inline std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                         std::uint64_t b, std::uint64_t e) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":[" + std::to_string(b) + "," + std::to_string(e) + "]}";
}

inline std::vector<MalformedCase> malformed_cases() {
  using R = io::SafetensorsRule;
  const std::string d16 = counting_bytes(16);
  return {
      {"3 bytes", "abc", R::too_small, ""},
      {"a header length above 100 MB", le64(100'000'001) + "{}", R::header_too_large, ""},
      {"a header past the end", le64(100) + "{}      ", R::header_past_end, ""},
      {"a byte that is not UTF-8", raw_safetensors("{\"\xff\":1}"), R::invalid_utf8, ""},
      {"a UTF-16 surrogate", raw_safetensors("{\"\xed\xa0\x80\":1}"), R::invalid_utf8, ""},
      {"JSON cut short", raw_safetensors("{\"w\":"), R::invalid_json, ""},
      {"an array, not an object", raw_safetensors("[1,2]"), R::invalid_json, ""},
      {"text after the object", raw_safetensors("{}x"), R::invalid_json, ""},
      {"NUL padding", raw_safetensors(std::string("{}\0\0", 4)), R::invalid_json, ""},
      {"no data_offsets", raw_safetensors(R"({"w":{"dtype":"F32","shape":[4]}})", d16), R::invalid_entry, "w"},
      {"an entry that is an array", raw_safetensors(R"({"w":[1]})", d16), R::invalid_entry, "w"},
      {"a negative dimension", raw_safetensors("{" + entry("w", "F32", "[-4]", 0, 16) + "}", d16),
       R::invalid_entry, "w"},
      {"a dimension 4.0", raw_safetensors("{" + entry("w", "F32", "[4.0]", 0, 16) + "}", d16),
       R::invalid_entry, "w"},
      {"three offsets", raw_safetensors(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16,16]}})", d16),
       R::invalid_entry, "w"},
      {"a metadata value that is a number", raw_safetensors(R"({"__metadata__":{"epoch":3}})"),
       R::invalid_entry, "__metadata__"},
      {"dtype U8 (no such dtype in mgpu)", raw_safetensors("{" + entry("w", "U8", "[16]", 0, 16) + "}", d16),
       R::unknown_dtype, "w"},
      {"dtype Q7", raw_safetensors("{" + entry("w", "Q7", "[16]", 0, 16) + "}", d16), R::unknown_dtype, "w"},
      {"a name twice", raw_safetensors("{" + entry("w", "F32", "[2]", 0, 8) + "," + entry("w", "F32", "[2]", 8, 16) + "}", d16),
       R::duplicate_name, "w"},
      {"a key twice in an entry",
       raw_safetensors(R"({"w":{"dtype":"F32","dtype":"F64","shape":[4],"data_offsets":[0,16]}})", d16),
       R::duplicate_name, "w"},
      {"offsets reversed", raw_safetensors("{" + entry("w", "F32", "[2]", 8, 0) + "}", d16),
       R::offsets_reversed, "w"},
      {"two tensors overlap",
       raw_safetensors("{" + entry("a", "F32", "[2]", 0, 8) + "," + entry("b", "F32", "[2]", 4, 12) + "}", d16.substr(0, 12)),
       R::overlap, "b"},
      {"a hole between two tensors",
       raw_safetensors("{" + entry("a", "F32", "[1]", 0, 4) + "," + entry("b", "F32", "[2]", 8, 16) + "}", d16),
       R::hole, "b"},
      {"a hole before the first tensor", raw_safetensors("{" + entry("a", "F32", "[1]", 4, 8) + "}", d16.substr(0, 8)),
       R::hole, "a"},
      {"data past the end of the file", raw_safetensors("{" + entry("w", "F32", "[4]", 0, 16) + "}", d16.substr(0, 8)),
       R::past_end, "w"},
      {"12 bytes for 16", raw_safetensors("{" + entry("w", "F32", "[3]", 0, 16) + "}", d16), R::byte_length, "w"},
      {"numel x size above 2^64",
       raw_safetensors("{" + entry("w", "F64", "[4611686018427387904,8]", 0, 16) + "}", d16), R::overflow, "w"},
      {"8 bytes after the last tensor", raw_safetensors("{" + entry("w", "F32", "[2]", 0, 8) + "}", d16),
       R::trailing_data, ""},
  };
}

/// Files a reader must accept, each with the number of tensors it holds.
inline std::vector<std::pair<std::string, std::size_t>> accepted_cases() {
  const std::string d16 = counting_bytes(16);
  return {
      {raw_safetensors(R"({"__metadata__":null,"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16],"extra":1}})", d16), 1},
      {raw_safetensors("{ " + entry("b", "F32", "[2]", 8, 16) + ",\n" + entry("e", "I64", "[0]", 16, 16) + "," +
                       entry("a", "F32", "[2]", 0, 8) + "," + entry("z", "F16", "[3,0]", 8, 8) + "}\t\r\n ", d16), 4},
      {raw_safetensors("{" + entry("s", "F32", "[]", 0, 4) + "}", d16.substr(0, 4)), 1},
      {raw_safetensors("{}"), 0},
      {raw_safetensors(R"({"__metadata__":{"a":"b"}})"), 0},
  };
}

}  // namespace mgpu::testing
