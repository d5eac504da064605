// Drawing a measured step: a text timeline for the terminal, spans for the trace (Perfetto).
#include <algorithm>
#include <sstream>

#include "mgpu/app/trace.h"
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
        if (overlap > 0) (t.op.pass == Pass::forward ? fwd : bwd)[c] += overlap;
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

void trace_step(app::Trace& trace, const StepStats& stats, double step_start_s,
                const std::vector<Device>& devices, std::int64_t step) {
  for (const OpTiming& t : stats.ops) {
    const std::string track = "stage " + std::to_string(t.stage) + " on " +
                              devices.at(static_cast<std::size_t>(t.stage)).str();
    const bool fwd = t.op.pass == Pass::forward;
    trace.span(track, (fwd ? "F" : "B") + std::to_string(t.op.micro),
               step_start_s + t.start_us * 1e-6, step_start_s + t.end_us * 1e-6,
               {{"step", static_cast<double>(step)}, {"micro_batch", static_cast<double>(t.op.micro)}});
  }
}

}  // namespace mgpu::lesson03
