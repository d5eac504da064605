// Lesson 07, task 1: the safetensors writer, byte for byte the reference implementation's
// (io::serialize_safetensors, declared in mgpu/io/safetensors.h).
#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "mgpu/io/safetensors.h"

namespace mgpu::io {

std::string serialize_safetensors(const TensorDict& tensors, const Metadata& metadata) {
  // Every tensor's bytes on the host (a CPU tensor is not copied).
  std::vector<std::pair<std::string, Tensor>> order;
  for (const auto& [name, t] : tensors) {
    MGPU_CHECK(t.defined(), "serialize_safetensors: tensor '", name, "' is undefined");
    MGPU_CHECK(name != "__metadata__" && is_valid_utf8(name), "serialize_safetensors: '",
               name, "' cannot be a tensor name (the format reserves __metadata__; names "
               "are UTF-8)");
    order.emplace_back(name, t.to(Device::cpu()));
  }
  for (const auto& [key, value] : metadata)
    MGPU_CHECK(is_valid_utf8(key) && is_valid_utf8(value), "serialize_safetensors: __metadata__ "
               "entry '", key, "' is not valid UTF-8");
  // What you have: metadata (key -> value); nlohmann::ordered_json (keeps the order of
  // insertion; dump() writes compact JSON); order, (name, host tensor) pairs (above);
  // safetensors_dtype_name(dtype), safetensors_dtype_rank(dtype); std::sort; std::string's
  // append; t.dtype(), t.nbytes(), t.raw_data(), t.shape().
  // TODO(task1) BEGIN: the whole file, byte for byte the reference writer's (chapter §2): an
  // 8-byte little-endian N, N bytes of header JSON, then every tensor's data back to back in
  // the header's order. Invariants: the reference's order of tensors and of fields; each
  // data_offsets [begin, end) counted from the data's first byte; no __metadata__ entry for
  // empty metadata; N a multiple of 8. Stuck: tools/hint 07 1 (about 30 lines).
  // Step 1) the reference order: dtype rank, largest first, then name.
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    const int ra = safetensors_dtype_rank(a.second.dtype());
    const int rb = safetensors_dtype_rank(b.second.dtype());
    return ra != rb ? ra > rb : a.first < b.first;
  });
  // Step 2) the header: ordered_json keeps the order of insertion.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header["__metadata__"] = meta;
  }
  std::uint64_t offset = 0;
  for (const auto& [name, t] : order) {
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = safetensors_dtype_name(t.dtype());
    entry["shape"] = t.shape();
    entry["data_offsets"] = {offset, offset + t.nbytes()};
    header[name] = entry;
    offset += t.nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  // Step 3) the length (8 bytes, little-endian), the header, the data.
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xFF);
  out += text;
  for (const auto& [name, t] : order) out.append(static_cast<const char*>(t.raw_data()), t.nbytes());
  return out;
  // TODO(task1) END
}

}  // namespace mgpu::io
