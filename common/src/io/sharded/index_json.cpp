// index.json: what every tensor is (dtype, global shape) and which file holds which slice.
#include "index_json.h"

#include <nlohmann/json.hpp>

#include "mgpu/io/atomic_file.h"

namespace mgpu::io::sharded {

using nlohmann::json;

std::string index_to_json(const ShardedIndex& index) {
  json tensors = json::object();
  for (const auto& [name, info] : index.tensors) {
    json chunks = json::array();
    for (const ShardChunk& c : info.chunks)
    {
      json chunk = {{"file", c.file}, {"offsets", c.slice.offsets}, {"lengths", c.slice.lengths}};
      if (!c.checksum.empty()) chunk["checksum"] = c.checksum;
      chunks.push_back(chunk);
    }
    tensors[name] = {{"dtype", safetensors_dtype_name(info.dtype)}, {"shape", info.shape},
                     {"chunks", chunks}};
  }
  json j = {{"format", "mgpu-sharded-checkpoint"},
            {"format_version", kShardedFormatVersion},
            {"world_size", index.world_size},
            {"metadata", index.metadata},
            {"tensors", tensors}};
  return j.dump(1) + "\n";
}

namespace {

std::vector<std::int64_t> int_list(const json& j, const std::string& what, const std::string& source) {
  MGPU_CHECK(j.is_array(), source, ": ", what, " is not a list of integers");
  std::vector<std::int64_t> out;
  for (const json& v : j) {
    MGPU_CHECK(v.is_number_integer(), source, ": ", what, " is not a list of integers");
    out.push_back(v.get<std::int64_t>());
  }
  return out;
}

const json& field(const json& j, const char* key, const std::string& where, const std::string& source) {
  MGPU_CHECK(j.is_object() && j.contains(key), source, ": ", where, " has no \"", key, "\"");
  return j.at(key);
}

}  // namespace

ShardedIndex index_from_json(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    MGPU_FAIL(source, ": not valid JSON (", e.what(), ")");
  }
  MGPU_CHECK(j.is_object(), source, ": the index is not a JSON object");
  const json& format = field(j, "format", "the index", source);
  MGPU_CHECK(format.is_string() && format.get<std::string>() == "mgpu-sharded-checkpoint", source,
             ": format ", format.dump(), ", expected \"mgpu-sharded-checkpoint\"");
  const json& version = field(j, "format_version", "the index", source);
  MGPU_CHECK(version.is_number_integer() && version.get<int>() == kShardedFormatVersion, source,
             ": format_version ", version.dump(), "; this reader knows version ", kShardedFormatVersion);
  ShardedIndex index;
  const json& world = field(j, "world_size", "the index", source);
  MGPU_CHECK(world.is_number_integer() && world.get<int>() > 0, source, ": world_size ", world.dump());
  index.world_size = world.get<int>();
  if (j.contains("metadata")) {
    const json& m = j.at("metadata");
    MGPU_CHECK(m.is_object(), source, ": metadata is not an object of strings");
    for (const auto& [k, v] : m.items()) {
      MGPU_CHECK(v.is_string(), source, ": metadata \"", k, "\" is not a string");
      index.metadata[k] = v.get<std::string>();
    }
  }
  const json& tensors = field(j, "tensors", "the index", source);
  MGPU_CHECK(tensors.is_object(), source, ": tensors is not an object");
  for (const auto& [name, t] : tensors.items()) {
    const std::string where = "tensor '" + name + "'";
    ShardedTensorInfo info;
    const json& dtype = field(t, "dtype", where, source);
    MGPU_CHECK(dtype.is_string() && dtype_from_safetensors(dtype.get<std::string>(), info.dtype),
               source, ": ", where, ": unknown dtype ", dtype.dump());
    info.shape = int_list(field(t, "shape", where, source), where + "'s shape", source);
    for (std::int64_t s : info.shape)
      MGPU_CHECK(s >= 0, source, ": ", where, ": negative size in shape ", shape_str(info.shape));
    const json& chunks = field(t, "chunks", where, source);
    MGPU_CHECK(chunks.is_array(), source, ": ", where, ": chunks is not a list");
    for (const json& c : chunks) {
      ShardChunk chunk;
      const json& file = field(c, "file", where + "'s chunk", source);
      MGPU_CHECK(file.is_string(), source, ": ", where, ": a chunk's file is not a string");
      chunk.file = file.get<std::string>();
      MGPU_CHECK(!chunk.file.empty() && chunk.file.find('/') == std::string::npos &&
                     chunk.file[0] != '.',
                 source, ": ", where, ": the chunk file \"", chunk.file,
                 "\" is not a plain file name inside the checkpoint folder");
      chunk.slice.offsets = int_list(field(c, "offsets", where + "'s chunk", source), where + "'s offsets", source);
      chunk.slice.lengths = int_list(field(c, "lengths", where + "'s chunk", source), where + "'s lengths", source);
      if (c.contains("checksum")) {  // absent in an index written before checksums
        const json& sum = c.at("checksum");
        MGPU_CHECK(sum.is_string() && sum.get<std::string>().size() == 16, source, ": ", where,
                   ": the checksum of the chunk in ", chunk.file, " is ", sum.dump(),
                   ", expected 16 hex digits");
        chunk.checksum = sum.get<std::string>();
      }
      info.chunks.push_back(chunk);
    }
    index.tensors[name] = info;
  }
  return index;
}

}  // namespace mgpu::io::sharded

namespace mgpu::io {

ShardedIndex read_sharded_index(const std::string& dir) {
  const std::string path = dir + "/" + kShardedIndexName;
  const std::string what = describe_path(path);
  MGPU_CHECK(what != "missing", dir, " is not a complete sharded checkpoint: it has no ",
             kShardedIndexName, " (a save that did not finish writes none)");
  ShardedIndex index = sharded::index_from_json(read_file(path), path);
  check_exact_cover(index, path);
  return index;
}

}  // namespace mgpu::io
