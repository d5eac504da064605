// Lesson 07's reference (solutions/07_checkpointing) against its twins in the library
// (mgpu::io), in one process, on the graded tests' inputs. Not graded: the reference build
// runs it (agreement_tests in lessons/meson.build). capture_state needs no check here: its
// graded tests already compare it with io::capture_training_state, entry by entry.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "../common/io/io_test_util.h"
#include "../common/io/malformed_cases.h"
#include "agree_checks.h"
#include "mgpu/ops.h"

using mgpu::DType;
using mgpu::Tensor;
using mgpu::testing::ToyOptimizer;
namespace io = mgpu::io;
namespace l07 = mgpu::lesson07;
namespace fs = std::filesystem;

namespace {

/// The dicts the graded tests serialize, with their metadata.
std::vector<std::pair<io::TensorDict, io::Metadata>> graded_dicts() {
  std::vector<std::pair<io::TensorDict, io::Metadata>> out;
  const Tensor attn = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {1, 2, 3});
  out.push_back({{{"a", Tensor::from_vector<float>({1, 2}, {2})}}, {}});
  out.push_back({{{"attn.0", attn}}, {}});
  out.push_back({{{"attn0", attn.reshape({1, 1, 2, 3})}}, {}});
  out.push_back({{}, {}});
  out.push_back({{}, {{"framework", "pt"}}});
  out.push_back({mgpu::testing::every_dtype_dict(), {}});
  out.push_back({mgpu::testing::every_dtype_dict(), {{"step", "12"}, {"note", "é \"q\"\n"}}});
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {  // test_writer's random dicts
    io::TensorDict r;
    const DType dtypes[] = {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i64, DType::i32};
    for (std::uint64_t i = 0; i < 1 + seed % 5; ++i) {
      Tensor t = Tensor::empty({static_cast<std::int64_t>(1 + (seed + i) % 4), 3});
      mgpu::uniform_(t, seed * 10 + i, -100.0, 100.0);
      r["layer" + std::to_string((seed * 7 + i) % 5) + "." + std::to_string(i)] = t.to(dtypes[(seed + i) % 6]);
    }
    out.push_back({r, {}});
  }
  io::TensorDict d;  // test_reader's
  d["w"] = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  d["b"] = Tensor::from_vector<double>({-1}, {1});
  d["h"] = Tensor::from_vector<float>({0.5f, 2.0f}, {2}).to(DType::bf16);
  d["step"] = Tensor::full({}, 7.0, DType::i64);
  d["none"] = Tensor::zeros({3, 0}, DType::i32);
  out.push_back({d, {{"k", "v"}}});
  return out;
}

/// "ok: N tensors" or "refused: RULE, tensor 'T'": what a reader made of a file. The
/// detail after the rule is prose each copy words its own way; the rule and the tensor
/// are the contract.
template <typename Parse>
std::string outcome(Parse&& parse, const std::string& bytes, io::SafetensorsFile& out) {
  try {
    out = parse(bytes, "f.safetensors");
    return "ok: " + std::to_string(out.tensors.size()) + " tensors";
  } catch (const io::SafetensorsError& e) {
    const bool prefixed = std::string(e.what()).rfind("f.safetensors: ", 0) == 0;
    return std::string("refused: ") + io::rule_name(e.rule()) + ", tensor '" + e.tensor() + "'" +
           (prefixed ? "" : " (the message does not start with the file)");
  } catch (const std::exception& e) {
    return std::string("refused outside io::refuse: ") + e.what();
  }
}

/// Every entry of a folder (hidden ones too) with its content.
std::map<std::string, std::string> folder(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    out[e.path().filename().string()] = mgpu::testing::slurp(e.path().string());
  return out;
}

}  // namespace

TEST_CASE("agreement: serialize_safetensors, reference and library",
          "[07_checkpointing][agreement]") {
  for (const auto& [dict, meta] : graded_dicts()) {
    INFO(dict.size() << " tensors, " << meta.size() << " metadata entries");
    CHECK(l07::serialize_safetensors(dict, meta) == io::serialize_safetensors(dict, meta));
  }
  const io::TensorDict reserved{{"__metadata__", Tensor::full({1}, 1.0)}};
  CHECK_THROWS_AS(l07::serialize_safetensors(reserved), mgpu::Error);
  CHECK_THROWS_AS(io::serialize_safetensors(reserved), mgpu::Error);
}

TEST_CASE("agreement: parse_safetensors, reference and library",
          "[07_checkpointing][agreement]") {
  std::vector<std::string> files;
  for (const auto& [dict, meta] : graded_dicts()) files.push_back(io::serialize_safetensors(dict, meta));
  for (const auto& [bytes, count] : mgpu::testing::accepted_cases()) files.push_back(bytes);
  for (const auto& c : mgpu::testing::malformed_cases()) files.push_back(c.bytes);
  const auto ref_parse = [](std::string_view b, const std::string& f) { return l07::parse_safetensors(b, f); };
  const auto lib_parse = [](std::string_view b, const std::string& f) { return io::parse_safetensors(b, f); };
  for (const std::string& bytes : files) {
    INFO(Catch::Detail::stringify(bytes.substr(0, 160)));
    io::SafetensorsFile ref, lib;
    const std::string ref_outcome = outcome(ref_parse, bytes, ref);
    CHECK(ref_outcome == outcome(lib_parse, bytes, lib));
    CHECK(ref.metadata == lib.metadata);
    REQUIRE(ref.tensors.size() == lib.tensors.size());
    for (const auto& [name, t] : lib.tensors) {
      INFO("tensor '" << name << "'");
      REQUIRE(ref.tensors.count(name) == 1);
      CHECK_SAME_BITS(ref.tensors.at(name), t);
    }
  }
}

TEST_CASE("agreement: commit_checkpoint, reference and library",
          "[07_checkpointing][agreement]") {
  // The graded sequence (four saves keeping 2, one keeping all) and one keeping 1; after
  // each, the two folders hold the same files with the same bytes.
  mgpu::testing::TempDir tmp;
  const std::string ref_dir = tmp.file("ref"), lib_dir = tmp.file("lib");
  const std::pair<int, int> saves[] = {{1, 2}, {2, 2}, {3, 2}, {4, 2}, {5, 0}, {6, 1}};
  for (const auto& [step, keep_last] : saves) {
    CAPTURE(step, keep_last);
    const std::string bytes = io::serialize_safetensors(
        {{"w", Tensor::full({256 * 1024}, static_cast<double>(step))}}, {{"step", std::to_string(step)}});
    l07::commit_checkpoint(ref_dir, io::checkpoint_name(step * 100), bytes, keep_last);
    io::commit_checkpoint(lib_dir, io::checkpoint_name(step * 100), {bytes}, keep_last);
    const auto ref = folder(ref_dir), lib = folder(lib_dir);
    std::vector<std::string> ref_names, lib_names;
    for (const auto& e : ref) ref_names.push_back(e.first);
    for (const auto& e : lib) lib_names.push_back(e.first);
    REQUIRE(ref_names == lib_names);
    for (const auto& [name, content] : lib) {
      INFO(name);
      CHECK((ref.at(name) == content));  // not expanded: a checkpoint is 1 MiB
    }
  }
  // A file where the folder goes: both refuse.
  std::ofstream(tmp.file("not-a-folder")) << "a file";
  CHECK_THROWS(l07::commit_checkpoint(tmp.file("not-a-folder/run"), io::checkpoint_name(1), "x", 0));
  CHECK_THROWS(io::commit_checkpoint(tmp.file("not-a-folder/run"), io::checkpoint_name(1), {"x"}, 0));
}

TEST_CASE("agreement: restore_state, reference and library, in a world of 1",
          "[07_checkpointing][agreement]") {
  for (ToyOptimizer kind : {ToyOptimizer::sgd_momentum, ToyOptimizer::adamw})
    for (std::int64_t at : {4, 9, 11}) mgpu::testing::check_same_restore(nullptr, kind, at, 12);
  mgpu::testing::check_same_refusals(nullptr);
}
