// A step's phases: their sum and their mean over steps (step_phases itself is lesson 09's).
#include "mgpu/perf/time_cost.h"

namespace mgpu::perf {

double Phases::total() const {
  return data_wait + h2d + forward + backward + exposed_comm + optimizer + other;
}

Phases mean_phases(const std::vector<Phases>& steps) {
  Phases m;
  if (steps.empty()) return m;
  for (const Phases& p : steps) {
    m.data_wait += p.data_wait;
    m.h2d += p.h2d;
    m.forward += p.forward;
    m.backward += p.backward;
    m.exposed_comm += p.exposed_comm;
    m.optimizer += p.optimizer;
    m.other += p.other;
  }
  const double n = static_cast<double>(steps.size());
  for (double* v : {&m.data_wait, &m.h2d, &m.forward, &m.backward, &m.exposed_comm,
                    &m.optimizer, &m.other})
    *v /= n;
  return m;
}

}  // namespace mgpu::perf
