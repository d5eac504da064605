// Lesson 09: reading the model's inputs (see workload_io.h). Nothing to write here.
#include "workload_io.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <sstream>

#include "mgpu/perf/link_model.h"  // fit_alpha_beta (lesson 04's)

namespace mgpu::lesson09 {

using nlohmann::json;

namespace {

json field(const json& j, const char* key, const std::string& path) {
  MGPU_CHECK(j.contains(key), path, ": no '", key, "' field");
  return j.at(key);
}

std::vector<json> read_json_lines(const std::string& path) {
  std::ifstream in(path);
  MGPU_CHECK(in.good(), path, ": cannot read it");
  std::vector<json> out;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      out.push_back(json::parse(line));
    } catch (const json::exception& e) {
      MGPU_FAIL(path, ":", n, ": not JSON (", e.what(), ")");
    }
  }
  return out;
}

}  // namespace

perf::Workload read_workload(const std::string& path, std::int64_t* batch) {
  // The measured steps of the run (a one-rank run: rank 0 is all of it).
  std::vector<json> steps;
  for (const json& j : read_json_lines(path))
    if (j.value("measured", false) && j.value("synchronized", true)) steps.push_back(j);
  MGPU_CHECK(!steps.empty(), path, ": no measured step (is it the --breakdown file of lesson "
             "09's train, with more steps than --warmup-steps?)");
  for (const json& j : steps)
    MGPU_CHECK(field(j, "rank", path).get<int>() == 0, path, ": steps of rank ",
               j.at("rank").get<int>(), "; the model's compute comes from a one-rank run");
  const auto b = field(steps[0], "batch", path).get<std::int64_t>();
  if (batch) *batch = b;
  // Means over the steps; the buckets of the last step (DDP rebuilt them after the first).
  double forward = 0, backward = 0, fixed = 0;
  const std::size_t n_buckets = field(steps.back(), "buckets", path).size();
  std::vector<double> ready(n_buckets, 0.0);
  std::size_t same_layout = 0;
  for (const json& j : steps) {
    const json ph = field(j, "phases_ms", path);
    forward += field(ph, "forward", path).get<double>();
    backward += field(ph, "backward", path).get<double>();
    fixed += field(ph, "data_wait", path).get<double>() + field(ph, "h2d", path).get<double>() +
             field(ph, "optimizer", path).get<double>() + field(ph, "other", path).get<double>();
    const json& buckets = j.at("buckets");
    if (buckets.size() != n_buckets) continue;
    ++same_layout;
    for (std::size_t k = 0; k < n_buckets; ++k)
      ready[k] += std::min(1.0, std::max(0.0, field(buckets[k], "ready", path).get<double>()));
  }
  const double n = static_cast<double>(steps.size()), per_sample = 1e-3 / static_cast<double>(b);
  perf::Workload w;
  w.forward_s_per_sample = forward / n * per_sample;
  w.backward_s_per_sample = backward / n * per_sample;
  w.fixed_s = 1e-3 * fixed / n;
  const json& last = steps.back().at("buckets");
  for (std::size_t k = 0; k < n_buckets; ++k) {
    w.bucket_bytes.push_back(field(last[k], "bytes", path).get<double>());
    w.bucket_ready.push_back(ready[k] / static_cast<double>(same_layout));
  }
  // Launch order is the model's order; averaged shares can wobble out of it by rounding.
  for (std::size_t k = 1; k < n_buckets; ++k)
    w.bucket_ready[k] = std::max(w.bucket_ready[k], w.bucket_ready[k - 1]);
  return w;
}

perf::AlphaBeta fit_link_from_csv(const std::string& path, int ranks) {
  std::ifstream in(path);
  MGPU_CHECK(in.good(), path, ": cannot read it");
  std::string header;
  std::getline(in, header);
  MGPU_CHECK(header.rfind("bytes,count,ring_us", 0) == 0, path, ": not a bench_allreduce --csv file");
  std::vector<perf::AllReduceTiming> timings;
  for (std::string line; std::getline(in, line);) {
    std::vector<double> v;
    std::stringstream cells(line);
    for (std::string c; std::getline(cells, c, ',');) v.push_back(std::atof(c.c_str()));
    if (v.size() >= 5 && v[4] > 0) timings.push_back({v[0], 1e-6 * v[4]});  // library_us
  }
  return perf::fit_alpha_beta(timings, ranks);
}

std::vector<MeasuredRun> read_measured_runs(const std::string& path) {
  std::vector<MeasuredRun> runs;
  for (const json& j : read_json_lines(path)) {
    if (!j.contains("step_ms")) continue;
    runs.push_back({field(j, "mode", path).get<std::string>(), field(j, "world_size", path).get<int>(),
                    field(j, "batch_per_rank", path).get<std::int64_t>(),
                    1e-3 * j.at("step_ms").get<double>()});
  }
  return runs;
}

const MeasuredRun* find_run(const std::vector<MeasuredRun>& runs, const std::string& mode,
                            int ranks, std::int64_t batch_per_rank) {
  for (const MeasuredRun& r : runs)
    if (r.mode == mode && r.ranks == ranks && r.batch_per_rank == batch_per_rank) return &r;
  return nullptr;
}

HardwareTable read_hardware_table(const std::string& path) {
  std::ifstream in(path);
  MGPU_CHECK(in.good(), path, ": cannot read it");
  json j;
  try {
    in >> j;
  } catch (const json::exception& e) {
    MGPU_FAIL(path, ": not JSON (", e.what(), ")");
  }
  HardwareTable t;
  const json dev = field(j, "device", path);
  t.device_name = field(dev, "name", path).get<std::string>();
  t.sustained_tflops = field(dev, "sustained_tflops", path).get<double>();
  t.step_floor_s = 1e-3 * dev.value("step_floor_ms", 0.0);
  MGPU_CHECK(t.sustained_tflops > 0, path, ": device.sustained_tflops must be positive");
  for (const json& h : field(j, "hardware", path)) {
    perf::Hardware hw;
    hw.name = field(h, "name", path).get<std::string>();
    hw.nodes = h.value("nodes", 1);
    hw.gpus_per_node = field(h, "gpus_per_node", path).get<int>();
    hw.intra_busbw = 1e9 * field(h, "intra_busbw_gbs", path).get<double>();
    hw.intra_latency_s = 1e-6 * h.value("intra_latency_us", 0.0);
    hw.inter_bw = 1e9 / 8 * h.value("inter_gbit", 0.0);  // Gbit/s -> bytes/s
    hw.inter_latency_s = 1e-6 * h.value("inter_latency_us", 0.0);
    t.hardware.push_back(hw);
  }
  for (const json& m : field(j, "workloads", path))
    t.models.push_back({field(m, "name", path).get<std::string>(),
                        field(m, "parameters", path).get<double>(),
                        field(m, "flops_per_sample", path).get<double>(),
                        m.value("batch_per_rank", std::int64_t{64})});
  return t;
}

perf::Workload workload_on_device(const ModelSpec& spec, const HardwareTable& table,
                                  const perf::Workload* measured) {
  perf::Workload w;
  const double per_sample = spec.flops_per_sample / (1e12 * table.sustained_tflops);
  w.forward_s_per_sample = per_sample / 3;
  w.backward_s_per_sample = 2 * per_sample / 3;
  w.fixed_s = table.step_floor_s;
  const double total = 4 * spec.parameters;  // f32 gradients
  double measured_total = 0;
  if (measured)
    for (double b : measured->bucket_bytes) measured_total += b;
  if (measured && std::fabs(measured_total - total) < 1e-3 * total) {
    w.bucket_bytes = measured->bucket_bytes;
    w.bucket_ready = measured->bucket_ready;
    return w;
  }
  // DDP's default caps, the gradients cut into buckets in the order backward makes them.
  const double mib = 1024.0 * 1024.0;
  double done = 0;
  for (double cap = 1 * mib; done < total; cap = 25 * mib) {
    const double bytes = std::min(cap, total - done);
    done += bytes;
    w.bucket_bytes.push_back(bytes);
    w.bucket_ready.push_back(done / total);
  }
  return w;
}

}  // namespace mgpu::lesson09
