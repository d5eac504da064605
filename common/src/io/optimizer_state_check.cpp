// Step counts and second moments of a loaded optimizer state (optimizer_state_check.h).
#include "mgpu/io/optimizer_state_check.h"

#include <cmath>
#include <vector>

namespace mgpu::io {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

void check_optimizer_state(const TensorDict& state, std::int64_t max_step, const std::string& section,
                           const std::string& source) {
  for (const auto& [name, t] : state) {
    if (!t.defined()) continue;
    if (ends_with(name, ".step")) {
      MGPU_CHECK(t.numel() == 1, source, ": tensor '", section, name, "' is ", t.str(),
                 ", expected one step count");
      const double step = t.to(Device::cpu()).to(DType::f64).to_vector<double>()[0];
      const bool ok = step >= 1 && step == std::floor(step) && (max_step < 0 || step <= static_cast<double>(max_step));
      MGPU_CHECK(ok, source, ": tensor '", section, name, "' is ", step, ": an optimizer step count is a whole "
                 "number from 1 (a parameter with moments has stepped) to ",
                 max_step < 0 ? std::string("the run's steps") : "the checkpoint's " + std::to_string(max_step) + " steps",
                 "; the file was edited or written by another tool; resume from another checkpoint");
    } else if (ends_with(name, ".exp_avg_sq") && is_floating(t.dtype()) && t.numel() > 0) {
      const std::vector<double> v = t.to(Device::cpu()).to(DType::f64).to_vector<double>();
      std::int64_t bad = 0, first = -1;
      for (std::size_t i = 0; i < v.size(); ++i)
        if (v[i] < 0) {
          if (first < 0) first = static_cast<std::int64_t>(i);
          ++bad;
        }
      MGPU_CHECK(bad == 0, source, ": tensor '", section, name, "' holds ", bad, " negative value(s) (the "
                 "first, ", first < 0 ? 0.0 : v[static_cast<std::size_t>(first)], ", at flat index ", first,
                 "): a running mean of squared gradients is never negative; the file was edited or "
                 "written by another tool; resume from another checkpoint");
    }
  }
}

}  // namespace mgpu::io
