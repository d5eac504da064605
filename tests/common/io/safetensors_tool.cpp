// safetensors_tool: the library's safetensors writer and reader from the command line, for
// the interoperability test with the Python `safetensors` package (safetensors_interop.py).
//
//   safetensors_tool dump FILE      prints the file as one JSON line:
//                                   {"metadata": {...}, "tensors": {NAME: {"dtype", "shape", "hex"}}}
//                                   or, for a file the reader refuses, exits 3 printing
//                                   "refused RULE: MESSAGE"
//   safetensors_tool copy IN OUT    reads IN and writes its tensors and metadata to OUT
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "mgpu/io/safetensors.h"

namespace io = mgpu::io;

namespace {

std::string hex(const mgpu::Tensor& t) {
  static const char* digits = "0123456789abcdef";
  const auto* p = static_cast<const unsigned char*>(t.raw_data());
  std::string out;
  for (std::size_t i = 0; i < t.nbytes(); ++i) {
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

int dump(const std::string& path) {
  const io::SafetensorsFile f = io::load_safetensors(path);
  nlohmann::ordered_json out = {{"metadata", f.metadata}, {"tensors", nlohmann::ordered_json::object()}};
  for (const auto& [name, t] : f.tensors)
    out["tensors"][name] = {{"dtype", io::safetensors_dtype_name(t.dtype())},
                            {"shape", t.shape()},
                            {"hex", hex(t)}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string usage = "usage: safetensors_tool dump FILE | copy IN OUT";
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "dump" && argc == 3) return dump(argv[2]);
    if (cmd == "copy" && argc == 4) {
      const io::SafetensorsFile f = io::load_safetensors(argv[2]);
      io::save_safetensors(argv[3], f.tensors, f.metadata);
      return 0;
    }
    std::fprintf(stderr, "%s\n", usage.c_str());
    return 2;
  } catch (const io::SafetensorsError& e) {
    std::printf("refused %s: %s\n", io::rule_name(e.rule()), e.what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
