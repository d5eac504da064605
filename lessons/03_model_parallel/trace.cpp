// Drawing a measured step: a text timeline for the terminal and a Chrome trace for Perfetto.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <sstream>

#include "pipeline.h"

namespace mgpu::lesson03 {

std::string draw_timeline(const StepStats& stats, int num_stages, int width) {
  MGPU_CHECK(width >= 1, "draw_timeline: width must be positive");
  const double col = stats.span_us / width;
  std::ostringstream os;
  for (int k = 0; k < num_stages; ++k) {
    // How much of each column the stage spent in forwards and in backwards.
    std::vector<double> fwd(static_cast<std::size_t>(width), 0.0), bwd(fwd);
    for (const OpTiming& t : stats.ops) {
      if (t.stage != k || col <= 0) continue;
      const int c0 = std::max(0, static_cast<int>(t.start_us / col));
      const int c1 = std::min(width - 1, static_cast<int>(t.end_us / col));
      for (int c = c0; c <= c1; ++c) {
        const double overlap = std::min(t.end_us, (c + 1) * col) - std::max(t.start_us, c * col);
        if (overlap > 0) (t.op.kind == OpKind::forward ? fwd : bwd)[c] += overlap;
      }
    }
    os << "stage " << k << " |";
    for (int c = 0; c < width; ++c) {
      const double f = fwd[c], b = bwd[c];
      char ch = '.';
      if (f + b >= 0.5 * col) ch = f >= b ? 'F' : 'B';  // busy most of the column
      else if (f + b > 0) ch = f >= b ? 'f' : 'b';     // busy part of it
      os << ch;
    }
    os << "|  busy " << static_cast<int>(stats.busy_us[k] / 1000.0 + 0.5) << " ms, idle "
       << static_cast<int>(stats.idle_us[k] / 1000.0 + 0.5) << " ms\n";
  }
  return os.str();
}

std::string chrome_trace(const std::vector<StepStats>& steps, const std::vector<double>& offsets_us,
                         const std::vector<Device>& devices, const std::string& schedule_name) {
  MGPU_CHECK(steps.size() == offsets_us.size(), "chrome_trace: ", steps.size(), " steps but ",
             offsets_us.size(), " offsets");
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0},
                    {"args", {{"name", "pipeline (" + schedule_name + ")"}}}});
  for (std::size_t k = 0; k < devices.size(); ++k)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", k},
                      {"args", {{"name", "stage " + std::to_string(k) + " on " + devices[k].str()}}}});
  for (std::size_t i = 0; i < steps.size(); ++i)
    for (const OpTiming& t : steps[i].ops) {
      const bool fwd = t.op.kind == OpKind::forward;
      events.push_back({{"name", (fwd ? "F" : "B") + std::to_string(t.op.micro)},
                        {"cat", fwd ? "forward" : "backward"},
                        {"ph", "X"}, {"pid", 0}, {"tid", t.stage},
                        {"ts", offsets_us[i] + t.start_us}, {"dur", t.end_us - t.start_us},
                        {"args", {{"step", i}, {"micro_batch", t.op.micro}}}});
    }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
}

}  // namespace mgpu::lesson03
