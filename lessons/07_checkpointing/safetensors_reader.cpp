// Lesson 07, task 2: the safetensors reader, which trusts nothing in the file.
#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "checkpoint_lesson.h"
#include "mgpu/io/safetensors_json.h"

namespace mgpu::lesson07 {

namespace {

using io::SafetensorsRule;

/// "[begin, end)" for messages.
[[maybe_unused]] std::string range(const io::TensorEntry& t) {
  return "[" + std::to_string(t.begin) + ", " + std::to_string(t.end) + ")";
}

/// A JSON value that is an integer >= 0 (nlohmann keeps those as unsigned numbers).
[[maybe_unused]] bool unsigned_integer(const nlohmann::json& j, std::uint64_t& out) {
  if (!j.is_number_unsigned()) return false;
  out = j.get<std::uint64_t>();
  return true;
}

}  // namespace

io::SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& file) {
  io::SafetensorsFile out;
  std::vector<io::TensorEntry> entries;
  std::uint64_t data_start = 0;
  // TODO(task2) BEGIN: check the length and the header, parse it, check every entry into
  // `entries` and `out.metadata`, then the data layout; set data_start to 8 + N. Each
  // refusal through io::refuse names the file, the tensor and the rule (about 75 lines).
  MGPU_FAIL("TODO(task2): parse_safetensors is not written yet "
            "(lessons/07_checkpointing/safetensors_reader.cpp); ", file, ": ", bytes.size(),
            " bytes, ", entries.size(), " entries checked, data at byte ", data_start);
  // TODO(task2) END

  // Every entry checked: copy each tensor's bytes out of the file.
  for (const io::TensorEntry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (t.nbytes() > 0) std::memcpy(t.raw_data(), bytes.data() + data_start + e.begin, t.nbytes());
    out.tensors[e.name] = t;
  }
  return out;
}

}  // namespace mgpu::lesson07
