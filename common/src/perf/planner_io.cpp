// The planner's cluster from lesson 09's hardware file (lessons/09_time_cost/hardware.json):
// one entry of "hardware" (links) with the file's "device" (compute, floor, memory).
#include <nlohmann/json.hpp>

#include "mgpu/error.h"
#include "mgpu/io/atomic_file.h"
#include "mgpu/perf/planner.h"

namespace mgpu::perf {

namespace {

double number(const nlohmann::json& j, const char* key, const std::string& where) {
  MGPU_CHECK(j.is_object() && j.contains(key) && j.at(key).is_number(), where, " has no number \"",
             key, "\"");
  return j.at(key).get<double>();
}

}  // namespace

Cluster read_cluster(const std::string& path, const std::string& name, double memory_gib) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(io::read_file(path));
  } catch (const nlohmann::json::exception& e) {
    MGPU_FAIL(path, ": not valid JSON (", e.what(), ")");
  }
  MGPU_CHECK(j.is_object() && j.contains("device") && j.contains("hardware") &&
                 j.at("hardware").is_array(),
             path, ": expected \"device\" and a list \"hardware\" (lesson 09's hardware file)");
  const nlohmann::json& dev = j.at("device");
  Cluster c;
  c.flops = 1e12 * number(dev, "sustained_tflops", path + ": device");
  c.step_floor_s = 1e-3 * (dev.contains("step_floor_ms") ? number(dev, "step_floor_ms", path) : 0.0);
  if (dev.contains("memory_gib")) c.memory_bytes = number(dev, "memory_gib", path + ": device") * (1ull << 30);
  if (memory_gib > 0) c.memory_bytes = memory_gib * (1ull << 30);
  if (dev.contains("compute_devices")) c.compute_devices = number(dev, "compute_devices", path + ": device");
  std::string names;
  for (const nlohmann::json& h : j.at("hardware")) {
    const std::string n = h.value("name", "");
    names += (names.empty() ? "\"" : ", \"") + n + "\"";
    if (n != name) continue;
    const std::string where = path + ": \"" + n + "\"";
    c.hardware.name = n;
    c.hardware.nodes = static_cast<int>(number(h, "nodes", where));
    c.hardware.gpus_per_node = static_cast<int>(number(h, "gpus_per_node", where));
    c.hardware.intra_busbw = 1e9 * number(h, "intra_busbw_gbs", where);
    c.hardware.intra_latency_s = 1e-6 * h.value("intra_latency_us", 0.0);
    c.hardware.inter_bw = 1e9 / 8 * h.value("inter_gbit", 0.0);  // Gbit/s -> bytes/s
    c.hardware.inter_latency_s = 1e-6 * h.value("inter_latency_us", 0.0);
    MGPU_CHECK(c.hardware.nodes >= 1 && c.hardware.gpus_per_node >= 1, where,
               ": nodes and gpus_per_node must be at least 1");
    return c;
  }
  MGPU_FAIL(path, ": no hardware named \"", name, "\" (there are: ", names, ")");
}

}  // namespace mgpu::perf
