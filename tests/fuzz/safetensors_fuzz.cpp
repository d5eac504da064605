// libFuzzer harness of the safetensors reader (.ci/fuzz builds and runs it with clang).
// For any input, parse_safetensors_header must either refuse it with a SafetensorsError or
// accept it; any other exception, crash, sanitizer report or leak is a bug. For an accepted
// input it also checks two properties:
//  - every tensor's bytes lie inside the input (ASan catches a read past its end);
//  - the header re-encoded (compact JSON, as the writer writes it), followed by the same
//    data, parses to the same tensors and metadata.
// tests/common/io replays the kept corpus (tests/fuzz/corpus/safetensors) through this same
// function with gcc in every build.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "mgpu/io/safetensors.h"

namespace io = mgpu::io;

namespace {

bool same_entries(const io::SafetensorsHeader& a, const io::SafetensorsHeader& b) {
  if (a.tensors.size() != b.tensors.size() || a.metadata != b.metadata) return false;
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    const io::TensorEntry &x = a.tensors[i], &y = b.tensors[i];
    if (x.name != y.name || x.dtype != y.dtype || x.shape != y.shape || x.begin != y.begin ||
        x.end != y.end)
      return false;
  }
  return true;
}

// The header of `h` as a writer writes it: compact JSON, __metadata__ first, the tensors
// in data order, padded with spaces to a multiple of 8.
std::string encode(const io::SafetensorsHeader& h) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!h.metadata.empty()) header["__metadata__"] = h.metadata;
  for (const io::TensorEntry& t : h.tensors)
    header[t.name] = {{"dtype", io::safetensors_dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {t.begin, t.end}}};
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  io::SafetensorsHeader header;
  try {
    header = io::parse_safetensors_header(bytes, size, "fuzz-input");
  } catch (const io::SafetensorsError&) {
    return 0;  // refused: fine
  }
  // Every tensor's data: read each byte (out of bounds would be an ASan report).
  unsigned sum = 0;
  for (const io::TensorEntry& t : header.tensors)
    for (std::uint64_t i = t.begin; i < t.end; ++i)
      sum += static_cast<unsigned char>(bytes[header.data_start() + i]);
  if (sum == 0xFFFFFFFFu) std::abort();  // keeps the loop from being optimized away

  // Re-encode and parse again.
  const std::string text = encode(header);
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[static_cast<std::size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xFF);
  file += text;
  file += bytes.substr(header.data_start());
  const io::SafetensorsHeader again = io::parse_safetensors_header(file, file.size(), "re-encoded");
  if (!same_entries(header, again)) std::abort();
  return 0;
}
