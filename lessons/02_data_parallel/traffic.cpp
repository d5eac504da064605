// Lesson 02: the byte counter behind the "everything goes through device 0" measurement.
#include "traffic.h"

#include <cstdio>
#include <sstream>

#include "mgpu/copy.h"

namespace mgpu::lesson02 {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::scatter: return "scatter";
    case Phase::broadcast: return "broadcast";
    case Phase::gather: return "gather";
    case Phase::grad_scatter: return "grad_scatter";
    case Phase::reduce: return "reduce";
  }
  return "?";
}

void Traffic::record(Phase phase, const Device& from, const Device& to, std::size_t bytes) {
  if (from == to || bytes == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  by_phase_[phase] += bytes;
  sent_[from.str()] += bytes;
  received_[to.str()] += bytes;
}

void Traffic::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  by_phase_.clear();
  sent_.clear();
  received_.clear();
}

std::size_t Traffic::bytes(Phase phase) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = by_phase_.find(phase);
  return it == by_phase_.end() ? 0 : it->second;
}

std::size_t Traffic::bytes_sent(const Device& d) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = sent_.find(d.str());
  return it == sent_.end() ? 0 : it->second;
}

std::size_t Traffic::bytes_received(const Device& d) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = received_.find(d.str());
  return it == received_.end() ? 0 : it->second;
}

std::size_t Traffic::bytes_through(const Device& d) const {
  return bytes_sent(d) + bytes_received(d);
}

std::size_t Traffic::total() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t sum = 0;
  for (const auto& kv : by_phase_) sum += kv.second;
  return sum;
}

std::string Traffic::report(const std::vector<Device>& devices) const {
  std::ostringstream os;
  os << "traffic by phase:";
  for (Phase p : {Phase::scatter, Phase::broadcast, Phase::gather, Phase::grad_scatter,
                  Phase::reduce})
    os << "  " << phase_name(p) << " " << format_bytes(bytes(p));
  os << "\ntraffic by device (sent / received):";
  for (const Device& d : devices)
    os << "  " << d.str() << " " << format_bytes(bytes_sent(d)) << " / "
       << format_bytes(bytes_received(d));
  return os.str();
}

Tensor counted_to(const Tensor& src, const Device& to, Phase phase, Traffic* traffic) {
  if (src.device() == to) return src;
  Tensor out = src.to(to);
  if (traffic) traffic->record(phase, src.device(), to, src.nbytes());
  return out;
}

void counted_copy(Tensor& dst, const Tensor& src, Phase phase, Traffic* traffic) {
  copy_(dst, src);
  if (traffic) traffic->record(phase, src.device(), dst.device(), src.nbytes());
}

std::string format_bytes(std::size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 3) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%zu B", bytes);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

}  // namespace mgpu::lesson02
