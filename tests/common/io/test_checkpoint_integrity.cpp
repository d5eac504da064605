// mgpu::io checkpoints verified on load: per-tensor checksums in the metadata, finite
// values, strict optimizer state, regular files only, stale temporaries removed, and the
// trace and metrics files written atomically. (The whole program's refusals:
// checkpoint_faults.py.)
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "io_files.h"
#include "mgpu/app/report.h"
#include "mgpu/app/trace.h"
#include "mgpu/io/atomic_file.h"
#include "mgpu/io/checkpoint.h"
#include "mgpu/io/checksum.h"
#include "mgpu/io/optimizer_state_check.h"
#include "mgpu/io/state_dict.h"
#include "mgpu/optim/sgd.h"

using mgpu::Tensor;
namespace io = mgpu::io;
namespace fs = std::filesystem;
using mgpu::testing::TempDir;

namespace {

io::SafetensorsFile two_tensors() {
  io::SafetensorsFile f;
  f.tensors["a"] = Tensor::from_vector<float>({1, 2, 3}, {3});
  f.tensors["b"] = Tensor::from_vector<double>({4, 5}, {2});
  f.metadata["format"] = "x";
  return f;
}

}  // namespace

TEST_CASE("checksums: every tensor's in the metadata, verified, naming file and tensor",
          "[io][checksum]") {
  io::SafetensorsFile f = two_tensors();
  CHECK_FALSE(io::verify_checksums(f, "old.safetensors"));  // none: nothing to verify
  io::add_checksums(f);
  CHECK(f.metadata.at("checksum.a") == io::tensor_checksum(f.tensors.at("a")));
  CHECK(f.metadata.at("checksum.a").size() == 16);
  CHECK(f.metadata.at("format") == "x");
  // Round trip through the writer and the reader: verified.
  const std::string bytes = io::serialize_safetensors(f.tensors, f.metadata);
  CHECK(io::verify_checksums(io::parse_safetensors(bytes, "f.safetensors"), "f.safetensors"));
  // A flipped byte of a's data (the last tensor's bytes end the file: a is F32, after b's F64).
  std::string flipped = bytes;
  flipped[flipped.size() - 1] ^= 0x01;
  CHECK_THROWS_WITH(io::verify_checksums(io::parse_safetensors(flipped, "f.safetensors"), "f.safetensors"),
                    Catch::Contains("f.safetensors") && Catch::Contains("tensor 'a'") &&
                        Catch::Contains("fails its checksum"));
  // A tensor removed, or added.
  io::SafetensorsFile removed = f;
  removed.tensors.erase("b");
  CHECK_THROWS_WITH(io::verify_checksums(removed, "r.safetensors"),
                    Catch::Contains("r.safetensors") && Catch::Contains("'b' is missing"));
  io::SafetensorsFile added = f;
  added.tensors["c"] = Tensor::zeros({1});
  CHECK_THROWS_WITH(io::verify_checksums(added, "c.safetensors"),
                    Catch::Contains("'c' has no checksum"));
  // add_checksums replaces stale ones.
  io::add_checksums(removed);
  CHECK(removed.metadata.count("checksum.b") == 0);
  CHECK(io::verify_checksums(removed, "r.safetensors"));
}

TEST_CASE("checksums are FNV-1a 64; files with the old offset basis still verify, with a note",
          "[io][checksum]") {
  // FNV-1a 64's published test vectors: "" is the offset basis, "a" is af63dc4c8601ec8c.
  CHECK(io::fnv1a64("", 0) == 14695981039346656037ull);
  CHECK(io::checksum_hex(io::fnv1a64("a", 1)) == "af63dc4c8601ec8c");
  CHECK(io::checksum_hex(io::fnv1a64("foobar", 6)) == "85944171f73967e8");
  const Tensor bytes = Tensor::from_vector<std::int32_t>({0x61}, {1});  // 61 00 00 00
  CHECK(io::tensor_checksum(bytes) == io::checksum_hex(io::fnv1a64("a\0\0\0", 4)));
  io::SafetensorsFile f = two_tensors();
  io::add_checksums(f);
  CHECK(f.metadata.at("checksum_algorithm") == "fnv1a64");
  CHECK(io::checksum_note(f.metadata).empty());
  // A file of the old writer: the old basis, no checksum_algorithm. It verifies, noted.
  io::SafetensorsFile old = two_tensors();
  for (const auto& [name, t] : old.tensors)
    old.metadata["checksum." + name] = io::tensor_checksum(t, io::kLegacyChecksumBasis);
  CHECK(io::verify_checksums(old, "old.safetensors"));
  CHECK(io::legacy_checksums(old.metadata));
  CHECK_THAT(io::checksum_note(old.metadata), Catch::Contains("old offset basis"));
  // ... but the old checksums under the new key are refused, and so is an unknown algorithm.
  old.metadata["checksum_algorithm"] = "fnv1a64";
  CHECK_THROWS_WITH(io::verify_checksums(old, "old.safetensors"), Catch::Contains("fails its checksum"));
  old.metadata["checksum_algorithm"] = "crc32";
  CHECK_THROWS_WITH(io::verify_checksums(old, "old.safetensors"),
                    Catch::Contains("checksum_algorithm \"crc32\""));
  CHECK_THAT(io::checksum_note({}), Catch::Contains("not verified"));
}

TEST_CASE("check_optimizer_state: AdamW steps outside 1..the saved step and negative second "
          "moments are refused, naming the file and the tensor", "[io][checksum]") {
  io::TensorDict st;
  st["w.exp_avg"] = Tensor::from_vector<float>({-1, 2}, {2});  // a first moment may be negative
  st["w.exp_avg_sq"] = Tensor::from_vector<float>({0, 2}, {2});
  st["w.step"] = io::scalar_i64(3);
  CHECK_NOTHROW(io::check_optimizer_state(st, 3, "optim.", "f.safetensors"));
  CHECK_NOTHROW(io::check_optimizer_state(st, -1, "optim.", "f.safetensors"));
  for (const std::int64_t bad : {std::int64_t{0}, std::int64_t{-7}, std::int64_t{1000000000000000}}) {
    io::TensorDict edited = st;
    edited["w.step"] = io::scalar_i64(bad);
    CHECK_THROWS_WITH(io::check_optimizer_state(edited, 3, "optim.", "f.safetensors"),
                      Catch::Contains("f.safetensors") && Catch::Contains("'optim.w.step'") &&
                          Catch::Contains("the checkpoint's 3 steps"));
  }
  io::TensorDict later = st;
  later["w.step"] = io::scalar_i64(4);  // past the saved step
  CHECK_THROWS(io::check_optimizer_state(later, 3, "optim.", "f.safetensors"));
  io::TensorDict negative = st;
  negative["w.exp_avg_sq"] = Tensor::from_vector<float>({0.5f, -2}, {2});
  CHECK_THROWS_WITH(io::check_optimizer_state(negative, 3, "optim.", "f.safetensors"),
                    Catch::Contains("'optim.w.exp_avg_sq'") && Catch::Contains("flat index 1"));
}

TEST_CASE("checkpoint layout carries checksums; load_checkpoint path verifies them",
          "[io][checksum]") {
  io::TrainingState s;
  s.model["w"] = Tensor::from_vector<float>({1, 2}, {2});
  const io::SafetensorsFile f = io::to_checkpoint_file(s);
  for (const auto& [name, t] : f.tensors) CHECK(f.metadata.count("checksum." + name) == 1);
  CHECK(io::has_checksums(f.metadata));
  CHECK(io::verify_checksums(f, "x"));
}

TEST_CASE("check_finite: NaN and infinity refused, naming file and tensor", "[io][checksum]") {
  io::TensorDict d;
  d["ok"] = Tensor::from_vector<float>({1, 2}, {2});
  d["n"] = Tensor::from_vector<int32_t>({1}, {1});  // integers: never checked
  CHECK_NOTHROW(io::check_finite(d, "model.", "f.safetensors"));
  d["w"] = Tensor::from_vector<float>({0, std::numeric_limits<float>::quiet_NaN(), 1}, {3});
  CHECK_THROWS_WITH(io::check_finite(d, "model.", "f.safetensors"),
                    Catch::Contains("f.safetensors") && Catch::Contains("'model.w'") &&
                        Catch::Contains("flat index 1") && Catch::Contains("--allow-non-finite-checkpoint"));
  io::TensorDict e;
  e["m"] = Tensor::from_vector<double>({-std::numeric_limits<double>::infinity()}, {1});
  CHECK_THROWS_WITH(io::check_finite(e, "optim.", "g"), Catch::Contains("'optim.m'"));
}

TEST_CASE("optimizer state loads strictly: a missing momentum buffer is refused", "[io][checksum]") {
  mgpu::nn::Parameter a("a", Tensor::from_vector<float>({1, 2}, {2}));
  mgpu::nn::Parameter b("b", Tensor::from_vector<float>({3}, {1}));
  mgpu::optim::SGD sgd({&a, &b}, {0.1, 0.9, 0});
  CHECK_NOTHROW(sgd.load_state({}));  // never stepped: no state at all
  CHECK_THROWS_WITH(sgd.load_state({{"a.momentum_buffer", Tensor::zeros({2})}}),
                    Catch::Contains("'b.momentum_buffer' is missing"));
  b.set_requires_grad(false);  // frozen: never has state
  CHECK_NOTHROW(sgd.load_state({{"a.momentum_buffer", Tensor::zeros({2})}}));
}

TEST_CASE("only regular files are read, saying what the path is", "[io][checksum]") {
  TempDir dir;
  CHECK_THROWS_WITH(io::read_file("/dev/zero"), Catch::Contains("/dev/zero") &&
                                                    Catch::Contains("character device"));
  CHECK_THROWS_WITH(io::load_safetensors("/dev/zero"), Catch::Contains("character device"));
  const std::string fifo = dir.file("f.safetensors");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  CHECK_THROWS_WITH(io::load_safetensors(fifo), Catch::Contains("FIFO"));  // does not block
  const std::string loop = dir.file("loop.safetensors");
  REQUIRE(::symlink(loop.c_str(), loop.c_str()) == 0);
  CHECK_THROWS_WITH(io::load_safetensors(loop), Catch::Contains("symlink loop"));
  CHECK(io::describe_path(dir.path()) == "a folder");
  CHECK(io::describe_path(dir.file("none")) == "missing");
  const std::string dangling = dir.file("dangling");
  REQUIRE(::symlink(dir.file("none").c_str(), dangling.c_str()) == 0);
  CHECK(io::describe_path(dangling) == "a dangling symlink");
  // A folder's `latest` that is a symlink loop is not "no checkpoint yet".
  const std::string latest = dir.file("latest");
  REQUIRE(::symlink(latest.c_str(), latest.c_str()) == 0);
  CHECK_THROWS_WITH(io::latest_checkpoint(dir.path()), Catch::Contains("symlink loop"));
}

TEST_CASE("a stale temporary file of a killed save is removed by the next save", "[io][checksum]") {
  TempDir dir;
  io::commit_checkpoint(dir.path(), io::checkpoint_name(1), "one", 0);
  const std::string stale = dir.file(".step-00000002.safetensors.tmp.999999");
  io::atomic_replace(dir.path(), "x", "");  // (a plain file for the stale one's content)
  fs::rename(dir.file("x"), stale);
  REQUIRE(fs::exists(stale));
  io::commit_checkpoint(dir.path(), io::checkpoint_name(3), "three", 0);
  CHECK_FALSE(fs::exists(stale));
}

TEST_CASE("trace and metrics files are written atomically", "[io][checksum]") {
  TempDir dir;
  mgpu::app::MetricsWriter m;
  m.open(dir.file("m.jsonl"));
  CHECK_FALSE(fs::exists(dir.file("m.jsonl")));  // nothing under the name before a line
  mgpu::app::EpochStats s;
  s.epoch = 1;
  m.write(s);
  s.epoch = 2;
  m.write(s);
  CHECK(io::read_file(dir.file("m.jsonl")).find("\"epoch\":2") != std::string::npos);
  mgpu::app::Trace t;
  t.open(dir.file("t.json"), 0);
  CHECK_FALSE(fs::exists(dir.file("t.json")));
  t.span("compute", "x", 0, 1);
  t.write();
  CHECK(io::read_file(dir.file("t.json")).find("traceEvents") != std::string::npos);
  std::size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);  // none left
    ++entries;
  }
  CHECK(entries == 2);
}
