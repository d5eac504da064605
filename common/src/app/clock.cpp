// The programs' clock (see clock.h).
#include "mgpu/app/clock.h"

#include <chrono>

namespace mgpu::app {

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace mgpu::app
