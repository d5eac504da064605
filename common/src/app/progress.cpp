// The progress line (see progress.h).
#include "mgpu/app/progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "mgpu/app/clock.h"
#include "mgpu/dist/runtime.h"

namespace mgpu::app {

ProgressLine::ProgressLine() {
  const char* wanted = std::getenv("MGPU_PROGRESS");
  const bool under_mpirun = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE");
  shown_ = dist::rank() == 0 && isatty(fileno(stdout)) != 0 &&
           (wanted ? std::strcmp(wanted, "0") != 0 : !under_mpirun);
}

void ProgressLine::start_epoch(int epoch, int epochs, std::int64_t steps) {
  epoch_ = epoch;
  epochs_ = epochs;
  steps_ = steps;
  last_draw_s_ = 0;
}

void ProgressLine::update(std::int64_t step, double loss, double samples_per_s, double eta_s) {
  if (!shown_ || now_s() - last_draw_s_ < 0.25) return;
  last_draw_s_ = now_s();
  const long long eta = static_cast<long long>(eta_s + 0.5);
  std::printf("\repoch %d/%d  step %lld/%lld  loss %.4f  %.0f samples/s  ETA %lldm%02llds ",
              epoch_ + 1, epochs_, static_cast<long long>(step), static_cast<long long>(steps_),
              loss, samples_per_s, eta / 60, eta % 60);
  std::fflush(stdout);
  drawn_ = true;
}

void ProgressLine::clear() {
  if (!drawn_) return;
  std::printf("\r%*s\r", 79, "");
  std::fflush(stdout);
  drawn_ = false;
}

}  // namespace mgpu::app
