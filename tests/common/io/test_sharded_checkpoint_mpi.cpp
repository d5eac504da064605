// mgpu::io sharded checkpoints (run alone and under mpirun with 2, 3 and 4 ranks): every
// rank writes its own slices, one index says where each lies; a load on any other layout
// (any number of parts, along another dimension) gives the exact values, reading only the
// bytes it keeps; an overlap, a gap, a missing shard, a shape that differs are refused.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "error_measures.h"
#include "expect_error.h"
#include "groups.h"
#include "mgpu/io/sharded_checkpoint.h"
#include "shared_temp_dir.h"

using mgpu::DType;
using mgpu::Shape;
using mgpu::Tensor;
namespace io = mgpu::io;
using mgpu::testing::contains;
using mgpu::testing::cpu_group;
using mgpu::testing::error_of;
using mgpu::testing::same_bits;
using mgpu::testing::SharedTempDir;

namespace {

// A global tensor whose every element says where it is (and which tensor): any element
// read from the wrong place shows.
Tensor pattern(const Shape& shape, DType dtype, double salt) {
  const std::int64_t n = mgpu::shape_numel(shape);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = salt + static_cast<double>(i);
  return Tensor::from_vector(v, shape).to(dtype);
}

// The elements of `slice` of the global tensor `t`, as their own contiguous tensor.
Tensor cut(const Tensor& t, const io::Slice& slice) {
  const Tensor src = t.to(DType::f64);
  const std::vector<double> all = src.to_vector<double>();
  std::vector<double> out;
  const std::size_t n = slice.offsets.size();
  std::vector<std::int64_t> index = slice.offsets;
  if (slice.numel() > 0) {
    for (;;) {
      std::int64_t at = 0;
      for (std::size_t d = 0; d < n; ++d) at = at * t.shape()[d] + index[d];
      out.push_back(all[static_cast<std::size_t>(at)]);
      std::size_t d = n;
      while (d > 0) {
        --d;
        if (++index[d] < slice.offsets[d] + slice.lengths[d]) break;
        index[d] = slice.offsets[d];
        if (d == 0) { d = n + 1; break; }
      }
      if (n == 0 || d == n + 1) break;
    }
  }
  return Tensor::from_vector(out, slice.lengths).to(t.dtype());
}

// The model of the tests: a few tensors of several dtypes and ranks.
struct Global {
  std::map<std::string, Tensor> t = {
      {"w", pattern({10, 6}, DType::f32, 0)},     // 10 rows: uneven over 3 and 4
      {"v", pattern({6, 7}, DType::f64, 1000)},   // 7 columns: uneven along dim 1
      {"n", pattern({9}, DType::i64, 5000)},
      {"step", pattern({}, DType::i64, 42)},      // a 0-d scalar, replicated
  };
};

// This rank's shards when each split tensor is cut along `dim` (its last dimension when it
// has fewer) into `parts`, this rank holding `part`; the scalar replicated, written by rank 0.
io::ShardedDict layout(const Global& g, int dim, int parts, int part, bool writes_split, bool rank0) {
  io::ShardedDict d;
  for (const auto& [name, t] : g.t) {
    if (t.ndim() == 0) {
      d[name] = io::replicated(t.clone(), rank0);
      continue;
    }
    const int along = std::min(dim, t.ndim() - 1);
    const io::Slice s = io::split_slice(t.shape(), along, parts, part);
    d[name] = io::split_along(cut(t, s), t.shape(), along, parts, part, writes_split);
  }
  return d;
}

// Every part of every layout in `parts` along `dim` loads exactly, on this rank.
void check_loads(const Global& g, const std::string& dir, int dim, std::vector<int> layouts) {
  const io::ShardedIndex index = io::read_sharded_index(dir);
  for (int parts : layouts)
    for (int part = 0; part < parts; ++part) {
      io::ShardedDict want = layout(g, dim, parts, part, true, true);
      for (auto& [name, t] : want) t.local = Tensor();  // allocated by the load
      const io::ShardedLoadStats stats = io::load_sharded(dir, index, want);
      std::int64_t bytes = 0;
      for (const auto& [name, t] : want) {
        INFO(name << " part " << part << " of " << parts << " along " << dim);
        CHECK(same_bits(t.local, cut(g.t.at(name), t.slice)));
        bytes += static_cast<std::int64_t>(t.local.nbytes());
      }
      CHECK(stats.bytes_read == bytes);  // only the bytes it keeps
    }
}

}  // namespace

TEST_CASE("split_slice cuts as array_split does; the whole and replicated slices",
          "[io][sharded]") {
  CHECK(io::split_slice({10, 6}, 0, 4, 0) == io::Slice{{0, 0}, {3, 6}});
  CHECK(io::split_slice({10, 6}, 0, 4, 1) == io::Slice{{3, 0}, {3, 6}});
  CHECK(io::split_slice({10, 6}, 0, 4, 2) == io::Slice{{6, 0}, {2, 6}});
  CHECK(io::split_slice({10, 6}, 0, 4, 3) == io::Slice{{8, 0}, {2, 6}});
  CHECK(io::split_slice({10, 7}, 1, 3, 2) == io::Slice{{0, 5}, {10, 2}});
  CHECK(io::whole_slice({}).numel() == 1);
  CHECK(io::split_slice({10, 6}, 0, 4, 3).str() == "[8:10, 0:6]");
  CHECK(contains(error_of([] { io::split_slice({10}, 1, 2, 0); }), "dimension 1"));
  CHECK(contains(error_of([] { io::split_slice({10}, 0, 2, 2); }), "part 2 of 2"));
  CHECK(io::shard_file_name(3) == "rank-00003.safetensors");
}

TEST_CASE("saved in P parts along dim 0 and dim 1: every layout of 1 to 4 parts loads exactly",
          "[io][sharded][mpi]") {
  mgpu::dist::ProcessGroup& g = cpu_group();
  const Global model;
  SharedTempDir tmp("mgpu-sharded");
  for (int dim : {0, 1}) {
    const std::string dir = tmp.path() + "/dim" + std::to_string(dim);
    const std::string index = io::save_sharded(g, dir, layout(model, dim, g.size(), g.rank(), true, g.rank() == 0),
                                               {{"note", "test"}});
    CHECK(index == dir + "/index.json");
    const io::ShardedIndex read = io::read_sharded_index(dir);
    CHECK(read.world_size == g.size());
    CHECK(read.metadata.at("note") == "test");
    CHECK(read.tensors.at("w").chunks.size() == static_cast<std::size_t>(g.size()));
    CHECK(read.tensors.at("step").chunks.size() == 1);
    check_loads(model, dir, dim, {1, 2, 3, 4});
    check_loads(model, dir, 1 - dim, {1, 2, 3, 4});   // split the other way
  }
}

TEST_CASE("a DP x TP layout: one replica group writes, every layout loads", "[io][sharded][mpi]") {
  mgpu::dist::ProcessGroup& g = cpu_group();
  if (g.size() % 2 != 0) return;  // TP 2 needs an even world
  const Global model;
  SharedTempDir tmp("mgpu-sharded-dptp");
  const int tp = g.rank() % 2, dp = g.rank() / 2;
  io::save_sharded(g, tmp.path(), layout(model, 0, 2, tp, dp == 0, g.rank() == 0));
  const io::ShardedIndex read = io::read_sharded_index(tmp.path());
  CHECK(read.tensors.at("w").chunks.size() == 2);
  check_loads(model, tmp.path(), 0, {1, 3, 4});
  check_loads(model, tmp.path(), 1, {2});
}

TEST_CASE("a load fills tensors in place and reads only the files it needs", "[io][sharded][mpi]") {
  mgpu::dist::ProcessGroup& g = cpu_group();
  const Global model;
  SharedTempDir tmp("mgpu-sharded-inplace");
  io::save_sharded(g, tmp.path(), layout(model, 0, g.size(), g.rank(), true, g.rank() == 0));
  // The same layout: each rank opens its own file (and rank 0's, for the scalar).
  io::ShardedDict same = layout(model, 0, g.size(), g.rank(), true, true);
  std::map<std::string, Tensor> before;
  for (auto& [name, t] : same) {
    t.local = Tensor::zeros(t.slice.lengths, t.local.dtype());
    before[name] = t.local;
  }
  const io::ShardedLoadStats stats = io::load_sharded(tmp.path(), same);
  CHECK(stats.files_opened == (g.rank() == 0 ? 1 : 2));
  for (const auto& [name, t] : same) {
    CHECK(t.local.shares_storage(before[name]));
    CHECK(same_bits(t.local, cut(model.t.at(name), t.slice)));
  }
  io::ShardedDict wrong = layout(model, 0, g.size(), g.rank(), true, true);
  wrong["w"].local = Tensor::zeros(wrong["w"].slice.lengths, DType::f64);
  CHECK(contains(error_of([&] { io::load_sharded(tmp.path(), wrong); }), "tensor 'w'"));
}

TEST_CASE("an overlap, a gap or shapes that differ are refused on every rank, before any write",
          "[io][sharded][mpi]") {
  mgpu::dist::ProcessGroup& g = cpu_group();
  const Global model;
  SharedTempDir tmp("mgpu-sharded-bad");
  namespace fs = std::filesystem;
  if (g.size() > 1) {
    // Every rank writes the replicated scalar: an overlap.
    const std::string e1 = error_of([&] {
      io::save_sharded(g, tmp.path() + "/a", layout(model, 0, g.size(), g.rank(), true, true));
    });
    CHECK(contains(e1, "an overlap"));
    CHECK(contains(e1, "tensor 'step'"));
    // Rank 1 forgets its part: a gap.
    const std::string e2 = error_of([&] {
      io::ShardedDict d = layout(model, 0, g.size(), g.rank(), true, g.rank() == 0);
      if (g.rank() == 1) d["w"].write = false;
      io::save_sharded(g, tmp.path() + "/b", d);
    });
    CHECK(contains(e2, "a gap"));
    CHECK(contains(e2, "tensor 'w'"));
    // The last rank declares another global shape.
    const std::string e3 = error_of([&] {
      io::ShardedDict d = layout(model, 0, g.size(), g.rank(), true, g.rank() == 0);
      if (g.rank() == g.size() - 1) d["n"].global_shape = {10};
      io::save_sharded(g, tmp.path() + "/c", d);
    });
    CHECK(contains(e3, "tensor 'n'"));
  } else {
    const std::string e = error_of([&] {
      io::save_sharded(g, tmp.path() + "/b", layout(model, 0, 2, 0, true, true));
    });
    CHECK(contains(e, "a gap"));
  }
  // A local tensor that is not its slice's shape.
  const std::string e4 = error_of([&] {
    io::ShardedDict d = layout(model, 0, g.size(), g.rank(), true, g.rank() == 0);
    d["v"].local = Tensor::zeros({1}, DType::f64);
    io::save_sharded(g, tmp.path() + "/d", d);
  });
  CHECK(contains(e4, "tensor 'v'"));
  // None of them left an index (nor, for the refused layouts, any file).
  for (const char* sub : {"/a", "/b", "/c", "/d"}) {
    CHECK_FALSE(fs::exists(tmp.path() + sub + "/index.json"));
    CHECK_FALSE(fs::exists(tmp.path() + sub + "/rank-00000.safetensors"));
  }
  cpu_group().barrier().wait();
}

TEST_CASE("a missing shard, an index with a gap or an overlap, another shape: one clear error",
          "[io][sharded][mpi]") {
  mgpu::dist::ProcessGroup& g = cpu_group();
  const Global model;
  SharedTempDir tmp("mgpu-sharded-load");
  const std::string dir = tmp.path() + "/ck";
  CHECK(contains(error_of([&] { io::read_sharded_index(dir); }), "not a complete sharded checkpoint"));
  io::save_sharded(g, dir, layout(model, 0, g.size(), g.rank(), true, g.rank() == 0));
  // Another global shape on load.
  io::ShardedDict other = layout(model, 0, 1, 0, true, true);
  other["w"].global_shape = {10, 5};
  other["w"].slice = io::whole_slice({10, 5});
  CHECK(contains(error_of([&] { io::load_sharded(dir, other); }), "was saved with shape [10, 6]"));
  // A tensor the checkpoint lacks.
  io::ShardedDict extra = layout(model, 0, 1, 0, true, true);
  extra["u"] = io::replicated(Tensor::zeros({2}), true);
  CHECK(contains(error_of([&] { io::load_sharded(dir, extra); }), "has no tensor 'u'"));
  g.barrier().wait();

  // Hand-edited indexes (each rank its own copy): a chunk dropped (a gap), a chunk grown
  // onto its neighbour (an overlap), a version this reader does not know.
  const nlohmann::json saved = [&] {
    std::ifstream in(dir + "/index.json");
    return nlohmann::json::parse(in);
  }();
  auto refusal = [&](const std::string& name, const nlohmann::json& edited) {
    const std::string copy = tmp.path() + "/" + name + std::to_string(g.rank());
    std::filesystem::create_directories(copy);
    std::ofstream(copy + "/index.json") << edited.dump();
    return error_of([&] { io::read_sharded_index(copy); });
  };
  nlohmann::json gap = saved;
  gap["tensors"]["w"]["chunks"].erase(0);
  if (g.size() == 1) gap["tensors"]["w"]["chunks"] = nlohmann::json::array();
  const std::string e1 = refusal("gap", gap);
  CHECK(contains(e1, "a gap"));
  CHECK(contains(e1, "tensor 'w'"));
  nlohmann::json overlap = saved;
  overlap["tensors"]["n"]["chunks"].push_back(overlap["tensors"]["n"]["chunks"][0]);
  CHECK(contains(refusal("overlap", overlap), "an overlap"));
  nlohmann::json outside = saved;
  outside["tensors"]["n"]["chunks"][0]["lengths"] = {100};
  CHECK(contains(refusal("outside", outside), "lies outside the tensor"));
  nlohmann::json version = saved;
  version["format_version"] = 99;
  CHECK(contains(refusal("version", version), "format_version 99"));
  g.barrier().wait();

  // A shard file gone: every load that needs it names it.
  if (g.rank() == 0) std::filesystem::remove(dir + "/rank-00000.safetensors");
  g.barrier().wait();
  io::ShardedDict all = layout(model, 0, 1, 0, true, true);
  const std::string e2 = error_of([&] { io::load_sharded(dir, all); });
  CHECK(contains(e2, "a missing shard"));
  CHECK(contains(e2, "rank-00000.safetensors"));
}

TEST_CASE("a save replaces an older checkpoint in the same folder", "[io][sharded][mpi]") {
  mgpu::dist::ProcessGroup& g = cpu_group();
  const Global model;
  Global later;
  for (auto& [name, t] : later.t) t = pattern(t.shape(), t.dtype(), 7);
  SharedTempDir tmp("mgpu-sharded-again");
  io::save_sharded(g, tmp.path(), layout(model, 0, g.size(), g.rank(), true, g.rank() == 0));
  io::save_sharded(g, tmp.path(), layout(later, 1, g.size(), g.rank(), true, g.rank() == 0));
  check_loads(later, tmp.path(), 0, {1, 3});
}

TEST_CASE("sharded files carry checksums: a flipped byte, a copied shard, another save's shard, "
          "a chunk naming the wrong file are refused; killed saves' temporaries are removed",
          "[io][sharded][mpi]") {
  namespace fs = std::filesystem;
  mgpu::dist::ProcessGroup& g = cpu_group();
  const Global model;
  Global later;
  for (auto& [name, t] : later.t) t = pattern(t.shape(), t.dtype(), 7);
  SharedTempDir tmp("mgpu-sharded-sums");
  const std::string dir = tmp.path() + "/ck", other = tmp.path() + "/other";
  // A temporary file a killed save left, and a shard of a rank this save does not have.
  if (g.rank() == 0) {
    fs::create_directories(dir);
    std::ofstream(dir + "/.rank-00000.safetensors.tmp.999999") << "half";
    std::ofstream(dir + "/" + io::shard_file_name(g.size() + 3)) << "old";
  }
  g.barrier().wait();
  io::save_sharded(g, dir, layout(model, 0, g.size(), g.rank(), true, g.rank() == 0));
  io::save_sharded(g, other, layout(later, 0, g.size(), g.rank(), true, g.rank() == 0));
  CHECK_FALSE(fs::exists(dir + "/.rank-00000.safetensors.tmp.999999"));
  CHECK_FALSE(fs::exists(dir + "/" + io::shard_file_name(g.size() + 3)));
  const io::ShardedIndex index = io::read_sharded_index(dir);
  for (const auto& [name, info] : index.tensors)
    for (const io::ShardChunk& c : info.chunks) CHECK(c.checksum.size() == 16);
  io::ShardedDict whole = layout(model, 0, 1, 0, true, true);
  const io::ShardedLoadStats stats = io::load_sharded(dir, whole);
  CHECK(stats.unverified_chunks == 0);
  CHECK(stats.bytes_verified > 0);
  g.barrier().wait();

  // Each rank its own copy of the folder, one file changed; a load of everything refuses it.
  const std::string last = io::shard_file_name(g.size() - 1);  // holds part of "w"
  auto refusal = [&](const std::string& name, const std::function<void(const std::string&)>& edit) {
    const std::string copy = tmp.path() + "/" + name + std::to_string(g.rank());
    fs::copy(dir, copy, fs::copy_options::recursive);
    edit(copy);
    io::ShardedDict all = layout(model, 0, 1, 0, true, true);
    return error_of([&] { io::load_sharded(copy, all); });
  };
  const std::string flipped = refusal("flip", [&](const std::string& copy) {
    std::fstream f(copy + "/" + last, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    const char c = static_cast<char>(f.get() ^ 0x01);
    f.seekp(-1, std::ios::end);
    f.put(c);
  });
  CHECK(contains(flipped, "fails its checksum"));
  CHECK(contains(flipped, last));
  const std::string foreign = refusal("foreign", [&](const std::string& copy) {
    fs::copy_file(other + "/" + last, copy + "/" + last, fs::copy_options::overwrite_existing);
  });
  CHECK(contains(foreign, "is not the one this save wrote"));
  CHECK(contains(foreign, last));
  if (g.size() > 1) {
    const std::string copied = refusal("copied", [&](const std::string& copy) {
      fs::copy_file(copy + "/" + io::shard_file_name(0), copy + "/" + io::shard_file_name(1),
                    fs::copy_options::overwrite_existing);
    });
    CHECK(contains(copied, io::shard_file_name(1)));
  }
  if (g.size() > 1) {  // the index's chunk of "v" in rank 0's file named as rank 1's
    const std::string renamed = refusal("renamed", [&](const std::string& copy) {
      nlohmann::json j;
      std::ifstream(copy + "/index.json") >> j;
      j["tensors"]["v"]["chunks"][0]["file"] = io::shard_file_name(1);
      j["tensors"]["v"]["chunks"][1]["file"] = io::shard_file_name(0);
      std::ofstream(copy + "/index.json") << j.dump();
    });
    CHECK(contains(renamed, "is not the one this save wrote"));
  }
  // An index written before checksums still loads, its chunks counted unverified.
  const std::string plain = tmp.path() + "/plain" + std::to_string(g.rank());
  fs::copy(dir, plain, fs::copy_options::recursive);
  nlohmann::json j;
  std::ifstream(plain + "/index.json") >> j;
  for (auto& [name, t] : j["tensors"].items())
    for (auto& c : t["chunks"]) c.erase("checksum");
  std::ofstream(plain + "/index.json") << j.dump();
  io::ShardedDict all = layout(model, 0, 1, 0, true, true);
  CHECK(io::load_sharded(plain, all).unverified_chunks > 0);
}
