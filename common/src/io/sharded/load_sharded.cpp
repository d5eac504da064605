// load_sharded: each rank reads the slices its own layout holds, from whatever layout
// saved them. For every wanted slice and every stored chunk of its tensor, the overlap
// (intersect_slices, lesson 15's task 3) is read as runs of contiguous elements, straight
// from the file into the rank's tensor: a rank keeps no byte it does not need. Each chunk it
// touches is first read whole, once, to verify its checksum against the file's and the index's.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <utility>

#include "mgpu/copy.h"
#include "mgpu/io/atomic_file.h"
#include "mgpu/io/checksum.h"
#include "mgpu/io/sharded_checkpoint.h"
#include "../pread_exact.h"

namespace mgpu::io {

namespace {

// One shard file, opened once per load: its descriptor and its validated header.
struct ShardFile {
  std::string path;
  int fd = -1;
  SafetensorsHeader header;
  ~ShardFile() {
    if (fd >= 0) ::close(fd);
  }
  void read_at(char* dst, std::size_t n, std::uint64_t offset) const {
    detail::pread_exact(fd, path, dst, n, offset);
  }
};

std::unique_ptr<ShardFile> open_shard(const std::string& path, const std::string& tensor) {
  auto f = std::make_unique<ShardFile>();
  f->path = path;
  const std::string what = describe_path(path);
  MGPU_CHECK(what != "missing", "load_sharded: a missing shard: ", path,
             " is named by the index (it holds tensor '", tensor, "') but is not there");
  f->fd = open_regular_file(path);
  struct stat st {};
  MGPU_CHECK(::fstat(f->fd, &st) == 0, "cannot stat ", path, ": ", std::strerror(errno));
  const auto file_size = static_cast<std::uint64_t>(st.st_size);
  // The 8-byte length, then the header it announces (the parser checks both).
  std::string head(static_cast<std::size_t>(std::min<std::uint64_t>(8, file_size)), '\0');
  f->read_at(head.data(), head.size(), 0);
  if (head.size() == 8) {
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i)
      n = (n << 8) | static_cast<unsigned char>(head[static_cast<std::size_t>(i)]);
    if (n <= kMaxHeaderBytes && 8 + n <= file_size) {
      head.resize(static_cast<std::size_t>(8 + n));
      f->read_at(head.data() + 8, static_cast<std::size_t>(n), 8);
    }
  }
  f->header = parse_safetensors_header(head, file_size, path);
  return f;
}

// Reads the overlap `ov` of the stored chunk (entry `e` of file `f`) into `dst`, laid out as
// the wanted slice. The longest run of trailing dimensions along which the overlap spans
// both the chunk and the wanted slice is contiguous in both: one read per run.
void read_overlap(const ShardFile& f, const TensorEntry& e, const Slice& stored,
                  const Slice& wanted, const SliceOverlap& ov, char* dst, ShardedLoadStats& stats) {
  const std::size_t esize = dtype_size(e.dtype);
  const std::size_t n = ov.global.lengths.size();
  std::size_t k = n;  // dimensions [k, n) form one contiguous run
  std::int64_t run = 1;
  while (k > 0) {
    run *= ov.global.lengths[k - 1];
    --k;
    if (k == 0 || ov.global.lengths[k] != stored.lengths[k] ||
        ov.global.lengths[k] != wanted.lengths[k])
      break;
  }
  // An odometer over dimensions [0, k) of the overlap; dimensions [k, n) start at the
  // overlap's beginning.
  std::vector<std::int64_t> index = ov.global.offsets;
  const std::uint64_t base = f.header.data_start() + e.begin;
  for (;;) {
    const std::int64_t from = linear_index_in(stored, index);
    const std::int64_t to = linear_index_in(wanted, index);
    f.read_at(dst + static_cast<std::size_t>(to) * esize, static_cast<std::size_t>(run) * esize,
              base + static_cast<std::uint64_t>(from) * esize);
    stats.bytes_read += run * static_cast<std::int64_t>(esize);
    ++stats.read_calls;
    std::size_t d = k;
    while (d > 0) {
      --d;
      if (++index[d] < ov.global.offsets[d] + ov.global.lengths[d]) break;
      index[d] = ov.global.offsets[d];
      if (d == 0) return;
    }
    if (k == 0) return;
  }
}

// Verifies the chunk `c` of tensor `name`, entry `e` of file `f`: the file's own checksum of
// the tensor is the one the index holds (so the file is the one this save wrote for that
// chunk), and the entry's bytes, read whole in blocks, hash to it.
void verify_chunk(const ShardFile& f, const TensorEntry& e, const ShardChunk& c,
                  const std::string& index_path, ShardedLoadStats& stats) {
  if (c.checksum.empty()) {  // an index written before checksums
    ++stats.unverified_chunks;
    return;
  }
  const auto it = f.header.metadata.find(kChecksumPrefix + e.name);
  const std::string in_file = it == f.header.metadata.end() ? "none" : it->second;
  MGPU_CHECK(in_file == c.checksum, "load_sharded: ", f.path, ": tensor '", e.name,
             "' has checksum ", in_file, " in the file, but ", index_path, " says ", c.checksum,
             " for its chunk ", c.slice.str(), ": the file is not the one this save wrote (a shard "
             "of another save, one rank's file copied over another's, or an index naming the "
             "wrong file); resume from a complete checkpoint");
  const std::uint64_t basis = legacy_checksums(f.header.metadata) ? kLegacyChecksumBasis : kFnv1aOffsetBasis;
  std::uint64_t h = basis;
  std::string block(std::min<std::uint64_t>(e.end - e.begin, 1 << 20), '\0');
  for (std::uint64_t at = e.begin; at < e.end;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(block.size(), e.end - at));
    f.read_at(block.data(), n, f.header.data_start() + at);
    h = fnv1a64(block.data(), n, h);
    at += n;
  }
  stats.bytes_verified += static_cast<std::int64_t>(e.end - e.begin);
  MGPU_CHECK(checksum_hex(h) == c.checksum, "load_sharded: ", f.path, ": tensor '", e.name,
             "' fails its checksum (fnv1a64 ", checksum_hex(h), ", the file and the index say ",
             c.checksum, "): its bytes changed after it was saved (a damaged disk or copy, or an "
             "edit); resume from another checkpoint");
}

}  // namespace

ShardedLoadStats load_sharded(const std::string& dir, ShardedDict& shards) {
  const ShardedIndex index = read_sharded_index(dir);
  return load_sharded(dir, index, shards);
}

ShardedLoadStats load_sharded(const std::string& dir, const ShardedIndex& index,
                              ShardedDict& shards) {
  const std::string source = dir + "/" + kShardedIndexName;
  ShardedLoadStats stats;
  std::map<std::string, std::unique_ptr<ShardFile>> files;
  std::set<std::pair<std::string, std::string>> verified;  // (file, tensor) read whole once
  for (auto& [name, t] : shards) {
    const auto it = index.tensors.find(name);
    MGPU_CHECK(it != index.tensors.end(), "load_sharded: ", source, " has no tensor '", name,
               "' (", index.tensors.size(), " tensors saved)");
    const ShardedTensorInfo& info = it->second;
    MGPU_CHECK(info.shape == t.global_shape, "load_sharded: ", source, ": tensor '", name,
               "' was saved with shape ", shape_str(info.shape), ", this layout wants ",
               shape_str(t.global_shape));
    MGPU_CHECK(t.slice.offsets.size() == info.shape.size() && t.slice.lengths.size() == info.shape.size(),
               "load_sharded: tensor '", name, "': the slice ", t.slice.str(), " does not have the ",
               info.shape.size(), " dimensions of ", shape_str(info.shape));
    for (std::size_t d = 0; d < info.shape.size(); ++d)
      MGPU_CHECK(t.slice.offsets[d] >= 0 && t.slice.lengths[d] >= 0 &&
                     t.slice.offsets[d] + t.slice.lengths[d] <= info.shape[d],
                 "load_sharded: tensor '", name, "': the slice ", t.slice.str(),
                 " lies outside its shape ", shape_str(info.shape));
    if (t.local.defined()) {
      MGPU_CHECK(t.local.dtype() == info.dtype && t.local.shape() == t.slice.lengths,
                 "load_sharded: ", source, ": tensor '", name, "' slice ", t.slice.str(), " is ",
                 dtype_name(info.dtype), " ", shape_str(t.slice.lengths), " but the tensor to fill is ",
                 t.local.str());
    }
    const bool on_host = t.local.defined() && t.local.device().is_cpu();
    Tensor host = on_host ? t.local : Tensor::empty(t.slice.lengths, info.dtype, Device::cpu());
    char* dst = static_cast<char*>(host.raw_data());
    std::int64_t filled = 0;
    for (const ShardChunk& c : info.chunks) {
      SliceOverlap ov;
      if (!intersect_slices(c.slice, t.slice, ov)) continue;
      auto& f = files[c.file];
      if (!f) {
        f = open_shard(dir + "/" + c.file, name);
        ++stats.files_opened;
      }
      const TensorEntry* entry = nullptr;
      for (const TensorEntry& e : f->header.tensors)
        if (e.name == name) entry = &e;
      MGPU_CHECK(entry != nullptr, "load_sharded: ", f->path, " does not hold tensor '", name,
                 "', which ", source, " says it holds (", c.slice.str(), ")");
      MGPU_CHECK(entry->dtype == info.dtype && entry->shape == c.slice.lengths, "load_sharded: ",
                 f->path, ": tensor '", name, "' is ", dtype_name(entry->dtype), " ",
                 shape_str(entry->shape), ", the index says ", dtype_name(info.dtype), " ",
                 shape_str(c.slice.lengths), " (", c.slice.str(), ")");
      if (verified.insert({c.file, name}).second) verify_chunk(*f, *entry, c, source, stats);
      if (ov.global.numel() > 0) read_overlap(*f, *entry, c.slice, t.slice, ov, dst, stats);
      filled += ov.global.numel();
    }
    MGPU_CHECK(filled == t.slice.numel(), "load_sharded: ", source, ": tensor '", name, "' slice ",
               t.slice.str(), ": the stored chunks give ", filled, " of its ", t.slice.numel(),
               " elements");
    if (!t.local.defined())
      t.local = host;
    else if (!on_host)
      copy_(t.local, host);
  }
  return stats;
}

}  // namespace mgpu::io
