// The epoch line, the final line and the metrics file (see report.h).
#include "mgpu/app/report.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>

#include "mgpu/error.h"
#include "mgpu/io/atomic_file.h"
#include "mgpu/nn/models.h"

namespace mgpu::app {

std::string epoch_line(const EpochStats& s) {
  char buf[512];
  std::string acc;
  if (s.has_train_acc) {
    std::snprintf(buf, sizeof buf, " train_acc=%.4f", s.train_acc);
    acc = buf;
  }
  std::snprintf(buf, sizeof buf,
                "epoch %d/%d: lr=%.4g train_loss=%.4f%s test_loss=%.4f test_acc=%.4f "
                "samples_per_s=%.0f step_ms=%.2f data_wait_s=%.2f world_size=%d time_s=%.1f",
                s.epoch, s.epochs, s.lr, s.train_loss, acc.c_str(), s.test_loss, s.test_acc,
                s.samples_per_s, s.step_ms, s.data_wait_s, s.world_size, s.time_s);
  return buf;
}

std::string final_line(double test_acc, double train_loss, double samples_per_s, double time_s) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "final: test_acc=%.4f train_loss=%.4f samples_per_s=%.0f time_s=%.1f",
                test_acc, train_loss, samples_per_s, time_s);
  return buf;
}

std::string model_line(const std::string& name, std::int64_t parameters, const std::string& what) {
  return "model: " + name + " (" + nn::model_summary(name) + "), " + std::to_string(parameters) +
         " " + what;
}

std::string batch_line(std::int64_t batch, int data_parallel, int world, std::int64_t samples,
                       std::int64_t steps, const std::string& note) {
  const bool replicas = data_parallel != world;  // tensor-parallel ranks share a batch
  const char* unit = replicas ? "replica" : "rank";
  std::string line = "batch: " + std::to_string(batch) + " per " + unit + ", global " +
                     std::to_string(batch * data_parallel) + " (" + std::to_string(data_parallel);
  if (replicas)
    line += " data-parallel replica(s); the " + std::to_string(world / data_parallel) +
            " ranks of a replica read the same batch)";
  else
    line += " rank(s))";
  line += "; " + std::to_string(samples) + " samples and " + std::to_string(steps) + " steps per " +
          unit + " per epoch";
  return note.empty() ? line : line + "; " + note;
}

std::string mib(double bytes, int decimals) {
  char text[48];
  std::snprintf(text, sizeof text, "%.*f MiB", decimals, bytes / (1024.0 * 1024.0));
  return text;
}

void MetricsWriter::open(const std::string& path) {
  MGPU_CHECK(!path.empty(), "--metrics: the path is empty");
  try {
    io::probe_writable(path);
  } catch (const std::exception& e) {
    MGPU_FAIL("--metrics: ", e.what(), " (does its folder exist, and may you write there?)");
  }
  path_ = path;
}

void MetricsWriter::write(const EpochStats& s, const MetricFields& extra) {
  if (!on()) return;
  nlohmann::json j{{"epoch", s.epoch},
                   {"lr", s.lr},
                   {"train_loss", s.train_loss},
                   {"test_loss", s.test_loss},
                   {"test_acc", s.test_acc},
                   {"samples_per_s", s.samples_per_s},
                   {"step_ms", s.step_ms},
                   {"data_wait_s", s.data_wait_s},
                   {"world_size", s.world_size},
                   {"global_batch", s.global_batch},
                   {"time_s", s.time_s}};
  if (s.has_train_acc) j["train_acc"] = s.train_acc;
  for (const auto& [key, value] : extra) {  // counts stay integers in the file
    const bool whole = std::floor(value) == value && std::fabs(value) < 9.0e15;
    if (whole) j[key] = static_cast<std::int64_t>(value);
    else j[key] = value;
  }
  text_ += j.dump() + "\n";
  try {  // a temporary file renamed over path_: the old complete file or the new one
    io::atomic_replace(io::parent_directory(path_), path_.substr(path_.find_last_of('/') + 1), text_);
  } catch (const std::exception& e) {
    MGPU_FAIL("--metrics: writing ", path_, " failed: ", e.what());
  }
}

}  // namespace mgpu::app
