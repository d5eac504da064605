// save_sharded: every rank writes its own slices, rank 0 writes the index last. Every rank
// first learns every rank's slices, so a bad layout (an overlap, a gap, shapes that differ)
// is refused on every rank before a byte is written.
#include <cstring>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "index_json.h"
#include "mgpu/io/atomic_file.h"
#include "mgpu/io/checksum.h"
#include "mgpu/io/sharded_checkpoint.h"

namespace mgpu::io {

namespace {

using nlohmann::json;

// Every rank's string, rank order (lengths first, then the bytes packed into i32 words:
// the library has no byte dtype).
std::vector<std::string> all_gather_strings(dist::ProcessGroup& group, const std::string& s) {
  const auto P = static_cast<std::int64_t>(group.size());
  Tensor len = Tensor::full({1}, static_cast<double>(s.size()), DType::i64, group.device());
  Tensor lens = Tensor::empty({P}, DType::i64, group.device());
  group.all_gather(lens, len).wait();
  const std::vector<std::int64_t> n = lens.to_vector<std::int64_t>();
  std::int64_t longest = 0;
  for (std::int64_t v : n) longest = std::max(longest, v);
  const std::int64_t words = std::max<std::int64_t>(1, (longest + 3) / 4);
  std::vector<std::int32_t> mine(static_cast<std::size_t>(words), 0);
  std::memcpy(mine.data(), s.data(), s.size());
  Tensor in = Tensor::from_vector(mine, {words}, group.device());
  Tensor all = Tensor::empty({P * words}, DType::i32, group.device());
  group.all_gather(all, in).wait();
  const std::vector<std::int32_t> flat = all.to_vector<std::int32_t>();
  std::vector<std::string> out;
  for (std::int64_t r = 0; r < P; ++r)
    out.emplace_back(reinterpret_cast<const char*>(flat.data() + r * words),
                     static_cast<std::size_t>(n[static_cast<std::size_t>(r)]));
  return out;
}

// Every rank learns whether every rank succeeded; if one failed, all throw, the failed rank
// with its own message and the others naming it (its message is gathered too).
void agree(dist::ProcessGroup& group, const std::string& error, const std::string& step) {
  const std::vector<std::string> errors = all_gather_strings(group, error);
  for (std::size_t r = 0; r < errors.size(); ++r)
    if (!errors[r].empty())
      MGPU_FAIL("save_sharded: ", step, " failed on rank ", r, ": ", errors[r]);
}

// This rank's declaration: its slices and whether it writes them, and what is wrong with
// its own tensors ("" when nothing).
std::string declare(const ShardedDict& shards, std::string& error) {
  json list = json::array();
  for (const auto& [name, t] : shards) {
    if (error.empty()) {
      if (!t.local.defined())
        error = "tensor '" + name + "': no local tensor";
      else if (t.slice.offsets.size() != t.global_shape.size() ||
               t.slice.lengths.size() != t.global_shape.size())
        error = "tensor '" + name + "': the slice " + t.slice.str() + " does not have the " +
                std::to_string(t.global_shape.size()) + " dimensions of its global shape " +
                shape_str(t.global_shape);
      else if (t.local.shape() != t.slice.lengths)
        error = "tensor '" + name + "': the slice " + t.slice.str() + " is " +
                shape_str(t.slice.lengths) + ", the local tensor is " + t.local.str();
    }
    list.push_back({{"name", name},
                    {"dtype", t.local.defined() ? safetensors_dtype_name(t.local.dtype()) : ""},
                    {"shape", t.global_shape},
                    {"offsets", t.slice.offsets},
                    {"lengths", t.slice.lengths},
                    {"write", t.write},
                    {"checksum", t.write && error.empty() ? tensor_checksum(t.local) : ""}});
  }
  return list.dump();
}

}  // namespace

std::string save_sharded(dist::ProcessGroup& group, const std::string& dir,
                         const ShardedDict& shards, const Metadata& metadata) {
  const std::string where = "save_sharded to " + dir;
  // Step 1) every rank's slices, on every rank; each checks the whole layout the same way.
  std::string error;
  const std::vector<std::string> declared = all_gather_strings(group, declare(shards, error));
  agree(group, error, "checking the local tensors");
  ShardedIndex index;
  index.world_size = group.size();
  index.metadata = metadata;
  std::map<std::string, int> first_rank;  // which rank declared each tensor first
  for (int r = 0; r < group.size(); ++r) {
    for (const json& e : json::parse(declared[static_cast<std::size_t>(r)])) {
      const std::string name = e.at("name").get<std::string>();
      DType dtype = DType::f32;
      dtype_from_safetensors(e.at("dtype").get<std::string>(), dtype);
      const Shape shape = e.at("shape").get<Shape>();
      auto [it, fresh] = index.tensors.try_emplace(name);
      ShardedTensorInfo& info = it->second;
      if (fresh) {
        info.dtype = dtype;
        info.shape = shape;
        first_rank[name] = r;
      }
      MGPU_CHECK(info.dtype == dtype && info.shape == shape, where, ": tensor '", name,
                 "' is ", dtype_name(info.dtype), " ", shape_str(info.shape), " on rank ",
                 first_rank[name], " but ", dtype_name(dtype), " ", shape_str(shape), " on rank ", r);
      if (e.at("write").get<bool>())
        info.chunks.push_back({shard_file_name(r),
                               Slice{e.at("offsets").get<std::vector<std::int64_t>>(),
                                     e.at("lengths").get<std::vector<std::int64_t>>()},
                               e.at("checksum").get<std::string>()});
    }
  }
  check_exact_cover(index, where);

  // Step 2) no index while the shards change: a crash from here on leaves no checkpoint.
  namespace fs = std::filesystem;
  const std::string index_path = dir + "/" + kShardedIndexName;
  error.clear();
  if (group.rank() == 0) {
    try {
      std::error_code ec;
      fs::create_directories(dir, ec);
      MGPU_CHECK(!ec, "cannot create the folder ", dir, ": ", ec.message());
      if (fs::exists(fs::symlink_status(index_path))) {
        MGPU_CHECK(fs::remove(index_path, ec) && !ec, "cannot remove the old ", index_path, ": ",
                   ec.message());
      }
      // What a killed save left (".NAME.tmp.PID", never complete, as lesson 07's
      // commit_checkpoint removes them) and the shards of ranks that do not write this time
      // (an older save's, with more ranks): gone before any rank writes.
      std::set<std::string> writers;
      for (const auto& [name, info] : index.tensors)
        for (const ShardChunk& c : info.chunks) writers.insert(c.file);
      for (const auto& e : fs::directory_iterator(dir, ec)) {
        const std::string f = e.path().filename().string();
        const bool temporary = f.size() > 1 && f[0] == '.' && f.find(".tmp.") != std::string::npos;
        const bool old_shard = f.rfind("rank-", 0) == 0 && f.size() > 12 &&
                               f.compare(f.size() - 12, 12, ".safetensors") == 0 && !writers.count(f);
        if (temporary || old_shard) fs::remove(e.path(), ec);
      }
      fsync_directory(dir);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree(group, error, "preparing " + dir);

  // Step 3) this rank's file: its written slices under the tensors' own names.
  TensorDict mine;
  for (const auto& [name, t] : shards)
    if (t.write) mine[name] = t.local;
  try {
    if (!mine.empty()) {  // with lesson 07's checksums in the file's metadata
      SafetensorsFile file;
      file.tensors = mine;
      add_checksums(file);
      save_safetensors(dir + "/" + shard_file_name(group.rank()), file.tensors, file.metadata);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree(group, error, "writing the shards");

  // Step 4) the index, last: from now on the checkpoint exists.
  if (group.rank() == 0) {
    try {
      atomic_replace(dir, kShardedIndexName, sharded::index_to_json(index));
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree(group, error, "writing the index");
  return index_path;
}

}  // namespace mgpu::io
